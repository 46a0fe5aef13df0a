package nexmark

import (
	"math/bits"
	"strconv"
	"sync"
)

// The reference's constant lists (PersonGenerator, BidGenerator).
var (
	usStates   = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities   = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstNames = []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames  = []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	hotChannel = []string{"Google", "Facebook", "Baidu", "Apple"}
)

const (
	// numChannels is the number of channels besides the hot ones.
	numChannels = 10_000
	// extraTableLen is the length of the string the extra fields are cut
	// from (the reference's REUSABLE_EXTRA_STRING).
	extraTableLen = 1 << 20
	// urlSeed seeds the java.util.Random that makes the channels' URLs
	// (the reference: an unseeded SplittableRandom).
	urlSeed = 1
	// extraSeed seeds the java.util.Random that makes the extra table
	// (the reference: an unseeded SplittableRandom).
	extraSeed = 2
)

// tables are what the reference computes once per process: the strings
// events pick from, boxed once so that picking one allocates nothing.
type tables struct {
	// names are "first last" for first*len(lastNames)+last.
	names []any
	// cities and states box usCities and usStates.
	cities, states []any
	// hotChannels and hotURLs are the hot channels and their URLs.
	hotChannels, hotURLs []any
	// channels and channelURLs are "channel-i" and its URL.
	channels, channelURLs []any
	// extra is the string the extra fields are cut from.
	extra string
}

// sharedTables builds the tables on first use (a few milliseconds).
var sharedTables = sync.OnceValue(newTables)

func newTables() *tables {
	t := &tables{
		cities: boxAll(usCities), states: boxAll(usStates),
		hotChannels: boxAll(hotChannel),
	}
	for _, f := range firstNames {
		for _, l := range lastNames {
			t.names = append(t.names, f+" "+l)
		}
	}
	// BidGenerator's static initialisation: the four hot URLs, then the
	// channels' URLs in order, all from one generator.
	var r javaRandom
	r.setSeed(urlSeed)
	for range hotChannel {
		t.hotURLs = append(t.hotURLs, baseURL(&r))
	}
	t.channels = make([]any, numChannels)
	t.channelURLs = make([]any, numChannels)
	for i := range numChannels {
		url := baseURL(&r)
		if r.nextInt(10) > 0 {
			url += "&channel_id=" + strconv.Itoa(int(abs32(int32(bits.Reverse32(uint32(i))))))
		}
		t.channels[i] = "channel-" + strconv.Itoa(i)
		t.channelURLs[i] = url
	}
	r.setSeed(extraSeed)
	t.extra = exactString(&r, extraTableLen)
	return t
}

func boxAll(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// abs32 is Java's Math.abs(int): the smallest int stays negative.
func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// baseURL is the reference's BidGenerator.getBaseUrl.
func baseURL(r *javaRandom) string {
	b := []byte("https://www.nexmark.com/")
	for range 3 {
		b = appendString(b, r, 5, '_')
		b = append(b, '/')
	}
	return string(append(b, "item.htm?query=1"...))
}

// exactString is the reference's StringsGenerator.nextExactString as it
// makes the extra table: six characters from each nextInt(), 'a' plus
// Java's remainder by 26, which is negative for a negative int (so the
// characters run from 'H' to 'z').
func exactString(r *javaRandom, n int) string {
	b := make([]byte, n)
	var rnd, left int32
	for i := range b {
		if left == 0 {
			rnd, left = r.nextInt32(), 6
		}
		b[i] = byte('a' + rnd%26)
		rnd /= 26
		left--
	}
	return string(b)
}

// minStringLength is the reference's shortest random string.
const minStringLength = 3

// appendString appends the reference's StringsGenerator.nextString(random,
// maxLength, special): 3 to maxLength-1 characters, each special with
// probability 1/13, else a letter; then Java's String.trim (characters up
// to ' ' off both ends).
func appendString(b []byte, r *javaRandom, maxLength int32, special byte) []byte {
	start := len(b)
	for n := minStringLength + r.nextInt(maxLength-minStringLength); n > 0; n-- {
		if r.nextInt(13) == 0 {
			b = append(b, special)
		} else {
			b = append(b, byte('a'+r.nextInt(26)))
		}
	}
	s := b[start:]
	lo, hi := 0, len(s)
	for lo < hi && s[lo] <= ' ' {
		lo++
	}
	for hi > lo && s[hi-1] <= ' ' {
		hi--
	}
	n := copy(s, s[lo:hi])
	return b[:start+n]
}

package nexmark

import "math"

// Event types: the values of event_type.
const (
	TypePerson  = 0
	TypeAuction = 1
	TypeBid     = 2
)

// The reference's constants (GeneratorConfig, NexmarkConfiguration and the
// model generators).
const (
	// firstEventID and firstEventNumber are those Flink's source gives
	// the generator: event n has number n+1 and id n+2.
	firstEventID     = 1
	firstEventNumber = 1
	firstPersonID    = 1000
	firstAuctionID   = 1000
	firstCategoryID  = 10
	numCategories    = 5
	// personIDLead and auctionIDLead are the ids beyond the last one that
	// a bid or auction may refer to.
	personIDLead  = 10
	auctionIDLead = 10
	// hotBatch is the reference's HOT_SELLER_RATIO, HOT_AUCTION_RATIO and
	// HOT_BIDDER_RATIO: a hot id is the first (a bidder: the second) of
	// its batch of 100.
	hotBatch            = 100
	hotChannelsRatio    = 2
	numInFlightAuctions = 100
	numActivePeople     = 1000
	avgPersonByteSize   = 200
	avgAuctionByteSize  = 500
	avgBidByteSize      = 100
)

// Generator makes the events of one configuration, each from its number
// alone. It is not safe for concurrent use: each subtask has its own.
type Generator struct {
	person, auction, total             int64 // proportions
	hotAuction, hotSellers, hotBidders int32
	delayUs                            float64 // between two events
	baseTime                           int64
	rng                                javaRandom
	buf                                []byte
	t                                  *tables
	// The last time, hot auction and hot bidder boxed: consecutive events
	// share them (ten events per ms at the default rate, a hot auction
	// for 1666 events), so that boxing them allocates seldom.
	timeBox, hotAuctionBox, hotBidderBox boxed
}

// boxed is an int64 boxed once for as long as it repeats.
type boxed struct {
	v int64
	a any
}

// box returns v as an any, the one it returned before if v did not change.
func (b *boxed) box(v int64) any {
	if b.a == nil || b.v != v {
		b.v, b.a = v, v
	}
	return b.a
}

// NewGenerator returns a generator of cfg's events from baseTime (epoch
// ms); cfg must be valid.
func NewGenerator(cfg *Config, baseTime int64) *Generator {
	return &Generator{
		person: int64(cfg.PersonProportion), auction: int64(cfg.AuctionProportion),
		total:      int64(cfg.PersonProportion + cfg.AuctionProportion + cfg.BidProportion),
		hotAuction: int32(cfg.HotAuctionRatio), hotSellers: int32(cfg.HotSellersRatio), hotBidders: int32(cfg.HotBiddersRatio),
		delayUs:  1_000_000.0 / cfg.Rate,
		baseTime: baseTime,
		t:        sharedTables(),
	}
}

// timestamp is the reference's timestampForEvent: the base time plus the
// event number times the inter-event delay, truncated to µs, then to ms.
func (g *Generator) timestamp(number int64) int64 {
	return g.baseTime + int64(float64(number)*g.delayUs)/1000
}

// Event returns the fields of event n (0-based): the reference's
// NexmarkGenerator.nextEvent for the generator that emitted n events,
// with its java.util.Random seeded with the event id.
func (g *Generator) Event(n int64) map[string]any {
	number := firstEventNumber + n
	id := firstEventID + number
	ts := g.timeBox.box(g.timestamp(number))
	g.rng.setSeed(id)
	var typ int64
	var person, auction, bid any
	switch rem := id % g.total; {
	case rem < g.person:
		typ, person = TypePerson, g.newPerson(id, ts)
	case rem < g.person+g.auction:
		typ, auction = TypeAuction, g.newAuction(id, number, ts)
	default:
		typ, bid = TypeBid, g.newBid(id, ts)
	}
	return map[string]any{"event_type": typ, "person": person, "auction": auction, "bid": bid, "date_time": ts}
}

// newPerson is PersonGenerator.nextPerson.
func (g *Generator) newPerson(id int64, ts any) map[string]any {
	r := &g.rng
	name := g.t.names[int(r.nextInt(int32(len(firstNames))))*len(lastNames)+int(r.nextInt(int32(len(lastNames))))]
	b := appendString(g.buf[:0], r, 7, ' ')
	b = append(b, '@')
	b = appendString(b, r, 5, ' ')
	b = append(b, ".com"...)
	email := string(b)
	b = b[:0]
	for i := range 4 {
		if i > 0 {
			b = append(b, ' ')
		}
		b = appendDigits4(b, r.nextInt(10000))
	}
	card := string(b)
	g.buf = b
	city := g.t.cities[r.nextInt(int32(len(usCities)))]
	state := g.t.states[r.nextInt(int32(len(usStates)))]
	size := 8 + len(name.(string)) + len(email) + len(card) + len(city.(string)) + len(state.(string))
	return map[string]any{
		"id":            g.lastBase0PersonID(id) + firstPersonID,
		"name":          name,
		"email_address": email,
		"credit_card":   card,
		"city":          city,
		"state":         state,
		"date_time":     ts,
		"extra":         g.extra(size, avgPersonByteSize),
	}
}

// appendDigits4 appends v (0 to 9999) as four digits: String.format("%04d").
func appendDigits4(b []byte, v int32) []byte {
	return append(b, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}

// newAuction is AuctionGenerator.nextAuction; number is the event's.
func (g *Generator) newAuction(id, number int64, ts any) map[string]any {
	r := &g.rng
	var seller int64
	if r.nextInt(g.hotSellers) > 0 {
		seller = g.lastBase0PersonID(id) / hotBatch * hotBatch
	} else {
		seller = g.nextBase0PersonID(id)
	}
	category := firstCategoryID + int64(r.nextInt(numCategories))
	initialBid := g.nextPrice()
	expires := ts.(int64) + g.nextAuctionLengthMs(number, ts.(int64))
	b := appendString(g.buf[:0], r, 20, ' ')
	name := string(b)
	b = appendString(b[:0], r, 100, ' ')
	desc := string(b)
	g.buf = b
	reserve := initialBid + g.nextPrice()
	size := 8 + len(name) + len(desc) + 8 + 8 + 8 + 8 + 8
	return map[string]any{
		"id":          g.lastBase0AuctionID(id) + firstAuctionID,
		"item_name":   name,
		"description": desc,
		"initial_bid": initialBid,
		"reserve":     reserve,
		"date_time":   ts,
		"expires":     expires,
		"seller":      seller + firstPersonID,
		"category":    category,
		"extra":       g.extra(size, avgAuctionByteSize),
	}
}

// newBid is BidGenerator.nextBid, with its bidder offset by
// FIRST_PERSON_ID twice (a bidder is the person's id plus 1000).
func (g *Generator) newBid(id int64, ts any) map[string]any {
	r := &g.rng
	var auction, bidder any
	if r.nextInt(g.hotAuction) > 0 {
		auction = g.hotAuctionBox.box(g.lastBase0AuctionID(id)/hotBatch*hotBatch + firstAuctionID)
	} else {
		auction = g.nextBase0AuctionID(id) + firstAuctionID
	}
	if r.nextInt(g.hotBidders) > 0 {
		bidder = g.hotBidderBox.box(g.lastBase0PersonID(id)/hotBatch*hotBatch + 1 + 2*firstPersonID)
	} else {
		bidder = g.nextBase0PersonID(id) + 2*firstPersonID
	}
	price := g.nextPrice()
	var channel, url any
	if r.nextInt(hotChannelsRatio) > 0 {
		i := r.nextInt(int32(len(hotChannel)))
		channel, url = g.t.hotChannels[i], g.t.hotURLs[i]
	} else {
		i := r.nextInt(numChannels)
		channel, url = g.t.channels[i], g.t.channelURLs[i]
	}
	return map[string]any{
		"auction":   auction,
		"bidder":    bidder,
		"price":     price,
		"channel":   channel,
		"url":       url,
		"date_time": ts,
		"extra":     g.extra(8+8+8+8, avgBidByteSize),
	}
}

// lastBase0PersonID is the id (from 0) of the last person generated at or
// before event id.
func (g *Generator) lastBase0PersonID(id int64) int64 {
	epoch, offset := id/g.total, id%g.total
	if offset >= g.person {
		offset = g.person - 1
	}
	return epoch*g.person + offset
}

// lastBase0AuctionID is the id (from 0) of the last auction generated at
// or before event id.
func (g *Generator) lastBase0AuctionID(id int64) int64 {
	epoch, offset := id/g.total, id%g.total
	switch {
	case offset < g.person:
		epoch--
		offset = g.auction - 1
	case offset >= g.person+g.auction:
		offset = g.auction - 1
	default:
		offset -= g.person
	}
	return epoch*g.auction + offset
}

// nextBase0PersonID draws one of the active people, or a few ahead.
func (g *Generator) nextBase0PersonID(id int64) int64 {
	people := g.lastBase0PersonID(id) + 1
	active := min(people, numActivePeople)
	return people - active + g.rng.nextLongN(active+personIDLead)
}

// nextBase0AuctionID draws one of the auctions likely in flight, or a few
// ahead.
func (g *Generator) nextBase0AuctionID(id int64) int64 {
	last := g.lastBase0AuctionID(id)
	first := max(last-numInFlightAuctions, 0)
	return first + g.rng.nextLongN(last-first+1+auctionIDLead)
}

// nextAuctionLengthMs draws an auction's length: on average the time until
// numInFlightAuctions more auctions are generated.
func (g *Generator) nextAuctionLengthMs(number, ts int64) int64 {
	events := numInFlightAuctions * g.total / g.auction
	horizon := g.timestamp(number+events) - ts
	return 1 + g.rng.nextLongN(max(horizon*2, 1))
}

// nextPrice is PriceGenerator.nextPrice: 10^(6 × nextDouble) × 100,
// rounded (Java's Math.round is half up; half away from zero is the same
// for positive numbers).
func (g *Generator) nextPrice() int64 {
	return int64(math.Round(pow10(g.rng.nextDouble()*6) * 100))
}

// pow10 is math.Pow(10, y) for 0 <= y < 6, bit for bit, with the parts
// that depend on y's integer part done once (pow10Steps): Pow's special
// cases (y = 0.5, which 6 × nextDouble never is, infinities, NaN) are not
// there. It halves the price's cost, a tenth of an event's.
func pow10(y float64) float64 {
	yi, yf := math.Modf(y)
	a := 1.0
	if yf != 0 {
		if yf > 0.5 {
			yf--
			yi++
		}
		a = math.Exp(yf * ln10)
	}
	s := &pow10Steps[int(yi)]
	for _, f := range s.factors {
		a *= f
	}
	return a * s.scale
}

// ln10 is math.Log(10), which math.Pow(10, y) computes each time.
var ln10 = math.Log(10)

// pow10Step is what math.Pow multiplies its fractional power by for one
// integer part: the mantissas of the squarings of 10 at the part's set
// bits, in Pow's order, and the power of two of their exponents.
type pow10Step struct {
	factors []float64
	scale   float64
}

// pow10Steps are the steps of the integer parts 0 to 6 (Pow rounds a
// fraction above 0.5 up to the next integer).
var pow10Steps = func() (steps [7]pow10Step) {
	for k := range steps {
		x, xe := math.Frexp(10)
		ae := 0
		for i := k; i != 0; i >>= 1 {
			if i&1 == 1 {
				steps[k].factors = append(steps[k].factors, x)
				ae += xe
			}
			x *= x
			xe <<= 1
			if x < .5 {
				x += x
				xe--
			}
		}
		steps[k].scale = math.Ldexp(1, ae)
	}
	return steps
}()

// extra is StringsGenerator.nextExtra: a string that brings size to avg
// on average (±20%, uniform), cut from the extra table.
func (g *Generator) extra(size, avg int) string {
	if size > avg {
		return ""
	}
	avg -= size
	delta := int32(math.Round(float64(avg) * 0.2))
	n := int32(avg) - delta
	if delta != 0 {
		n += g.rng.nextInt(2 * delta)
	}
	offset := g.rng.nextInt(extraTableLen - n)
	return g.t.extra[offset : offset+n]
}

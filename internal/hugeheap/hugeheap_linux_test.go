package hugeheap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/eddy-stream/eddy/internal/cputime"
)

// childEnv makes the test binary a child process with a fresh heap:
// "reserve" calls Reserve and then allocates, "plain" only allocates,
// "limited" sets a finite RLIMIT_AS first, "twice" reserves, uses the
// heap and reserves again (see child).
const childEnv = "EDDY_HUGEHEAP_CHILD"

const (
	reserveBytes = 512 << 20
	touchBytes   = 128 << 20
)

func TestMain(m *testing.M) {
	if how := os.Getenv(childEnv); how != "" {
		os.Exit(child(how))
	}
	os.Exit(m.Run())
}

// child allocates touchBytes in 1 KiB objects, writes each, and prints
// the process's AnonHugePages in KiB and what Reserve said ("twice"
// prints the page faults of its second call instead).
func child(how string) int {
	var r Result
	switch how {
	case "limited":
		// A limit far above what the child maps: only its being finite
		// counts.
		var l unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_AS, &l); err != nil {
			fmt.Println(err)
			return 1
		}
		l.Cur = min(l.Max, 1<<44)
		if err := unix.Setrlimit(unix.RLIMIT_AS, &l); err != nil {
			fmt.Println(err)
			return 1
		}
		fallthrough
	case "reserve":
		r = Reserve(reserveBytes)
	case "twice":
		r = Reserve(reserveBytes)
		// Use some of the range, as a pipeline would, and free it.
		runtime.KeepAlive(touch())
		runtime.GC()
		// Report the page faults of the second call instead of huge
		// pages: clearing the range again would fault in every page.
		before := cputime.ProcessUsage()
		if again := Reserve(reserveBytes); again != r {
			fmt.Printf("second Reserve: %+v, first %+v\n", again, r)
			return 1
		}
		fmt.Printf("%d %d %q\n", cputime.ProcessUsage().Sub(before).MinorFaults, r.Advised, r.Why)
		return 0
	}
	keep := touch()
	kb, err := anonHugeKB()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	runtime.KeepAlive(keep)
	fmt.Printf("%d %d %q\n", kb, r.Advised, r.Why)
	return 0
}

// touch allocates touchBytes in 1 KiB objects and writes each.
func touch() [][]byte {
	objs := make([][]byte, 0, touchBytes>>10)
	for range touchBytes >> 10 {
		b := make([]byte, 1<<10)
		b[0] = 1
		objs = append(objs, b)
	}
	return objs
}

func anonHugeKB() (int64, error) { return procKB("/proc/self/smaps_rollup", "AnonHugePages:") }

// procKB reads a "Field: N kB" line of a /proc file.
func procKB(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}

func runChild(t *testing.T, how string) (hugeKB, advised int64, why string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"="+how, "GOGC=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", how, err, out)
	}
	line := string(bytes.TrimSpace(out))
	if _, err := fmt.Sscanf(line, "%d %d %q", &hugeKB, &advised, &why); err != nil {
		t.Fatalf("child %s printed %q: %v", how, line, err)
	}
	return hugeKB, advised, why
}

// TestReserveBacksHeapWithHugePages: where the THP mode is madvise, a heap
// allocated after Reserve lies in huge pages and one allocated without it
// does not; elsewhere Reserve advises nothing and says why.
func TestReserveBacksHeapWithHugePages(t *testing.T) {
	m := Mode()
	plain, _, _ := runChild(t, "plain")
	reserved, advised, why := runChild(t, "reserve")
	t.Logf("THP mode %q: AnonHugePages %d KiB plain, %d KiB after Reserve (advised %d bytes, %q)", m, plain, reserved, advised, why)
	if m != "madvise" || strictOvercommit() || limitedAddressSpace() || raceEnabled {
		if advised != 0 || why == "" {
			t.Fatalf("mode %q: advised %d bytes, why %q; want 0 and a reason", m, advised, why)
		}
		return
	}
	if advised < reserveBytes-4*int64(hugePageSize()) || advised > reserveBytes {
		t.Fatalf("advised %d bytes of %d", advised, reserveBytes)
	}
	if plain != 0 {
		t.Fatalf("without Reserve the heap has %d KiB of huge pages in mode madvise", plain)
	}
	// Most of what was touched: the runtime also places the first objects
	// in memory it mapped before Reserve ran.
	if reserved < touchBytes/2>>10 {
		t.Fatalf("after Reserve %d KiB of huge pages, want at least %d KiB", reserved, touchBytes/2>>10)
	}
}

func TestSelected(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never":   "always",
		"always madvise [never]":   "never",
		"":                         "",
		"always [madvise":          "",
	} {
		if got := selected([]byte(in)); got != want {
			t.Errorf("selected(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReserveRefusesSmall(t *testing.T) {
	r := Reserve(int64(hugePageSize()))
	if r.Advised != 0 || r.Why == "" {
		t.Fatalf("Reserve of one huge page: %+v; want nothing advised and a reason", r)
	}
}

// TestReserveLeavesLimitedAddressSpaceAlone: with a finite ulimit -v the
// runtime could die of a refused mapping, so Reserve maps nothing.
func TestReserveLeavesLimitedAddressSpaceAlone(t *testing.T) {
	huge, advised, why := runChild(t, "limited")
	if advised != 0 || !strings.Contains(why, "ulimit") {
		t.Fatalf("under a finite RLIMIT_AS: advised %d bytes, why %q", advised, why)
	}
	if Mode() == "madvise" && huge != 0 {
		t.Fatalf("under a finite RLIMIT_AS the heap has %d KiB of huge pages", huge)
	}
}

// TestReserveOnce: a second Reserve returns the first one's result and
// touches nothing. The runtime clears a range it hands out again, so a
// second reservation after the heap has used the first would fault in
// every page of it.
func TestReserveOnce(t *testing.T) {
	faults, advised, why := runChild(t, "twice")
	t.Logf("%d page faults in the second call (advised %d bytes, %q)", faults, advised, why)
	if faults > 64 {
		t.Fatalf("%d page faults in a second call of Reserve(%d MiB)", faults, reserveBytes>>20)
	}
}

package statestore

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
)

// Timer is a timer of one (key, namespace): a window operator registers one
// per window at window end - 1 with the window as namespace.
type Timer struct {
	Key       string
	Namespace string
	Timestamp int64 // epoch ms
}

// Domain is the time a timer follows. Its numeric value is part of the
// snapshot format.
type Domain uint8

// The timer domains.
const (
	EventTime      Domain = 0 // fires when the watermark reaches the timestamp
	ProcessingTime Domain = 1 // fires when the wall clock reaches it
)

func (d Domain) String() string {
	switch d {
	case EventTime:
		return "event-time"
	case ProcessingTime:
		return "processing-time"
	}
	return fmt.Sprintf("domain(%d)", uint8(d))
}

// TimerService holds the event-time and processing-time timers of one
// operator subtask, as part of its backend's snapshotted state. A timer is
// identified by (key, namespace, timestamp) per domain: registering it again
// does nothing, deleting an absent one does nothing. Timers fire in
// timestamp order, ties in a fixed order so that a run is
// deterministic: the registration order (after a Restore, the order of the
// snapshot format: key group, timestamp, key, namespace).
//
// Like the backend, a TimerService is used from the task goroutine only.
type TimerService struct {
	name   string
	m      *Memory
	wm     int64
	queues [2]timerQueue // by Domain
	// freezes counts the snapshots taken; changed[gi] is what it was at the
	// last change to the timers of group index gi. cache holds the
	// encodings of groups' timers that snapshots wrote, which a later
	// snapshot reuses for a group whose timers have not changed since (nil:
	// no cache).
	freezes uint64
	changed []uint64
	cache   *timerCache
}

func newTimerService(name string, m *Memory) *TimerService {
	s := &TimerService{name: name, m: m, wm: math.MinInt64,
		queues: [2]timerQueue{{set: map[timerID]int32{}}, {set: map[timerID]int32{}}}}
	if !m.noTimerCache {
		s.cache = &timerCache{}
	}
	return s
}

// touch records a change to the timers of group index gi.
func (s *TimerService) touch(gi int32) {
	if int(gi) >= len(s.changed) {
		s.changed = append(s.changed, make([]uint64, int(gi)+1-len(s.changed))...)
	}
	s.changed[gi] = s.freezes
}

// Name returns the service's name.
func (s *TimerService) Name() string { return s.name }

// Watermark returns the highest watermark AdvanceWatermark has seen
// (math.MinInt64 before the first).
func (s *TimerService) Watermark() int64 { return s.wm }

// Len returns the number of timers of domain d.
func (s *TimerService) Len(d Domain) int {
	if d > ProcessingTime {
		return 0
	}
	return len(s.queues[d].heap)
}

// Timers yields the timers of domain d in unspecified order, for inspection
// and tests. The body must not register or delete timers.
func (s *TimerService) Timers(d Domain) iter.Seq[Timer] {
	return func(yield func(Timer) bool) {
		if d > ProcessingTime {
			return
		}
		q := &s.queues[d]
		for _, h := range q.heap {
			id := q.rec(h.rec).id
			if !yield(Timer{Key: id.key, Namespace: id.ns, Timestamp: id.ts}) {
				return
			}
		}
	}
}

// RegisterEventTimer registers an event-time timer. One with ts <= the
// watermark fires at the next AdvanceWatermark (or later in the current one,
// when registered from a firing timer).
func (s *TimerService) RegisterEventTimer(key, ns string, ts int64) {
	s.register(EventTime, key, ns, ts)
}

// DeleteEventTimer deletes an event-time timer, if registered.
func (s *TimerService) DeleteEventTimer(key, ns string, ts int64) {
	s.delete(EventTime, timerID{key, ns, ts})
}

// RegisterProcessingTimer registers a processing-time timer.
func (s *TimerService) RegisterProcessingTimer(key, ns string, ts int64) {
	s.register(ProcessingTime, key, ns, ts)
}

// DeleteProcessingTimer deletes a processing-time timer, if registered.
func (s *TimerService) DeleteProcessingTimer(key, ns string, ts int64) {
	s.delete(ProcessingTime, timerID{key, ns, ts})
}

func (s *TimerService) delete(d Domain, id timerID) {
	if gi, ok := s.queues[d].delete(id); ok {
		s.touch(gi)
	}
}

// NextEventTime returns the timestamp of the earliest event-time timer.
func (s *TimerService) NextEventTime() (int64, bool) {
	return s.queues[EventTime].peek()
}

// NextProcessingTime returns the timestamp of the earliest processing-time
// timer, for the task to schedule its next wake-up.
func (s *TimerService) NextProcessingTime() (int64, bool) {
	return s.queues[ProcessingTime].peek()
}

// AdvanceWatermark moves the watermark to wm (never backwards) and fires,
// one at a time in timestamp order, every event-time timer with timestamp <=
// the watermark, including those that fire registers meanwhile (as Flink
// does). A timer is deleted before fire gets it. An error from fire stops
// the advance and is returned; the timers not fired yet stay registered.
func (s *TimerService) AdvanceWatermark(wm int64, fire func(Timer) error) error {
	s.wm = max(s.wm, wm)
	return s.advance(EventTime, s.wm, fire)
}

// AdvanceProcessingTime fires every processing-time timer with timestamp <=
// now, like AdvanceWatermark.
func (s *TimerService) AdvanceProcessingTime(now int64, fire func(Timer) error) error {
	return s.advance(ProcessingTime, now, fire)
}

func (s *TimerService) advance(d Domain, upTo int64, fire func(Timer) error) error {
	q := &s.queues[d]
	for len(q.heap) > 0 && q.heap[0].ts <= upTo {
		t, gi := q.pop()
		s.touch(gi)
		if err := fire(t); err != nil {
			return fmt.Errorf("fire %s timer of %q at %d: %w", d, s.name, t.Timestamp, err)
		}
	}
	return nil
}

func (s *TimerService) register(d Domain, key, ns string, ts int64) {
	q := &s.queues[d]
	id := timerID{key, ns, ts}
	if _, ok := q.set[id]; ok {
		return
	}
	gi := s.m.index(key)
	if gi < 0 {
		return
	}
	q.push(id, int32(gi))
	s.touch(int32(gi))
}

// restoreTimers registers the timers of a restore's decoded blobs. Each
// queue gets room for all of them first, so that it grows once: grown
// timer by timer, its map moves every timer again at each doubling.
func (m *Memory) restoreTimers(decoded []decodedBlob) {
	counts := map[string]*[2]int{} // by service, then domain
	for _, d := range decoded {
		for _, wt := range d.p.Timers {
			c := counts[wt.Name]
			if c == nil {
				c = new([2]int)
				counts[wt.Name] = c
			}
			for _, t := range wt.Timers {
				c[t.Domain]++ // decodeBlob checked the domain
			}
		}
	}
	for name, c := range counts {
		svc := m.TimerService(name)
		for d := range svc.queues {
			svc.queues[d].reserve(c[d])
		}
	}
	for _, d := range decoded {
		for _, wt := range d.p.Timers {
			svc := m.TimerService(wt.Name)
			for _, t := range wt.Timers {
				svc.register(t.Domain, t.Key, t.NS, t.TS)
			}
		}
	}
}

// freeze captures the timers for a snapshot: the chunks of records, which
// the queue copies before it next writes one (O(timers / recChunk)).
func (s *TimerService) freeze() frozenTimers {
	s.freezes++
	f := frozenTimers{name: s.name, snap: s.freezes, changed: slices.Clone(s.changed), cache: s.cache}
	for d := range s.queues {
		q := &s.queues[d]
		f.n += len(q.heap)
		if len(q.heap) > 0 {
			// The chunks in use: a queue that emptied keeps the chunks it
			// had, past nrecs.
			used := (q.nrecs + recChunk - 1) / recChunk
			f.queues[d] = frozenQueue{chunks: slices.Clone(q.chunks[:used]), n: q.nrecs}
			q.gen++
		}
	}
	return f
}

type timerID struct {
	key, ns string
	ts      int64
}

// timerRec is a registered timer; records live in chunks, reused through a
// free list, which snapshots share until the queue writes them (copy on
// write, a chunk at a time). A record's place in the heap is kept apart
// (timerQueue.pos), so that the heap's moves do not write the records.
type timerRec struct {
	id    timerID
	group int32 // key group index (key group - start); -1: free
}

// recChunk is the number of records of a chunk.
const recChunk = 1024

// heapEntry orders the heap without touching the records: by timestamp,
// then by registration order (seq), so ties fire first-registered first.
type heapEntry struct {
	ts  int64
	seq uint64
	rec int32 // index in recs
}

func (a heapEntry) less(b heapEntry) bool {
	return a.ts < b.ts || (a.ts == b.ts && a.seq < b.seq)
}

// timerQueue is a binary min-heap of timers plus a set for deduplication and
// deletion in O(log n).
type timerQueue struct {
	// chunks hold the records: record ri is chunks[ri/recChunk][ri%recChunk],
	// for ri < nrecs. A chunk whose stamp is below gen may be shared with a
	// snapshot (freeze bumps gen) and is copied before it is written.
	chunks [][]timerRec
	stamp  []uint64 // by chunk
	gen    uint64
	nrecs  int
	pos    []int32 // by record: its index in heap
	free   []int32
	heap   []heapEntry
	set    map[timerID]int32 // -> record
	seq    uint64
}

// rec returns record ri for reading.
func (q *timerQueue) rec(ri int32) *timerRec {
	return &q.chunks[ri/recChunk][ri%recChunk]
}

// writable returns record ri for writing, its chunk copied first if a
// snapshot may share it.
func (q *timerQueue) writable(ri int32) *timerRec {
	c := ri / recChunk
	if q.stamp[c] < q.gen {
		q.chunks[c] = slices.Clone(q.chunks[c])
		q.stamp[c] = q.gen
	}
	return &q.chunks[c][ri%recChunk]
}

func (q *timerQueue) peek() (int64, bool) {
	if len(q.heap) == 0 {
		return 0, false
	}
	return q.heap[0].ts, true
}

// reserve makes room for n more timers. Only an empty queue's map is
// made anew with room for them (a restore into a fresh backend); growing
// a map that holds timers would copy them as its growth does.
func (q *timerQueue) reserve(n int) {
	if n == 0 {
		return
	}
	if len(q.set) == 0 {
		q.set = make(map[timerID]int32, n)
	}
	q.chunks = slices.Grow(q.chunks, max(0, (q.nrecs+n)/recChunk+1-len(q.chunks)))
	q.stamp = slices.Grow(q.stamp, cap(q.chunks)-len(q.stamp))
	q.pos = slices.Grow(q.pos, n)
	q.heap = slices.Grow(q.heap, n)
}

func (q *timerQueue) push(id timerID, group int32) {
	var ri int32
	if n := len(q.free); n > 0 {
		ri, q.free = q.free[n-1], q.free[:n-1]
	} else {
		ri = int32(q.nrecs)
		q.nrecs++
		if q.nrecs > len(q.chunks)*recChunk {
			q.chunks = append(q.chunks, make([]timerRec, recChunk))
			q.stamp = append(q.stamp, q.gen)
		}
		q.pos = append(q.pos, 0)
	}
	pos := len(q.heap)
	*q.writable(ri) = timerRec{id: id, group: group}
	q.pos[ri] = int32(pos)
	q.set[id] = ri
	q.seq++
	q.heap = append(q.heap, heapEntry{ts: id.ts, seq: q.seq, rec: ri})
	q.up(pos)
}

// pop removes the earliest timer and returns it with its group index.
func (q *timerQueue) pop() (Timer, int32) {
	ri := q.heap[0].rec
	r := q.rec(ri)
	id, gi := r.id, r.group
	q.removeAt(0)
	delete(q.set, id)
	q.release(ri)
	return Timer{Key: id.key, Namespace: id.ns, Timestamp: id.ts}, gi
}

// delete removes timer id, if registered, and returns its group index.
func (q *timerQueue) delete(id timerID) (int32, bool) {
	ri, ok := q.set[id]
	if !ok {
		return 0, false
	}
	gi := q.rec(ri).group
	delete(q.set, id)
	q.removeAt(int(q.pos[ri]))
	q.release(ri)
	return gi, true
}

func (q *timerQueue) release(ri int32) {
	*q.writable(ri) = timerRec{group: -1}
	q.free = append(q.free, ri)
	if len(q.heap) == 0 { // start over: the chunks are reused, copied first if shared
		q.nrecs, q.pos, q.free = 0, q.pos[:0], q.free[:0]
	}
}

func (q *timerQueue) removeAt(i int) {
	last := len(q.heap) - 1
	if i != last {
		q.swap(i, last)
	}
	q.heap = q.heap[:last]
	if i != last {
		if !q.down(i) {
			q.up(i)
		}
	}
}

func (q *timerQueue) swap(i, j int) {
	h := q.heap
	h[i], h[j] = h[j], h[i]
	q.pos[h[i].rec] = int32(i)
	q.pos[h[j].rec] = int32(j)
}

func (q *timerQueue) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !q.heap[j].less(q.heap[i]) {
			break
		}
		q.swap(i, j)
		j = i
	}
}

// down sifts element i0 down and reports whether it moved.
func (q *timerQueue) down(i0 int) bool {
	h := q.heap
	n := len(h)
	i := i0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			j = r
		}
		if !h[j].less(h[i]) {
			break
		}
		q.swap(i, j)
		i = j
	}
	return i > i0
}

// frozenTimers are the timers of one service as a snapshot saw them.
type frozenTimers struct {
	name   string
	n      int
	queues [2]frozenQueue
	// snap is the snapshot's number (TimerService.freezes), changed the
	// service's changed as it was then, cache the service's.
	snap    uint64
	changed []uint64
	cache   *timerCache
}

// timerCache holds, by group index, the encoding of a service's timers in
// the group that a snapshot wrote: the service's element of the blob's
// timers array (empty when the group had none). A snapshot of timers in
// the thousands or millions (a window per key) sorts and encodes them
// again only in the groups whose timers changed since an earlier snapshot
// wrote them. Snapshots encoded on several goroutines share it.
type timerCache struct {
	mu     sync.Mutex
	groups []cachedTimers
}

type cachedTimers struct {
	snap uint64 // the snapshot that wrote b (0: none)
	b    []byte
}

// lookup returns, for each of n group indexes, the cached encoding that
// snapshot f may use (snap 0 where none): one written by f or an earlier
// snapshot, after the group's last change before f. A later snapshot's
// encoding may hold changes that f does not.
func (c *timerCache) lookup(f *frozenTimers, n int) []cachedTimers {
	hits := make([]cachedTimers, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	for gi := range min(n, len(c.groups)) {
		e := c.groups[gi]
		var changed uint64
		if gi < len(f.changed) {
			changed = f.changed[gi]
		}
		if e.snap != 0 && e.snap <= f.snap && changed < e.snap {
			hits[gi] = e
		}
	}
	return hits
}

// store records b, which snapshot snap wrote for group index gi, unless a
// later snapshot's encoding is there already.
func (c *timerCache) store(gi int, snap uint64, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gi >= len(c.groups) {
		c.groups = append(c.groups, make([]cachedTimers, gi+1-len(c.groups))...)
	}
	if snap > c.groups[gi].snap {
		c.groups[gi] = cachedTimers{snap: snap, b: b}
	}
}

// frozenQueue is a timer queue's records as a snapshot saw them: the first
// n records of chunks, the chunks that hold them (free ones have group
// -1).
type frozenQueue struct {
	chunks [][]timerRec
	n      int
}

// each calls yield with each of the queue's registered timers.
func (f *frozenQueue) each(yield func(*timerRec)) {
	for c, chunk := range f.chunks {
		for i := range chunk[:min(recChunk, f.n-c*recChunk)] {
			if r := &chunk[i]; r.group >= 0 {
				yield(r)
			}
		}
	}
}

// sorted returns the timers by (group, domain, ts, key, ns), the order of
// the snapshot format. They are placed by group first (a counting sort),
// then each group is sorted: fewer comparisons, each of which may read the
// key's bytes. Groups with a cached encoding in skip are left out.
func (f *frozenTimers) sorted(skip []cachedTimers) []frozenTimer {
	var at []int // at[g+1]: group g's timers, then where group g+1's start
	n := 0
	for d := range f.queues {
		f.queues[d].each(func(r *timerRec) {
			if int(r.group) < len(skip) && skip[r.group].snap != 0 {
				return
			}
			n++
			if int(r.group)+2 > len(at) {
				at = append(at, make([]int, int(r.group)+2-len(at))...)
			}
			at[r.group+1]++
		})
	}
	groups := max(len(at)-1, 0)
	for g := 1; g <= groups; g++ {
		at[g] += at[g-1]
	}
	out := make([]frozenTimer, n)
	next := slices.Clone(at[:groups])
	for d := range f.queues {
		f.queues[d].each(func(r *timerRec) {
			if int(r.group) < len(skip) && skip[r.group].snap != 0 {
				return
			}
			out[next[r.group]] = frozenTimer{group: r.group, domain: Domain(d), id: r.id}
			next[r.group]++
		})
	}
	for g := range groups {
		slices.SortFunc(out[at[g]:at[g+1]], frozenTimerCompare)
	}
	return out
}

type frozenTimer struct {
	group  int32
	domain Domain
	id     timerID
}

func frozenTimerCompare(a, b frozenTimer) int {
	switch {
	case a.group != b.group:
		return int(a.group) - int(b.group)
	case a.domain != b.domain:
		return int(a.domain) - int(b.domain)
	case a.id.ts != b.id.ts:
		if a.id.ts < b.id.ts {
			return -1
		}
		return 1
	}
	if c := strings.Compare(a.id.key, b.id.key); c != 0 {
		return c
	}
	return strings.Compare(a.id.ns, b.id.ns)
}

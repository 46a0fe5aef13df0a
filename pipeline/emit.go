package pipeline

import "sync"

// batchPool recycles the record slices sent between tasks.
var batchPool = sync.Pool{New: func() any { return make([]Record, 0, 1024) }}

func getBatch(size int) []Record {
	b := batchPool.Get().([]Record)
	if cap(b) < size {
		return make([]Record, 0, size)
	}
	return b[:0]
}

func putBatch(b []Record) {
	clear(b[:cap(b)])
	batchPool.Put(b[:0]) //nolint:staticcheck // slices are small headers; the pool keeps capacity
}

// fanout sends a batch to several emitters; all but the last get clones, so
// every receiver owns its records.
type fanout struct {
	targets []Emitter
	scratch []Record
}

func (f *fanout) Emit(b []Record) error {
	last := len(f.targets) - 1
	for i, t := range f.targets {
		if i == last {
			return t.Emit(b)
		}
		f.scratch = f.scratch[:0]
		for _, r := range b {
			f.scratch = append(f.scratch, r.Clone())
		}
		if err := t.Emit(f.scratch); err != nil {
			return err
		}
	}
	return nil
}

func newFanout(targets []Emitter) Emitter {
	switch len(targets) {
	case 0:
		return discard{}
	case 1:
		return targets[0]
	}
	return &fanout{targets: targets}
}

type discard struct{}

func (discard) Emit([]Record) error { return nil }

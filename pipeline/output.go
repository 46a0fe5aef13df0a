package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-stream/eddy/expr"
)

// writer is the sending end of one non-chained edge on one subtask: it
// partitions records into per-receiver buffers and sends full batches, or
// partial ones at flush, always before a control event.
type writer struct {
	edge      *Edge
	chans     []chan Batch
	bufs      [][]Record
	batchSize int
	pending   int
	rr        int
	// done is closed when the job is cancelled; a blocked send gives up.
	done <-chan struct{}
	// stats are the sending task's: the time a send blocks counts as
	// backpressured.
	stats *taskStats

	// Hash edges only.
	vm      expr.VM
	keyBuf  []byte
	keyVals []any
	errs    *ErrorHandler
	maxPar  int
}

// newWriter returns the writer of edge e on subtask sender into chans, the
// channels to the receivers it addresses. deadLetters is the writer of
// e.DeadLetters, or nil.
func newWriter(e *Edge, chans []chan Batch, batchSize int, sender SubtaskInfo, done <-chan struct{}, stats *taskStats, deadLetters Emitter) *writer {
	w := &writer{edge: e, chans: chans, bufs: make([][]Record, len(chans)), batchSize: batchSize, maxPar: sender.MaxParallelism,
		done: done, stats: stats}
	if e.Partition == Hash {
		// Key failures follow the on_error policy of the key_by step. Its
		// dead letters travel over their own edge to the step's subtask 0,
		// which owns its errors stream.
		info := sender
		info.ID = e.To.ID
		w.errs = NewErrorHandler(info, e.To.Step.OnError, deadLetters)
		w.keyVals = make([]any, len(e.KeyExprs))
	}
	return w
}

// Emit partitions b into the receivers' buffers.
func (w *writer) Emit(b []Record) error {
	switch w.edge.Partition {
	case Forward, Global:
		for _, r := range b {
			if err := w.add(0, r); err != nil {
				return err
			}
		}
	case Rebalance:
		for _, r := range b {
			r.Key = ""
			if err := w.add(w.rr, r); err != nil {
				return err
			}
			if w.rr++; w.rr == len(w.chans) {
				w.rr = 0
			}
		}
	case Broadcast:
		for _, r := range b {
			for i := range w.chans {
				c := r
				if i < len(w.chans)-1 {
					c = r.Clone()
				}
				if err := w.add(i, c); err != nil {
					return err
				}
			}
		}
	case Hash:
		for _, r := range b {
			key, err := w.key(r)
			if err != nil {
				if herr := w.errs.Handle(r, fmt.Errorf("key_by: %w", err)); herr != nil {
					return herr
				}
				continue
			}
			r.Key = key
			g := KeyGroup(key, w.maxPar)
			if err := w.add(SubtaskForKeyGroup(g, len(w.chans), w.maxPar), r); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *writer) key(r Record) (string, error) {
	var err error
	w.keyBuf = w.keyBuf[:0]
	if len(w.edge.KeyExprs) == 1 {
		v, err := w.vm.EvalRecord(w.edge.KeyExprs[0], r.Fields, r.Meta)
		if err != nil {
			return "", err
		}
		if w.keyBuf, err = EncodeKey(w.keyBuf, v); err != nil {
			return "", err
		}
		return string(w.keyBuf), nil
	}
	for i, e := range w.edge.KeyExprs {
		if w.keyVals[i], err = w.vm.EvalRecord(e, r.Fields, r.Meta); err != nil {
			return "", err
		}
	}
	if w.keyBuf, err = EncodeKey(w.keyBuf, w.keyVals); err != nil {
		return "", err
	}
	return string(w.keyBuf), nil
}

func (w *writer) add(i int, r Record) error {
	if w.bufs[i] == nil {
		w.bufs[i] = getBatch(w.batchSize)
	}
	w.bufs[i] = append(w.bufs[i], r)
	w.pending++
	if len(w.bufs[i]) >= w.batchSize {
		return w.send(i, nil)
	}
	return nil
}

// send sends receiver i's buffer, with ctl after its records.
func (w *writer) send(i int, ctl *Control) error {
	b := Batch{Records: w.bufs[i], Control: ctl}
	w.pending -= len(w.bufs[i])
	w.bufs[i] = nil
	if b.Records == nil && ctl == nil {
		return nil
	}
	select {
	case w.chans[i] <- b:
		return nil
	default:
	}
	// The channel is full: the receiver is behind. Only this wait is
	// timed, so a send that does not block costs no clock reading.
	w.stats.enter(phaseBackpressured, time.Now())
	defer func() { w.stats.enter(phaseBusy, time.Now()) }()
	select {
	case w.chans[i] <- b:
		return nil
	case <-w.done:
		return context.Canceled
	}
}

// flush sends every non-empty buffer.
func (w *writer) flush() error {
	if w.pending == 0 {
		return nil
	}
	for i := range w.bufs {
		if len(w.bufs[i]) > 0 {
			if err := w.send(i, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// broadcast sends ctl to every receiver, after the records buffered for it.
func (w *writer) broadcast(ctl *Control) error {
	for i := range w.chans {
		if err := w.send(i, ctl); err != nil {
			return err
		}
	}
	return nil
}

package codec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/eddy-stream/eddy/pipeline"
)

// maxStreamBatch caps the lines handed over from the reading goroutine at once.
const maxStreamBatch = 1024

// lineBatch holds lines copied out of a LineReader.
type lineBatch struct {
	data  []byte
	lines [][]byte
	nums  []int
}

// AsyncLines reads lines from a blocking reader (stdin, a socket) on its own
// goroutine, so that a Read waiting for input can still return as soon as
// its context is done.
type AsyncLines struct {
	c        chan lineBatch
	stop     chan struct{}
	stopOnce sync.Once
	err      error // the reader's error other than io.EOF; read after c is closed
}

// StartLines starts reading lines from r; csv joins the lines of quoted fields.
func StartLines(r io.Reader, csv bool) *AsyncLines {
	a := &AsyncLines{c: make(chan lineBatch, 2), stop: make(chan struct{})}
	go a.run(NewLineReader(r, 0, 1, csv, 64<<10))
	return a
}

func (a *AsyncLines) run(lr *LineReader) {
	defer close(a.c)
	eof := false
	for {
		var b lineBatch
		var ends []int
		for len(ends) < maxStreamBatch {
			line, no, ok := lr.Next(eof)
			if !ok {
				break
			}
			b.data = append(b.data, line...)
			ends = append(ends, len(b.data))
			b.nums = append(b.nums, no)
		}
		if len(ends) > 0 {
			b.lines = make([][]byte, len(ends))
			start := 0
			for i, end := range ends {
				b.lines[i] = b.data[start:end:end]
				start = end
			}
			select {
			case a.c <- b:
			case <-a.stop:
				return
			}
			continue
		}
		if eof {
			return
		}
		_, err := lr.Fill()
		if errors.Is(err, io.EOF) {
			eof = true
		} else if err != nil {
			select {
			case <-a.stop: // the reader was closed to stop us
			default:
				a.err = err
			}
			return
		}
	}
}

// Stop makes the goroutine exit once its current read returns; close the
// underlying reader (socket) to make that read return.
func (a *AsyncLines) Stop() { a.stopOnce.Do(func() { close(a.stop) }) }

// Stream is the Read of a non-replayable line source (stdin, socket): it
// decodes what an AsyncLines delivers.
type Stream struct {
	// Where names the input in errors ("stdin", "socket HOST:PORT").
	Where   string
	lines   *AsyncLines
	dec     Decoder
	decoder BatchDecoder
}

// NewStream returns a stream reading lines from a, decoded with opts, for
// the source subtask of sc (see BatchDecoder.Observe).
func NewStream(where string, a *AsyncLines, opts *DecodeOptions, sc *pipeline.SourceContext) *Stream {
	s := &Stream{Where: where, lines: a, dec: opts.NewDecoder()}
	s.decoder.Observe(sc)
	return s
}

// Reset makes s read from a new input (a new connection); a csv input
// starts with its own header.
func (s *Stream) Reset(a *AsyncLines, opts *DecodeOptions) {
	s.lines = a
	s.dec = opts.NewDecoder()
}

// Read appends the records of the next lines to b, and the lines that do
// not decode to b.Failed ("where:LINE: reason"); it returns once it appended
// either. It returns io.EOF when the input ended, the reader's error wrapped
// in ErrRead if it failed, and ctx.Err() as soon as ctx is done.
func (s *Stream) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case lb, ok := <-s.lines.c:
			if !ok {
				if s.lines.err != nil {
					return fmt.Errorf("%w: %w", ErrRead, s.lines.err)
				}
				return io.EOF
			}
			if s.decoder.Decode(s.dec, lb.lines, lb.nums, s.Where, b) > 0 {
				return nil
			}
		}
	}
}

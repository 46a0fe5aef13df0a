package codec

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/pipeline"
)

// BatchDecoder decodes batches of lines into records and applies a source's
// on_decode_error policy. It belongs to one subtask and is used on its reader
// goroutine only.
type BatchDecoder struct {
	// Workers is the number of goroutines json lines are decoded on (see
	// DecodeAll); 0 means GOMAXPROCS, 1 decodes on the caller's goroutine.
	Workers int

	onError OnError
	logger  *slog.Logger
	rejects prometheus.Counter
	skipped int64
	out     []map[string]any
	errs    []error
}

// NewBatchDecoder returns the batch decoder of a source subtask.
func NewBatchDecoder(info pipeline.SubtaskInfo, onError OnError) *BatchDecoder {
	d := &BatchDecoder{onError: onError, logger: info.Logger}
	if d.logger == nil {
		d.logger = slog.Default()
	}
	if info.Metrics != nil {
		d.rejects = info.Metrics.RecordErrors(info, pipeline.OnErrorSkip)
	}
	return d
}

// Skipped returns the number of lines skipped under on_decode_error: skip.
func (d *BatchDecoder) Skipped() int64 { return d.skipped }

// Decode decodes lines (nums[i] is the line number of lines[i]) with dec and
// appends the records to recs. where names the input in errors ("FILE",
// "stdin"): a line that does not decode fails with "where:LINE: reason"
// under on_decode_error: fail, and is counted, logged and dropped under skip.
func (d *BatchDecoder) Decode(dec Decoder, lines [][]byte, nums []int, where string, recs []pipeline.Record) ([]pipeline.Record, error) {
	n := len(lines)
	if cap(d.out) < n {
		d.out = make([]map[string]any, n)
		d.errs = make([]error, n)
	}
	out, errs := d.out[:n], d.errs[:n]
	DecodeAll(dec, lines, out, errs, d.Workers)
	var failed error
	for i, m := range out {
		if err := errs[i]; err != nil && failed == nil {
			failed = d.reject(where, nums[i], err)
		}
		if m != nil && failed == nil {
			recs = append(recs, pipeline.Record{Fields: m, Time: pipeline.NoTime})
		}
	}
	clear(out)
	clear(errs)
	return recs, failed
}

func (d *BatchDecoder) reject(where string, line int, err error) error {
	err = fmt.Errorf("%s:%d: %w", where, line, err)
	if d.onError == OnErrorFail {
		return err
	}
	d.skipped++
	if d.rejects != nil {
		d.rejects.Inc()
	}
	if d.skipped == 1 {
		d.logger.Warn("skipping input that does not decode (on_decode_error: skip); later ones are logged at debug level", "error", err)
	} else {
		d.logger.Debug("skipped input that does not decode", "error", err)
	}
	return nil
}

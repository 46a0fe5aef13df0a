package codec

import (
	"fmt"

	"github.com/eddy-stream/eddy/pipeline"
)

// BatchDecoder decodes batches of lines into records. A line that does not
// decode becomes a pipeline.FailedRecord, to which the runtime applies the
// source's on_error policy. It belongs to one subtask and is used on its
// reader goroutine only; the zero value is ready to use.
type BatchDecoder struct {
	// Workers is the number of goroutines json lines are decoded on (see
	// DecodeAll); 0 means GOMAXPROCS, 1 decodes on the caller's goroutine.
	Workers int

	out  []map[string]any
	errs []error
}

// Decode decodes lines (nums[i] is the line number of lines[i]) with dec,
// appends the records to b.Records and each line that does not decode to
// b.Failed, as Fields {"raw": the line} and Err "where:LINE: reason". where
// names the input ("FILE", "stdin"). It returns the number of records and
// failed records appended: 0 when the lines held no record (blank lines, a
// csv header). The lines may be reused once Decode returns.
func (d *BatchDecoder) Decode(dec Decoder, lines [][]byte, nums []int, where string, b *pipeline.ReadBatch) int {
	n := len(lines)
	if cap(d.out) < n {
		d.out = make([]map[string]any, n)
		d.errs = make([]error, n)
	}
	out, errs := d.out[:n], d.errs[:n]
	DecodeAll(dec, lines, out, errs, d.Workers)
	added := 0
	for i, m := range out {
		if err := errs[i]; err != nil {
			b.Failed = append(b.Failed, pipeline.FailedRecord{
				Fields: map[string]any{"raw": string(lines[i])},
				Err:    fmt.Errorf("%s:%d: %w", where, nums[i], err),
			})
			added++
			continue
		}
		if m != nil {
			b.Records = append(b.Records, pipeline.Record{Fields: m, Time: pipeline.NoTime})
			added++
		}
	}
	clear(out)
	clear(errs)
	return added
}

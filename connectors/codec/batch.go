package codec

import (
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

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

	// Invalid UTF-8 in json strings (see Observe).
	source  string
	invalid prometheus.Counter
	logger  *slog.Logger
	warned  bool
}

// Observe makes d count the json records whose strings held invalid UTF-8,
// which the decoder replaced with U+FFFD, in eddy_source_invalid_utf8_total
// of sc's subtask, and log the first one at warn level. Call it from the
// source's Open.
func (d *BatchDecoder) Observe(sc *pipeline.SourceContext) {
	d.source, d.logger, d.warned = sc.ID, sc.Logger, false
	if d.logger == nil {
		d.logger = slog.Default()
	}
	if sc.Metrics != nil {
		d.invalid = sc.Metrics.InvalidUTF8(sc.SubtaskInfo)
	}
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
	if n := DecodeAll(dec, lines, out, errs, d.Workers); n > 0 {
		d.replaced(n, lines, nums, out, where)
	}
	added := 0
	for i, m := range out {
		if err := errs[i]; err != nil {
			b.Failed = append(b.Failed, pipeline.FailedRecord{
				Fields: map[string]any{"raw": string(lines[i])},
				Err:    fmt.Errorf("%s:%d: %w", where, nums[i], err),
				At:     len(b.Records),
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

// replaced counts n records decoded with invalid UTF-8 replaced and warns
// about the first one of the subtask.
func (d *BatchDecoder) replaced(n int, lines [][]byte, nums []int, out []map[string]any, where string) {
	if d.invalid != nil {
		d.invalid.Add(float64(n))
	}
	if d.warned || d.logger == nil {
		return
	}
	d.warned = true
	for i, l := range lines {
		if out[i] != nil && !utf8.Valid(l) {
			d.logger.Warn("a JSON string holds invalid UTF-8: each bad byte was replaced with U+FFFD; later ones are counted in eddy_source_invalid_utf8_total",
				"source", d.source, "at", fmt.Sprintf("%s:%d", where, nums[i]))
			return
		}
	}
}

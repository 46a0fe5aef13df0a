package codec

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// Decoder turns one line of input into a record's fields.
type Decoder interface {
	// Decode decodes line (without its line terminator). It returns nil, nil
	// for a line that holds no record: a blank line (json, csv) or the csv
	// header. The returned map is new and owned by the caller.
	Decode(line []byte) (map[string]any, error)
}

// NewDecoder returns a decoder of format f; comma is the csv delimiter.
// The json and text decoders are stateless and safe for concurrent use; the
// csv decoder remembers the header of its input.
func NewDecoder(f Format, comma byte) Decoder {
	switch f {
	case CSV:
		return &CSVDecoder{Comma: comma}
	case Text:
		return TextDecoder{}
	}
	return JSONDecoder{}
}

// JSONDecoder decodes JSON lines: one object per line. A number literal
// without fraction and exponent that fits in an int64 decodes as int64
// (1, -7, 9007199254740993), any other number as float64 (1.0, 1e3,
// 2.5, 1e19 and 18446744073709551616, which do not fit). Invalid UTF-8 in
// a string becomes U+FFFD (see DecodeAll to count it).
type JSONDecoder struct{}

// Decode decodes one JSON object.
func (JSONDecoder) Decode(line []byte) (map[string]any, error) {
	m, _, err := JSONDecoder{}.decode(line)
	return m, err
}

// DecodeReporting is Decode, and also reports whether a string held invalid
// UTF-8 (or a lone surrogate escape) that became U+FFFD, for a source that
// decodes one value at a time (Kafka) to count such records.
func (JSONDecoder) DecodeReporting(line []byte) (m map[string]any, invalidUTF8 bool, err error) {
	return JSONDecoder{}.decode(line)
}

// decode decodes one JSON object; invalid tells whether a string held
// invalid UTF-8 (or a lone surrogate escape) replaced with U+FFFD.
func (JSONDecoder) decode(line []byte) (m map[string]any, invalid bool, err error) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil, false, nil
	}
	if trimmed[0] != '{' {
		return nil, false, fmt.Errorf("invalid JSON: a line must be a JSON object, not %s", preview(trimmed))
	}
	m, invalid, err = decodeJSONObject(trimmed)
	if err != nil {
		return nil, false, fmt.Errorf("invalid JSON: %w", err)
	}
	return m, invalid, nil
}

// TextDecoder makes each line a record {"line": text}; blank lines are kept.
type TextDecoder struct{}

// Decode returns {"line": string(line)}.
func (TextDecoder) Decode(line []byte) (map[string]any, error) {
	return map[string]any{"line": string(line)}, nil
}

// CSVDecoder decodes CSV (RFC 4180): the first record is the header, whose
// names become the fields of the following records; values stay strings.
// A record must have as many fields as the header.
type CSVDecoder struct {
	Comma  byte
	header []string
	fields []string
}

// Decode decodes one CSV record; the first one sets the header.
func (d *CSVDecoder) Decode(line []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, nil
	}
	var err error
	d.fields, err = splitCSV(d.fields[:0], line, d.Comma)
	if err != nil {
		return nil, err
	}
	if d.header == nil {
		d.header = make([]string, len(d.fields))
		copy(d.header, d.fields)
		return nil, nil
	}
	if len(d.fields) != len(d.header) {
		return nil, fmt.Errorf("invalid CSV: the record has %d fields, the header has %d", len(d.fields), len(d.header))
	}
	m := make(map[string]any, len(d.header))
	for i, name := range d.header {
		m[name] = d.fields[i]
	}
	return m, nil
}

// Header returns the header read so far, or nil.
func (d *CSVDecoder) Header() []string { return d.header }

// splitCSV appends the fields of one CSV record to dst. Quoted fields may
// hold the delimiter, newlines and doubled quotes; a quote inside an unquoted
// field is taken literally.
func splitCSV(dst []string, rec []byte, comma byte) ([]string, error) {
	i := 0
	for {
		if i < len(rec) && rec[i] == '"' {
			var sb []byte
			i++
			for {
				j := bytes.IndexByte(rec[i:], '"')
				if j < 0 {
					return dst, errors.New("invalid CSV: a quoted field is not closed")
				}
				sb = append(sb, rec[i:i+j]...)
				i += j + 1
				if i < len(rec) && rec[i] == '"' { // "" is an escaped quote
					sb = append(sb, '"')
					i++
					continue
				}
				break
			}
			// Inside quotes a CRLF line break is kept as \n, like encoding/csv.
			dst = append(dst, strings.ReplaceAll(string(sb), "\r\n", "\n"))
			if i == len(rec) {
				return dst, nil
			}
			if rec[i] != comma {
				return dst, fmt.Errorf("invalid CSV: unexpected %q after a quoted field", rec[i])
			}
			i++
			continue
		}
		j := bytes.IndexByte(rec[i:], comma)
		if j < 0 {
			return append(dst, string(rec[i:])), nil
		}
		dst = append(dst, string(rec[i:i+j]))
		i += j + 1
	}
}

func preview(b []byte) string {
	const max = 40
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}

// parallelMin is the smallest number of lines per worker worth a goroutine.
const parallelMin = 256

// DecodeAll decodes lines into out[i] and errs[i] (both of len(lines)),
// keeping order. A stateless decoder (json, text) decodes on up to workers
// goroutines when the batch is large enough; workers <= 0 means GOMAXPROCS.
// It returns how many of the records (json only) had invalid UTF-8 in a
// string, replaced with U+FFFD.
func DecodeAll(dec Decoder, lines [][]byte, out []map[string]any, errs []error, workers int) (invalidUTF8 int) {
	if _, ok := dec.(JSONDecoder); !ok {
		for i, l := range lines {
			out[i], errs[i] = dec.Decode(l)
		}
		return 0
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(lines)/parallelMin)
	if workers <= 1 {
		return decodeJSON(lines, out, errs, 0, len(lines))
	}
	var wg sync.WaitGroup
	chunk := (len(lines) + workers - 1) / workers
	counts := make([]int, 0, workers)
	for lo := chunk; lo < len(lines); lo += chunk {
		hi := min(lo+chunk, len(lines))
		counts = append(counts, 0)
		n := &counts[len(counts)-1]
		wg.Go(func() { *n = decodeJSON(lines, out, errs, lo, hi) })
	}
	invalidUTF8 = decodeJSON(lines, out, errs, 0, chunk)
	wg.Wait()
	for _, n := range counts {
		invalidUTF8 += n
	}
	return invalidUTF8
}

// decodeJSON decodes lines[lo:hi] as json and returns how many records had
// invalid UTF-8.
func decodeJSON(lines [][]byte, out []map[string]any, errs []error, lo, hi int) int {
	n := 0
	for i := lo; i < hi; i++ {
		var invalid bool
		out[i], invalid, errs[i] = JSONDecoder{}.decode(lines[i])
		if invalid {
			n++
		}
	}
	return n
}

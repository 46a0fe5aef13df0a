package codec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

func TestJSONDecoder(t *testing.T) {
	tests := []struct {
		line    string
		want    map[string]any
		wantErr string
	}{
		{`{"id":1,"s":"x","l":[1,"a",null],"m":{"k":true}}`, map[string]any{"id": int64(1), "s": "x", "l": []any{int64(1), "a", nil}, "m": map[string]any{"k": true}}, ""},
		{"  {\"a\":1}\t", map[string]any{"a": int64(1)}, ""},
		{`{}`, map[string]any{}, ""},
		{"", nil, ""},
		{"   ", nil, ""},
		{`null`, nil, `invalid JSON: a line must be a JSON object, not "null"`},
		{`[1,2]`, nil, `invalid JSON: a line must be a JSON object, not "[1,2]"`},
		{`3`, nil, `a line must be a JSON object`},
		{`{"a":1} x`, nil, `invalid JSON: invalid character 'x' after top-level value`},
		{`{"a":`, nil, `invalid JSON: unexpected end of JSON input`},
		{`{"a":"x`, nil, `unexpected end of JSON input`},
		{`{"a":1,}`, nil, `invalid JSON:`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, err := JSONDecoder{}.Decode([]byte(tt.line))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestTextDecoder(t *testing.T) {
	for _, line := range []string{"hello world", "", "  {not json"} {
		got, err := TextDecoder{}.Decode([]byte(line))
		require.NoError(t, err)
		require.Equal(t, map[string]any{"line": line}, got)
	}
}

func TestCSVDecoder(t *testing.T) {
	tests := []struct {
		name    string
		comma   byte
		lines   []string
		want    []map[string]any
		wantErr string
	}{
		{name: "header then rows", comma: ',', lines: []string{"id,name,temp", "1,a,21.5", "", "2,b,"},
			want: []map[string]any{{"id": "1", "name": "a", "temp": "21.5"}, {"id": "2", "name": "b", "temp": ""}}},
		{name: "quotes", comma: ',', lines: []string{`a,"b c"`, `"x,y","say ""hi"""`, "\"multi\r\nline\",\"\""},
			want: []map[string]any{{"a": "x,y", "b c": `say "hi"`}, {"a": "multi\nline", "b c": ""}}},
		{name: "semicolon", comma: ';', lines: []string{"a;b", "1,5;2"}, want: []map[string]any{{"a": "1,5", "b": "2"}}},
		{name: "literal quote in unquoted field", comma: ',', lines: []string{"a,b", `5" pipe,x`}, want: []map[string]any{{"a": `5" pipe`, "b": "x"}}},
		{name: "too many fields", comma: ',', lines: []string{"a,b", "1,2,3"}, wantErr: "invalid CSV: the record has 3 fields, the header has 2"},
		{name: "too few fields", comma: ',', lines: []string{"a,b", "1"}, wantErr: "the record has 1 fields"},
		{name: "unclosed quote", comma: ',', lines: []string{"a", `"abc`}, wantErr: "a quoted field is not closed"},
		{name: "junk after quote", comma: ',', lines: []string{"a,b", `"x"y,1`}, wantErr: `unexpected 'y' after a quoted field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(CSV, tt.comma)
			var got []map[string]any
			var err error
			for _, l := range tt.lines {
				var m map[string]any
				if m, err = d.Decode([]byte(l)); err != nil {
					break
				}
				if m != nil {
					got = append(got, m)
				}
			}
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeAllKeepsOrder(t *testing.T) {
	var lines [][]byte
	for i := range 5000 {
		if i%1000 == 7 {
			lines = append(lines, []byte("oops"))
			continue
		}
		lines = append(lines, fmt.Appendf(nil, `{"i":%d}`, i))
	}
	for _, workers := range []int{1, 2, 3, 8} {
		out := make([]map[string]any, len(lines))
		errs := make([]error, len(lines))
		DecodeAll(JSONDecoder{}, lines, out, errs, workers)
		for i := range lines {
			if i%1000 == 7 {
				require.Error(t, errs[i])
				require.Nil(t, out[i])
				continue
			}
			require.NoError(t, errs[i])
			require.Equal(t, int64(i), out[i]["i"], "workers=%d line %d", workers, i)
		}
	}
}

func TestBatchDecoderFailedLines(t *testing.T) {
	// Around 1000 lines so that json decodes on several workers too.
	var lines [][]byte
	var nums []int
	for i := range 1000 {
		line := fmt.Appendf(nil, `{"i":%d}`, i)
		switch i {
		case 3:
			line = []byte(`{"i":`)
		case 500:
			line = []byte("nope")
		case 998:
			line = nil // blank: no record, no failure
		}
		lines = append(lines, line)
		nums = append(nums, i+1)
	}
	for _, workers := range []int{1, 4} {
		d := BatchDecoder{Workers: workers}
		b := pipeline.ReadBatch{Records: []pipeline.Record{{Fields: map[string]any{"kept": true}}}}
		require.Equal(t, 999, d.Decode(JSONDecoder{}, lines, nums, "in.jsonl", &b)) // 997 records, 2 failed
		require.Len(t, b.Records, 1+997)
		require.Equal(t, map[string]any{"kept": true}, b.Records[0].Fields)
		want := 0
		for _, r := range b.Records[1:] {
			for want == 3 || want == 500 || want == 998 {
				want++
			}
			require.Equal(t, map[string]any{"i": int64(want)}, r.Fields, "workers=%d", workers)
			require.Equal(t, pipeline.NoTime, r.Time)
			want++
		}
		require.Len(t, b.Failed, 2)
		require.Equal(t, map[string]any{"raw": `{"i":`}, b.Failed[0].Fields)
		require.EqualError(t, b.Failed[0].Err, "in.jsonl:4: invalid JSON: unexpected end of JSON input")
		require.Equal(t, map[string]any{"raw": "nope"}, b.Failed[1].Fields)
		require.EqualError(t, b.Failed[1].Err, `in.jsonl:501: invalid JSON: a line must be a JSON object, not "nope"`)
	}

	// The raw text is a copy: the lines' buffer may be reused.
	buf := []byte("a,b\n1,\"x\ny\",3\n2,z")
	lr := NewLineReader(bytes.NewReader(buf), 0, 1, true, 0)
	_, err := lr.Fill()
	require.NoError(t, err)
	var recs [][]byte
	for line, _, ok := lr.Next(true); ok; line, _, ok = lr.Next(true) {
		recs = append(recs, line)
	}
	require.Len(t, recs, 3)
	buf = lr.buf
	var b pipeline.ReadBatch
	var d BatchDecoder
	require.Equal(t, 2, d.Decode(&CSVDecoder{Comma: ','}, recs, []int{1, 2, 4}, "stdin", &b))
	clear(buf)
	require.Equal(t, []map[string]any{{"a": "2", "b": "z"}}, []map[string]any{b.Records[0].Fields})
	require.Equal(t, []pipeline.FailedRecord{{Fields: map[string]any{"raw": "1,\"x\ny\",3"}, Err: b.Failed[0].Err}}, b.Failed)
	require.EqualError(t, b.Failed[0].Err, "stdin:2: invalid CSV: the record has 3 fields, the header has 2")
}

func TestBatchDecoderAllocations(t *testing.T) {
	lines := [][]byte{nil, []byte("  "), nil}
	nums := []int{1, 2, 3}
	var d BatchDecoder
	var b pipeline.ReadBatch
	allocs := testing.AllocsPerRun(100, func() {
		if d.Decode(JSONDecoder{}, lines, nums, "x", &b) != 0 {
			t.Fatal("blank lines decoded to something")
		}
	})
	require.Zero(t, allocs, "blank lines must not allocate")
}

func TestStreamFailedLines(t *testing.T) {
	opts := DefaultDecodeOptions(JSON)
	s := NewStream("stdin", StartLines(strings.NewReader("\nbad\n{\"a\":1}\n[2]\n"), false), &opts, &pipeline.SourceContext{})
	var b pipeline.ReadBatch
	for {
		err := s.Read(context.Background(), &b)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.True(t, len(b.Records) > 0 || len(b.Failed) > 0, "Read returned nothing")
	}
	require.Equal(t, []pipeline.Record{{Fields: map[string]any{"a": int64(1)}, Time: pipeline.NoTime}}, b.Records)
	require.Len(t, b.Failed, 2)
	require.Equal(t, map[string]any{"raw": "bad"}, b.Failed[0].Fields)
	require.EqualError(t, b.Failed[0].Err, `stdin:2: invalid JSON: a line must be a JSON object, not "bad"`)
	require.Equal(t, map[string]any{"raw": "[2]"}, b.Failed[1].Fields)
	require.EqualError(t, b.Failed[1].Err, `stdin:4: invalid JSON: a line must be a JSON object, not "[2]"`)
}

func TestOptionsValidate(t *testing.T) {
	d := DefaultDecodeOptions(JSON)
	require.NoError(t, d.Validate())
	d.Format, d.CSVDelimiter = "xml", ";;"
	err := d.Validate()
	require.ErrorContains(t, err, `format: must be json, csv or text, not "xml"`)
	require.ErrorContains(t, err, "csv_delimiter: must be one ASCII character")

	e := DefaultEncodeOptions()
	require.NoError(t, e.Validate())
	e.Format = CSV
	require.ErrorContains(t, e.Validate(), "columns: format csv needs the list of columns")
	e.Columns = []string{"a", "a"}
	require.ErrorContains(t, e.Validate(), `column "a" is listed twice`)
	e = DefaultEncodeOptions()
	e.Columns = []string{"a"}
	require.ErrorContains(t, e.Validate(), "columns: only applies to format csv")
	e.Format = Text
	require.ErrorContains(t, e.Validate(), `format: must be json or csv`)
}

// readAll drains a LineReader the way the sources do.
func readAll(t *testing.T, lr *LineReader) (lines []string, nums []int, offsets []int64) {
	t.Helper()
	eof := false
	for {
		line, no, ok := lr.Next(eof)
		if ok {
			lines = append(lines, string(line))
			nums = append(nums, no)
			offsets = append(offsets, lr.Offset())
			continue
		}
		if eof {
			return
		}
		if _, err := lr.Fill(); err == io.EOF {
			eof = true
		} else {
			require.NoError(t, err)
		}
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	tests := []struct {
		name    string
		input   string
		csv     bool
		lines   []string
		nums    []int
		offsets []int64
	}{
		{name: "lines", input: "a\nbb\n\nccc", lines: []string{"a", "bb", "", "ccc"}, nums: []int{1, 2, 3, 4}, offsets: []int64{2, 5, 6, 9}},
		{name: "crlf", input: "a\r\nb\r\n", lines: []string{"a", "b"}, nums: []int{1, 2}, offsets: []int64{3, 6}},
		{name: "bom", input: "\xef\xbb\xbf{}\n{}\n", lines: []string{"{}", "{}"}, nums: []int{1, 2}, offsets: []int64{6, 9}},
		{name: "bom only at the start", input: "a\n\xef\xbb\xbfb\n", lines: []string{"a", "\xef\xbb\xbfb"}, nums: []int{1, 2}, offsets: []int64{2, 7}},
		{name: "short input", input: "\xef\xbb", lines: []string{"\xef\xbb"}, nums: []int{1}, offsets: []int64{2}},
		{name: "long line grows the buffer", input: "a\n" + long + "\nb\n", lines: []string{"a", long, "b"}, nums: []int{1, 2, 3}, offsets: []int64{2, 100_003, 100_005}},
		{name: "csv quoted line breaks", csv: true, input: "a,b\n\"x\ny\",1\n\"\"\"q\"\"\n\",2\nlast,3", lines: []string{"a,b", "\"x\ny\",1", "\"\"\"q\"\"\n\",2", "last,3"}, nums: []int{1, 2, 4, 6}, offsets: []int64{4, 12, 23, 29}},
		{name: "not csv: quotes do not join", input: "\"a\nb\"\n", lines: []string{`"a`, `b"`}, nums: []int{1, 2}, offsets: []int64{3, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A one-byte reader and a tiny buffer exercise every refill path.
			for _, r := range []io.Reader{strings.NewReader(tt.input), iotest.OneByteReader(strings.NewReader(tt.input))} {
				lr := NewLineReader(r, 0, 1, tt.csv, 4)
				lines, nums, offsets := readAll(t, lr)
				require.Equal(t, tt.lines, lines)
				require.Equal(t, tt.nums, nums)
				require.Equal(t, tt.offsets, offsets)
			}
		})
	}
}

func TestLineReaderResume(t *testing.T) {
	input := "l1\nl2\nl3\nl4\n"
	lr := NewLineReader(strings.NewReader(input), 0, 1, false, 0)
	_, err := lr.Fill()
	require.NoError(t, err)
	_, _, _ = lr.Next(false)
	_, _, _ = lr.Next(false)
	off, line := lr.Offset(), lr.Line()
	require.Equal(t, int64(6), off)
	require.Equal(t, 3, line)

	lr2 := NewLineReader(bytes.NewReader([]byte(input[off:])), off, line, false, 0)
	lines, nums, offsets := readAll(t, lr2)
	require.Equal(t, []string{"l3", "l4"}, lines)
	require.Equal(t, []int{3, 4}, nums)
	require.Equal(t, []int64{9, 12}, offsets)
}

func TestLineReaderPartialLineWaits(t *testing.T) {
	r, w := io.Pipe()
	lr := NewLineReader(r, 0, 1, false, 0)
	go func() {
		_, _ = w.Write([]byte("complete\npart"))
		_, _ = w.Write([]byte("ial\n"))
		_ = w.Close()
	}()
	var got []string
	for len(got) < 2 {
		if line, _, ok := lr.Next(false); ok {
			got = append(got, string(line))
			continue
		}
		_, err := lr.Fill()
		require.NoError(t, err)
	}
	require.Equal(t, []string{"complete", "partial"}, got)
}

func TestBatchDecoderCountsInvalidUTF8(t *testing.T) {
	var logs bytes.Buffer
	metrics := pipeline.NewMetrics()
	info := pipeline.SubtaskInfo{ID: "in", Subtask: 0, Parallelism: 1, Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: dropTime}))}
	for _, workers := range []int{1, 4} {
		logs.Reset()
		var d BatchDecoder
		d.Workers = workers
		d.Observe(&pipeline.SourceContext{SubtaskInfo: info})
		var lines [][]byte
		var nums []int
		for i := range 1000 {
			line := fmt.Appendf(nil, `{"i":%d,"s":"ok"}`, i)
			switch i {
			case 10, 700:
				line = fmt.Appendf(nil, "{\"i\":%d,\"s\":\"caf\xe9\"}", i) // Latin-1, not UTF-8
			case 20:
				line = []byte("{\"i\":\xff}") // outside a string: not JSON at all
			}
			lines = append(lines, line)
			nums = append(nums, i+1)
		}
		var b pipeline.ReadBatch
		require.Equal(t, 1000, d.Decode(JSONDecoder{}, lines, nums, "in.jsonl", &b))
		require.Len(t, b.Failed, 1)
		require.Equal(t, "caf\uFFFD", b.Records[10].Fields["s"])
		// A second batch counts again and does not warn again.
		require.Equal(t, 1, d.Decode(JSONDecoder{}, [][]byte{[]byte("{\"k\xc0\":1}")}, []int{1001}, "in.jsonl", &b))
		require.Equal(t, `level=WARN msg="a JSON string holds invalid UTF-8: each bad byte was replaced with U+FFFD; later ones are counted in eddy_source_invalid_utf8_total" source=in at=in.jsonl:11`+"\n", logs.String())
	}
	require.Equal(t, 6.0, pipeline.CounterValue(metrics.InvalidUTF8(info)))
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

package codec

import (
	"bytes"
	"io"
)

// DefaultBufferSize is the initial buffer of a LineReader; it grows to hold
// longer lines.
const DefaultBufferSize = 256 << 10

// LineReader splits input into lines in one big buffer, without a copy or an
// allocation per line, and knows the input offset after every line. A line
// ends at '\n'; a trailing '\r' is dropped. In CSV mode a line break inside
// a quoted field does not end the record.
//
// Use: call Next until it reports no complete line, then Fill, which may
// move the buffer and so invalidates every line returned before it.
type LineReader struct {
	r       io.Reader
	csv     bool
	buf     []byte
	start   int   // first byte not yet returned
	end     int   // end of the data read
	scan    int   // where the search for the end of the current line resumes
	quoted  bool  // CSV: the scanned part of the current record ends inside quotes
	breaks  int   // CSV: line breaks inside the scanned part of the current record
	base    int64 // input offset of buf[0]
	line    int   // line number of the byte at start, 1-based
	skipBOM bool
}

// NewLineReader returns a reader of r starting at input offset offset and
// line number line (1 for the start of the input). csv joins the lines of a
// quoted field. size is the initial buffer size (0 = DefaultBufferSize). A
// UTF-8 byte order mark at offset 0 is skipped.
func NewLineReader(r io.Reader, offset int64, line int, csv bool, size int) *LineReader {
	if size <= 0 {
		size = DefaultBufferSize
	}
	return &LineReader{r: r, csv: csv, buf: make([]byte, size), base: offset, line: max(line, 1), skipBOM: offset == 0}
}

// Offset returns the input offset just after the last line Next returned:
// where to seek to resume after it.
func (l *LineReader) Offset() int64 { return l.base + int64(l.start) }

// Line returns the line number of the next line: what to resume with.
func (l *LineReader) Line() int { return l.line }

// Buffered returns the number of bytes read but not yet returned as lines.
func (l *LineReader) Buffered() int { return l.end - l.start }

// ReadOffset returns the input offset of the end of the data read so far.
func (l *LineReader) ReadOffset() int64 { return l.base + int64(l.end) }

// bom is the UTF-8 byte order mark.
var bom = []byte("\xef\xbb\xbf")

// Next returns the next complete line (without its terminator) and its line
// number. With atEOF, data after the last line break is a line too (the
// input ended). ok is false when the buffer holds no complete line.
func (l *LineReader) Next(atEOF bool) (line []byte, lineNo int, ok bool) {
	if l.skipBOM {
		data := l.buf[l.start:l.end]
		switch {
		case l.base+int64(l.start) != 0:
			l.skipBOM = false
		case len(data) < len(bom) && !atEOF && bytes.HasPrefix(bom, data):
			return nil, 0, false // maybe a byte order mark: wait for more
		default:
			l.skipBOM = false
			if bytes.HasPrefix(data, bom) {
				l.start += len(bom)
				l.scan = max(l.scan, l.start)
			}
		}
	}
	for {
		i := bytes.IndexByte(l.buf[l.scan:l.end], '\n')
		if i < 0 {
			if l.csv {
				l.quoted = l.quoted != (bytes.Count(l.buf[l.scan:l.end], []byte{'"'})%2 == 1)
			}
			l.scan = l.end
			if atEOF && l.start < l.end {
				line, no := l.endRecord(l.end, l.end)
				return line, no, true
			}
			return nil, 0, false
		}
		nl := l.scan + i
		if l.csv {
			l.quoted = l.quoted != (bytes.Count(l.buf[l.scan:nl], []byte{'"'})%2 == 1)
			if l.quoted { // the line break is inside a quoted field
				l.breaks++
				l.scan = nl + 1
				continue
			}
		}
		line, no := l.endRecord(nl, nl+1)
		return line, no, true
	}
}

// endRecord returns the record buf[start:end] and its line number and moves
// on to the record at next.
func (l *LineReader) endRecord(end, next int) ([]byte, int) {
	no := l.line
	l.line += 1 + l.breaks
	l.breaks, l.quoted = 0, false
	return l.take(end, next), no
}

// take returns buf[start:end] without a trailing '\r' and moves start to next.
func (l *LineReader) take(end, next int) []byte {
	line := l.buf[l.start:end]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	l.start, l.scan = next, next
	return line
}

// Fill reads once from the input into the buffer, moving unread data to its
// front first (which invalidates the lines returned so far) and growing it
// when a line does not fit. It returns the number of bytes read and the
// reader's error (io.EOF at the end of the input).
func (l *LineReader) Fill() (int, error) {
	if l.start > 0 {
		n := copy(l.buf, l.buf[l.start:l.end])
		l.base += int64(l.start)
		l.scan -= l.start
		l.end = n
		l.start = 0
	}
	if l.end == len(l.buf) {
		grown := make([]byte, 2*len(l.buf))
		copy(grown, l.buf[:l.end])
		l.buf = grown
	}
	n, err := l.r.Read(l.buf[l.end:])
	l.end += n
	return n, err
}

// Reset makes l read r from offset and line, dropping buffered data; the
// buffer is kept.
func (l *LineReader) Reset(r io.Reader, offset int64, line int) {
	*l = LineReader{r: r, csv: l.csv, buf: l.buf, base: offset, line: max(line, 1), skipBOM: offset == 0}
}

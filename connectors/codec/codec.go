package codec

import (
	"errors"
	"unicode/utf8"

	"github.com/eddy-stream/eddy/pipeline"
)

// Format is a line format: json (JSON lines, one object per line), csv (a
// header row, then one record per row) or text (each line is {"line": ...}).
type Format string

// The formats.
const (
	JSON Format = "json"
	CSV  Format = "csv"
	Text Format = "text"
)

// DecodeOptions are the format keys of a source, inlined into its config.
type DecodeOptions struct {
	// Format is json, csv or text.
	Format Format `yaml:"format" enum:"json,csv,text"`
	// CSVDelimiter is the field separator of csv, one character.
	CSVDelimiter string `yaml:"csv_delimiter"`
}

// DefaultDecodeOptions returns the defaults with the given format.
func DefaultDecodeOptions(f Format) DecodeOptions {
	return DecodeOptions{Format: f, CSVDelimiter: ","}
}

// Validate checks the format keys; the errors are pipeline.FieldErr.
func (o *DecodeOptions) Validate() error {
	var errs []error
	switch o.Format {
	case JSON, CSV, Text:
	default:
		errs = append(errs, pipeline.FieldErr("format", "must be json, csv or text, not %q", o.Format))
	}
	if err := checkDelimiter(o.CSVDelimiter); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Delimiter returns the csv delimiter as a byte.
func (o *DecodeOptions) Delimiter() byte { return delimiter(o.CSVDelimiter) }

// NewDecoder returns a decoder for the options' format. Call it once per
// input (file): a csv decoder reads that input's header.
func (o *DecodeOptions) NewDecoder() Decoder { return NewDecoder(o.Format, o.Delimiter()) }

// EncodeOptions are the format keys of a sink, inlined into its config.
type EncodeOptions struct {
	// Format is json or csv.
	Format Format `yaml:"format" enum:"json,csv"`
	// Columns are the csv columns, in order; required with csv.
	Columns []string `yaml:"columns"`
	// CSVDelimiter is the field separator of csv, one character.
	CSVDelimiter string `yaml:"csv_delimiter"`
}

// DefaultEncodeOptions returns the defaults: json.
func DefaultEncodeOptions() EncodeOptions {
	return EncodeOptions{Format: JSON, CSVDelimiter: ","}
}

// Validate checks the format keys; the errors are pipeline.FieldErr.
func (o *EncodeOptions) Validate() error {
	var errs []error
	switch o.Format {
	case JSON:
		if len(o.Columns) > 0 {
			errs = append(errs, pipeline.FieldErr("columns", "only applies to format csv (json writes every field)"))
		}
	case CSV:
		if len(o.Columns) == 0 {
			errs = append(errs, pipeline.FieldErr("columns", "format csv needs the list of columns to write, in order"))
		}
		seen := map[string]bool{}
		for _, c := range o.Columns {
			if seen[c] {
				errs = append(errs, pipeline.FieldErr("columns", "column %q is listed twice", c))
			}
			seen[c] = true
		}
	default:
		errs = append(errs, pipeline.FieldErr("format", "must be json or csv, not %q", o.Format))
	}
	if err := checkDelimiter(o.CSVDelimiter); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NewEncoder returns an encoder for the options' format.
func (o *EncodeOptions) NewEncoder() Encoder {
	if o.Format == CSV {
		return &CSVEncoder{Columns: o.Columns, Comma: delimiter(o.CSVDelimiter)}
	}
	return &JSONEncoder{}
}

func checkDelimiter(d string) error {
	r, size := utf8.DecodeRuneInString(d)
	if size != len(d) || size != 1 || r == '"' || r == '\n' || r == '\r' {
		return pipeline.FieldErr("csv_delimiter", "must be one ASCII character other than a quote or a newline, not %q", d)
	}
	return nil
}

func delimiter(d string) byte {
	if len(d) == 1 {
		return d[0]
	}
	return ','
}

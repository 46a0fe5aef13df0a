package codec

import "errors"

// Sentinel errors of package codec; test with errors.Is.
var (
	// ErrRead wraps a failure of the reader under a Stream (a broken
	// connection), as opposed to input that does not decode.
	ErrRead = errors.New("read failed")
)

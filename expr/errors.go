package expr

import "errors"

// Sentinel errors of package expr; test with errors.Is.
var (
	// ErrNotFinite marks an expression result that is, or holds, a NaN or
	// an infinite float (a division by zero): an error of the record.
	ErrNotFinite = errors.New("not a finite number")
)

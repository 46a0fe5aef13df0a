package operators

import "errors"

// Sentinel errors of package operators; test with errors.Is. A record that
// fails with one of them goes to the step's on_error policy.
var (
	// ErrResultType marks an expression whose result has the wrong type for
	// its step: a filter that does not return a bool, a flat_map that does
	// not return a list.
	ErrResultType = errors.New("expression returned the wrong type")
)

package agg

import "errors"

// Sentinel errors; test them with errors.Is.
var (
	// ErrNotCompiled is returned by Row methods when Specs.Compile has not
	// run (or failed).
	ErrNotCompiled = errors.New("aggregates are not compiled")
	// ErrBadInput wraps a record value an aggregate cannot take, such as a
	// string given to sum or a map given to min.
	ErrBadInput = errors.New("bad aggregate input")
	// ErrNotRetractable is returned by Retract when an aggregate (min, max,
	// first, last, reduce) cannot take a record back out.
	ErrNotRetractable = errors.New("aggregate cannot be retracted")
	// ErrRetractMissing is returned by Retract when collect is asked to
	// remove a value it does not hold.
	ErrRetractMissing = errors.New("retracted value was never added")
	// ErrNotMergeable is returned by Merge for a reduce without a merge
	// expression.
	ErrNotMergeable = errors.New("aggregate cannot merge partial results")
	// ErrMismatch is returned when two rows, or a row and a snapshot, were
	// made from different aggregate specs.
	ErrMismatch = errors.New("aggregate state does not match the specs")
)

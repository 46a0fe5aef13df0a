package pipeline

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// OnError is a step's policy for a record that fails.
type OnError int

const (
	// OnErrorFail fails the task (and so the run, or a restart): the
	// default, so that no record is lost unless the file says so.
	OnErrorFail OnError = iota
	// OnErrorSkip drops the record, counts it and logs it (the first at
	// warn level, the others at debug level).
	OnErrorSkip
	// OnErrorDeadLetter sends the record, the error text and the step id to
	// the side stream "<step>.errors".
	OnErrorDeadLetter
)

func (p OnError) String() string {
	switch p {
	case OnErrorSkip:
		return "skip"
	case OnErrorDeadLetter:
		return "dead_letter"
	}
	return "fail"
}

// UnmarshalYAML parses fail | skip | dead_letter.
func (p *OnError) UnmarshalYAML(n *yaml.Node) error {
	switch n.Value {
	case "skip":
		*p = OnErrorSkip
	case "fail":
		*p = OnErrorFail
	case "dead_letter":
		*p = OnErrorDeadLetter
	default:
		return fmt.Errorf("on_error must be fail, skip or dead_letter, not %q", n.Value)
	}
	return nil
}

// ErrorsStream is the name of the side stream that carries a step's dead letters.
const ErrorsStream = "errors"

// ErrorHandler applies a step's on_error policy. It is used on the task
// goroutine only.
type ErrorHandler struct {
	Policy OnError
	step   string
	dead   Emitter
	count  prometheus.Counter
	logger *slog.Logger
	one    [1]Record
	warned bool
}

// NewErrorHandler returns the handler of one subtask; dead is the emitter of
// the step's errors stream (used with OnErrorDeadLetter only).
func NewErrorHandler(info SubtaskInfo, policy OnError, dead Emitter) *ErrorHandler {
	h := &ErrorHandler{Policy: policy, step: info.ID, dead: dead, logger: info.Logger}
	if info.Metrics != nil {
		h.count = info.Metrics.RecordErrors(info, policy)
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	return h
}

// Handle applies the policy to rec, which failed with err. It returns a
// non-nil error when the task must fail (policy fail, or the dead-letter
// stream failed). The record must not be emitted downstream by the caller.
func (h *ErrorHandler) Handle(rec Record, err error) error {
	if h.count != nil {
		h.count.Inc()
	}
	switch h.Policy {
	case OnErrorFail:
		return fmt.Errorf("%w in %q: %w", ErrRecordFailed, h.step, err)
	case OnErrorDeadLetter:
		h.one[0] = DeadLetter(h.step, rec, err)
		return h.dead.Emit(h.one[:])
	}
	if !h.warned {
		h.warned = true
		h.logger.Warn("skipping a record that failed (on_error: skip); later ones are logged at debug level and counted in eddy_record_errors_total",
			"id", h.step, "error", err)
		return nil
	}
	h.logger.Debug("record skipped", "id", h.step, "error", err)
	return nil
}

// DeadLetter builds the record sent to "<step>.errors": the failed record
// under "record", the error text under "error" and the step id under "step".
func DeadLetter(step string, rec Record, err error) Record {
	return Record{
		Fields: map[string]any{"record": rec.Fields, "error": err.Error(), "step": step},
		Time:   rec.Time,
		Meta:   rec.Meta,
	}
}

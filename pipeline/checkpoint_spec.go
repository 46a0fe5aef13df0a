package pipeline

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// CheckpointMode is exactly_once (aligned barriers) or at_least_once.
type CheckpointMode int

const (
	ExactlyOnceMode CheckpointMode = iota
	AtLeastOnceMode
)

func (m CheckpointMode) String() string {
	if m == AtLeastOnceMode {
		return "at_least_once"
	}
	return "exactly_once"
}

// UnmarshalYAML parses exactly_once | at_least_once.
func (m *CheckpointMode) UnmarshalYAML(n *yaml.Node) error {
	switch n.Value {
	case "exactly_once":
		*m = ExactlyOnceMode
	case "at_least_once":
		*m = AtLeastOnceMode
	default:
		return fmt.Errorf("mode must be exactly_once or at_least_once, not %q", n.Value)
	}
	return nil
}

// CheckpointSpec is the `checkpoint:` block (DESIGN.md §1).
type CheckpointSpec struct {
	Interval          Duration       `yaml:"interval"`
	Mode              CheckpointMode `yaml:"mode"`
	Timeout           Duration       `yaml:"timeout"`
	MinPause          Duration       `yaml:"min_pause"`
	MaxConcurrent     int            `yaml:"max_concurrent"`
	TolerableFailures int            `yaml:"tolerable_failures"`
	Retain            int            `yaml:"retain"`
}

// DefaultCheckpoint returns the checkpoint defaults.
func DefaultCheckpoint() CheckpointSpec {
	return CheckpointSpec{
		Interval: Duration(10 * time.Second), Timeout: Duration(10 * time.Minute),
		MinPause: 0, MaxConcurrent: 1, TolerableFailures: 0, Retain: 3,
	}
}

// StateSpec is the `state:` block.
type StateSpec struct {
	// Backend is memory (heap, snapshotted to the checkpoint store).
	Backend string `yaml:"backend"`
	// Dir is the state directory; a sub-directory per pipeline name. Empty:
	// the runner's (--state-dir, EDDY_STATE_DIR, ./eddy-state).
	Dir string `yaml:"dir"`
}

func (p *problems) checkCheckpoint(root *yaml.Node, s *Spec) {
	if s.State.Backend != "memory" {
		p.at(pathValue(root, "state.backend"), "state.backend %q: this eddy has the memory backend (bbolt comes later)", s.State.Backend)
	}
	if s.Checkpoint == nil {
		return
	}
	_, n := mappingValue(root, "checkpoint")
	at := func(key string) *yaml.Node {
		if v := pathValue(n, key); v != nil {
			return v
		}
		return n
	}
	c := s.Checkpoint
	if c.Interval <= 0 {
		p.at(at("interval"), "checkpoint.interval must be positive")
	}
	if c.Timeout <= 0 {
		p.at(at("timeout"), "checkpoint.timeout must be positive")
	}
	if c.MaxConcurrent < 1 {
		p.at(at("max_concurrent"), "checkpoint.max_concurrent must be at least 1")
	}
	if c.TolerableFailures < 0 {
		p.at(at("tolerable_failures"), "checkpoint.tolerable_failures must not be negative")
	}
	if c.Retain < 1 {
		p.at(at("retain"), "checkpoint.retain must be at least 1")
	}
}

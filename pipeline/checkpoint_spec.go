package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/eddy-stream/eddy/statestore"
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

// CheckpointSpec is the `checkpoint:` block (docs/pipeline.md).
type CheckpointSpec struct {
	Interval          Duration       `yaml:"interval"`
	Mode              CheckpointMode `yaml:"mode"`
	Timeout           Duration       `yaml:"timeout"`
	MinPause          Duration       `yaml:"min_pause"`
	MaxConcurrent     int            `yaml:"max_concurrent"`
	TolerableFailures int            `yaml:"tolerable_failures"`
	Retain            int            `yaml:"retain"`
	// Incremental makes the keyed state's checkpoint parts deltas on the
	// last completed checkpoint's (docs/state.md, "Incremental
	// checkpoints").
	Incremental bool `yaml:"incremental"`
	// changelog, with Incremental, sends the deltas to group mode's
	// changelog topics (statestore.Options.Changelog): set by a group
	// generation's spec, never by a file.
	changelog bool
	// OnSigterm is what `eddy run` does on SIGTERM.
	OnSigterm SigtermAction `yaml:"on_sigterm"`
}

// SigtermAction is checkpoint.on_sigterm: how `eddy run` stops on SIGTERM
// (docs/checkpoints.md, "Stopping: on_sigterm"). The run's signal handling
// reads it; the job itself knows nothing of signals.
type SigtermAction int

const (
	// SigtermSavepoint stops with a savepoint: the final checkpoint is
	// taken as a savepoint and written to the savepoints directory.
	SigtermSavepoint SigtermAction = iota
	// SigtermCheckpoint stops with a final checkpoint.
	SigtermCheckpoint
	// SigtermNone stops without a final checkpoint: the next run restores
	// the latest periodic one.
	SigtermNone
)

var sigtermActions = []string{"savepoint", "checkpoint", "none"}

func (a SigtermAction) String() string { return nameOf(a, sigtermActions, "SigtermAction") }

// UnmarshalYAML parses savepoint | checkpoint | none.
func (a *SigtermAction) UnmarshalYAML(n *yaml.Node) error {
	return parseName(n, "on_sigterm", sigtermActions, a)
}

// nameOf returns the name of v, an index into names.
func nameOf[T ~int](v T, names []string, typ string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, int(v))
}

// parseName sets *v to the index of n's value in names, or fails with
// "key must be a, b or c, not ..." and the closest name.
func parseName[T ~int](n *yaml.Node, key string, names []string, v *T) error {
	if i := slices.Index(names, n.Value); i >= 0 {
		*v = T(i)
		return nil
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	msg := fmt.Sprintf("%s must be %s, not %q", key, list, n.Value)
	if best := Closest(n.Value, names); best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return errors.New(msg)
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
	// Backend is memory (keyed state on the heap, snapshotted to the
	// checkpoint store) or bbolt (live state in a file per stateful step
	// subtask under <dir>/<name>/live, with a cache of CacheEntries keys).
	Backend string `yaml:"backend" enum:"memory,bbolt"`
	// Dir is the state directory; a sub-directory per pipeline name. Empty:
	// the runner's (--state-dir, EDDY_STATE_DIR, ./eddy-state).
	Dir string `yaml:"dir"`
	// CacheEntries bounds the bbolt backend's cache, in keys per stateful
	// step subtask. 0: statestore.DefaultCacheEntries.
	CacheEntries int `yaml:"cache_entries"`
}

func (p *problems) checkCheckpoint(root *yaml.Node, s *Spec) {
	switch s.State.Backend {
	case "memory", "bbolt":
	default:
		hint := ""
		if best := Closest(s.State.Backend, []string{"memory", "bbolt"}); best != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", best)
		}
		p.at(pathValue(root, "state.backend"), "state.backend must be memory (state on the heap) or bbolt (live state on disk, for state larger than memory), not %q%s", s.State.Backend, hint)
	}
	if s.State.CacheEntries < 0 {
		p.at(pathValue(root, "state.cache_entries"), "state.cache_entries must not be negative (0: the default, %d keys)", statestore.DefaultCacheEntries)
	} else if s.State.CacheEntries > 0 && s.State.Backend == "memory" {
		p.at(pathValue(root, "state.cache_entries"), "state.cache_entries sizes the bbolt backend's cache: set state.backend: bbolt, or remove it")
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

package pipeline

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// RestartSpec is the `restart:` block: what a run does when a task fails.
// The job restarts in the same process from the latest complete checkpoint.
type RestartSpec struct {
	// Strategy is none, fixed_delay, failure_rate or exponential_delay.
	Strategy string `yaml:"strategy" enum:"none,fixed_delay,failure_rate,exponential_delay"`
	// fixed_delay: at most Attempts restarts, Delay apart.
	Attempts int      `yaml:"attempts"`
	Delay    Duration `yaml:"delay"`
	// failure_rate: fail for good when more than MaxFailures happen within
	// Interval; restarts wait Delay.
	MaxFailures int      `yaml:"max_failures"`
	Interval    Duration `yaml:"interval"`
	// exponential_delay: the delay starts at Initial, is multiplied by
	// Multiplier after each failure up to Max, and goes back to Initial after
	// ResetAfter without a failure.
	Initial    Duration `yaml:"initial"`
	Max        Duration `yaml:"max"`
	Multiplier float64  `yaml:"multiplier"`
	ResetAfter Duration `yaml:"reset_after"`
}

// DefaultRestart returns the restart defaults (strategy none).
func DefaultRestart() RestartSpec {
	return RestartSpec{
		Strategy: "none", Attempts: 3, Delay: Duration(10 * time.Second),
		MaxFailures: 3, Interval: Duration(5 * time.Minute),
		Initial: Duration(time.Second), Max: Duration(5 * time.Minute), Multiplier: 2, ResetAfter: Duration(time.Hour),
	}
}

// MaxDelay is the longest the strategy waits before a restart.
func (r RestartSpec) MaxDelay() time.Duration {
	switch r.Strategy {
	case "fixed_delay", "failure_rate":
		return r.Delay.D()
	case "exponential_delay":
		return r.Max.D()
	}
	return 0
}

func (p *problems) checkRestart(root *yaml.Node, s *Spec) {
	_, n := mappingValue(root, "restart")
	if n == nil {
		return
	}
	at := func(key string) *yaml.Node {
		if v := pathValue(n, key); v != nil {
			return v
		}
		return n
	}
	r := s.Restart
	switch r.Strategy {
	case "none", "fixed_delay", "failure_rate", "exponential_delay":
	default:
		p.at(at("strategy"), "restart.strategy must be none, fixed_delay, failure_rate or exponential_delay, not %q", r.Strategy)
		return
	}
	// Group mode commits every commit_interval: a generation that failed
	// goes on from the last commit.
	if r.Strategy != "none" && s.Checkpoint == nil && s.Group == nil {
		p.at(at("strategy"), "restart needs a checkpoint block: without one a restart would start from the beginning and repeat the output")
	}
	if r.Attempts < 0 || r.MaxFailures < 1 {
		p.at(n, "restart.attempts must not be negative and restart.max_failures must be at least 1")
	}
	if r.Multiplier < 1 {
		p.at(at("multiplier"), "restart.multiplier must be at least 1")
	}
	if r.Initial <= 0 || r.Max < r.Initial {
		p.at(at("max"), "restart.initial must be positive and restart.max at least restart.initial")
	}
}

// RestartPolicy decides, after each failure, whether and when the job
// restarts. It is used by one goroutine.
type RestartPolicy struct {
	spec     RestartSpec
	restarts int
	failures []time.Time
	delay    time.Duration
	last     time.Time
}

// NewRestartPolicy returns the policy of spec.
func NewRestartPolicy(spec RestartSpec) *RestartPolicy {
	return &RestartPolicy{spec: spec, delay: spec.Initial.D()}
}

// Next records a failure at now and returns how long to wait before the
// restart, or an error saying why the job must not restart.
func (p *RestartPolicy) Next(now time.Time) (time.Duration, error) {
	s := p.spec
	switch s.Strategy {
	case "fixed_delay":
		if p.restarts >= s.Attempts {
			return 0, fmt.Errorf("restart strategy fixed_delay: the %d restart attempts are used up", s.Attempts)
		}
		p.restarts++
		return s.Delay.D(), nil
	case "failure_rate":
		p.failures = append(p.failures, now)
		for len(p.failures) > 0 && now.Sub(p.failures[0]) > s.Interval.D() {
			p.failures = p.failures[1:]
		}
		if len(p.failures) > s.MaxFailures {
			return 0, fmt.Errorf("restart strategy failure_rate: %d failures within %s (at most %d)", len(p.failures), s.Interval.D(), s.MaxFailures)
		}
		return s.Delay.D(), nil
	case "exponential_delay":
		if !p.last.IsZero() && now.Sub(p.last) >= s.ResetAfter.D() {
			p.delay = s.Initial.D()
		}
		p.last = now
		d := p.delay
		p.delay = min(time.Duration(float64(p.delay)*s.Multiplier), s.Max.D())
		return d, nil
	}
	return 0, fmt.Errorf("restart strategy none")
}

// Package generator provides the `generator` source: deterministic test data
// computed by expressions over a record counter and seeded random helpers.
//
// Record i (0-based, global) is a function of (seed, i) only: subtask k of p
// generates i = k, k+p, k+2p, ... (after a restore at another parallelism,
// those of them that no old subtask generated: Position), and before each
// record the random helpers are re-seeded from (seed, i), so the output
// does not depend on the parallelism, on timing or on restores.
//
// It imports pipeline only.
package generator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "generator",
		Summary: "deterministic test records from expressions over a counter i and seeded random helpers",
		New:     func() pipeline.SourceConfig { return &Config{} },
	})
}

// Config is the `generator` source's configuration.
type Config struct {
	// Count is the number of records over all subtasks; 0 = unbounded.
	Count int `yaml:"count"`
	// Rate is records per second over all subtasks; 0 = as fast as possible.
	Rate float64 `yaml:"rate"`
	// Seed seeds the random helpers.
	Seed int64 `yaml:"seed"`
	// Fields are the record's fields: expressions over i, seed and the helpers.
	Fields expr.Map `yaml:"fields" eddy:"required"`
}

// Validate checks the keys.
func (c *Config) Validate() error {
	var errs []error
	if c.Count < 0 {
		errs = append(errs, pipeline.FieldErr("count", "must be 0 (unbounded) or more, not %d", c.Count))
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		errs = append(errs, pipeline.FieldErr("rate", "must be 0 (as fast as possible) or a positive number of records per second"))
	}
	seen := map[string]bool{}
	for _, f := range c.Fields {
		if seen[f.Name] {
			errs = append(errs, pipeline.FieldErr("fields", "field %q is given twice", f.Name))
		}
		seen[f.Name] = true
	}
	return errors.Join(errs...)
}

// Bounded reports whether the input ends: count > 0.
func (c *Config) Bounded() bool { return c.Count > 0 }

// Rescalable is true: a restore at another parallelism hands every old
// subtask's position to each new one, which generates what none of them
// did (Position).
func (c *Config) Rescalable() bool { return true }

// DescribePosition decodes a checkpointed position for `eddy state
// inspect` (pipeline.PositionDescriber): a Position, as {"subtask",
// "parallelism", "base", "next", "produced"}.
func (c *Config) DescribePosition(b []byte) (any, error) {
	return DecodePosition(b)
}

// Guarantee is exactly-once: the generator replays from its position.
func (c *Config) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// ExprEnv returns the environment the fields are compiled with: the names
// and types of what Env provides at run time.
func (c *Config) ExprEnv() map[string]any { return newEnv(c.Seed, &splitMix{}) }

// NewSource returns the source of one subtask.
func (c *Config) NewSource() (pipeline.Source, error) { return &source{cfg: c}, nil }

// Environment of the fields' expressions. The random helpers draw from an
// RNG re-seeded from (seed, i) before each record. Float parameters take any
// number (int or float); an int parameter must be given an int.
//
//	i                        int: the record's 0-based global index
//	seed                     int: the seed key
//	rand_int(lo, hi)         int uniform in [lo, hi] (both included)
//	rand_float()             float uniform in [0, 1)
//	rand_uniform(lo, hi)     float uniform in [lo, hi)
//	rand_normal(mean, sd)    float, normally distributed
//	rand_bool(p)             true with probability p
//	rand_choice(list)        one element of a non-empty list
//	rand_string(n)           n random characters from [a-z0-9]
//	rand_uuid()              a random (version 4 format) UUID string
func newEnv(seed int64, src *splitMix) map[string]any {
	r := rand.New(src)
	return map[string]any{
		"i":    0,
		"seed": seed,
		"rand_int": func(lo, hi int) (int, error) {
			if hi < lo {
				return 0, fmt.Errorf("rand_int(%d, %d): hi must not be less than lo", lo, hi)
			}
			span := uint64(hi - lo)
			if span == math.MaxUint64 {
				return int(r.Uint64()), nil
			}
			return lo + int(r.Uint64N(span+1)), nil
		},
		"rand_float": func() float64 { return r.Float64() },
		"rand_uniform": func(lo, hi any) (float64, error) {
			l, err := toFloat("rand_uniform", lo)
			if err != nil {
				return 0, err
			}
			h, err := toFloat("rand_uniform", hi)
			if err != nil {
				return 0, err
			}
			return l + r.Float64()*(h-l), nil
		},
		"rand_normal": func(mean, stddev any) (float64, error) {
			m, err := toFloat("rand_normal", mean)
			if err != nil {
				return 0, err
			}
			s, err := toFloat("rand_normal", stddev)
			if err != nil {
				return 0, err
			}
			return m + s*r.NormFloat64(), nil
		},
		"rand_bool": func(p any) (bool, error) {
			f, err := toFloat("rand_bool", p)
			if err != nil {
				return false, err
			}
			return r.Float64() < f, nil
		},
		"rand_choice": func(xs []any) (any, error) {
			if len(xs) == 0 {
				return nil, errors.New("rand_choice: the list is empty")
			}
			return xs[r.IntN(len(xs))], nil
		},
		"rand_string": func(n int) (string, error) {
			if n < 0 || n > 1<<20 {
				return "", fmt.Errorf("rand_string(%d): n must be between 0 and 1048576", n)
			}
			const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
			b := make([]byte, n)
			for j := range b {
				b[j] = alphabet[r.IntN(len(alphabet))]
			}
			return string(b), nil
		},
		"rand_uuid": func() string {
			var b [16]byte
			binary.BigEndian.PutUint64(b[:8], r.Uint64())
			binary.BigEndian.PutUint64(b[8:], r.Uint64())
			b[6] = b[6]&0x0f | 0x40
			b[8] = b[8]&0x3f | 0x80
			return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
		},
	}
}

func toFloat(fn string, v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case float32:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case uint:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("%s: want a number, not %T", fn, v)
}

// splitMix is SplitMix64, a rand.Source whose whole state is one word, so
// re-seeding per record costs nothing.
type splitMix struct{ state uint64 }

func (s *splitMix) Uint64() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// seed makes the state a function of (seed, i) only.
func (s *splitMix) seed(seed int64, i int) {
	s.state = uint64(seed)*0xd1342543de82ef95 ^ uint64(i)*0x9e3779b97f4a7c15
}

const (
	// maxBatch is the most records one Read returns.
	maxBatch = 1024
	// maxSkip is the most counters one Read passes over because a run at
	// another parallelism generated them.
	maxSkip = 64 * maxBatch
	// maxBurst is how far a rate-limited generator may fall behind and catch
	// up at full speed (after backpressure, say).
	maxBurst = 100 * time.Millisecond
)

// source is the generator of one subtask.
type source struct {
	cfg     *Config
	id      string
	vm      expr.VM
	rng     splitMix
	env     map[string]any
	next    int    // the next counter this subtask considers
	step    int    // the parallelism
	split   int    // the subtask: one split per subtask
	skip    []Run  // counters a run at another parallelism generated
	skipEnd int    // the end of the last of skip
	prefix  []byte // the subtask's encoded position without Next
	pacer   *Pacer // rate limiting; nil: as fast as possible
	// done and total are the subtask's counters passed and all it has,
	// for Progress (another goroutine); total stays 0 without count.
	done, total atomic.Int64
}

// Open starts at counter Subtask, or where the restored position says; a
// checkpoint taken at another parallelism gives it what is left of its
// counters (Position).
func (s *source) Open(_ context.Context, sc *pipeline.SourceContext) error {
	s.id = sc.ID
	s.step = max(sc.Parallelism, 1)
	s.env = newEnv(s.cfg.Seed, &s.rng)
	s.split = sc.Subtask
	pos := Position{Subtask: sc.Subtask, Parallelism: s.step, Next: sc.Subtask}
	switch {
	case sc.RestoredAll != nil:
		p, err := rescale(sc.RestoredAll, sc.Subtask, s.step)
		if err != nil {
			return fmt.Errorf("generator source %q: restore at parallelism %d: %w", s.id, s.step, err)
		}
		pos = p
		sc.Position = EncodePosition(pos)
	case sc.Restored != nil:
		p, err := DecodePosition(sc.Restored)
		if err != nil {
			return fmt.Errorf("generator source %q: restore: %w", s.id, err)
		}
		if p.Parallelism != 0 && (p.Parallelism != s.step || p.Subtask != sc.Subtask) {
			return fmt.Errorf("generator source %q: restore: the position of subtask %d of %d is not subtask %d of %d's", s.id, p.Subtask, p.Parallelism, sc.Subtask, s.step)
		}
		if p.Parallelism == 0 { // version 1: Next only
			// Kept in version 2 from now on, also by a checkpoint taken
			// before the first read, so that it restores at any
			// parallelism.
			p.Subtask, p.Parallelism = sc.Subtask, s.step
			sc.Position = EncodePosition(p)
		}
		pos = p
	}
	s.next, s.skip = pos.Next, pos.Produced
	for _, r := range s.skip {
		s.skipEnd = max(s.skipEnd, r.To)
	}
	s.prefix = positionPrefix(pos)
	if s.cfg.Count > 0 {
		s.total.Store(s.counters(s.cfg.Count))
		s.done.Store(s.counters(s.next))
	}
	if s.cfg.Rate > 0 {
		s.pacer = NewPacer(time.Duration(float64(time.Second) * float64(s.step) / s.cfg.Rate))
	}
	return nil
}

// skipped tells whether counter i was generated by a run at another
// parallelism.
func (s *source) skipped(i int) bool {
	if i >= s.skipEnd {
		return false
	}
	for _, r := range s.skip {
		if r.contains(i) {
			return true
		}
	}
	return false
}

// Read generates the records due now, at most maxBatch; it passes over at
// most maxSkip counters generated before, so that it returns in time.
func (s *source) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.cfg.Count > 0 && s.next >= s.cfg.Count {
		return io.EOF
	}
	n := maxBatch
	if s.pacer != nil {
		due, err := s.pacer.Wait(ctx, n)
		if err != nil {
			return err
		}
		n = min(n, due)
	}
	for skipped := 0; n > 0 && skipped < maxSkip && (s.cfg.Count == 0 || s.next < s.cfg.Count); s.next += s.step {
		if s.skipped(s.next) {
			skipped++
			continue
		}
		fields, err := s.generate(s.next)
		if err != nil {
			return err
		}
		b.Records = append(b.Records, pipeline.Record{Fields: fields, Time: pipeline.NoTime})
		n--
	}
	b.Position = withNext(s.prefix, s.next)
	b.Split = s.split
	s.done.Store(s.counters(s.next))
	if s.cfg.Count > 0 && s.next >= s.cfg.Count {
		b.SplitDone = true
		return io.EOF
	}
	return nil
}

// Pacer paces a source at a fixed interval between records: it lets it
// fall at most maxBurst behind before it stops catching up. The generator
// and the nexmark source use it for their rates.
type Pacer struct {
	interval time.Duration
	due      time.Time // when the next record is due
}

// NewPacer returns a pacer of one record every interval, the first due now.
func NewPacer(interval time.Duration) *Pacer {
	return &Pacer{interval: interval, due: time.Now()}
}

// Wait waits until the next record is due and returns how many are due,
// at most max; ctx ends the wait.
func (p *Pacer) Wait(ctx context.Context, max int) (int, error) {
	now := time.Now()
	if wait := p.due.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case now = <-t.C:
		}
	}
	if behind := now.Sub(p.due); behind > maxBurst {
		p.due = now.Add(-maxBurst)
	}
	n := min(int(now.Sub(p.due)/p.interval)+1, max)
	p.due = p.due.Add(time.Duration(n) * p.interval)
	return n, nil
}

// generate evaluates the fields of record i into a new map.
func (s *source) generate(i int) (map[string]any, error) {
	s.env["i"] = i
	s.rng.seed(s.cfg.Seed, i)
	fields := make(map[string]any, len(s.cfg.Fields))
	for j := range s.cfg.Fields {
		f := &s.cfg.Fields[j]
		v, err := s.vm.Eval(&f.Expr, s.env)
		if err != nil {
			return nil, fmt.Errorf("generator source %q: record %d, field %q: %w", s.id, i, f.Name, err)
		}
		fields[f.Name] = v
	}
	return fields, nil
}

// counters returns how many of the subtask's counters are below n: those
// it passed once its next counter is n. Counters a run at another
// parallelism generated count as passed.
func (s *source) counters(n int) int64 {
	return int64(max(0, (n-s.split+s.step-1)/s.step))
}

// Progress returns the counters the subtask passed and all it has below
// count (pipeline.Progresser); total 0 (unknown) without count, or before
// Open.
func (s *source) Progress() (done, total int64) {
	total = s.total.Load()
	return min(s.done.Load(), total), total
}

// Close does nothing.
func (s *source) Close(context.Context) error { return nil }

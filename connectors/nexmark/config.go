package nexmark

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "nexmark",
		Summary: "the Nexmark benchmark's events (people, auctions, bids) as its reference generator makes them",
		New:     func() pipeline.SourceConfig { return NewConfig() },
	})
}

// DefaultBaseTime is the event time of the timeline's start when
// base_time is not given: 2015-07-15T00:00:00Z, the fixed base time of
// Apache Beam's Nexmark, so that runs are reproducible.
const DefaultBaseTime int64 = 1436918400000

// Config is the `nexmark` source's configuration. The defaults are the
// reference's (NexmarkConfiguration).
type Config struct {
	// Count is the number of events over all subtasks; 0 = unbounded.
	Count int64 `yaml:"count"`
	// Rate is events per second of event time (first-event.rate).
	Rate float64 `yaml:"rate"`
	// BaseTime is the event time the timeline starts at.
	BaseTime BaseTime `yaml:"base_time"`
	// EmitRate paces the source: events per second of wall-clock time over
	// all subtasks; 0 = as fast as possible.
	EmitRate float64 `yaml:"emit_rate"`
	// The proportions of persons, auctions and bids (person.proportion,
	// auction.proportion, bid.proportion).
	PersonProportion  int `yaml:"person_proportion"`
	AuctionProportion int `yaml:"auction_proportion"`
	BidProportion     int `yaml:"bid_proportion"`
	// The hot ratios: an auction is by a hot seller, a bid for a hot
	// auction or by a hot bidder, unless a draw in [0, ratio) is 0
	// (auction.hot-ratio.sellers, bid.hot-ratio.auctions,
	// bid.hot-ratio.bidders).
	HotAuctionRatio int `yaml:"hot_auction_ratio"`
	HotSellersRatio int `yaml:"hot_sellers_ratio"`
	HotBiddersRatio int `yaml:"hot_bidders_ratio"`

	// now is base_time: now resolved once, for every subtask of the run.
	now func() int64
}

// NewConfig returns the reference's defaults.
func NewConfig() *Config {
	return &Config{
		Rate:             10_000,
		BaseTime:         BaseTime{Millis: DefaultBaseTime},
		PersonProportion: 1, AuctionProportion: 3, BidProportion: 46,
		HotAuctionRatio: 2, HotSellersRatio: 4, HotBiddersRatio: 4,
		now: sync.OnceValue(func() int64 { return time.Now().UnixMilli() }),
	}
}

// BaseTime is base_time: epoch milliseconds, or now.
type BaseTime struct {
	Millis int64
	// Now: the wall clock when the run first starts.
	Now bool
}

// UnmarshalYAML reads an integer or `now`.
func (b *BaseTime) UnmarshalYAML(n *yaml.Node) error {
	v := strings.TrimSpace(n.Value)
	if n.Kind == yaml.ScalarNode && v == "now" {
		*b = BaseTime{Now: true}
		return nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("must be epoch milliseconds (an integer) or now, not %q", v)
	}
	*b = BaseTime{Millis: ms}
	return nil
}

// JSONSchema describes base_time.
func (BaseTime) JSONSchema() map[string]any {
	return map[string]any{"anyOf": []any{
		map[string]any{"type": "integer"},
		map[string]any{"const": "now"},
		map[string]any{"$ref": "#/$defs/env_ref"}, // a ${VAR} reference, as every scalar may be
	}, "description": "epoch milliseconds, or now"}
}

// Validate checks the keys.
func (c *Config) Validate() error {
	var errs []error
	if c.Count < 0 {
		errs = append(errs, pipeline.FieldErr("count", "must be 0 (unbounded) or more, not %d", c.Count))
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		errs = append(errs, pipeline.FieldErr("rate", "must be a positive number of events per second of event time"))
	}
	if c.EmitRate < 0 || math.IsNaN(c.EmitRate) || math.IsInf(c.EmitRate, 0) {
		errs = append(errs, pipeline.FieldErr("emit_rate", "must be 0 (as fast as possible) or a positive number of events per second"))
	}
	for _, p := range []struct {
		key      string
		v, least int
	}{
		{"person_proportion", c.PersonProportion, 1}, {"auction_proportion", c.AuctionProportion, 1},
		{"bid_proportion", c.BidProportion, 0},
		{"hot_auction_ratio", c.HotAuctionRatio, 1}, {"hot_sellers_ratio", c.HotSellersRatio, 1},
		{"hot_bidders_ratio", c.HotBiddersRatio, 1},
	} {
		if p.v < p.least || p.v > math.MaxInt32 {
			errs = append(errs, pipeline.FieldErr(p.key, "must be an integer from %d to %d, not %d", p.least, math.MaxInt32, p.v))
		}
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
// inspect` (pipeline.PositionDescriber): a Position.
func (c *Config) DescribePosition(b []byte) (any, error) { return DecodePosition(b) }

// Guarantee is exactly-once: the source replays from its position.
func (c *Config) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// NewSource returns the source of one subtask.
func (c *Config) NewSource() (pipeline.Source, error) { return &source{cfg: c}, nil }

// baseTime is the base time of a fresh start: base_time, or the wall
// clock when the first subtask asked (the same for all of them).
func (c *Config) baseTime() int64 {
	if c.BaseTime.Now {
		return c.now()
	}
	return c.BaseTime.Millis
}

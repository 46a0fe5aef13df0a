package nexmark

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The ids every query file of configs/nexmark uses (configs/nexmark/README.md):
// the source of the events and the sink of the query's result.
const (
	SourceID = "nexmark"
	SinkID   = "out"
)

// Setup is how a query runs in the benchmark.
type Setup struct {
	// Events is the number of events the source generates (its count).
	Events int64
	// Rate, if positive, is the source's rate: events per second of event
	// time. 0 keeps the file's.
	Rate int64
	// Parallelism, if positive, is the pipeline's default parallelism
	// (top-level parallelism); steps that set their own keep it.
	Parallelism int
	// Checkpoint, if positive, is the interval of the checkpoint block the
	// run gets; 0 runs without one.
	Checkpoint time.Duration
	// ProfileDir, if set, is the folder RunQuery writes the CPU profile of
	// the run into (ProfileFile names it); it does not change the run.
	ProfileDir string
}

// ProfileFile is the name of the CPU profile of query run with s in
// s.ProfileDir: q5.pprof, or q5-checkpoint.pprof for a run with
// checkpoints.
func ProfileFile(query string, s Setup) string {
	if s.Checkpoint > 0 {
		return query + "-checkpoint.pprof"
	}
	return query + ".pprof"
}

// Queries returns the names of the query files (qN.yaml) in configs,
// q0, q1, ... in the order of their numbers.
func Queries(configs fs.FS) ([]string, error) {
	files, err := fs.Glob(configs, "q*.yaml")
	if err != nil {
		return nil, err
	}
	var qs []string
	for _, f := range files {
		q := strings.TrimSuffix(f, ".yaml")
		if _, err := strconv.Atoi(q[1:]); err == nil {
			qs = append(qs, q)
		}
	}
	slices.SortFunc(qs, func(a, b string) int {
		x, _ := strconv.Atoi(a[1:])
		y, _ := strconv.Atoi(b[1:])
		return cmp.Compare(x, y)
	})
	return qs, nil
}

// Prepare returns the text of a query file as the benchmark runs it: the
// source with id nexmark generates s.Events events (its count; its rate
// is s.Rate if set, and its emit_rate, wall-clock pacing, is dropped),
// every sink is a blackhole (keeping its id, from, parallelism and
// changelog), the checkpoint block is s.Checkpoint's or none, and the
// default parallelism is s.Parallelism if set.
func Prepare(text []byte, s Setup) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("a pipeline file is a mapping")
	}
	root := doc.Content[0]
	if err := setSource(root, s); err != nil {
		return nil, err
	}
	if err := setSinks(root); err != nil {
		return nil, err
	}
	deleteKey(root, "checkpoint")
	if s.Checkpoint > 0 {
		setKey(root, "checkpoint", mapping("interval", scalar(s.Checkpoint.String())))
	}
	if s.Parallelism > 0 {
		setKey(root, "parallelism", scalar(strconv.Itoa(s.Parallelism)))
	}
	return yaml.Marshal(&doc)
}

// setSource sets the count and rate of the source with id nexmark.
func setSource(root *yaml.Node, s Setup) error {
	src := findByID(value(root, "sources"), SourceID)
	if src == nil {
		return fmt.Errorf("no source with id %q", SourceID)
	}
	setKey(src, "count", scalar(strconv.FormatInt(s.Events, 10)))
	if s.Rate > 0 {
		setKey(src, "rate", scalar(strconv.FormatInt(s.Rate, 10)))
	}
	deleteKey(src, "emit_rate")
	return nil
}

// setSinks makes every sink a blackhole, and checks that there is one with
// id out.
func setSinks(root *yaml.Node) error {
	sinks := value(root, "sinks")
	if findByID(sinks, SinkID) == nil {
		return fmt.Errorf("no sink with id %q", SinkID)
	}
	for _, sink := range sinks.Content {
		bh := mapping("type", scalar("blackhole"))
		for _, k := range []string{"id", "from", "parallelism", "changelog"} {
			if v := value(sink, k); v != nil {
				setKey(bh, k, v)
			}
		}
		*sink = *bh
	}
	return nil
}

// findByID returns the entry of a sequence of mappings whose id is id.
func findByID(seq *yaml.Node, id string) *yaml.Node {
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil
	}
	for _, n := range seq.Content {
		if v := value(n, "id"); v != nil && v.Value == id {
			return n
		}
	}
	return nil
}

// value returns the value of key in mapping m, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setKey sets key in mapping m to v, in place if it is there.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

// deleteKey removes key from mapping m.
func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

// scalar returns a plain scalar, typed as YAML resolves it (10 an int,
// 10s a string).
func scalar(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Value: v}
}

// mapping returns a mapping of one key.
func mapping(key string, v *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{scalar(key), v}}
}

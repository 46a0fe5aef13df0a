package cmd

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// stateOptions are the flags of `eddy state inspect`.
type stateOptions struct {
	global     *globalOptions
	stateDir   string
	checkpoint int64
	step       string
	key        string
	pretty     bool
}

// AddFlags adds the flags of `state inspect`. --state-dir is read as by
// `checkpoints` (checkpointsOptions.stateDirFor).
func (o *stateOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.stateDir, keyStateDir, "", "with a pipeline file: the state directory, as for eddy run (default: "+envName(keyStateDir)+", else "+defaultStateDir+")")
	fs.Int64Var(&o.checkpoint, "checkpoint", 0, "the checkpoint id to show (default: the newest completed checkpoint)")
	fs.StringVar(&o.step, "step", "", "show only the source, step or sink with this id")
	fs.StringVar(&o.key, "key", "", "show only the keyed state and timers of this key (a string, or JSON: 42, true, [\"a\", 1]); leaves out sources and sinks")
	fs.BoolVar(&o.pretty, "pretty", false, "indent the JSON")
}

func newStateCommand(g *globalOptions) *cobra.Command {
	o := &stateOptions{global: g}
	c := &cobra.Command{
		Use:   "state",
		Short: "Show the state that a checkpoint or savepoint holds",
		Long: `State shows what a pipeline's checkpoints and savepoints hold, without
running the pipeline.

  eddy state inspect pipeline.yaml --pretty     the newest checkpoint, as JSON
  eddy state inspect sp.db --key sensor-7       one key's state in a savepoint`,
		Args: exactArgs(0, "a subcommand: inspect"),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	inspect := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Print the state of a checkpoint or savepoint as JSON, without running the pipeline",
		Long: `Inspect prints what a checkpoint or savepoint holds, as JSON: the
checkpoint's metadata, the position of every source subtask, the keyed
state and timers of every step, per key group and key, and the pending
committables of every two-phase-commit sink subtask. It only reads: no
pipeline code runs, and nothing in the file changes.

PATH is one of
  a pipeline file (.yaml, .yml)  its checkpoint store, found as by eddy checkpoints
                                 list (state.dir, else --state-dir, else
                                 EDDY_STATE_DIR, else ./eddy-state)
  a pipeline's state dir         <state dir>/<pipeline name>
  a checkpoint store file        <state dir>/<pipeline name>/checkpoints.db
  a savepoint file               from eddy checkpoints export

  eddy state inspect pipeline.yaml --pretty
  eddy state inspect eddy-state/sensor-stats --checkpoint 41 --step per_sensor
  eddy state inspect sp.db --key sensor-7

The newest completed checkpoint is shown unless --checkpoint says which.
Keys are shown decoded ("sensor-7", 42, ["a", 1]). --key selects one: the
text as a string key, and, when it parses as JSON, that value too (so
--key 42 matches the key 42 and the key "42"). Window namespaces are shown
as {"kind": "event-time", "start": ms}; timers as their domain, time and
namespace. Values are decoded from their CBOR encoding; source positions
as the connector decodes them when PATH is a pipeline file (file,
generator, kafka), committables and other positions as JSON or CBOR when
they parse, else base64.

A part whose checksum does not match is shown with an "error" and the
rest is still printed; the exit code is then 1. Exit codes: 0 ok, 1 a part
or the store cannot be read (corrupt, locked by a running pipeline), 2
invalid arguments (no such file or checkpoint, a step the checkpoint does
not have).`,
		Args: exactArgs(1, "a pipeline file, a state dir, a checkpoint store or a savepoint file"),
		RunE: func(c *cobra.Command, args []string) error {
			return o.inspect(c, args[0])
		},
	}
	o.AddFlags(inspect.Flags())
	c.AddCommand(inspect)
	return c
}

// The JSON output of `state inspect`.
type (
	inspectOutput struct {
		Checkpoint inspectMeta      `json:"checkpoint"`
		Sources    []inspectSource  `json:"sources"`
		Steps      []inspectStep    `json:"steps"`
		Sinks      []inspectSink    `json:"sinks"`
		Other      []inspectPartRef `json:"other_parts,omitempty"`
	}
	inspectMeta struct {
		ID        int64     `json:"id"`
		Pipeline  string    `json:"pipeline"`
		Triggered time.Time `json:"triggered"`
		Completed time.Time `json:"completed"`
		FileHash  string    `json:"file_hash,omitempty"`
		Savepoint bool      `json:"savepoint"`
		File      string    `json:"file"`
		// Parallelism is per id the number of subtasks that wrote a part.
		Parallelism map[string]int `json:"parallelism"`
	}
	// decoded is a value owned by a connector: how it was decoded, and the
	// result.
	decoded struct {
		Encoding string `json:"encoding"`
		Value    any    `json:"value"`
	}
	inspectSource struct {
		ID       string   `json:"id"`
		Subtask  int      `json:"subtask"`
		Type     string   `json:"type,omitempty"`
		Position *decoded `json:"position,omitempty"`
		// Watermark is an event-time source's watermark at the barrier.
		Watermark *int64 `json:"watermark,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	inspectSink struct {
		ID           string    `json:"id"`
		Subtask      int       `json:"subtask"`
		Type         string    `json:"type,omitempty"`
		Committables []decoded `json:"committables"`
		Error        string    `json:"error,omitempty"`
	}
	inspectStep struct {
		ID        string             `json:"id"`
		Kind      string             `json:"kind,omitempty"`
		KeyGroups []inspectKeyGroup  `json:"key_groups"`
		Errors    []inspectPartError `json:"errors,omitempty"`
	}
	inspectPartError struct {
		Part    string `json:"part"`
		Subtask int    `json:"subtask"`
		Error   string `json:"error"`
	}
	inspectKeyGroup struct {
		KeyGroup int          `json:"key_group"`
		Subtask  int          `json:"subtask"`
		Keys     []inspectKey `json:"keys"`
	}
	inspectKey struct {
		Key any `json:"key"`
		// KeyBase64 is the encoding of a key that does not decode.
		KeyBase64 string         `json:"key_base64,omitempty"`
		State     []inspectValue `json:"state"`
		Timers    []inspectTimer `json:"timers"`
		encoded   string
	}
	inspectValue struct {
		Name      string `json:"name"`
		Kind      string `json:"kind"`
		Namespace any    `json:"namespace,omitempty"`
		// TTLTime is the processing time (epoch ms) the TTL counts from.
		TTLTime int64  `json:"ttl_time,omitempty"`
		Value   any    `json:"value"`
		Error   string `json:"error,omitempty"`
	}
	inspectTimer struct {
		Service   string `json:"service"`
		Domain    string `json:"domain"`
		Time      int64  `json:"time"`
		Namespace any    `json:"namespace,omitempty"`
	}
	inspectPartRef struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	}
)

// inspectTarget is what PATH names: the checkpoint file, and the pipeline
// when PATH is a pipeline file.
type inspectTarget struct {
	file string
	spec *pipeline.Spec
}

func (o *stateOptions) inspect(c *cobra.Command, path string) error {
	if o.checkpoint < 0 {
		return usageError("--checkpoint %d: want a checkpoint id (eddy checkpoints list shows them), or none for the newest", o.checkpoint)
	}
	var keys map[string]bool
	if c.Flags().Changed("key") {
		keys = keyCandidates(o.key)
	}
	target, err := o.resolve(c, path)
	if err != nil {
		return err
	}
	var out *inspectOutput
	var failed []string
	err = guardFile(target.file, func() error {
		var err error
		out, failed, err = o.read(target, keys)
		return err
	})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(c.OutOrStdout())
	enc.SetEscapeHTML(false)
	if o.pretty {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(out); err != nil {
		return runtimeFailure(fmt.Errorf("write the state of checkpoint %d: %w", out.Checkpoint.ID, err))
	}
	if len(failed) > 0 {
		return runtimeFailure(fmt.Errorf("checkpoint %d in %s: %d part(s) could not be read or decoded (see \"error\" in the output): %s",
			out.Checkpoint.ID, target.file, len(failed), strings.Join(failed, ", ")))
	}
	return nil
}

// resolve finds the checkpoint file that PATH names.
func (o *stateOptions) resolve(c *cobra.Command, path string) (inspectTarget, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return inspectTarget{}, invalidInput("%s does not exist: give a pipeline file, a pipeline's state dir, a checkpoints.db or a savepoint file", path)
		}
		return inspectTarget{}, runtimeFailure(err)
	}
	if st.IsDir() {
		f := filepath.Join(path, checkpoint.FileName)
		if _, err := os.Stat(f); err != nil {
			return inspectTarget{}, invalidInput("%s holds no %s: give a pipeline's state dir (<state dir>/<pipeline name>), or the pipeline file", path, checkpoint.FileName)
		}
		return inspectTarget{file: f}, nil
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".yaml" && ext != ".yml" {
		return inspectTarget{file: path}, nil
	}
	plan, err := loadPlan(c.ErrOrStderr(), path)
	if err != nil {
		return inspectTarget{}, err
	}
	spec := plan.Spec
	if spec.Checkpoint == nil {
		return inspectTarget{}, invalidInput("%s: pipeline %q has no checkpoint block, so eddy run takes no checkpoints of it", path, spec.Name)
	}
	co := &checkpointsOptions{global: o.global, stateDir: o.stateDir}
	f := filepath.Join(co.stateDirFor(c, spec), checkpoint.FileName)
	if _, err := os.Stat(f); err != nil {
		return inspectTarget{}, invalidInput("pipeline %q has no checkpoints: %s does not exist (is the state dir right? --state-dir or %s)", spec.Name, f, envName(keyStateDir))
	}
	return inspectTarget{file: f, spec: spec}, nil
}

// guardFile runs fn, which reads the checkpoint file path, turning a panic
// or memory fault of bbolt on a damaged file into an error (as checkpoint.Guard
// does for a store).
func guardFile(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = runtimeFailure(fmt.Errorf("%w: %s is damaged beyond its checksums (bbolt: %v)", checkpoint.ErrCorrupt, path, r))
		}
	}()
	return fn()
}

// read opens the checkpoint file and decodes the chosen checkpoint. failed
// names the parts shown with an error.
func (o *stateOptions) read(target inspectTarget, keys map[string]bool) (*inspectOutput, []string, error) {
	f, err := checkpoint.OpenFile(target.file, 0)
	switch {
	case errors.Is(err, checkpoint.ErrFormat):
		return nil, nil, invalidInput("%w (give a pipeline file, a pipeline's state dir, a checkpoints.db or a savepoint file)", err)
	case err != nil:
		return nil, nil, runtimeFailure(err)
	}
	defer func() { _ = f.Close() }()
	id, err := o.choose(f)
	if err != nil {
		return nil, nil, err
	}
	cp, err := f.Checkpoint(id)
	if err != nil {
		return nil, nil, runtimeFailure(fmt.Errorf("%w; eddy checkpoints list shows which checkpoints verify", err))
	}
	meta := cp.Meta()
	out := &inspectOutput{
		Checkpoint: inspectMeta{
			ID:          cp.ID(),
			Pipeline:    meta.Pipeline,
			Triggered:   meta.Time.UTC(),
			Completed:   cp.CompletedAt().UTC(),
			FileHash:    meta.FileHash,
			Savepoint:   f.Savepoint(),
			File:        f.Path(),
			Parallelism: map[string]int{},
		},
		Sources: []inspectSource{},
		Steps:   []inspectStep{},
		Sinks:   []inspectSink{},
	}

	type partRef struct {
		name, kind, id string
		sub            int
	}
	var refs []partRef
	for _, pi := range cp.Parts() {
		kind, id, sub, ok := pipeline.ParsePart(pi.Name)
		if !ok {
			if o.step == "" && keys == nil {
				out.Other = append(out.Other, inspectPartRef{Name: pi.Name, Size: pi.Size})
			}
			continue
		}
		out.Checkpoint.Parallelism[id] = max(out.Checkpoint.Parallelism[id], sub+1)
		if o.step != "" && id != o.step {
			continue
		}
		refs = append(refs, partRef{name: pi.Name, kind: kind, id: id, sub: sub})
	}
	if o.step != "" && len(refs) == 0 {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range out.Checkpoint.Parallelism {
				if !yield(id) {
					return
				}
			}
		})
		return nil, nil, invalidInput("checkpoint %d in %s has no state of %q; it has: %s", cp.ID(), f.Path(), o.step, strings.Join(ids, ", "))
	}
	slices.SortFunc(refs, func(a, b partRef) int {
		return cmp.Or(strings.Compare(a.kind, b.kind), strings.Compare(a.id, b.id), cmp.Compare(a.sub, b.sub))
	})

	var failed []string
	steps := map[string]*inspectStep{}
	for _, r := range refs {
		if keys != nil && r.kind != pipeline.PartState {
			continue // sources and sinks have no keys
		}
		blob, err := cp.Get(r.name)
		switch r.kind {
		case pipeline.PartSource:
			s := inspectSource{ID: r.id, Subtask: r.sub, Type: target.sourceType(r.id)}
			if err != nil {
				s.Error = err.Error()
				failed = append(failed, r.name)
			} else {
				d := decodePosition(s.Type, blob)
				s.Position = &d
			}
			out.Sources = append(out.Sources, s)
		case pipeline.PartWatermark:
			var wm int64
			if err == nil {
				wm, err = pipeline.DecodeWatermark(blob)
			}
			i := slices.IndexFunc(out.Sources, func(s inspectSource) bool { return s.ID == r.id && s.Subtask == r.sub })
			if i < 0 {
				out.Sources = append(out.Sources, inspectSource{ID: r.id, Subtask: r.sub, Type: target.sourceType(r.id)})
				i = len(out.Sources) - 1
			}
			if err != nil {
				out.Sources[i].Error = err.Error()
				failed = append(failed, r.name)
			} else {
				out.Sources[i].Watermark = &wm
			}
		case pipeline.PartSink:
			s := inspectSink{ID: r.id, Subtask: r.sub, Type: target.sinkType(r.id), Committables: []decoded{}}
			var cs [][]byte
			if err == nil {
				cs, err = pipeline.DecodeCommittables(blob)
			}
			if err != nil {
				s.Error = err.Error()
				failed = append(failed, r.name)
			}
			for _, c := range cs {
				s.Committables = append(s.Committables, decodeGeneric(c))
			}
			out.Sinks = append(out.Sinks, s)
		case pipeline.PartState:
			st := steps[r.id]
			if st == nil {
				st = &inspectStep{ID: r.id, Kind: target.stepKind(r.id), KeyGroups: []inspectKeyGroup{}}
				steps[r.id] = st
			}
			var groups []statestore.InspectedKeyGroup
			if err == nil {
				groups, err = statestore.InspectState(blob)
			}
			bad := 0
			for _, g := range groups {
				kg := keyGroupOf(r.id, r.sub, g, keys)
				for _, k := range kg.Keys {
					for _, v := range k.State {
						if v.Error != "" {
							bad++
						}
					}
				}
				if len(kg.Keys) > 0 || keys == nil {
					st.KeyGroups = append(st.KeyGroups, kg)
				}
			}
			if err != nil {
				st.Errors = append(st.Errors, inspectPartError{Part: r.name, Subtask: r.sub, Error: err.Error()})
			}
			if err != nil || bad > 0 {
				failed = append(failed, r.name)
			}
		}
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range steps {
			if !yield(id) {
				return
			}
		}
	}) {
		st := steps[id]
		slices.SortStableFunc(st.KeyGroups, func(a, b inspectKeyGroup) int { return cmp.Compare(a.KeyGroup, b.KeyGroup) })
		out.Steps = append(out.Steps, *st)
	}
	return out, failed, nil
}

// choose returns the id of the checkpoint to show: --checkpoint, else the
// newest completed one.
func (o *stateOptions) choose(f *checkpoint.File) (int64, error) {
	list, err := f.List()
	if err != nil {
		return 0, runtimeFailure(err)
	}
	if o.checkpoint > 0 {
		for _, ci := range list {
			if ci.ID != o.checkpoint {
				continue
			}
			if !ci.Complete {
				return 0, invalidInput("checkpoint %d in %s is incomplete (being written, or left by a crash): it holds no consistent state", ci.ID, f.Path())
			}
			return ci.ID, nil
		}
		return 0, invalidInput("%s has no checkpoint %d (eddy checkpoints list shows them)", f.Path(), o.checkpoint)
	}
	for _, ci := range list {
		if ci.Complete {
			return ci.ID, nil
		}
	}
	return 0, invalidInput("%s holds no completed checkpoint", f.Path())
}

func (t inspectTarget) sourceType(id string) string {
	if t.spec != nil {
		for _, s := range t.spec.Sources {
			if s.ID == id {
				return s.Type
			}
		}
	}
	return ""
}

func (t inspectTarget) sinkType(id string) string {
	if t.spec != nil {
		for _, s := range t.spec.Sinks {
			if s.ID == id {
				return s.Type
			}
		}
	}
	return ""
}

func (t inspectTarget) stepKind(id string) string {
	if t.spec != nil {
		for _, s := range t.spec.Steps {
			if s.ID == id {
				return s.Kind
			}
		}
	}
	return ""
}

// keyGroupOf converts a decoded key group of step id, written by subtask
// sub, grouping entries and timers by key; with keys set, only those keys.
func keyGroupOf(id string, sub int, g statestore.InspectedKeyGroup, keys map[string]bool) inspectKeyGroup {
	byKey := map[string]*inspectKey{}
	get := func(encoded string) *inspectKey {
		if k, ok := byKey[encoded]; ok {
			return k
		}
		if keys != nil && !keys[encoded] {
			return nil
		}
		k := &inspectKey{encoded: encoded, State: []inspectValue{}, Timers: []inspectTimer{}}
		if v, err := pipeline.DecodeKey(encoded); err == nil {
			k.Key = jsonSafe(v)
		} else {
			k.KeyBase64 = base64.StdEncoding.EncodeToString([]byte(encoded))
		}
		byKey[encoded] = k
		return k
	}
	for _, st := range g.States {
		windowed := isWindowState(id, st.Name)
		for _, e := range st.Entries {
			k := get(e.Key)
			if k == nil {
				continue
			}
			v := inspectValue{Name: st.Name, Kind: st.Kind.String(), Namespace: namespace(e.Namespace, windowed), TTLTime: e.TTLTime, Value: e.Value}
			if e.ValueErr != nil {
				v.Value, v.Error = base64.StdEncoding.EncodeToString(e.Raw), e.ValueErr.Error()
			}
			k.State = append(k.State, v)
		}
	}
	for _, ts := range g.Timers {
		windowed := ts.Name == id
		for _, t := range ts.Timers {
			k := get(t.Key)
			if k == nil {
				continue
			}
			k.Timers = append(k.Timers, inspectTimer{Service: ts.Name, Domain: t.Domain.String(), Time: t.Timestamp, Namespace: namespace(t.Namespace, windowed)})
		}
	}
	out := inspectKeyGroup{KeyGroup: g.KeyGroup, Subtask: sub, Keys: make([]inspectKey, 0, len(byKey))}
	for _, k := range byKey {
		out.Keys = append(out.Keys, *k)
	}
	slices.SortFunc(out.Keys, func(a, b inspectKey) int { return strings.Compare(a.encoded, b.encoded) })
	return out
}

// keyCandidates returns the canonical encodings that --key k selects: k as
// a string key, and the value k parses to as JSON.
func keyCandidates(k string) map[string]bool {
	out := map[string]bool{}
	if enc, err := pipeline.EncodeKey(nil, k); err == nil {
		out[string(enc)] = true
	}
	var v any
	if err := json.Unmarshal([]byte(k), &v); err == nil {
		if enc, err := pipeline.EncodeKey(nil, v); err == nil {
			out[string(enc)] = true
		}
	}
	return out
}

// jsonSafe replaces the floats that JSON cannot hold in a decoded key.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case float64:
		switch {
		case math.IsNaN(x):
			return "NaN"
		case math.IsInf(x, 1):
			return "+Inf"
		case math.IsInf(x, -1):
			return "-Inf"
		}
	case []any:
		for i, e := range x {
			x[i] = jsonSafe(e)
		}
	}
	return v
}

// The states and the timer service of a window step (operators/window*.go)
// are named after the step; their namespaces are window namespaces.
func isWindowState(step, name string) bool {
	rest, ok := strings.CutPrefix(name, step+"/")
	return ok && (rest == "window" || rest == "sessions" || rest == "counter")
}

// namespace renders a state or timer namespace: nil for none, a window's
// as an object when windowed and it decodes, else the text (base64 when it
// is not UTF-8).
func namespace(ns string, windowed bool) any {
	if ns == "" {
		return nil
	}
	if windowed {
		if w, ok := windowNamespace(ns); ok {
			return w
		}
	}
	if utf8.ValidString(ns) {
		return ns
	}
	return map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(ns))}
}

// windowNamespace decodes a window step's namespace (operators/window_state.go):
// a tag byte and, for windows and panes, an int64 in 10 bytes of 7 bits,
// big-endian, sign bit flipped. The tags: 'e' event-time and 'p'
// processing-time window or pane (its start; alone: the key's sessions),
// 'c' count-window pane (its index), 'g' the global window, 'n' the
// count-window record counter.
func windowNamespace(ns string) (map[string]any, bool) {
	const nsLen = 11
	switch len(ns) {
	case 1:
		switch ns[0] {
		case 'e':
			return map[string]any{"kind": "event-time sessions"}, true
		case 'p':
			return map[string]any{"kind": "processing-time sessions"}, true
		case 'g':
			return map[string]any{"kind": "global"}, true
		case 'n':
			return map[string]any{"kind": "counter"}, true
		}
	case nsLen:
		if ns[1] > 1 {
			return nil, false // more than 64 bits
		}
		var u uint64
		for i := 1; i < nsLen; i++ {
			if ns[i] >= 0x80 {
				return nil, false
			}
			u = u<<7 | uint64(ns[i])
		}
		v := int64(u ^ (1 << 63))
		switch ns[0] {
		case 'e':
			return map[string]any{"kind": "event-time", "start": v}, true
		case 'p':
			return map[string]any{"kind": "processing-time", "start": v}, true
		case 'c':
			return map[string]any{"kind": "count", "pane": v}, true
		}
	}
	return nil, false
}

// decodePosition decodes a source position: with the PositionDescriber of
// the source's type when it has one (its encoding is then the type), else
// generically.
func decodePosition(typ string, b []byte) decoded {
	if p, ok := pipeline.Default.Source(typ); ok {
		if d, ok := p.New().(pipeline.PositionDescriber); ok {
			if v, err := d.DescribePosition(b); err == nil {
				return decoded{Encoding: typ, Value: v}
			}
		}
	}
	return decodeGeneric(b)
}

// decodeGeneric decodes bytes owned by a connector: JSON, else one CBOR
// item, else base64.
func decodeGeneric(b []byte) decoded {
	if len(b) > 0 && json.Valid(b) {
		// Numbers stay exact: an offset or id above 2^53 is not rounded.
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err == nil {
			return decoded{Encoding: "json", Value: v}
		}
	}
	if v, err := statestore.DecodeCBOR(b); err == nil {
		return decoded{Encoding: "cbor", Value: v}
	}
	return decoded{Encoding: "base64", Value: base64.StdEncoding.EncodeToString(b)}
}

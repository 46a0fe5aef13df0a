package statestore

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Read-only inspection of checkpoint stores, savepoints and snapshot blobs,
// for `eddy state inspect`: everything here decodes without the operators'
// Go types and changes nothing on disk. Unlike OpenCheckpointStore and
// OpenSavepoint, which refuse a checkpoint unless every part verifies,
// inspection reads each part on its own, so that one corrupt part is
// reported while the others are still shown.

// CheckpointFile is a checkpoint store (checkpoints.db) or a savepoint file
// opened read-only: no retention runs, incomplete checkpoints are not
// deleted, and nothing is verified until a part is read. Its methods are
// safe for concurrent use.
type CheckpointFile struct {
	db        *bolt.DB
	path      string
	savepoint bool
}

// OpenCheckpointFile opens a checkpoint store or savepoint file read-only.
// A store that a running pipeline holds is locked (ErrStateDirLocked, after
// lockTimeout; 0 means DefaultCheckpointLockTimeout); a file that is not an
// eddy checkpoint store or savepoint fails with ErrCheckpointFormat. Called
// by `eddy state inspect` on the command's goroutine. Close the file when
// done.
func OpenCheckpointFile(path string, lockTimeout time.Duration) (*CheckpointFile, error) {
	wrap := func(err error) error { return fmt.Errorf("open %s for inspection: %w", path, err) }
	st, err := os.Stat(path)
	if err != nil {
		return nil, wrap(err)
	}
	switch {
	case st.IsDir():
		return nil, wrap(fmt.Errorf("%w: a directory, not a checkpoint store or savepoint file", ErrCheckpointFormat))
	case st.Size() == 0:
		// bbolt would try to initialise it, which read-only fails to do.
		return nil, wrap(fmt.Errorf("%w: an empty file", ErrCheckpointFormat))
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultCheckpointLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, wrap(fmt.Errorf("in use by another eddy (%s): %w", readOwner(path+".owner"), ErrStateDirLocked))
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, wrap(fmt.Errorf("%w: not a bbolt file (%v)", ErrCheckpointFormat, err))
	case err != nil:
		return nil, wrap(err)
	}
	f := &CheckpointFile{db: db, path: path}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bktEddy)
		if b == nil || b.Get(keyFormat) == nil {
			return fmt.Errorf("%w: no %q record; not an eddy checkpoint store or savepoint", ErrCheckpointFormat, keyFormat)
		}
		var wf wireFormat
		if err := decodeRecord(recFormat, b.Get(keyFormat), &wf); err != nil {
			return fmt.Errorf("format record: %w", err)
		}
		switch wf.Kind {
		case storeKind:
		case savepointKind:
			f.savepoint = true
		default:
			return fmt.Errorf("%w: an eddy %q file, not a checkpoint store or savepoint", ErrCheckpointFormat, wf.Kind)
		}
		if tx.Bucket(bktCheckpoints) == nil {
			return fmt.Errorf("%w: no %q bucket", ErrCheckpointCorrupt, bktCheckpoints)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, wrap(err)
	}
	return f, nil
}

// Path returns the file's path.
func (f *CheckpointFile) Path() string { return f.path }

// Savepoint reports whether the file is a savepoint (ExportSavepoint wrote
// it) rather than a pipeline's checkpoint store.
func (f *CheckpointFile) Savepoint() bool { return f.savepoint }

// Close closes the file.
func (f *CheckpointFile) Close() error {
	if err := f.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.path, err)
	}
	return nil
}

// List returns the file's checkpoints, complete or not, newest first, as
// CheckpointStore.List does; nothing is verified.
func (f *CheckpointFile) List() ([]CheckpointInfo, error) {
	var out []CheckpointInfo
	err := f.db.View(func(tx *bolt.Tx) error {
		out = listCheckpoints(tx)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", f.path, err)
	}
	return out, nil
}

// Checkpoint reads the metadata of completed checkpoint id (ErrNoCheckpoint
// when the file has no such completed checkpoint; ErrCheckpointCorrupt when
// the metadata does not verify). Its parts are read, and each verified, by
// InspectedCheckpoint.Get.
func (f *CheckpointFile) Checkpoint(id int64) (*InspectedCheckpoint, error) {
	var rec *ckptRecord
	err := f.db.View(func(tx *bolt.Tx) error {
		var err error
		rec, err = readMeta(tx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d in %s: %w", id, f.path, err)
	}
	return &InspectedCheckpoint{rec: rec, f: f}, nil
}

// InspectedCheckpoint is a completed checkpoint of a CheckpointFile whose
// metadata verified; its parts have not been read yet. Valid until the file
// is closed; safe for concurrent use.
type InspectedCheckpoint struct {
	rec *ckptRecord
	f   *CheckpointFile
}

// ID returns the checkpoint's id.
func (c *InspectedCheckpoint) ID() int64 { return c.rec.id }

// Meta returns the checkpoint's metadata. The committables map is shared:
// do not modify it.
func (c *InspectedCheckpoint) Meta() CheckpointMeta { return c.rec.meta }

// CompletedAt returns when the checkpoint was completed.
func (c *InspectedCheckpoint) CompletedAt() time.Time { return c.rec.completed }

// Parts lists the parts the metadata names, sorted by name, each as stored
// (a delta part with its Base, and the size of the delta).
func (c *InspectedCheckpoint) Parts() []PartInfo { return slices.Clone(c.rec.parts) }

// Get returns a copy of one part's blob after checking it against its
// checksum and the metadata (ErrCheckpointCorrupt, which names the part),
// or ErrPartNotFound for a name the metadata does not list. A delta part
// is returned whole: every part of its chain is read from the checkpoints
// it names, checked so, and merged (ErrCheckpointCorrupt when a base is
// missing, incomplete or corrupt).
func (c *InspectedCheckpoint) Get(part string) ([]byte, error) {
	wrap := func(err error) error { return fmt.Errorf("checkpoint %d: part %q: %w", c.rec.id, part, err) }
	pi, ok := c.rec.find(part)
	if !ok {
		return nil, wrap(ErrPartNotFound)
	}
	partsDir := "" // a savepoint inlines every part
	if !c.f.savepoint {
		partsDir = filepath.Join(filepath.Dir(c.f.path), CheckpointPartsDir)
	}
	if pi.Base == 0 {
		blob, err := readPart(c.f.db.View, partsDir, c.rec.id, pi)
		if err != nil {
			return nil, wrap(err)
		}
		return blob, nil
	}
	var chain []partRef
	err := c.f.db.View(func(tx *bolt.Tx) error {
		var err error
		chain, err = newChainMetas(tx).partChain(c.rec.id, pi)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	blob, err := readChain(c.f.db.View, partsDir, chain)
	if err != nil {
		return nil, wrap(err)
	}
	return blob, nil
}

// InspectedKeyGroup is the decoded snapshot blob of one key group: what a
// step's keyed state held for the keys of that group.
type InspectedKeyGroup struct {
	KeyGroup int
	// States are sorted by name; each holds at least one entry.
	States []InspectedState
	// Timers are the timer services with timers in this key group, sorted
	// by name.
	Timers []InspectedTimers
}

// InspectedState is one registered state's entries in a key group.
type InspectedState struct {
	Name string
	Kind Kind
	// Entries are sorted by key, then namespace.
	Entries []InspectedEntry
}

// InspectedEntry is the value of one (key, namespace) of a state.
type InspectedEntry struct {
	// Key is the canonical key encoding (binary; the runtime's key
	// decoder turns it into the key's value); Namespace is the operator's
	// (a window's, for window steps), "" for none.
	Key, Namespace string
	// TTLTime is the processing time (epoch ms) the entry's TTL counts
	// from; 0 for a state without TTL.
	TTLTime int64
	// Value is the value decoded as DecodeCBOR does; ValueErr is set
	// instead when it does not decode (Raw then holds its bytes).
	Value    any
	ValueErr error
	Raw      []byte
}

// InspectedTimers are the timers of one timer service in a key group.
type InspectedTimers struct {
	Name string
	// Timers are sorted by domain, time, key and namespace.
	Timers []InspectedTimer
}

// InspectedTimer is one registered timer.
type InspectedTimer struct {
	Domain Domain
	Timer
}

// InspectState decodes the keyed state of one step subtask, as the
// runtime stores it in a checkpoint part: the blobs of Snapshot.WriteTo,
// back to back. Each blob is checked (ErrCorrupt); values are decoded
// without their Go types (DecodeCBOR). On an error it returns the key
// groups decoded before it. Called by `eddy state inspect`; pure, safe from
// any goroutine.
func InspectState(stream []byte) ([]InspectedKeyGroup, error) {
	var out []InspectedKeyGroup
	err := SplitBlobs(stream, func(kg int, blob []byte) error {
		_, payload, err := parseBlob(blob)
		if err != nil {
			return err
		}
		var p wirePayload
		if err := decodePayload(payload, &p, false); err != nil {
			return fmt.Errorf("key group %d: %w", kg, err)
		}
		g := InspectedKeyGroup{KeyGroup: kg}
		for _, ws := range p.States {
			st := InspectedState{Name: ws.Name, Kind: ws.Kind, Entries: make([]InspectedEntry, 0, len(ws.Entries))}
			for _, we := range ws.Entries {
				e := InspectedEntry{Key: we.Key, Namespace: we.NS, TTLTime: we.TS}
				if e.Value, e.ValueErr = DecodeCBOR(we.Value); e.ValueErr != nil {
					e.Value, e.Raw = nil, slices.Clone([]byte(we.Value))
				}
				st.Entries = append(st.Entries, e)
			}
			g.States = append(g.States, st)
		}
		for _, wt := range p.Timers {
			ts := InspectedTimers{Name: wt.Name, Timers: make([]InspectedTimer, 0, len(wt.Timers))}
			for _, t := range wt.Timers {
				ts.Timers = append(ts.Timers, InspectedTimer{Domain: t.Domain, Timer: Timer{Key: t.Key, Namespace: t.NS, Timestamp: t.TS}})
			}
			g.Timers = append(g.Timers, ts)
		}
		out = append(out, g)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("decode keyed state: %w", err)
	}
	return out, nil
}

// inspectDecMode decodes CBOR of unknown types: maps with any keys, big
// integers as *big.Int, invalid UTF-8 kept.
var inspectDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels:  256,
		MaxArrayElements: math.MaxInt32,
		MaxMapPairs:      math.MaxInt32,
		IntDec:           cbor.IntDecConvertSignedOrBigInt,
		BigIntDec:        cbor.BigIntDecodePointer,
		UTF8:             cbor.UTF8DecodeInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// DecodeCBOR decodes one CBOR data item (trailing bytes are an error) into
// values that encoding/json can print: maps become map[string]any (a key
// that is not text becomes its JSON text, a byte-string key its base64),
// arrays []any, integers int64 (*big.Int beyond), floats float64 (NaN and
// ±Inf as the strings "NaN", "+Inf" and "-Inf"), byte strings []byte,
// times (tags 0 and 1) time.Time, other tags map[string]any{"tag": number,
// "value": content}. Called by InspectState and by `eddy state inspect`
// for connector-owned bytes; pure, safe from any goroutine.
func DecodeCBOR(data []byte) (any, error) {
	var v any
	if err := inspectDecMode.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode CBOR: %w", err)
	}
	return neutral(v), nil
}

// neutral turns a value decoded into `any` into one that encoding/json
// prints.
func neutral(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[mapKey(k)] = neutral(e)
		}
		return m
	case map[string]any:
		for k, e := range x {
			x[k] = neutral(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = neutral(e)
		}
		return x
	case float32:
		return neutral(float64(x))
	case float64:
		switch {
		case math.IsNaN(x):
			return "NaN"
		case math.IsInf(x, 1):
			return "+Inf"
		case math.IsInf(x, -1):
			return "-Inf"
		}
		return x
	case big.Int:
		return &x
	case cbor.ByteString:
		return []byte(x)
	case cbor.Tag:
		return map[string]any{"tag": x.Number, "value": neutral(x.Content)}
	case cbor.RawTag:
		var c any
		if err := inspectDecMode.Unmarshal(x.Content, &c); err != nil {
			return map[string]any{"tag": x.Number, "value": []byte(x.Content)}
		}
		return map[string]any{"tag": x.Number, "value": neutral(c)}
	}
	return v
}

// mapKey renders a map key as a JSON object key.
func mapKey(k any) string {
	switch x := k.(type) {
	case string:
		return x
	case cbor.ByteString:
		return base64.StdEncoding.EncodeToString([]byte(x))
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	}
	b, err := json.Marshal(neutral(k))
	if err != nil {
		return strings.TrimSpace(fmt.Sprint(k))
	}
	return string(b)
}

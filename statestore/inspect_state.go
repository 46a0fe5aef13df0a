package statestore

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"
)

// Read-only inspection of snapshot blobs, for `eddy state inspect`:
// everything here decodes a step's keyed state without the operators' Go
// types.

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

package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"reflect"

	"github.com/fxamacker/cbor/v2"
)

// Snapshot blob format, version 1 (docs/state.md has the full specification).
//
//	offset  size  field
//	0       4     magic: the bytes 'e' 'd' 'k' 'g'
//	4       1     format version (1)
//	5       3     reserved, zero
//	8       4     key group, uint32 big-endian
//	12      4     payload length N, uint32 big-endian
//	16      N     payload: CBOR, Core Deterministic Encoding (RFC 8949 §4.2.1)
//	16+N    4     CRC32-C (Castagnoli) of bytes [0, 16+N), big-endian
//
// payload = {1: [* state], 2: [* timers]}
// state   = [name: tstr, kind: uint, [* entry]]          sorted by name
// entry   = [key: tstr, ns: tstr, ts: int, value: any]   sorted by key, ns
// timers  = [name: tstr, [* timer]]                      sorted by name
// timer   = [domain: uint, ts: int, key: tstr, ns: tstr] sorted by domain, ts, key, ns
const (
	blobVersion    = 1
	blobHeaderSize = 16
	blobTrailer    = 4
)

var blobMagic = [4]byte{'e', 'd', 'k', 'g'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var (
	encMode cbor.UserBufferEncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = cbor.CoreDetEncOptions().UserBufferEncMode(); err != nil {
		panic(err)
	}
	decMode, err = cbor.DecOptions{
		MaxNestedLevels:  256,
		MaxArrayElements: math.MaxInt32,
		MaxMapPairs:      math.MaxInt32,
		// Values decoded into `any` come back as map[string]any and int64,
		// the types eddy's records use.
		DefaultMapType: reflect.TypeOf(map[string]any(nil)),
		IntDec:         cbor.IntDecConvertSignedOrBigInt,
		// Keys and namespaces are canonical encodings, not text: an int
		// key holds raw bytes that need not be valid UTF-8.
		UTF8: cbor.UTF8DecodeInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// CBOR major types.
const (
	majorUint  = 0
	majorNeg   = 1
	majorText  = 3
	majorArray = 4
	majorMap   = 5
)

// encoder holds the scratch buffers of one Snapshot's encoding.
type encoder struct {
	entries bytes.Buffer // entries of the state being encoded
	states  bytes.Buffer // states of the key group being encoded
	timers  bytes.Buffer // timer services of the key group being encoded
	keys    []string
	order   []int32
	tmp     [9]byte
}

// head writes a CBOR head with the shortest argument (as deterministic
// encoding requires).
func (e *encoder) head(b *bytes.Buffer, major byte, n uint64) {
	b.Write(AppendCBORHead(e.tmp[:0], major, n))
}

// AppendCBORHead appends a CBOR item head (major type 0–7, argument n) in
// its shortest form, as deterministic encoding and the cbor package do.
// For code that writes CBOR by hand in one pass: snapshots here, aggregate
// rows, window accumulators, write-ahead committables. Pure.
func AppendCBORHead(dst []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, m|27), n)
}

// AppendCBORInt appends v as a CBOR integer in its shortest form. Pure.
func AppendCBORInt(dst []byte, v int64) []byte {
	if v < 0 {
		return AppendCBORHead(dst, 1, uint64(^v))
	}
	return AppendCBORHead(dst, 0, uint64(v))
}

func (e *encoder) text(b *bytes.Buffer, s string) {
	e.head(b, majorText, uint64(len(s)))
	b.WriteString(s)
}

func (e *encoder) int(b *bytes.Buffer, v int64) {
	if v >= 0 {
		e.head(b, majorUint, uint64(v))
	} else {
		e.head(b, majorNeg, uint64(-(v + 1)))
	}
}

// frame wraps a payload into a blob of key group kg.
func frame(kg int, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	blob := make([]byte, blobHeaderSize, blobHeaderSize+n+blobTrailer)
	copy(blob, blobMagic[:])
	blob[4] = blobVersion
	binary.BigEndian.PutUint32(blob[8:], uint32(kg))
	binary.BigEndian.PutUint32(blob[12:], uint32(n))
	for _, p := range parts {
		blob = append(blob, p...)
	}
	return binary.BigEndian.AppendUint32(blob, crc32.Checksum(blob, crcTable))
}

// parseBlob checks a blob's frame and checksum and returns its key group and
// payload.
func parseBlob(blob []byte) (kg int, payload []byte, err error) {
	if len(blob) < blobHeaderSize+blobTrailer {
		return 0, nil, fmt.Errorf("%w: blob of %d bytes is truncated", ErrCorrupt, len(blob))
	}
	if !bytes.Equal(blob[:4], blobMagic[:]) {
		return 0, nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, blob[:4])
	}
	n := int(binary.BigEndian.Uint32(blob[12:]))
	if len(blob) != blobHeaderSize+n+blobTrailer {
		return 0, nil, fmt.Errorf("%w: blob of %d bytes, its header says %d", ErrCorrupt, len(blob), blobHeaderSize+n+blobTrailer)
	}
	body := blob[:blobHeaderSize+n]
	if got, want := crc32.Checksum(body, crcTable), binary.BigEndian.Uint32(blob[blobHeaderSize+n:]); got != want {
		return 0, nil, fmt.Errorf("%w: checksum %08x, expected %08x", ErrCorrupt, got, want)
	}
	if blob[4] != blobVersion {
		return 0, nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrUnsupportedVersion, blob[4], blobVersion)
	}
	return int(binary.BigEndian.Uint32(blob[8:])), blob[blobHeaderSize : blobHeaderSize+n], nil
}

// BlobKeyGroup returns the key group of a blob, after checking its frame and
// checksum (ErrCorrupt): how a restoring subtask picks the blobs of its range.
func BlobKeyGroup(blob []byte) (int, error) {
	kg, _, err := parseBlob(blob)
	return kg, err
}

// ReadBlobs reads the blobs that Snapshot.WriteTo wrote, checking each
// (ErrCorrupt), and calls fn with each blob and its key group; fn owns the
// blob. It stops at the end of r, or at the first error.
func ReadBlobs(r io.Reader, fn func(group int, blob []byte) error) error {
	var hdr [blobHeaderSize]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%w: read blob header: %v", ErrCorrupt, err)
		}
		if !bytes.Equal(hdr[:4], blobMagic[:]) {
			return fmt.Errorf("%w: bad magic %q", ErrCorrupt, hdr[:4])
		}
		n := int(binary.BigEndian.Uint32(hdr[12:]))
		blob := make([]byte, blobHeaderSize+n+blobTrailer)
		copy(blob, hdr[:])
		if _, err := io.ReadFull(r, blob[blobHeaderSize:]); err != nil {
			return fmt.Errorf("%w: read blob of %d bytes: %v", ErrCorrupt, len(blob), err)
		}
		kg, _, err := parseBlob(blob)
		if err != nil {
			return err
		}
		if err := fn(kg, blob); err != nil {
			return err
		}
	}
}

// The payload as the decoder reads it; values stay raw CBOR until the
// state's Go type is known.
type wirePayload struct {
	States []wireState  `cbor:"1,keyasint"`
	Timers []wireTimers `cbor:"2,keyasint"`
}

type wireState struct {
	_       struct{} `cbor:",toarray"`
	Name    string
	Kind    Kind
	Entries []wireEntry
}

type wireEntry struct {
	_     struct{} `cbor:",toarray"`
	Key   string
	NS    string
	TS    int64
	Value cbor.RawMessage
}

type wireTimers struct {
	_      struct{} `cbor:",toarray"`
	Name   string
	Timers []wireTimer
}

type wireTimer struct {
	_      struct{} `cbor:",toarray"`
	Domain Domain
	TS     int64
	Key    string
	NS     string
}

func errIncompatibleValue(spec stateSpec, key string, err error) error {
	return fmt.Errorf("%w: decode %s state %q of key %q: %v", ErrIncompatibleState, spec.kind, spec.name, key, err)
}

func errEncodeValue(spec stateSpec, key string, err error) error {
	return fmt.Errorf("encode %s state %q of key %q: %w", spec.kind, spec.name, key, err)
}

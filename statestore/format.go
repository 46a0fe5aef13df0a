package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"

	"github.com/fxamacker/cbor/v2"
)

// Snapshot blob format, version 1 (docs/state.md has the full specification).
//
//	offset  size  field
//	0       4     magic: the bytes 'e' 'd' 'k' 'g'
//	4       1     format version (1)
//	5       1     flags: 0 in a full snapshot; blobDelta in an incremental one
//	6       2     reserved, zero
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
	majorUint   = 0
	majorNeg    = 1
	majorBytes  = 2
	majorText   = 3
	majorArray  = 4
	majorMap    = 5
	majorTag    = 6
	majorSimple = 7
)

// encoder holds the scratch state of one Snapshot's encoding. Blobs are
// appended to one buffer in one pass: the counts of CBOR arrays that are
// only known at the end are patched in place (patchHead).
type encoder struct {
	order []int32
	val   bytes.Buffer // a value encoded by the cbor package
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

// headSize returns the size of the head AppendCBORHead appends for n.
func headSize(n uint64) int {
	switch {
	case n < 24:
		return 1
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	case n <= math.MaxUint32:
		return 5
	}
	return 9
}

// intSize returns the size of what AppendCBORInt appends for v.
func intSize(v int64) int {
	if v < 0 {
		return headSize(uint64(^v))
	}
	return headSize(uint64(v))
}

// textSize returns the size of what appendText appends for s.
func textSize(s string) int { return headSize(uint64(len(s))) + len(s) }

func appendText(dst []byte, s string) []byte {
	return append(AppendCBORHead(dst, majorText, uint64(len(s))), s...)
}

// patchHead writes the CBOR head (major, n) at buf[pos:], over the reserved
// bytes put there before the item's content was appended, and moves that
// content when the head is shorter or longer than reserved.
func patchHead(buf []byte, pos, reserved int, major byte, n uint64) []byte {
	var tmp [9]byte
	h := AppendCBORHead(tmp[:0], major, n)
	if d := len(h) - reserved; d != 0 {
		end := len(buf)
		if d > 0 {
			buf = append(buf, tmp[:d]...) // room; overwritten below
		}
		copy(buf[pos+len(h):], buf[pos+reserved:end])
		buf = buf[:end+d]
	}
	copy(buf[pos:], h)
	return buf
}

// beginBlob appends the header of a blob of key group kg, its length left
// zero for endBlob.
func beginBlob(dst []byte, kg int) []byte {
	dst = append(dst, blobMagic[:]...)
	dst = append(dst, blobVersion, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(kg))
	return append(dst, 0, 0, 0, 0)
}

// endBlob completes the blob that starts at dst[start:] (beginBlob, then
// the payload): its payload length and checksum.
func endBlob(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start+12:], uint32(len(dst)-start-blobHeaderSize))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// CBORAppender is implemented by state values that append their snapshot
// encoding to a buffer themselves, which saves the cbor package's
// reflection, the allocation of MarshalCBOR's result and its check: a
// snapshot encodes one value per (key, namespace). AppendCBOR must append
// exactly what MarshalCBOR returns (the value is decoded by UnmarshalCBOR,
// and a backend may also encode it with MarshalCBOR); it runs on the
// goroutine that encodes the snapshot, on a value the task no longer
// writes. A nil pointer is encoded as CBOR null without calling it.
type CBORAppender interface {
	cbor.Marshaler
	AppendCBOR(dst []byte) ([]byte, error)
}

// CBORChecker is implemented by state values that can check an encoding
// without building a value from it. CheckCBOR(data) must fail exactly when
// UnmarshalCBOR(data) fails, and must not use its receiver: it is called on
// the type's zero value (a nil pointer for a pointer type). The bbolt
// backend checks with it, where present, the records of a restored state
// that it keeps as they are, instead of decoding each into a value that is
// thrown away (a window's accumulator copies its row, 1 KiB and more, to
// decode).
type CBORChecker interface {
	CheckCBOR(data []byte) error
}

// cborCheck decodes by calling c's CheckCBOR where decoding into the
// value would call its UnmarshalCBOR, so that the decoder's own checks
// (well-formedness, limits, tags) are the same.
type cborCheck struct{ c CBORChecker }

func (t *cborCheck) UnmarshalCBOR(data []byte) error { return t.c.CheckCBOR(data) }

// valueChecker returns a function that reports whether data decodes into
// an S (with decMode), by CheckCBOR where S has it. The function is for one
// goroutine.
func valueChecker[S any]() func(data []byte) error {
	c, ok := any(*new(S)).(CBORChecker)
	if !ok {
		return func(data []byte) error {
			var v S
			return decMode.Unmarshal(data, &v)
		}
	}
	// CBOR null or undefined decodes into a pointer as nil, without
	// calling UnmarshalCBOR.
	ptr := reflect.TypeFor[S]().Kind() == reflect.Pointer
	t := &cborCheck{c: c}
	return func(data []byte) error {
		if ptr && len(data) == 1 && (data[0] == 0xf6 || data[0] == 0xf7) {
			return nil
		}
		return decMode.Unmarshal(data, t)
	}
}

// valueDecoder returns how a restore decodes a value of type S from the
// bytes a payload holds for it: one well-formed data item, as
// decodePayload checked. With decMode; for a pointer to a type with an
// UnmarshalCBOR (a window's accumulator), by calling it directly, which is
// what decMode does for such an item after checking it once more and
// finding the method by reflection. A tagged item, null or undefined go
// through decMode, which strips or decodes them.
func valueDecoder[S any]() func(data []byte, v *S) error {
	t := reflect.TypeFor[S]()
	if t.Kind() != reflect.Pointer || !t.Implements(reflect.TypeFor[cbor.Unmarshaler]()) {
		return func(data []byte, v *S) error { return decMode.Unmarshal(data, v) }
	}
	elem := t.Elem()
	return func(data []byte, v *S) error {
		if len(data) == 0 || data[0]>>5 == majorTag || data[0] == 0xf6 || data[0] == 0xf7 {
			return decMode.Unmarshal(data, v)
		}
		p := reflect.New(elem).Interface()
		if err := p.(cbor.Unmarshaler).UnmarshalCBOR(data); err != nil {
			return err
		}
		*v = p.(S)
		return nil
	}
}

// valueAppender returns how snapshots append a state value of type S: by
// hand for the types that state mostly holds (the cbor package's bytes for
// them, checked by the golden snapshot test), with the cbor package for the
// others.
func valueAppender[S any]() func(dst []byte, v *S, enc *encoder) ([]byte, error) {
	switch any((*S)(nil)).(type) {
	case *int64:
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			return AppendCBORInt(dst, *any(v).(*int64)), nil
		}
	case *int:
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			return AppendCBORInt(dst, int64(*any(v).(*int))), nil
		}
	case *string:
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			return appendText(dst, *any(v).(*string)), nil
		}
	case *bool:
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			if *any(v).(*bool) {
				return append(dst, 0xf5), nil
			}
			return append(dst, 0xf4), nil
		}
	case *[]byte:
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			b := *any(v).(*[]byte)
			if b == nil {
				return append(dst, 0xf6), nil // the cbor package's nil slice
			}
			return append(AppendCBORHead(dst, majorBytes, uint64(len(b))), b...), nil
		}
	case CBORAppender:
		// S is a struct whose pointer has the methods.
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			return any(v).(CBORAppender).AppendCBOR(dst)
		}
	}
	var zero S
	if _, ok := any(zero).(CBORAppender); ok && reflect.TypeFor[S]().Kind() == reflect.Pointer {
		return func(dst []byte, v *S, _ *encoder) ([]byte, error) {
			x := any(*v)
			if x == any(zero) {
				return append(dst, 0xf6), nil
			}
			return x.(CBORAppender).AppendCBOR(dst)
		}
	}
	return func(dst []byte, v *S, enc *encoder) ([]byte, error) {
		enc.val.Reset()
		if err := encMode.MarshalToBuffer(v, &enc.val); err != nil {
			return dst, err
		}
		return append(dst, enc.val.Bytes()...), nil
	}
}

// parseBlob checks a blob's frame and checksum and returns its key group and
// payload. A delta blob is ErrCorrupt: only MergeChain reads those.
func parseBlob(blob []byte) (kg int, payload []byte, err error) {
	kg, flags, payload, err := parseBlobFrame(blob)
	if err == nil && flags != 0 {
		err = fmt.Errorf("%w: key group %d: a delta blob outside its incremental chain", ErrCorrupt, kg)
	}
	return kg, payload, err
}

// parseBlobFrame checks a blob's frame and checksum and returns its key
// group, flags and payload.
func parseBlobFrame(blob []byte) (kg int, flags byte, payload []byte, err error) {
	if len(blob) < blobHeaderSize+blobTrailer {
		return 0, 0, nil, fmt.Errorf("%w: blob of %d bytes is truncated", ErrCorrupt, len(blob))
	}
	if !bytes.Equal(blob[:4], blobMagic[:]) {
		return 0, 0, nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, blob[:4])
	}
	n := int(binary.BigEndian.Uint32(blob[12:]))
	if len(blob) != blobHeaderSize+n+blobTrailer {
		return 0, 0, nil, fmt.Errorf("%w: blob of %d bytes, its header says %d", ErrCorrupt, len(blob), blobHeaderSize+n+blobTrailer)
	}
	body := blob[:blobHeaderSize+n]
	if got, want := crc32.Checksum(body, crcTable), binary.BigEndian.Uint32(blob[blobHeaderSize+n:]); got != want {
		return 0, 0, nil, fmt.Errorf("%w: checksum %08x, expected %08x", ErrCorrupt, got, want)
	}
	if blob[4] != blobVersion {
		return 0, 0, nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrUnsupportedVersion, blob[4], blobVersion)
	}
	if blob[5]&^blobDelta != 0 {
		return 0, 0, nil, fmt.Errorf("%w: unknown blob flags %#x", ErrCorrupt, blob[5])
	}
	return int(binary.BigEndian.Uint32(blob[8:])), blob[5], blob[blobHeaderSize : blobHeaderSize+n], nil
}

// BlobKeyGroup returns the key group of a blob, after checking its frame and
// checksum (ErrCorrupt): how a restoring subtask picks the blobs of its range.
func BlobKeyGroup(blob []byte) (int, error) {
	kg, _, err := parseBlob(blob)
	return kg, err
}

// SplitBlobs splits stream, the blobs that Snapshot.WriteTo wrote back to
// back, and calls fn with each blob and its key group, in order. The blobs
// are slices of stream, not copies. It checks each blob's frame (magic,
// length: ErrCorrupt) but not its checksum, which Restore and BlobKeyGroup
// verify; a checkpoint's part is verified as a whole when it is read. It
// stops at the end of stream, or at the first error.
func SplitBlobs(stream []byte, fn func(group int, blob []byte) error) error {
	for off := 0; off < len(stream); {
		rest := stream[off:]
		if len(rest) < blobHeaderSize+blobTrailer {
			return fmt.Errorf("%w: %d bytes after the blob at offset %d", ErrCorrupt, len(rest), off)
		}
		if !bytes.Equal(rest[:4], blobMagic[:]) {
			return fmt.Errorf("%w: bad magic %q at offset %d", ErrCorrupt, rest[:4], off)
		}
		size := blobHeaderSize + uint64(binary.BigEndian.Uint32(rest[12:])) + blobTrailer
		if size > uint64(len(rest)) {
			return fmt.Errorf("%w: the blob at offset %d has %d bytes, its header says %d", ErrCorrupt, off, len(rest), size)
		}
		n := int(size)
		if err := fn(int(binary.BigEndian.Uint32(rest[8:])), rest[:n:n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// The payload as the decoder reads it (decodePayload); values stay raw
// CBOR until the state's Go type is known. The struct tags describe the
// same layout to the CBOR library, which the tests compare decodePayload
// with.
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
	Value rawItem
}

// rawItem is a CBOR data item left undecoded, as cbor.RawMessage, but not
// copied: it points into the blob it was decoded from, so it is valid as
// long as the blob is. A restore decodes every value into its state's type
// anyway; cbor.RawMessage copied each first, 1 GiB more to allocate and
// copy in a restore of 1 GiB. What outlives Restore is copied
// (stagePending) or written to a file.
type rawItem []byte

// UnmarshalCBOR keeps data, the item's bytes in the decoder's input.
func (r *rawItem) UnmarshalCBOR(data []byte) error {
	*r = data
	return nil
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

// decodedBlob is a key group's blob, decoded and checked on its own.
type decodedBlob struct {
	kg int
	p  wirePayload
}

// decodeBlobs decodes the blobs of a restore, each on its own, on several
// goroutines (decoding is most of a restore's CPU): see decodeBlob.
func decodeBlobs(blobs [][]byte, start, end int, keyGroup KeyGroupFunc) ([]decodedBlob, error) {
	decoded := make([]decodedBlob, len(blobs))
	err := forEachParallel(len(blobs), func(bi int) (err error) {
		decoded[bi], err = decodeBlob(bi, blobs[bi], start, end, keyGroup)
		return err
	})
	return decoded, err
}

// decodeBlob decodes blob bi and checks what it can on its own: frame,
// checksum, that its key group is in [start, end), that its states are
// named and of a known kind, and that every key and timer is in its key
// group.
func decodeBlob(bi int, blob []byte, start, end int, keyGroup KeyGroupFunc) (decodedBlob, error) {
	kg, payload, err := parseBlob(blob)
	if err != nil {
		return decodedBlob{}, fmt.Errorf("restore blob %d: %w", bi, err)
	}
	if kg < start || kg >= end {
		return decodedBlob{}, fmt.Errorf("restore blob %d: %w: key group %d, the backend holds [%d, %d)", bi, ErrKeyGroupRange, kg, start, end)
	}
	var p wirePayload
	if err := decodePayload(payload, &p, false); err != nil {
		return decodedBlob{}, fmt.Errorf("restore key group %d: %w", kg, err)
	}
	for _, ws := range p.States {
		if ws.Name == "" || !ws.Kind.valid() {
			return decodedBlob{}, fmt.Errorf("restore key group %d: %w: state %q of kind %d", kg, ErrCorrupt, ws.Name, ws.Kind)
		}
		for _, e := range ws.Entries {
			if g := keyGroup(e.Key); g != kg {
				return decodedBlob{}, fmt.Errorf("restore key group %d: %w: key %q of state %q is in key group %d: was the state written with another max_parallelism?", kg, ErrKeyGroupRange, e.Key, ws.Name, g)
			}
		}
	}
	for _, wt := range p.Timers {
		for _, t := range wt.Timers {
			if t.Domain > ProcessingTime {
				return decodedBlob{}, fmt.Errorf("restore key group %d: %w: timer domain %d", kg, ErrCorrupt, t.Domain)
			}
			if g := keyGroup(t.Key); g != kg {
				return decodedBlob{}, fmt.Errorf("restore key group %d: %w: timer key %q is in key group %d", kg, ErrKeyGroupRange, t.Key, g)
			}
		}
	}
	return decodedBlob{kg: kg, p: p}, nil
}

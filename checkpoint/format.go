package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
)

// On-disk layout of checkpoint stores and savepoint files, version 1
// (docs/checkpoints.md is the specification). Both are bbolt files:
//
//	bucket "eddy"
//	    "format"          record 'f': {1: kind ("checkpoints" | "savepoint"), 2: created (unix ns)}
//	bucket "checkpoints"
//	    bucket <id>       id: uint64 big-endian, 8 bytes; one per checkpoint
//	        "info"        record 'i': {1: id, 2: time, 3: pipeline, 4: file hash}
//	        "meta"        record 'm': the metadata; its presence marks the checkpoint complete
//	        bucket "parts"
//	            <name>    blob ‖ CRC32-C(blob), uint32 big-endian
//
// The metadata's key 8 names the base of each delta part (an incremental
// checkpoint's part that holds only the changes since the same-named part
// of an older checkpoint).
//
// A record is framed as
//
//	offset  size  field
//	0       4     magic: the bytes 'e' 'd' 'c' 'p'
//	4       1     format version (1; 2 or 3 for some metadata records)
//	5       1     record type: 'f', 'i' or 'm'
//	6       2     reserved, zero
//	8       4     payload length N, uint32 big-endian
//	12      N     payload: CBOR, Core Deterministic Encoding, integer map keys
//	12+N    4     CRC32-C of bytes [0, 12+N), uint32 big-endian
const (
	// ckptFormatVersion is the newest record version this build reads.
	// Version 2 is the metadata of a checkpoint with part files (a
	// "files" bucket), which a version-1 reader would take for missing
	// parts. Version 3 is the metadata of a checkpoint with delta parts
	// (key 8), whose blobs a version-2 reader would take for whole parts
	// and restore wrongly; it refuses them instead and falls back to an
	// older checkpoint. Every other record is written as version 1.
	ckptFormatVersion  = 3
	filesFormatVersion = 2
	deltaFormatVersion = 3
	recHeaderSize      = 12
	recTrailer         = 4
	partTrailer        = 4

	recFormat byte = 'f'
	recInfo   byte = 'i'
	recMeta   byte = 'm'

	storeKind     = "checkpoints"
	savepointKind = "savepoint"
)

// crcTable is CRC32-C (Castagnoli), the checksum of records and parts.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// The CBOR modes of records: Core Deterministic Encoding, and decoding
// with the limits and options of keyed state's snapshot format.
var (
	encMode = func() cbor.UserBufferEncMode {
		m, err := cbor.CoreDetEncOptions().UserBufferEncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	decMode = func() cbor.DecMode {
		m, err := cbor.DecOptions{
			MaxNestedLevels:  256,
			MaxArrayElements: math.MaxInt32,
			MaxMapPairs:      math.MaxInt32,
			IntDec:           cbor.IntDecConvertSignedOrBigInt,
			UTF8:             cbor.UTF8DecodeInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)

var (
	recMagic = [4]byte{'e', 'd', 'c', 'p'}

	bktEddy        = []byte("eddy")
	keyFormat      = []byte("format")
	bktCheckpoints = []byte("checkpoints")
	keyInfo        = []byte("info")
	keyMeta        = []byte("meta")
	bktParts       = []byte("parts")
)

// ckptKey is the bbolt key of checkpoint id: 8 bytes big-endian, so that a
// cursor visits checkpoints in id order.
func ckptKey(id int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id))
}

func ckptID(k []byte) (int64, bool) {
	if len(k) != 8 {
		return 0, false
	}
	id := int64(binary.BigEndian.Uint64(k))
	return id, id > 0
}

type wireFormat struct {
	Kind    string `cbor:"1,keyasint"`
	Created int64  `cbor:"2,keyasint"`
}

type wireInfo struct {
	ID       int64  `cbor:"1,keyasint"`
	Time     int64  `cbor:"2,keyasint"`
	Pipeline string `cbor:"3,keyasint"`
	FileHash string `cbor:"4,keyasint"`
}

type wireMeta struct {
	ID        int64      `cbor:"1,keyasint"`
	Time      int64      `cbor:"2,keyasint"`
	Completed int64      `cbor:"3,keyasint"`
	Pipeline  string     `cbor:"4,keyasint"`
	FileHash  string     `cbor:"5,keyasint"`
	Parts     []wirePart `cbor:"6,keyasint"`
	// Committables is always nil (sinks' committables are "sink/..."
	// parts); the key stays, written as nil, so that the record's
	// encoding is unchanged.
	Committables map[string][]byte `cbor:"7,keyasint"`
	// Bases maps the name of each delta part to the id of the checkpoint
	// holding its base (the same-named part); absent when no part is a
	// delta, so that the metadata of other checkpoints is as before.
	Bases map[string]int64 `cbor:"8,keyasint,omitempty"`
}

// wireMetaBases is the part of the metadata that retention and List need:
// decoding it skips the rest.
type wireMetaBases struct {
	Bases map[string]int64 `cbor:"8,keyasint,omitempty"`
}

type wirePart struct {
	_    struct{} `cbor:",toarray"`
	Name string
	Size int64
	CRC  uint32
}

// encodeRecord frames v, CBOR-encoded, as a record of type typ, version 1.
func encodeRecord(typ byte, v any) ([]byte, error) {
	return encodeRecordVersion(typ, 1, v)
}

// encodeRecordVersion frames v as a record of type typ and version.
func encodeRecordVersion(typ, version byte, v any) ([]byte, error) {
	payload, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint record %q: %w", typ, err)
	}
	rec := make([]byte, recHeaderSize, recHeaderSize+len(payload)+recTrailer)
	copy(rec, recMagic[:])
	rec[4] = version
	rec[5] = typ
	binary.BigEndian.PutUint32(rec[8:], uint32(len(payload)))
	rec = append(rec, payload...)
	return binary.BigEndian.AppendUint32(rec, crc32.Checksum(rec, crcTable)), nil
}

// decodeRecord checks a record's frame and checksum (ErrCorrupt),
// version (ErrFormat) and type, and decodes its payload into v.
func decodeRecord(typ byte, rec []byte, v any) error {
	if len(rec) < recHeaderSize+recTrailer {
		return fmt.Errorf("%w: record of %d bytes is truncated", ErrCorrupt, len(rec))
	}
	if !bytes.Equal(rec[:4], recMagic[:]) {
		return fmt.Errorf("%w: bad record magic %q", ErrCorrupt, rec[:4])
	}
	n := int(binary.BigEndian.Uint32(rec[8:]))
	if len(rec) != recHeaderSize+n+recTrailer {
		return fmt.Errorf("%w: record of %d bytes, its header says %d", ErrCorrupt, len(rec), recHeaderSize+n+recTrailer)
	}
	if got, want := crc32.Checksum(rec[:recHeaderSize+n], crcTable), binary.BigEndian.Uint32(rec[recHeaderSize+n:]); got != want {
		return fmt.Errorf("%w: record checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	if rec[4] == 0 || rec[4] > ckptFormatVersion {
		return fmt.Errorf("%w: version %d (this build reads %d)", ErrFormat, rec[4], ckptFormatVersion)
	}
	if rec[5] != typ {
		return fmt.Errorf("%w: record type %q, expected %q", ErrCorrupt, rec[5], typ)
	}
	if err := decMode.Unmarshal(rec[recHeaderSize:recHeaderSize+n], v); err != nil {
		return fmt.Errorf("%w: decode record %q: %v", ErrCorrupt, typ, err)
	}
	return nil
}

// partValue frames a blob as stored: the bytes, then the CRC32-C of the
// original blob (which differs from stored when a fault hook tore it).
func partValue(stored []byte, crc uint32) []byte {
	v := make([]byte, len(stored)+partTrailer)
	copy(v, stored)
	binary.BigEndian.PutUint32(v[len(stored):], crc)
	return v
}

// checkPart verifies a stored part value against its own checksum and
// against the metadata's size and checksum, and returns the blob (pointing
// into v).
func checkPart(v []byte, want PartInfo) ([]byte, error) {
	if len(v) < partTrailer {
		return nil, fmt.Errorf("%w: part %q: value of %d bytes is truncated", ErrCorrupt, want.Name, len(v))
	}
	blob := v[:len(v)-partTrailer]
	stored := binary.BigEndian.Uint32(v[len(blob):])
	if got := crc32.Checksum(blob, crcTable); got != stored {
		return nil, fmt.Errorf("%w: part %q: checksum %08x, stored %08x", ErrCorrupt, want.Name, got, stored)
	}
	if int64(len(blob)) != want.Size || stored != want.CRC32C {
		return nil, fmt.Errorf("%w: part %q: %d bytes with checksum %08x, the metadata says %d bytes with %08x",
			ErrCorrupt, want.Name, len(blob), stored, want.Size, want.CRC32C)
	}
	return blob, nil
}

// checkFormat checks (or, when create is set and it is missing, writes) the
// format record of a store or savepoint file.
func checkFormat(tx *bolt.Tx, kind string, create bool) error {
	b := tx.Bucket(bktEddy)
	if b == nil || b.Get(keyFormat) == nil {
		if !create {
			return fmt.Errorf("%w: no %q record; not an eddy %s file", ErrFormat, "format", kind)
		}
		rec, err := encodeRecord(recFormat, wireFormat{Kind: kind, Created: time.Now().UnixNano()})
		if err != nil {
			return err
		}
		if b, err = tx.CreateBucketIfNotExists(bktEddy); err != nil {
			return err
		}
		if err := b.Put(keyFormat, rec); err != nil {
			return err
		}
		_, err = tx.CreateBucketIfNotExists(bktCheckpoints)
		return err
	}
	var f wireFormat
	if err := decodeRecord(recFormat, b.Get(keyFormat), &f); err != nil {
		return fmt.Errorf("format record: %w", err)
	}
	if f.Kind != kind {
		return fmt.Errorf("%w: an eddy %s file, not a %s file", ErrFormat, f.Kind, kind)
	}
	if tx.Bucket(bktCheckpoints) == nil {
		if !create {
			return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bktCheckpoints)
		}
		_, err := tx.CreateBucket(bktCheckpoints)
		return err
	}
	return nil
}

// ckptRecord is a decoded, verified checkpoint.
type ckptRecord struct {
	id        int64
	meta      Meta
	completed time.Time
	parts     []PartInfo // sorted by name
	size      int64      // of the parts, not of their bases
	// chains holds the chain of each delta part (partChain), once
	// verifyCheckpoint has resolved and verified it.
	chains map[string][]partRef
}

// partRef is a part of a given checkpoint: a link of a chain.
type partRef struct {
	id   int64
	part PartInfo
}

func (r *ckptRecord) find(part string) (PartInfo, bool) {
	i, ok := slices.BinarySearchFunc(r.parts, part, func(p PartInfo, name string) int { return strings.Compare(p.Name, name) })
	if !ok {
		return PartInfo{}, false
	}
	return r.parts[i], true
}

// readMeta decodes and checks the metadata of completed checkpoint id, not
// its parts.
func readMeta(tx *bolt.Tx, id int64) (*ckptRecord, error) {
	root := tx.Bucket(bktCheckpoints)
	if root == nil {
		return nil, fmt.Errorf("%w: no %q bucket", ErrCorrupt, bktCheckpoints)
	}
	cb := root.Bucket(ckptKey(id))
	if cb == nil {
		return nil, fmt.Errorf("%w: checkpoint %d", ErrNoCheckpoint, id)
	}
	mv := cb.Get(keyMeta)
	if mv == nil {
		return nil, fmt.Errorf("%w: checkpoint %d is incomplete", ErrNoCheckpoint, id)
	}
	var m wireMeta
	if err := decodeRecord(recMeta, mv, &m); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("%w: metadata of checkpoint %d says id %d", ErrCorrupt, id, m.ID)
	}
	r := &ckptRecord{
		id: id,
		meta: Meta{
			Pipeline: m.Pipeline,
			FileHash: m.FileHash,
			Time:     time.Unix(0, m.Time),
		},
		completed: time.Unix(0, m.Completed),
		parts:     make([]PartInfo, len(m.Parts)),
	}
	for i, p := range m.Parts {
		if i > 0 && m.Parts[i-1].Name >= p.Name {
			return nil, fmt.Errorf("%w: metadata lists parts out of order (%q after %q)", ErrCorrupt, p.Name, m.Parts[i-1].Name)
		}
		if p.Size < 0 {
			return nil, fmt.Errorf("%w: metadata gives part %q a size of %d", ErrCorrupt, p.Name, p.Size)
		}
		r.parts[i] = PartInfo{Name: p.Name, Size: p.Size, CRC32C: p.CRC}
		r.size += p.Size
	}
	for _, name := range slices.Sorted(maps.Keys(m.Bases)) {
		base := m.Bases[name]
		i, ok := slices.BinarySearchFunc(r.parts, name, func(p PartInfo, name string) int { return strings.Compare(p.Name, name) })
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: metadata gives a base to part %q, which it does not list", ErrCorrupt, name)
		case base <= 0 || base >= id:
			// Bases are older checkpoints: a chain always ends.
			return nil, fmt.Errorf("%w: metadata gives part %q the base checkpoint %d, not an older checkpoint", ErrCorrupt, name, base)
		}
		r.parts[i].Base = base
	}
	return r, nil
}

// readBases decodes the bases of completed checkpoint bucket cb's delta
// parts (part name -> base id), without the rest of its metadata.
func readBases(cb *bolt.Bucket) (map[string]int64, error) {
	var m wireMetaBases
	if err := decodeRecord(recMeta, cb.Get(keyMeta), &m); err != nil {
		return nil, err
	}
	return m.Bases, nil
}

// chainMetas reads, within one read transaction, the metadata of the
// checkpoints that chains pass through, each once.
type chainMetas struct {
	tx   *bolt.Tx
	recs map[int64]*ckptRecord
}

func newChainMetas(tx *bolt.Tx) *chainMetas {
	return &chainMetas{tx: tx, recs: map[int64]*ckptRecord{}}
}

// get returns the metadata of checkpoint id, the base of a delta part.
// Every failure is ErrCorrupt: a delta part without its base
// cannot be restored.
func (m *chainMetas) get(id int64) (*ckptRecord, error) {
	if r := m.recs[id]; r != nil {
		return r, nil
	}
	r, err := readMeta(m.tx, id)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		// Not wrapped: ErrNoCheckpoint would say that the store is empty.
		return nil, fmt.Errorf("%w: checkpoint %d is missing or incomplete", ErrCorrupt, id)
	case errors.Is(err, ErrCorrupt):
		return nil, fmt.Errorf("checkpoint %d: %w", id, err)
	case err != nil:
		return nil, fmt.Errorf("%w: checkpoint %d: %w", ErrCorrupt, id, err)
	}
	m.recs[id] = r
	return r, nil
}

// partChain resolves the chain of part pi of checkpoint id, through the
// metadata of its bases: the whole part first, then the deltas oldest
// first, pi itself last. A part that is not a delta is a chain of one.
func (m *chainMetas) partChain(id int64, pi PartInfo) ([]partRef, error) {
	chain := []partRef{{id: id, part: pi}}
	for link := chain[0]; link.part.Base != 0; link = chain[len(chain)-1] {
		base, err := m.get(link.part.Base)
		if err != nil {
			return nil, fmt.Errorf("part %q of checkpoint %d is a delta on checkpoint %d: %w", pi.Name, link.id, link.part.Base, err)
		}
		bpi, ok := base.find(pi.Name)
		if !ok {
			return nil, fmt.Errorf("%w: part %q of checkpoint %d is a delta on checkpoint %d, which has no such part",
				ErrCorrupt, pi.Name, link.id, link.part.Base)
		}
		chain = append(chain, partRef{id: base.id, part: bpi})
	}
	slices.Reverse(chain)
	return chain, nil
}

// partKey names a part of a given checkpoint.
type partKey struct {
	id   int64
	name string
}

// verifyCheckpoint checks completed checkpoint id entirely: its metadata,
// then every part it lists (present, checksum, size, checksum as listed;
// inline, or in its file under partsDir), then that no part is stored that
// the metadata does not list, and last the chain of each delta part: the
// metadata of each base, and each base's part as the base's metadata lists
// it. The chains are recorded in the returned record. partsDir "" is a
// savepoint: it allows no part files and no delta parts. checked holds the
// outcome of each part checked already, by an earlier call on the same
// file (a part of a completed checkpoint never changes), and gets those of
// this call; nil checks everything anew.
func verifyCheckpoint(ctx context.Context, tx *bolt.Tx, partsDir string, id int64, checked map[partKey]error) (*ckptRecord, error) {
	r, err := readMeta(tx, id)
	if err != nil {
		return nil, err
	}
	root := tx.Bucket(bktCheckpoints)
	cb := root.Bucket(ckptKey(id))
	if cb.Bucket(bktParts) == nil {
		return nil, fmt.Errorf("%w: no %q bucket", ErrCorrupt, bktParts)
	}
	if checked == nil {
		checked = map[partKey]error{}
	}
	for _, p := range r.parts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := verifyStoredPart(cb, partsDir, id, p, checked); err != nil {
			return nil, err
		}
	}
	for _, b := range [][]byte{bktParts, bktFiles} {
		if pb := cb.Bucket(b); pb != nil {
			c := pb.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if _, ok := r.find(string(k)); !ok {
					return nil, fmt.Errorf("%w: part %q is not listed in the metadata", ErrCorrupt, k)
				}
			}
		}
	}
	metas := newChainMetas(tx)
	for _, p := range r.parts {
		if p.Base == 0 {
			continue
		}
		if partsDir == "" {
			return nil, fmt.Errorf("%w: part %q is a delta on checkpoint %d, which a savepoint cannot have", ErrCorrupt, p.Name, p.Base)
		}
		chain, err := metas.partChain(id, p)
		if err != nil {
			return nil, err
		}
		for _, link := range chain[:len(chain)-1] {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			err := verifyStoredPart(root.Bucket(ckptKey(link.id)), partsDir, link.id, link.part, checked)
			if err != nil {
				return nil, fmt.Errorf("part %q is a delta on checkpoint %d, and the chain's part in checkpoint %d does not verify: %w", p.Name, p.Base, link.id, err)
			}
		}
		if r.chains == nil {
			r.chains = map[string][]partRef{}
		}
		r.chains[p.Name] = chain
	}
	return r, nil
}

// verifyStoredPart checks part pi of checkpoint id, whose bucket is cb,
// against its checksum and pi, reading every byte, unless checked holds
// its outcome already; it records the outcome in checked.
func verifyStoredPart(cb *bolt.Bucket, partsDir string, id int64, pi PartInfo, checked map[partKey]error) error {
	key := partKey{id: id, name: pi.Name}
	if err, ok := checked[key]; ok {
		return err
	}
	v, path, err := partLocation(cb, partsDir, id, pi.Name)
	switch {
	case err != nil:
	case path != "":
		err = verifyPartFile(path, pi)
	default:
		_, err = checkPart(v, pi)
	}
	checked[key] = err
	return err
}

// Package checkpointtest damages checkpoint stores the way a disk would,
// for the tests of the packages that read them (corruption must be
// detected and reported, never restored). It works through bbolt and the
// layout of docs/checkpoints.md, not through checkpoint.s API.
package checkpointtest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/checkpoint"
)

// CorruptPart flips a byte in the middle of part name of checkpoint id in
// the store at path (a checkpoints.db), as bit rot would: the part no
// longer matches its checksum. The part may be a bbolt value or a part
// file.
func CorruptPart(t testing.TB, path string, id int64, name string) {
	t.Helper()
	corrupt(t, path, id, name)
}

// CorruptLargestPart flips a byte in the middle of the largest part of
// checkpoint id and returns its name.
func CorruptLargestPart(t testing.TB, path string, id int64) string {
	t.Helper()
	return corrupt(t, path, id, "")
}

// corrupt damages part name, or with name "" the largest part.
func corrupt(t testing.TB, path string, id int64, name string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var file string // the part is in this file
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		cb := tx.Bucket([]byte("checkpoints")).Bucket(binary.BigEndian.AppendUint64(nil, uint64(id)))
		require.NotNil(t, cb, "checkpoint %d", id)
		parts, files := cb.Bucket([]byte("parts")), cb.Bucket([]byte("files"))
		var inline bool
		var best int64 = -1
		if name == "" {
			for _, b := range []*bolt.Bucket{parts, files} {
				if b == nil {
					continue
				}
				require.NoError(t, b.ForEach(func(k, v []byte) error {
					size := int64(len(v))
					if b == files {
						size = int64(binary.BigEndian.Uint64(v))
					}
					if size > best {
						best, name, inline = size, string(k), b == parts
					}
					return nil
				}))
			}
		} else {
			inline = parts.Get([]byte(name)) != nil
		}
		if inline {
			v := append([]byte(nil), parts.Get([]byte(name))...)
			v[(len(v)-4)/2] ^= 0xff // not the trailing CRC
			return parts.Put([]byte(name), v)
		}
		require.NotNil(t, files, "part %q", name)
		ref := files.Get([]byte(name))
		require.NotNil(t, ref, "part %q", name)
		file = filepath.Join(filepath.Dir(path), checkpoint.PartsDir, strconv.FormatInt(id, 10), string(ref[8:]))
		return nil
	}))
	if file != "" {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		b[(len(b)-4)/2] ^= 0xff
		require.NoError(t, os.WriteFile(file, b, 0o600))
	}
	return name
}

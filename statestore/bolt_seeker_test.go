package statestore

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// sortedSeeker finds what Bucket.Get finds, for ascending keys at every
// distance: the same key again, the next record, a few records on (its
// Next steps), far away (a search from the root), keys that are not
// there, between records and past the last one.
func TestSortedSeekerMatchesGet(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "seek.db"), 0o600, &bolt.Options{PageSize: 4096})
	require.NoError(t, err)
	defer db.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	// Every third key of 0..29999, values large enough for many leaf pages.
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("s"))
		if err != nil {
			return err
		}
		for i := 0; i < 30_000; i += 3 {
			if err := b.Put(key(i), fmt.Appendf(nil, "v%d-%0100d", i, 0)); err != nil {
				return err
			}
		}
		return nil
	}))
	r := rand.New(rand.NewPCG(1, 2))
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("s"))
		for round := range 20 {
			seek := sortedSeeker{c: b.Cursor()}
			found := 0
			for i := r.IntN(10); i < 30_010; {
				k := key(i)
				want := b.Get(k)
				require.Equal(t, want, seek.get(k), "round %d, key %s", round, k)
				if want != nil {
					found++
				}
				switch n := r.IntN(10); {
				case n == 0: // the same key again
				case n < 7:
					i += 1 + r.IntN(3*(seekerSteps+1))
				default:
					i += 1 + r.IntN(500)
				}
			}
			require.Positive(t, found, "round %d", round)
		}
		return nil
	}))
}

package statestore

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// CheckBoltCache reports a clean cache entry of b that differs from its
// records in the file: the write-back cache's invariant, for tests. Entries
// whose writes are in the flush in flight may differ until it lands.
func CheckBoltCache(b *Bolt) error {
	return b.db.View(func(tx *bolt.Tx) error {
		for _, t := range b.tables {
			if err := t.(interface{ check(*bolt.Tx) error }).check(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

func (t *boltTable[S]) check(tx *bolt.Tx) error {
	bkt := tx.Bucket(t.bucket)
	for key, e := range t.cache {
		if e.dirty || e.flying {
			continue
		}
		if len(e.removed) > 0 {
			return fmt.Errorf("state %q, key %q: clean, with deletions to write", t.spec.name, key)
		}
		file := map[string][]byte{}
		prefix := appendKeyPrefix(nil, e.group, key)
		c := bkt.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			file[string(k[len(prefix):])] = v
		}
		if len(file) != len(e.items) {
			return fmt.Errorf("state %q, key %q: %d namespaces cached, %d in the file", t.spec.name, key, len(e.items), len(file))
		}
		for i := range e.items {
			p := &e.items[i]
			raw := p.raw
			if p.decoded {
				b, err := t.encodeValue(&p.v, key)
				if err != nil {
					return err
				}
				raw = b
			}
			if want := appendValue(nil, p.ts, raw); !p.stored || p.dirty || !bytes.Equal(want, file[p.ns]) {
				return fmt.Errorf("state %q, key %q, namespace %q: the cache and the file differ", t.spec.name, key, p.ns)
			}
		}
	}
	return nil
}

// BoltPageWrites returns how many pages b's live file has had written.
func BoltPageWrites(b *Bolt) int64 {
	st := b.db.Stats()
	return st.TxStats.GetWrite()
}

// BoltLeafFill returns the share of the bytes of the leaf pages of state's
// bucket in b's live file that hold records.
func BoltLeafFill(b *Bolt, state string) (fill float64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		bkt := tx.Bucket([]byte(state))
		if bkt == nil {
			return fmt.Errorf("no bucket %q", state)
		}
		st := bkt.Stats()
		fill = float64(st.LeafInuse) / float64(st.LeafAlloc)
		return nil
	})
	return fill, err
}

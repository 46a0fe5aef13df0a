package pipeline

import (
	"github.com/eddy-stream/eddy/checkpoint"
)

// boltStore adapts statestore's bbolt checkpoint store to CheckpointStore.
type boltStore struct {
	s *checkpoint.Store
}

// BoltCheckpoints returns the CheckpointStore that writes to s.
func BoltCheckpoints(s *checkpoint.Store) CheckpointStore { return boltStore{s: s} }

func (b boltStore) Begin(id int64, meta CheckpointMeta) (PendingCheckpoint, error) {
	p, err := b.s.Begin(id, checkpoint.Meta{Pipeline: meta.Pipeline, FileHash: meta.FileHash, Time: meta.Time})
	if err != nil {
		return nil, err
	}
	return boltPending{p}, nil
}

// boltPending adapts a pending checkpoint of the bbolt store to
// PendingCheckpoint.
type boltPending struct {
	*checkpoint.Pending
}

// ExportSavepoint writes completed checkpoint id as a savepoint file at
// path (SavepointExporter).
func (b boltStore) ExportSavepoint(id int64, path string) error { return b.s.ExportSavepoint(id, path) }

// restoredBolt adapts a verified checkpoint or savepoint to RestoredCheckpoint.
type restoredBolt struct {
	*checkpoint.Checkpoint
}

// RestoredFrom returns the RestoredCheckpoint of a checkpoint or savepoint.
func RestoredFrom(c *checkpoint.Checkpoint) RestoredCheckpoint { return restoredBolt{c} }

func (r restoredBolt) Parts() []string {
	parts := r.Checkpoint.Parts()
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.Name
	}
	return out
}

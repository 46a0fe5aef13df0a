package pipeline

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
)

// partsCheckpoint is a restored checkpoint of the given parts.
type partsCheckpoint map[string][]byte

func (p partsCheckpoint) ID() int64 { return 1 }

func (p partsCheckpoint) Parts() []checkpoint.PartInfo {
	var out []checkpoint.PartInfo
	for _, name := range slices.Sorted(maps.Keys(p)) {
		out = append(out, checkpoint.PartInfo{Name: name, Size: int64(len(p[name]))})
	}
	return out
}

func (p partsCheckpoint) Get(part string) ([]byte, error) { return p[part], nil }

type rescalableSource struct{}

func (rescalableSource) Validate() error            { return nil }
func (rescalableSource) NewSource() (Source, error) { return nil, nil }
func (rescalableSource) Rescalable() bool           { return true }

// TestSourceContextEmptyPosition: a subtask checkpointed before it had a
// position (it had read nothing) stored an empty part; its source gets nil,
// a fresh start, not an empty position that it cannot decode. At the same
// parallelism and at another.
func TestSourceContextEmptyPosition(t *testing.T) {
	cp := partsCheckpoint{"src/in/0": {}, "src/in/1": []byte("pos-1")}
	stageAt := func(sub, par int) *stage {
		return &stage{
			node:    &Node{ID: "in", Source: &SourceSpec{ID: "in", Config: rescalableSource{}}},
			info:    SubtaskInfo{ID: "in", Subtask: sub, Parallelism: par},
			restore: cp,
		}
	}
	sc, err := stageAt(0, 2).sourceContext()
	require.NoError(t, err)
	require.Nil(t, sc.Restored)
	require.Nil(t, sc.RestoredAll)
	sc, err = stageAt(1, 2).sourceContext()
	require.NoError(t, err)
	require.Equal(t, []byte("pos-1"), sc.Restored)

	sc, err = stageAt(0, 3).sourceContext()
	require.NoError(t, err)
	require.Nil(t, sc.Restored)
	require.Equal(t, [][]byte{nil, []byte("pos-1")}, sc.RestoredAll)
}

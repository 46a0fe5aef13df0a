package admin

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// SavepointsDir is the directory of savepoint files in a pipeline's state
// dir, where POST /savepoints writes by default.
const SavepointsDir = "savepoints"

// The Status of a SavepointRow.
const (
	SavepointOK      = "ok"
	SavepointCorrupt = "corrupt"
)

// SavepointRow is one savepoint file of GET /savepoints and of `eddy
// savepoint list`.
type SavepointRow struct {
	ID       int64     `json:"id"`
	Time     time.Time `json:"time"`
	Pipeline string    `json:"pipeline"`
	FileHash string    `json:"file_hash"`
	Final    bool      `json:"final"`
	Size     int64     `json:"size"`
	Path     string    `json:"path"`
	// Status is SavepointOK, or SavepointCorrupt with Error saying why.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// SavepointList is the JSON answer of GET /savepoints and the json output
// of `eddy savepoint list`.
type SavepointList struct {
	Pipeline   string         `json:"pipeline,omitempty"`
	Dir        string         `json:"dir"`
	Savepoints []SavepointRow `json:"savepoints"`
}

// ListSavepoints returns the savepoint files (*.db) of dir, newest first,
// each verified; a missing dir has none.
func ListSavepoints(dir string) ([]SavepointRow, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []SavepointRow{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list savepoints in %s: %w", dir, err)
	}
	rows := []SavepointRow{}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".db") {
			continue
		}
		rows = append(rows, readSavepoint(filepath.Join(dir, e.Name())))
	}
	slices.SortStableFunc(rows, func(a, b SavepointRow) int {
		return cmp.Or(b.Time.Compare(a.Time), cmp.Compare(b.ID, a.ID), strings.Compare(a.Path, b.Path))
	})
	return rows, nil
}

// latestSavepoint returns the path of the newest valid savepoint file of
// dir, or "" when it has none.
func latestSavepoint(dir string) (string, error) {
	rows, err := ListSavepoints(dir)
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		if r.Status == SavepointOK {
			return r.Path, nil
		}
	}
	return "", nil
}

// readSavepoint opens and verifies one savepoint file.
func readSavepoint(path string) SavepointRow {
	r := SavepointRow{Path: path, Status: SavepointCorrupt}
	if st, err := os.Stat(path); err == nil {
		r.Size = st.Size()
	}
	err := checkpoint.Guard(filepath.Dir(path), func() error {
		cp, err := checkpoint.OpenSavepoint(path)
		if err != nil {
			return err
		}
		defer func() { _ = cp.Close() }()
		m := cp.Meta()
		r.ID, r.Time, r.Pipeline, r.FileHash = cp.ID(), m.Time.UTC(), m.Pipeline, m.FileHash
		// Savepoints of `eddy checkpoints export` have no description.
		if b, err := cp.Get(pipeline.SavepointMetaPart); err == nil {
			meta, err := pipeline.DecodeSavepointMeta(b)
			if err != nil {
				return err
			}
			r.Final = meta.Final
		} else if !errors.Is(err, checkpoint.ErrPartNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Status = SavepointOK
	return r
}

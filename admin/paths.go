package admin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/eddy-stream/eddy/pipeline"
)

// The paths of an uploaded pipeline file (POST /api/pipelines) must stay
// in the folders `eddy serve` was given: the files its sources read and
// its sinks write (every config key named path, dir or file, or ending in
// _path, _dir or _file) in the data dir (--data-dir), and its state.dir, if
// it sets one, in the state dir (--state-dir). Files put into the
// pipelines folder by hand are trusted as `eddy run` trusts its file.

// isPathKey tells whether a config key names a file or a directory.
func isPathKey(key string) bool {
	switch key {
	case "path", "paths", "dir", "file", "files":
		return true
	}
	for _, suffix := range []string{"_path", "_paths", "_dir", "_file", "_files"} {
		if strings.HasSuffix(key, suffix) {
			return true
		}
	}
	return false
}

// uploadProblems returns the paths of spec that escape dataDir (empty:
// no file path at all is allowed) and a state.dir outside stateDir, each
// as a problem at its source, step or sink (or at the top of the file).
func uploadProblems(spec *pipeline.Spec, dataDir, stateDir string) pipeline.Problems {
	var ps pipeline.Problems
	check := func(pos pipeline.Pos, what string, cfg any) {
		walkPaths(reflect.ValueOf(cfg), "", func(key, path string) {
			if path == "" {
				return
			}
			switch {
			case dataDir == "":
				ps = append(ps, pipeline.Problem{Pos: pos, Msg: fmt.Sprintf("%s: %s %q: eddy serve has no --data-dir, so an uploaded pipeline may name no file", what, key, path)})
			case !within(path, dataDir):
				ps = append(ps, pipeline.Problem{Pos: pos, Msg: fmt.Sprintf("%s: %s %q is outside the data dir %s: an uploaded pipeline reads and writes files only there", what, key, path, dataDir)})
			}
		})
	}
	for _, s := range spec.Sources {
		check(s.Pos, fmt.Sprintf("source %q", s.ID), s.Config)
	}
	for _, s := range spec.Steps {
		check(s.Pos, fmt.Sprintf("step %q", s.ID), s.Config)
	}
	for _, s := range spec.Sinks {
		check(s.Pos, fmt.Sprintf("sink %q", s.ID), s.Config)
	}
	if d := spec.State.Dir; d != "" && !within(d, stateDir) {
		ps = append(ps, pipeline.Problem{Pos: pipeline.Pos{File: spec.File, Line: 1, Col: 1},
			Msg: fmt.Sprintf("state.dir %q is outside the state dir %s: leave it out (the pipeline's state goes to %s)", d, stateDir, filepath.Join(stateDir, spec.Name))})
	}
	return ps
}

// walkPaths calls found for every string (or element of a string list)
// under v whose key isPathKey; key is the key of v itself.
func walkPaths(v reflect.Value, key string, found func(key, path string)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkPaths(v.Elem(), key, found)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" && !f.Anonymous {
				name = strings.ToLower(f.Name)
			}
			walkPaths(v.Field(i), cmpOr(name, key), found)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkPaths(v.Index(i), key, found)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if it.Key().Kind() == reflect.String {
				walkPaths(it.Value(), it.Key().String(), found)
			}
		}
	case reflect.String:
		if isPathKey(key) {
			found(key, v.String())
		}
	}
}

// cmpOr returns a unless it is empty, else b.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// within tells whether path (relative ones to the working directory, as
// the runtime opens them) lies in root, symbolic links of the part that
// exists resolved.
func within(path, root string) bool {
	p, err1 := resolve(path)
	r, err2 := resolve(root)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(r, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// resolve returns path absolute and clean, with the symbolic links of its
// longest existing prefix resolved.
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if dir == filepath.Dir(dir) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

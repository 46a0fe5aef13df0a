package cmd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// keyEnvFile is the setting of the env file every command reads.
const keyEnvFile = "env-file"

// envFile is the --env-file of a command (EDDY_ENV_FILE): KEY=value lines
// set into the process's environment, so that EDDY_* settings and the
// ${VAR} of pipeline files see them, under the variables the environment
// had already with another value: those win over the file. `eddy run`
// reads it again on SIGHUP (reread), which is how a changed
// EDDY_LOG_LEVEL reaches a running pipeline: systemd reads its own
// EnvironmentFile= only when it starts a service. A variable the
// environment has with the value the file gives it at start (systemd
// read the same file) counts as the file's. A path starting with "-" may
// be missing (as with EnvironmentFile=-): the file then sets nothing.
type envFile struct {
	path     string
	optional bool
	// outside are the variables the environment had, with a value other
	// than the file's at start; the file does not change them. An empty
	// one counts as unset, as it does for the EDDY_* settings.
	outside map[string]bool
	// applied is what the file set, by variable.
	applied map[string]string
}

// addEnvFileFlag adds --env-file to fs and binds it to viper.
func addEnvFileFlag(v *viper.Viper, fs *pflag.FlagSet) {
	fs.String(keyEnvFile, "", "file of KEY=value lines to set in the environment (EDDY_* settings, ${VAR} of pipeline files) unless set already to another value; -FILE: it may be missing; eddy run reads it again on SIGHUP (env "+envName(keyEnvFile)+")")
	bindFlag(v, fs, keyEnvFile)
}

// loadEnvFile applies the --env-file of v, if any, to the environment and
// returns it (nil without one). A file that cannot be read or parsed is
// invalid input.
func loadEnvFile(v *viper.Viper) (*envFile, error) {
	path := strings.TrimSpace(v.GetString(keyEnvFile))
	if path == "" {
		return nil, nil
	}
	path, optional := strings.CutPrefix(path, "-")
	f := &envFile{path: path, optional: optional, outside: map[string]bool{}, applied: map[string]string{}}
	vars, err := f.read()
	if err != nil {
		return nil, invalidInput("--%s: %w", keyEnvFile, err)
	}
	for _, kv := range os.Environ() {
		if name, value, _ := strings.Cut(kv, "="); value != "" && vars[name] != value {
			f.outside[name] = true
		}
	}
	f.apply(vars)
	return f, nil
}

// read reads the file; an optional one that is missing sets nothing.
func (f *envFile) read() (map[string]string, error) {
	vars, err := readEnvFile(f.path)
	if f.optional && errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	return vars, err
}

// reread reads the file again and applies it: variables it sets anew or
// differently are set, those it no longer sets are unset, the outside
// ones stay. It returns the variables that changed, sorted; on an error
// nothing changes.
func (f *envFile) reread() ([]string, error) {
	vars, err := f.read()
	if err != nil {
		return nil, err
	}
	return f.apply(vars), nil
}

// apply sets vars into the environment but for the outside ones, unsets
// what the file set before and no longer does, and returns the variables
// that changed, sorted.
func (f *envFile) apply(vars map[string]string) []string {
	var changed []string
	for name := range f.applied {
		if _, ok := vars[name]; !ok {
			_ = os.Unsetenv(name)
			delete(f.applied, name)
			changed = append(changed, name)
		}
	}
	for name, value := range vars {
		if f.outside[name] {
			continue
		}
		if old, ok := f.applied[name]; ok && old == value {
			continue
		}
		_ = os.Setenv(name, value)
		f.applied[name] = value
		changed = append(changed, name)
	}
	slices.Sort(changed)
	return changed
}

// envVarName matches a variable name of an env file.
var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// readEnvFile parses the env file at path: the part of systemd's
// EnvironmentFile= syntax that eddy's example uses. Each line is empty, a
// comment (starting with # or ;) or KEY=value; spaces around the key and
// the value are dropped, and a value in matching single or double quotes
// loses them. Anything else is an error at FILE:LINE.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' || text[0] == ';' {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		name = strings.TrimSpace(name)
		if !ok || !envVarName.MatchString(name) {
			return nil, fmt.Errorf("%s:%d: want KEY=value (KEY of letters, digits and _), a comment (#) or an empty line", path, line)
		}
		vars[name] = unquote(strings.TrimSpace(value))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vars, nil
}

// unquote drops the quotes around a value in matching single or double
// quotes.
func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

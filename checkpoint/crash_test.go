//go:build unix

package checkpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
)

// The crash test re-executes the test binary as a child that writes
// checkpoints in a loop, printing a line after each step, and SIGKILLs it
// after reading a random number of lines; then it reopens the store and
// checks that Latest returns a complete, fully verifying checkpoint, at
// least as new as the last one the child reported complete.

const crashChildEnv = "EDDY_CHECKPOINT_CRASH_DIR"

const (
	crashParts  = 8
	crashRetain = 2
)

func crashPartName(i int) string { return fmt.Sprintf("op/step/%d", i) }

// crashPartSize varies part sizes per checkpoint, up to ~300 KB, so that
// kills land in transactions of many sizes.
func crashPartSize(id int64, i int) int {
	return 16 + int((uint64(id)*7919+uint64(i)*104729)%300_000)
}

// TestCheckpointCrashChild is the child process of TestCheckpointCrash; it
// does nothing in a normal test run.
func TestCheckpointCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("the child process of TestCheckpointCrash")
	}
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(3)
	}
	s, err := checkpoint.Open(dir, checkpoint.Options{
		Retain: crashRetain, LockTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fail(err)
	}
	infos, err := s.List()
	if err != nil {
		fail(err)
	}
	next := int64(1)
	if len(infos) > 0 {
		next = infos[0].ID + 1
	}
	for id := next; ; id++ {
		p, err := s.Begin(id, checkpoint.Meta{Pipeline: "crash", FileHash: strconv.FormatInt(id, 10)})
		if err != nil {
			fail(err)
		}
		fmt.Printf("begin %d\n", id)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < crashParts; i += 4 {
					part := crashPartName(i)
					if err := crashPut(p, i, part, partBlob(id, part, crashPartSize(id, i))); err != nil {
						fail(err)
					}
					fmt.Printf("put %d %s\n", id, part)
				}
			})
		}
		wg.Wait()
		if err := p.Complete(context.Background()); err != nil {
			fail(err)
		}
		fmt.Printf("wrote %d\n", id)
	}
}

// crashPut stores the odd parts as part files, streamed in three pieces,
// and the even ones with Put.
func crashPut(p checkpoint.Writer, i int, part string, blob []byte) error {
	if i%2 == 0 {
		return p.Put(part, blob)
	}
	w, err := p.Create(part, 0)
	if err != nil {
		return err
	}
	for _, piece := range [][]byte{blob[:len(blob)/3], blob[len(blob)/3 : len(blob)/2], blob[len(blob)/2:]} {
		if _, err := w.Write(piece); err != nil {
			return err
		}
	}
	return w.Close()
}

func TestCheckpointCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary 20 times")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	var lastWrote int64 // newest checkpoint a child reported complete
	kills := 0
	phases := map[string]int{} // the child's last line before it died, by its first word
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())

		k := 1 + rng.IntN(40)
		sc := bufio.NewScanner(stdout)
		var last string
		read := func() bool {
			if !sc.Scan() {
				return false
			}
			line := sc.Text()
			last = line
			if strings.HasPrefix(line, "error ") {
				t.Errorf("round %d: child: %s", round, line)
			}
			if n, ok := strings.CutPrefix(line, "wrote "); ok {
				id, err := strconv.ParseInt(n, 10, 64)
				require.NoError(t, err)
				lastWrote = max(lastWrote, id)
			}
			return true
		}
		n := 0
		for n < k && read() {
			n++
		}
		require.NoError(t, cmd.Process.Kill()) // SIGKILL
		for read() {
			// lines the child wrote before it died
		}
		err = cmd.Wait()
		require.Equal(t, k, n, "round %d: the child ended early: %v\n%s", round, err, stderr.String())
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		ws, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "round %d: %v\n%s", round, err, stderr.String())
		kills++
		phases[strings.Fields(last + " none")[0]]++

		logs := &logBuffer{}
		s, err := checkpoint.Open(dir, checkpoint.Options{Retain: crashRetain, Logger: logs.Logger()})
		require.NoError(t, err)
		cp, err := s.Latest(context.Background())
		if lastWrote == 0 && errors.Is(err, checkpoint.ErrNoCheckpoint) {
			require.NoError(t, s.Close(context.Background()))
			continue // killed before the first checkpoint completed
		}
		require.NoError(t, err, "round %d", round)
		require.GreaterOrEqual(t, cp.ID(), lastWrote, "round %d: a checkpoint reported complete was lost", round)
		require.Equal(t, "crash", cp.Meta().Pipeline)
		require.Equal(t, strconv.FormatInt(cp.ID(), 10), cp.Meta().FileHash)
		require.Len(t, cp.Parts(), crashParts)
		for i := range crashParts {
			blob, err := cp.Get(crashPartName(i))
			require.NoError(t, err)
			require.Equal(t, partBlob(cp.ID(), crashPartName(i), crashPartSize(cp.ID(), i)), blob)
		}
		require.NoError(t, cp.Close())
		require.NotContains(t, logs.String(), "level=WARN", "round %d: nothing is corrupt after a crash", round)

		// Opening deleted the partial leftovers and applied retention.
		infos, err := s.List()
		require.NoError(t, err)
		require.LessOrEqual(t, len(infos), crashRetain)
		var ids []string
		for _, ci := range infos {
			require.True(t, ci.Complete, "round %d: %+v", round, ci)
			ids = append(ids, strconv.FormatInt(ci.ID, 10))
		}
		// ... and the part files of every checkpoint it does not hold.
		require.ElementsMatch(t, ids, partDirs(t, dir), "round %d: part-file directories", round)
		lastWrote = max(lastWrote, cp.ID())
		require.NoError(t, s.Close(context.Background()))
	}
	require.Equal(t, 20, kills)
	require.Positive(t, lastWrote, "no child completed a checkpoint")
	t.Logf("20 kills (after the child's last line was: %v), newest checkpoint %d", phases, lastWrote)
}

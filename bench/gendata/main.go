// Command gendata writes the input of the whole-pipeline benchmark: N JSON
// lines {"id":"sensor-K","temp":F,"ts":MS}, deterministic for a seed.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
)

func main() {
	n := flag.Int("n", 1_000_000, "lines")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	r := rand.New(rand.NewPCG(*seed, 0))
	w := bufio.NewWriterSize(os.Stdout, 256<<10)
	const start = int64(1_767_225_600_000) // 2026-01-01T00:00:00Z
	for i := range *n {
		temp := 50 + r.Float64()*60
		fmt.Fprintf(w, "{\"id\":\"sensor-%d\",\"temp\":%.2f,\"ts\":%d}\n", r.IntN(1000), temp, start+int64(i)*10)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

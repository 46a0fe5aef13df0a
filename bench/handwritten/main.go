// Command handwritten is the baseline of the whole-pipeline benchmark: a
// single-threaded Go program doing what bench/file_set_filter.yaml does
// (read JSON lines {id, ts, temp}, add temp_c, keep temp_c > 30, write JSON
// lines) with encoding/json, the way one would write it by hand.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type reading struct {
	ID    string  `json:"id"`
	Temp  float64 `json:"temp"`
	TempC float64 `json:"temp_c"`
	TS    int64   `json:"ts"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: handwritten IN OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(inPath, outPath string) error {
	in, err := os.Open(inPath)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 256<<10)
	sc := bufio.NewScanner(bufio.NewReaderSize(in, 256<<10))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var r reading
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return err
		}
		r.TempC = (r.Temp - 32) * 5 / 9
		if r.TempC > 30 {
			if err := enc.Encode(&r); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Close()
}

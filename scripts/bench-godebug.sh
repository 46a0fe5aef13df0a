#!/usr/bin/env bash
# How the Go runtime returns freed heap to the kernel, measured on the
# checkpointing keyed window job (BenchmarkCheckpointOverhead, memory
# backend by default): the same test binary runs alternately with
# GODEBUG=madvdontneed=0 (MADV_FREE: the kernel takes the pages back only
# when it needs memory) and madvdontneed=1 (MADV_DONTNEED, Go's default on
# Linux: the pages go at once and are faulted in again, zeroed, when the
# heap grows back), BENCH_COUNT times each. Prints the throughput of each,
# with and without checkpoints, their ratios, and benchstat's comparison.
#
#   scripts/bench-godebug.sh                             # about 110 MiB of state
#   EDDY_BENCH_LARGE=1 BENCH_COUNT=8 scripts/bench-godebug.sh   # about 1 GiB, 10s interval
#   BENCH_FILTER='CheckpointOverhead/bbolt' scripts/bench-godebug.sh
set -euo pipefail
cd "$(dirname "$0")/.."

count=${BENCH_COUNT:-4}
filter=${BENCH_FILTER:-'CheckpointOverhead/memory'}
benchstat=(go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go test -c -o "$work/operators.test" ./operators/
modes=(madvdontneed=0 madvdontneed=1)
for m in "${modes[@]}"; do : >"$work/$m.txt"; done
for i in $(seq "$count"); do
	for m in "${modes[@]}"; do
		echo "run $i of $count: GODEBUG=$m" >&2
		(cd operators && GODEBUG="${GODEBUG:+$GODEBUG,}$m" "$work/operators.test" -test.run '^$' -test.bench "$filter" -test.count 1) | tee -a "$work/$m.txt"
	done
done

# The mean of a metric (its unit) over a mode's runs.
mean() {
	awk -v unit="$2" '/^Benchmark/ { for (i = 3; i < NF; i++) if ($(i + 1) == unit) { s += $i; n++ } }
		END { if (n) printf "%.0f", s / n; else print 0 }' "$work/$1.txt"
}
echo
for unit in on-records/s off-records/s; do
	lazy=$(mean madvdontneed=0 "$unit") eager=$(mean madvdontneed=1 "$unit")
	awk -v u="$unit" -v l="$lazy" -v e="$eager" 'BEGIN {
		printf "%-14s madvdontneed=0 %9d   madvdontneed=1 %9d   ratio 0/1 %.3f\n", u, l, e, (e > 0 ? l / e : 0)
	}'
done
echo
# benchstat takes what precedes the first = as a label.
"${benchstat[@]}" MADV_FREE="$work/${modes[0]}.txt" MADV_DONTNEED="$work/${modes[1]}.txt"

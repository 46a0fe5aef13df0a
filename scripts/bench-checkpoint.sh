#!/usr/bin/env bash
# Checkpoint benchmarks, for the memory and the bbolt state backends
# (operators/checkpoint_overhead_bench_test.go): the snapshot encoding per
# key (BenchmarkCheckpointEncode), the throughput a keyed window job loses
# to checkpoints at an interval (BenchmarkCheckpointOverhead: overhead-%),
# and the restart from a checkpoint (BenchmarkCheckpointRestore). Each runs
# BENCH_COUNT times and benchstat summarises them (median, 95% interval).
#
# With a git revision, the same benchmarks of that revision run too,
# alternately with this tree's, one count at a time (the machine's speed
# drifts: both sides see it alike), and benchstat compares the two.
#
#   scripts/bench-checkpoint.sh                        # about 110 MiB of state
#   EDDY_BENCH_LARGE=1 scripts/bench-checkpoint.sh     # about 1 GiB, 10s interval, 30s phases
#   BENCH_FILTER='CheckpointOverhead/memory' BENCH_COUNT=10 scripts/bench-checkpoint.sh
#   scripts/bench-checkpoint.sh main                   # main against this tree
#
# BENCH_OUT (default: a temporary directory) keeps the raw outputs
# (new.txt, old.txt) for a later benchstat. EDDY_BENCH_LARGE needs about
# 16 GiB of memory and 6 GiB of disk.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${BENCH_COUNT:-6}
filter=${BENCH_FILTER:-'Checkpoint(Encode|Overhead|Restore)'}
benchstat=(go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${BENCH_OUT:-$work}
mkdir -p "$out"

go test -c -o "$work/new.test" ./operators/
bins=(new)
if [[ $# -gt 0 ]]; then
	mkdir "$work/old-src"
	git archive "$1" | tar -x -C "$work/old-src"
	(cd "$work/old-src" && go test -c -o "$work/old.test" ./operators/)
	bins=(old new)
fi
for b in "${bins[@]}"; do : >"$out/$b.txt"; done

for i in $(seq "$count"); do
	for b in "${bins[@]}"; do
		echo "run $i of $count: $b" >&2
		# From the package's directory, as go test runs it.
		(cd operators && "$work/$b.test" -test.run '^$' -test.bench "$filter" -test.count 1) | tee -a "$out/$b.txt"
	done
done

if [[ $# -gt 0 ]]; then
	"${benchstat[@]}" old="$out/old.txt" new="$out/new.txt"
else
	"${benchstat[@]}" "$out/new.txt"
fi

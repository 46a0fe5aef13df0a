#!/usr/bin/env bash
# Whole-pipeline benchmark: 1,000,000 JSON lines {id, ts, temp} through
# file -> set temp_c -> filter -> file (bench/file_set_filter.yaml), against a
# single-threaded hand-written Go program doing the same work with
# encoding/json (bench/handwritten), run alternately in the same command.
# Reports records/s of each and their ratio; the outputs must hold the same lines.
#
#   scripts/bench.sh                 # defaults
#   BENCH_LINES=200000 BENCH_RUNS=5 BENCH_PARALLELISM=2 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

lines=${BENCH_LINES:-1000000}
runs=${BENCH_RUNS:-3}
export BENCH_PARALLELISM=${BENCH_PARALLELISM:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go build -o "$work/eddy" .
go build -o "$work/handwritten" ./bench/handwritten
go run ./bench/gendata -n "$lines" >"$work/in.jsonl"
export BENCH_IN="$work/in.jsonl" BENCH_OUT="$work/eddy.jsonl"

now() { date +%s%N; }
best_eddy=0 best_hand=0
for i in $(seq "$runs"); do
  t0=$(now)
  EDDY_LOG_LEVEL=warn "$work/eddy" run bench/file_set_filter.yaml
  t1=$(now)
  "$work/handwritten" "$work/in.jsonl" "$work/hand.jsonl"
  t2=$(now)
  e=$((t1 - t0)) h=$((t2 - t1))
  echo "run $i: eddy $((e / 1000000)) ms, hand-written $((h / 1000000)) ms"
  if [ "$best_eddy" = 0 ] || [ "$e" -lt "$best_eddy" ]; then best_eddy=$e; fi
  if [ "$best_hand" = 0 ] || [ "$h" -lt "$best_hand" ]; then best_hand=$h; fi
done

# Same work: the same lines, in any order (parallel steps may reorder).
if ! cmp -s <(sort "$work/eddy.jsonl") <(sort "$work/hand.jsonl"); then
  echo "outputs differ: $(wc -l <"$work/eddy.jsonl") vs $(wc -l <"$work/hand.jsonl") lines" >&2
  exit 1
fi

awk -v n="$lines" -v e="$best_eddy" -v h="$best_hand" -v p="$BENCH_PARALLELISM" -v c="$(nproc)" 'BEGIN {
  er = n / (e / 1e9); hr = n / (h / 1e9)
  printf "lines %d, cores %d, step parallelism %d, best of runs\n", n, c, p
  printf "eddy          %10.0f records/s\n", er
  printf "hand-written  %10.0f records/s\n", hr
  printf "ratio         %10.2fx\n", er / hr
}'

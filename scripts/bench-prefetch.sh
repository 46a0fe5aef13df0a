#!/usr/bin/env bash
# What the prefetch hints of the snapshot encoder (internal/prefetch) gain:
# the same benchmarks built with them and with -tags noprefetch (every
# prefetch a no-op, the encoder's prefetch pass skipped), run alternately,
# one pair at a time, the order swapped every pair (the machine's speed
# drifts: both sides see it alike; the two runs of a pair follow each
# other).
#
#   - the Go benchmarks of the paths that prefetch, BENCH_COUNT pairs
#     (default 8): statestore's BenchmarkSnapshot/memory/encode, and
#     operators' BenchmarkCheckpointEncode/memory and
#     BenchmarkWindowCheckpointState (encode-delta, update-while-written);
#   - a whole pipeline, BENCH_RUNS pairs (default 5): `eddy run` of a keyed
#     24h tumbling window (count, avg and the latest 1 KiB payload of each
#     of 200,000 keys, about 190 MiB of memory-backend state) over
#     BENCH_RECORDS generated records (default 3,000,000), checkpointing
#     every 2s: the median duration of its checkpoints, and the run's wall
#     time.
#
# Per benchmark it prints the median of each side, their ratio (with
# prefetch / without: below 1 the prefetch is faster) and the spread: the
# smallest and largest ratio of the pairs.
#
#   scripts/bench-prefetch.sh
#   BENCH_COUNT=3 BENCH_RUNS=2 scripts/bench-prefetch.sh
#
# BENCH_OUT (default: a temporary directory) keeps the raw outputs.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${BENCH_COUNT:-8}
runs=${BENCH_RUNS:-5}
records=${BENCH_RECORDS:-3000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${BENCH_OUT:-$work}
mkdir -p "$out"
: >"$out/results.txt" # benchmark unit side value, one a line

declare -A tags=([on]='' [off]='-tags=noprefetch')
for side in on off; do
	echo "building: prefetch $side" >&2
	for pkg in statestore operators; do
		go test -c ${tags[$side]} -o "$work/$pkg-$side.test" "./$pkg/"
	done
	go build ${tags[$side]} -o "$work/eddy-$side" .
done

# sides i: the two sides in the order of pair i.
sides() { if (($1 % 2)); then echo on off; else echo off on; fi; }

# gobench pkg side filter: one count of the benchmarks, from the package's
# directory as go test runs them; records ns/op.
gobench() {
	(cd "$1" && "$work/$1-$2.test" -test.run '^$' -test.bench "$3" -test.count 1) | tee -a "$out/go-$2.txt" |
		awk -v side="$2" '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name)
			for (i = 3; i < NF; i++) if ($(i+1) == "ns/op") print name, $(i+1), side, $i
		}' >>"$out/results.txt"
}

# The two sides of a pair run one right after the other.
benches=(
	"statestore ^BenchmarkSnapshot$/^memory$/^encode$"
	"operators ^BenchmarkCheckpointEncode$/^memory$"
	"operators ^BenchmarkWindowCheckpointState$/^(encode-delta|update-while-written)$"
)
for i in $(seq "$count"); do
	echo "go benchmarks, pair $i of $count" >&2
	for bench in "${benches[@]}"; do
		for side in $(sides "$i"); do
			gobench ${bench%% *} "$side" "${bench#* }"
		done
	done
done

filler=$(printf 'x%.0s' $(seq 1000))
cat >"$work/pipeline.yaml" <<EOF
version: 1
name: prefetch-bench
checkpoint:
  interval: 2s
  timeout: 30m
state:
  backend: memory
sources:
  - id: gen
    type: generator
    count: $records
    fields:
      id: i % 200000
      v: i % 100
      ts: i / 1000
      payload: string(i) + "$filler"
    event_time: ts
steps:
  - id: per_key
    key_by: id
    window: {type: tumbling, size: 24h}
    aggregate:
      n: count()
      avg_v: avg(v)
      last: last(payload)
sinks:
  - id: out
    type: blackhole
EOF

for i in $(seq "$runs"); do
	for side in $(sides "$i"); do
		echo "pipeline, pair $i of $runs: prefetch $side" >&2
		rm -rf "$work/state"
		start=$(date +%s%N)
		"$work/eddy-$side" run "$work/pipeline.yaml" --state-dir "$work/state" --log-format json 2>"$out/pipeline-$side-$i.log"
		end=$(date +%s%N)
		echo "pipeline run-ms $side $(((end - start) / 1000000))" >>"$out/results.txt"
		# The checkpoints that wrote the window's state (not the final
		# one, taken after the window fired): their median duration.
		grep '"msg":"checkpoint complete"' "$out/pipeline-$side-$i.log" | grep '"final":false' |
			sed 's/.*"duration":\([0-9]*\).*/\1/' | sort -n |
			awk -v side="$side" '{ d[NR] = $1 } END {
				if (NR == 0) { print "no checkpoint completed" > "/dev/stderr"; exit 1 }
				printf "pipeline checkpoint-ms %s %.0f\n", side, (d[int((NR+1)/2)] + d[int(NR/2)+1]) / 2e6
			}' >>"$out/results.txt"
	done
done

# Pair k of a benchmark is the k-th value of each side.
awk '
function median(a, n,    i, j, t, s) {
	for (i = 1; i <= n; i++) s[i] = a[i]
	for (i = 2; i <= n; i++) for (j = i; j > 1 && s[j-1] > s[j]; j--) { t = s[j]; s[j] = s[j-1]; s[j-1] = t }
	return (s[int((n+1)/2)] + s[int(n/2)+1]) / 2
}
{
	k = $1 " " $2
	if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
	n[k, $3]++; v[k, $3, n[k, $3]] = $4
}
END {
	printf "%-68s %-14s %12s %12s %7s %7s %7s\n", "benchmark", "unit", "prefetch", "noprefetch", "ratio", "min", "max"
	for (o = 1; o <= nk; o++) {
		k = order[o]; split(k, f, " ")
		m = n[k, "on"] < n[k, "off"] ? n[k, "on"] : n[k, "off"]
		lo = 1e300; hi = 0
		for (i = 1; i <= m; i++) {
			on[i] = v[k, "on", i]; off[i] = v[k, "off", i]
			r = off[i] > 0 ? on[i] / off[i] : 0
			if (r < lo) lo = r
			if (r > hi) hi = r
		}
		mon = median(on, m); moff = median(off, m)
		printf "%-68s %-14s %12.0f %12.0f %7.3f %7.3f %7.3f\n", f[1], f[2], mon, moff, (moff > 0 ? mon / moff : 0), lo, hi
	}
}' "$out/results.txt"

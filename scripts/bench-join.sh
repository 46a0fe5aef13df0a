#!/usr/bin/env bash
# Whole-pipeline benchmark of the join step: two generated streams of
# BENCH_EVENTS records each (1ms of event time a record) joined into a
# blackhole sink (bench/join/KIND.yaml), against a baseline of the same two
# generators straight into blackholes (bench/join/baseline.yaml), run
# alternately in the same command. Kinds: interval (10,000 keys, bounds
# -5s/+10s), regular (unique keys, ttl 10s) and temporal (10,000 keys); a
# kind whose operator this build does not implement yet is reported as
# skipped.
#
# For each pipeline, of its fastest run: input events/s (both sides
# counted), the ratio to the baseline's, CPU seconds (user + system) per
# million input events, peak keyed state (the largest state_bytes that a
# checkpoint, every 1s, wrote), peak RSS, and the records the join emitted
# (in every run those the script computes from the generators' formulas,
# or it fails; the regular join, whose ttl is processing time, only warns).
#
#   scripts/bench-join.sh                     # defaults
#   BENCH_EVENTS=1000000 BENCH_RUNS=5 BENCH_KINDS=interval scripts/bench-join.sh
#   BENCH_PROFILE=10 BENCH_KINDS=interval scripts/bench-join.sh
#                                             # first a run of each kind with
#                                             # a 10s CPU profile (not counted)
#                                             # into ./bench-join-KIND.pprof
#   BENCH_EDDY=/path/to/eddy scripts/bench-join.sh   # that binary, no build
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

events=${BENCH_EVENTS:-3000000}
runs=${BENCH_RUNS:-3}
kinds=${BENCH_KINDS:-interval regular temporal}
profile=${BENCH_PROFILE:-0}
export BENCH_EVENTS=$events BENCH_PARALLELISM=${BENCH_PARALLELISM:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -n "${BENCH_EDDY:-}" ]; then
  cp "$BENCH_EDDY" "$work/eddy"
else
  go build -o "$work/eddy" .
fi

now() { date +%s%N; }

# run NAME N: runs bench/join/NAME.yaml once (run N; run 0 is profiled)
# and prints "wall_ns cpu_s peak_state_bytes maxrss_kb written", or "skip"
# when the join is not implemented by this build.
run() {
  local name=$1 n=$2 state="$work/state-$1-$2" log="$work/log-$1-$2"
  local t0 t1 rc=0 prof_pid= timer=()
  # Peak RSS from GNU time where there is one; CPU from the shell's times.
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f '%M' -o "$work/rss")
  echo 0 >"$work/rss"
  t0=$(now)
  EDDY_LOG_FORMAT=json EDDY_STATE_DIR="$state" \
    "${timer[@]}" "$work/eddy" run "bench/join/$name.yaml" 2>"$log" &
  local pid=$!
  if [ "$n" = 0 ]; then
    profileRun "$name" "$state/bench-join-$name/admin.addr" "$pid" &
    prof_pid=$!
  fi
  wait "$pid" || rc=$?
  t1=$(now)
  if [ -n "$prof_pid" ]; then wait "$prof_pid" || true; fi
  if [ "$rc" != 0 ]; then
    if grep -q 'not implemented' "$log"; then
      echo skip
      return
    fi
    echo "bench/join/$name.yaml failed (exit $rc):" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  local peak written cpu
  peak=$(grep '"msg":"checkpoint complete"' "$log" | grep -o '"state_bytes":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
  written=$(grep '"msg":"pipeline finished"' "$log" | grep -o '"records_written":[0-9]*' | cut -d: -f2)
  # This function runs in a subshell: its children are this run's.
  times >"$work/times"
  cpu=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$work/times")
  echo "$((t1 - t0)) $cpu ${peak:-0} $(cat "$work/rss") $written"
}

# profileRun NAME ADDR_FILE PID: once the run writes its admin address,
# takes a CPU profile of BENCH_PROFILE seconds into bench-join-NAME.pprof
# (for go tool pprof) in the directory the script was started from.
profileRun() {
  local name=$1 addr_file=$2 pid=$3
  while [ ! -s "$addr_file" ]; do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.01
  done
  curl -sf -o "$here/bench-join-$name.pprof" "http://$(cat "$addr_file")/debug/pprof/profile?seconds=$profile" &&
    echo "CPU profile of $name: $here/bench-join-$name.pprof (go tool pprof -top $here/bench-join-$name.pprof)" >&2
}

# expected KIND: the number of records the join of KIND emits, from the
# generators' formulas (left i: key i % 10000, time i; right j: key
# j * 7919 % 10000, time j; for regular, key i on both sides).
expected() {
  awk -v kind="$1" -v n="$events" 'BEGIN {
    for (x = 1; x < 10000; x++) if (7919 * x % 10000 == 1) inv = x
    c = 0
    for (i = 0; i < n; i++) {
      r = i * inv % 10000 # the rights of left i are j = r (mod 10000)
      if (kind == "regular") {
        c++
      } else if (kind == "interval") { # j in [i - 5000, i + 10000]
        lo = i - 5000; if (lo < 0) lo = 0
        hi = i + 10000; if (hi > n - 1) hi = n - 1
        f = lo + ((r - lo % 10000) + 10000) % 10000
        if (f <= hi) c += int((hi - f) / 10000) + 1
      } else if (kind == "temporal") { # some j <= i: a version by then
        if (r <= i) c++
      }
    }
    print c
  }'
}

declare -A best cpu peak rss written skipped want
for name in $kinds; do want[$name]=$(expected "$name"); done
if [ "$profile" != 0 ]; then
  # Profiled runs first, not counted: the profile slows a run down.
  for name in $kinds; do
    r=$(run "$name" 0)
    [ "$r" = skip ] && skipped[$name]=1
  done
fi
for i in $(seq "$runs"); do
  line="run $i:"
  for name in baseline $kinds; do
    [ -n "${skipped[$name]:-}" ] && continue
    r=$(run "$name" "$i")
    if [ "$r" = skip ]; then
      skipped[$name]=1
      continue
    fi
    read -r ns c p m w <<<"$r"
    line="$line $name $((ns / 1000000)) ms"
    if [ "$name" = regular ] && [ "$w" != "${want[$name]}" ]; then
      # Its ttl is processing time: a run that stalls longer (a loaded
      # machine, a long checkpoint) loses matches.
      echo "regular wrote $w records in run $i, not ${want[$name]}: rows expired (ttl) before their match arrived" >&2
    elif [ "$name" != baseline ] && [ "$w" != "${want[$name]}" ]; then
      echo "$name wrote $w records in run $i, not the ${want[$name]} of its join" >&2
      exit 1
    fi
    written[$name]=$w
    if [ -z "${best[$name]:-}" ] || [ "$ns" -lt "${best[$name]}" ]; then
      best[$name]=$ns cpu[$name]=$c peak[$name]=$p rss[$name]=$m
    fi
  done
  echo "$line"
done

echo "events $events a side, cores $(nproc), parallelism $BENCH_PARALLELISM, fastest of $runs runs"
printf '%-9s %14s %9s %16s %15s %11s %12s\n' pipeline "input events/s" "vs base" "CPU s/M events" "peak state" "peak RSS" "join output"
for name in baseline $kinds; do
  if [ -n "${skipped[$name]:-}" ]; then
    printf '%-9s skipped: this build does not implement the %s join yet\n' "$name" "$name"
    continue
  fi
  awk -v name="$name" -v n=$((2 * events)) -v ns="${best[$name]}" -v base="${best[baseline]}" \
    -v c="${cpu[$name]}" -v p="${peak[$name]}" -v m="${rss[$name]}" -v w="${written[$name]}" 'BEGIN {
    rate = n / (ns / 1e9)
    out = (name == "baseline") ? "-" : w
    printf "%-9s %14.0f %8.2fx %16.2f %11.1f MiB %7.0f MiB %12s\n", name, rate, base / ns, c / (n / 1e6), p / 1048576, m / 1024, out
  }'
done

#!/usr/bin/env bash
# Group mode benchmark: Kafka -> key_by + tumbling window -> Kafka
# (bench/group/window.yaml) run by 1, 2 and 3 processes of group mode, and
# the same pipeline in one process without the group block
# (bench/group/ref.yaml: checkpoints every second, exactly-once output, as
# group mode commits), over the same input, alternately, RUNS times each.
#
#   scripts/bench-group.sh                          # an in-process broker (eddy dev kafka)
#   KAFKA_BROKERS=host:9092 scripts/bench-group.sh  # an existing broker
#   RECORDS=2000000 PARTITIONS=6 RUNS=3 scripts/bench-group.sh
#
# A run's time is from its start until its window step received every
# input record (the sum over the processes of
# eddy_records_in_total{id="per_key"} on their /metrics; the group mode
# never ends its input): reading, the exchange through the repartition
# topic (read at read_committed, so up to one commit interval later) and
# the window's input. The baseline's is until it exits (it reads to the
# end, fires its windows and commits). It prints records/s per run and the
# median of each mode, and the ratio of each to the baseline's median.
set -euo pipefail
cd "$(dirname "$0")/.."

records=${RECORDS:-1000000}
partitions=${PARTITIONS:-6}
runs=${RUNS:-3}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/eddy" .
eddy=$work/eddy
export EDDY_LOG_FORMAT=json
if [[ -z ${KAFKA_BROKERS:-} ]]; then
	port=$((20000 + RANDOM % 20000))
	"$eddy" dev kafka --port "$port" >"$work/broker.log" 2>&1 &
	pids+=($!)
	export KAFKA_BROKERS=127.0.0.1:$port
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
		sleep 0.1
	done
fi
run=$(date +%s)
export KAFKA_IN=bench-group-in-$run
export PARTITIONS=$partitions
RECORDS=$records "$eddy" run --state-dir "$work/state-load" bench/group/load.yaml 2>"$work/load.log" || {
	cat "$work/load.log"
	exit 1
}
echo "input: $records records in $KAFKA_IN ($partitions partitions), broker $KAFKA_BROKERS"

now() { date +%s.%N; }

# metric_sum NAME_AND_LABELS LOGS...: the sum of a series over the
# processes whose logs are given (their admin endpoint's address).
metric_sum() {
	local series=$1 sum=0 addr v
	shift
	for log in "$@"; do
		addr=$(grep -so '"msg":"admin endpoint listening"[^}]*"addr":"[^"]*"' "$log" | sed 's/.*"addr":"\([^"]*\)"/\1/' | head -1)
		[[ -z $addr ]] && continue
		v=$(curl -fs "http://$addr/metrics" | grep -F "$series " | awk '{print $2}' | head -1)
		[[ -z $v ]] && continue
		sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { printf "%.0f", a + b }')
	done
	echo "$sum"
}

baseline() {
	local i=$1 t0 t1
	t0=$(now)
	KAFKA_OUT=bench-group-ref-$run-$i TXN_PREFIX=bench-ref-$run-$i \
		"$eddy" run --state-dir "$work/state-ref-$i" bench/group/ref.yaml 2>"$work/ref-$i.log"
	t1=$(now)
	awk -v n="$records" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

group() {
	local procs=$1 i=$2 t0 t1 logs=() ppids=()
	t0=$(now)
	for p in $(seq "$procs"); do
		GROUP_ID=bench-g$procs-$run-$i KAFKA_OUT=bench-group-out-$run-$procs-$i EDDY_ADMIN_ADDR=127.0.0.1:0 \
			"$eddy" run --state-dir "$work/state-g$procs-$i-$p" bench/group/window.yaml 2>"$work/g$procs-$i-$p.log" &
		ppids+=($!)
		pids+=($!)
		logs+=("$work/g$procs-$i-$p.log")
	done
	while :; do
		n=$(metric_sum 'eddy_records_in_total{id="per_key",subtask="0"}' "${logs[@]}")
		if ((n >= records)); then break; fi
		for p in "${ppids[@]}"; do
			if ! kill -0 "$p" 2>/dev/null; then
				echo "a group process ended:" >&2
				cat "${logs[@]}" >&2
				exit 1
			fi
		done
		sleep 0.05
	done
	t1=$(now)
	for p in "${ppids[@]}"; do kill -TERM "$p"; done
	for p in "${ppids[@]}"; do wait "$p" || true; done
	awk -v n="$records" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

declare -A results
for i in $(seq "$runs"); do
	r=$(baseline "$i")
	results[ref]+="$r "
	echo "run $i: one process, no group: $r records/s"
	for procs in 1 2 3; do
		r=$(group "$procs" "$i")
		results[g$procs]+="$r "
		echo "run $i: group, $procs process(es): $r records/s"
	done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ref=$(echo "${results[ref]}" | median)
echo
echo "medians over $runs runs (records/s; ratio to one process without group):"
printf "  %-24s %10s  1.00  (runs: %s)\n" "one process, no group" "$ref" "${results[ref]}"
for procs in 1 2 3; do
	m=$(echo "${results[g$procs]}" | median)
	printf "  %-24s %10s  %.2f  (runs: %s)\n" "group, $procs process(es)" "$m" "$(awk -v a="$m" -v b="$ref" 'BEGIN { print a / b }')" "${results[g$procs]}"
done

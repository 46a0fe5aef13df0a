#!/usr/bin/env bash
# Kafka benchmark against a real Apache Kafka broker: Kafka -> set -> Kafka
# with delivery exactly_once (a transaction per 100ms checkpoint) and
# at_least_once, alternately in the same command (bench/kafkabench); prints
# records/s of each, their ratio, and end-to-end latency p50/p99.
#
#   scripts/bench-kafka.sh                       # starts a broker (scripts/kafka-it.sh), stops it after
#   KAFKA_BROKERS=host:9092 scripts/bench-kafka.sh   # an existing broker
#   scripts/bench-kafka.sh -records 500000 -runs 30  # flags go to bench/kafkabench
#   BROKER_CPUS=1 EDDY_CPUS=0 scripts/bench-kafka.sh   # broker and eddy on CPUs of their own (taskset)
#
# When the script starts the broker, it also reports the broker's CPU time
# per run (and adds it to the CPU comparison of the two modes).
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
started=
cleanup() {
	rm -rf "$work"
	if [[ -n $started ]]; then scripts/kafka-it.sh --stop; fi
}
trap cleanup EXIT

pin_broker=() pin_eddy=() extra=()
if [[ -n ${BROKER_CPUS:-} ]]; then pin_broker=(taskset -c "$BROKER_CPUS"); fi
if [[ -n ${EDDY_CPUS:-} ]]; then pin_eddy=(taskset -c "$EDDY_CPUS"); fi
if [[ -z ${KAFKA_BROKERS:-} ]]; then
	line=$("${pin_broker[@]}" scripts/kafka-it.sh --start-only | grep '^KAFKA_BROKERS=')
	started=1
	export "${line?}"
	pidfile=.kafka/data-${KAFKA_BROKERS##*:}/pid
	if [[ -r $pidfile ]]; then extra=(-broker-pid "$(cat "$pidfile")"); fi
fi
go build -o "$work/eddy" .
go build -o "$work/kafkabench" ./bench/kafkabench
"${pin_eddy[@]}" "$work/kafkabench" -brokers "$KAFKA_BROKERS" -eddy "$work/eddy" "${extra[@]}" "$@"

#!/usr/bin/env bash
# Checkpoint overhead with about 1 GiB of keyed state: a keyed windowed
# pipeline (generator -> key_by + 24h tumbling window -> blackhole, run
# in-process) without checkpoints and with checkpoints every 10s and 1s,
# alternately in the same command, for the memory and the bbolt state
# backends (bench/checkpointbench). Prints records/s of each and the loss
# against no checkpoints, checkpoint duration p50/p99/max with its parts,
# the snapshot size, and the time to restore from the last checkpoint.
# Checkpoints go to the real bbolt store in a temporary directory.
#
#   scripts/bench-checkpoint.sh                                   # defaults: 1 GiB, 3 rounds of 30s
#   scripts/bench-checkpoint.sh -state-mb 128 -duration 10s -runs 1   # a quick one
#   scripts/bench-checkpoint.sh -cpuprofile prof                  # prof-<backend>-<mode>.pprof
#   scripts/bench-checkpoint.sh -backends bbolt,bbolt-incremental -intervals 1s   # full against incremental
#   scripts/bench-checkpoint.sh -backends memory,memory-incremental -intervals 1s -hot-keys 0.1   # a tenth of the keys updated
#   scripts/bench-checkpoint.sh -backends memory -intervals 10s -alternate 30s -runs 6   # one job, checkpoints off and on in turn
#
# Flags go to bench/checkpointbench (-h lists them). Needs the disk space of
# about 6x the state (checkpoint store and bbolt live files) and, for the
# memory backend with 1s checkpoints, about 15x the state in RAM.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/checkpointbench" ./bench/checkpointbench
"$work/checkpointbench" "$@"

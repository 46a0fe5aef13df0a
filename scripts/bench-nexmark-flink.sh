#!/usr/bin/env bash
# Nexmark side by side with Apache Flink: the same queries over the same
# number of events of the same generator (the Nexmark reference's), into a
# blackhole, on this machine, alternating eddy and Flink per query, without
# and with checkpoints. Prints per query each side's events per CPU-second,
# the ratio eddy/Flink, and each side's checkpoint overhead (the loss of
# events per second and of events per CPU-second with checkpoints).
#
#   scripts/bench-nexmark-flink.sh                          # defaults below
#   BENCH_QUERIES=q0,q5 BENCH_EVENTS=5000000 scripts/bench-nexmark-flink.sh
#
# eddy: `eddy bench nexmark` (configs/nexmark/qN.yaml, each run in a child
# process). Flink: bench/flink-nexmark, the reference's generator and
# queries (Flink SQL) on a local MiniCluster, a JVM per run, built with
# Maven and run with its dependencies from .flink-nexmark/ (fetched once,
# again when the pom or the sources change). docs/benchmarks.md says what
# is measured and how.
#
# Settings (environment):
#   BENCH_QUERIES      queries, comma-separated (default: q0,q1,q2,q3,q4,q5,q7,q8)
#   BENCH_EVENTS       events per query and run (default: 2000000)
#   BENCH_PARALLELISM  parallelism of both sides (default: 1)
#   BENCH_CHECKPOINT   checkpoint interval of the runs with checkpoints
#                      (default: 10s; 0: no runs with checkpoints)
#   BENCH_RATE         events per second of event time (default: 10000000,
#                      Flink's Nexmark suite's)
#   BENCH_RUNS         rounds; the best run of each side counts (default: 1)
#   FLINK_WARMUP       runs of the query in the same JVM before the measured
#                      one, for JIT-compiled code (default: 1)
#   FLINK_VERSION      Flink release (default: flink.version in the pom)
#   FLINK_JAVA_OPTS    JVM options of the Flink side (default: none)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

queries=${BENCH_QUERIES:-q0,q1,q2,q3,q4,q5,q7,q8}
events=${BENCH_EVENTS:-2000000}
parallelism=${BENCH_PARALLELISM:-1}
checkpoint=${BENCH_CHECKPOINT:-10s}
rate=${BENCH_RATE:-10000000}
runs=${BENCH_RUNS:-1}
warmup=${FLINK_WARMUP:-1}
pom=bench/flink-nexmark/pom.xml
state=$root/.flink-nexmark

say() { printf 'bench-nexmark-flink: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

# check_java fails unless java 17 or newer is on PATH (Flink 2.x, and the
# bench program is compiled for 17).
check_java() {
	command -v java >/dev/null || die "java not found: install a JDK 17 or newer"
	local v
	v=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
	[[ ${v%%.*} -ge 17 ]] 2>/dev/null || die "the Flink side needs Java 17 or newer, found java ${v:-unknown}"
}

# build_flink sets $lib (Flink and its dependencies) and $jar (the bench
# program). A marker holding the checksum of the pom and the sources makes
# the next run skip Maven until they change.
build_flink() {
	local version=${FLINK_VERSION:-}
	if [[ -z $version ]]; then
		version=$(sed -n 's:.*<flink.version>\(.*\)</flink.version>.*:\1:p' "$pom")
	fi
	[[ -n $version ]] || die "no Flink version: set FLINK_VERSION or flink.version in $pom"
	flink_version=$version
	lib=$state/lib/$version
	jar=bench/flink-nexmark/target/eddy-flink-nexmark-0.jar
	local sum
	sum=$( (echo "$version"; find bench/flink-nexmark -path bench/flink-nexmark/target -prune -o -type f -print | LC_ALL=C sort | xargs cat) | cksum)
	if [[ -f $lib/.complete && $(<"$lib/.complete") == "$sum" && -f $jar ]]; then
		return
	fi
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven) to fetch Flink $version"
	say "fetching Apache Flink $version with Maven into ${lib#"$root"/} and building bench/flink-nexmark"
	rm -rf "$lib"
	mkdir -p "$lib"
	if ! mvn -B -q -f "$pom" -Dflink.version="$version" package dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$lib" >"$state/mvn.log" 2>&1; then
		tail -n 40 "$state/mvn.log" >&2
		die "Maven could not fetch Flink $version or build bench/flink-nexmark (full output in ${state#"$root"/}/mvn.log)"
	fi
	[[ -n $(compgen -G "$lib/flink-runtime-*.jar") && -f $jar ]] || die "Maven ran but $lib has no flink-runtime jar or $jar is missing"
	echo "$sum" >"$lib/.complete"
}

check_java
mkdir -p "$state"
build_flink
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/eddy" .
results=$work/results
: >"$results"

# run_eddy runs one query, without and with checkpoints (one child process
# each), and keeps its result lines.
run_eddy() {
	EDDY_LOG_LEVEL=warn "$work/eddy" bench nexmark --queries "$1" --events "$events" --parallelism "$parallelism" \
		--rate "$rate" --checkpoint "$checkpoint" 2>"$work/eddy.err" | grep '^nexmark ' | tee -a "$results" >&2 ||
		{
			cat "$work/eddy.err" >&2
			die "eddy failed on $1"
		}
}

# run_flink runs one query on Flink in a JVM of its own; $2 is the
# checkpoint interval (0: none).
run_flink() {
	local cp=(--checkpoint "$2")
	if [[ $2 != 0 ]]; then
		rm -rf "$work/flink-checkpoints"
		cp+=(--checkpoint-dir "$work/flink-checkpoints")
	fi
	# shellcheck disable=SC2086 # FLINK_JAVA_OPTS is a list of options
	java ${FLINK_JAVA_OPTS:-} -cp "$jar:$lib/*" io.github.eddystream.bench.NexmarkBench --query "$1" --events "$events" \
		--parallelism "$parallelism" --rate "$rate" --warmup "$warmup" "${cp[@]}" 2>"$work/flink.err" |
		grep '^nexmark ' | tee -a "$results" >&2 ||
		{
			tail -n 40 "$work/flink.err" >&2
			die "Flink failed on $1"
		}
}

say "eddy and Flink $flink_version, $events events per query, parallelism $parallelism, $(nproc) cores, checkpoints: $checkpoint, $runs round(s)"
for round in $(seq "$runs"); do
	for q in ${queries//,/ }; do
		say "round $round: $q"
		run_eddy "$q"
		run_flink "$q" 0
		if [[ $checkpoint != 0 ]]; then
			run_flink "$q" "$checkpoint"
		fi
	done
done

# The summary: per query, side and mode (without, with checkpoints), the
# best run: the most events per CPU-second, and apart from it the most
# events per second (the loss of events per second compares those).
awk -v queries="$queries" -v cp="$checkpoint" '
function field(k,   i, kv) {
	for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] }
	return ""
}
{
	side = field("engine") == "flink" ? "flink" : "eddy"
	mode = field("checkpoint") == "" ? "plain" : "cp"
	k = $2 SUBSEP side SUBSEP mode
	e = field("events_per_cpu_second") + 0
	w = field("events") / field("seconds")
	if (!(k in cpu) || e > cpu[k]) { cpu[k] = e; n[k] = field("checkpoints") }
	if (!(k in wall) || w > wall[k]) wall[k] = w
}
function loss(base, x) { return base > 0 ? sprintf("%.1f%%", 100 * (1 - x / base)) : "-" }
function ratio(a, b) { return b > 0 ? a / b : 0 }
END {
	printf "\n%-5s %14s %14s %7s", "query", "eddy ev/CPU-s", "Flink ev/CPU-s", "ratio"
	if (cp != "0") printf "   %-28s %7s   %-23s %-23s", "with checkpoints every " cp " (eddy, Flink)", "ratio", "eddy loss: ev/s, ev/CPU-s", "Flink loss: ev/s, ev/CPU-s"
	printf "\n"
	nq = split(queries, qs, ",")
	for (i = 1; i <= nq; i++) {
		q = qs[i]
		ep = q SUBSEP "eddy" SUBSEP "plain"; fp = q SUBSEP "flink" SUBSEP "plain"
		ec = q SUBSEP "eddy" SUBSEP "cp"; fc = q SUBSEP "flink" SUBSEP "cp"
		printf "%-5s %14.0f %14.0f %6.2fx", q, cpu[ep], cpu[fp], ratio(cpu[ep], cpu[fp])
		if (cp != "0") {
			printf "   %13.0f %14.0f %6.2fx   %-11s %-11s %-11s %-11s", cpu[ec], cpu[fc], ratio(cpu[ec], cpu[fc]),
				loss(wall[ep], wall[ec]), loss(cpu[ep], cpu[ec]), loss(wall[fp], wall[fc]), loss(cpu[fp], cpu[fc])
			printf " (checkpoints: eddy %s, Flink %s)", n[ec], n[fc]
		}
		printf "\n"
	}
}' "$results"
echo
cat "$results"

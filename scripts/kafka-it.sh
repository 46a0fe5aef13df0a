#!/usr/bin/env bash
# Integration tests against a real Apache Kafka 4.x broker.
#
#   scripts/kafka-it.sh                 # start a broker, run the Kafka and group-mode tests, stop it
#   scripts/kafka-it.sh -run TestX -v   # extra arguments go to `go test`
#   scripts/kafka-it.sh --start-only    # start a broker, print KAFKA_BROKERS=..., leave it running
#   scripts/kafka-it.sh --stop          # stop the broker(s) that --start-only left running
#
# The broker (Kafka from Maven, scripts/kafka/pom.xml, cached under .kafka/lib)
# is a single KRaft node, broker and controller in one JVM, on 127.0.0.1. Its
# data and log live in .kafka/data-<port>/, wiped when a broker starts on that
# port again. Automatic topic creation is on. The tests read KAFKA_BROKERS;
# without it they use an in-process broker or skip themselves.
#
# Environment:
#   KAFKA_PORT             client port (default: the first free port from 19092;
#                          the controller listens on the next free port above it)
#   KAFKA_VERSION          Kafka release to fetch (default: kafka.version in the pom)
#   KAFKA_HEAP_OPTS        JVM heap flags (default -Xmx512m -Xms256m)
#   KAFKA_READY_TIMEOUT    seconds to wait for the broker to come up (default 120)
#   KAFKA_IT_PACKAGES      packages to test (default: ./connectors/kafka/... ./e2e/...)
set -euo pipefail
cd "$(dirname "$0")/.."

root=$PWD
state=$root/.kafka
pom=scripts/kafka/pom.xml

die() {
	printf 'kafka-it: %s\n' "$*" >&2
	exit 1
}
say() { printf 'kafka-it: %s\n' "$*" >&2; }

# --- Java and the broker jars -----------------------------------------------

check_java() {
	command -v java >/dev/null || die "java not found: install a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless)"
	local v
	v=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
	[[ ${v%%.*} -ge 17 ]] 2>/dev/null || die "Kafka 4.x needs Java 17 or newer, found java ${v:-unknown}: put a newer java first on PATH"
}

# fetch_jars sets $lib to a directory holding the broker and its runtime
# dependencies. A marker file written after a complete copy, holding the pom's
# checksum, makes the next run skip Maven until the pom changes.
fetch_jars() {
	local version=${KAFKA_VERSION:-}
	if [[ -z $version ]]; then
		version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
	fi
	[[ -n $version ]] || die "no Kafka version: set KAFKA_VERSION or kafka.version in $pom"
	kafka_version=$version
	lib=$state/lib/$version
	local sum
	sum=$(cksum <"$pom")
	if [[ -f $lib/.complete && $(<"$lib/.complete") == "$sum" ]]; then
		return
	fi
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven) to fetch Kafka $version"
	say "fetching Apache Kafka $version and its dependencies with Maven into ${lib#"$root"/}"
	rm -rf "$lib"
	mkdir -p "$lib"
	if ! mvn -B -q -f "$pom" -Dkafka.version="$version" \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" >"$state/mvn.log" 2>&1; then
		tail -n 40 "$state/mvn.log" >&2
		die "Maven could not fetch Kafka $version (full output in ${state#"$root"/}/mvn.log)"
	fi
	[[ -n $(compgen -G "$lib/kafka_2.13-*.jar") ]] || die "Maven ran but $lib has no kafka_2.13 jar"
	echo "$sum" >"$lib/.complete"
}

# --- ports ------------------------------------------------------------------

port_free() {
	# Nothing accepts a connection there (the subshell keeps the fd private).
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

next_free_port() {
	local p=$1
	while ! port_free "$p"; do
		p=$((p + 1))
		((p < 65535)) || die "no free port at or above $1"
	done
	echo "$p"
}

choose_ports() {
	if [[ -n ${KAFKA_PORT:-} ]]; then
		port=$KAFKA_PORT
		port_free "$port" || die "port $port is in use: stop what listens there (scripts/kafka-it.sh --stop if it is a broker of ours) or set another KAFKA_PORT"
	else
		port=$(next_free_port 19092)
	fi
	controller_port=$(next_free_port $((port + 1)))
}

# --- broker -----------------------------------------------------------------

write_config() {
	mkdir -p "$run/kraft"
	cat >"$run/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$run/kraft
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
# Abort timed-out transactions within a second (default 10s), so that tests of
# abandoned transactions need not wait long.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Keep records whatever their timestamps: the tests replay event times from
# long ago, and with the default retention (7 days by record timestamp) the
# broker's retention check, every 5 minutes, deletes such records (the
# active segment included) from under a test that has not read them yet.
log.retention.ms=-1
EOF
	cat >"$run/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
EOF
}

# format_storage writes the KRaft metadata with a fresh cluster id. The tool's
# class moved between releases, so both names are tried.
format_storage() {
	local id cls out
	# 16 random bytes in URL-safe base64, like Uuid.randomUuid; not starting
	# with "-", which the tool would take for an option (Kafka avoids it too).
	id=-
	while [[ $id == -* ]]; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
	done
	for cls in kafka.tools.StorageTool org.apache.kafka.tools.StorageTool; do
		if out=$(java "${jvm_opts[@]}" -cp "$lib/*" "$cls" format \
			--config "$run/server.properties" --cluster-id "$id" --ignore-formatted 2>&1); then
			return
		fi
		if [[ $out != *"Could not find or load main class"* ]]; then
			printf '%s\n' "$out" >&2
			die "formatting the broker's storage failed"
		fi
	done
	die "no StorageTool class in Kafka $kafka_version's jars"
}

# broker_pid_ok says whether pid $1 is a java process running from run dir $2,
# so that a stale pid file never makes us signal some other process.
broker_pid_ok() {
	[[ -n $1 && -r /proc/$1/cmdline ]] && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF -- "$2/server.properties"
}

stop_broker() { # pid run-dir
	local pid=$1 dir=$2 i
	broker_pid_ok "$pid" "$dir" || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	# Controlled shutdown takes a few seconds; give it a bound, then kill.
	for ((i = 0; i < 300; i++)); do
		broker_pid_ok "$pid" "$dir" || break
		sleep 0.1
	done
	if broker_pid_ok "$pid" "$dir"; then
		say "broker $pid did not stop within 30s, killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/pid"
}

ready() {
	local out
	out=$(kcat -b "127.0.0.1:$port" -L -m 2 2>/dev/null) || return 1
	[[ $out == *"1 brokers:"* ]]
}

# start_broker starts the broker in the background, sets $broker_pid and
# returns once it answers metadata requests.
start_broker() {
	check_java
	fetch_jars
	ensure_kcat
	choose_ports
	run=$state/data-$port
	# A broker of ours left on this port by an earlier run would hold the dir.
	if [[ -f $run/pid ]]; then
		stop_broker "$(cat "$run/pid")" "$run"
	fi
	rm -rf "$run"
	mkdir -p "$run"
	log=$run/broker.log
	jvm_opts=(-Djava.awt.headless=true "-Dlog4j2.configurationFile=$run/log4j2.properties")
	write_config
	format_storage
	local heap=${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}
	# shellcheck disable=SC2086 # heap is a list of flags
	nohup java $heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "${jvm_opts[@]}" \
		-cp "$lib/*" kafka.Kafka "$run/server.properties" >"$log" 2>&1 </dev/null &
	broker_pid=$!
	echo "$broker_pid" >"$run/pid"
	say "starting Kafka $kafka_version on 127.0.0.1:$port (pid $broker_pid, log ${log#"$root"/})"

	local bound=${KAFKA_READY_TIMEOUT:-120} start=$SECONDS
	until ready; do
		if ! kill -0 "$broker_pid" 2>/dev/null; then
			tail -n 40 "$log" >&2
			die "the broker exited during startup (log above, full log in ${log#"$root"/})"
		fi
		if ((SECONDS - start >= bound)); then
			tail -n 40 "$log" >&2
			stop_broker "$broker_pid" "$run"
			die "the broker did not answer metadata requests on 127.0.0.1:$port within ${bound}s (log above, full log in ${log#"$root"/}); raise KAFKA_READY_TIMEOUT on a slow machine"
		fi
		sleep 0.2
	done
	say "broker ready after $((SECONDS - start))s"
}

# --- kcat -------------------------------------------------------------------

ensure_kcat() {
	command -v kcat >/dev/null && return
	local sudo=()
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null || die "kcat is missing and installing it needs root: run apt-get install kcat as root"
		sudo=(sudo)
	fi
	say "installing kcat with apt-get"
	{
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat ||
			{ "${sudo[@]}" apt-get update -q && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat; }
	} >"$state/apt.log" 2>&1 || {
		tail -n 20 "$state/apt.log" >&2
		die "could not install kcat with apt-get (output in ${state#"$root"/}/apt.log): install it by hand"
	}
	command -v kcat >/dev/null || die "apt-get installed kcat but it is not on PATH"
}

# --- commands ---------------------------------------------------------------

mkdir -p "$state"

case ${1:-} in
--start-only)
	start_broker
	echo "KAFKA_BROKERS=127.0.0.1:$port"
	say "left running; stop it with scripts/kafka-it.sh --stop (pid in ${run#"$root"/}/pid)"
	exit 0
	;;
--stop)
	found=0
	for pidfile in "$state"/data-*/pid; do
		[[ -f $pidfile ]] || continue
		dir=$(dirname "$pidfile")
		if [[ -n ${KAFKA_PORT:-} && $dir != "$state/data-$KAFKA_PORT" ]]; then
			continue
		fi
		found=1
		pid=$(cat "$pidfile")
		if broker_pid_ok "$pid" "$dir"; then
			stop_broker "$pid" "$dir"
			say "stopped the broker on port ${dir##*/data-} (log ${dir#"$root"/}/broker.log)"
		else
			rm -f "$pidfile"
		fi
	done
	((found)) || say "no broker of ours is running"
	exit 0
	;;
esac

start=$SECONDS
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n ${test_pid:-} ]]; then
		kill -TERM -- "-$test_pid" 2>/dev/null || true
		wait "$test_pid" 2>/dev/null || true
	fi
	if [[ -n ${broker_pid:-} ]]; then
		stop_broker "$broker_pid" "$run"
		say "broker stopped; its log is ${log#"$root"/}"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Only the packages whose directory exists: the Kafka connector or the e2e
# tests may not be there yet. (A package that exists but does not compile
# still fails the run.)
read -r -a patterns <<<"${KAFKA_IT_PACKAGES:-./connectors/kafka/... ./e2e/...}"
pkgs=()
for p in "${patterns[@]}"; do
	if [[ -d ${p%/...} ]]; then
		pkgs+=("$p")
	fi
done

start_broker

if ((${#pkgs[@]} == 0)); then
	say "the broker works, but none of ${patterns[*]} exists yet: no Kafka tests to run"
	exit 0
fi

export KAFKA_BROKERS=127.0.0.1:$port
say "go test ${pkgs[*]} with KAFKA_BROKERS=$KAFKA_BROKERS"
# In its own process group, so that the traps can stop it and its test
# binaries (bash runs a trap only once a foreground command has finished).
setsid go test -count=1 -timeout 20m -run 'Kafka|Group' "${pkgs[@]}" "$@" &
test_pid=$!
wait "$test_pid"
test_pid=
say "ok in $((SECONDS - start))s"

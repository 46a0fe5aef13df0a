#!/usr/bin/env bash
# Compares a package's Go benchmarks at two revisions in one command: builds
# the package's test binary at each revision (in temporary worktrees), runs
# them alternately, one -test.count 1 run each per round, so that both see
# the same machine load, and prints benchstat's comparison. A difference
# smaller than the spread benchstat reports is no difference.
#
#   scripts/bench-compare.sh OLD NEW PACKAGE BENCH_REGEX
#   scripts/bench-compare.sh 6fd0436 HEAD ./statestore/ 'Snapshot/memory/encode'
#   BENCH_ROUNDS=10 BENCH_TIME=2s scripts/bench-compare.sh main . ./operators/agg/ RowCBOR
#
# OLD and NEW are git revisions; NEW may be "." for the working tree as it
# is (uncommitted changes included). Environment:
#   BENCH_ROUNDS  alternating rounds (default 6): benchstat's sample size
#   BENCH_TIME    -test.benchtime of each run (default 1s)
#   BENCH_CPU     -test.cpu (default: GOMAXPROCS)
#   BENCH_OUT     directory to keep old.txt, new.txt and the binaries in
#                 (default: a temporary directory, removed at the end)
set -euo pipefail

if [ $# -ne 4 ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
old_rev=$1 new_rev=$2 pkg=$3 bench=$4
rounds=${BENCH_ROUNDS:-6}
benchtime=${BENCH_TIME:-1s}
cpu=${BENCH_CPU:-}

root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
out=${BENCH_OUT:-$work}
mkdir -p "$out"
trees=()
cleanup() {
  for t in "${trees[@]}"; do git -C "$root" worktree remove --force "$t" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# tree REV: a directory holding REV's files ("." is the working tree).
tree() {
  if [ "$1" = . ]; then
    echo "$root"
    return
  fi
  local dir
  dir="$work/tree-$(git -C "$root" rev-parse --short "$1^{commit}")-$RANDOM"
  git -C "$root" worktree add --detach --quiet "$dir" "$1" >&2
  trees+=("$dir")
  echo "$dir"
}

benchstat=$(command -v benchstat || true)
if [ -z "$benchstat" ] && [ -x "$(go env GOPATH)/bin/benchstat" ]; then
  benchstat=$(go env GOPATH)/bin/benchstat
fi

old_tree=$(tree "$old_rev")
new_tree=$(tree "$new_rev")
(cd "$old_tree" && go test -c -o "$out/old.test" "$pkg")
(cd "$new_tree" && go test -c -o "$out/new.test" "$pkg")

flags=(-test.run '^$' -test.bench "$bench" -test.benchmem -test.count 1 -test.benchtime "$benchtime")
if [ -n "$cpu" ]; then
  flags+=(-test.cpu "$cpu")
fi
: >"$out/old.txt"
: >"$out/new.txt"
for i in $(seq "$rounds"); do
  echo "round $i/$rounds" >&2
  # A test binary runs in its package's directory (testdata).
  (cd "$old_tree/$pkg" && "$out/old.test" "${flags[@]}") >>"$out/old.txt"
  (cd "$new_tree/$pkg" && "$out/new.test" "${flags[@]}") >>"$out/new.txt"
done

echo "# $old_rev (old) vs $new_rev (new): $pkg -bench '$bench', $rounds rounds of $benchtime"
if [ -n "$benchstat" ]; then
  "$benchstat" old="$out/old.txt" new="$out/new.txt"
else
  go run golang.org/x/perf/cmd/benchstat@latest old="$out/old.txt" new="$out/new.txt"
fi

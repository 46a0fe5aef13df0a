#!/usr/bin/env bash
# Regenerates the tables of reference events (../reference-*.jsonl) from the
# Flink Nexmark repository's generator, patched only where it is not
# deterministic, and prints them to files next to this script's parent:
#
#   - java.util.SplittableRandom becomes java.util.Random (the generator's
#     original random source, as in Apache Beam's Nexmark);
#   - the generator seeds one Random per event with the event id, instead of
#     one unseeded generator (the seeding of the original generator);
#   - the once-per-process tables (the channels' URLs, the 1 MiB string the
#     extra fields are cut from) are made from Random(1) and Random(2).
#
# Everything else is the reference's code at $NEXMARK_COMMIT. Needs git, a JDK
# (javac and java, 17 or later) and network access to $NEXMARK_REPO, which may
# also be a local clone.
#
# Usage: connectors/nexmark/testdata/reference/generate.sh
set -euo pipefail

NEXMARK_REPO=${NEXMARK_REPO:-https://github.com/nexmark/nexmark.git}
NEXMARK_COMMIT=${NEXMARK_COMMIT:-6b3646c3baec701f1fa74baf938d235f742e5d3c}

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

git clone --quiet "$NEXMARK_REPO" "$tmp/nexmark"
git -C "$tmp/nexmark" checkout --quiet "$NEXMARK_COMMIT"
main=$tmp/nexmark/nexmark-flink/src/main/java/com/github/nexmark/flink
src=$tmp/src/com/github/nexmark/flink
mkdir -p "$src/generator/model" "$src/model" "$src/utils"
cp "$main"/generator/{GeneratorConfig,NexmarkGenerator}.java "$src/generator/"
cp "$main"/generator/model/*.java "$src/generator/model/"
cp "$main"/model/{Person,Auction,Bid,Event}.java "$src/model/"
cp "$main"/NexmarkConfiguration.java "$src/"

# patch FILE SED-EXPRESSION: applies the expression, failing when it changes
# nothing (the reference moved on: check the patch still means the same).
patch() {
  local before
  before=$(cat "$1")
  sed -i "$2" "$1"
  if [ "$before" = "$(cat "$1")" ]; then
    echo "generate.sh: $2 changed nothing in $1" >&2
    exit 1
  fi
}
for f in "$src"/generator/*.java "$src"/generator/model/*.java; do
  if grep -q SplittableRandom "$f"; then patch "$f" 's/SplittableRandom/Random/g'; fi
done
patch "$src/generator/NexmarkGenerator.java" 's/^  private final Random random = new Random();$//'
patch "$src/generator/NexmarkGenerator.java" 's/^\(    long newEventId = getNextEventId();\)$/\1\n    Random random = new Random(newEventId);/'
patch "$src/generator/model/BidGenerator.java" 's/Random random = new Random();/Random random = new Random(1);/'
patch "$src/generator/model/StringsGenerator.java" 's/nextExactString(new Random(), 1024 \* 1024)/nextExactString(new Random(2), 1024 * 1024)/'

# Stand-ins for the Flink, Jackson and JSR-305 classes the files import.
cp -r "$here/stubs/." "$tmp/src/"
cp "$here/Dump.java" "$tmp/src/"
javac -nowarn -d "$tmp/classes" $(find "$tmp/src" -name '*.java')

run() { java -cp "$tmp/classes" Dump "$@"; }
# count first every rate baseTime person auction bid hotAuction hotSellers hotBidders
run 3000000 250 29989 10000 1436918400000 1 3 46 2 4 4 >"$here/../reference-default.jsonl"
run 3000 150 97 3 0 2 5 13 1 3 7 >"$here/../reference-custom.jsonl"
echo "wrote $here/../reference-default.jsonl and reference-custom.jsonl" >&2

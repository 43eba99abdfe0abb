#!/bin/sh
# mutants.sh shows the conformance suite catching a broken bookkeeping of
# each mode (issue 19: "fails when either is broken"). For each mutant it
# applies a patch with git apply, runs the suite, reverts the patch, and
# prints the tests that fail with the mutant and pass without it.
#
#   conformance/testdata/mutant-inproc.patch  internal/win/completion.go: the
#       completion window admits one unit too many (in-process bookkeeping)
#   conformance/testdata/mutant-redis.patch   internal/rstore/script.go: the
#       Lua script's completion check admits one unit too many (Redis)
#
# Usage, from anywhere in the repository (a clean work tree for the files
# the patches touch):
#
#   conformance/mutants.sh            # both mutants
#   conformance/mutants.sh redis      # one
#
# Needs redis-server and redis-cli on PATH (package redistest). Exits 1 when
# a mutant is not caught.
set -eu

root=$(git rev-parse --show-toplevel)
cd "$root"
mutants=${*:-inproc redis}
tmp=$(mktemp -d)
applied=""
cleanup() {
	if [ -n "$applied" ]; then
		git apply -R "$applied"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# failing runs the suite and writes the names of the failing tests (the
# leaves: a parent fails with its subtests) to $1.
failing() {
	go test -count=1 ./conformance/ >"$1.log" 2>&1 || true
	sed -n 's/^ *--- FAIL: \([^ ]*\).*/\1/p' "$1.log" | sort -u >"$1"
}

echo "baseline: the suite without a mutant"
failing "$tmp/base"
sed 's/^/  fails already: /' "$tmp/base"

status=0
for m in $mutants; do
	patch=conformance/testdata/mutant-$m.patch
	git apply --check "$patch"
	git apply "$patch"
	applied=$patch
	echo "mutant $m ($patch):"
	failing "$tmp/$m"
	git apply -R "$patch"
	applied=""
	caught=$(comm -13 "$tmp/base" "$tmp/$m")
	if [ -z "$caught" ]; then
		echo "  NOT CAUGHT"
		status=1
	else
		echo "$caught" | sed 's/^/  caught by: /'
	fi
done
exit $status

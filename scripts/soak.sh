#!/usr/bin/env bash
# The soak stage: repeated race runs of the concurrent packages, then every
# fuzz target in the repository for a bounded time each. Every step is one
# result; a failed step fails the stage (no retries). Prints
# "N passed, N failed" last.
#
#   SOAK_COUNT     -count of the race runs (default 5)
#   SOAK_FUZZTIME  -fuzztime per fuzz target (default 100000x: an execution
#                  count, from under a second to about a minute per target
#                  on 2 cores; about 5 min for all 33 with the builds). A
#                  count, not a duration: with a duration, Go 1.26's fuzz
#                  coordinator can report its own deadline as a failure
#                  ("context deadline exceeded", no input written; Go issue
#                  75804, fixed in Go 1.27), which CI saw once.
#   SOAK_RACE_PKGS packages of the race runs (default below)
#   SOFTIB_SOAK_SECONDS  duration of each bounded soak test (default 60)
#
# A fuzz failure leaves its input in the package's testdata/fuzz/FuzzX/:
# add that file with the fix, so the plain test run keeps checking it.
set -uo pipefail
cd "$(dirname "$0")/.."

count=${SOAK_COUNT:-5}
fuzztime=${SOAK_FUZZTIME:-100000x}
race_pkgs=${SOAK_RACE_PKGS:-./lnet/o2iblnd ./lnet/socklnd ./rxe ./cm ./rdmacm}

pass=0
fail=0
failed=()
logdir=$(mktemp -d /tmp/softib-soak.XXXXXX)

# step NAME CMD...: runs CMD with its output in a log; prints the log
# when it fails.
step() {
	local name=$1
	shift
	local log="$logdir/$(echo "$name" | tr -c 'A-Za-z0-9._-' '_').log"
	local t0=$SECONDS
	if "$@" >"$log" 2>&1; then
		pass=$((pass + 1))
		echo "PASS  $name ($((SECONDS - t0)) s)"
	else
		fail=$((fail + 1))
		failed+=("$name")
		echo "FAIL  $name ($((SECONDS - t0)) s); log: $log"
		grep -E '^(--- FAIL|FAIL|panic:|WARNING: DATA RACE)|_test\.go:[0-9]+:|Failing input written to' "$log" | head -40
	fi
}

echo "== soak: go test -race -count=$count, one package at a time"
for p in $race_pkgs; do
	step "race $p" go test -race -count="$count" -timeout 30m "$p"
done

echo "== soak: bounded soaks (${SOFTIB_SOAK_SECONDS:-60} s each)"
# One after the other: run together they would compete for two cores.
step "soak rxe TestSoakRCQPs" env SOFTIB_SOAK=1 SOFTIB_SOAK_SECONDS="${SOFTIB_SOAK_SECONDS:-60}" \
	go test -v -run '^TestSoakRCQPs$' -count=1 -timeout 10m ./rxe
step "soak lnetd TestSoakLNetStorm" env SOFTIB_SOAK=1 SOFTIB_SOAK_SECONDS="${SOFTIB_SOAK_SECONDS:-60}" \
	go test -v -run '^TestSoakLNetStorm$' -count=1 -timeout 10m ./tools/lnetd
# Their one-line summaries (ops, retransmits, drops, heap).
grep -h '_test.go:[0-9]*: soak ' "$logdir"/soak_*.log 2>/dev/null || true

# fuzz_one DIR NAME fuzzes one target; a pattern that matches no target
# (go test then only warns) is a failure, not a pass.
fuzz_one() {
	local out
	out=$(go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" 2>&1)
	local rc=$?
	echo "$out"
	if grep -q 'no fuzz tests to fuzz' <<<"$out"; then
		echo "no fuzz target $2 in $1"
		return 1
	fi
	return $rc
}

echo "== soak: fuzz targets, $fuzztime each"
# Package dir and target name of every fuzz target in the repository.
mapfile -t targets < <(grep -rn -E '^func Fuzz[A-Za-z0-9_]*\(' --include='*_test.go' --exclude-dir=.git . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	step "fuzz ./$dir $name" fuzz_one "./$dir" "$name"
done

if [ "$fail" -gt 0 ]; then
	echo "failed: ${failed[*]}"
	echo "logs: $logdir"
else
	rm -rf "$logdir"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# `make test` RUNS times in a row while another CPU-bound process spins on a core: the check that
# the suite does not flake on a loaded machine, where a wait that assumes an idle one fails. Every
# run goes on after a failure, so one pass shows all the flakes; the summary is a table on stdout
# and JSON in OUT. SHUFFLE=1 runs the suite in a different order each time
# (INFILL_TEST_ORDER=shuffle:RUN).
#
#   make test-repeat RUNS=10 SHUFFLE=1      # or: bash tests/repeat_under_load.sh
set -uo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-10}
SHUFFLE=${SHUFFLE:-0}
OUT=${OUT:-build/test-repeat}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"

# The load: one process that never sleeps, started before the first run and ended with this
# script however it ends.
"$PYTHON" -c 'while True: pass' &
load=$!
trap 'kill "$load" 2>/dev/null' EXIT

results=()
failed=0
printf '%-4s %-16s %-7s %8s  %s\n' run order result seconds summary
for run in $(seq 1 "$RUNS"); do
    order=${INFILL_TEST_ORDER:-}
    [ "$SHUFFLE" = 1 ] && order="shuffle:$run"
    log="$OUT/run-$run.log"
    start=$(date +%s)
    INFILL_TEST_ORDER=$order make test >"$log" 2>&1
    rc=$?
    seconds=$(($(date +%s) - start))
    # pytest's closing line, e.g. "=== 812 passed, 9 skipped in 640.12s ===".
    summary=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -n 1 | tr -d '=' | xargs)
    result=pass
    if [ "$rc" != 0 ]; then
        result=FAIL
        failed=$((failed + 1))
    fi
    printf '%-4s %-16s %-7s %8s  %s\n' "$run" "${order:-pytest}" "$result" "$seconds" "$summary"
    results+=("{\"run\": $run, \"order\": \"${order:-pytest}\", \"rc\": $rc, \"seconds\": $seconds, \"summary\": \"$summary\"}")
done

{
    printf '{"runs": %s, "failed": %s, "load": "one CPU-bound process", "results": [' "$RUNS" "$failed"
    (IFS=,; printf '%s' "${results[*]}")
    printf ']}\n'
} >"$OUT/summary.json"
echo "$((RUNS - failed)) passed, $failed failed (logs and summary.json in $OUT)"
[ "$failed" = 0 ]

# Sourced by the experiment scripts (measure_arms.sh, width_curve.sh): one `swarm eval` run at a time.
# Needs SWARM (the swarm command) and OUT (the results folder); EXTRA: more swarm eval flags.

# eval_run ID FLAG...: swarm eval FLAG... into OUT/ID, quiet, resuming an interrupted run, test seeds through
# the ledger experiments/test_seeds.jsonl. Exit 1 (an episode crashed) is kept in the raw data; anything else
# (2: bad input, 130: interrupted) stops the calling script with that code.
eval_run() {
    local id=$1 rc
    shift
    echo "$(date -Is) $id, load $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086
    "$SWARM" eval "$@" --test-seed-ledger experiments/test_seeds.jsonl -o "$OUT" -q --run-id "$id" --resume \
        ${EXTRA:-} > /dev/null
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
        echo "swarm eval failed for $id (exit $rc)" >&2
        exit $rc
    fi
}

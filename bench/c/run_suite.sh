#!/usr/bin/env bash
# Run the whole peer + raw-socket suite with default arguments and collect the
# JSON lines in one file, one implementation after another (no interleaving,
# no project runs: `ptl-bench compare` does the full side-by-side comparison).
#
#   bench/c/run_suite.sh [OUT.jsonl] [IMPLS...]
#
# IMPLS default: openmpi-tcp openmpi-sm mpich mpich-net raw raw-unpinned
# (raw-unpinned: ptl-bench raw latency --no-pin). BENCHES (env)
# defaults to all nine C benchmarks on 2 ranks (comb runs both methods). Before every
# program the script waits (up to IDLE_WAIT seconds, default 60) for the two
# CPUs to be >= 90 % idle, since other work on a 2-core machine wrecks
# latency numbers; a point measured on a busy machine is still recorded.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-results.jsonl}
shift || true
impls=("$@")
[ ${#impls[@]} -gt 0 ] || impls=(openmpi-tcp openmpi-sm mpich mpich-net raw raw-unpinned)
benches=(${BENCHES:-latency bandwidth bibw msgrate overlap comb matchlist allreduce bcast})

idle_pct() {
    local a b
    read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ < /proc/stat
    sleep 0.5
    read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ < /proc/stat
    a=$(( (u2+n2+s2+i2+w2+q2+sq2+st2) - (u1+n1+s1+i1+w1+q1+sq1+st1) ))
    b=$(( i2 - i1 ))
    echo $(( a > 0 ? 100 * b / a : 100 ))
}
wait_idle() {
    local t=0
    while [ "$(idle_pct)" -lt 90 ] && [ $t -lt "${IDLE_WAIT:-60}" ]; do
        sleep 1
        t=$((t + 2))
    done
}

make -s -C "$here" >&2
for impl in "${impls[@]}"; do
    if [ "$impl" = raw-unpinned ]; then
        (cd "$root" && cargo build -q --release -p portals-bench --bin ptl-bench) >&2
        wait_idle
        echo "== raw latency --no-pin" >&2
        timeout 600 "$root/target/release/ptl-bench" raw latency --no-pin >> "$out"
        continue
    fi
    if [ "$impl" = raw ]; then
        (cd "$root" && cargo build -q --release -p portals-bench --bin ptl-bench) >&2
        for b in latency bandwidth; do
            wait_idle
            echo "== raw $b" >&2
            timeout 600 "$root/target/release/ptl-bench" raw "$b" >> "$out"
        done
        continue
    fi
    for b in "${benches[@]}"; do
        if [ "$b" = comb ]; then
            for m in poll pww; do
                wait_idle
                echo "== $impl comb -p $m" >&2
                "$here/run_peer.sh" "$impl" comb -p "$m" >> "$out"
            done
        else
            wait_idle
            echo "== $impl $b" >&2
            "$here/run_peer.sh" "$impl" "$b" >> "$out"
        fi
    done
done

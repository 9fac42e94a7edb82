#!/usr/bin/env bash
# Interleaved A/B of the progress thread's knobs on the application kernels
# (docs/PERFORMANCE.md, "Application kernels: thread against poll mode"):
# per round, each variant is one `ptl-bench apps` run of one round; prints
# "round variant bench ms" lines, then the median per bench and variant.
#
#   bench/apps-knobs-ab.sh [PTL_BENCH] [ROUNDS] [RANKS] [NAL] [KERNELS]
#   (defaults: target/release/ptl-bench 7 4 tcp halo,cg)
set -euo pipefail
exe=${1:-target/release/ptl-bench}
rounds=${2:-7}
ranks=${3:-4}
nal=${4:-tcp}
kernels=${5:-halo,cg}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
lines=$dir/all.txt
for round in $(seq "$rounds"); do
    for v in thread poll hb1000 hb3200 slice0; do
        imp=mpi-$nal-thread
        envs=()
        case $v in
        poll) imp=mpi-$nal-poll ;;
        hb1000) envs=(PTL_HANDBACK_US=1000) ;;
        hb3200) envs=(PTL_HANDBACK_US=3200) ;;
        slice0) envs=(PTL_PROGRESS_SLICE_US=0) ;;
        esac
        env "${envs[@]}" "$exe" apps --kernel "$kernels" --quick --ranks "$ranks" --rounds 1 \
            --impls "$imp" --no-peers --name "ab-$v" --out-dir "$dir" >/dev/null
        python3 -c '
import json, sys
v, rnd, path = sys.argv[1:]
for r in json.load(open(path))["records"]:
    print(rnd, v, r["bench"], r["value"])
' "$v" "$round" "$dir/ab-$v.json" | tee -a "$lines"
    done
done
python3 -c '
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, v, b, x = line.split()
    d[(b, v)].append(float(x))
for (b, v), xs in sorted(d.items()):
    print(f"{b} {v}: median {statistics.median(xs):.0f} ms, range {min(xs):.0f}-{max(xs):.0f}, {len(xs)} rounds")
' "$lines"

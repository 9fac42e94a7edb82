#!/bin/bash
# One A/B point of the object store, as docs/PERFORMANCE.md (issue 19)
# used it: a fresh server on a fresh tmpfs store, one objstore-load run,
# the median of its repetitions, plus client CPU (perf stat task-clock of
# the load generator) and server CPU per request.
#
#   objstore/scripts/ab.sh DIR SERVER OP SIZE CLIENTS REQUESTS [objstore-load args...]
#
# DIR holds objstore-server, objstore-grpc-server and objstore-load (copy
# target/release/ of each build to compare into its own directory);
# SERVER is `portals`, `tonic` or `raw` (the plain-TCP floor); SRVARGS in the environment goes to the
# server (e.g. SRVARGS="--pull-depth 1"); LOAD=DIR2 takes objstore-load
# from another build. Interleave the variants over several rounds and
# compare medians: single runs on a shared host move by 2x.
set -u
d=$1; which=$2; op=$3; size=$4; cl=$5; req=$6; shift 6
ld=${LOAD:-$d}
case $which in
  portals) srv=objstore-server; rpc=portals ;;
  tonic) srv=objstore-grpc-server; rpc=tonic ;;
  raw) srv=objstore-raw-server; rpc=raw ;;
  *) echo "SERVER is portals, tonic or raw" >&2; exit 2 ;;
esac
dir=$(mktemp -d /dev/shm/objstore-ab.XXXX)
# shellcheck disable=SC2086
"$d/$srv" --dir "$dir" ${SRVARGS:-} > "$dir.out" 2>/dev/null &
spid=$!
for _ in $(seq 100); do grep -q listening "$dir.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/listening on //p' "$dir.out")
stat=$(mktemp)
out=$(timeout 300 perf stat -x, -e task-clock -o "$stat" "$ld/objstore-load" --rpc "$rpc" \
  --connect "$addr" --op "$op" --size "$size" --clients "$cl" --requests "$req" \
  --warmup 20 --reps 3 --server-pid "$spid" "$@" 2>&1)
tc=$(grep task-clock "$stat" | cut -d, -f1); rm -f "$stat"
kill "$spid"; wait "$spid" 2>/dev/null; rm -rf "$dir" "$dir.out"
echo "$out" | TC=${tc:-0} CL=$cl REQ=$req python3 -c '
import os, sys, json, statistics as st
rs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
if not rs:
    print("FAIL"); sys.exit(1)
rate = st.median(r["requests"] / r["secs"] for r in rs)
mbs = st.median(r["bytes"] / r["secs"] / 1e6 for r in rs)
gb = st.median((r["server_cpu_s"] or 0) / (r["bytes"] / 1e9) for r in rs)
calls = int(os.environ["CL"]) * (int(os.environ["REQ"]) * len(rs) + 20)
client = float(os.environ["TC"] or 0) * 1000 / calls
server = st.median((r["server_cpu_s"] or 0) * 1e6 / r["requests"] for r in rs)
print(f"rate={rate:.0f}/s MB/s={mbs:.0f} server_cpu_s_per_GB={gb:.2f} client_us_per_req={client:.1f} server_us_per_req={server:.1f}")'

#!/bin/bash
# Server cost per request of one object-store point over portals-rpc: a
# fresh server on a fresh tmpfs store, `perf stat` on the server process
# for one objstore-load run; prints the rate, server CPU (task-clock),
# context switches and futex calls per request. Steadier than rates on a
# shared host; interleave the builds to compare over several rounds.
#
#   objstore/scripts/counts.sh DIR OP SIZE CLIENTS REQUESTS
#
# DIR holds objstore-server and objstore-load of one build; SRVARGS in the
# environment goes to the server (e.g. SRVARGS="--chunk-kib 4096").
set -u
d=$1; op=$2; size=$3; cl=$4; req=$5
dir=$(mktemp -d /dev/shm/objstore-counts.XXXX)
# shellcheck disable=SC2086
"$d/objstore-server" --dir "$dir" ${SRVARGS:-} > "$dir.out" 2>/dev/null &
spid=$!
for _ in $(seq 100); do grep -q listening "$dir.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/listening on //p' "$dir.out")
perf stat -x, -e task-clock,context-switches,syscalls:sys_enter_futex -p "$spid" -o "$dir.stat" &
ppid=$!; sleep 0.2
out=$(timeout 300 "$d/objstore-load" --rpc portals --connect "$addr" --op "$op" --size "$size" \
  --clients "$cl" --requests "$req" --warmup 5 --reps 1 2>&1)
kill -INT $ppid; wait $ppid
rate=$(echo "$out" | python3 -c 'import sys,json; r=[json.loads(l) for l in sys.stdin if l.startswith("{")][0]; print(round(r["requests"]/r["secs"]))')
awk -F, -v n=$(( (req + 5) * cl )) -v rate="$rate" '/task-clock/{tc=$1} /context-switches/{cs=$1} /futex/{fx=$1}
  END{printf "rate=%s/s server_us_per_req=%.1f cs_per_req=%.1f futex_per_req=%.1f\n", rate, tc*1000/n, cs/n, fx/n}' "$dir.stat"
kill "$spid"; wait "$spid" 2>/dev/null; rm -rf "$dir" "$dir.out" "$dir.stat"

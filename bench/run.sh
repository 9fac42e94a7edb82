#!/usr/bin/env bash
# The published benchmark run, in one command:
#
#   bench/run.sh [ptl-bench compare options...]
#
# installs Open MPI, MPICH, UCX's ucx_perftest and libfabric's fi_pingpong
# from Debian packages if any is missing (needs root or sudo), builds
# ptl-bench in release mode, runs `ptl-bench compare` (every benchmark, raw
# sockets, portals-rs in both progress modes over every NAL that works, the
# C peers, UCX and libfabric; 5 interleaved rounds, medians) and
# regenerates docs/PERFORMANCE.md from the results.
# Extra options go to `ptl-bench compare`, e.g. --quick for a short run.
# Run it on a quiet machine: other load wrecks latency numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=0
for tool in mpicc.openmpi mpicc.mpich ucx_perftest fi_pingpong; do
    command -v "$tool" >/dev/null 2>&1 || missing=1
done
if [ "$missing" = 1 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "run.sh: installing Open MPI, MPICH, UCX and libfabric tools (Debian packages)" >&2
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        openmpi-bin libopenmpi-dev mpich libmpich-dev make gcc ucx-utils libfabric-bin
fi

cargo build --release -p portals-bench --bin ptl-bench
exec target/release/ptl-bench compare --doc docs/PERFORMANCE.md "$@"

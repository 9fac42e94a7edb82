#!/usr/bin/env bash
# The published benchmark run, in one command:
#
#   bench/run.sh [ptl-bench compare options...]
#
# installs Open MPI and MPICH from Debian packages if their compilers are
# missing (needs root or sudo), builds ptl-bench in release mode, runs
# `ptl-bench compare` (every benchmark, raw sockets, portals-rs in both
# progress modes over every NAL that works, the C peers; 5 interleaved
# rounds, medians) and regenerates docs/PERFORMANCE.md from the results.
# Extra options go to `ptl-bench compare`, e.g. --quick for a short run.
# Run it on a quiet machine: other load wrecks latency numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mpicc.openmpi >/dev/null 2>&1 || ! command -v mpicc.mpich >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "run.sh: installing Open MPI and MPICH (Debian packages)" >&2
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        openmpi-bin libopenmpi-dev mpich libmpich-dev make gcc
fi

cargo build --release -p portals-bench --bin ptl-bench
exec target/release/ptl-bench compare --doc docs/PERFORMANCE.md "$@"

#!/bin/sh
# Install libmpich.so.12 (portals-rs) under PREFIX/lib (default
# /usr/local/lib/portals-mpich) and the ptlcc wrapper under PREFIX/bin,
# from a release build:
#   cargo build --release -p mpi-capi && mpi-capi/install.sh [PREFIX]
# then run an mpicc.mpich program with
#   LD_LIBRARY_PATH=PREFIX/lib ptlrun -n 4 ./prog
# or build it with PREFIX/bin/ptlcc (rpath PREFIX/lib) and run it with
#   ptlrun -n 4 ./prog
set -eu
prefix=${1:-/usr/local/lib/portals-mpich}
here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../target}/${PROFILE:-release}
[ -f "$target/libmpich.so" ] || { echo "install.sh: $target/libmpich.so missing: run cargo build --release -p mpi-capi" >&2; exit 1; }
mkdir -p "$prefix/lib"
install -m 0755 "$target/libmpich.so" "$prefix/lib/libmpich.so.12"
ln -sf libmpich.so.12 "$prefix/lib/libmpich.so"
if [ -f "$target/ptlcc" ]; then
    mkdir -p "$prefix/bin"
    install -m 0755 "$target/ptlcc" "$prefix/bin/ptlcc"
    echo "installed $prefix/bin/ptlcc"
fi
echo "installed $prefix/lib/libmpich.so.12; run with: LD_LIBRARY_PATH=$prefix/lib ptlrun -n 4 ./prog"

#!/usr/bin/env bash
# Run one peer MPI benchmark on this host (loopback), 2 ranks by default.
#
#   bench/c/run_peer.sh [-n RANKS] <impl> <bench> [bench args...]
#
# impl:
#   openmpi-tcp  Open MPI, ob1 PML, TCP BTL over lo (--mca btl tcp,self). Its RMA
#                windows still use osc sm (shared memory) when all ranks share a node
#   openmpi-tcp-pt2pt  openmpi-tcp with --mca osc pt2pt: RMA as messages over TCP
#   openmpi-sm   Open MPI, ob1 PML, shared-memory BTL (vader in Open MPI 4.x)
#   openmpi      Open MPI defaults (on Debian: ob1 + vader for on-node peers)
#   mpich        MPICH defaults. Debian's MPICH 4.0.2 is ch4:ucx and sends on-node
#                traffic through UCX too, which picks shared memory (sysv + cma)
#   mpich-net    MPICH with UCX restricted to TCP on lo (UCX_TLS=tcp,self,
#                UCX_NET_DEVICES=lo; MPIR_CVAR_NOLOCAL=1 too): MPICH's network path
#   capi-shm     the MPICH build of the benchmark on portals-rs: ptlrun --nal shm
#                with mpi-capi's libmpich.so.12 (target/release, or CAPI_TARGET)
#   capi-tcp     the same over --nal tcp
# bench: latency bandwidth bibw msgrate overlap comb matchlist
#        rma-latency rma-bw rma-overlap (2 ranks);
#        allreduce bcast nbc-overlap nbc-progress (any number of ranks)
#
# -n RANKS (or NP in the environment): number of ranks, default 2.
# Environment: PEER_TIMEOUT (seconds, default 300), PEER_BIND (core|none;
# default core, each rank bound to one core, or none when there are more
# ranks than CPUs: oversubscribed ranks share the CPUs; core with more
# ranks than CPUs binds round-robin).
# Output: JSON lines on stdout, each tagged with "impl".
set -euo pipefail

usage() {
    sed -n '2,28p' "$0" >&2
    exit 2
}
np=${NP:-2}
if [ "${1:-}" = -n ]; then
    [ $# -ge 2 ] || usage
    np=$2
    shift 2
fi
case $np in
'' | *[!0-9]* | 0) echo "run_peer.sh: bad rank count '$np'" >&2; exit 2 ;;
esac
[ $# -ge 2 ] || usage
impl=$1 bench=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmo=${PEER_TIMEOUT:-300}
if [ -n "${PEER_BIND:-}" ]; then
    bind=$PEER_BIND
elif [ "$np" -gt "$(nproc)" ]; then
    bind=none
else
    bind=core
fi

# Open MPI refuses to bind more ranks than CPUs unless told to overload.
ompi_bind=$bind
[ "$bind" = core ] && ompi_bind=core:overload-allowed

case $impl in
openmpi*) exe=$here/build/openmpi/$bench ;;
mpich* | capi*) exe=$here/build/mpich/$bench ;;
*) echo "run_peer.sh: unknown impl '$impl'" >&2; exit 2 ;;
esac
if [ ! -x "$exe" ]; then
    echo "run_peer.sh: $exe missing; run 'make -C $here'" >&2
    exit 2
fi
export PTL_BENCH_IMPL=$impl

# exec: the caller's signal reaches `timeout`, which passes it on to the job.
ompi() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        exec timeout "$tmo" mpiexec.openmpi --oversubscribe -n "$np" --bind-to "$ompi_bind" \
        --mca pml ob1 "$@" "$exe" "${args[@]}"
}
mpich() {
    exec timeout "$tmo" env "$@" mpiexec.mpich -n "$np" -bind-to "$bind" "$exe" "${args[@]}"
}
# The MPICH binary, unmodified, on portals-rs: libmpich.so.12 is mpi-capi's.
capi() {
    local target=${CAPI_TARGET:-$here/../../target/release}
    for f in ptlrun libmpich.so; do
        [ -f "$target/$f" ] || { echo "run_peer.sh: $target/$f missing; run 'cargo build --release -p mpi-capi -p portals-runtime --bin ptlrun'" >&2; exit 2; }
    done
    mkdir -p "$target/mpich-abi"
    ln -sf ../libmpich.so "$target/mpich-abi/libmpich.so.12"
    exec timeout "$tmo" env LD_LIBRARY_PATH="$target/mpich-abi" "$target/ptlrun" --nal "$1" -n "$np" \
        --cpu-bind "$bind" "$exe" "${args[@]}"
}
args=("$@")

case $impl in
openmpi-tcp) ompi --mca btl tcp,self --mca btl_tcp_if_include lo ;;
openmpi-tcp-pt2pt) ompi --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt ;;
openmpi-sm) ompi --mca btl vader,self ;;
openmpi) ompi ;;
mpich) mpich PTL_BENCH_IMPL=mpich ;;
mpich-net) mpich MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo ;;
capi-shm) capi shm ;;
capi-tcp) capi tcp ;;
*) echo "run_peer.sh: unknown impl '$impl'" >&2; exit 2 ;;
esac

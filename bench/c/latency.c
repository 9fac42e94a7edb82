/*
 * latency: ping-pong half round trip between ranks 0 and 1.
 * Rank 0 sends `size` bytes and waits for the same back; value = RTT / 2 in us.
 * Defaults: sizes 0 and 1 B .. 4 MB (powers of two), 10000 iterations up to
 * 8 KB then scaled down with size (>= 20), 5 repetitions, median reported.
 */
#include "common.h"

struct pingpong { int rank, n; char *sbuf, *rbuf; };

static void round_trip(void *ctx)
{
    struct pingpong *p = ctx;
    int peer = 1 - p->rank;
    if (p->rank == 0) {
        MPI_Send(p->sbuf, p->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(p->rbuf, p->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(p->rbuf, p->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(p->sbuf, p->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    struct defaults d = {0, 4L << 20, 10000, 1000, 1, 0, 0};
    struct opts o;
    int rank = bench_init(&argc, &argv, "latency", &d, &o, "");
    long maxsz = max_size(&o);
    struct pingpong p = {rank, 0, xalloc((size_t)maxsz), xalloc((size_t)maxsz)};
    double vals[MAX_REPS];

    for (int k = 0; k < o.nsizes; k++) {
        p.n = (int)o.sizes[k];
        long iters = scale_iters(o.iters, p.n, 8192, 20);
        long warm = scale_iters(o.warmup, p.n, 8192, 2);
        time_reps(&o, warm, iters, round_trip, &p, vals);
        for (int r = 0; r < o.reps; r++)
            vals[r] = vals[r] * 1e6 / (2.0 * (double)iters);
        if (rank == 0)
            emit("latency", p.n, iters, stats(vals, o.reps), o.reps, "us", "");
    }
    MPI_Finalize();
    return 0;
}

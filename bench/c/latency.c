/*
 * latency: ping-pong half round trip between ranks 0 and 1.
 * Rank 0 sends `size` bytes and waits for the same back; value = RTT / 2 in us.
 * Defaults: sizes 0 and 1 B .. 4 MB (powers of two), 10000 iterations up to
 * 8 KB then scaled down with size (>= 20), 5 repetitions, median reported.
 */
#include "common.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    struct defaults d = {0, 4L << 20, 10000, 1000, 1};
    struct opts o;
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (nprocs != 2)
        die("latency needs exactly 2 ranks");
    if (parse_opts(argc, argv, &d, &o, "") != 0) {
        MPI_Finalize();
        return 1;
    }
    long maxsz = 0;
    for (int k = 0; k < o.nsizes; k++)
        if (o.sizes[k] > maxsz)
            maxsz = o.sizes[k];
    char *sbuf = xalloc((size_t)maxsz), *rbuf = xalloc((size_t)maxsz);
    int peer = 1 - rank;
    double vals[256];
    if (o.reps > 256)
        o.reps = 256;

    for (int k = 0; k < o.nsizes; k++) {
        int n = (int)o.sizes[k];
        long iters = scale_iters(o.iters, n, 8192, 20);
        long warm = scale_iters(o.warmup, n, 8192, 2);
        for (int r = 0; r < o.reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = 0.0;
            for (long i = 0; i < warm + iters; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(sbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            }
            vals[r] = (MPI_Wtime() - t0) * 1e6 / (2.0 * (double)iters);
        }
        if (rank == 0)
            emit("latency", n, iters, stats(vals, o.reps), o.reps, "us", "");
    }
    MPI_Finalize();
    return 0;
}

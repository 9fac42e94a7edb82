/*
 * bandwidth / bibw / msgrate: streaming with a window of outstanding requests.
 * Built three times from this file (BENCH_MODE 0, 1, 2):
 *
 *   bandwidth  rank 0 posts W MPI_Isend, MPI_Waitall; rank 1 has W MPI_Irecv
 *              posted, MPI_Waitall, then returns a 4-byte ack (flow control).
 *              value = bytes / time in MB/s (1 MB = 1e6 bytes).
 *   bibw       both ranks post W MPI_Irecv and W MPI_Isend, MPI_Waitall;
 *              value = bytes moved in both directions / time, MB/s.
 *   msgrate    as bandwidth with 8-byte messages (default); value = msg/s.
 *
 * Receives in one window go to distinct buffers; when W * size exceeds the
 * cap (-C, default 256 MiB) the window shrinks, reported as "window".
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef BENCH_MODE
#define BENCH_MODE 0
#endif

#if BENCH_MODE == 0
#define BENCH_NAME "bandwidth"
#elif BENCH_MODE == 1
#define BENCH_NAME "bibw"
#else
#define BENCH_NAME "msgrate"
#endif

int main(int argc, char **argv)
{
#if BENCH_MODE == 2
    struct defaults d = {8, 8, 2000, 200, 64};
#else
    struct defaults d = {1024, 16L << 20, 200, 20, 64};
#endif
    struct opts o;
    int rank, nprocs;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (nprocs != 2)
        die(BENCH_NAME " needs exactly 2 ranks");
    if (parse_opts(argc, argv, &d, &o, "") != 0) {
        MPI_Finalize();
        return 1;
    }
    long maxsz = 1, maxbuf = 1;
    for (int k = 0; k < o.nsizes; k++) {
        long s = o.sizes[k] ? o.sizes[k] : 1;
        long w = o.mem_cap / s < o.window ? o.mem_cap / s : o.window;
        if (w < 1)
            w = 1;
        if (s > maxsz)
            maxsz = s;
        if (s * w > maxbuf)
            maxbuf = s * w;
    }
    char *sbuf = xalloc((size_t)maxsz), *rbuf = xalloc((size_t)maxbuf);
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t)o.window);
    if (!req)
        die("out of memory");
    int peer = 1 - rank;
#if BENCH_MODE != 1
    int ack = 0;
#endif
    double vals[256];
    if (o.reps > 256)
        o.reps = 256;

    for (int k = 0; k < o.nsizes; k++) {
        int n = (int)o.sizes[k];
        long ns = n ? n : 1;
        int w = (int)(o.mem_cap / ns < o.window ? o.mem_cap / ns : o.window);
        if (w < 1)
            w = 1;
        long iters = scale_iters(o.iters, n, 65536, 2);
        long warm = scale_iters(o.warmup, n, 65536, 1);
        for (int r = 0; r < o.reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = 0.0;
            for (long i = 0; i < warm + iters; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
#if BENCH_MODE == 1
                for (int j = 0; j < w; j++)
                    MPI_Irecv(rbuf + (size_t)j * ns, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &req[j]);
                for (int j = 0; j < w; j++)
                    MPI_Isend(sbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &req[w + j]);
                MPI_Waitall(2 * w, req, statuses_ignore);
#else
                if (rank == 0) {
                    for (int j = 0; j < w; j++)
                        MPI_Isend(sbuf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &req[j]);
                    MPI_Waitall(w, req, statuses_ignore);
                    MPI_Recv(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int j = 0; j < w; j++)
                        MPI_Irecv(rbuf + (size_t)j * ns, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &req[j]);
                    MPI_Waitall(w, req, statuses_ignore);
                    MPI_Send(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD);
                }
#endif
            }
            double dt = MPI_Wtime() - t0;
            double msgs = (double)iters * w;
#if BENCH_MODE == 0
            vals[r] = (double)n * msgs / dt / 1e6;
#elif BENCH_MODE == 1
            vals[r] = 2.0 * (double)n * msgs / dt / 1e6;
#else
            vals[r] = msgs / dt;
#endif
        }
        if (rank == 0) {
            char extra[64];
            snprintf(extra, sizeof extra, ",\"window\":%d", w);
#if BENCH_MODE == 2
            emit(BENCH_NAME, n, iters, stats(vals, o.reps), o.reps, "msg/s", extra);
#else
            emit(BENCH_NAME, n, iters, stats(vals, o.reps), o.reps, "MB/s", extra);
#endif
        }
    }
    free(req);
    MPI_Finalize();
    return 0;
}

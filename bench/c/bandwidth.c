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

struct window { int rank, n, w; long ns; char *sbuf, *rbuf; MPI_Request *req; };

/* One window: W sends (and W receives into distinct buffers), plus the ack. */
static void one_window(void *ctx)
{
    struct window *x = ctx;
    int peer = 1 - x->rank, w = x->w;
#if BENCH_MODE == 1
    for (int j = 0; j < w; j++)
        MPI_Irecv(x->rbuf + (size_t)j * x->ns, x->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &x->req[j]);
    for (int j = 0; j < w; j++)
        MPI_Isend(x->sbuf, x->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &x->req[w + j]);
    MPI_Waitall(2 * w, x->req, statuses_ignore);
#else
    int ack = 0;
    if (x->rank == 0) {
        for (int j = 0; j < w; j++)
            MPI_Isend(x->sbuf, x->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &x->req[j]);
        MPI_Waitall(w, x->req, statuses_ignore);
        MPI_Recv(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        for (int j = 0; j < w; j++)
            MPI_Irecv(x->rbuf + (size_t)j * x->ns, x->n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, &x->req[j]);
        MPI_Waitall(w, x->req, statuses_ignore);
        MPI_Send(&ack, 1, MPI_INT, peer, 2, MPI_COMM_WORLD);
    }
#endif
}

/* Window for size n: distinct receive buffers stay within the memory cap. */
static int window_for(const struct opts *o, long n)
{
    long ns = n ? n : 1;
    long w = o->mem_cap / ns < o->window ? o->mem_cap / ns : o->window;
    return w < 1 ? 1 : (int)w;
}

int main(int argc, char **argv)
{
#if BENCH_MODE == 2
    struct defaults d = {8, 8, 2000, 200, 64, 0, 0};
#else
    struct defaults d = {1024, 16L << 20, 200, 20, 64, 0, 0};
#endif
    struct opts o;
    int rank = bench_init(&argc, &argv, BENCH_NAME, &d, &o, "");
    long maxbuf = 1;
    for (int k = 0; k < o.nsizes; k++) {
        long s = o.sizes[k] ? o.sizes[k] : 1;
        if (s * window_for(&o, s) > maxbuf)
            maxbuf = s * window_for(&o, s);
    }
    struct window x = {rank, 0, 0, 0, xalloc((size_t)max_size(&o)), xalloc((size_t)maxbuf),
                       malloc(sizeof(MPI_Request) * 2 * (size_t)o.window)};
    if (!x.req)
        die("out of memory");
    double vals[MAX_REPS];

    for (int k = 0; k < o.nsizes; k++) {
        x.n = (int)o.sizes[k];
        x.ns = x.n ? x.n : 1;
        x.w = window_for(&o, x.n);
        long iters = scale_iters(o.iters, x.n, 65536, 2);
        long warm = scale_iters(o.warmup, x.n, 65536, 1);
        time_reps(&o, warm, iters, one_window, &x, vals);
        for (int r = 0; r < o.reps; r++) {
            double msgs = (double)iters * x.w;
#if BENCH_MODE == 0
            vals[r] = (double)x.n * msgs / vals[r] / 1e6;
#elif BENCH_MODE == 1
            vals[r] = 2.0 * (double)x.n * msgs / vals[r] / 1e6;
#else
            vals[r] = msgs / vals[r];
#endif
        }
        if (rank == 0) {
            char extra[64];
            snprintf(extra, sizeof extra, ",\"window\":%d", x.w);
#if BENCH_MODE == 2
            emit(BENCH_NAME, x.n, iters, stats(vals, o.reps), o.reps, "msg/s", extra);
#else
            emit(BENCH_NAME, x.n, iters, stats(vals, o.reps), o.reps, "MB/s", extra);
#endif
        }
    }
    free(x.req);
    MPI_Finalize();
    return 0;
}

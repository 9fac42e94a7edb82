/*
 * rma-latency / rma-bw / rma-overlap: MPI-3 one-sided communication with a
 * window from MPI_Win_allocate and passive-target synchronisation. Rank 0 is
 * the origin, rank 1 the target. Built three times from this file
 * (BENCH_MODE 0, 1, 2):
 *
 *   rma-latency  per repetition: barrier; the origin takes MPI_Win_lock
 *                (shared) on the target, then per iteration one operation
 *                and MPI_Win_flush: MPI_Put of size bytes ("op":"put"),
 *                MPI_Get ("get"), and once MPI_Fetch_and_op on one
 *                uint64_t with MPI_SUM ("fetch_and_op", size 8); unlock;
 *                barrier. The target sits in the closing barrier (inside
 *                MPI) meanwhile. value = us per operation (lock excluded).
 *   rma-bw       per repetition: barrier; MPI_Win_lock_all; per iteration W
 *                puts of size bytes to distinct displacements, then
 *                MPI_Win_flush; MPI_Win_unlock_all; barrier. value = MB/s
 *                (1e6 B). W (-W, 64) shrinks when W * size exceeds -C (default
 *                64 MiB here: the window is allocated on both ranks).
 *   rma-overlap  passive-target progress: per iteration a barrier, then the
 *                target computes for c us (calibrated busy loop, no MPI
 *                call) while the origin, after c/10 us of its own busy loop
 *                (so that the target is surely computing), does
 *                MPI_Win_lock(exclusive), one MPI_Put of size bytes ("put")
 *                or MPI_Fetch_and_op of 8 bytes ("fetch_and_op"),
 *                MPI_Win_unlock, and records how long that took. value = us
 *                of lock-op-unlock (lower is better). With progress at the
 *                target it stays near the c = 0 row; without, the origin
 *                waits for the target's next MPI call (about 0.9 c).
 *                -f lists c in us (default 0,10000).
 *
 * Extra fields: "op"; rma-bw "window"; rma-overlap "compute_us", "delay_us"
 * and "target_compute_us" (the wall time the target's compute took, median).
 */
#include "common.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef BENCH_MODE
#define BENCH_MODE 0
#endif

#if BENCH_MODE == 0
#define BENCH_NAME "rma-latency"
#elif BENCH_MODE == 1
#define BENCH_NAME "rma-bw"
#else
#define BENCH_NAME "rma-overlap"
#endif

#define ORIGIN 0
#define TARGET 1

enum op { OP_PUT, OP_GET, OP_FAO };
#if BENCH_MODE != 1
static const char *const op_names[] = {"put", "get", "fetch_and_op"};
#endif

struct rma {
    MPI_Win win;
    char *buf;       /* origin buffer (puts read it, gets fill it) */
    uint64_t one, old;
    int n;           /* bytes per put/get */
    int w;           /* puts per flush (rma-bw) */
    enum op op;
};

/* One operation of size x->n at displacement `disp` on the target. */
static void issue(struct rma *x, MPI_Aint disp)
{
    switch (x->op) {
    case OP_PUT:
        MPI_Put(x->buf, x->n, MPI_BYTE, TARGET, disp, x->n, MPI_BYTE, x->win);
        break;
    case OP_GET:
        MPI_Get(x->buf, x->n, MPI_BYTE, TARGET, disp, x->n, MPI_BYTE, x->win);
        break;
    case OP_FAO:
        MPI_Fetch_and_op(&x->one, &x->old, MPI_UINT64_T, TARGET, disp, MPI_SUM, x->win);
        break;
    }
}

#if BENCH_MODE == 1
/* Puts per flush for size n: the target's window memory stays within the cap. */
static int window_for(const struct opts *o, long n)
{
    long ns = n ? n : 1;
    long w = o->mem_cap / ns < o->window ? o->mem_cap / ns : o->window;
    return w < 1 ? 1 : (int)w;
}
#endif

#if BENCH_MODE == 0 || BENCH_MODE == 1
/* Repetitions of one point: the origin opens an epoch (lock shared on the
 * target, or lock_all), runs warm + iters iterations, times the last iters;
 * the target waits in the closing barrier. secs[r] per repetition. */
static void origin_reps(struct rma *x, int rank, const struct opts *o, long warm, long iters,
                        double *secs)
{
    for (int r = 0; r < o->reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == ORIGIN) {
#if BENCH_MODE == 0
            MPI_Win_lock(MPI_LOCK_SHARED, TARGET, 0, x->win);
#else
            MPI_Win_lock_all(0, x->win);
#endif
            double t0 = 0.0;
            for (long i = 0; i < warm + iters; i++) {
                if (i == warm)
                    t0 = MPI_Wtime();
#if BENCH_MODE == 0
                issue(x, 0);
#else
                for (int j = 0; j < x->w; j++)
                    issue(x, (MPI_Aint)j * x->n);
#endif
                MPI_Win_flush(TARGET, x->win);
            }
            secs[r] = MPI_Wtime() - t0;
#if BENCH_MODE == 0
            MPI_Win_unlock(TARGET, x->win);
#else
            MPI_Win_unlock_all(x->win);
#endif
        } else {
            secs[r] = 1.0;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}
#endif

#if BENCH_MODE == 2
/* One repetition of the overlap point: the average us of the origin's
 * lock-op-unlock while the target computes c_us; on the target, the
 * average wall time its compute took (a loaded CPU stretches it). */
static double overlap_rep(struct rma *x, int rank, long warm, long iters, double c_us)
{
    double sum = 0.0;
    for (long i = 0; i < warm + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == TARGET) {
            work_us(c_us);
        } else {
            work_us(c_us / 10.0);
            t0 = MPI_Wtime();
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, TARGET, 0, x->win);
            issue(x, 0);
            MPI_Win_unlock(TARGET, x->win);
        }
        if (i >= warm)
            sum += MPI_Wtime() - t0;
    }
    return sum * 1e6 / (double)iters;
}
#endif

int main(int argc, char **argv)
{
#if BENCH_MODE == 0
    struct defaults d = {8, 8, 10000, 1000, 1, 0, 0};
    const char *usage = "";
#elif BENCH_MODE == 1
    /* -C caps the target's window memory: 64 MiB (16 MB puts: 4 per flush) */
    struct defaults d = {1024, 16L << 20, 200, 20, 64, 0, 64L << 20};
    const char *usage = "";
#else
    struct defaults d = {8, 8, 20, 2, 1, 0, 0};
    const char *usage = " [-f COMPUTE_US,...]";
#endif
    struct opts o;
    int sizes_given = 0;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "-s", 2) == 0 || strncmp(argv[i], "-m", 2) == 0 ||
            strncmp(argv[i], "-M", 2) == 0)
            sizes_given = 1;
    (void)sizes_given;
    int rank = bench_init(&argc, &argv, BENCH_NAME, &d, &o, usage);
#if BENCH_MODE == 2
    if (o.nfvals == 0) {
        o.fvals[0] = 0.0;
        o.fvals[1] = 10000.0;
        o.nfvals = 2;
    }
    if (!sizes_given) { /* default sizes: 8 B and 64 KB puts */
        o.sizes[1] = 64 * 1024;
        o.nsizes = 2;
    }
    work_calibrate();
#endif
    long win_bytes = max_size(&o);
#if BENCH_MODE == 1
    for (int k = 0; k < o.nsizes; k++) {
        long s = o.sizes[k] ? o.sizes[k] : 1;
        if (s * window_for(&o, s) > win_bytes)
            win_bytes = s * window_for(&o, s);
    }
#endif
    if (win_bytes < 8)
        win_bytes = 8;
    struct rma x;
    memset(&x, 0, sizeof x);
    x.one = 1;
    x.buf = xalloc((size_t)max_size(&o));
    char *base = NULL;
    MPI_Win_allocate((MPI_Aint)win_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &x.win);
    /* Touch the window before any epoch (the unified memory model makes the
     * store visible; the barrier orders it before the first access). */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, x.win);
    memset(base, 0, (size_t)win_bytes);
    MPI_Win_unlock(rank, x.win);
    MPI_Barrier(MPI_COMM_WORLD);
    double vals[MAX_REPS];
    char extra[160];
#if BENCH_MODE != 1
    /* the points: every size with put (and get, latency only), then one
     * 8-byte fetch_and_op */
    struct point { enum op op; int n; } points[3 * MAX_LIST + 1];
    int npoints = 0;
    for (int k = 0; k < o.nsizes; k++) {
        points[npoints++] = (struct point){OP_PUT, (int)o.sizes[k]};
        if (BENCH_MODE == 0)
            points[npoints++] = (struct point){OP_GET, (int)o.sizes[k]};
    }
    points[npoints++] = (struct point){OP_FAO, 8};
#endif

#if BENCH_MODE == 0
    for (int k = 0; k < npoints; k++) {
        x.op = points[k].op;
        x.n = points[k].n;
        long iters = scale_iters(o.iters, x.n, 8192, 20);
        long warm = scale_iters(o.warmup, x.n, 8192, 2);
        origin_reps(&x, rank, &o, warm, iters, vals);
        for (int r = 0; r < o.reps; r++)
            vals[r] = vals[r] * 1e6 / (double)iters;
        if (rank == ORIGIN) {
            snprintf(extra, sizeof extra, ",\"op\":\"%s\"", op_names[x.op]);
            emit(BENCH_NAME, x.n, iters, stats(vals, o.reps), o.reps, "us", extra);
        }
    }
#elif BENCH_MODE == 1
    x.op = OP_PUT;
    for (int k = 0; k < o.nsizes; k++) {
        x.n = (int)o.sizes[k];
        x.w = window_for(&o, x.n);
        long iters = scale_iters(o.iters, x.n, 65536, 2);
        long warm = scale_iters(o.warmup, x.n, 65536, 1);
        origin_reps(&x, rank, &o, warm, iters, vals);
        for (int r = 0; r < o.reps; r++)
            vals[r] = (double)x.n * (double)x.w * (double)iters / vals[r] / 1e6;
        if (rank == ORIGIN) {
            snprintf(extra, sizeof extra, ",\"op\":\"put\",\"window\":%d", x.w);
            emit(BENCH_NAME, x.n, iters, stats(vals, o.reps), o.reps, "MB/s", extra);
        }
    }
#else
    for (int f = 0; f < o.nfvals; f++) {
        double c_us = o.fvals[f];
        for (int k = 0; k < npoints; k++) {
            x.op = points[k].op;
            x.n = points[k].n;
            double tc[MAX_REPS];
            for (int r = 0; r < o.reps; r++) {
                vals[r] = overlap_rep(&x, rank, o.warmup, o.iters, c_us);
                /* the target's compute wall time, after the timed part */
                if (rank == TARGET)
                    MPI_Send(&vals[r], 1, MPI_DOUBLE, ORIGIN, 7, MPI_COMM_WORLD);
                else
                    MPI_Recv(&tc[r], 1, MPI_DOUBLE, TARGET, 7, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
            }
            if (rank == ORIGIN) {
                snprintf(extra, sizeof extra,
                         ",\"op\":\"%s\",\"compute_us\":%.1f,\"delay_us\":%.1f,"
                         "\"target_compute_us\":%.1f",
                         op_names[x.op], c_us, c_us / 10.0, stats(tc, o.reps).median);
                emit(BENCH_NAME, x.n, o.iters, stats(vals, o.reps), o.reps, "us", extra);
            }
        }
    }
#endif
    MPI_Win_free(&x.win);
    MPI_Finalize();
    return 0;
}

/*
 * overlap: the wait-time microbenchmark of Majumder, Rixner & Pai (seed 000,
 * Figs. 10-12). Rank 0 is the receiver, rank 1 the sender. Every iteration:
 *
 *   both:    MPI_Barrier (start together)
 *   rank 1:  MPI_Send(size)
 *   rank 0:  t0; MPI_Irecv; compute(c us, calibrated busy loop); t1;
 *            MPI_Wait; t2
 *
 * wait = t2 - t1, total receive time = t2 - t0. wait_max_us is the longest
 * single wait of any repetition: one stall (a rank descheduled for a few
 * milliseconds) takes a whole repetition's average to 0 % and shows there.
 * The transfer time is the
 * total receive time with c = 0 (reported as the compute_factor 0 row).
 * c is a multiple of the transfer time (-f, default 0.5,1,2,4), or absolute
 * microseconds with -p abs. value = overlap % = 100 * (1 - wait / transfer),
 * clamped to [0, 100]. Per repetition the per-iteration times are averaged
 * (as in the paper); the median over repetitions is reported.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

struct point { double wait, total, compute, wait_max; };

/* One repetition of `iters` (+ warmup) iterations with `c_us` of compute. */
static struct point run(int rank, char *buf, int n, long warm, long iters, double c_us)
{
    struct point p = {0, 0, 0, 0};
    MPI_Request req;
    for (long i = 0; i < warm + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            MPI_Send(buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            continue;
        }
        double t0 = MPI_Wtime();
        MPI_Irecv(buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &req);
        if (c_us > 0)
            work_us(c_us);
        double t1 = MPI_Wtime();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        double t2 = MPI_Wtime();
        if (i >= warm) {
            if (t2 - t1 > p.wait_max)
                p.wait_max = t2 - t1;
            p.wait += t2 - t1;
            p.total += t2 - t0;
            p.compute += t1 - t0;
        }
    }
    p.wait = p.wait * 1e6 / (double)iters;
    p.total = p.total * 1e6 / (double)iters;
    p.compute = p.compute * 1e6 / (double)iters;
    p.wait_max *= 1e6;
    return p;
}

int main(int argc, char **argv)
{
    struct defaults d = {1024, 4L << 20, 200, 10, 1, 0, 0};
    struct opts o;
    int rank = bench_init(&argc, &argv, "overlap", &d, &o, " [-f FACTORS] [-p rel|abs]");
    if (o.nfvals == 0) {
        double def[] = {0.5, 1, 2, 4};
        memcpy(o.fvals, def, sizeof def);
        o.nfvals = 4;
    }
    int absolute = strcmp(o.method, "abs") == 0;
    if (rank == 0)
        work_calibrate();
    char *buf = xalloc((size_t)max_size(&o));
    double w[MAX_REPS], t[MAX_REPS], c[MAX_REPS], ov[MAX_REPS];

    for (int k = 0; k < o.nsizes; k++) {
        int n = (int)o.sizes[k];
        long iters = scale_iters(o.iters, n, 65536, 10);
        long warm = scale_iters(o.warmup, n, 65536, 1);
        /* baseline: transfer time without compute */
        double wmax = 0;
        for (int r = 0; r < o.reps; r++) {
            struct point p = run(rank, buf, n, warm, iters, 0.0);
            t[r] = p.total;
            w[r] = p.wait;
            if (p.wait_max > wmax)
                wmax = p.wait_max;
        }
        struct stat5 ts = stats(t, o.reps), ws = stats(w, o.reps);
        double transfer = ts.median;
        if (rank == 0) {
            char extra[256];
            snprintf(extra, sizeof extra,
                     ",\"compute_factor\":0,\"compute_us\":0,\"wait_us\":%.3f,"
                     "\"wait_max_us\":%.3f,\"total_us\":%.3f,\"transfer_us\":%.3f",
                     ws.median, wmax, ts.median, transfer);
            struct stat5 zero = {0, 0, 0, 0};
            emit("overlap", n, iters, zero, o.reps, "%", extra);
        }
        for (int f = 0; f < o.nfvals; f++) {
            double c_us = absolute ? o.fvals[f] : o.fvals[f] * transfer;
            wmax = 0;
            for (int r = 0; r < o.reps; r++) {
                struct point p = run(rank, buf, n, warm, iters, c_us);
                double x = 100.0 * (1.0 - p.wait / transfer);
                ov[r] = x < 0 ? 0 : (x > 100 ? 100 : x);
                w[r] = p.wait;
                t[r] = p.total;
                c[r] = p.compute;
                if (p.wait_max > wmax)
                    wmax = p.wait_max;
            }
            if (rank == 0) {
                char extra[320];
                struct stat5 os = stats(ov, o.reps);
                snprintf(extra, sizeof extra,
                         ",\"compute_factor\":%.3f,\"compute_us\":%.3f,\"wait_us\":%.3f,"
                         "\"wait_max_us\":%.3f,\"total_us\":%.3f,\"transfer_us\":%.3f",
                         absolute ? c_us / transfer : o.fvals[f], stats(c, o.reps).median,
                         stats(w, o.reps).median, wmax, stats(t, o.reps).median, transfer);
                emit("overlap", n, iters, os, o.reps, "%", extra);
            }
        }
    }
    MPI_Finalize();
    return 0;
}

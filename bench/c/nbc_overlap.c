/*
 * nbc-overlap: overlap of the non-blocking collectives with computation, on
 * every rank of MPI_COMM_WORLD (any number of ranks). For each operation
 *   ibarrier    MPI_Ibarrier (size 0)
 *   ibcast      MPI_Ibcast of size bytes (MPI_CHAR) from rank 0
 *   iallreduce  MPI_Iallreduce, MPI_SUM over size/8 doubles (every send
 *               element 1.0; sizes must be multiples of 8)
 *   iallgather  MPI_Iallgather of size bytes (MPI_CHAR) from every rank
 *   ialltoall   MPI_Ialltoall of size bytes (MPI_CHAR) per pair
 * and each size, every rank runs per repetition warm + iters iterations of
 *
 *   MPI_Barrier; t0; start; ts; compute(c us, calibrated busy loop); t1;
 *   MPI_Wait; t2
 *
 * and averages start = ts - t0, wait = t2 - t1, exposed = start + wait,
 * total = t2 - t0, compute = t1 - ts over the last iters; the repetition's
 * figures are the maxima of these averages over the ranks (MPI_Allreduce
 * MPI_MAX). The baseline (c = 0) gives T0 = median total over the
 * repetitions (record with compute_factor 0, value 0); then c = factor * T0
 * (-f, default 1,2,4) and value = overlap % = 100 * (1 - exposed / T0),
 * clamped to [0, 100], median over the repetitions (overlap.c's formula,
 * with the start's time counted as not overlapped: a start may do the work
 * itself). Extra fields: op, ranks, compute_factor, start_us, compute_us,
 * wait_us, total_us, nbc_us (T0). Defaults: sizes 8 B .. 8 KB (powers of two), 100 iterations
 * up to 8 KB then scaled down with size (>= 10), 5 warm-up (>= 2).
 * The Rust side is bench/src/nbc_overlap.rs, call for call.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

enum op { OP_IBARRIER, OP_IBCAST, OP_IALLREDUCE, OP_IALLGATHER, OP_IALLTOALL, NOPS };
static const char *const op_names[NOPS] = {"ibarrier", "ibcast", "iallreduce", "iallgather",
                                           "ialltoall"};

/* mine: this rank's bytes (rank + 1); spread: block d is d + 1 (refilled
 * per size); many: the all-gather's and all-to-all's nranks blocks. */
struct bufs { char *bytes; double *sbuf, *rbuf; char *mine, *spread, *many; };
struct point { double start, wait, total, compute, exposed; };

static void start(enum op op, struct bufs *b, int n, MPI_Request *req)
{
    switch (op) {
    case OP_IBARRIER:
        MPI_Ibarrier(MPI_COMM_WORLD, req);
        break;
    case OP_IBCAST:
        MPI_Ibcast(b->bytes, n, MPI_CHAR, 0, MPI_COMM_WORLD, req);
        break;
    case OP_IALLGATHER:
        MPI_Iallgather(b->mine, n, MPI_CHAR, b->many, n, MPI_CHAR, MPI_COMM_WORLD, req);
        break;
    case OP_IALLTOALL:
        MPI_Ialltoall(b->spread, n, MPI_CHAR, b->many, n, MPI_CHAR, MPI_COMM_WORLD, req);
        break;
    default:
        MPI_Iallreduce(b->sbuf, b->rbuf, n / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, req);
        break;
    }
}

/* One repetition of `iters` (+ warmup) iterations with `c_us` of compute on
 * every rank; the maxima over the ranks of each rank's averages, in us. */
static struct point run(enum op op, struct bufs *b, int n, long warm, long iters, double c_us)
{
    double sum[5] = {0, 0, 0, 0, 0}, max[5];
    MPI_Request req;
    for (long i = 0; i < warm + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        start(op, b, n, &req);
        double ts = MPI_Wtime();
        if (c_us > 0)
            work_us(c_us);
        double t1 = MPI_Wtime();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        double t2 = MPI_Wtime();
        if (i >= warm) {
            sum[0] += ts - t0;
            sum[1] += t2 - t1;
            sum[2] += t2 - t0;
            sum[3] += t1 - ts;
            sum[4] += (ts - t0) + (t2 - t1);
        }
    }
    for (int k = 0; k < 5; k++)
        sum[k] = sum[k] * 1e6 / (double)iters;
    MPI_Allreduce(sum, max, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    struct point p = {max[0], max[1], max[2], max[3], max[4]};
    return p;
}

int main(int argc, char **argv)
{
    struct defaults d = {8, 8192, 100, 5, 1, 1};
    struct opts o;
    int rank = bench_init(&argc, &argv, "nbc-overlap", &d, &o, " [-f FACTORS]");
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (o.nfvals == 0) {
        double def[] = {1, 2, 4};
        memcpy(o.fvals, def, sizeof def);
        o.nfvals = 3;
    }
    for (int k = 0; k < o.nsizes; k++) {
        if (o.sizes[k] % 8 != 0) {
            if (rank == 0)
                fprintf(stderr, "%s: sizes must be multiples of 8 (doubles)\n", argv[0]);
            MPI_Finalize();
            return 1;
        }
    }
    /* Every rank computes: every rank calibrates, all at once (on an
     * oversubscribed machine the loop rate is the shared one the compute
     * phases see). */
    MPI_Barrier(MPI_COMM_WORLD);
    work_calibrate();
    long maxsz = max_size(&o);
    struct bufs b = {xalloc((size_t)maxsz), (double *)xalloc((size_t)maxsz),
                     (double *)xalloc((size_t)maxsz), xalloc((size_t)maxsz),
                     xalloc((size_t)nranks * (size_t)maxsz),
                     xalloc((size_t)nranks * (size_t)maxsz)};
    for (long j = 0; j < maxsz / 8; j++)
        b.sbuf[j] = 1.0;
    memset(b.mine, rank + 1, (size_t)maxsz);
    double st[MAX_REPS], w[MAX_REPS], t[MAX_REPS], c[MAX_REPS], ov[MAX_REPS];
    long zero_size[1] = {0};

    for (int op = 0; op < NOPS; op++) {
        const long *sizes = op == OP_IBARRIER ? zero_size : o.sizes;
        int nsizes = op == OP_IBARRIER ? 1 : o.nsizes;
        for (int k = 0; k < nsizes; k++) {
            int n = (int)sizes[k];
            memset(b.many, 0, (size_t)nranks * (size_t)maxsz);
            for (long j = 0; j < (long)nranks * n; j++)
                b.spread[j] = (char)(j / n + 1);
            long iters = scale_iters(o.iters, n, 8192, 10);
            long warm = scale_iters(o.warmup, n, 8192, 2);
            for (int r = 0; r < o.reps; r++) {
                struct point p = run((enum op)op, &b, n, warm, iters, 0.0);
                t[r] = p.total;
                w[r] = p.wait;
                st[r] = p.start;
            }
            double tnbc = stats(t, o.reps).median;
            if (rank == 0) {
                char extra[320];
                snprintf(extra, sizeof extra,
                         ",\"op\":\"%s\",\"ranks\":%d,\"compute_factor\":0,\"start_us\":%.3f,"
                         "\"compute_us\":0,\"wait_us\":%.3f,\"total_us\":%.3f,\"nbc_us\":%.3f",
                         op_names[op], nranks, stats(st, o.reps).median,
                         stats(w, o.reps).median, tnbc, tnbc);
                struct stat5 zero = {0, 0, 0, 0};
                emit("nbc-overlap", n, iters, zero, o.reps, "%", extra);
            }
            for (int f = 0; f < o.nfvals; f++) {
                double c_us = o.fvals[f] * tnbc;
                for (int r = 0; r < o.reps; r++) {
                    struct point p = run((enum op)op, &b, n, warm, iters, c_us);
                    double x = tnbc > 0 ? 100.0 * (1.0 - p.exposed / tnbc) : 0.0;
                    ov[r] = x < 0 ? 0 : (x > 100 ? 100 : x);
                    st[r] = p.start;
                    w[r] = p.wait;
                    t[r] = p.total;
                    c[r] = p.compute;
                }
                if (rank == 0) {
                    char extra[384];
                    struct stat5 os = stats(ov, o.reps);
                    snprintf(extra, sizeof extra,
                             ",\"op\":\"%s\",\"ranks\":%d,\"compute_factor\":%.3f,"
                             "\"start_us\":%.3f,\"compute_us\":%.3f,\"wait_us\":%.3f,"
                             "\"total_us\":%.3f,\"nbc_us\":%.3f",
                             op_names[op], nranks, o.fvals[f], stats(st, o.reps).median,
                             stats(c, o.reps).median, stats(w, o.reps).median,
                             stats(t, o.reps).median, tnbc);
                    emit("nbc-overlap", n, iters, os, o.reps, "%", extra);
                }
            }
            if (op == OP_IALLGATHER || op == OP_IALLTOALL) {
                for (long j = 0; j < (long)nranks * n; j++) {
                    int want = op == OP_IALLGATHER ? (int)(j / n) + 1 : rank + 1;
                    if (b.many[j] != (char)want)
                        die("nbc-overlap: a gathered or exchanged block is wrong");
                }
            }
            if (op == OP_IALLREDUCE) {
                for (long j = 0; j < n / 8; j++) {
                    if (b.rbuf[j] != (double)nranks)
                        die("nbc-overlap: iallreduce summed to a wrong value");
                }
            }
        }
    }
    MPI_Finalize();
    return 0;
}

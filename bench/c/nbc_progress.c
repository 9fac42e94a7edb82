/*
 * nbc-progress: do the non-blocking collectives complete while every rank
 * computes, with no MPI call after the start? On every rank of
 * MPI_COMM_WORLD (any number of ranks), for each operation
 *   ibarrier    MPI_Ibarrier (size 0)
 *   ibcast      MPI_Ibcast of size bytes (MPI_CHAR) from rank 0
 *   iallreduce  MPI_Iallreduce, MPI_SUM over size/8 doubles (every send
 *               element 1.0; sizes must be multiples of 8)
 * each size and each compute time c (-f, in us; default 200,1000,5000),
 * every rank runs per repetition warm + iters iterations of
 *
 *   MPI_Barrier; t0; start; ts; compute(c us of wall-clock time: the
 *   calibrated busy loop in ~5 us chunks until MPI_Wtime says c us passed,
 *   no MPI communication call); t1;
 *   MPI_Test (ONE completion check); MPI_Wait if not complete; t2
 *
 * value = % of the iterations whose MPI_Test found the collective complete,
 * the minimum over the ranks (MPI_Allreduce MPI_MIN), median over the
 * repetitions. MPI_Test itself progresses the operation, which favours this
 * side: the Rust side checks with Request::peek, which does not.
 * Extra fields: op, ranks, compute_us (asked), compute_meas_us, start_us
 * (ts - t0), wait_us (t2 - t1: the check and the residual wait), per
 * iteration, maxima over the ranks, medians over the repetitions; nbc_us
 * (T0: t2 - t0 with no compute, median); check ("MPI_Test").
 * The Rust side is bench/src/nbc_progress.rs, call for call.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

enum op { OP_IBARRIER, OP_IBCAST, OP_IALLREDUCE, NOPS };
static const char *const op_names[NOPS] = {"ibarrier", "ibcast", "iallreduce"};

struct bufs { char *bytes; double *sbuf, *rbuf; };

/* Busy work for c_us of wall-clock time (a calibration on a loaded host can
 * make work_us several times too short or too long); MPI_Wtime moves no
 * message. */
static void work_for_us(double c_us)
{
    double t = MPI_Wtime();
    while ((MPI_Wtime() - t) * 1e6 < c_us)
        work_us(5.0);
}
struct point { double done_pct, start, compute, wait, total; };

static void start(enum op op, struct bufs *b, int n, MPI_Request *req)
{
    switch (op) {
    case OP_IBARRIER:
        MPI_Ibarrier(MPI_COMM_WORLD, req);
        break;
    case OP_IBCAST:
        MPI_Ibcast(b->bytes, n, MPI_CHAR, 0, MPI_COMM_WORLD, req);
        break;
    default:
        MPI_Iallreduce(b->sbuf, b->rbuf, n / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, req);
        break;
    }
}

static struct point run(enum op op, struct bufs *b, int n, long warm, long iters, double c_us)
{
    double sum[4] = {0, 0, 0, 0}, max[4], pct, minpct;
    long done = 0;
    MPI_Request req;
    for (long i = 0; i < warm + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        start(op, b, n, &req);
        double ts = MPI_Wtime();
        if (c_us > 0)
            work_for_us(c_us);
        double t1 = MPI_Wtime();
        int flag = 0;
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        double t2 = MPI_Wtime();
        if (i >= warm) {
            sum[0] += ts - t0;
            sum[1] += t1 - ts;
            sum[2] += t2 - t1;
            sum[3] += t2 - t0;
            done += flag != 0;
        }
    }
    for (int k = 0; k < 4; k++)
        sum[k] = sum[k] * 1e6 / (double)iters;
    MPI_Allreduce(sum, max, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    pct = 100.0 * (double)done / (double)iters;
    MPI_Allreduce(&pct, &minpct, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    struct point p = {minpct, max[0], max[1], max[2], max[3]};
    return p;
}

int main(int argc, char **argv)
{
    struct defaults d = {8, 8192, 100, 5, 1, 1, 0};
    struct opts o;
    int rank = bench_init(&argc, &argv, "nbc-progress", &d, &o, " [-f COMPUTE_US]");
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (o.nfvals == 0) {
        double def[] = {200, 1000, 5000};
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
    MPI_Barrier(MPI_COMM_WORLD);
    work_calibrate();
    long maxsz = max_size(&o);
    struct bufs b = {xalloc((size_t)maxsz), (double *)xalloc((size_t)maxsz),
                     (double *)xalloc((size_t)maxsz)};
    memset(b.bytes, 0x5a, (size_t)maxsz);
    for (long j = 0; j < maxsz / 8; j++)
        b.sbuf[j] = 1.0;
    double v[MAX_REPS], st[MAX_REPS], c[MAX_REPS], w[MAX_REPS], t[MAX_REPS];
    long zero_size[1] = {0};

    for (int op = 0; op < NOPS; op++) {
        const long *sizes = op == OP_IBARRIER ? zero_size : o.sizes;
        int nsizes = op == OP_IBARRIER ? 1 : o.nsizes;
        for (int k = 0; k < nsizes; k++) {
            int n = (int)sizes[k];
            for (int r = 0; r < o.reps; r++)
                t[r] = run((enum op)op, &b, n, o.warmup, o.iters, 0.0).total;
            double tnbc = stats(t, o.reps).median;
            for (int f = 0; f < o.nfvals; f++) {
                for (int r = 0; r < o.reps; r++) {
                    struct point p = run((enum op)op, &b, n, o.warmup, o.iters, o.fvals[f]);
                    v[r] = p.done_pct;
                    st[r] = p.start;
                    c[r] = p.compute;
                    w[r] = p.wait;
                }
                if (rank == 0) {
                    char extra[384];
                    struct stat5 vs = stats(v, o.reps);
                    snprintf(extra, sizeof extra,
                             ",\"op\":\"%s\",\"ranks\":%d,\"compute_us\":%.3f,"
                             "\"compute_meas_us\":%.3f,\"start_us\":%.3f,\"wait_us\":%.3f,"
                             "\"nbc_us\":%.3f,\"check\":\"MPI_Test\"",
                             op_names[op], nranks, o.fvals[f], stats(c, o.reps).median,
                             stats(st, o.reps).median, stats(w, o.reps).median, tnbc);
                    emit("nbc-progress", n, o.iters, vs, o.reps, "%", extra);
                }
            }
            if (op == OP_IALLREDUCE) {
                for (long j = 0; j < n / 8; j++) {
                    if (b.rbuf[j] != (double)nranks)
                        die("nbc-progress: iallreduce summed to a wrong value");
                }
            }
        }
    }
    MPI_Finalize();
    return 0;
}

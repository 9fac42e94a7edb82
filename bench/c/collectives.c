/*
 * allreduce / bcast (built from this file with BENCH_MODE 0 / 1): latency of
 * a collective on every rank of MPI_COMM_WORLD (any number of ranks).
 *   allreduce: MPI_Allreduce, MPI_SUM over size/8 doubles (size must be a
 *              multiple of 8); every send element is 1.0
 *   bcast:     MPI_Bcast of size bytes (MPI_CHAR) from rank 0
 * Per repetition: MPI_Barrier, warm-up calls, then `iters` calls back to back;
 * each rank's average time per call; the repetition's value is the maximum
 * of these averages over the ranks (OSU style, gathered with MPI_Reduce
 * MPI_MAX). value = median over the repetitions, in us; extra field "ranks".
 * Defaults: 8 B .. 1 MB (powers of two), 1000 iterations up to 8 KB then
 * scaled down with size (>= 10), 100 warm-up iterations (>= 2).
 */
#include "common.h"

#include <stdio.h>

#ifndef BENCH_MODE
#define BENCH_MODE 0
#endif
#if BENCH_MODE == 0
#define BENCH_NAME "allreduce"
#else
#define BENCH_NAME "bcast"
#endif

struct coll { int n; double *sbuf, *rbuf; char *buf; };

#if BENCH_MODE == 0
static void once(void *ctx)
{
    struct coll *c = ctx;
    MPI_Allreduce(c->sbuf, c->rbuf, c->n / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
#else
static void once(void *ctx)
{
    struct coll *c = ctx;
    MPI_Bcast(c->buf, c->n, MPI_CHAR, 0, MPI_COMM_WORLD);
}
#endif

int main(int argc, char **argv)
{
    struct defaults d = {8, 1L << 20, 1000, 100, 1, 1, 0};
    struct opts o;
    int rank = bench_init(&argc, &argv, BENCH_NAME, &d, &o, "");
    int nranks;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int k = 0; k < o.nsizes; k++) {
        if (BENCH_MODE == 0 && o.sizes[k] % 8 != 0) {
            if (rank == 0)
                fprintf(stderr, "%s: sizes must be multiples of 8 (doubles)\n", argv[0]);
            MPI_Finalize();
            return 1;
        }
    }
    long maxsz = max_size(&o);
    struct coll c = {0, (double *)xalloc((size_t)maxsz), (double *)xalloc((size_t)maxsz),
                     xalloc((size_t)maxsz)};
    for (long j = 0; j < maxsz / 8; j++)
        c.sbuf[j] = 1.0;
    double vals[MAX_REPS], maxv[MAX_REPS];
    char extra[32];
    snprintf(extra, sizeof extra, ",\"ranks\":%d", nranks);

    for (int k = 0; k < o.nsizes; k++) {
        c.n = (int)o.sizes[k];
        long iters = scale_iters(o.iters, c.n, 8192, 10);
        long warm = scale_iters(o.warmup, c.n, 8192, 2);
        time_reps(&o, warm, iters, once, &c, vals);
        for (int r = 0; r < o.reps; r++)
            vals[r] = vals[r] * 1e6 / (double)iters;
        MPI_Reduce(vals, maxv, o.reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            emit(BENCH_NAME, c.n, iters, stats(maxv, o.reps), o.reps, "us", extra);
    }
    MPI_Finalize();
    return 0;
}

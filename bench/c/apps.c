/*
 * app-cg / app-halo / app-coll (built from this file with BENCH_MODE 0 / 1 /
 * 2): application kernels timed whole, on any number of ranks. The Rust side
 * is bench/src/apps/ (cg.rs, halo.rs, coll.rs), call for call, with the same
 * sizes and the same check of the answer.
 *
 *   app-cg   conjugate gradient on -Lap u = f over an N x N grid (5-point
 *            stencil, zero boundary, A = -Lap * h^2), rows split across the
 *            ranks; halo rows by MPI_Irecv/MPI_Isend/MPI_Waitall, two 8-byte
 *            MPI_Allreduce per iteration. f = A u* for a known u*; a solve
 *            runs from u = 0 until |r|^2 <= 1e-20 |f|^2 or -i iterations.
 *            Check: relative residual < 1e-8 and max |u - u*| < 1e-6.
 *            -s N (default 256), -i cap (2000).
 *   app-halo 1-D Jacobi relaxation, -s cells per rank (4096), -i steps
 *            (2000): per step MPI_Irecv from MPI_ANY_SOURCE (tag = direction)
 *            of one double each side, MPI_Isend of the edge cells,
 *            MPI_Waitall, relax. Check: rank 0 gathers the rod and repeats
 *            the steps serially; max difference <= 1e-12.
 *   app-coll -i iterations (1000) of: short compute (4 relaxation sweeps
 *            over size/8 doubles), MPI_Allreduce of 8 B, MPI_Allreduce
 *            (MPI_SUM) of -s bytes (8192) of doubles, MPI_Bcast of -s bytes
 *            of doubles from root i mod P, MPI_Barrier. Every value is a
 *            whole number, every sum exact: each rank checks each result.
 *
 * Per repetition: MPI_Barrier, one solve; its time is the maximum over the
 * ranks (MPI_Allreduce MPI_MAX), in ms. -w untimed solves first (default
 * 1). value = median over -r repetitions. A wrong answer aborts the job.
 * Extra fields: ranks, check ("ok"), and iterations, residual, error (cg),
 * max_diff (halo), sweeps (coll).
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef BENCH_MODE
#define BENCH_MODE 0
#endif
#if BENCH_MODE == 0
#define BENCH_NAME "app-cg"
#elif BENCH_MODE == 1
#define BENCH_NAME "app-halo"
#else
#define BENCH_NAME "app-coll"
#endif

static int rank, nranks;

static double max_over_ranks(double x)
{
    double m;
    MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static void wrong(const char *what)
{
    fprintf(stderr, "%s: WRONG ANSWER: %s\n", BENCH_NAME, what);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

#if BENCH_MODE == 0
/* ---- app-cg ---- */
enum { DOWNWARD = 1, UPWARD = 2 };
struct state {
    long n, rows, max_iter, iterations;
    double *ustar, *b, *u, *r, *p, *ap, bb;
};

static double exact(long n, long gi, long j)
{
    const double pi = 3.14159265358979323846;
    double h = 1.0 / (double)(n + 1), x = (double)(gi + 1) * h, y = (double)(j + 1) * h;
    return sin(pi * x) * sin(2.0 * pi * y) + x * y * (1.0 - x) * (1.0 - y);
}

static void apply(long n, long rows, const double *v, double *y)
{
    for (long i = 1; i <= rows; i++) {
        for (long j = 0; j < n; j++) {
            long k = i * n + j;
            double l = j > 0 ? v[k - 1] : 0.0;
            double r = j + 1 < n ? v[k + 1] : 0.0;
            y[k] = 4.0 * v[k] - l - r - v[k - n] - v[k + n];
        }
    }
}

static void exchange(long n, long rows, double *v)
{
    MPI_Request req[4];
    int k = 0;
    if (rank > 0) {
        MPI_Irecv(v, (int)n, MPI_DOUBLE, rank - 1, DOWNWARD, MPI_COMM_WORLD, &req[k++]);
        MPI_Isend(v + n, (int)n, MPI_DOUBLE, rank - 1, UPWARD, MPI_COMM_WORLD, &req[k++]);
    }
    if (rank + 1 < nranks) {
        MPI_Irecv(v + (rows + 1) * n, (int)n, MPI_DOUBLE, rank + 1, UPWARD, MPI_COMM_WORLD,
                  &req[k++]);
        MPI_Isend(v + rows * n, (int)n, MPI_DOUBLE, rank + 1, DOWNWARD, MPI_COMM_WORLD,
                  &req[k++]);
    }
    MPI_Waitall(k, req, statuses_ignore);
}

static double dot(const struct state *s, const double *a, const double *b)
{
    double local = 0.0, global;
    for (long k = s->n; k < (s->rows + 1) * s->n; k++)
        local += a[k] * b[k];
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return global;
}

static void setup(struct state *s, long n, long iters)
{
    if (n < nranks)
        n = nranks;
    long base = n / nranks, extra = n % nranks;
    long rows = base + (rank < extra), first = rank * base + (rank < extra ? rank : extra);
    size_t len = (size_t)((rows + 2) * n) * sizeof(double);
    s->n = n;
    s->rows = rows;
    s->max_iter = iters;
    s->ustar = (double *)xalloc(len);
    s->b = (double *)xalloc(len);
    s->u = (double *)xalloc(len);
    s->r = (double *)xalloc(len);
    s->p = (double *)xalloc(len);
    s->ap = (double *)xalloc(len);
    memset(s->ustar, 0, len);
    memset(s->b, 0, len);
    memset(s->u, 0, len);
    memset(s->r, 0, len);
    memset(s->p, 0, len);
    memset(s->ap, 0, len);
    for (long i = 0; i < rows + 2; i++) {
        long gi = first + i - 1;
        if (gi >= 0 && gi < n)
            for (long j = 0; j < n; j++)
                s->ustar[i * n + j] = exact(n, gi, j);
    }
    apply(n, rows, s->ustar, s->b);
}

static void solve(struct state *s)
{
    long n = s->n, rows = s->rows, lo = n, hi = (rows + 1) * n;
    size_t len = (size_t)((rows + 2) * n) * sizeof(double);
    memset(s->u, 0, len);
    memcpy(s->r, s->b, len);
    memcpy(s->p, s->b, len);
    double rr = dot(s, s->r, s->r);
    s->bb = rr;
    long it = 0;
    while (it < s->max_iter && rr > 1e-20 * s->bb) {
        exchange(n, rows, s->p);
        apply(n, rows, s->p, s->ap);
        double alpha = rr / dot(s, s->p, s->ap);
        for (long k = lo; k < hi; k++) {
            s->u[k] += alpha * s->p[k];
            s->r[k] -= alpha * s->ap[k];
        }
        double rr_new = dot(s, s->r, s->r);
        double beta = rr_new / rr;
        for (long k = lo; k < hi; k++)
            s->p[k] = s->r[k] + beta * s->p[k];
        rr = rr_new;
        it++;
    }
    s->iterations = it;
}

static void check(struct state *s, char *extra, size_t cap)
{
    long n = s->n, rows = s->rows;
    exchange(n, rows, s->u);
    apply(n, rows, s->u, s->ap);
    for (long k = n; k < (rows + 1) * n; k++)
        s->r[k] = s->b[k] - s->ap[k];
    double residual = sqrt(dot(s, s->r, s->r)) / sqrt(s->bb);
    double local = 0.0;
    for (long k = n; k < (rows + 1) * n; k++) {
        double d = fabs(s->u[k] - s->ustar[k]);
        if (d > local)
            local = d;
    }
    double error = max_over_ranks(local);
    if (!(residual < 1e-8 && error < 1e-6)) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "%ldx%ld after %ld iterations: relative residual %.2e, max error %.2e", n, n,
                 s->iterations, residual, error);
        wrong(msg);
    }
    snprintf(extra, cap, ",\"iterations\":%ld,\"residual\":%.6e,\"error\":%.6e", s->iterations,
             residual, error);
}

#elif BENCH_MODE == 1
/* ---- app-halo ---- */
enum { LEFT = 1, RIGHT = 2, GATHER = 3 };
struct state {
    long cells, steps;
    double *u, *v;
};

static double initial(long g) { return (double)((g * 7919) % 1000) / 1000.0; }

static void step(const double *old, double *new_, long n, double left, double right)
{
    for (long i = 0; i < n; i++) {
        double l = i == 0 ? left : old[i - 1];
        double r = i + 1 == n ? right : old[i + 1];
        new_[i] = 0.5 * old[i] + 0.25 * (l + r);
    }
}

static void setup(struct state *s, long cells, long steps)
{
    s->cells = cells < 1 ? 1 : cells;
    s->steps = steps;
    s->u = (double *)xalloc((size_t)s->cells * sizeof(double));
    s->v = (double *)xalloc((size_t)s->cells * sizeof(double));
}

static void solve(struct state *s)
{
    long n = s->cells;
    for (long i = 0; i < n; i++)
        s->u[i] = initial(rank * n + i);
    for (long t = 0; t < s->steps; t++) {
        double from_left = 0.0, from_right = 0.0;
        MPI_Request req[4];
        int k = 0;
        if (rank > 0)
            MPI_Irecv(&from_left, 1, MPI_DOUBLE, MPI_ANY_SOURCE, RIGHT, MPI_COMM_WORLD, &req[k++]);
        if (rank + 1 < nranks)
            MPI_Irecv(&from_right, 1, MPI_DOUBLE, MPI_ANY_SOURCE, LEFT, MPI_COMM_WORLD, &req[k++]);
        if (rank > 0)
            MPI_Isend(&s->u[0], 1, MPI_DOUBLE, rank - 1, LEFT, MPI_COMM_WORLD, &req[k++]);
        if (rank + 1 < nranks)
            MPI_Isend(&s->u[n - 1], 1, MPI_DOUBLE, rank + 1, RIGHT, MPI_COMM_WORLD, &req[k++]);
        MPI_Waitall(k, req, statuses_ignore);
        step(s->u, s->v, n, from_left, from_right);
        double *tmp = s->u;
        s->u = s->v;
        s->v = tmp;
    }
}

static void check(struct state *s, char *extra, size_t cap)
{
    long n = s->cells, total = n * nranks;
    if (rank != 0) {
        MPI_Send(s->u, (int)n, MPI_DOUBLE, 0, GATHER, MPI_COMM_WORLD);
        extra[0] = '\0';
        return;
    }
    double *all = (double *)xalloc((size_t)total * sizeof(double));
    double *a = (double *)xalloc((size_t)total * sizeof(double));
    double *b = (double *)xalloc((size_t)total * sizeof(double));
    memcpy(all, s->u, (size_t)n * sizeof(double));
    for (int r = 1; r < nranks; r++)
        MPI_Recv(all + (long)r * n, (int)n, MPI_DOUBLE, r, GATHER, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (long g = 0; g < total; g++)
        a[g] = initial(g);
    for (long t = 0; t < s->steps; t++) {
        step(a, b, total, 0.0, 0.0);
        double *tmp = a;
        a = b;
        b = tmp;
    }
    double diff = 0.0;
    for (long g = 0; g < total; g++) {
        double d = fabs(all[g] - a[g]);
        if (d > diff)
            diff = d;
    }
    if (diff > 1e-12) {
        char msg[120];
        snprintf(msg, sizeof msg, "max difference from the serial computation %e", diff);
        wrong(msg);
    }
    snprintf(extra, cap, ",\"max_diff\":%.6e", diff);
}

#else
/* ---- app-coll ---- */
enum { SWEEPS = 4 };
struct state {
    long m, iters;
    double *x, *sum, *y, *z, *zt;
    char bad[160];
};

static void setup(struct state *s, long bytes, long iters)
{
    s->m = bytes / 8 < 1 ? 1 : bytes / 8;
    s->iters = iters;
    size_t len = (size_t)s->m * sizeof(double);
    s->x = (double *)xalloc(len);
    s->sum = (double *)xalloc(len);
    s->y = (double *)xalloc(len);
    s->z = (double *)xalloc(len);
    s->zt = (double *)xalloc(len);
    memset(s->y, 0, len);
}

static volatile double sink;

static void compute(struct state *s)
{
    long n = s->m;
    for (int k = 0; k < SWEEPS; k++) {
        for (long j = 0; j < n; j++) {
            double l = j == 0 ? 0.0 : s->z[j - 1];
            double r = j + 1 == n ? 0.0 : s->z[j + 1];
            s->zt[j] = 0.5 * s->z[j] + 0.25 * (l + r);
        }
        double *tmp = s->z;
        s->z = s->zt;
        s->zt = tmp;
    }
    sink = s->z[n / 2];
}

static void note(struct state *s, long i, const char *what, long j, double v)
{
    if (s->bad[0] == '\0')
        snprintf(s->bad, sizeof s->bad, "iteration %ld: %s %ld = %g", i, what, j, v);
}

static void solve(struct state *s)
{
    long m = s->m;
    double p = (double)nranks, r = (double)rank, base = p * (p - 1.0) / 2.0;
    for (long j = 0; j < m; j++)
        s->z[j] = 1.0;
    s->bad[0] = '\0';
    for (long i = 0; i < s->iters; i++) {
        double fi = (double)i, mine = r + fi, tot;
        for (long j = 0; j < m; j++)
            s->x[j] = r + (double)j + fi;
        compute(s);
        MPI_Allreduce(&mine, &tot, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (tot != p * fi + base)
            note(s, i, "8-byte all_reduce, element", 0, tot);
        MPI_Allreduce(s->x, s->sum, (int)m, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (long j = 0; j < m; j++) {
            if (s->sum[j] != p * ((double)j + fi) + base) {
                note(s, i, "all_reduce element", j, s->sum[j]);
                break;
            }
        }
        long root = i % nranks;
        if (root == rank)
            for (long j = 0; j < m; j++)
                s->y[j] = (double)(root * m + j + i);
        MPI_Bcast(s->y, (int)m, MPI_DOUBLE, (int)root, MPI_COMM_WORLD);
        for (long j = 0; j < m; j++) {
            if (s->y[j] != (double)(root * m + j + i)) {
                note(s, i, "broadcast element", j, s->y[j]);
                break;
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void check(struct state *s, char *extra, size_t cap)
{
    double any = max_over_ranks(s->bad[0] ? 1.0 : 0.0);
    if (s->bad[0]) {
        char msg[200];
        snprintf(msg, sizeof msg, "rank %d: %s", rank, s->bad);
        wrong(msg);
    }
    if (any > 0.0)
        wrong("on another rank");
    snprintf(extra, cap, ",\"sweeps\":%d", SWEEPS);
}
#endif

int main(int argc, char **argv)
{
#if BENCH_MODE == 0
    struct defaults d = {256, 256, 2000, 1, 1, 1, 0};
#elif BENCH_MODE == 1
    struct defaults d = {4096, 4096, 2000, 1, 1, 1, 0};
#else
    struct defaults d = {8192, 8192, 1000, 1, 1, 1, 0};
#endif
    struct opts o;
    rank = bench_init(&argc, &argv, BENCH_NAME, &d, &o, "");
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int k = 0; k < o.nsizes; k++) {
        int bad = BENCH_MODE == 0 ? o.sizes[k] < nranks
                : BENCH_MODE == 2 ? o.sizes[k] < 8 || o.sizes[k] % 8 != 0
                                  : o.sizes[k] < 1;
        if (bad) {
            if (rank == 0)
                fprintf(stderr, "%s: bad size %ld (cg: >= ranks; coll: a multiple of 8)\n",
                        argv[0], o.sizes[k]);
            MPI_Finalize();
            return 1;
        }
    }
    double ms[MAX_REPS];
    for (int k = 0; k < o.nsizes; k++) {
        struct state s;
        memset(&s, 0, sizeof s);
        setup(&s, o.sizes[k], o.iters);
        for (long w = 0; w < o.warmup; w++) {
            MPI_Barrier(MPI_COMM_WORLD);
            solve(&s);
        }
        for (int r = 0; r < o.reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            solve(&s);
            ms[r] = max_over_ranks((MPI_Wtime() - t0) * 1e3);
        }
        char kextra[160], extra[256];
        check(&s, kextra, sizeof kextra);
        snprintf(extra, sizeof extra, ",\"ranks\":%d,\"check\":\"ok\"%s", nranks, kextra);
        if (rank == 0)
            emit(BENCH_NAME, o.sizes[k], o.iters, stats(ms, o.reps), o.reps, "ms", extra);
    }
    MPI_Finalize();
    return 0;
}

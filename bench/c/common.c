/* Shared helpers for the peer MPI benchmarks; see common.h. */
#define _POSIX_C_SOURCE 200112L
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

MPI_Status *const statuses_ignore = MPI_STATUSES_IGNORE;

void die(const char *msg)
{
    fprintf(stderr, "bench: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2); /* not reached */
}

/* Comma-separated non-negative numbers; with `suffixes`, K/M multiply by
 * 1024 / 1024^2. Returns the count, or -1 on a malformed list. */
static int parse_list(const char *s, double *out, int max, int suffixes)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || v < 0)
            return -1;
        if (suffixes && (*end == 'K' || *end == 'k')) { v *= 1024; end++; }
        else if (suffixes && (*end == 'M' || *end == 'm')) { v *= 1024 * 1024; end++; }
        out[n++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return n;
}

static int parse_long_list(const char *s, long *out, int max)
{
    double v[MAX_LIST];
    int n = parse_list(s, v, max < MAX_LIST ? max : MAX_LIST, 1);
    for (int i = 0; i < n; i++) {
        if (v[i] != (double)(long)v[i])
            return -1; /* not a whole number */
        out[i] = (long)v[i];
    }
    return n;
}

static int parse_double_list(const char *s, double *out, int max)
{
    return parse_list(s, out, max, 0);
}

static long parse_one(const char *s)
{
    long v;
    if (parse_long_list(s, &v, 1) != 1)
        return -1;
    return v;
}

int parse_opts(int argc, char **argv, const struct defaults *d, struct opts *o,
               const char *usage_extra)
{
    long min = d->min_size, max = d->max_size;
    int c, rank;
    memset(o, 0, sizeof *o);
    o->iters = d->iters;
    o->warmup = d->warmup;
    o->reps = 5;
    o->window = d->window;
    o->mem_cap = d->mem_cap > 0 ? d->mem_cap : 256L * 1024 * 1024;
    o->total_us = 500000.0;
    strcpy(o->method, "poll");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    while ((c = getopt(argc, argv, "s:m:M:i:w:r:W:f:n:C:p:T:S:h")) != -1) {
        switch (c) {
        case 's': o->nsizes = parse_long_list(optarg, o->sizes, MAX_LIST); break;
        case 'm': min = parse_one(optarg); break;
        case 'M': max = parse_one(optarg); break;
        case 'i': o->iters = parse_one(optarg); break;
        case 'w': o->warmup = parse_one(optarg); break;
        case 'r': o->reps = (int)parse_one(optarg); break;
        case 'W': o->window = (int)parse_one(optarg); break;
        case 'f': o->nfvals = parse_double_list(optarg, o->fvals, MAX_LIST); break;
        case 'n': o->nnvals = parse_long_list(optarg, o->nvals, MAX_LIST); break;
        case 'C': o->mem_cap = parse_one(optarg); break;
        case 'p': snprintf(o->method, sizeof o->method, "%s", optarg); break;
        case 'T': o->total_us = (double)parse_one(optarg); break;
        case 'S': o->settle_ms = parse_one(optarg); break;
        default:
            if (rank == 0)
                fprintf(stderr,
                        "usage: %s [-s SIZES | -m MIN -M MAX] [-i ITERS] [-w WARMUP] "
                        "[-r REPS] [-W WINDOW] [-C MEMCAP] [-S SETTLE_MS]%s\n"
                        "  sizes accept K/M suffixes; lists are comma separated\n",
                        argv[0], usage_extra ? usage_extra : "");
            return -1;
        }
    }
    if (o->nsizes < 0 || o->nfvals < 0 || o->nnvals < 0 || min < 0 || max < min ||
        o->iters < 1 || o->warmup < 0 || o->reps < 1 || o->window < 1 || o->mem_cap < 1 ||
        o->settle_ms < 0) {
        if (rank == 0)
            fprintf(stderr, "%s: bad argument (try -h)\n", argv[0]);
        return -1;
    }
    if (o->nsizes == 0) {
        if (min == 0)
            o->sizes[o->nsizes++] = 0;
        for (long s = min ? min : 1; s <= max && o->nsizes < MAX_LIST; s *= 2)
            o->sizes[o->nsizes++] = s;
    }
    return 0;
}

int bench_init(int *argc, char ***argv, const char *name, const struct defaults *d,
               struct opts *o, const char *usage_extra)
{
    int rank, nprocs;
    char msg[96];
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (!d->any_ranks && nprocs != 2) {
        snprintf(msg, sizeof msg, "%s needs exactly 2 ranks", name);
        die(msg);
    }
    if (parse_opts(*argc, *argv, d, o, usage_extra) != 0) {
        MPI_Finalize();
        exit(1);
    }
    if (o->reps > MAX_REPS)
        o->reps = MAX_REPS;
    return rank;
}

long max_size(const struct opts *o)
{
    long m = 1;
    for (int k = 0; k < o->nsizes; k++)
        if (o->sizes[k] > m)
            m = o->sizes[k];
    return m;
}

/* Iterations between two looks at rank 0's clock while settling. */
#define SETTLE_CHUNK 8

static void settle(long ms, iter_fn fn, void *ctx)
{
    int rank, go = 1;
    double t0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    while (go) {
        for (int i = 0; i < SETTLE_CHUNK; i++)
            fn(ctx);
        if (rank == 0)
            go = (MPI_Wtime() - t0) * 1e3 < (double)ms;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
}

void time_reps(const struct opts *o, long warm, long iters, iter_fn fn, void *ctx,
               double *secs)
{
    static int settled;
    if (!settled && o->settle_ms > 0)
        settle(o->settle_ms, fn, ctx);
    settled = 1;
    for (int r = 0; r < o->reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0.0;
        for (long i = 0; i < warm + iters; i++) {
            if (i == warm)
                t0 = MPI_Wtime();
            fn(ctx);
        }
        secs[r] = MPI_Wtime() - t0;
    }
}

long scale_iters(long base, long size, long threshold, long floor_)
{
    long it;
    if (size <= threshold)
        return base;
    it = (long)((double)base * (double)threshold / (double)size);
    return it < floor_ ? floor_ : it;
}

char *xalloc(size_t n)
{
    void *p = NULL;
    if (n == 0)
        n = 1;
    if (posix_memalign(&p, 4096, n) != 0)
        die("out of memory");
    memset(p, 0x5a, n); /* touch every page before timing */
    return p;
}

/* ---- calibrated busy work ------------------------------------------------ */

static volatile unsigned long work_sink;
static double loops_per_us = 0.0;

static void spin(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++)
        work_sink++;
}

void work_calibrate(void)
{
    unsigned long n = 1UL << 16;
    double best = 0.0;
    /* grow until one run takes >= 20 ms, then keep the best of 5 runs
     * (the least-disturbed one is the true cost of the loop). */
    for (;;) {
        double t0 = MPI_Wtime();
        spin(n);
        double dt = MPI_Wtime() - t0;
        if (dt >= 0.02)
            break;
        n *= 2;
    }
    for (int k = 0; k < 5; k++) {
        double t0 = MPI_Wtime();
        spin(n);
        double dt = MPI_Wtime() - t0;
        double rate = (double)n / (dt * 1e6);
        if (rate > best)
            best = rate;
    }
    loops_per_us = best;
}

void work_us(double us)
{
    if (loops_per_us <= 0.0)
        work_calibrate();
    spin((unsigned long)(us * loops_per_us));
}

/* ---- statistics and output ------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stat5 stats(double *v, int n)
{
    struct stat5 s = {0, 0, 0, 0};
    if (n <= 0)
        return s;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    for (int i = 0; i < n; i++)
        s.mean += v[i];
    s.mean /= n;
    return s;
}

void emit(const char *bench, long size, long iters, struct stat5 s, int reps,
          const char *unit, const char *extra)
{
    const char *impl = getenv("PTL_BENCH_IMPL");
    printf("{\"bench\":\"%s\",\"impl\":\"%s\",\"size\":%ld,\"iters\":%ld,"
           "\"value\":%.4f,\"unit\":\"%s\",\"reps\":%d,\"min\":%.4f,\"max\":%.4f,"
           "\"mean\":%.4f%s}\n",
           bench, impl ? impl : "unknown", size, iters, s.median, unit, reps, s.min,
           s.max, s.mean, extra ? extra : "");
    fflush(stdout);
}

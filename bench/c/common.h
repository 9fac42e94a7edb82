/*
 * Shared helpers for the peer MPI benchmarks (C99, MPI standard API only).
 *
 * Every benchmark prints one JSON object per measured point on stdout (rank 0
 * only), e.g.
 *   {"bench":"latency","impl":"openmpi-tcp","size":8,"iters":10000,
 *    "value":4.21,"unit":"us","reps":5,"min":4.1,"max":4.6,"mean":4.3}
 * "value" is always the median over the repetitions; "impl" comes from the
 * environment variable PTL_BENCH_IMPL (set by run_peer.sh), "unknown" if unset.
 */
#ifndef PTL_BENCH_COMMON_H
#define PTL_BENCH_COMMON_H

#include <mpi.h>
#include <stddef.h>

#define MAX_LIST 64
#define MAX_REPS 256

/* Command-line options shared by all benchmarks (each uses the subset it needs). */
struct opts {
    long sizes[MAX_LIST]; /* -s 0,8,1024 or -m MIN -M MAX (powers of two, 0 first if MIN == 0) */
    int nsizes;
    long iters;           /* -i base iterations per repetition (scaled down for large sizes) */
    long warmup;          /* -w warmup iterations (scaled like iters) */
    int reps;             /* -r repetitions per point; the median is reported */
    int window;           /* -W outstanding operations (bandwidth, msgrate, comb queue depth) */
    double fvals[MAX_LIST]; /* -f overlap compute factors / comb work intervals in us */
    int nfvals;
    long nvals[MAX_LIST]; /* -n matchlist queue lengths */
    int nnvals;
    long mem_cap;         /* -C byte cap for distinct receive buffers (window shrinks above it) */
    char method[16];      /* -p comb method: poll | pww */
    double total_us;      /* -T comb work per point in us */
    long settle_ms;       /* -S untimed iterations of the first point for this many ms
                             before its first repetition (time_reps); 0: none */
};

/* Defaults a benchmark passes to parse_opts. Sizes are given as min/max.
 * any_ranks: 1 if the benchmark runs on any number of ranks (collectives),
 * 0 if it needs exactly 2. */
struct defaults {
    long min_size, max_size, iters, warmup;
    int window;
    int any_ranks;
    long mem_cap; /* default -C; 0: 256 MiB */
};

int parse_opts(int argc, char **argv, const struct defaults *d, struct opts *o,
               const char *usage_extra);
/* MPI_Init, check for exactly 2 ranks (unless d->any_ranks), parse the options (exit 1 on bad
 * ones, after MPI_Finalize), cap the repetitions at MAX_REPS. Returns the rank. */
int bench_init(int *argc, char ***argv, const char *name, const struct defaults *d,
               struct opts *o, const char *usage_extra);
/* Largest of the sizes (at least 1). */
long max_size(const struct opts *o);
/* One timed iteration of a benchmark loop. */
typedef void (*iter_fn)(void *ctx);
/* For each of o->reps repetitions: MPI_Barrier, then `fn(ctx)` warm + iters
 * times; secs[r] = seconds taken by the last `iters` calls. The first call
 * in a process first settles: `fn(ctx)` untimed for o->settle_ms ms by rank
 * 0's clock, in chunks, every rank told by MPI_Bcast whether to go on (a
 * loop that starts on idle CPUs runs slower for its first 10-100 ms on the
 * project's test host; see SETTLE_MS in bench/src/params.rs). */
void time_reps(const struct opts *o, long warm, long iters, iter_fn fn, void *ctx,
               double *secs);
/* Scale a base iteration count down for sizes above `threshold`, never below `floor_`. */
long scale_iters(long base, long size, long threshold, long floor_);
/* Allocate and touch `n` bytes (page-aligned); aborts the job on failure. */
char *xalloc(size_t n);
/* Busy work: calibrate once, then spin for `us` microseconds worth of loop iterations. */
void work_calibrate(void);
void work_us(double us);
/* Median/min/max/mean of `n` values (v is sorted in place). */
struct stat5 { double median, min, max, mean; };
struct stat5 stats(double *v, int n);
/* Print one JSON line: common fields, statistics, then `extra` (either "" or
 * ",\"key\":value..." already formatted). */
void emit(const char *bench, long size, long iters, struct stat5 s, int reps,
          const char *unit, const char *extra);
void die(const char *msg);
/* MPI_STATUSES_IGNORE through an opaque pointer: MPICH defines it as
 * (MPI_Status *)1, which GCC 12's -Wstringop-overflow flags at every
 * MPI_Waitall/MPI_Testsome call site (a false positive). */
extern MPI_Status *const statuses_ignore;

#endif

/*
 * comb: host CPU availability while receiving a message stream, after COMB
 * (Lawry et al.; seed 001 Figs. 12-13). Rank 0 is the worker, rank 1 the
 * support process that streams `size`-byte messages (default 100 KB).
 *
 * -p poll (default, COMB's polling method): the worker keeps Q (-W, default 4)
 *    receives posted, runs N work intervals of I us each (-f list, default
 *    10,100,1000,10000; N = T / I with T = -T, default 500000 us), and after
 *    every interval polls once with MPI_Testsome, re-posting completed
 *    receives. The support process keeps Q MPI_Isend outstanding until told
 *    to stop.
 * -p pww (COMB's post-work-wait method): per interval the worker posts Q
 *    receives, works I us, then MPI_Waitall; the support process sends Q
 *    messages per interval.
 *
 * value = availability % = 100 * (time for the N intervals without
 * communication) / (time for them with communication); "bandwidth" is the
 * payload received during the timed loop, MB/s (1e6 bytes). Each repetition
 * runs the intervals once dry and once wet; the dry time used is the
 * shortest over all repetitions (noise only ever lengthens it), "dry_us" is
 * that minimum and "wet_us" the median wet time.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define TAG_DATA 1
#define TAG_STOP 2
#define TAG_COUNT 3

/* Context switches of this process so far, all threads (issue 22 reports
 * them per message beside the availability). */
static long context_switches(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

static double dry_run(long n, double interval)
{
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++)
        work_us(interval);
    return MPI_Wtime() - t0;
}

/* Polling method, worker side. Returns wet time; *got = messages completed in it. */
static double poll_worker(char *buf, int size, int q, long n, double interval, long *got,
                          MPI_Request *req, int *idx)
{
    long posted = 0, done = 0, total = 0;
    for (int j = 0; j < q; j++, posted++)
        MPI_Irecv(buf + (size_t)j * size, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD, &req[j]);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
        int outcount = 0;
        work_us(interval);
        MPI_Testsome(q, req, &outcount, idx, statuses_ignore);
        for (int k = 0; k < outcount; k++, done++, posted++)
            MPI_Irecv(buf + (size_t)idx[k] * size, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD,
                      &req[idx[k]]);
    }
    double wet = MPI_Wtime() - t0;
    *got = done;
    /* drain: tell the sender how many receives are posted, learn how many it sent */
    MPI_Send(&posted, 1, MPI_LONG, 1, TAG_STOP, MPI_COMM_WORLD);
    MPI_Recv(&total, 1, MPI_LONG, 1, TAG_COUNT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Waitall(q, req, statuses_ignore);
    for (; posted < total; posted++)
        MPI_Recv(buf, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return wet;
}

static void poll_sender(char *buf, int size, int q, MPI_Request *req)
{
    long sent = 0, posted = 0;
    int which;
    MPI_Request stop;
    MPI_Irecv(&posted, 1, MPI_LONG, 0, TAG_STOP, MPI_COMM_WORLD, &stop);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int j = 0; j < q; j++, sent++)
        MPI_Isend(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD, &req[j]);
    req[q] = stop;
    for (;;) {
        MPI_Waitany(q + 1, req, &which, MPI_STATUS_IGNORE);
        if (which == q)
            break;
        MPI_Isend(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD, &req[which]);
        sent++;
    }
    MPI_Send(&sent, 1, MPI_LONG, 0, TAG_COUNT, MPI_COMM_WORLD);
    for (; sent < posted; sent++)
        MPI_Send(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD);
    MPI_Waitall(q, req, statuses_ignore);
}

/* Post-work-wait method; returns wet time on the worker (0 on the sender). */
static double pww(int rank, char *buf, int size, int q, long n, double interval,
                  MPI_Request *req)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
        for (int j = 0; j < q; j++) {
            if (rank == 0)
                MPI_Irecv(buf + (size_t)j * size, size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD,
                          &req[j]);
            else
                MPI_Isend(buf, size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD, &req[j]);
        }
        if (rank == 0)
            work_us(interval);
        MPI_Waitall(q, req, statuses_ignore);
    }
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv)
{
    struct defaults d = {102400, 102400, 1, 0, 4, 0, 0};
    struct opts o;
    int rank = bench_init(&argc, &argv, "comb", &d, &o,
                          " [-f WORK_INTERVALS_US] [-T WORK_PER_POINT_US] [-p poll|pww]");
    int polling = strcmp(o.method, "pww") != 0;
    if (o.nfvals == 0) {
        double def[] = {10, 100, 1000, 10000};
        memcpy(o.fvals, def, sizeof def);
        o.nfvals = 4;
    }
    int q = o.window;
    char *buf = xalloc((size_t)max_size(&o) * (size_t)q);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(q + 1));
    int *idx = malloc(sizeof(int) * (size_t)(q + 1));
    if (!req || !idx)
        die("out of memory");
    work_calibrate();
    double av[MAX_REPS], bw[MAX_REPS], dry[MAX_REPS], wet[MAX_REPS], csw[MAX_REPS];

    for (int k = 0; k < o.nsizes; k++) {
        int size = (int)o.sizes[k];
        for (int f = 0; f < o.nfvals; f++) {
            double interval = o.fvals[f];
            long n = interval > 0 ? (long)(o.total_us / interval) : 1;
            if (n < 1)
                n = 1;
            for (int r = 0; r < o.reps; r++) {
                long got = 0;
                double tdry = 0, twet;
                MPI_Barrier(MPI_COMM_WORLD);
                if (rank == 0)
                    tdry = dry_run(n, interval);
                MPI_Barrier(MPI_COMM_WORLD);
                long cs0 = context_switches();
                if (polling) {
                    if (rank == 0) {
                        twet = poll_worker(buf, size, q, n, interval, &got, req, idx);
                    } else {
                        poll_sender(buf, size, q, req);
                        twet = 1;
                    }
                } else {
                    twet = pww(rank, buf, size, q, n, interval, req);
                    got = n * q;
                }
                /* Over the wet run and its drain, per message received. */
                csw[r] = got > 0 ? (double)(context_switches() - cs0) / (double)got : 0;
                bw[r] = twet > 0 ? (double)got * size / twet / 1e6 : 0;
                dry[r] = tdry * 1e6;
                wet[r] = twet * 1e6;
            }
            /* Interference from other processes only lengthens a run, so the
             * shortest dry run is the best estimate of the pure work time;
             * every repetition's wet time is compared with it. */
            double dry_min = dry[0];
            for (int r = 1; r < o.reps; r++)
                if (dry[r] < dry_min)
                    dry_min = dry[r];
            for (int r = 0; r < o.reps; r++)
                av[r] = wet[r] > 0 ? 100.0 * dry_min / wet[r] : 0;
            if (rank == 0) {
                char extra[384];
                snprintf(extra, sizeof extra,
                         ",\"method\":\"%s\",\"work_interval_us\":%.1f,\"intervals\":%ld,"
                         "\"queue\":%d,\"bandwidth\":%.3f,\"bandwidth_unit\":\"MB/s\","
                         "\"dry_us\":%.1f,\"wet_us\":%.1f,\"ctx_switches_per_msg\":%.3f",
                         polling ? "poll" : "pww", interval, n, q, stats(bw, o.reps).median,
                         dry_min, stats(wet, o.reps).median, stats(csw, o.reps).median);
                emit("comb", size, n, stats(av, o.reps), o.reps, "%", extra);
            }
        }
    }
    free(req);
    free(idx);
    MPI_Finalize();
    return 0;
}

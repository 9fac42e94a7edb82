/*
 * matchlist: ping-pong latency when the matching receive sits behind N-1
 * posted, non-matching receives. Rank 1 posts N-1 MPI_Irecv from rank 0 with
 * tags 2..N (they never match), then the receive for the ping (tag 1) at the
 * end of the posted queue; it re-posts the next ping receive before sending
 * each pong, so every ping is matched against the full posted queue.
 * Rank 0 measures; value = RTT / 2 in us. Afterwards the N-1 receives are
 * cancelled. Sizes default to 8 bytes; N defaults to 1,10,100,1000,10000 (-n).
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

struct pingpong { int rank, n; char *sbuf, *rbuf; MPI_Request ping; };

/* Rank 0: ping, wait for the pong. Rank 1: wait for the ping (matched
 * behind the posted junk), re-post its receive, pong. */
static void round_trip(void *ctx)
{
    struct pingpong *p = ctx;
    if (p->rank == 0) {
        MPI_Send(p->sbuf, p->n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(p->rbuf, p->n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Wait(&p->ping, MPI_STATUS_IGNORE);
        MPI_Irecv(p->rbuf, p->n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &p->ping);
        MPI_Send(p->sbuf, p->n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    struct defaults d = {8, 8, 2000, 200, 1, 0, 0};
    struct opts o;
    int tag_ub_ok = 0, *tag_ub;
    int rank = bench_init(&argc, &argv, "matchlist", &d, &o, " [-n QUEUE_LENGTHS]");
    if (o.nnvals == 0) {
        long def[] = {1, 10, 100, 1000, 10000};
        for (int k = 0; k < 5; k++)
            o.nvals[k] = def[k];
        o.nnvals = 5;
    }
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &tag_ub_ok);
    long maxn = 1, maxsz = max_size(&o);
    for (int k = 0; k < o.nnvals; k++)
        if (o.nvals[k] > maxn)
            maxn = o.nvals[k];
    if (tag_ub_ok && maxn > *tag_ub)
        die("queue length exceeds MPI_TAG_UB");
    char dummy[1];
    struct pingpong p = {rank, 0, xalloc((size_t)maxsz), xalloc((size_t)maxsz), MPI_REQUEST_NULL};
    MPI_Request *junk = malloc(sizeof(MPI_Request) * (size_t)maxn);
    if (!junk)
        die("out of memory");
    double vals[MAX_REPS];

    for (int k = 0; k < o.nsizes; k++) {
        p.n = (int)o.sizes[k];
        for (int q = 0; q < o.nnvals; q++) {
            long len = o.nvals[q] < 1 ? 1 : o.nvals[q];
            long iters = scale_iters(o.iters, len, 1000, 100);
            long warm = scale_iters(o.warmup, len, 1000, 10);
            p.ping = MPI_REQUEST_NULL;
            if (rank == 1) {
                for (long j = 0; j < len - 1; j++)
                    MPI_Irecv(dummy, 1, MPI_CHAR, 0, (int)(2 + j), MPI_COMM_WORLD, &junk[j]);
                MPI_Irecv(p.rbuf, p.n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &p.ping);
            }
            time_reps(&o, warm, iters, round_trip, &p, vals);
            for (int r = 0; r < o.reps; r++)
                vals[r] = vals[r] * 1e6 / (2.0 * (double)iters);
            if (rank == 1) {
                /* the last re-posted ping receive and the junk never match: cancel them */
                MPI_Cancel(&p.ping);
                MPI_Wait(&p.ping, MPI_STATUS_IGNORE);
                for (long j = 0; j < len - 1; j++) {
                    MPI_Cancel(&junk[j]);
                    MPI_Wait(&junk[j], MPI_STATUS_IGNORE);
                }
            }
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                char extra[64];
                snprintf(extra, sizeof extra, ",\"posted\":%ld", len);
                emit("matchlist", p.n, iters, stats(vals, o.reps), o.reps, "us", extra);
            }
        }
    }
    free(junk);
    MPI_Finalize();
    return 0;
}

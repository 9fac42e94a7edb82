/* MPI_THREAD_MULTIPLE: on every rank, 4 threads each exchange messages
 * with the same thread of the neighbouring ranks on a communicator of
 * their own (duplicated by the main thread), while the main thread
 * creates and frees communicators (which makes every thread refresh its
 * cached communicator table). Prints "OK threads" on success. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define ITERS 200

static int rank, size;
static MPI_Comm comms[THREADS];
static int failed;

static void *worker(void *arg) {
    int t = (int)(long)arg;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int i = 0; i < ITERS; i++) {
        int out[2] = {rank, t * 1000 + i}, in[2] = {-1, -1};
        MPI_Request rq[2];
        MPI_Irecv(in, 2, MPI_INT, prev, i, comms[t], &rq[0]);
        MPI_Isend(out, 2, MPI_INT, next, i, comms[t], &rq[1]);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        if (in[0] != prev || in[1] != t * 1000 + i) failed = 1;
        int r;
        MPI_Comm_rank(comms[t], &r);
        if (r != rank) failed = 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided != MPI_THREAD_MULTIPLE) failed = 1;
    for (int t = 0; t < THREADS; t++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(long)t);
    for (int k = 0; k < 20; k++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        int s;
        MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, c);
        if (s != size * (size - 1) / 2) failed = 1;
        MPI_Comm_free(&c);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) MPI_Comm_free(&comms[t]);
    int any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any) printf("OK threads\n");
    MPI_Finalize();
    return any;
}

/* The C face's own cost per call, without the network: MPI_Comm_rank,
 * MPI_Send and MPI_Recv to MPI_PROC_NULL (argument checks, handle lookup,
 * status), MPI_Isend + MPI_Wait to MPI_PROC_NULL (the request table).
 * Median of 11 repetitions of N calls, ns per call; one rank suffices.
 *   mpicc.mpich -O2 -o overhead overhead.c
 *   LD_LIBRARY_PATH=<dir with libmpich.so.12> ptlrun -n 1 ./overhead */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1000000
#define REPS 11

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    double t[4][REPS];
    int r, buf = 0;
    for (int k = 0; k < REPS; k++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < N; i++) MPI_Comm_rank(MPI_COMM_WORLD, &r);
        double t1 = MPI_Wtime();
        for (int i = 0; i < N; i++) MPI_Send(&buf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        for (int i = 0; i < N; i++) MPI_Recv(&buf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double t3 = MPI_Wtime();
        for (int i = 0; i < N; i++) {
            MPI_Request q;
            MPI_Isend(&buf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        }
        double t4 = MPI_Wtime();
        t[0][k] = t1 - t0; t[1][k] = t2 - t1; t[2][k] = t3 - t2; t[3][k] = t4 - t3;
    }
    const char *what[4] = {"comm_rank", "send_proc_null", "recv_proc_null", "isend_wait_proc_null"};
    for (int j = 0; j < 4; j++) {
        qsort(t[j], REPS, sizeof(double), cmp);
        printf("{\"bench\":\"capi-overhead\",\"op\":\"%s\",\"value\":%.1f,\"unit\":\"ns\"}\n", what[j], t[j][REPS / 2] / N * 1e9);
    }
    MPI_Finalize();
    return 0;
}

/* Under the default MPI_ERRORS_ARE_FATAL, rank 1 sends to a rank that
 * does not exist: the job must abort with a message naming MPI_Send.
 * With argument "finalize-twice", every rank calls MPI_Finalize twice;
 * with "before-init", it calls MPI_Comm_rank before MPI_Init; with
 * "unsupported", an unimplemented function (MPI_Comm_spawn); with
 * "bcast-root", "null-buffer", "bad-type", "bad-request" or "win-range",
 * one bad call of another family under the default handler (a window's
 * default is fatal too); with "errors-abort", a bad call under
 * MPI_ERRORS_ABORT. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, x = 1;
    if (argc > 1 && strcmp(argv[1], "before-init") == 0) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        printf("NOT REACHED\n");
        return 0;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1 && strcmp(argv[1], "finalize-twice") == 0) {
        MPI_Finalize();
        MPI_Finalize();
        printf("NOT REACHED\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "unsupported") == 0) {
        MPI_Comm child;
        int errs[1];
        MPI_Comm_spawn("true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &child, errs);
        printf("NOT REACHED\n");
        return 0;
    }
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "bcast-root") == 0) MPI_Bcast(&x, 1, MPI_INT, 5000, MPI_COMM_WORLD);
    if (strcmp(mode, "null-buffer") == 0) MPI_Recv(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (strcmp(mode, "errors-abort") == 0) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ABORT);
        MPI_Send(&x, 1, MPI_INT, -7, 0, MPI_COMM_WORLD);
    }
    if (strcmp(mode, "bad-type") == 0) MPI_Type_size((MPI_Datatype)0x12345, &x);
    if (strcmp(mode, "bad-request") == 0) {
        MPI_Request r = (MPI_Request)0x2c0000ff;
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    if (strcmp(mode, "win-range") == 0) {
        long *base;
        MPI_Win win;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* the window's own handler decides */
        MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Put(&x, 1, MPI_LONG, 0, 64, 1, MPI_LONG, win);
    }
    if (mode[0] != 0) {
        printf("NOT REACHED\n");
        return 0;
    }
    if (rank == 1) MPI_Send(&x, 1, MPI_INT, 1000, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("NOT REACHED\n");
    MPI_Finalize();
    return 0;
}

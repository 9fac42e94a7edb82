/* Under the default MPI_ERRORS_ARE_FATAL, rank 1 sends to a rank that
 * does not exist: the job must abort with a message naming MPI_Send.
 * With argument "finalize-twice", every rank calls MPI_Finalize twice;
 * with "before-init", it calls MPI_Comm_rank before MPI_Init; with
 * "unsupported", an unimplemented function (MPI_Comm_spawn). */
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
    if (rank == 1) MPI_Send(&x, 1, MPI_INT, 1000, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("NOT REACHED\n");
    MPI_Finalize();
    return 0;
}

/* Built with ptlcc (not mpicc.mpich) and run with no LD_LIBRARY_PATH: the
 * rpath ptlcc links in must find portals-rs's libmpich.so.12. Rank 0 names
 * the library it runs on; the two ranks swap values. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, peer, mine, theirs = -1, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_library_version(lib, &len);
    peer = (rank + 1) % size;
    mine = 1000 + rank;
    MPI_Sendrecv(&mine, 1, MPI_INT, peer, 0, &theirs, 1, MPI_INT, (rank + size - 1) % size, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d of %d got %d on %s\n", rank, size, theirs, lib);
    MPI_Finalize();
    return 0;
}

/* Prints the values of MPICH's mpi.h that the library hard-codes, one
 * "NAME VALUE" per line; tests/c_programs.rs compares them with
 * src/consts.rs. Needs no MPI_Init. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#define P(x) printf("%s %ld\n", #x, (long)(x))

int main(void) {
    P(MPI_COMM_WORLD); P(MPI_COMM_SELF); P(MPI_COMM_NULL); P(MPI_GROUP_NULL);
    P(MPI_GROUP_EMPTY); P(MPI_DATATYPE_NULL); P(MPI_OP_NULL); P(MPI_REQUEST_NULL);
    P(MPI_MESSAGE_NULL); P(MPI_MESSAGE_NO_PROC); P(MPI_WIN_NULL); P(MPI_INFO_NULL);
    P(MPI_ERRHANDLER_NULL); P(MPI_ERRORS_ARE_FATAL); P(MPI_ERRORS_RETURN); P(MPI_ERRORS_ABORT);
    P(MPI_SUM); P(MPI_PROD); P(MPI_MAX); P(MPI_MIN); P(MPI_LAND); P(MPI_LOR);
    P(MPI_LXOR); P(MPI_BAND); P(MPI_BOR); P(MPI_BXOR); P(MPI_MINLOC); P(MPI_MAXLOC);
    P(MPI_REPLACE); P(MPI_NO_OP);
    P(MPI_UNDEFINED); P(MPI_PROC_NULL); P(MPI_ANY_SOURCE); P(MPI_ANY_TAG);
    P(MPI_IDENT); P(MPI_CONGRUENT); P(MPI_SIMILAR); P(MPI_UNEQUAL);
    P(MPI_TAG_UB); P(MPI_WIN_BASE); P(MPI_WIN_SIZE); P(MPI_WIN_DISP_UNIT);
    P(MPI_LOCK_EXCLUSIVE); P(MPI_LOCK_SHARED); P(MPI_THREAD_MULTIPLE);
    P(MPI_MAX_PROCESSOR_NAME); P(MPI_MAX_ERROR_STRING); P(MPI_VERSION); P(MPI_SUBVERSION);
    P(MPI_SUCCESS); P(MPI_ERR_BUFFER); P(MPI_ERR_COUNT); P(MPI_ERR_TYPE); P(MPI_ERR_TAG);
    P(MPI_ERR_COMM); P(MPI_ERR_RANK); P(MPI_ERR_ROOT); P(MPI_ERR_GROUP); P(MPI_ERR_OP);
    P(MPI_ERR_ARG); P(MPI_ERR_TRUNCATE); P(MPI_ERR_OTHER); P(MPI_ERR_INTERN);
    P(MPI_ERR_IN_STATUS); P(MPI_ERR_REQUEST); P(MPI_ERR_NO_MEM);
    P(MPI_ERR_UNSUPPORTED_OPERATION); P(MPI_ERR_WIN); P(MPI_ERR_RMA_SYNC);
    P(MPI_ERR_RMA_RANGE); P(MPI_ERR_PROC_ABORTED);
    P((size_t)MPI_STATUS_IGNORE); P((size_t)MPI_STATUSES_IGNORE); P((size_t)MPI_IN_PLACE);
    P((size_t)MPI_BOTTOM);
    P(sizeof(MPI_Status)); P(offsetof(MPI_Status, count_lo));
    P(offsetof(MPI_Status, count_hi_and_cancelled)); P(offsetof(MPI_Status, MPI_SOURCE));
    P(offsetof(MPI_Status, MPI_TAG)); P(offsetof(MPI_Status, MPI_ERROR));
    P(sizeof(MPI_Aint)); P(sizeof(MPI_Comm));
    return 0;
}

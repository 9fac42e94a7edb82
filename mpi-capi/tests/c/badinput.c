/* Bad input through the C interface under MPI_ERRORS_RETURN, call family
 * by call family (point-to-point, requests, datatypes, communicators and
 * groups, collectives, RMA, environment): null pointers, invalid and
 * stale handles, negative counts, out-of-range ranks, roots, tags and
 * displacements each return their error class, nothing crashes, and the
 * library still works afterwards (a value-checked exchange at the end).
 * User error handlers on a communicator and a window are called with the
 * object and the class.
 * Run on 2 or more ranks; prints "OK badinput" on every rank. Every
 * mismatch is reported before the job is aborted. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank, size, failures;

static const char *cls(int c) {
    static char s[MPI_MAX_ERROR_STRING];
    int len;
    if (c == MPI_SUCCESS) return "MPI_SUCCESS";
    if (MPI_Error_string(c, s, &len) != MPI_SUCCESS) return "?";
    return s;
}

/* The call returns `want`; otherwise say which call returned what. */
#define EXPECT(call, want) do { int rc_ = (call); if (rc_ != (want)) { \
    fprintf(stderr, "rank %d: line %d: %s returned %d (%s), want %s\n", rank, __LINE__, #call, rc_, cls(rc_), #want); \
    failures++; } } while (0)
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: line %d: check failed: %s\n", rank, __LINE__, #c); failures++; } } while (0)

/* What the user error handlers saw. */
static int seen_calls, seen_code;
static MPI_Comm seen_comm = MPI_COMM_NULL;
static MPI_Win seen_win = MPI_WIN_NULL;

static void on_comm_error(MPI_Comm *comm, int *code, ...) {
    seen_calls++;
    seen_comm = *comm;
    seen_code = *code;
}

static void on_win_error(MPI_Win *win, int *code, ...) {
    seen_calls++;
    seen_win = *win;
    seen_code = *code;
}

#define BAD_COMM ((MPI_Comm)0x7777)
#define BAD_TYPE ((MPI_Datatype)0x12345)
#define BAD_OP ((MPI_Op)0x1234)
#define BAD_GROUP ((MPI_Group)0x3333)
#define BAD_REQ ((MPI_Request)0x2c0000ff)
#define BAD_WIN ((MPI_Win)0x5555)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), MPI_SUCCESS);
    int next = (rank + 1) % size, x = 1, y = 0;
    MPI_Status st;
    MPI_Request rq;

    /* Point-to-point. */
    EXPECT(MPI_Send(NULL, 1, MPI_INT, next, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Send(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT(MPI_Send(&x, -1, MPI_INT, next, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(&x, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(&x, 1, MPI_INT, next, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Send(&x, 1, BAD_TYPE, next, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(&x, 1, MPI_DATATYPE_NULL, next, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(&x, 1, MPI_INT, next, 0, BAD_COMM), MPI_ERR_COMM);
    EXPECT(MPI_Send(&x, 1, MPI_INT, next, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Ssend(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Recv(NULL, 1, MPI_INT, next, 0, MPI_COMM_WORLD, &st), MPI_ERR_BUFFER);
    EXPECT(MPI_Recv(&y, -2, MPI_INT, next, 0, MPI_COMM_WORLD, &st), MPI_ERR_COUNT);
    EXPECT(MPI_Recv(&y, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    EXPECT(MPI_Recv(&y, 1, MPI_INT, next, -3, MPI_COMM_WORLD, &st), MPI_ERR_TAG);
    EXPECT(MPI_Irecv(&y, 1, MPI_INT, next, 0, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Isend(&x, 1, MPI_INT, next, 0, BAD_COMM, &rq), MPI_ERR_COMM);
    EXPECT(MPI_Probe(size, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    EXPECT(MPI_Iprobe(next, 0, MPI_COMM_WORLD, NULL, &st), MPI_ERR_ARG);
    EXPECT(MPI_Get_count(NULL, MPI_INT, &y), MPI_ERR_ARG);
    EXPECT(MPI_Get_count(&st, BAD_TYPE, &y), MPI_ERR_TYPE);
    EXPECT(MPI_Buffer_attach(&x, -1), MPI_ERR_COUNT);

    /* Requests: invalid, null, stale, wrong kind. */
    MPI_Request bad = BAD_REQ;
    EXPECT(MPI_Wait(&bad, &st), MPI_ERR_REQUEST);
    EXPECT(MPI_Wait(NULL, &st), MPI_ERR_ARG);
    EXPECT(MPI_Test(&bad, &x, &st), MPI_ERR_REQUEST);
    MPI_Request pair[2] = {MPI_REQUEST_NULL, BAD_REQ};
    int rc = MPI_Waitall(2, pair, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_ERR_REQUEST || rc == MPI_ERR_IN_STATUS);
    EXPECT(MPI_Waitall(-1, pair, MPI_STATUSES_IGNORE), MPI_ERR_COUNT);
    EXPECT(MPI_Waitall(2, NULL, MPI_STATUSES_IGNORE), MPI_ERR_ARG);
    MPI_Request nul = MPI_REQUEST_NULL;
    EXPECT(MPI_Request_free(&nul), MPI_ERR_REQUEST);
    EXPECT(MPI_Start(&nul), MPI_ERR_REQUEST);
    /* A completed, freed request's old handle is stale. */
    EXPECT(MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &rq), MPI_SUCCESS);
    MPI_Request old = rq;
    EXPECT(MPI_Wait(&rq, &st), MPI_SUCCESS);
    CHECK(rq == MPI_REQUEST_NULL);
    EXPECT(MPI_Wait(&old, &st), MPI_ERR_REQUEST);
    /* MPI_Start of a request that is not persistent. */
    int sink = 0;
    EXPECT(MPI_Irecv(&sink, 1, MPI_INT, MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &rq), MPI_SUCCESS);
    EXPECT(MPI_Start(&rq), MPI_ERR_REQUEST);
    EXPECT(MPI_Cancel(&rq), MPI_SUCCESS);
    EXPECT(MPI_Wait(&rq, &st), MPI_SUCCESS);

    /* Datatypes. */
    MPI_Datatype t;
    EXPECT(MPI_Type_contiguous(-1, MPI_INT, &t), MPI_ERR_COUNT);
    EXPECT(MPI_Type_contiguous(2, BAD_TYPE, &t), MPI_ERR_TYPE);
    EXPECT(MPI_Type_vector(2, 1, 2, MPI_INT, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Type_indexed(2, NULL, NULL, MPI_INT, &t), MPI_ERR_ARG);
    EXPECT(MPI_Type_commit(NULL), MPI_ERR_ARG);
    MPI_Datatype predefined = MPI_INT;
    EXPECT(MPI_Type_free(&predefined), MPI_ERR_TYPE);
    EXPECT(MPI_Type_size(BAD_TYPE, &x), MPI_ERR_TYPE);
    EXPECT(MPI_Type_size(MPI_INT, NULL), MPI_ERR_ARG);
    /* An uncommitted derived type cannot carry a message. */
    EXPECT(MPI_Type_contiguous(2, MPI_INT, &t), MPI_SUCCESS);
    int two[2] = {1, 2};
    EXPECT(MPI_Send(two, 1, t, MPI_PROC_NULL, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Type_commit(&t), MPI_SUCCESS);
    /* Freed while a receive uses it: the receive still completes; the
     * stale handle is invalid for new calls. */
    MPI_Datatype stale = t;
    int got[2] = {0, 0}, prev = (rank + size - 1) % size;
    EXPECT(MPI_Irecv(got, 1, t, prev, 5, MPI_COMM_WORLD, &rq), MPI_SUCCESS);
    EXPECT(MPI_Type_free(&t), MPI_SUCCESS);
    CHECK(t == MPI_DATATYPE_NULL);
    EXPECT(MPI_Type_size(stale, &x), MPI_ERR_TYPE);
    EXPECT(MPI_Send(two, 1, stale, next, 5, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Type_free(&stale), MPI_ERR_TYPE);
    int mine[2] = {rank, -rank};
    EXPECT(MPI_Send(mine, 2, MPI_INT, next, 5, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT(MPI_Wait(&rq, &st), MPI_SUCCESS);
    CHECK(got[0] == prev && got[1] == -prev);
    /* Truncation: two ints into a one-int receive. */
    EXPECT(MPI_Sendrecv(mine, 2, MPI_INT, next, 6, got, 1, MPI_INT, prev, 6, MPI_COMM_WORLD, &st),
           MPI_ERR_TRUNCATE);

    /* Communicators and groups. */
    MPI_Comm c;
    EXPECT(MPI_Comm_rank(MPI_COMM_NULL, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_size(BAD_COMM, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_size(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Comm_dup(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Comm_dup(BAD_COMM, &c), MPI_ERR_COMM);
    MPI_Comm world = MPI_COMM_WORLD;
    EXPECT(MPI_Comm_free(&world), MPI_ERR_COMM);
    MPI_Comm nullc = MPI_COMM_NULL;
    EXPECT(MPI_Comm_free(&nullc), MPI_ERR_COMM);
    EXPECT(MPI_Comm_split(MPI_COMM_WORLD, -5, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Comm_compare(MPI_COMM_WORLD, BAD_COMM, &x), MPI_ERR_COMM);
    EXPECT(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)0x999), MPI_ERR_ARG);
    EXPECT(MPI_Comm_set_errhandler(BAD_COMM, MPI_ERRORS_RETURN), MPI_ERR_COMM);
    MPI_Group g, h;
    EXPECT(MPI_Comm_group(MPI_COMM_WORLD, &g), MPI_SUCCESS);
    int far[1] = {size};
    EXPECT(MPI_Group_incl(g, 1, far, &h), MPI_ERR_RANK);
    EXPECT(MPI_Group_excl(g, 1, far, &h), MPI_ERR_RANK);
    EXPECT(MPI_Group_incl(g, -1, far, &h), MPI_ERR_COUNT);
    EXPECT(MPI_Group_size(BAD_GROUP, &x), MPI_ERR_GROUP);
    EXPECT(MPI_Group_rank(MPI_GROUP_NULL, &x), MPI_ERR_GROUP);
    EXPECT(MPI_Group_union(g, BAD_GROUP, &h), MPI_ERR_GROUP);
    int r0[1] = {0}, out[1];
    EXPECT(MPI_Group_translate_ranks(g, 1, far, g, out), MPI_ERR_RANK);
    EXPECT(MPI_Group_translate_ranks(g, 1, r0, BAD_GROUP, out), MPI_ERR_GROUP);
    EXPECT(MPI_Comm_create(MPI_COMM_WORLD, BAD_GROUP, &c), MPI_ERR_GROUP);
    EXPECT(MPI_Group_free(&g), MPI_SUCCESS);
    EXPECT(MPI_Group_free(&g), MPI_ERR_GROUP); /* g is MPI_GROUP_NULL now */

    /* Collectives: every rank passes the same bad argument, so every rank
     * fails before communicating. */
    int v = rank, s = 0;
    EXPECT(MPI_Bcast(&v, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Bcast(&v, 1, MPI_INT, -1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Bcast(&v, -1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Bcast(NULL, 1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Reduce(&v, &s, 1, MPI_INT, MPI_SUM, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Allreduce(&v, &s, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Allreduce(&v, &s, 1, MPI_INT, BAD_OP, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);
    EXPECT(MPI_Allreduce(&v, &s, 1, BAD_TYPE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Allreduce(&v, NULL, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    EXPECT(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, BAD_COMM), MPI_ERR_COMM);
    EXPECT(MPI_Barrier(MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT(MPI_Gather(&v, 1, MPI_INT, NULL, 1, MPI_INT, size + 1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Scatter(NULL, 1, MPI_INT, &v, 1, MPI_INT, -2, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Allgather(&v, -1, MPI_INT, &s, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Alltoall(&v, 1, BAD_TYPE, &s, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Ibcast(&v, 1, MPI_INT, size, MPI_COMM_WORLD, &rq), MPI_ERR_ROOT);
    EXPECT(MPI_Iallreduce(&v, &s, 1, MPI_INT, BAD_OP, MPI_COMM_WORLD, &rq), MPI_ERR_OP);
    EXPECT(MPI_Ibarrier(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    MPI_Op op = MPI_SUM;
    EXPECT(MPI_Op_free(&op), MPI_ERR_OP);
    EXPECT(MPI_Op_create(NULL, 1, &op), MPI_ERR_ARG);

    /* RMA. */
    MPI_Win win;
    long *base;
    EXPECT(MPI_Win_allocate(-8, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win), MPI_ERR_SIZE);
    EXPECT(MPI_Win_create(NULL, 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win), MPI_ERR_ARG);
    EXPECT(MPI_Win_fence(0, BAD_WIN), MPI_ERR_WIN);
    MPI_Win nullw = MPI_WIN_NULL;
    EXPECT(MPI_Win_free(&nullw), MPI_ERR_WIN);
    EXPECT(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), MPI_SUCCESS);
    long one = 1, res = 0;
    EXPECT(MPI_Put(&one, 1, MPI_LONG, next, 0, 1, MPI_LONG, win), MPI_ERR_RMA_SYNC); /* no epoch */
    EXPECT(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win), MPI_SUCCESS);
    EXPECT(MPI_Put(&one, 1, MPI_LONG, size, 0, 1, MPI_LONG, win), MPI_ERR_RANK);
    EXPECT(MPI_Put(&one, 1, MPI_LONG, next, 4, 1, MPI_LONG, win), MPI_ERR_RMA_RANGE);
    EXPECT(MPI_Put(&one, -1, MPI_LONG, next, 0, -1, MPI_LONG, win), MPI_ERR_COUNT);
    EXPECT(MPI_Put(NULL, 1, MPI_LONG, next, 0, 1, MPI_LONG, win), MPI_ERR_BUFFER);
    EXPECT(MPI_Put(&one, 1, BAD_TYPE, next, 0, 1, BAD_TYPE, win), MPI_ERR_TYPE);
    EXPECT(MPI_Get(&res, 1, MPI_LONG, next, 100, 1, MPI_LONG, win), MPI_ERR_RMA_RANGE);
    EXPECT(MPI_Accumulate(&one, 1, MPI_LONG, next, 0, 1, MPI_LONG, BAD_OP, win), MPI_ERR_OP);
    EXPECT(MPI_Fetch_and_op(&one, NULL, MPI_LONG, next, 0, MPI_SUM, win), MPI_ERR_BUFFER);
    EXPECT(MPI_Win_unlock(next, win), MPI_SUCCESS);
    EXPECT(MPI_Win_unlock(next, win), MPI_ERR_RMA_SYNC); /* not locked */
    EXPECT(MPI_Win_set_errhandler(win, (MPI_Errhandler)0x999), MPI_ERR_ARG);
    EXPECT(MPI_Win_free(&win), MPI_SUCCESS);
    CHECK(win == MPI_WIN_NULL);

    /* Environment. */
    EXPECT(MPI_Get_processor_name(NULL, &x), MPI_ERR_ARG);
    EXPECT(MPI_Get_version(NULL, &x), MPI_ERR_ARG);
    EXPECT(MPI_Error_class(MPI_ERR_RANK, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Initialized(NULL), MPI_ERR_ARG);
    EXPECT(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, NULL, NULL), MPI_ERR_ARG);

    /* User error handlers get the object and the code; the call returns
     * the code. A freed handler still serves the objects it is attached
     * to, and its handle is invalid for new attachments. */
    MPI_Errhandler ceh, weh, got_eh;
    EXPECT(MPI_Comm_create_errhandler(NULL, &ceh), MPI_ERR_ARG);
    EXPECT(MPI_Comm_create_errhandler(on_comm_error, &ceh), MPI_SUCCESS);
    EXPECT(MPI_Win_create_errhandler(on_win_error, &weh), MPI_SUCCESS);
    CHECK(ceh != weh && ceh != MPI_ERRORS_RETURN && ceh != MPI_ERRHANDLER_NULL);
    MPI_Comm d;
    EXPECT(MPI_Comm_dup(MPI_COMM_WORLD, &d), MPI_SUCCESS);
    EXPECT(MPI_Comm_set_errhandler(d, weh), MPI_ERR_ARG); /* a window's handler */
    EXPECT(MPI_Comm_set_errhandler(d, ceh), MPI_SUCCESS);
    EXPECT(MPI_Comm_get_errhandler(d, &got_eh), MPI_SUCCESS);
    CHECK(got_eh == ceh);
    EXPECT(MPI_Send(&x, 1, MPI_INT, size, 0, d), MPI_ERR_RANK);
    CHECK(seen_calls == 1 && seen_comm == d && seen_code == MPI_ERR_RANK);
    EXPECT(MPI_Bcast(&v, 1, MPI_INT, -1, d), MPI_ERR_ROOT);
    CHECK(seen_calls == 2 && seen_comm == d && seen_code == MPI_ERR_ROOT);
    EXPECT(MPI_Comm_call_errhandler(d, MPI_ERR_OTHER), MPI_SUCCESS);
    CHECK(seen_calls == 3 && seen_comm == d && seen_code == MPI_ERR_OTHER);
    /* The world keeps MPI_ERRORS_RETURN: the handler is not called. */
    EXPECT(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER), MPI_SUCCESS);
    CHECK(seen_calls == 3);
    MPI_Errhandler freed = ceh;
    EXPECT(MPI_Errhandler_free(&ceh), MPI_SUCCESS);
    CHECK(ceh == MPI_ERRHANDLER_NULL);
    EXPECT(MPI_Errhandler_free(&freed), MPI_ERR_ARG);
    EXPECT(MPI_Comm_set_errhandler(MPI_COMM_WORLD, freed), MPI_ERR_ARG);
    EXPECT(MPI_Recv(&y, 1, MPI_INT, next, -3, d, &st), MPI_ERR_TAG);
    CHECK(seen_calls == 4 && seen_comm == d && seen_code == MPI_ERR_TAG);
    EXPECT(MPI_Comm_free(&d), MPI_SUCCESS);
    EXPECT(MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
           MPI_SUCCESS);
    EXPECT(MPI_Win_set_errhandler(win, weh), MPI_SUCCESS);
    EXPECT(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win), MPI_SUCCESS);
    EXPECT(MPI_Put(&one, 1, MPI_LONG, next, 9, 1, MPI_LONG, win), MPI_ERR_RMA_RANGE);
    CHECK(seen_calls == 5 && seen_win == win && seen_code == MPI_ERR_RMA_RANGE);
    EXPECT(MPI_Win_unlock(next, win), MPI_SUCCESS);
    EXPECT(MPI_Win_call_errhandler(win, MPI_ERR_WIN), MPI_SUCCESS);
    CHECK(seen_calls == 6 && seen_win == win && seen_code == MPI_ERR_WIN);
    EXPECT(MPI_Win_free(&win), MPI_SUCCESS);
    EXPECT(MPI_Errhandler_free(&weh), MPI_SUCCESS);

    /* After all that, the library still communicates. */
    int sum = 0;
    EXPECT(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
    CHECK(sum == size * (size - 1) / 2);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total > 0) {
        if (rank == 0) fprintf(stderr, "%d mismatches in all\n", total);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    printf("OK badinput\n");
    MPI_Finalize();
    return 0;
}

/* The implemented functions semantics.c does not call, values checked;
 * run on 4 ranks. tests/coverage.rs fails when an implemented function is
 * called by no program in tests/c. Prints "OK coverage" on every rank
 * when every check passed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS)

int main(int argc, char **argv) {
    int provided, flag, count;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    CHECK(provided >= MPI_THREAD_FUNNELED);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size == 4);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Status st;

    /* Environment. */
    int q;
    OK(MPI_Query_thread(&q));
    CHECK(q == provided);
    OK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    OK(MPI_Get_library_version(lib, &len));
    CHECK(len == (int)strlen(lib) && strstr(lib, "portals-rs") != NULL);
    OK(MPI_Pcontrol(1));
    char arr[16];
    MPI_Aint a0, a5;
    OK(MPI_Get_address(&arr[0], &a0));
    OK(MPI_Get_address(&arr[5], &a5));
    CHECK(MPI_Aint_add(a0, 5) == a5);
    CHECK(MPI_Aint_diff(a5, a0) == 5);
    CHECK(MPI_File_f2c(0) == MPI_FILE_NULL);

    /* Send modes: synchronous, ready (receive posted before a barrier),
     * buffered (attached buffer, handed back by detach). */
    int v = -1, out = rank * 3;
    MPI_Request rr;
    OK(MPI_Irecv(&v, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &rr));
    OK(MPI_Ssend(&out, 1, MPI_INT, next, 1, MPI_COMM_WORLD));
    OK(MPI_Wait(&rr, &st));
    CHECK(v == prev * 3 && st.MPI_SOURCE == prev && st.MPI_TAG == 1);
    v = -1;
    OK(MPI_Irecv(&v, 1, MPI_INT, prev, 2, MPI_COMM_WORLD, &rr));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Rsend(&out, 1, MPI_INT, next, 2, MPI_COMM_WORLD));
    OK(MPI_Wait(&rr, &st));
    CHECK(v == prev * 3 && st.MPI_TAG == 2);
    int bufsize = 4 * (MPI_BSEND_OVERHEAD + 64);
    char *bbuf = malloc(bufsize);
    OK(MPI_Buffer_attach(bbuf, bufsize));
    OK(MPI_Bsend(&out, 1, MPI_INT, next, 3, MPI_COMM_WORLD));
    MPI_Request br;
    int out2 = out + 1;
    OK(MPI_Ibsend(&out2, 1, MPI_INT, next, 4, MPI_COMM_WORLD, &br));
    OK(MPI_Wait(&br, MPI_STATUS_IGNORE));
    int w[2] = {-1, -1};
    OK(MPI_Recv(&w[0], 1, MPI_INT, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Recv(&w[1], 1, MPI_INT, prev, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(w[0] == prev * 3 && w[1] == prev * 3 + 1);
    void *back;
    int backsize;
    OK(MPI_Buffer_detach(&back, &backsize));
    CHECK(back == bbuf && backsize == bufsize);
    free(bbuf);
    /* Irsend: the receive is posted before the barrier. */
    v = -1;
    OK(MPI_Irecv(&v, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, &rr));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Request sr;
    OK(MPI_Irsend(&out, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &sr));
    MPI_Request two[2] = {rr, sr};
    OK(MPI_Waitall(2, two, MPI_STATUSES_IGNORE));
    CHECK(v == prev * 3);

    /* Persistent sends of each mode, started one by one (MPI_Start). */
    int pin[3] = {-1, -1, -1}, pout[3];
    MPI_Request pr[6];
    char *pbuf = malloc(MPI_BSEND_OVERHEAD + 64);
    OK(MPI_Buffer_attach(pbuf, MPI_BSEND_OVERHEAD + 64));
    for (int i = 0; i < 3; i++)
        OK(MPI_Recv_init(&pin[i], 1, MPI_INT, prev, 10 + i, MPI_COMM_WORLD, &pr[i]));
    OK(MPI_Ssend_init(&pout[0], 1, MPI_INT, next, 10, MPI_COMM_WORLD, &pr[3]));
    OK(MPI_Bsend_init(&pout[1], 1, MPI_INT, next, 11, MPI_COMM_WORLD, &pr[4]));
    OK(MPI_Rsend_init(&pout[2], 1, MPI_INT, next, 12, MPI_COMM_WORLD, &pr[5]));
    for (int it = 0; it < 2; it++) {
        for (int i = 0; i < 3; i++) pout[i] = rank * 100 + it * 10 + i;
        for (int i = 0; i < 3; i++) OK(MPI_Start(&pr[i]));
        OK(MPI_Barrier(MPI_COMM_WORLD)); /* every ready send meets its receive */
        for (int i = 3; i < 6; i++) OK(MPI_Start(&pr[i]));
        OK(MPI_Waitall(6, pr, MPI_STATUSES_IGNORE));
        for (int i = 0; i < 3; i++) CHECK(pin[i] == prev * 100 + it * 10 + i);
    }
    for (int i = 0; i < 6; i++) OK(MPI_Request_free(&pr[i]));
    OK(MPI_Buffer_detach(&back, &backsize));
    CHECK(back == pbuf);
    free(pbuf);

    /* Sendrecv_replace around the ring. */
    int rep[2] = {rank, -rank};
    OK(MPI_Sendrecv_replace(rep, 2, MPI_INT, next, 20, prev, 20, MPI_COMM_WORLD, &st));
    CHECK(rep[0] == prev && rep[1] == -prev && st.MPI_SOURCE == prev);

    /* Iprobe until the message is there, then Get_elements of a derived
     * type: two pairs of doubles arrive as 4 basic elements, count 2. */
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(2, MPI_DOUBLE, &pair));
    OK(MPI_Type_commit(&pair));
    double dv[4] = {rank, rank + 0.25, rank + 0.5, rank + 0.75}, din[4];
    MPI_Request psr;
    OK(MPI_Isend(dv, 2, pair, next, 21, MPI_COMM_WORLD, &psr));
    flag = 0;
    while (!flag) OK(MPI_Iprobe(prev, 21, MPI_COMM_WORLD, &flag, &st));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 21);
    OK(MPI_Recv(din, 2, pair, prev, 21, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, pair, &count));
    CHECK(count == 2);
    OK(MPI_Get_elements(&st, pair, &count));
    CHECK(count == 4);
    OK(MPI_Get_elements(&st, MPI_DOUBLE, &count));
    CHECK(count == 4 && din[3] == prev + 0.75);
    OK(MPI_Wait(&psr, MPI_STATUS_IGNORE));
    OK(MPI_Type_free(&pair));

    /* Improbe + Imrecv. */
    short sh[2] = {(short)rank, (short)(rank + 1)}, shin[2] = {0, 0};
    OK(MPI_Isend(sh, 2, MPI_SHORT, next, 22, MPI_COMM_WORLD, &psr));
    MPI_Message msg = MPI_MESSAGE_NULL;
    flag = 0;
    while (!flag) OK(MPI_Improbe(prev, 22, MPI_COMM_WORLD, &flag, &msg, &st));
    CHECK(msg != MPI_MESSAGE_NULL && st.MPI_SOURCE == prev);
    MPI_Request mr;
    OK(MPI_Imrecv(shin, 2, MPI_SHORT, &msg, &mr));
    CHECK(msg == MPI_MESSAGE_NULL);
    OK(MPI_Wait(&mr, &st));
    CHECK(shin[0] == prev && shin[1] == prev + 1 && st.MPI_TAG == 22);
    OK(MPI_Wait(&psr, MPI_STATUS_IGNORE));

    /* Request completion: Test, Testany, Testall, Testsome, Waitany,
     * Waitsome. Rank r receives from prev, tag 30 + i, for i = 0..3; a
     * barrier after each step keeps prev from sending the next message
     * before this rank has seen which one completed. */
    int tin[4] = {-1, -1, -1, -1}, tout[4];
    MPI_Request tr[4];
    for (int i = 0; i < 4; i++) tout[i] = rank * 10 + i;
    for (int i = 0; i < 4; i++)
        OK(MPI_Irecv(&tin[i], 1, MPI_INT, prev, 30 + i, MPI_COMM_WORLD, &tr[i]));
    MPI_Request null_only = MPI_REQUEST_NULL;
    OK(MPI_Test(&null_only, &flag, &st));
    CHECK(flag == 1);
    int idx;
    OK(MPI_Testany(1, &null_only, &idx, &flag, &st));
    CHECK(flag == 1 && idx == MPI_UNDEFINED);
    OK(MPI_Send(&tout[0], 1, MPI_INT, next, 30, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Test(&tr[0], &flag, &st));
    CHECK(tin[0] == prev * 10 && tr[0] == MPI_REQUEST_NULL && st.MPI_TAG == 30);
    OK(MPI_Send(&tout[2], 1, MPI_INT, next, 32, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Testany(4, tr, &idx, &flag, &st));
    CHECK(idx == 2 && tin[2] == prev * 10 + 2 && tr[2] == MPI_REQUEST_NULL);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Send(&tout[1], 1, MPI_INT, next, 31, MPI_COMM_WORLD));
    int outc = 0, idxs[4];
    MPI_Status sts[4];
    while (outc == 0) OK(MPI_Testsome(4, tr, &outc, idxs, sts));
    CHECK(outc == 1 && idxs[0] == 1 && tin[1] == prev * 10 + 1 && sts[0].MPI_TAG == 31);
    OK(MPI_Testall(4, tr, &flag, MPI_STATUSES_IGNORE));
    CHECK(flag == 0); /* tr[3] is still pending */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Send(&tout[3], 1, MPI_INT, next, 33, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Testall(4, tr, &flag, MPI_STATUSES_IGNORE));
    CHECK(tin[3] == prev * 10 + 3 && tr[3] == MPI_REQUEST_NULL);
    OK(MPI_Testsome(4, tr, &outc, idxs, sts));
    CHECK(outc == MPI_UNDEFINED); /* every request is null */
    for (int i = 0; i < 2; i++)
        OK(MPI_Irecv(&tin[i], 1, MPI_INT, prev, 40 + i, MPI_COMM_WORLD, &tr[i]));
    OK(MPI_Send(&tout[1], 1, MPI_INT, next, 41, MPI_COMM_WORLD));
    OK(MPI_Waitany(2, tr, &idx, &st));
    CHECK(idx == 1 && tin[1] == prev * 10 + 1 && st.MPI_TAG == 41);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Send(&tout[0], 1, MPI_INT, next, 40, MPI_COMM_WORLD));
    OK(MPI_Waitsome(2, tr, &outc, idxs, sts));
    CHECK(outc == 1 && idxs[0] == 0 && tin[0] == prev * 10);
    OK(MPI_Waitany(2, tr, &idx, &st));
    CHECK(idx == MPI_UNDEFINED);

    /* Datatype constructors: each sends the same 4 ints of a 12-int
     * matrix row-major {0..11} and the receiver checks which. */
    int m[12], got[4];
    for (int i = 0; i < 12; i++) m[i] = rank * 100 + i;
    MPI_Datatype t_idx, t_blk, t_hv, t_hidx, t_dup;
    int bl[2] = {1, 3}, dp[2] = {0, 5};
    OK(MPI_Type_indexed(2, bl, dp, MPI_INT, &t_idx));          /* 0, 5 6 7 */
    int dpb[2] = {1, 8};
    OK(MPI_Type_create_indexed_block(2, 2, dpb, MPI_INT, &t_blk)); /* 1 2, 8 9 */
    OK(MPI_Type_create_hvector(2, 2, 6 * sizeof(int), MPI_INT, &t_hv)); /* 0 1, 6 7 */
    int hbl[2] = {2, 2};
    MPI_Aint hdp[2] = {10 * sizeof(int), 3 * sizeof(int)};
    OK(MPI_Type_create_hindexed(2, hbl, hdp, MPI_INT, &t_hidx)); /* 10 11, 3 4 */
    OK(MPI_Type_dup(t_idx, &t_dup));
    MPI_Datatype ts[5] = {t_idx, t_blk, t_hv, t_hidx, t_dup};
    int want[5][4] = {{0, 5, 6, 7}, {1, 2, 8, 9}, {0, 1, 6, 7}, {10, 11, 3, 4}, {0, 5, 6, 7}};
    for (int k = 0; k < 5; k++) {
        OK(MPI_Type_commit(&ts[k]));
        int tsz;
        OK(MPI_Type_size(ts[k], &tsz));
        CHECK(tsz == 4 * (int)sizeof(int));
        OK(MPI_Sendrecv(m, 1, ts[k], next, 50 + k, got, 4, MPI_INT, prev, 50 + k, MPI_COMM_WORLD, &st));
        for (int i = 0; i < 4; i++) CHECK(got[i] == prev * 100 + want[k][i]);
    }
    MPI_Aint lb, ext, tlb, text;
    /* A resized type: extent 16 ints, true extent still the data's. */
    MPI_Datatype t_res;
    OK(MPI_Type_create_resized(t_hidx, -(MPI_Aint)sizeof(int), 16 * sizeof(int), &t_res));
    OK(MPI_Type_get_extent(t_res, &lb, &ext));
    OK(MPI_Type_get_true_extent(t_res, &tlb, &text));
    CHECK(lb == -(MPI_Aint)sizeof(int) && ext == 16 * (MPI_Aint)sizeof(int));
    CHECK(tlb == 3 * (MPI_Aint)sizeof(int) && text == 9 * (MPI_Aint)sizeof(int));
    OK(MPI_Type_get_true_extent(MPI_INT, &tlb, &text));
    CHECK(tlb == 0 && text == sizeof(int));
    OK(MPI_Type_free(&t_res));
    for (int k = 0; k < 5; k++) OK(MPI_Type_free(&ts[k]));

    /* Vector collectives: rank r contributes r + 1 ints of value r. */
    int cnts[4], displs[4], total = 0;
    for (int i = 0; i < 4; i++) { cnts[i] = i + 1; displs[i] = total; total += i + 1; }
    int mine[4], all[10];
    for (int i = 0; i <= rank; i++) mine[i] = rank;
    memset(all, -1, sizeof all);
    OK(MPI_Gatherv(mine, rank + 1, MPI_INT, all, cnts, displs, MPI_INT, 1, MPI_COMM_WORLD));
    if (rank == 1) for (int i = 0; i < 4; i++) for (int j = 0; j < i + 1; j++) CHECK(all[displs[i] + j] == i);
    memset(all, -1, sizeof all);
    OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, all, cnts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) for (int j = 0; j < i + 1; j++) CHECK(all[displs[i] + j] == i);
    int src[10], sin[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 10; i++) src[i] = 1000 + i;
    OK(MPI_Scatterv(src, cnts, displs, MPI_INT, sin, rank + 1, MPI_INT, 2, MPI_COMM_WORLD));
    for (int j = 0; j <= rank; j++) CHECK(sin[j] == 1000 + displs[rank] + j);
    /* Alltoallv: rank r sends j + 1 ints of value r * 10 + j to rank j. */
    int scnt[4], sdsp[4], rcnt[4], rdsp[4], sbuf[10], rbuf[16], so = 0, ro = 0;
    for (int j = 0; j < 4; j++) {
        scnt[j] = j + 1; sdsp[j] = so;
        for (int k = 0; k < j + 1; k++) sbuf[so + k] = rank * 10 + j;
        so += j + 1;
        rcnt[j] = rank + 1; rdsp[j] = ro; ro += rank + 1;
    }
    memset(rbuf, -1, sizeof rbuf);
    OK(MPI_Alltoallv(sbuf, scnt, sdsp, MPI_INT, rbuf, rcnt, rdsp, MPI_INT, MPI_COMM_WORLD));
    for (int j = 0; j < 4; j++) for (int k = 0; k <= rank; k++) CHECK(rbuf[rdsp[j] + k] == j * 10 + rank);
    /* Reduce_scatter: rank r keeps r + 1 sums. */
    int rs_in[10], rs_out[4] = {0};
    for (int i = 0; i < 10; i++) rs_in[i] = i * (rank + 1);
    OK(MPI_Reduce_scatter(rs_in, rs_out, cnts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int j = 0; j <= rank; j++) CHECK(rs_out[j] == (displs[rank] + j) * 10);
    /* Iallreduce. */
    MPI_Request ir;
    long lsum = -1, lmine = rank + 1;
    OK(MPI_Iallreduce(&lmine, &lsum, 1, MPI_LONG, MPI_PROD, MPI_COMM_WORLD, &ir));
    OK(MPI_Wait(&ir, MPI_STATUS_IGNORE));
    CHECK(lsum == 24);

    /* Local reductions and operation properties. */
    int lin[3] = {1, 5, 3}, linout[3] = {4, 2, 3};
    OK(MPI_Reduce_local(lin, linout, 3, MPI_INT, MPI_MAX));
    CHECK(linout[0] == 4 && linout[1] == 5 && linout[2] == 3);
    int commute;
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1);

    /* Groups and communicators. */
    MPI_Group wg, evens, odds, firsts, inter, diff;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    int ev[2] = {0, 2}, od[2] = {3, 1}, fi[2] = {0, 1};
    OK(MPI_Group_incl(wg, 2, ev, &evens));
    OK(MPI_Group_incl(wg, 2, od, &odds));
    OK(MPI_Group_incl(wg, 2, fi, &firsts));
    int gs, gr, cmp;
    OK(MPI_Group_size(odds, &gs));
    OK(MPI_Group_rank(odds, &gr));
    CHECK(gs == 2 && gr == (rank == 3 ? 0 : rank == 1 ? 1 : MPI_UNDEFINED));
    OK(MPI_Group_intersection(evens, firsts, &inter)); /* {0} */
    OK(MPI_Group_size(inter, &gs));
    OK(MPI_Group_rank(inter, &gr));
    CHECK(gs == 1 && gr == (rank == 0 ? 0 : MPI_UNDEFINED));
    OK(MPI_Group_difference(firsts, evens, &diff)); /* {1} */
    OK(MPI_Group_size(diff, &gs));
    OK(MPI_Group_rank(diff, &gr));
    CHECK(gs == 1 && gr == (rank == 1 ? 0 : MPI_UNDEFINED));
    OK(MPI_Group_compare(wg, wg, &cmp));
    CHECK(cmp == MPI_IDENT);
    MPI_Group odds2;
    int od2[2] = {1, 3};
    OK(MPI_Group_incl(wg, 2, od2, &odds2));
    OK(MPI_Group_compare(odds, odds2, &cmp));
    CHECK(cmp == MPI_SIMILAR);
    OK(MPI_Group_compare(evens, odds, &cmp));
    CHECK(cmp == MPI_UNEQUAL);
    MPI_Group gl[7] = {wg, evens, odds, firsts, inter, diff, odds2};
    for (int i = 0; i < 7; i++) OK(MPI_Group_free(&gl[i]));
    OK(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(flag == 0);

    /* RMA on a window over user memory: passive target with flushes,
     * lock_all, get_accumulate, window error handlers. */
    long wmem[4] = {0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(wmem, sizeof wmem, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Errhandler weh;
    OK(MPI_Win_get_errhandler(win, &weh));
    CHECK(weh == MPI_ERRORS_ARE_FATAL);
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    OK(MPI_Win_get_errhandler(win, &weh));
    CHECK(weh == MPI_ERRORS_RETURN);
    /* A put outside the window goes to the window's handler: returned. */
    long one = 1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win));
    CHECK(MPI_Put(&one, 1, MPI_LONG, next, 100, 1, MPI_LONG, win) == MPI_ERR_RMA_RANGE);
    OK(MPI_Win_unlock(next, win));
    OK(MPI_Win_lock_all(0, win));
    long val = rank + 1;
    OK(MPI_Put(&val, 1, MPI_LONG, next, 0, 1, MPI_LONG, win));
    OK(MPI_Win_flush(next, win));
    OK(MPI_Accumulate(&val, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win));
    OK(MPI_Win_flush_local(0, win));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local_all(win));
    OK(MPI_Win_sync(win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    OK(MPI_Win_sync(win));
    CHECK(wmem[0] == prev + 1);
    if (rank == 0) CHECK(wmem[1] == 10);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Get_accumulate: every rank adds rank + 1 to rank 2's slot 2 and
     * fetches what was there; the fetched values are distinct partial
     * sums, the final value is 10. */
    long fetched = -1, add = rank + 1;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 2, 0, win));
    OK(MPI_Get_accumulate(&add, 1, MPI_LONG, &fetched, 1, MPI_LONG, 2, 2, 1, MPI_LONG, MPI_SUM, win));
    OK(MPI_Win_unlock(2, win));
    CHECK(fetched >= 0 && fetched <= 10 - add);
    long fsum;
    OK(MPI_Allreduce(&fetched, &fsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 2) CHECK(wmem[2] == 10);
    CHECK(fsum >= 0 && fsum <= 30);
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL);

    /* Errhandler_free of a predefined handler nulls the handle. */
    MPI_Errhandler eh = MPI_ERRORS_RETURN;
    OK(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL);

    OK(MPI_Barrier(MPI_COMM_WORLD));
    printf("OK coverage\n");
    OK(MPI_Finalize());
    return 0;
}

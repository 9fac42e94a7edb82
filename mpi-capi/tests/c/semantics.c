/* Semantics of the implemented functions, values checked; run on 4 ranks.
 * Prints "OK semantics" on every rank when every check passed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

static int rank, size;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

static void my_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

int main(int argc, char **argv) {
    int provided, flag;
    MPI_Initialized(&flag);
    CHECK(flag == 0);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Initialized(&flag);
    CHECK(flag == 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size == 4);
    int v, sv;
    MPI_Get_version(&v, &sv);
    CHECK(v == 4 && sv == 0);
    char name[MPI_MAX_PROCESSOR_NAME];
    int len;
    MPI_Get_processor_name(name, &len);
    CHECK(len > 0 && (int)strlen(name) == len);
    int *tag_ub;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    CHECK(flag && *tag_ub >= 32767);
    double t0 = MPI_Wtime();
    CHECK(MPI_Wtime() >= t0 && MPI_Wtick() > 0);

    /* Point-to-point: a ring with statuses and counts. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[3] = {rank, rank * 10, rank * 100}, in[5] = {0};
    MPI_Status st;
    MPI_Sendrecv(out, 3, MPI_INT, next, 7, in, 5, MPI_INT, prev, 7, MPI_COMM_WORLD, &st);
    int count;
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 3 && st.MPI_SOURCE == prev && st.MPI_TAG == 7);
    CHECK(in[0] == prev && in[1] == prev * 10 && in[2] == prev * 100);
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == 12);

    /* Non-blocking, any source, Waitall. */
    MPI_Request rq[2];
    int a = rank, b = -1;
    MPI_Irecv(&b, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[0]);
    MPI_Issend(&a, 1, MPI_INT, next, rank, MPI_COMM_WORLD, &rq[1]);
    MPI_Status sts[2];
    MPI_Waitall(2, rq, sts);
    CHECK(b == prev && sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == prev);
    CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL);

    /* Persistent requests, twice. */
    MPI_Request ps[2];
    int pin = -1, pout;
    MPI_Recv_init(&pin, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &ps[0]);
    MPI_Send_init(&pout, 1, MPI_INT, next, 9, MPI_COMM_WORLD, &ps[1]);
    for (int it = 0; it < 2; it++) {
        pout = rank + it;
        MPI_Startall(2, ps);
        MPI_Waitall(2, ps, MPI_STATUSES_IGNORE);
        CHECK(pin == prev + it);
        CHECK(ps[0] != MPI_REQUEST_NULL);
    }
    MPI_Request_free(&ps[0]);
    MPI_Request_free(&ps[1]);

    /* Probe then receive; PROC_NULL; cancel. */
    if (rank == 0) {
        double d[4] = {1, 2, 3, 4};
        MPI_Send(d, 4, MPI_DOUBLE, 1, 5, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Probe(0, 5, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        CHECK(count == 4 && st.MPI_SOURCE == 0);
        double d[4];
        MPI_Recv(d, 4, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD, &st);
        CHECK(d[3] == 4.0);
    }
    MPI_Recv(&b, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
    MPI_Request cr;
    MPI_Irecv(&b, 1, MPI_INT, 0, 999, MPI_COMM_WORLD, &cr);
    MPI_Cancel(&cr);
    MPI_Wait(&cr, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 1);

    /* Derived datatypes: a vector column. */
    MPI_Datatype col;
    MPI_Type_vector(3, 1, 4, MPI_INT, &col);
    MPI_Type_commit(&col);
    int tsize;
    MPI_Aint lb, ext;
    MPI_Type_size(col, &tsize);
    MPI_Type_get_extent(col, &lb, &ext);
    CHECK(tsize == 12 && lb == 0 && ext == 9 * (MPI_Aint)sizeof(int));
    int m[12];
    for (int i = 0; i < 12; i++) m[i] = rank * 100 + i;
    int colin[3];
    MPI_Sendrecv(m + 1, 1, col, next, 3, colin, 3, MPI_INT, prev, 3, MPI_COMM_WORLD, &st);
    CHECK(colin[0] == prev * 100 + 1 && colin[1] == prev * 100 + 5 && colin[2] == prev * 100 + 9);
    int mr[12] = {0};
    MPI_Sendrecv(colin, 3, MPI_INT, next, 4, mr + 2, 1, col, prev, 4, MPI_COMM_WORLD, &st);
    CHECK(mr[2] == ((prev + size - 1) % size) * 100 + 1 && mr[6] != 0 && mr[3] == 0);
    /* A type freed while a receive uses it still delivers. */
    MPI_Request tr;
    int mr2[12] = {0};
    MPI_Irecv(mr2, 1, col, prev, 6, MPI_COMM_WORLD, &tr);
    MPI_Type_free(&col);
    CHECK(col == MPI_DATATYPE_NULL);
    int three[3] = {rank + 1, rank + 2, rank + 3};
    MPI_Send(three, 3, MPI_INT, next, 6, MPI_COMM_WORLD);
    MPI_Wait(&tr, &st);
    CHECK(mr2[0] == prev + 1 && mr2[4] == prev + 2 && mr2[8] == prev + 3 && mr2[1] == 0);

    /* Reductions and collectives. */
    long lsum = 0;
    long lv = rank + 1;
    MPI_Allreduce(&lv, &lsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(lsum == 10);
    double dmax;
    double dv = rank * 1.5;
    MPI_Reduce(&dv, &dmax, 1, MPI_DOUBLE, MPI_MAX, 2, MPI_COMM_WORLD);
    if (rank == 2) CHECK(dmax == 4.5);
    int pre;
    MPI_Scan(&rank, &pre, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(pre == rank * (rank + 1) / 2);
    int ex = -7;
    MPI_Exscan(&rank, &ex, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0) CHECK(ex == rank * (rank - 1) / 2);
    struct { double v; int i; } loc = {(double)((rank * 3) % 4), rank}, lres;
    MPI_Allreduce(&loc, &lres, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(lres.v == 3.0 && lres.i == 1);
    MPI_Op op;
    MPI_Op_create(my_sum, 0, &op);
    int us = 0, one = 1;
    MPI_Allreduce(&one, &us, 1, MPI_INT, op, MPI_COMM_WORLD);
    CHECK(us == 4);
    MPI_Op_free(&op);
    int ip = rank;
    MPI_Allreduce(MPI_IN_PLACE, &ip, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    CHECK(ip == 3);
    int bc = rank == 3 ? 42 : 0;
    MPI_Bcast(&bc, 1, MPI_INT, 3, MPI_COMM_WORLD);
    CHECK(bc == 42);
    int all[4], g[4];
    MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++) CHECK(all[i] == i);
    MPI_Gather(&rank, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) for (int i = 0; i < 4; i++) CHECK(g[i] == i);
    int sc[4] = {10, 11, 12, 13}, got;
    MPI_Scatter(sc, 1, MPI_INT, &got, 1, MPI_INT, 1, MPI_COMM_WORLD);
    CHECK(got == 10 + rank);
    int a2a_s[4], a2a_r[4];
    for (int i = 0; i < 4; i++) a2a_s[i] = rank * 10 + i;
    MPI_Alltoall(a2a_s, 1, MPI_INT, a2a_r, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++) CHECK(a2a_r[i] == i * 10 + rank);
    int rsb[4] = {1, 2, 3, 4}, rso;
    MPI_Reduce_scatter_block(rsb, &rso, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rso == 4 * (rank + 1));
    MPI_Request ib;
    int ibv = rank == 0 ? 77 : 0;
    MPI_Ibcast(&ibv, 1, MPI_INT, 0, MPI_COMM_WORLD, &ib);
    MPI_Wait(&ib, MPI_STATUS_IGNORE);
    CHECK(ibv == 77);
    MPI_Ibarrier(MPI_COMM_WORLD, &ib);
    MPI_Wait(&ib, MPI_STATUS_IGNORE);
    /* Flat non-blocking collectives, several in flight, waited together. */
    MPI_Request nb[4];
    int iag[4], ia2a[4], ig[4] = {-1, -1, -1, -1}, isc = -1, isend[4] = {20, 21, 22, 23};
    MPI_Iallgather(&rank, 1, MPI_INT, iag, 1, MPI_INT, MPI_COMM_WORLD, &nb[0]);
    MPI_Ialltoall(a2a_s, 1, MPI_INT, ia2a, 1, MPI_INT, MPI_COMM_WORLD, &nb[1]);
    MPI_Igather(&rank, 1, MPI_INT, ig, 1, MPI_INT, 2, MPI_COMM_WORLD, &nb[2]);
    MPI_Iscatter(isend, 1, MPI_INT, &isc, 1, MPI_INT, 3, MPI_COMM_WORLD, &nb[3]);
    MPI_Waitall(4, nb, MPI_STATUSES_IGNORE);
    for (int i = 0; i < 4; i++) CHECK(iag[i] == i && ia2a[i] == i * 10 + rank);
    if (rank == 2) for (int i = 0; i < 4; i++) CHECK(ig[i] == i);
    if (rank != 2) CHECK(ig[0] == -1);
    CHECK(isc == 20 + rank);
    /* MPI_IN_PLACE: the own block is already in the receive buffer. */
    int ipg[4] = {-1, -1, -1, -1};
    ipg[rank] = 100 + rank;
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ipg, 1, MPI_INT, MPI_COMM_WORLD, &nb[0]);
    MPI_Wait(&nb[0], MPI_STATUS_IGNORE);
    for (int i = 0; i < 4; i++) CHECK(ipg[i] == 100 + i);
    int ipr[4] = {-1, -1, -1, -1};
    if (rank == 1) ipr[1] = 51;
    MPI_Igather(rank == 1 ? MPI_IN_PLACE : (void *)&(int){50 + rank}, 1, MPI_INT, ipr, 1, MPI_INT, 1, MPI_COMM_WORLD, &nb[0]);
    MPI_Wait(&nb[0], MPI_STATUS_IGNORE);
    if (rank == 1) for (int i = 0; i < 4; i++) CHECK(ipr[i] == 50 + i);

    /* Communicators and groups. */
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    CHECK(hs == 2 && hr == (rank < 2 ? 1 : 0));
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int cmp;
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp);
    CHECK(cmp == MPI_CONGRUENT);
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cmp);
    CHECK(cmp == MPI_IDENT);
    MPI_Group wg, hg, ug, xg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(half, &hg);
    int r3[2] = {0, 1}, t3[2];
    MPI_Group_translate_ranks(hg, 2, r3, wg, t3);
    CHECK(t3[0] == (rank % 2) + 2 && t3[1] == rank % 2);
    int ex0[1] = {0};
    MPI_Group_excl(wg, 1, ex0, &xg);
    int gs, gr;
    MPI_Group_size(xg, &gs);
    MPI_Group_rank(xg, &gr);
    CHECK(gs == 3 && gr == (rank == 0 ? MPI_UNDEFINED : rank - 1));
    MPI_Group_union(hg, xg, &ug);
    MPI_Group_size(ug, &gs);
    CHECK(gs == (rank % 2 == 0 ? 4 : 3)); /* {2,0} or {3,1} with {1,2,3} */
    MPI_Comm sub;
    MPI_Comm_create(MPI_COMM_WORLD, xg, &sub);
    if (rank == 0) CHECK(sub == MPI_COMM_NULL);
    else { MPI_Comm_size(sub, &gs); CHECK(gs == 3); MPI_Comm_free(&sub); }
    MPI_Group_free(&wg); MPI_Group_free(&hg); MPI_Group_free(&ug); MPI_Group_free(&xg);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &gs);
    MPI_Comm_rank(node, &gr);
    CHECK(gs == size && gr == rank); /* every rank runs on this host */
    MPI_Comm_free(&node);
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    CHECK(dup == MPI_COMM_NULL);

    /* RMA: fence epoch with accumulate, then lock + fetch_and_op + CAS. */
    long *base;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    int *du_p;
    MPI_Aint *wsz_p;
    void *wbase;
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du_p, &flag);
    CHECK(flag && *du_p == (int)sizeof(long));
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsz_p, &flag);
    CHECK(flag && *wsz_p == 4 * (MPI_Aint)sizeof(long));
    MPI_Win_get_attr(win, MPI_WIN_BASE, &wbase, &flag);
    CHECK(flag && wbase == (void *)base);
    MPI_Win_fence(0, win);
    long inc = rank + 1;
    MPI_Accumulate(&inc, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win);
    MPI_Put(&inc, 1, MPI_LONG, next, 2, 1, MPI_LONG, win);
    MPI_Win_fence(0, win);
    if (rank == 0) CHECK(base[1] == 10);
    CHECK(base[2] == prev + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    long old, one_l = 1, got_l;
    MPI_Fetch_and_op(&one_l, &old, MPI_LONG, 1, 0, MPI_SUM, win);
    MPI_Get(&got_l, 1, MPI_LONG, 1, 2, 1, MPI_LONG, win);
    MPI_Win_unlock(1, win);
    CHECK(got_l == 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) CHECK(base[0] == 4);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Compare-and-swap 4 -> 100 + rank: exactly one rank wins; the others
     * see the winner's value. */
    long want = 4, mine = 100 + rank, was;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    MPI_Compare_and_swap(&mine, &want, &was, MPI_LONG, 1, 0, win);
    MPI_Win_unlock(1, win);
    int won = was == 4, winners;
    CHECK(won || (was >= 100 && was < 104));
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1);
    if (rank == 1) CHECK(base[0] >= 100 && base[0] < 104);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);

    /* Matched probe and receive; more type constructors; memory. */
    if (rank == 2) {
        short sh[3] = {5, 6, 7};
        MPI_Send(sh, 3, MPI_SHORT, 3, 21, MPI_COMM_WORLD);
    } else if (rank == 3) {
        MPI_Message msg;
        MPI_Mprobe(MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &msg, &st);
        MPI_Get_count(&st, MPI_SHORT, &count);
        CHECK(count == 3 && st.MPI_SOURCE == 2 && msg != MPI_MESSAGE_NULL);
        short sh[3];
        MPI_Mrecv(sh, 3, MPI_SHORT, &msg, &st);
        CHECK(msg == MPI_MESSAGE_NULL && sh[2] == 7 && st.MPI_TAG == 21);
    }
    MPI_Message nomsg;
    MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &nomsg, &st);
    CHECK(nomsg == MPI_MESSAGE_NO_PROC);
    struct pt { double x; int k; } pts[2];
    MPI_Aint a0, a1;
    MPI_Get_address(&pts[0].x, &a0);
    MPI_Get_address(&pts[0].k, &a1);
    CHECK(a1 - a0 == (MPI_Aint)offsetof(struct pt, k));
    int bls[2] = {1, 1};
    MPI_Aint dps[2] = {0, a1 - a0};
    MPI_Datatype tys[2] = {MPI_DOUBLE, MPI_INT}, pt_t, pt_r;
    MPI_Type_create_struct(2, bls, dps, tys, &pt_t);
    MPI_Type_create_resized(pt_t, 0, sizeof(struct pt), &pt_r);
    MPI_Type_commit(&pt_r);
    MPI_Type_get_extent(pt_r, &lb, &ext);
    MPI_Type_size(pt_r, &tsize);
    CHECK(ext == (MPI_Aint)sizeof(struct pt) && tsize == 12);
    struct pt pin2[2];
    pts[0].x = rank + 0.5; pts[0].k = rank; pts[1].x = rank + 1.5; pts[1].k = -rank;
    MPI_Sendrecv(pts, 2, pt_r, next, 22, pin2, 2, pt_r, prev, 22, MPI_COMM_WORLD, &st);
    CHECK(pin2[1].x == prev + 1.5 && pin2[1].k == -prev && pin2[0].k == prev);
    MPI_Type_free(&pt_t);
    MPI_Type_free(&pt_r);
    void *mem;
    MPI_Alloc_mem(64, MPI_INFO_NULL, &mem);
    CHECK(mem != NULL);
    MPI_Free_mem(mem);

    /* Errors under MPI_ERRORS_RETURN: classes, no abort. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    CHECK(eh == MPI_ERRORS_RETURN);
    int ec;
    CHECK(MPI_Send(&a, 1, MPI_INT, 99, 0, MPI_COMM_WORLD) == MPI_ERR_RANK);
    CHECK(MPI_Send(&a, -1, MPI_INT, next, 0, MPI_COMM_WORLD) == MPI_ERR_COUNT);
    CHECK(MPI_Send(&a, 1, MPI_INT, next, -5, MPI_COMM_WORLD) == MPI_ERR_TAG);
    CHECK(MPI_Send(&a, 1, (MPI_Datatype)0x12345, next, 0, MPI_COMM_WORLD) == MPI_ERR_TYPE);
    ec = MPI_Send(&a, 1, MPI_INT, next, 0, (MPI_Comm)0x7777);
    CHECK(ec == MPI_ERR_COMM);
    CHECK(MPI_Comm_rank(MPI_COMM_WORLD, NULL) == MPI_ERR_ARG);
    MPI_Request bad = (MPI_Request)0x2c0000ff;
    CHECK(MPI_Wait(&bad, MPI_STATUS_IGNORE) == MPI_ERR_REQUEST);
    CHECK(MPI_Allreduce(&a, &b, 1, MPI_INT, (MPI_Op)0x1234, MPI_COMM_WORLD) == MPI_ERR_OP);
    int cls;
    MPI_Error_class(MPI_ERR_TRUNCATE, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE);
    char es[MPI_MAX_ERROR_STRING];
    MPI_Error_string(MPI_ERR_RANK, es, &len);
    CHECK(len > 0 && strstr(es, "MPI_ERR_RANK") != NULL);
    /* Truncation: the status says what arrived. */
    if (rank == 0) {
        int big[4] = {1, 2, 3, 4};
        MPI_Send(big, 4, MPI_INT, 1, 11, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int small[2];
        CHECK(MPI_Recv(small, 2, MPI_INT, 0, 11, MPI_COMM_WORLD, &st) == MPI_ERR_TRUNCATE);
        CHECK(small[0] == 1 && small[1] == 2);
    }
    /* An unsupported function loads and fails with its class. */
    MPI_Comm inter;
    CHECK(MPI_Intercomm_create(MPI_COMM_WORLD, 0, MPI_COMM_WORLD, 0, 1, &inter) == MPI_ERR_UNSUPPORTED_OPERATION);

    MPI_Barrier(MPI_COMM_WORLD);
    printf("OK semantics\n");
    MPI_Finalize();
    MPI_Finalized(&flag);
    CHECK(flag == 1);
    return 0;
}

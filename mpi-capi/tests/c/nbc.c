/* The non-blocking collectives beyond the first seven, and MPI_Alltoallw,
 * values checked; runs on any number of ranks from 2 (the test runs 3 and
 * 4). Phase 1 starts one of each and completes them with one MPI_Waitall,
 * then MPI_Alltoallw runs with a strided type; phase 2 runs the
 * MPI_IN_PLACE forms, each completed by an MPI_Test loop; then user
 * operations, MPI_Ireduce_scatter with unequal blocks, zero counts, and
 * the error classes under MPI_ERRORS_RETURN.
 * Prints "OK nbc" on every rank when every check passed.
 * With argument "fatal": MPI_Ireduce to a root out of range under the
 * default handler, which must abort the job naming the call. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank, size;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)
#define MAXP 8

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

/* Not commutative: x op y = y (the higher rank's value wins). */
static void user_right(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt; (void)in; (void)inout; (void)len;
}

/* The class of an error code (MPICH returns codes, this library classes). */
static int cls(int rc) {
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

static void wait_by_test(MPI_Request *rq) {
    int flag = 0;
    while (!flag) MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
    CHECK(*rq == MPI_REQUEST_NULL);
}

/* Varcount layouts: rank i's block has i elements (rank 0's is empty),
 * with a gap of one element before each block. */
static int vcount(int i) { return i; }
static int vdispl(int i) { return i * (i - 1) / 2 + i; }
static int vend(void) { return vdispl(size - 1) + vcount(size - 1); }

/* All-to-all: (r + j) % 3 elements between r and j (symmetric, some 0). */
static int acount(int r, int j) { return (r + j) % 3; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2 && size <= MAXP);
    const int p = size, r = rank, tri = p * (p - 1) / 2;
    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        int x = 1, y = 0;
        MPI_Request rq;
        MPI_Ireduce(&x, &y, 1, MPI_INT, MPI_SUM, p, MPI_COMM_WORLD, &rq);
        printf("NOT REACHED\n");
        MPI_Finalize();
        return 0;
    }

    /* ---- Phase 1: one of each in flight, one MPI_Waitall. ---- */
    MPI_Request rq[12];
    int nrq = 0;
    /* Ireduce: int sum of 3 elements to the last rank. */
    int red_s[3], red_r[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) red_s[i] = r * 10 + i;
    MPI_Ireduce(red_s, red_r, 3, MPI_INT, MPI_SUM, p - 1, MPI_COMM_WORLD, &rq[nrq++]);
    /* Iscan: long sum. */
    long scan_s[2] = {r + 1, -(r + 1)}, scan_r[2] = {0, 0};
    MPI_Iscan(scan_s, scan_r, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &rq[nrq++]);
    /* Iexscan: int sum; rank 0's result stays as it was. */
    int ex_s = r + 1, ex_r = -7;
    MPI_Iexscan(&ex_s, &ex_r, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[nrq++]);
    /* Ireduce_scatter_block: 2 doubles per rank, max. */
    double rsb_s[2 * MAXP], rsb_r[2] = {0, 0};
    for (int j = 0; j < 2 * p; j++) rsb_s[j] = (double)(r * 1000 + j);
    MPI_Ireduce_scatter_block(rsb_s, rsb_r, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &rq[nrq++]);
    /* Ireduce_scatter with equal blocks: unsigned bitwise or. */
    unsigned rs_s[MAXP], rs_r = 0;
    int rs_counts[MAXP];
    for (int j = 0; j < p; j++) { rs_s[j] = 1u << (r + j); rs_counts[j] = 1; }
    MPI_Ireduce_scatter(rs_s, &rs_r, rs_counts, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD, &rq[nrq++]);
    /* Igatherv to rank 1: rank i sends i ints. */
    int gv_counts[MAXP], gv_displs[MAXP], gv_s[MAXP], gv_r[64];
    for (int i = 0; i < p; i++) { gv_counts[i] = vcount(i); gv_displs[i] = vdispl(i); }
    for (int k = 0; k < r; k++) gv_s[k] = r * 10 + k;
    for (int k = 0; k < 64; k++) gv_r[k] = -1;
    MPI_Igatherv(gv_s, vcount(r), MPI_INT, gv_r, gv_counts, gv_displs, MPI_INT, 1, MPI_COMM_WORLD, &rq[nrq++]);
    /* Iscatterv from rank 0: rank i gets i shorts. */
    short sv_s[64], sv_r[MAXP];
    for (int k = 0; k < 64; k++) sv_s[k] = (short)(k * 3);
    for (int k = 0; k < MAXP; k++) sv_r[k] = -1;
    MPI_Iscatterv(sv_s, gv_counts, gv_displs, MPI_SHORT, sv_r, vcount(r), MPI_SHORT, 0, MPI_COMM_WORLD, &rq[nrq++]);
    /* Iallgatherv: rank i contributes i doubles. */
    double agv_s[MAXP], agv_r[64];
    for (int k = 0; k < r; k++) agv_s[k] = r + k * 0.25;
    for (int k = 0; k < 64; k++) agv_r[k] = -1;
    MPI_Iallgatherv(agv_s, vcount(r), MPI_DOUBLE, agv_r, gv_counts, gv_displs, MPI_DOUBLE, MPI_COMM_WORLD, &rq[nrq++]);
    /* Ialltoallv: (r + j) % 3 ints between r and j. */
    int a_cnt[MAXP], a_dsp[MAXP], a_s[3 * MAXP], a_r[3 * MAXP], at = 0;
    for (int j = 0; j < p; j++) {
        a_cnt[j] = acount(r, j);
        a_dsp[j] = at;
        for (int k = 0; k < a_cnt[j]; k++) a_s[at + k] = r * 100 + j * 10 + k;
        at += a_cnt[j];
    }
    for (int k = 0; k < 3 * MAXP; k++) a_r[k] = -1;
    MPI_Ialltoallv(a_s, a_cnt, a_dsp, MPI_INT, a_r, a_cnt, a_dsp, MPI_INT, MPI_COMM_WORLD, &rq[nrq++]);
    /* Ialltoallw: to peer j, one int if r + j is even, else two doubles,
     * in 16-byte slots (byte displacements). */
    double w_s[2 * MAXP], w_r[2 * MAXP];
    int w_cnt[MAXP], w_dsp[MAXP];
    MPI_Datatype w_ty[MAXP];
    for (int j = 0; j < p; j++) {
        w_dsp[j] = 16 * j;
        if ((r + j) % 2 == 0) {
            w_cnt[j] = 1; w_ty[j] = MPI_INT;
            *(int *)((char *)w_s + 16 * j) = r * 100 + j;
        } else {
            w_cnt[j] = 2; w_ty[j] = MPI_DOUBLE;
            w_s[2 * j] = r * 100 + j + 0.5;
            w_s[2 * j + 1] = -(r * 100 + j + 0.5);
        }
    }
    for (int k = 0; k < 2 * MAXP; k++) w_r[k] = -1;
    MPI_Ialltoallw(w_s, w_cnt, w_dsp, w_ty, w_r, w_cnt, w_dsp, w_ty, MPI_COMM_WORLD, &rq[nrq++]);
    MPI_Waitall(nrq, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < nrq; i++) CHECK(rq[i] == MPI_REQUEST_NULL);

    if (r == p - 1) {
        for (int i = 0; i < 3; i++) CHECK(red_r[i] == 10 * tri + p * i);
    } else {
        CHECK(red_r[0] == -1);
    }
    CHECK(scan_r[0] == (long)(r + 1) * (r + 2) / 2 && scan_r[1] == -scan_r[0]);
    CHECK(ex_r == (r == 0 ? -7 : r * (r + 1) / 2));
    CHECK(rsb_r[0] == (double)((p - 1) * 1000 + 2 * r) && rsb_r[1] == rsb_r[0] + 1);
    unsigned want_or = 0;
    for (int s = 0; s < p; s++) want_or |= 1u << (s + r);
    CHECK(rs_r == want_or);
    if (r == 1) {
        for (int i = 0; i < p; i++) {
            for (int k = 0; k < vcount(i); k++) CHECK(gv_r[vdispl(i) + k] == i * 10 + k);
            CHECK(i == 0 || gv_r[vdispl(i) - 1] == -1); /* the gaps stay */
        }
        CHECK(gv_r[vend()] == -1);
    } else {
        CHECK(gv_r[0] == -1);
    }
    for (int k = 0; k < vcount(r); k++) CHECK(sv_r[k] == (short)((vdispl(r) + k) * 3));
    CHECK(sv_r[vcount(r)] == -1);
    for (int i = 0; i < p; i++)
        for (int k = 0; k < vcount(i); k++) CHECK(agv_r[vdispl(i) + k] == i + k * 0.25);
    CHECK(agv_r[0] == -1 && agv_r[vend()] == -1);
    for (int j = 0; j < p; j++)
        for (int k = 0; k < a_cnt[j]; k++) CHECK(a_r[a_dsp[j] + k] == j * 100 + r * 10 + k);
    CHECK(a_r[at] == -1);
    for (int j = 0; j < p; j++) {
        if ((r + j) % 2 == 0) {
            CHECK(*(int *)((char *)w_r + 16 * j) == j * 100 + r);
        } else {
            CHECK(w_r[2 * j] == j * 100 + r + 0.5 && w_r[2 * j + 1] == -w_r[2 * j]);
        }
    }

    /* Blocking MPI_Alltoallw, the same exchange. */
    for (int k = 0; k < 2 * MAXP; k++) w_r[k] = -1;
    CHECK(MPI_Alltoallw(w_s, w_cnt, w_dsp, w_ty, w_r, w_cnt, w_dsp, w_ty, MPI_COMM_WORLD) == MPI_SUCCESS);
    for (int j = 0; j < p; j++) {
        if ((r + j) % 2 == 0) CHECK(*(int *)((char *)w_r + 16 * j) == j * 100 + r);
        else CHECK(w_r[2 * j] == j * 100 + r + 0.5);
    }

    /* Blocking MPI_Alltoallw with a strided type (packed): to peer j,
     * ints 0 and 2 of the 4 in slot j; received as two MPI_INTs, then in
     * place as the strided type, which leaves ints 1 and 3 alone. */
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int v_s[4 * MAXP], v_r[4 * MAXP], v_cnt[MAXP], v_rcnt[MAXP], v_dsp[MAXP];
    MPI_Datatype v_ty[MAXP], v_rty[MAXP];
    for (int j = 0; j < p; j++) {
        v_cnt[j] = 1; v_rcnt[j] = 2; v_dsp[j] = 16 * j; v_ty[j] = vec; v_rty[j] = MPI_INT;
        for (int k = 0; k < 4; k++) v_s[4 * j + k] = r * 100 + j * 10 + k;
    }
    for (int k = 0; k < 4 * MAXP; k++) v_r[k] = -1;
    CHECK(MPI_Alltoallw(v_s, v_cnt, v_dsp, v_ty, v_r, v_rcnt, v_dsp, v_rty, MPI_COMM_WORLD) == MPI_SUCCESS);
    for (int j = 0; j < p; j++)
        CHECK(v_r[4 * j] == j * 100 + r * 10 && v_r[4 * j + 1] == j * 100 + r * 10 + 2 && v_r[4 * j + 2] == -1);
    memcpy(v_r, v_s, sizeof v_s);
    CHECK(MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, v_r, v_cnt, v_dsp, v_ty, MPI_COMM_WORLD) == MPI_SUCCESS);
    for (int j = 0; j < p; j++) {
        CHECK(v_r[4 * j] == j * 100 + r * 10 && v_r[4 * j + 2] == j * 100 + r * 10 + 2);
        CHECK(v_r[4 * j + 1] == r * 100 + j * 10 + 1 && v_r[4 * j + 3] == r * 100 + j * 10 + 3);
    }

    /* ---- Phase 2: MPI_IN_PLACE, each completed by an MPI_Test loop. ---- */
    MPI_Request q;
    /* Ireduce at root 0: its contribution is in recvbuf. */
    double ip_red[2] = {r + 0.5, -r - 0.5};
    if (r == 0) MPI_Ireduce(MPI_IN_PLACE, ip_red, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD, &q);
    else MPI_Ireduce(ip_red, NULL, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    if (r == 0) CHECK(ip_red[0] == p - 0.5 && ip_red[1] == -0.5);
    /* Iscan and Iexscan in place. */
    int ip_scan = r + 1;
    MPI_Iscan(MPI_IN_PLACE, &ip_scan, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    int fact = 1;
    for (int i = 2; i <= r + 1; i++) fact *= i;
    CHECK(ip_scan == fact);
    int ip_ex = r + 1;
    MPI_Iexscan(MPI_IN_PLACE, &ip_ex, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    CHECK(r == 0 ? ip_ex == 1 : ip_ex == r);
    /* Ireduce_scatter_block in place: the whole vector in recvbuf, the
     * result in its first block. */
    int ip_rsb[2 * MAXP];
    for (int j = 0; j < 2 * p; j++) ip_rsb[j] = r + j;
    MPI_Ireduce_scatter_block(MPI_IN_PLACE, ip_rsb, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    CHECK(ip_rsb[0] == tri + p * (2 * r) && ip_rsb[1] == tri + p * (2 * r + 1));
    /* Igatherv at root 2 % p in place: its block is already there. */
    int groot = 2 % p;
    for (int k = 0; k < 64; k++) gv_r[k] = -1;
    if (r == groot) {
        for (int k = 0; k < vcount(r); k++) gv_r[vdispl(r) + k] = r * 10 + k;
        MPI_Igatherv(MPI_IN_PLACE, 0, MPI_INT, gv_r, gv_counts, gv_displs, MPI_INT, groot, MPI_COMM_WORLD, &q);
    } else {
        MPI_Igatherv(gv_s, vcount(r), MPI_INT, NULL, NULL, NULL, MPI_INT, groot, MPI_COMM_WORLD, &q);
    }
    wait_by_test(&q);
    if (r == groot)
        for (int i = 0; i < p; i++)
            for (int k = 0; k < vcount(i); k++) CHECK(gv_r[vdispl(i) + k] == i * 10 + k);
    /* Iscatterv from the last rank in place: the root's block stays. */
    for (int k = 0; k < MAXP; k++) sv_r[k] = -1;
    if (r == p - 1) {
        MPI_Iscatterv(sv_s, gv_counts, gv_displs, MPI_SHORT, MPI_IN_PLACE, 0, MPI_SHORT, r, MPI_COMM_WORLD, &q);
    } else {
        MPI_Iscatterv(NULL, NULL, NULL, MPI_SHORT, sv_r, vcount(r), MPI_SHORT, p - 1, MPI_COMM_WORLD, &q);
    }
    wait_by_test(&q);
    if (r == p - 1) {
        for (int k = 0; k < 64; k++) CHECK(sv_s[k] == (short)(k * 3));
        CHECK(sv_r[0] == -1);
    } else {
        for (int k = 0; k < vcount(r); k++) CHECK(sv_r[k] == (short)((vdispl(r) + k) * 3));
    }
    /* Iallgatherv in place. */
    for (int k = 0; k < 64; k++) agv_r[k] = -1;
    for (int k = 0; k < r; k++) agv_r[vdispl(r) + k] = r + k * 0.25;
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DOUBLE, agv_r, gv_counts, gv_displs, MPI_DOUBLE, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    for (int i = 0; i < p; i++)
        for (int k = 0; k < vcount(i); k++) CHECK(agv_r[vdispl(i) + k] == i + k * 0.25);
    /* Ialltoallv in place: recvbuf holds what goes out. */
    memcpy(a_r, a_s, sizeof a_s);
    MPI_Ialltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, a_r, a_cnt, a_dsp, MPI_INT, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    for (int j = 0; j < p; j++)
        for (int k = 0; k < a_cnt[j]; k++) CHECK(a_r[a_dsp[j] + k] == j * 100 + r * 10 + k);
    /* Ialltoallw in place. */
    memcpy(w_r, w_s, sizeof w_s);
    MPI_Ialltoallw(MPI_IN_PLACE, NULL, NULL, NULL, w_r, w_cnt, w_dsp, w_ty, MPI_COMM_WORLD, &q);
    wait_by_test(&q);
    for (int j = 0; j < p; j++) {
        if ((r + j) % 2 == 0) CHECK(*(int *)((char *)w_r + 16 * j) == j * 100 + r);
        else CHECK(w_r[2 * j] == j * 100 + r + 0.5);
    }

    /* ---- User operations (run blocking in the start), and
     * MPI_Ireduce_scatter with unequal blocks (rank 0's empty). ---- */
    MPI_Op usum, uright;
    MPI_Op_create(user_sum, 1, &usum);
    MPI_Op_create(user_right, 0, &uright);
    int u_s[2] = {r, 2 * r}, u_r[2] = {0, 0}, u_scan = -1, u_right = -1;
    MPI_Request uq[3];
    MPI_Ireduce(u_s, u_r, 2, MPI_INT, usum, 0, MPI_COMM_WORLD, &uq[0]);
    MPI_Iscan(&u_s[0], &u_scan, 1, MPI_INT, usum, MPI_COMM_WORLD, &uq[1]);
    MPI_Iexscan(&u_s[0], &u_right, 1, MPI_INT, uright, MPI_COMM_WORLD, &uq[2]);
    int done = 0;
    while (!done) MPI_Testall(3, uq, &done, MPI_STATUSES_IGNORE);
    if (r == 0) CHECK(u_r[0] == tri && u_r[1] == 2 * tri);
    CHECK(u_scan == r * (r + 1) / 2);
    if (r > 0) CHECK(u_right == r - 1); /* x op y = y: rank r-1's value */
    int rsv_counts[MAXP], rsv_s[64], rsv_r[MAXP], rsv_ip[64];
    for (int i = 0; i < p; i++) rsv_counts[i] = vcount(i);
    for (int j = 0; j < tri; j++) rsv_s[j] = rsv_ip[j] = r * 100 + j;
    for (int k = 0; k < MAXP; k++) rsv_r[k] = -1;
    MPI_Ireduce_scatter(rsv_s, rsv_r, rsv_counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &uq[0]);
    MPI_Ireduce_scatter(MPI_IN_PLACE, rsv_ip, rsv_counts, MPI_INT, usum, MPI_COMM_WORLD, &uq[1]);
    MPI_Waitall(2, uq, MPI_STATUSES_IGNORE);
    int before = r * (r - 1) / 2;
    for (int k = 0; k < vcount(r); k++) CHECK(rsv_r[k] == 100 * tri + p * (before + k));
    for (int k = 0; k < vcount(r); k++) CHECK(rsv_ip[k] == 100 * tri + p * (before + k));
    CHECK(rsv_r[vcount(r)] == -1);
    MPI_Op_free(&usum);
    MPI_Op_free(&uright);

    /* Zero counts everywhere: complete, nothing written. */
    int z_s = 5, z_r[4] = {7, 7, 7, 7}, zc[MAXP] = {0}, zd[MAXP] = {0};
    MPI_Datatype zt[MAXP];
    for (int j = 0; j < p; j++) zt[j] = MPI_INT;
    MPI_Request zq[5];
    MPI_Ireduce(&z_s, &z_r[0], 0, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &zq[0]);
    MPI_Iscan(&z_s, &z_r[1], 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &zq[1]);
    MPI_Iexscan(&z_s, &z_r[2], 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &zq[2]);
    MPI_Ireduce_scatter_block(&z_s, &z_r[3], 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &zq[3]);
    MPI_Ialltoallw(&z_s, zc, zd, zt, z_r, zc, zd, zt, MPI_COMM_WORLD, &zq[4]);
    MPI_Waitall(5, zq, MPI_STATUSES_IGNORE);
    CHECK(z_r[0] == 7 && z_r[1] == 7 && z_r[2] == 7 && z_r[3] == 7);

    /* ---- Bad input under MPI_ERRORS_RETURN: the class, no crash, and
     * no collective started (every rank fails the same way). ---- */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int x[4] = {0, 0, 0, 0}, y[4];
    q = MPI_REQUEST_NULL;
    CHECK(cls(MPI_Ireduce(x, y, -1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &q)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Ireduce(x, y, 1, MPI_INT, MPI_SUM, p, MPI_COMM_WORLD, &q)) == MPI_ERR_ROOT);
    CHECK(cls(MPI_Ireduce(x, y, 1, MPI_INT, MPI_SUM, -1, MPI_COMM_WORLD, &q)) == MPI_ERR_ROOT);
    CHECK(cls(MPI_Iscan(NULL, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q)) == MPI_ERR_BUFFER);
    CHECK(cls(MPI_Iexscan(x, y, 1, (MPI_Datatype)0x12345, MPI_SUM, MPI_COMM_WORLD, &q)) == MPI_ERR_TYPE);
    CHECK(cls(MPI_Ireduce_scatter_block(x, y, 1, MPI_INT, (MPI_Op)0x1234, MPI_COMM_WORLD, &q)) == MPI_ERR_OP);
    CHECK(cls(MPI_Iscan(x, y, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD, &q)) == MPI_ERR_OP);
    CHECK(cls(MPI_Igatherv(x, -2, MPI_INT, gv_r, gv_counts, gv_displs, MPI_INT, 0, MPI_COMM_WORLD, &q)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Igatherv(x, 1, MPI_INT, gv_r, gv_counts, gv_displs, MPI_INT, p + 3, MPI_COMM_WORLD, &q)) == MPI_ERR_ROOT);
    CHECK(cls(MPI_Iscatterv(x, gv_counts, gv_displs, MPI_INT, y, 1, MPI_INT, -4, MPI_COMM_WORLD, &q)) == MPI_ERR_ROOT);
    CHECK(cls(MPI_Iallgatherv(x, 0, MPI_INT, NULL, gv_counts, gv_displs, MPI_INT, MPI_COMM_WORLD, &q)) == MPI_ERR_BUFFER);
    CHECK(cls(MPI_Ialltoallv(x, a_cnt, a_dsp, (MPI_Datatype)0x12345, a_r, a_cnt, a_dsp, MPI_INT, MPI_COMM_WORLD, &q)) == MPI_ERR_TYPE);
    w_ty[p - 1] = MPI_DATATYPE_NULL;
    CHECK(cls(MPI_Ialltoallw(w_s, w_cnt, w_dsp, w_ty, w_r, w_cnt, w_dsp, w_ty, MPI_COMM_WORLD, &q)) == MPI_ERR_TYPE);
    CHECK(cls(MPI_Alltoallw(w_s, w_cnt, w_dsp, w_ty, w_r, w_cnt, w_dsp, w_ty, MPI_COMM_WORLD)) == MPI_ERR_TYPE);
    /* The non-blocking form takes contiguous types only. */
    CHECK(cls(MPI_Ialltoallw(v_s, v_cnt, v_dsp, v_ty, v_r, v_cnt, v_dsp, v_ty, MPI_COMM_WORLD, &q)) == MPI_ERR_TYPE);
    MPI_Type_free(&vec);
    CHECK(q == MPI_REQUEST_NULL);
    /* Still usable after the errors. */
    MPI_Ibarrier(MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);

    printf("OK nbc\n");
    MPI_Finalize();
    return 0;
}

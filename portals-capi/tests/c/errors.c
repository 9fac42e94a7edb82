/*
 * The error paths of every call of libportals, in one process (a job of
 * one: no launcher needed). Each EXPECT names the return code the call
 * must give; values that come back are checked too. Prints
 * "OK errors: N checks" and exits 0 if all held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <portals.h>

static int failures, checks;

#define EXPECT(call, want)                                                   \
    do {                                                                     \
        int rc_ = (call);                                                    \
        checks++;                                                            \
        if (rc_ != (want)) {                                                 \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, \
                    __LINE__, #call, PtlErrorStr(rc_), #want);               \
            failures++;                                                      \
        }                                                                    \
    } while (0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* A handler, to show that handlers are refused. */
static void handler(ptl_event_t *ev) { (void)ev; }

/* Wait for `n` events of `kind` on `eq`, skipping others. */
static void wait_kind(ptl_handle_eq_t eq, ptl_event_kind_t kind, int n)
{
    while (n > 0) {
        ptl_event_t ev;
        int rc = PtlEQWait(eq, &ev);
        if (rc != PTL_OK) {
            fprintf(stderr, "wait_kind: %s\n", PtlErrorStr(rc));
            exit(1);
        }
        if (ev.type == kind)
            n--;
    }
}

int main(void)
{
    const ptl_process_id_t any = {PTL_NID_ANY, PTL_PID_ANY};
    ptl_handle_ni_t ni, ni2;
    ptl_handle_eq_t eq;
    ptl_handle_me_t me;
    ptl_handle_md_t md;
    ptl_event_t ev;
    ptl_process_id_t self;
    ptl_ni_limits_t limits;
    int max_if = 0, which;
    uint8_t buf[64], other[64];
    ptl_md_t d = {.start = buf, .length = sizeof buf, .threshold = PTL_MD_THRESH_INF,
                  .options = PTL_MD_OP_PUT, .eq_handle = PTL_EQ_NONE};

    /* ---- before PtlInit ---- */
    EXPECT(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, &ni), PTL_NO_INIT);
    EXPECT(PtlMDUnlink(0), PTL_NO_INIT);
    EXPECT(PtlEQGet(PTL_EQ_NONE, &ev), PTL_NO_INIT);
    EXPECT(PtlInit(NULL), PTL_SEGV);
    EXPECT(PtlInit(&max_if), PTL_OK);
    CHECK(max_if == 1);

    /* ---- PtlNIInit ---- */
    EXPECT(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, NULL), PTL_SEGV);
    EXPECT(PtlNIInit(7, PTL_PID_ANY, NULL, NULL, &ni), PTL_IFACE_INVALID);
    EXPECT(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, &limits, &ni), PTL_OK);
    CHECK(limits.max_pt_index >= 63 && limits.max_mds > 0 && limits.max_eqs > 0);
    EXPECT(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, &ni2), PTL_IFACE_DUP);
    EXPECT(PtlHandleIsEqual(ni, ni2), PTL_OK);
    EXPECT(PtlHandleIsEqual(ni, PTL_INVALID_HANDLE), PTL_FAIL);

    /* ---- identities, status, distance ---- */
    EXPECT(PtlGetId(ni, NULL), PTL_SEGV);
    EXPECT(PtlGetId(PTL_INVALID_HANDLE, &self), PTL_NI_INVALID);
    EXPECT(PtlGetId(ni, &self), PTL_OK);
    CHECK(self.nid == 0 && self.pid == 0);
    ptl_jid_t jid;
    ptl_uid_t uid;
    EXPECT(PtlGetJid(ni, NULL), PTL_SEGV);
    EXPECT(PtlGetJid(ni, &jid), PTL_OK);
    EXPECT(PtlGetUid(ni, &uid), PTL_OK);
    uint32_t rank = 9, size = 9;
    EXPECT(PtlJobRank(ni, &rank), PTL_OK);
    EXPECT(PtlJobSize(ni, &size), PTL_OK);
    CHECK(rank == 0 && size == 1);
    EXPECT(PtlJobProcessId(ni, 1, &self), PTL_PROCESS_INVALID);
    EXPECT(PtlJobProcessId(ni, 0, NULL), PTL_SEGV);
    EXPECT(PtlJobBarrier(PTL_INVALID_HANDLE), PTL_NI_INVALID);
    EXPECT(PtlJobBarrier(ni), PTL_OK);
    ptl_sr_value_t sr = 99;
    EXPECT(PtlNIStatus(ni, 99, &sr), PTL_SR_INDEX_INVALID);
    EXPECT(PtlNIStatus(ni, PTL_SR_DROP_COUNT, NULL), PTL_SEGV);
    EXPECT(PtlNIStatus(PTL_INVALID_HANDLE, PTL_SR_DROP_COUNT, &sr), PTL_NI_INVALID);
    EXPECT(PtlNIStatus(ni, PTL_SR_DROP_COUNT, &sr), PTL_OK);
    CHECK(sr == 0);
    unsigned long dist = 7;
    EXPECT(PtlNIDist(ni, any, &dist), PTL_PROCESS_INVALID);
    EXPECT(PtlNIDist(ni, self, NULL), PTL_SEGV);
    EXPECT(PtlNIDist(ni, self, &dist), PTL_OK);
    CHECK(dist == 0);

    /* ---- event queues ---- */
    EXPECT(PtlEQAlloc(ni, 8, PTL_EQ_HANDLER_NONE, NULL), PTL_SEGV);
    EXPECT(PtlEQAlloc(ni, 8, handler, &eq), PTL_FAIL);
    EXPECT(PtlEQAlloc(PTL_INVALID_HANDLE, 8, PTL_EQ_HANDLER_NONE, &eq), PTL_NI_INVALID);
    EXPECT(PtlEQAlloc(ni, 64, PTL_EQ_HANDLER_NONE, &eq), PTL_OK);
    EXPECT(PtlEQGet(eq, &ev), PTL_EQ_EMPTY);
    EXPECT(PtlEQGet(eq, NULL), PTL_SEGV);
    EXPECT(PtlEQGet(PTL_EQ_NONE, &ev), PTL_EQ_INVALID);
    EXPECT(PtlEQGet(ni, &ev), PTL_EQ_INVALID); /* a handle of another kind */
    EXPECT(PtlEQWait(eq, NULL), PTL_SEGV);
    EXPECT(PtlEQWait(PTL_EQ_NONE, &ev), PTL_EQ_INVALID);
    EXPECT(PtlEQPoll(&eq, 1, 0, &ev, &which), PTL_EQ_EMPTY);
    EXPECT(PtlEQPoll(&eq, 1, 20, &ev, &which), PTL_EQ_EMPTY);
    EXPECT(PtlEQPoll(&eq, 0, 0, &ev, &which), PTL_EQ_INVALID);
    EXPECT(PtlEQPoll(NULL, 1, 0, &ev, &which), PTL_SEGV);
    EXPECT(PtlEQPoll(&eq, 1, 0, NULL, &which), PTL_SEGV);
    EXPECT(PtlEQPoll(&eq, 1, 0, &ev, NULL), PTL_SEGV);
    EXPECT(PtlEQPoll(&eq, 1, -5, &ev, &which), PTL_FAIL);
    ptl_handle_eq_t nine[9] = {eq, eq, eq, eq, eq, eq, eq, eq, eq};
    EXPECT(PtlEQPoll(nine, 9, 0, &ev, &which), PTL_EQ_EMPTY);
    nine[8] = ni; /* not an event queue */
    EXPECT(PtlEQPoll(nine, 9, 0, &ev, &which), PTL_EQ_INVALID);
    nine[3] = PTL_EQ_NONE;
    EXPECT(PtlEQPoll(nine, 4, 0, &ev, &which), PTL_EQ_INVALID);
    EXPECT(PtlEQPoll(&eq, 100000, 0, &ev, &which), PTL_EQ_INVALID); /* more than max_eqs */
    EXPECT(PtlNIHandle(eq, NULL), PTL_SEGV);
    EXPECT(PtlNIHandle(PTL_INVALID_HANDLE, &ni2), PTL_HANDLE_INVALID);
    EXPECT(PtlNIHandle(eq, &ni2), PTL_OK);
    EXPECT(PtlHandleIsEqual(ni, ni2), PTL_OK);

    /* ---- match entries ---- */
    EXPECT(PtlMEAttach(ni, 4, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, NULL), PTL_SEGV);
    EXPECT(PtlMEAttach(ni, 1000, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me), PTL_PT_INDEX_INVALID);
    EXPECT(PtlMEAttach(ni, 4, any, 0, 0, 42, PTL_INS_AFTER, &me), PTL_FAIL);
    EXPECT(PtlMEAttach(ni, 4, any, 0, 0, PTL_RETAIN, 42, &me), PTL_FAIL);
    EXPECT(PtlMEAttach(PTL_INVALID_HANDLE, 4, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me), PTL_NI_INVALID);
    EXPECT(PtlMEAttach(ni, 4, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me), PTL_OK);
    ptl_handle_me_t me2;
    EXPECT(PtlMEInsert(PTL_INVALID_HANDLE, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me2), PTL_ME_INVALID);
    EXPECT(PtlMEInsert(eq, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me2), PTL_ME_INVALID);
    EXPECT(PtlMEInsert(me, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, NULL), PTL_SEGV);
    EXPECT(PtlMEInsert(me, any, 0, 0, PTL_RETAIN, PTL_INS_AFTER, &me2), PTL_OK);
    ptl_pt_index_t pt_any = 999;
    EXPECT(PtlMEAttachAny(ni, NULL, any, 0, 0, PTL_RETAIN, &me2), PTL_SEGV);
    EXPECT(PtlMEAttachAny(ni, &pt_any, any, 0, 0, PTL_RETAIN, NULL), PTL_SEGV);
    ptl_handle_me_t me_any;
    EXPECT(PtlMEAttachAny(ni, &pt_any, any, 0, 0, PTL_RETAIN, &me_any), PTL_OK);
    CHECK(pt_any != 4 && pt_any < 64);
    EXPECT(PtlMEUnlink(me_any), PTL_OK);
    EXPECT(PtlMEUnlink(me_any), PTL_ME_INVALID); /* stale */

    /* ---- memory descriptors ---- */
    ptl_md_t bad = d;
    bad.start = NULL;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_SEGV);
    bad = d;
    bad.options = 1u << 20;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_MD_ILLEGAL);
    bad = d;
    bad.threshold = -5;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_MD_ILLEGAL);
    bad = d;
    bad.eq_handle = me; /* not an event queue */
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_EQ_INVALID);
    bad = d;
    bad.length = ~0ULL;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_MD_ILLEGAL);
    ptl_md_iovec_t iov[2] = {{buf, 8}, {other, 0}}; /* an empty segment */
    bad = d;
    bad.options |= PTL_MD_IOVEC;
    bad.start = iov;
    bad.length = 2;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_MD_ILLEGAL);
    bad.start = NULL;
    EXPECT(PtlMDAttach(me, bad, PTL_RETAIN, &md), PTL_SEGV);
    EXPECT(PtlMDAttach(me, d, PTL_RETAIN, NULL), PTL_SEGV);
    EXPECT(PtlMDAttach(PTL_INVALID_HANDLE, d, PTL_RETAIN, &md), PTL_ME_INVALID);
    EXPECT(PtlMDAttach(me, d, 42, &md), PTL_FAIL);
    EXPECT(PtlMDAttach(me, d, PTL_RETAIN, &md), PTL_OK);
    ptl_handle_md_t md2;
    EXPECT(PtlMDAttach(me, d, PTL_RETAIN, &md2), PTL_ME_IN_USE);
    EXPECT(PtlMDBind(PTL_INVALID_HANDLE, d, PTL_RETAIN, &md2), PTL_NI_INVALID);
    EXPECT(PtlMDBind(ni, d, PTL_RETAIN, NULL), PTL_SEGV);
    ptl_md_t iod = d;
    ptl_md_iovec_t iov_ok[2] = {{buf, 8}, {other, 8}};
    iod.options = PTL_MD_IOVEC;
    iod.start = iov_ok;
    iod.length = 2;
    EXPECT(PtlMDBind(ni, iod, PTL_RETAIN, &md2), PTL_OK);
    EXPECT(PtlMDUnlink(md2), PTL_OK);
    EXPECT(PtlMDUnlink(md2), PTL_MD_INVALID); /* stale */
    EXPECT(PtlMDUnlink(PTL_INVALID_HANDLE), PTL_MD_INVALID);
    EXPECT(PtlMDUnlink(me), PTL_MD_INVALID);

    /* ---- data movement with bad arguments ---- */
    ptl_handle_md_t src;
    ptl_md_t sd = {.start = other, .length = sizeof other, .threshold = PTL_MD_THRESH_INF,
                   .options = PTL_MD_EVENT_START_DISABLE, .eq_handle = eq};
    EXPECT(PtlMDBind(ni, sd, PTL_RETAIN, &src), PTL_OK);
    EXPECT(PtlPut(PTL_INVALID_HANDLE, PTL_NOACK_REQ, self, 4, 0, 0, 0, 0), PTL_MD_INVALID);
    EXPECT(PtlPut(src, PTL_NOACK_REQ, any, 4, 0, 0, 0, 0), PTL_PROCESS_INVALID);
    EXPECT(PtlPut(src, 42, self, 4, 0, 0, 0, 0), PTL_FAIL);
    EXPECT(PtlPutRegion(src, 60, 8, PTL_NOACK_REQ, self, 4, 0, 0, 0, 0), PTL_MD_ILLEGAL);
    EXPECT(PtlPutRegion(src, ~0ULL, 2, PTL_NOACK_REQ, self, 4, 0, 0, 0, 0), PTL_MD_ILLEGAL);
    EXPECT(PtlGet(PTL_INVALID_HANDLE, self, 4, 0, 0, 0), PTL_MD_INVALID);
    EXPECT(PtlGet(src, any, 4, 0, 0, 0), PTL_PROCESS_INVALID);
    EXPECT(PtlGetRegion(src, 60, 8, self, 4, 0, 0, 0), PTL_MD_ILLEGAL);
    ptl_handle_md_t small;
    ptl_md_t sm = sd;
    sm.length = 8;
    EXPECT(PtlMDBind(ni, sm, PTL_RETAIN, &small), PTL_OK);
    EXPECT(PtlGetPut(small, src, self, 4, 0, 0, 0, 0), PTL_MD_ILLEGAL); /* lengths differ */
    EXPECT(PtlGetPut(small, PTL_INVALID_HANDLE, self, 4, 0, 0, 0, 0), PTL_MD_INVALID);

    /* ---- access control ---- */
    EXPECT(PtlACEntry(ni, 9999, any, PTL_UID_ANY, PTL_JID_ANY, 4), PTL_AC_INDEX_INVALID);
    EXPECT(PtlACEntry(ni, 1, any, PTL_UID_ANY, PTL_JID_ANY, 9999), PTL_PT_INDEX_INVALID);
    EXPECT(PtlACEntry(PTL_INVALID_HANDLE, 1, any, PTL_UID_ANY, PTL_JID_ANY, 4), PTL_NI_INVALID);
    EXPECT(PtlACEntry(ni, 1, any, PTL_UID_ANY, PTL_JID_ANY, PTL_PT_INDEX_ANY), PTL_OK);

    /* ---- a put to ourselves, acknowledged, values checked ---- */
    for (size_t j = 0; j < sizeof other; j++)
        other[j] = (uint8_t)(j * 3 + 1);
    memset(buf, 0, sizeof buf);
    ptl_handle_eq_t rq;
    ptl_handle_me_t rme;
    ptl_handle_md_t rmd;
    EXPECT(PtlEQAlloc(ni, 8, PTL_EQ_HANDLER_NONE, &rq), PTL_OK);
    EXPECT(PtlMEAttach(ni, 6, any, 0x66, 0, PTL_RETAIN, PTL_INS_AFTER, &rme), PTL_OK);
    ptl_md_t rd = {.start = buf, .length = sizeof buf, .threshold = PTL_MD_THRESH_INF,
                   .options = PTL_MD_OP_PUT | PTL_MD_MANAGE_REMOTE | PTL_MD_EVENT_START_DISABLE,
                   .user_ptr = (void *)0x1234, .eq_handle = rq};
    EXPECT(PtlMDAttach(rme, rd, PTL_RETAIN, &rmd), PTL_OK);
    EXPECT(PtlPut(src, PTL_ACK_REQ, self, 6, 0, 0x66, 0, 77), PTL_OK);
    wait_kind(eq, PTL_EVENT_ACK, 1);

    /* ---- PtlMDUpdate: refused while the test queue holds an event ---- */
    ptl_md_t old, upd = rd;
    upd.threshold = 5;
    EXPECT(PtlMDUpdate(rmd, &old, &upd, rq), PTL_MD_NO_UPDATE);
    EXPECT(PtlMDUpdate(PTL_INVALID_HANDLE, &old, &upd, rq), PTL_MD_INVALID);
    EXPECT(PtlMDUpdate(rmd, &old, &upd, me), PTL_EQ_INVALID);
    ptl_md_t moved = upd;
    moved.start = other;
    EXPECT(PtlMDUpdate(rmd, &old, &moved, PTL_EQ_NONE), PTL_MD_ILLEGAL);
    ptl_handle_eq_t pair[2] = {eq, rq};
    which = -1;
    EXPECT(PtlEQPoll(pair, 2, PTL_TIME_FOREVER, &ev, &which), PTL_OK);
    CHECK(which == 1);
    CHECK(ev.type == PTL_EVENT_PUT_END);
    CHECK(ev.hdr_data == 77 && ev.mlength == sizeof buf && ev.match_bits == 0x66);
    CHECK(ev.md.user_ptr == (void *)0x1234 && ev.md.start == buf);
    CHECK(PtlHandleIsEqual(ev.md_handle, rmd) == PTL_OK);
    CHECK(memcmp(buf, other, sizeof buf) == 0);
    EXPECT(PtlEQGet(rq, &ev), PTL_EQ_EMPTY);
    EXPECT(PtlMDUpdate(rmd, &old, &upd, rq), PTL_OK);
    CHECK(old.threshold == PTL_MD_THRESH_INF && old.start == buf && old.length == sizeof buf);
    CHECK((old.options & PTL_MD_OP_PUT) && (old.options & PTL_MD_EVENT_START_DISABLE));
    EXPECT(PtlMDUpdate(rmd, &old, NULL, PTL_EQ_NONE), PTL_OK);
    CHECK(old.threshold == 5);
    EXPECT(PtlMDUnlink(rmd), PTL_OK);

    /* ---- PTL_EQ_DROPPED: a 2-event queue receives 4 puts ---- */
    ptl_handle_eq_t tiny;
    ptl_handle_md_t tmd;
    EXPECT(PtlEQAlloc(ni, 2, PTL_EQ_HANDLER_NONE, &tiny), PTL_OK);
    rd.eq_handle = tiny;
    EXPECT(PtlMDAttach(rme, rd, PTL_RETAIN, &tmd), PTL_OK);
    for (int i = 0; i < 4; i++)
        EXPECT(PtlPut(src, PTL_ACK_REQ, self, 6, 0, 0x66, 0, (ptl_hdr_data_t)i), PTL_OK);
    wait_kind(eq, PTL_EVENT_ACK, 4); /* all four deposited */
    EXPECT(PtlEQGet(tiny, &ev), PTL_EQ_DROPPED);
    CHECK(ev.type == PTL_EVENT_PUT_END && ev.hdr_data == 0); /* the oldest kept */
    EXPECT(PtlEQGet(tiny, &ev), PTL_OK);
    CHECK(ev.type == PTL_EVENT_PUT_END && ev.hdr_data == 1);
    EXPECT(PtlEQGet(tiny, &ev), PTL_EQ_EMPTY);
    EXPECT(PtlNIStatus(ni, PTL_SR_DROP_COUNT, &sr), PTL_OK);
    CHECK(sr == 0); /* events were lost, messages were not */

    /* ---- a put nobody matches is dropped, counted and refused; also when its
     * acknowledgment may be held back (PTL_ACK_REQ_LAZY): a refusal never is ---- */
    const ptl_ack_req_t asks[2] = {PTL_ACK_REQ, PTL_ACK_REQ_LAZY};
    for (int i = 0; i < 2; i++) {
        EXPECT(PtlPut(src, asks[i], self, 9, 0, 0x99, 0, 0), PTL_OK);
        for (;;) {
            EXPECT(PtlEQWait(eq, &ev), PTL_OK);
            if (ev.type == PTL_EVENT_ACK)
                break;
        }
        CHECK(ev.ni_fail_type == PTL_NI_DROPPED);
        EXPECT(PtlNIStatus(ni, PTL_SR_DROP_COUNT, &sr), PTL_OK);
        CHECK(sr == (ptl_sr_value_t)(i + 1));
    }

    /* ---- get, get-region, get-put, an iovec put: to ourselves, values checked ---- */
    uint8_t tgt[64], got[64];
    for (size_t j = 0; j < sizeof tgt; j++)
        tgt[j] = (uint8_t)(200 - j);
    ptl_handle_me_t gme;
    ptl_handle_md_t gmd, dst;
    EXPECT(PtlMEAttach(ni, 10, any, 0xA, 0, PTL_RETAIN, PTL_INS_AFTER, &gme), PTL_OK);
    ptl_md_t gd = {.start = tgt, .length = sizeof tgt, .threshold = PTL_MD_THRESH_INF,
                   .options = PTL_MD_OP_GET | PTL_MD_OP_PUT | PTL_MD_MANAGE_REMOTE |
                              PTL_MD_EVENT_START_DISABLE,
                   .eq_handle = rq};
    EXPECT(PtlMDAttach(gme, gd, PTL_RETAIN, &gmd), PTL_OK);
    memset(got, 0, sizeof got);
    ptl_md_t dd = {.start = got, .length = sizeof got, .threshold = PTL_MD_THRESH_INF,
                   .options = PTL_MD_EVENT_START_DISABLE, .eq_handle = eq};
    EXPECT(PtlMDBind(ni, dd, PTL_RETAIN, &dst), PTL_OK);
    EXPECT(PtlGet(dst, self, 10, 0, 0xA, 0), PTL_OK);
    wait_kind(eq, PTL_EVENT_REPLY_END, 1);
    CHECK(memcmp(got, tgt, sizeof got) == 0);
    memset(got, 0, sizeof got);
    EXPECT(PtlGetRegion(dst, 8, 16, self, 10, 0, 0xA, 32), PTL_OK);
    wait_kind(eq, PTL_EVENT_REPLY_END, 1);
    CHECK(memcmp(got + 8, tgt + 32, 16) == 0 && got[7] == 0 && got[24] == 0);

    uint8_t newv[8] = {1, 2, 3, 4, 5, 6, 7, 8}, oldv[8] = {0}, was[8];
    memcpy(was, tgt, sizeof was);
    ptl_handle_md_t pmd8, gmd8;
    ptl_md_t p8 = dd, g8 = dd;
    p8.start = newv;
    p8.length = sizeof newv;
    g8.start = oldv;
    g8.length = sizeof oldv;
    EXPECT(PtlMDBind(ni, p8, PTL_RETAIN, &pmd8), PTL_OK);
    EXPECT(PtlMDBind(ni, g8, PTL_RETAIN, &gmd8), PTL_OK);
    EXPECT(PtlGetPut(gmd8, pmd8, self, 10, 0, 0xA, 0, 5), PTL_OK);
    wait_kind(eq, PTL_EVENT_REPLY_END, 1);
    CHECK(memcmp(oldv, was, 8) == 0 && memcmp(tgt, newv, 8) == 0);

    ptl_md_iovec_t segs[2] = {{newv, 8}, {oldv, 8}};
    ptl_md_t iv = dd;
    iv.options = PTL_MD_IOVEC | PTL_MD_EVENT_START_DISABLE;
    iv.start = segs;
    iv.length = 2;
    ptl_handle_md_t ivmd;
    EXPECT(PtlMDBind(ni, iv, PTL_RETAIN, &ivmd), PTL_OK);
    EXPECT(PtlPutRegion(ivmd, 0, 16, PTL_ACK_REQ, self, 10, 0, 0xA, 48, 0), PTL_OK);
    wait_kind(eq, PTL_EVENT_ACK, 1);
    CHECK(memcmp(tgt + 48, newv, 8) == 0 && memcmp(tgt + 56, oldv, 8) == 0);
    int gets = 0, puts = 0;
    while (PtlEQGet(rq, &ev) == PTL_OK) {
        gets += ev.type == PTL_EVENT_GET_END;
        puts += ev.type == PTL_EVENT_PUT_END;
    }
    CHECK(gets == 3 && puts == 1); /* two gets and the get-put; the put */
    EXPECT(PtlMDUnlink(dst), PTL_OK);
    EXPECT(PtlMDUnlink(pmd8), PTL_OK);
    EXPECT(PtlMDUnlink(gmd8), PTL_OK);
    EXPECT(PtlMDUnlink(ivmd), PTL_OK);
    EXPECT(PtlMEUnlink(gme), PTL_OK);

    /* ---- tear-down, and handles after it ---- */
    EXPECT(PtlMEUnlink(rme), PTL_OK);
    EXPECT(PtlMEUnlink(rme), PTL_ME_INVALID);
    EXPECT(PtlMEUnlink(me), PTL_OK);
    EXPECT(PtlMDUnlink(md), PTL_MD_INVALID); /* went with its match entry */
    EXPECT(PtlEQFree(tiny), PTL_OK);
    EXPECT(PtlEQFree(tiny), PTL_EQ_INVALID);
    EXPECT(PtlEQFree(PTL_INVALID_HANDLE), PTL_EQ_INVALID);
    EXPECT(PtlNIFini(PTL_INVALID_HANDLE), PTL_NI_INVALID);
    EXPECT(PtlNIFini(eq), PTL_NI_INVALID);
    EXPECT(PtlNIFini(ni), PTL_OK);
    EXPECT(PtlNIFini(ni), PTL_NI_INVALID);
    EXPECT(PtlGetId(ni, &self), PTL_NI_INVALID);
    EXPECT(PtlEQGet(eq, &ev), PTL_EQ_INVALID);
    EXPECT(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, &ni), PTL_IFACE_INVALID);
    PtlFini();
    EXPECT(PtlGetId(ni, &self), PTL_NO_INIT);

    /* ---- error strings ---- */
    CHECK(strstr(PtlErrorStr(PTL_EQ_DROPPED), "PTL_EQ_DROPPED") != NULL);
    CHECK(strstr(PtlErrorStr(PTL_MD_NO_UPDATE), "PTL_MD_NO_UPDATE") != NULL);
    CHECK(strcmp(PtlErrorStr(9999), "unknown error code") == 0);
    for (int c = 0; c < PTL_MAX_ERRNO; c++)
        CHECK(strncmp(PtlErrorStr((unsigned)c), "PTL_", 4) == 0);

    if (failures) {
        fprintf(stderr, "%d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("OK errors: %d checks\n", checks);
    return 0;
}

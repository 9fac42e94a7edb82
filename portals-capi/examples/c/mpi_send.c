/*
 * "MPI send over Portals" in C, after Brightwell, Riesen and Maccabe's MPI
 * on Portals 3.0: tagged messages, posted receives, and unexpected
 * messages caught by high-water-mark buffers.
 *
 *   cc mpi_send.c $(pkg-config --cflags --libs portals) -o mpi_send
 *   ptlrun -n 2 ./mpi_send
 *
 * Match bits: protocol (3) | context (13) | source rank (16) | tag (32).
 * Rank 1 (the receiver) builds the match list of portal RECV_PT:
 *
 *   posted receives | mark | unexpected buffers
 *
 * A posted receive matches one source and tag (or, with ignore bits, any);
 * the mark matches nothing and separates the posted from the unexpected;
 * each unexpected buffer matches everything and takes messages until its
 * high-water mark (PTL_MD_MAX_SIZE) says the next one might not fit, then
 * unlinks itself, so the next buffer takes over. A receive posted later
 * first searches the events saved from the unexpected buffers, then is
 * inserted before the mark inactive and switched on with PtlMDUpdate only
 * if the event queue is still empty, which closes the race with a message
 * arriving meanwhile. Rank 0 (the sender) puts tagged messages whose bytes
 * are a function of their tag, so every deposit is checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <portals.h>

#define RECV_PT 8
#define CTX 1
#define UX_BUFS 3
#define UX_LEN 512
#define UX_MAX 128
#define MAX_SAVED 64

#define TRY(call)                                                          \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != PTL_OK) {                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
                    PtlErrorStr(rc_));                                     \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                      \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#define SOURCE_MASK 0x0000FFFF00000000ULL
#define TAG_MASK 0x00000000FFFFFFFFULL

static ptl_match_bits_t bits(uint64_t ctx, uint64_t src, uint64_t tag)
{
    return (ctx << 48) | (src << 32) | tag;
}

static uint8_t byte_of(uint32_t tag, size_t j) { return (uint8_t)(tag * 31 + j); }

/* The messages of the first phase, in sending order. */
struct msg { uint32_t ctx, tag, len; };
static const struct msg phase1[] = {
    {CTX, 42, 64},  /* the posted receive for source 0, tag 42 */
    {CTX, 5, 32},   /* the posted wildcard receive (any source, any tag) */
    {CTX, 100, 100}, {CTX, 101, 120}, {CTX, 102, 50}, {CTX, 103, 128},
    {CTX, 104, 80},  {2, 105, 128},   {CTX, 106, 60}, {CTX, 107, 90},
    {CTX, 108, 110}, {CTX, 109, 70},  /* unexpected */
};
#define PHASE1 (sizeof phase1 / sizeof phase1[0])
static const struct msg phase2[] = {{CTX, 99, 96}, {CTX, 200, 40}};
#define PHASE2 (sizeof phase2 / sizeof phase2[0])

static void check_bytes(const uint8_t *p, uint32_t tag, size_t len)
{
    for (size_t j = 0; j < len; j++)
        CHECK(p[j] == byte_of(tag, j));
}

static void sender(ptl_handle_ni_t ni, ptl_process_id_t peer)
{
    static uint8_t buf[4096];
    size_t at = 0;
    ptl_handle_eq_t eq;
    TRY(PtlEQAlloc(ni, 64, PTL_EQ_HANDLER_NONE, &eq));
    ptl_md_t md = {
        .start = buf, .length = sizeof buf, .threshold = PTL_MD_THRESH_INF,
        .options = PTL_MD_EVENT_START_DISABLE, .eq_handle = eq,
    };
    ptl_handle_md_t md_h;
    TRY(PtlMDBind(ni, md, PTL_RETAIN, &md_h));

    for (int phase = 1; phase <= 2; phase++) {
        const struct msg *m = phase == 1 ? phase1 : phase2;
        size_t n = phase == 1 ? PHASE1 : PHASE2;
        TRY(PtlJobBarrier(ni)); /* the receiver's list is ready */
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < m[i].len; j++)
                buf[at + j] = byte_of(m[i].tag, j);
            TRY(PtlPutRegion(md_h, at, m[i].len, PTL_NOACK_REQ, peer, RECV_PT, 0,
                             bits(m[i].ctx, 0, m[i].tag), 0, m[i].tag));
            at += m[i].len;
        }
        for (size_t sent = 0; sent < n;) {
            ptl_event_t ev;
            TRY(PtlEQWait(eq, &ev));
            CHECK(ev.ni_fail_type == PTL_NI_OK);
            if (ev.type == PTL_EVENT_SEND_END)
                sent++;
        }
    }
    TRY(PtlMDUnlink(md_h));
    TRY(PtlEQFree(eq));
}

/* Events saved from the unexpected buffers, as an MPI library keeps them. */
static ptl_event_t saved[MAX_SAVED];
static int nsaved;

static int wait_deposits(ptl_handle_eq_t eq, int want, ptl_event_t *got, int *unlinks)
{
    int n = 0;
    while (n < want) {
        ptl_event_t ev;
        TRY(PtlEQWait(eq, &ev));
        CHECK(ev.ni_fail_type == PTL_NI_OK);
        if (ev.type == PTL_EVENT_PUT_END)
            got[n++] = ev;
        else if (ev.type == PTL_EVENT_UNLINK)
            (*unlinks)++;
    }
    return n;
}

static void receiver(ptl_handle_ni_t ni, ptl_process_id_t sender_id)
{
    static uint8_t ux[UX_BUFS][UX_LEN];
    static uint8_t buf42[64], buf_any[256], buf99[96];
    ptl_handle_eq_t eq;
    TRY(PtlEQAlloc(ni, 256, PTL_EQ_HANDLER_NONE, &eq));
    const ptl_process_id_t any = {PTL_NID_ANY, PTL_PID_ANY};
    const unsigned opts = PTL_MD_OP_PUT | PTL_MD_EVENT_START_DISABLE;

    /* Posted receives: source 0 tag 42; then anything of context CTX. */
    ptl_handle_me_t me42, me_any, mark;
    ptl_handle_md_t md42, md_any, md_ux[UX_BUFS];
    TRY(PtlMEAttach(ni, RECV_PT, sender_id, bits(CTX, 0, 42), 0, PTL_UNLINK,
                    PTL_INS_AFTER, &me42));
    ptl_md_t md = {.start = buf42, .length = sizeof buf42, .threshold = 1,
                   .options = opts, .eq_handle = eq};
    TRY(PtlMDAttach(me42, md, PTL_UNLINK, &md42));
    TRY(PtlMEAttach(ni, RECV_PT, any, bits(CTX, 0, 0), SOURCE_MASK | TAG_MASK,
                    PTL_UNLINK, PTL_INS_AFTER, &me_any));
    md.start = buf_any;
    md.length = sizeof buf_any;
    md.options = opts | PTL_MD_TRUNCATE;
    TRY(PtlMDAttach(me_any, md, PTL_UNLINK, &md_any));

    /* The mark: protocol bits no message carries. */
    TRY(PtlMEAttach(ni, RECV_PT, any, 7ULL << 61, 0, PTL_RETAIN, PTL_INS_AFTER, &mark));

    /* Unexpected buffers with a high-water mark. */
    for (int b = 0; b < UX_BUFS; b++) {
        ptl_handle_me_t me;
        TRY(PtlMEAttach(ni, RECV_PT, any, 0, ~0ULL, PTL_UNLINK, PTL_INS_AFTER, &me));
        ptl_md_t u = {.start = ux[b], .length = UX_LEN, .threshold = PTL_MD_THRESH_INF,
                      .max_size = UX_MAX, .options = opts | PTL_MD_MAX_SIZE,
                      .user_ptr = (void *)(intptr_t)b, .eq_handle = eq};
        TRY(PtlMDAttach(me, u, PTL_UNLINK, &md_ux[b]));
    }

    TRY(PtlJobBarrier(ni));
    ptl_event_t got[PHASE1 + PHASE2];
    int unlinks = 0;
    wait_deposits(eq, PHASE1, got, &unlinks);

    int used[UX_BUFS] = {0};
    for (size_t i = 0; i < PHASE1; i++) {
        const ptl_event_t *ev = &got[i];
        uint32_t tag = (uint32_t)(ev->match_bits & TAG_MASK);
        CHECK(ev->hdr_data == tag);
        CHECK(ev->initiator.nid == sender_id.nid);
        if (tag == 42) {
            CHECK(PtlHandleIsEqual(ev->md_handle, md42) == PTL_OK);
            check_bytes(buf42, 42, ev->mlength);
        } else if (tag == 5) {
            CHECK(PtlHandleIsEqual(ev->md_handle, md_any) == PTL_OK);
            CHECK(ev->mlength == 32);
            check_bytes(buf_any, 5, 32);
        } else {
            /* Unexpected: the data sits in the buffer at the event's offset. */
            int b = (int)(intptr_t)ev->md.user_ptr;
            CHECK(b >= 0 && b < UX_BUFS);
            CHECK(ev->offset + ev->mlength <= UX_LEN);
            used[b]++;
            CHECK(nsaved < MAX_SAVED);
            saved[nsaved++] = *ev;
        }
    }
    CHECK(nsaved == (int)PHASE1 - 2);
    /* The first buffer filled to its high-water mark and unlinked itself. */
    CHECK(used[0] > 0 && used[1] > 0);
    CHECK(unlinks >= 3); /* md42, md_any (threshold 1) and ux[0] */

    /* "Post" receives for the unexpected tags, in any order: each is found
     * among the saved events and copied out of its buffer, intact. */
    for (uint32_t tag = 109; tag >= 100; tag--) {
        int found = 0;
        for (int s = 0; s < nsaved; s++) {
            if ((saved[s].match_bits & TAG_MASK) != tag)
                continue;
            uint32_t ctx = tag == 105 ? 2 : CTX;
            CHECK(saved[s].match_bits == bits(ctx, 0, tag));
            const uint8_t *p = (const uint8_t *)saved[s].md.start + saved[s].offset;
            check_bytes(p, tag, saved[s].mlength);
            found++;
        }
        CHECK(found == 1);
    }
    /* Arrival order is deposit order within a buffer (MPI's non-overtaking). */
    for (int s = 1; s < nsaved; s++)
        if (saved[s].md_handle == saved[s - 1].md_handle)
            CHECK(saved[s].offset > saved[s - 1].offset);

    /* Post a receive for tag 99, which has not arrived: inactive first,
     * then switched on only if nothing arrived meanwhile. */
    ptl_event_t ev;
    while (PtlEQGet(eq, &ev) == PTL_OK) {
        CHECK(ev.type == PTL_EVENT_UNLINK);
    }
    ptl_handle_me_t me99;
    ptl_handle_md_t md99;
    TRY(PtlMEInsert(mark, sender_id, bits(CTX, 0, 99), 0, PTL_UNLINK, PTL_INS_BEFORE, &me99));
    ptl_md_t off = {.start = buf99, .length = sizeof buf99, .threshold = 0,
                    .options = opts, .eq_handle = PTL_EQ_NONE};
    TRY(PtlMDAttach(me99, off, PTL_UNLINK, &md99));
    ptl_md_t on = off;
    on.threshold = 1;
    on.eq_handle = eq;
    ptl_md_t before;
    TRY(PtlMDUpdate(md99, &before, &on, eq));
    CHECK(before.threshold == 0);

    TRY(PtlJobBarrier(ni));
    int unlinks2 = 0;
    wait_deposits(eq, PHASE2, got, &unlinks2);
    for (size_t i = 0; i < PHASE2; i++) {
        uint32_t tag = (uint32_t)(got[i].match_bits & TAG_MASK);
        if (tag == 99) {
            CHECK(PtlHandleIsEqual(got[i].md_handle, md99) == PTL_OK);
            CHECK(got[i].mlength == sizeof buf99);
            check_bytes(buf99, 99, sizeof buf99);
        } else {
            CHECK(tag == 200);
            const uint8_t *p = (const uint8_t *)got[i].md.start + got[i].offset;
            check_bytes(p, 200, got[i].mlength);
        }
    }
    TRY(PtlMEUnlink(mark));
    TRY(PtlEQFree(eq));
}

int main(void)
{
    int max_if;
    ptl_handle_ni_t ni;
    uint32_t rank, size;
    ptl_process_id_t other;

    TRY(PtlInit(&max_if));
    TRY(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, &ni));
    TRY(PtlJobRank(ni, &rank));
    TRY(PtlJobSize(ni, &size));
    CHECK(size == 2);
    TRY(PtlJobProcessId(ni, 1 - rank, &other));
    if (rank == 0)
        sender(ni, other);
    else
        receiver(ni, other);
    TRY(PtlJobBarrier(ni));
    TRY(PtlNIFini(ni));
    PtlFini();
    printf("OK mpi_send rank %u\n", rank);
    return 0;
}

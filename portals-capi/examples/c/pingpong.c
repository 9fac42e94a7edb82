/*
 * Ping-pong between two ranks over the Portals 3.3 API.
 *
 *   cc pingpong.c $(pkg-config --cflags --libs portals) -o pingpong
 *   ptlrun -n 2 ./pingpong [iterations]
 *
 * Rank 0 puts a block of numbers to rank 1; rank 1 checks them, adds one
 * to each and puts them back; rank 0 checks the answer. Each rank receives
 * into a match entry on portal PT whose descriptor manages its offset
 * remotely (every message lands at offset 0) and sends from a bound
 * descriptor whose SEND_END event says the buffer may be reused. Rank 0
 * prints the mean round-trip time (a figure, not a check).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <portals.h>

#define PT 7
#define WORDS 8
#define BITS 0x5151ULL

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

/* Wait for an event of `kind` on `eq`; other kinds are checked and skipped. */
static ptl_event_t wait_for(ptl_handle_eq_t eq, ptl_event_kind_t kind)
{
    ptl_event_t ev;
    for (;;) {
        TRY(PtlEQWait(eq, &ev));
        CHECK(ev.ni_fail_type == PTL_NI_OK);
        if (ev.type == kind)
            return ev;
    }
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int max_if;
    ptl_handle_ni_t ni;
    ptl_process_id_t me, peer;
    uint32_t rank, size;

    TRY(PtlInit(&max_if));
    TRY(PtlNIInit(PTL_IFACE_DEFAULT, PTL_PID_ANY, NULL, NULL, &ni));
    TRY(PtlGetId(ni, &me));
    TRY(PtlJobRank(ni, &rank));
    TRY(PtlJobSize(ni, &size));
    CHECK(size == 2);
    TRY(PtlJobProcessId(ni, 1 - rank, &peer));

    uint64_t recv_buf[WORDS], send_buf[WORDS];
    memset(recv_buf, 0, sizeof recv_buf);

    ptl_handle_eq_t recv_eq, send_eq;
    TRY(PtlEQAlloc(ni, 64, PTL_EQ_HANDLER_NONE, &recv_eq));
    TRY(PtlEQAlloc(ni, 64, PTL_EQ_HANDLER_NONE, &send_eq));

    ptl_handle_me_t me_h;
    TRY(PtlMEAttach(ni, PT, peer, BITS, 0, PTL_RETAIN, PTL_INS_AFTER, &me_h));
    ptl_md_t rmd = {
        .start = recv_buf,
        .length = sizeof recv_buf,
        .threshold = PTL_MD_THRESH_INF,
        .max_size = 0,
        .options = PTL_MD_OP_PUT | PTL_MD_MANAGE_REMOTE,
        .user_ptr = recv_buf,
        .eq_handle = recv_eq,
    };
    ptl_handle_md_t rmd_h;
    TRY(PtlMDAttach(me_h, rmd, PTL_RETAIN, &rmd_h));

    ptl_md_t smd = {
        .start = send_buf,
        .length = sizeof send_buf,
        .threshold = PTL_MD_THRESH_INF,
        .options = PTL_MD_EVENT_START_DISABLE,
        .user_ptr = NULL,
        .eq_handle = send_eq,
    };
    ptl_handle_md_t smd_h;
    TRY(PtlMDBind(ni, smd, PTL_RETAIN, &smd_h));

    /* Both match entries exist before anyone sends. */
    TRY(PtlJobBarrier(ni));

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            for (int k = 0; k < WORDS; k++)
                send_buf[k] = (uint64_t)i * 1000 + k;
            TRY(PtlPut(smd_h, PTL_NOACK_REQ, peer, PT, 0, BITS, 0, i));
            wait_for(send_eq, PTL_EVENT_SEND_END);
            ptl_event_t ev = wait_for(recv_eq, PTL_EVENT_PUT_END);
            CHECK(ev.hdr_data == (uint64_t)i);
            CHECK(ev.mlength == sizeof recv_buf);
            CHECK(ev.initiator.nid == peer.nid && ev.initiator.pid == peer.pid);
            CHECK(ev.md.user_ptr == (void *)recv_buf);
            CHECK(PtlHandleIsEqual(ev.md_handle, rmd_h) == PTL_OK);
            for (int k = 0; k < WORDS; k++)
                CHECK(recv_buf[k] == (uint64_t)i * 1000 + k + 1);
        } else {
            ptl_event_t ev = wait_for(recv_eq, PTL_EVENT_PUT_END);
            CHECK(ev.hdr_data == (uint64_t)i);
            CHECK(ev.match_bits == BITS);
            for (int k = 0; k < WORDS; k++) {
                CHECK(recv_buf[k] == (uint64_t)i * 1000 + k);
                send_buf[k] = recv_buf[k] + 1;
            }
            TRY(PtlPut(smd_h, PTL_NOACK_REQ, peer, PT, 0, BITS, 0, i));
            wait_for(send_eq, PTL_EVENT_SEND_END);
        }
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3;
    if (rank == 0 && iters > 0)
        printf("pingpong: %d round trips of %zu bytes, mean %.1f us\n", iters, sizeof send_buf,
               us / iters);

    /* Nobody's transport closes while a peer still sends to it. */
    TRY(PtlJobBarrier(ni));
    TRY(PtlMDUnlink(smd_h));
    TRY(PtlMEUnlink(me_h));
    TRY(PtlEQFree(send_eq));
    TRY(PtlEQFree(recv_eq));
    TRY(PtlNIFini(ni));
    PtlFini();
    printf("OK pingpong rank %u: %d round trips\n", rank, iters);
    return 0;
}

/*
 * httpc_int.h - httpc's private half: the list of addresses a client takes
 * turns at, and the rule that picks the address of each try of a request
 * (httpc.h says what the rule does). Apart from libcurl, so that the rule
 * is unit tested without a network; only httpc.c and its tests include it.
 *
 * A round is one request's tries: httpc_round_begin picks the first
 * address; after each try httpc_round_step says whether to try again (at
 * r->idx) or to give the caller this try's outcome. httpc_round_again is
 * the same answer without changing anything, for a streamed answer whose
 * body must be either passed on or dropped as it arrives.
 */
#ifndef GPUORCH_UTIL_HTTPC_INT_H
#define GPUORCH_UTIL_HTTPC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/httpc.h"

#define HTTPC_LEARNED_MAX 4u /* addresses learned from redirects, besides the list */
#define HTTPC_HOPS_MAX    4u /* redirects followed in one request */

struct httpc_addrs {
    char given[HTTPC_URL_MAX]; /* the list's entries, each NUL-terminated */
    uint16_t off[HTTPC_ADDRS_MAX];
    char learned[HTTPC_LEARNED_MAX][HTTPC_URL_MAX];
    size_t ngiven, nlearned;
    size_t oldest; /* the learned slot a new address replaces once all are used */
    size_t cur;    /* the address of the last answer, where the next request goes */
    bool advance;  /* the last request broke once sent: the next begins at the next */
};

/* Parses a list (httpc_urls_check's rules) into *a; 0, or GPO_EINVAL with
 * "URL 'ENTRY' (entry K of N): WHY" in err ("URL 'ENTRY': WHY" for one). */
int httpc_addrs_parse(struct httpc_addrs *a, const char *list, char *err, size_t errlen);
/* The addresses in turn order: the list's, then the learned ones. */
size_t httpc_addrs_count(const struct httpc_addrs *a);
const char *httpc_addrs_at(const struct httpc_addrs *a, size_t i);

/* What one try came to. */
enum httpc_try_kind {
    HTTPC_TRY_UNSENT, /* no connection: nothing was sent */
    HTTPC_TRY_BROKEN, /* failed once sent (a timeout mid-answer, a reset) */
    HTTPC_TRY_ANSWER, /* an answer's status (and headers) came */
};
struct httpc_try {
    enum httpc_try_kind kind;
    long status;
    const char *location; /* a 3xx answer's Location, absolute; NULL: none */
    bool follower;        /* the answer said X-Gpuorch-Role: follower */
};
struct httpc_round {
    size_t idx;     /* the address of the next try */
    size_t tried;   /* addresses that could not be reached or were followers */
    size_t hops;    /* redirects followed */
    size_t kept_at; /* the address of the last answer passed over; SIZE_MAX: none */
    bool no_more;   /* set by the caller: the request's time is spent, no more tries */
};

void httpc_round_begin(struct httpc_addrs *a, struct httpc_round *r);
/* Whether the request goes on to another try after t, for path (the
 * request's path and query). Changes nothing. */
bool httpc_round_again(const struct httpc_addrs *a, const struct httpc_round *r,
                       const struct httpc_try *t, const char *path);
/* The same, and moves on: true with r->idx the next try's address (a
 * redirect's origin is learned; r->kept_at names an answer passed over, which
 * the caller keeps); false when the request ends here, with a->cur and
 * a->advance set for the next request: its outcome is t, or, where t is
 * UNSENT and r->kept_at is not SIZE_MAX, the answer kept (every address was
 * a follower or down: the last answer, not the last connection refused). */
bool httpc_round_step(struct httpc_addrs *a, struct httpc_round *r, const struct httpc_try *t,
                      const char *path);

#endif

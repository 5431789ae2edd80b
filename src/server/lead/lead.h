/*
 * lead.h - leadership among several controllers on one shared store: who
 * this process is (its holder id), whether it leads now, the lease thread
 * that keeps the lease while it does, and what a controller that does not
 * lead answers (docs/api.md, "Several controllers").
 *
 * A controller leads from a successful store_lease_acquire (lead_try) until
 * the first of: a renewal or a commit fails with GPO_EFENCED (another took
 * the lease: lead_fenced), or its lease lapses by its own monotonic clock,
 * at the send time of its last successful renewal (or of the acquire) plus
 * the lease less LEAD_MARGIN. From that moment lead_leading is false:
 * handlers answer 503 (lead_admit), the scheduling loop commits nothing,
 * and the main thread, which waits with lead_wait_ms, stops the controller
 * and follows again. On a store that is not shared (SQLite) the lease never
 * lapses and there is no lease thread: only a fenced commit ends it.
 *
 * A follower polls lead_try every lease/5 and answers every request but
 * GET /v1/health with a redirect to the leader it last saw (307) while that
 * leader's lease holds by its last answer, else 503 with Retry-After.
 *
 * Owns: struct lead: the holder id, the lease thread, the leader seen by a
 * follower. Lock: its own mutex (`mu`) guards the thread's state and the
 * leader seen; whether it leads (`epoch`, `until_ns`, `fenced`) is atomics,
 * read by any thread without the lock. Nothing here takes the state lock.
 */
#ifndef GPUORCH_SERVER_LEAD_LEAD_H
#define GPUORCH_SERVER_LEAD_LEAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"
#include "store/store.h"

/* The slack between the lapse by our clock and the store's expiry: clock
 * rates, and the time a commit takes between its check and its end. */
#define LEAD_MARGIN_MS(lease_ms) ((lease_ms) / 10 > 50 ? (lease_ms) / 10 : 50)

struct lead {
    /* Set at lead_init, then read-only (address: under mu). */
    char holder[STORE_LEASE_HOLDER_MAX + 1]; /* "HOST:PID:RANDOM" */
    char address[STORE_LEASE_ADDRESS_MAX + 1];
    int64_t lease_ms;
    int64_t (*mono_ns)(void);

    /* Whether it leads: atomics. */
    struct store *store;           /* borrowed, for the phase (lead_try .. lead_stop) */
    atomic_int_least64_t epoch;    /* the epoch it leads (or last led) under; 0: never */
    atomic_int_least64_t until_ns; /* leads until then (monotonic); INT64_MAX: no lapse */
    atomic_bool leading;           /* between a successful lead_try and a step-down */

    /* Under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the lease thread sleeps on it (CLOCK_MONOTONIC) */
    pthread_t thread;
    bool started, quit;
    char leader[STORE_LEASE_ADDRESS_MAX + 1]; /* a follower's view: "" when none known */
    int64_t leader_epoch;
    int64_t leader_until_ns; /* its lease holds until then by its last answer */
};

/*
 * Makes l for a controller that advertises `address` (its URL, copied) and
 * leads by leases of lease_ms, on the monotonic clock mono_ns (nanoseconds).
 * The holder id is the host name, the PID and random bits. 0; GPO_EINVAL
 * (address too long, lease out of 1..3600000 ms), GPO_EIO (no randomness).
 */
int lead_init(struct lead *l, const char *address, int64_t lease_ms, int64_t (*mono_ns)(void));
/* Replaces the advertised address (the default one, once the port is
 * bound); it goes to the store at the next lead_try. */
void lead_set_address(struct lead *l, const char *address);
/* Frees what l holds; the lease thread must be stopped. NULL is fine. */
void lead_release(struct lead *l);

/*
 * One try at the lease on store s (borrowed until lead_stop): 0 when l
 * leads now (lead_epoch says under which epoch); GPO_EBUSY when another
 * does (the leader it names is kept for lead_leader); GPO_EIO when the
 * store did not answer (the leader seen is kept while its lease holds by
 * its last answer), with store_last_error in err; GPO_EINVAL.
 */
int lead_try(struct lead *l, struct store *s, char *err, size_t errlen);

/* Starts the lease thread (after a successful lead_try, on a shared store;
 * nothing on another): it renews every lease/5 and steps down on
 * GPO_EFENCED. 0 or a negative errno. */
int lead_start(struct lead *l);

/* Stops the lease thread (if started) and, when `release` and l still
 * leads, gives the lease up so that a follower leads at its next try. Ends
 * l's leadership either way. */
void lead_stop(struct lead *l, bool release);

/* Whether l leads now (NULL: a controller without leadership, as in unit
 * tests, always leads). Any thread. */
bool lead_leading(struct lead *l);
/* A commit failed with GPO_EFENCED: another leads; l steps down at once.
 * Any thread; NULL is fine. */
void lead_fenced(struct lead *l);
/* How long the main thread may sleep before it must look at lead_leading
 * again (ms, >= 0; 0 once it no longer leads). */
int64_t lead_wait_ms(struct lead *l);
/* The epoch l leads (or last led) under; 0 when it never did. */
int64_t lead_epoch(struct lead *l);

/* The leader as a follower sees it: its URL into url (len bytes, always
 * terminated; "" when no live leader is known) and its epoch (0: none).
 * Returns whether one is known. */
bool lead_leader(struct lead *l, char *url, size_t len, int64_t *ret_epoch);

/* ---- answers of a controller that does not lead ----------------------- */

/* The path of the one request a follower serves itself. */
#define LEAD_HEALTH_PATH "/v1/health"

/* The follower's routes (GET /v1/health; ctx: the struct lead). */
extern const struct http_route lead_follower_routes[];
extern const size_t lead_nfollower_routes;

/* http_admit_fn of a follower's HTTP server (ctx: the struct lead): every
 * request but GET /v1/health is answered 307 to the leader (path and query
 * kept) or 503 when none is known; both with X-Gpuorch-Role: follower. */
bool lead_follower_admit(struct http_request *req, void *ctx);

/* For a leader's HTTP server: true while l leads or for its health; once it
 * does not, answers 503 + Retry-After: 1 + X-Gpuorch-Role: follower and
 * returns false. NULL leads. */
bool lead_admit(struct lead *l, struct http_request *req);

/* The role fields of GET /v1/health into o ("role", "leader", "epoch"):
 * l leading: "leader", its own address and epoch; else a follower's view.
 * 0 or GPO_ENOMEM. */
int lead_health_fields(struct lead *l, json_t *o);

#endif

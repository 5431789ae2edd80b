/*
 * nodes.h - what the controller knows of each node's agent at run time: its
 * last heartbeat and GPU sample, the GPUs an ended job's processes still
 * occupy (dirty), the revision of what the controller wants of the node,
 * and the agents' long-polls waiting for that revision to move.
 *
 * Owns: the runtimes (struct node_rt), one per node of the configuration,
 * sorted by name, and the suspended long-polls. A node's record (pool, GPUs,
 * state) is the configuration's (struct cluster); this is what changes
 * every second.
 *
 * Lock: the controller's state lock guards everything here. The functions
 * below are called with it held, except nodes_release_waiters and the
 * long-poll timeout, which take it themselves (the lock is borrowed at
 * nodes_init).
 */
#ifndef GPUORCH_SERVER_NODES_NODES_H
#define GPUORCH_SERVER_NODES_NODES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "http/http.h"
#include "proto/proto.h"

struct node_waiter;

struct node_rt {
    char name[CLUSTER_HOST_MAX + 1];
    int64_t last_heartbeat_ms; /* the wall clock's, at the last sign of life: shown */
    /* The monotonic clock's ms at the last sign of life, or NODES_MONO_UNSET
     * (nodes_add: a load or a registration) until nodes_date dates it. The
     * node timeout measures silence on it: a step of the wall clock (NTP, a
     * VM's clock set) must not make every node silent at once, and so end
     * every attempt on the cluster, nor hide a silent one. */
    int64_t seen_mono_ms;
    uint64_t rev;                  /* of what the controller wants of the node */
    struct node_waiter *waiters;   /* long-polls waiting for rev to move */
    bool has_sample;               /* a heartbeat brought GPU figures */
    struct proto_heartbeat sample; /* the last one's (owned) */
    int64_t sample_ms;             /* when it arrived */
    char **dirty;                  /* UUIDs of GPUs an ended job's processes still occupy
                                      (owned); passes offer them no work */
    size_t ndirty, dirty_cap;
    bool lost;           /* marked lost by the node timeout, no heartbeat since */
    bool hold;           /* every GPU held back until the agent says which are clean */
    uint64_t hold_rev;   /* the revision the hold began at */
    bool hold_polled;    /* the agent has applied an answer of hold_rev or later */
    unsigned hold_beats; /* heartbeats with a body since it did */
    /* Loaded from the store, and no heartbeat with a body to this controller
     * yet: a new leader (or a restarted controller) does not know which GPUs
     * the node's ended jobs still occupy, so passes offer it no work until
     * its agent has had a heartbeat's chance to say (nodes_heartbeat). */
    bool unheard;
};

/*
 * The answer to a node's long-poll: what the controller wants of it now
 * (a new reference, or NULL when out of memory). Called under the lock.
 */
typedef json_t *(*nodes_answer_fn)(void *ctx, const struct node_rt *rt);

struct nodes {
    pthread_mutex_t *lock; /* borrowed: the state lock */
    nodes_answer_fn answer;
    void *answer_ctx;
    struct node_rt *v; /* sorted by name */
    size_t n, cap;
};

/* An empty registry whose long-polls are answered by `answer`. */
void nodes_init(struct nodes *ns, pthread_mutex_t *lock, nodes_answer_fn answer, void *ctx);
/* Frees every runtime (waiters must have been released). */
void nodes_release(struct nodes *ns);

/* The runtime of node `name`, or NULL. */
struct node_rt *nodes_find(const struct nodes *ns, const char *name);
/* The runtime of node `name`, made (with revision 1) when new; its heartbeat
 * is now_ms either way, its monotonic mark unset (nodes_date). 0 or
 * GPO_ENOMEM. */
int nodes_add(struct nodes *ns, const char *name, int64_t now_ms);

#define NODES_MONO_UNSET INT64_MIN
/* A sign of life at now_ms (wall) and mono_ms (monotonic). */
void nodes_seen(struct node_rt *rt, int64_t now_ms, int64_t mono_ms);
/* Dates an unset monotonic mark from the wall clock's age of the last sign
 * of life (never negative): what nodes_add left, at the node timeout's next
 * look (the loop's chores, within a pass interval of the load or registration). */
void nodes_date(struct node_rt *rt, int64_t now_ms, int64_t mono_ms);
/* Ms since the last sign of life, by the monotonic clock (by the wall clock
 * while the mark is unset); never negative. */
int64_t nodes_silence_ms(const struct node_rt *rt, int64_t now_ms, int64_t mono_ms);

/* Drops node `name`'s runtime (its record was deleted): its long-polls are
 * answered 404. A node without one is ignored. */
void nodes_remove(struct nodes *ns, const char *name);

/* What the controller wants of node `name` changed: its revision moves and
 * its long-polls are answered. A node without a runtime is ignored. */
void nodes_changed(struct nodes *ns, const char *name);

/*
 * Suspends an agent's long-poll `req` on node rt until its revision moves or
 * wait_ms pass (then it is answered with the same revision). 0, or GPO_*
 * (the server is stopping, out of memory) when it did not suspend; the
 * caller answers then.
 */
int nodes_wait(struct nodes *ns, struct node_rt *rt, struct http_request *req, unsigned wait_ms);

/* Answers every long-poll with 503 (the server is stopping). Takes the lock. */
void nodes_release_waiters(struct nodes *ns);

/*
 * A node whose attempts the controller ended without its agent (the node
 * timeout's NODE_FAIL), or that it knows nothing of since such an end (a
 * node stored down at start), may still run their processes: a rejoining
 * agent kills them only once it learns they ended, within their kill grace.
 * Until the agent has said which GPUs they still occupy, every GPU of the
 * node is held (passes offer them nothing):
 *
 *   nodes_hold      the hold begins (again): the revision moves, so that
 *                   every answer from then on lacks the ended attempts
 *   nodes_polled    a long-poll with since=REV: the agent has applied the
 *                   answer of REV (it polls again only after applying one)
 *   nodes_heartbeat the second heartbeat with a body after such a poll ends
 *                   the hold: it was built after the agent applied that
 *                   answer (one heartbeat is in flight at a time), so its
 *                   dirty GPUs name every GPU the ended attempts hold (the
 *                   agent names those of attempts it stops, attempts.h)
 */
void nodes_hold(struct nodes *ns, const char *name);
void nodes_polled(struct node_rt *rt, uint64_t since);

/* What a heartbeat changed (flags of nodes_heartbeat's result). */
enum nodes_beat {
    NODES_BEAT_BACK = 1 << 0,     /* the first heartbeat of a node marked lost */
    NODES_BEAT_RELEASED = 1 << 1, /* it ended the node's hold */
    NODES_BEAT_HEARD = 1 << 2,    /* the first with a body of a node loaded unheard */
};

/* A heartbeat arrived at now_ms (mono_ms on the monotonic clock), with its
 * body (its contents taken and *hb zeroed; NULL for none): the node's
 * sample, and its dirty GPUs (the agent names them in every heartbeat until
 * they clear). Returns enum nodes_beat flags: the caller wakes the loop on
 * any. */
unsigned nodes_heartbeat(struct node_rt *rt, struct proto_heartbeat *hb, int64_t now_ms,
                         int64_t mono_ms);

/* Adds UUIDs to the node's dirty set (no duplicates): held back from an
 * attempt's final report on, not from the agent's next heartbeat. Out of
 * memory leaves some out (the next heartbeat names them again). */
void nodes_dirty_add(struct node_rt *rt, char *const *uuids, size_t n);

/* Whether GPU `uuid` of the node is dirty. */
bool nodes_is_dirty(const struct node_rt *rt, const char *uuid);

#endif

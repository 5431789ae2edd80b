/*
 * auth.h - who may do what: API tokens (looked up in the store by their
 * SHA-256), the agents' join token, the key of the nodes' log tokens, the
 * admin bootstrapped at first start, and which teams' data a user may see
 * (the cluster's private_data setting). On a shared store (several
 * controllers) the join token and both keys are the first leader's, kept
 * in the store's meta and written into each later leader's DATA.
 *
 * Owns: struct auth (its secrets, read or made at start; immutable after).
 * No lock: nothing here changes after auth_start, and the store's reads are
 * its own business. HTTP-free: the API's authorize hook turns a result into
 * its 401 or 403.
 */
#ifndef GPUORCH_SERVER_AUTH_AUTH_H
#define GPUORCH_SERVER_AUTH_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* A user as a request is authorized (from the token's row). */
struct auth_user {
    int64_t id;
    char name[64];
    char team[64];      /* "" when none */
    char unix_user[33]; /* "" when none */
    bool admin;
    bool metrics; /* role "metrics": GET /metrics and nothing else */
};

/* What a route needs. */
enum auth_need {
    AUTH_NEED_USER,    /* any user's token */
    AUTH_NEED_ADMIN,   /* an admin's token */
    AUTH_NEED_AGENT,   /* the join token, and only it */
    AUTH_NEED_METRICS, /* an admin's token, or one of a user with role "metrics" */
};

/* How a check came out. */
enum auth_result {
    AUTH_OK,
    AUTH_NO_TOKEN,     /* no bearer token: 401 */
    AUTH_BAD_TOKEN,    /* malformed, unknown or revoked (or not the join token): 401 */
    AUTH_NOT_AGENT,    /* a user's valid token on an agent route: 403 */
    AUTH_NOT_ADMIN,    /* a member's token on an admin route: 403 */
    AUTH_NOT_METRICS,  /* a member's token on GET /metrics: 403 */
    AUTH_ONLY_METRICS, /* a metrics user's token on any other route: 403 */
};

/* The bearer token nodes' log servers accept: HMAC-SHA-256 of the node's
 * name under the logs key, in hex. */
#define AUTH_LOG_TOKEN_LEN 64

struct auth {
    struct store *store; /* borrowed */
    char data_dir[4096];
    char admin_token_path[4200];
    uint8_t join_hash[32]; /* SHA-256 of the join token */
    uint8_t logs_key[32];  /* DATA/logs.key */
    uint8_t steps_key[32]; /* DATA/steps.key: step credentials (steps.c) */
};

/*
 * At start: DATA/join.token, DATA/logs.key and DATA/steps.key (read, or made at first
 * start, mode 0600), and at first start (no user in the store) the user
 * "admin" (role admin, its jobs running as the account that runs the
 * controller) and its token in DATA/admin.token. 0, or an error with a
 * message naming the file.
 */
int auth_start(struct auth *a, struct store *store, const char *data_dir, int64_t now_ms, char *err,
               size_t errlen);

/*
 * Checks `bearer` (the request's token; NULL: none) for a route that needs
 * `need`. Tokens are looked up by their SHA-256, through the store's index:
 * only the hash of a 256-bit random secret is ever compared, so the
 * lookup's timing tells nothing about a token; a malformed token is refused
 * before any lookup. AUTH_OK fills *ret_user (for user routes; untouched on
 * an agent route).
 */
enum auth_result auth_check(const struct auth *a, const char *bearer, enum auth_need need,
                            struct auth_user *ret_user);

/* May `u` act on jobs of `team` (cancel, read logs, submit)? Admins: all;
 * members: their team. */
bool auth_user_may(const struct auth_user *u, const char *team);
/* The one team whose data of a kind `u` sees, where `kept_private` says
 * whether the cluster keeps that kind private (cluster.h: private_data):
 * NULL (every team) for an admin or an open kind, else the member's team
 * ("" when it has none, which matches no team). */
const char *auth_visible_team(const struct auth_user *u, bool kept_private);
/* Whether `u` sees data of `team` (NULL: of no team) of such a kind. */
bool auth_user_sees(const struct auth_user *u, bool kept_private, const char *team);

/* Node `name`'s log token (AUTH_LOG_TOKEN_LEN hex digits and a NUL): a
 * restart issues the same tokens, and one node's token opens no other node. */
void auth_node_log_token(const struct auth *a, const char *name, char out[AUTH_LOG_TOKEN_LEN + 1]);

/* Attempt (job, attempt)'s step credential (steps.c): HMAC-SHA-256 of
 * "JOB:ATTEMPT" under DATA/steps.key, AUTH_STEP_KEY_LEN lowercase hex
 * digits and a NUL. Every rank's agent gets it with the attempt and rank
 * 0's program gets it as GPUORCH_STEP_KEY; an agent runs a step's tasks
 * only for a request that presents it. A restart issues the same
 * credentials; another attempt's, of the same job too, differs. */
#define AUTH_STEP_KEY_LEN 64
void auth_step_key(const struct auth *a, int64_t job, int64_t attempt,
                   char out[AUTH_STEP_KEY_LEN + 1]);

#endif

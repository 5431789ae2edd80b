/*
 * steps.c - the step credential of an attempt (auth.h: auth_step_key).
 *
 * Derived, not stored: the controller recomputes it for every assignments
 * answer, so a restart needs nothing but DATA/steps.key. The key is its own
 * file, apart from the logs key, so that no message that key signs (a
 * node's name) is ever a step credential.
 */
#include <inttypes.h>
#include <stdio.h>

#include <sodium.h>

#include "server/auth/auth.h"
#include "base/banned.h"

void auth_step_key(const struct auth *a, int64_t job, int64_t attempt,
                   char out[AUTH_STEP_KEY_LEN + 1])
{
    char msg[48];
    int n = snprintf(msg, sizeof(msg), "%" PRId64 ":%" PRId64, job, attempt);
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256(mac, (const unsigned char *)msg, (unsigned long long)n, a->steps_key);
    sodium_bin2hex(out, AUTH_STEP_KEY_LEN + 1, mac, sizeof(mac));
}

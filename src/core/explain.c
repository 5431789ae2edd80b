#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "core/explain.h"
#include "base/banned.h"

static const struct {
    int final;
    const char *code;
    const char *text;
} reasons[SCHED_REASON_COUNT] = {
#define SCHED_REASON_ROW(name, fin, c, t) [SCHED_REASON_##name] = {fin, c, t},
    SCHED_REASON_MAP(SCHED_REASON_ROW)
#undef SCHED_REASON_ROW
};

int explain_is_final(enum sched_reason reason)
{
    return (unsigned)reason < SCHED_REASON_COUNT && reasons[reason].final;
}

const char *explain_code(enum sched_reason reason)
{
    return (unsigned)reason < SCHED_REASON_COUNT ? reasons[reason].code : "unknown";
}

/* A bounded writer that counts what it could not write, as snprintf does. */
struct out {
    char *buf;
    size_t size;
    size_t len;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->len < o->size) {
        size_t room = o->size - 1 - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void put_str(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_u64(struct out *o, uint64_t v)
{
    char digits[24];
    size_t n = 0;
    do {
        digits[sizeof(digits) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, digits + sizeof(digits) - n, n);
}

/* A milli-GPU count as GPUs: "8", "0.25". */
static void put_gpus(struct out *o, int64_t milli)
{
    uint64_t m = milli > 0 ? (uint64_t)milli : 0;
    put_u64(o, m / 1000);
    if (m % 1000) {
        char frac[4] = {(char)('0' + m % 1000 / 100), (char)('0' + m % 100 / 10),
                        (char)('0' + m % 10), '\0'};
        for (int k = 2; k > 0 && frac[k] == '0'; k--)
            frac[k] = '\0';
        put_str(o, ".");
        put_str(o, frac);
    }
}

static const char *name_or(const char *name, const char *fallback)
{
    return name ? name : fallback;
}

int explain_format(const struct sched_cluster *c, const struct sched_wait *w, char *buf,
                   size_t size)
{
    if (!c || !w || (!buf && size) || (unsigned)w->reason >= SCHED_REASON_COUNT)
        return GPO_EINVAL;
    struct out o = {.buf = buf, .size = size};
    for (const char *p = reasons[w->reason].text; *p; p++) {
        if (*p != '%' || !p[1]) {
            put(&o, p, 1);
            continue;
        }
        switch (*++p) {
        case 'T':
            put_str(&o, w->team < c->nteams ? name_or(c->teams[w->team].name, "?") : "?");
            break;
        case 'P':
            put_str(&o, w->pool < c->npools ? name_or(c->pools[w->pool].name, "?") : "any");
            break;
        case 'G':
            put_str(&o, w->gpu_type < c->ngpu_types ? name_or(c->gpu_types[w->gpu_type].name, "?")
                                                    : "any");
            break;
        case 'g': /* " of type X", or nothing when the job takes any type */
            if (w->gpu_type < c->ngpu_types) {
                put_str(&o, " of type ");
                put_str(&o, name_or(c->gpu_types[w->gpu_type].name, "?"));
            }
            break;
        case 'p': /* " in pool X", or nothing when the job takes any pool */
            if (w->pool < c->npools) {
                put_str(&o, " in pool ");
                put_str(&o, name_or(c->pools[w->pool].name, "?"));
            }
            break;
        case 'J':
            put_u64(&o, w->other_job);
            break;
        case 'F':
            put_str(&o, w->field ? w->field : "?");
            break;
        case 'n': /* " (need N, M free)", or nothing when the need is not a count */
            if (w->need_milli > 0) {
                put_str(&o, " (need ");
                put_gpus(&o, w->need_milli);
                put_str(&o, ", ");
                put_gpus(&o, w->free_milli);
                put_str(&o, " free)");
            }
            break;
        case 'N':
            put_u64(&o, w->nodes.need);
            break;
        case 'H':
            put_u64(&o, w->nodes.have);
            break;
        case 'h':
            put_str(&o, w->nodes.have == 1 ? "has" : "have");
            break;
        case 'k':
            put_u64(&o, w->nodes.gpus);
            break;
        case 'M':   /* the MIG profile */
        case 'y': { /* " (its GPU type)" */
            const struct mig_type *t = mig_type_at(w->mig.type);
            bool ok = t && w->mig.profile < t->nprofiles;
            if (*p == 'M') {
                put_str(&o, ok ? t->profiles[w->mig.profile].name : "?");
            } else if (ok) {
                put_str(&o, " (");
                put_str(&o, t->name);
                put_str(&o, ")");
            }
            break;
        }
        case 'i':
            put_u64(&o, w->mig.free);
            put_str(&o, " of ");
            put_u64(&o, w->mig.total);
            put_str(&o, " free");
            break;
        default:
            put(&o, p - 1, 2);
        }
    }
    if (size)
        buf[o.len < size ? o.len : size - 1] = '\0';
    return o.len > INT32_MAX ? GPO_ERANGE : (int)o.len;
}

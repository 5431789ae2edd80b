/*
 * mig.c - the MIG catalogue, layouts and placement (core/mig.h); the
 * planner is in mig_plan.c.
 *
 * Sources of the catalogue:
 *  - Names, compute slices, memory fractions and instance counts: NVIDIA's
 *    MIG user guide, "Supported MIG Profiles"
 *    (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
 *    supported-mig-profiles.html): the A100 table (1g.5gb 1/8 of memory,
 *    7 instances; 1g.10gb 4; 2g.10gb 3; 3g.20gb 4/8 of memory, 2; 4g.20gb 1;
 *    7g.40gb 1; a single 1g profile can include the media extensions) and
 *    the renames for 80 GB parts, H100 and H200 (1g.18gb, 1g.35gb, 2g.35gb,
 *    3g.71gb, 4g.71gb, 7g.141gb).
 *  - Placements: the guide's `nvidia-smi mig -lgipp` listing: profile 19
 *    {0,1,2,3,4,5,6}:1, 20 the same, 15 {0,2,4,6}:2, 14 {0,2,4}:2, 9 {0,4}:4,
 *    5 {0}:4, 0 {0}:8; the same on A100, H100 and H200 (eight memory slots).
 *  - Profile ids (the ID column of `nvidia-smi mig -lgip`, what
 *    nvmlDeviceCreateGpuInstance takes): 1g 19, 1g+me 20, the two-slot 1g 15,
 *    2g 14, 3g 9, 4g 5, 7g 0, on every type here. Profile indices:
 *    nvml.h's NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0, _2_SLICE 0x1, _3_SLICE
 *    0x2, _4_SLICE 0x3, _7_SLICE 0x4, _1_SLICE_REV1 0x7 (+me), _1_SLICE_REV2
 *    0x9 (the two-slot 1g); NVIDIA/go-nvml's pkg/nvml/mock/shared/gpus
 *    (a100.go, h100.go, h200.go) maps the same indices to the same profiles.
 *  - Memory (MiB, as the driver gives it, from published `nvidia-smi mig
 *    -lgip` output, GiB x 1024): A100-40GB 4.75 / 9.75 / 19.62 / 39.50;
 *    A100-80GB 9.50 / 19.50 / 39.25 / 79.00; H100-80GB 9.75 / 19.62 / 39.50
 *    / 79.25; H200-141GB 16.00 (1g.18gb), 32.50 (2g.35gb), 140.00
 *    (7g.141gb). Two-slot profiles have the memory of the other two-slot
 *    profile of their type, as on every listing; H200's four-slot profiles
 *    (3g.71gb, 4g.71gb) were in no listing found and are set to twice the
 *    two-slot memory (65.00 GiB), a lower bound. Drivers differ by a few
 *    hundred MiB; the node's own report is to win over these.
 *  - Named layouts: NVIDIA/mig-parted, deployments/systemd/
 *    config-default.yaml: all-disabled, all-enabled, all-<profile> (e.g.
 *    all-1g.10gb: 7 on H100-80GB and A100-80GB, 4 on A100-40GB; all-3g.40gb:
 *    2), and all-balanced per device: A100-40GB 2 x 1g.5gb + 2g.10gb +
 *    3g.20gb; H100-80GB and A100-80GB 2 x 1g.10gb + 2g.20gb + 3g.40gb;
 *    H200 141GB 2 x 1g.18gb + 2g.35gb + 3g.71gb.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/mig.h"
#include "core/mig_int.h"
#include "base/banned.h"

/* The seven profile shapes, the same on every type here (the -lgipp
 * listing above); only the names and the memory differ. */
#define SHAPE(id, idx, sl, sz, me, max, ...)                                                       \
    .nvml_id = id, .nvml_index = idx, .slices = sl, .size = sz, .media = me, .max_count = max,     \
    .nstarts = sizeof((uint8_t[]){__VA_ARGS__}), .starts = {__VA_ARGS__}
// clang-format off
#define ROW(nm, mem, ...) {.name = nm, .mem_mib = mem, SHAPE(__VA_ARGS__)}
#define P_1G(nm, mem)   ROW(nm, mem, 19, 0x0, 1, 1, false, 7, 0, 1, 2, 3, 4, 5, 6)
#define P_1GME(nm, mem) ROW(nm, mem, 20, 0x7, 1, 1, true, 1, 0, 1, 2, 3, 4, 5, 6)
#define P_1G2(nm, mem)  ROW(nm, mem, 15, 0x9, 1, 2, false, 4, 0, 2, 4, 6)
#define P_2G(nm, mem)   ROW(nm, mem, 14, 0x1, 2, 2, false, 3, 0, 2, 4)
#define P_3G(nm, mem)   ROW(nm, mem, 9, 0x2, 3, 4, false, 2, 0, 4)
#define P_4G(nm, mem)   ROW(nm, mem, 5, 0x3, 4, 4, false, 1, 0)
#define P_7G(nm, mem)   ROW(nm, mem, 0, 0x4, 7, 8, false, 1, 0)

/* Smallest first: by (size, slices, media). */
static const struct mig_profile a100_40gb[] = {
    P_1G("1g.5gb", 4864),   P_1GME("1g.5gb+me", 4864), P_1G2("1g.10gb", 9984),
    P_2G("2g.10gb", 9984),  P_3G("3g.20gb", 20096),    P_4G("4g.20gb", 20096),
    P_7G("7g.40gb", 40448),
};
static const struct mig_profile a100_80gb[] = {
    P_1G("1g.10gb", 9728),  P_1GME("1g.10gb+me", 9728), P_1G2("1g.20gb", 19968),
    P_2G("2g.20gb", 19968), P_3G("3g.40gb", 40192),     P_4G("4g.40gb", 40192),
    P_7G("7g.80gb", 80896),
};
static const struct mig_profile h100_80gb[] = {
    P_1G("1g.10gb", 9984),  P_1GME("1g.10gb+me", 9984), P_1G2("1g.20gb", 20096),
    P_2G("2g.20gb", 20096), P_3G("3g.40gb", 40448),     P_4G("4g.40gb", 40448),
    P_7G("7g.80gb", 81152),
};
static const struct mig_profile h200_141gb[] = {
    P_1G("1g.18gb", 16384), P_1GME("1g.18gb+me", 16384), P_1G2("1g.35gb", 33280),
    P_2G("2g.35gb", 33280), P_3G("3g.71gb", 66560),      P_4G("4g.71gb", 66560),
    P_7G("7g.141gb", 143360),
};
// clang-format on

#define NPROF(a) ((uint8_t)(sizeof(a) / sizeof((a)[0])))

static const struct mig_type types[MIG_NTYPES] = {
    {.name = "A100-40GB",
     .id = 0,
     .mem_mib = 40960,
     .nprofiles = NPROF(a100_40gb),
     .profiles = a100_40gb},
    {.name = "A100-80GB",
     .id = 1,
     .mem_mib = 81920,
     .nprofiles = NPROF(a100_80gb),
     .profiles = a100_80gb},
    {.name = "H100-80GB",
     .id = 2,
     .mem_mib = 81920,
     .nprofiles = NPROF(h100_80gb),
     .profiles = h100_80gb},
    {.name = "H200-141GB",
     .id = 3,
     .mem_mib = 144384,
     .nprofiles = NPROF(h200_141gb),
     .profiles = h200_141gb},
};

/* ---- text ------------------------------------------------------------- */

void mig_out_init(struct mig_out *o, char *buf, size_t size)
{
    o->buf = size ? buf : NULL;
    o->size = o->buf ? size : 0;
    o->len = 0;
    if (o->buf)
        o->buf[0] = '\0';
}

static void out_put(struct mig_out *o, const char *s, size_t n)
{
    if (o->len + 1 < o->size) {
        size_t room = o->size - 1 - o->len;
        size_t k = n < room ? n : room;
        memcpy(o->buf + o->len, s, k);
        o->buf[o->len + k] = '\0';
    }
    o->len += n;
}

static void out_uint(struct mig_out *o, unsigned long long v)
{
    char d[24];
    size_t n = 0;
    do {
        d[sizeof(d) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out_put(o, d + sizeof(d) - n, n);
}

void mig_outf(struct mig_out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            out_put(o, p, 1);
            continue;
        }
        p++;
        if (*p == 's') {
            const char *s = va_arg(ap, const char *);
            s = s ? s : "(null)";
            out_put(o, s, strlen(s));
        } else if (*p == 'u') {
            out_uint(o, va_arg(ap, unsigned));
        } else if (*p == 'd') {
            int v = va_arg(ap, int);
            if (v < 0)
                out_put(o, "-", 1);
            out_uint(o, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
        } else if (p[0] == 'l' && p[1] == 'l' && p[2] == 'u') {
            p += 2;
            out_uint(o, va_arg(ap, unsigned long long));
        } else if (*p == '%') {
            out_put(o, "%", 1);
        } else {
            break; /* an unknown directive ends the text: a programmer error */
        }
    }
    va_end(ap);
}

static unsigned char lower(char c)
{
    unsigned char u = (unsigned char)c;
    return u >= 'A' && u <= 'Z' ? (unsigned char)(u | 0x20) : u;
}

bool mig_prefix_eq(const char *a, const char *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!b[k] || lower(a[k]) != lower(b[k]))
            return false;
    return true;
}

bool mig_name_eq(const char *a, const char *b, size_t n)
{
    return mig_prefix_eq(a, b, n) && b[n] == '\0';
}

/* "a, b or c" over the type's profile names. */
static void out_profiles(struct mig_out *o, const struct mig_type *t)
{
    for (unsigned k = 0; k < t->nprofiles; k++)
        mig_outf(o, "%s%s",
                 k == 0                  ? ""
                 : k + 1 == t->nprofiles ? " or "
                                         : ", ",
                 t->profiles[k].name);
}

/* ---- the catalogue ---------------------------------------------------- */

const struct mig_type *mig_type_at(unsigned id)
{
    return id < MIG_NTYPES ? &types[id] : NULL;
}

const struct mig_type *mig_type_find(const char *name)
{
    for (unsigned k = 0; name && k < MIG_NTYPES; k++)
        if (mig_name_eq(name, types[k].name, strlen(name)))
            return &types[k];
    return NULL;
}

int mig_type_lookup(const char *name, const struct mig_type **ret, char *err, size_t errsize)
{
    const struct mig_type *t = mig_type_find(name);
    if (t) {
        *ret = t;
        return 0;
    }
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    mig_outf(&o, "GPU type \"%s\" has no MIG; MIG GPU types: ", name ? name : "");
    for (unsigned k = 0; k < MIG_NTYPES; k++)
        mig_outf(&o, "%s%s", k ? ", " : "", types[k].name);
    return GPO_ENOENT;
}

/* `name` without a "MIG " or "mig-" prefix; *len its length without a
 * ".me" suffix, *dotme whether it had one. */
static const char *profile_key(const char *name, size_t *len, bool *dotme)
{
    if ((lower(name[0]) == 'm' && lower(name[1]) == 'i' && lower(name[2]) == 'g') &&
        (name[3] == ' ' || name[3] == '-'))
        name += 4;
    size_t n = strlen(name);
    *dotme = n > 3 && name[n - 3] == '.' && lower(name[n - 2]) == 'm' && lower(name[n - 1]) == 'e';
    *len = *dotme ? n - 3 : n;
    return name;
}

static int profile_find(const struct mig_type *t, const char *name)
{
    if (!t || !name)
        return GPO_ENOENT;
    size_t len;
    bool dotme;
    const char *key = profile_key(name, &len, &dotme);
    for (unsigned k = 0; k < t->nprofiles; k++) {
        const char *pn = t->profiles[k].name;
        if (!dotme && mig_name_eq(key, pn, len))
            return (int)k;
        /* "1g.10gb.me" is mig-parted's spelling of "1g.10gb+me" */
        if (dotme && t->profiles[k].media && mig_prefix_eq(key, pn, len) &&
            strcmp(pn + len, "+me") == 0)
            return (int)k;
    }
    return GPO_ENOENT;
}

int mig_profile_lookup(const struct mig_type *t, const char *name, char *err, size_t errsize)
{
    int p = profile_find(t, name);
    if (p >= 0)
        return p;
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    if (!t) {
        mig_outf(&o, "no GPU type given for MIG profile \"%s\"", name ? name : "");
        return GPO_EINVAL;
    }
    mig_outf(&o, "no MIG profile \"%s\" on %s; its profiles: ", name ? name : "", t->name);
    out_profiles(&o, t);
    return GPO_ENOENT;
}

int mig_profile_by_nvml_id(const struct mig_type *t, unsigned nvml_id)
{
    for (unsigned k = 0; t && k < t->nprofiles; k++)
        if (t->profiles[k].nvml_id == nvml_id)
            return (int)k;
    return GPO_ENOENT;
}

int mig_profile_check(const char *name, char *err, size_t errsize)
{
    for (unsigned k = 0; k < MIG_NTYPES; k++)
        if (profile_find(&types[k], name) >= 0)
            return 0;
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    mig_outf(&o, "no MIG profile \"%s\" on any GPU type; known: ", name ? name : "");
    for (unsigned k = 0; k < MIG_NTYPES; k++) {
        mig_outf(&o, "%s%s ", k ? "; " : "", types[k].name);
        out_profiles(&o, &types[k]);
    }
    return GPO_ENOENT;
}

int mig_profile_for_mem(const struct mig_type *t, uint64_t mem_mib, char *err, size_t errsize)
{
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    if (!t) {
        mig_outf(&o, "no GPU type given for a MIG memory request");
        return GPO_EINVAL;
    }
    if (mem_mib == 0) {
        mig_outf(&o, "GPU memory: expected more than 0 MiB");
        return GPO_EINVAL;
    }
    int best = -1;
    for (unsigned k = 0; k < t->nprofiles; k++) {
        const struct mig_profile *p = &t->profiles[k];
        if (p->media || p->mem_mib < mem_mib)
            continue;
        if (best < 0 || p->mem_mib < t->profiles[best].mem_mib ||
            (p->mem_mib == t->profiles[best].mem_mib && p->slices < t->profiles[best].slices))
            best = (int)k;
    }
    if (best >= 0)
        return best;
    const struct mig_profile *big = &t->profiles[t->nprofiles - 1];
    mig_outf(&o, "GPU memory %llu MiB: larger than the largest %s MIG profile, %s (%u MiB)",
             (unsigned long long)mem_mib, t->name, big->name, (unsigned)big->mem_mib);
    return GPO_ENOENT;
}

int64_t mig_profile_charge_milli(const struct mig_type *t, unsigned profile)
{
    if (!t || profile >= t->nprofiles)
        return 0;
    return (int64_t)t->profiles[profile].size * 1000 / MIG_SLOTS;
}

int mig_request_resolve(const struct mig_type *t, const struct mig_request *req)
{
    if (!t || !req)
        return GPO_ENOENT;
    if (req->profile)
        return profile_find(t, req->profile);
    int p = mig_profile_for_mem(t, req->mem_mib, NULL, 0);
    return p >= 0 ? p : GPO_ENOENT;
}

/* ---- layouts ---------------------------------------------------------- */

bool mig_start_ok(const struct mig_profile *p, unsigned start)
{
    for (unsigned k = 0; k < p->nstarts; k++)
        if (p->starts[k] == start)
            return true;
    return false;
}

uint32_t mig_capacity(const struct mig_type *t, uint8_t free_mask)
{
    uint32_t score = 0;
    for (int k = t->nprofiles - 1; k >= 0; k--) {
        const struct mig_profile *p = &t->profiles[k];
        if (p->media)
            continue;
        /* Same-size intervals at fixed starts: taking the lowest that fits
         * each time gives the most. */
        uint8_t left = free_mask;
        uint32_t count = 0;
        for (unsigned s = 0; s < p->nstarts; s++) {
            uint8_t m = mig_span(p->starts[s], p->size);
            if ((left & m) == m) {
                left &= (uint8_t)~m;
                count++;
            }
        }
        score = score << 3 | count;
    }
    return score;
}

int mig_best_start(const struct mig_type *t, unsigned profile, uint8_t occ, uint32_t *ret_score)
{
    const struct mig_profile *p = &t->profiles[profile];
    int best = -1;
    uint32_t best_score = 0;
    for (unsigned s = 0; s < p->nstarts; s++) {
        uint8_t m = mig_span(p->starts[s], p->size);
        if (occ & m)
            continue;
        uint32_t score = mig_capacity(t, (uint8_t) ~(occ | m));
        if (best < 0 || score > best_score) {
            best = p->starts[s];
            best_score = score;
        }
    }
    if (best >= 0 && ret_score)
        *ret_score = best_score;
    return best;
}

uint8_t mig_layout_slots(const struct mig_type *t, const struct mig_instance *inst, size_t n)
{
    uint8_t occ = 0;
    for (size_t k = 0; t && k < n; k++)
        if (inst[k].profile < t->nprofiles && inst[k].start < MIG_SLOTS)
            occ |= mig_span(inst[k].start, t->profiles[inst[k].profile].size);
    return occ;
}

/* "1g.10gb at slot 3" or "2g.20gb at slots 0-1". */
static void out_instance(struct mig_out *o, const struct mig_type *t, const struct mig_instance *in)
{
    const struct mig_profile *p = &t->profiles[in->profile];
    if (p->size == 1)
        mig_outf(o, "%s at slot %u", p->name, (unsigned)in->start);
    else
        mig_outf(o, "%s at slots %u-%u", p->name, (unsigned)in->start,
                 (unsigned)in->start + p->size - 1);
}

static void out_starts(struct mig_out *o, const struct mig_profile *p)
{
    mig_outf(o, "%s starts at slot ", p->name);
    for (unsigned k = 0; k < p->nstarts; k++)
        mig_outf(o, "%s%u",
                 k == 0                ? ""
                 : k + 1 == p->nstarts ? " or "
                                       : ", ",
                 (unsigned)p->starts[k]);
}

int mig_layout_check(const struct mig_type *t, const struct mig_instance *inst, size_t n, char *err,
                     size_t errsize)
{
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    if (!t) {
        mig_outf(&o, "a MIG layout needs a GPU type with MIG");
        return GPO_EINVAL;
    }
    if (n > MIG_MAX_INSTANCES) {
        mig_outf(&o, "the layout has %llu instances; a %s holds at most %u", (unsigned long long)n,
                 t->name, (unsigned)MIG_MAX_INSTANCES);
        return GPO_EINVAL;
    }
    unsigned count[MIG_MAX_PROFILES] = {0};
    for (size_t k = 0; k < n; k++) {
        const struct mig_instance *in = &inst[k];
        if (in->profile >= t->nprofiles) {
            mig_outf(&o, "instance %u: profile index %u is not a %s profile (0-%u)", (unsigned)k,
                     (unsigned)in->profile, t->name, (unsigned)t->nprofiles - 1);
            return GPO_EINVAL;
        }
        const struct mig_profile *p = &t->profiles[in->profile];
        if (!mig_start_ok(p, in->start)) {
            mig_outf(&o, "instance %u (%s at slot %u): ", (unsigned)k, p->name,
                     (unsigned)in->start);
            out_starts(&o, p);
            return GPO_EINVAL;
        }
        uint8_t m = mig_span(in->start, p->size);
        for (size_t j = 0; j < k; j++) {
            const struct mig_instance *other = &inst[j];
            if (mig_span(other->start, t->profiles[other->profile].size) & m) {
                mig_outf(&o, "instance %u (", (unsigned)k);
                out_instance(&o, t, in);
                mig_outf(&o, "): overlaps instance %u (", (unsigned)j);
                out_instance(&o, t, other);
                mig_outf(&o, ")");
                return GPO_EINVAL;
            }
        }
        if (++count[in->profile] > p->max_count) {
            mig_outf(&o, "instance %u (", (unsigned)k);
            out_instance(&o, t, in);
            mig_outf(&o, "): a %s holds at most %u %s instance%s", t->name, (unsigned)p->max_count,
                     p->name, p->max_count == 1 ? "" : "s");
            return GPO_EINVAL;
        }
    }
    return 0;
}

/* The compute profile with `slices` slices and the fewest memory slots. */
static int profile_by_slices(const struct mig_type *t, unsigned slices)
{
    for (unsigned k = 0; k < t->nprofiles; k++)
        if (!t->profiles[k].media && t->profiles[k].slices == slices)
            return (int)k;
    return -1;
}

static int by_start(const void *a, const void *b)
{
    const struct mig_instance *x = a, *y = b;
    return (int)x->start - (int)y->start;
}

/* "1st", "2nd", "3rd", "4th", ... */
static const char *ordinal(unsigned n)
{
    return n % 10 == 1 && n % 100 != 11   ? "st"
           : n % 10 == 2 && n % 100 != 12 ? "nd"
           : n % 10 == 3 && n % 100 != 13 ? "rd"
                                          : "th";
}

int mig_layout_from_counts(const struct mig_type *t, const uint32_t *counts, size_t ncounts,
                           struct mig_instance *ret, size_t *ret_n, char *err, size_t errsize)
{
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    if (!t || (!counts && ncounts) || ncounts > t->nprofiles) {
        mig_outf(&o, "a MIG layout by counts needs a GPU type with MIG and at most one count "
                     "per profile");
        return GPO_EINVAL;
    }
    uint64_t total = 0;
    for (size_t k = 0; k < ncounts; k++) {
        const struct mig_profile *p = &t->profiles[k];
        if (counts[k] > p->max_count) {
            mig_outf(&o, "%s x %u: a %s holds at most %u %s instance%s", p->name,
                     (unsigned)counts[k], t->name, (unsigned)p->max_count, p->name,
                     p->max_count == 1 ? "" : "s");
            return GPO_EINVAL;
        }
        total += counts[k];
    }
    if (total > MIG_MAX_INSTANCES) {
        mig_outf(&o, "%llu instances: a %s holds at most %u", (unsigned long long)total, t->name,
                 (unsigned)MIG_MAX_INSTANCES);
        return GPO_EINVAL;
    }
    /* The largest first (profiles are ordered smallest first), each where
     * it leaves the most capacity; the small ones then fill around them. */
    struct mig_instance inst[MIG_MAX_INSTANCES] = {{0}};
    size_t n = 0;
    for (size_t k = ncounts; k-- > 0;) {
        for (unsigned c = 0; c < counts[k]; c++) {
            int s = mig_best_start(t, (unsigned)k, mig_layout_slots(t, inst, n), NULL);
            if (s < 0) {
                mig_outf(&o, "no room on a %s for the %u%s %s", t->name, c + 1, ordinal(c + 1),
                         t->profiles[k].name);
                for (size_t j = 0; j < n; j++) {
                    mig_outf(&o, "%s", j ? ", " : " beside ");
                    out_instance(&o, t, &inst[j]);
                }
                return GPO_EINVAL;
            }
            inst[n++] = (struct mig_instance){
                .profile = (uint8_t)k, .start = (uint8_t)s, .idle_since_ms = INT64_MIN};
        }
    }
    qsort(inst, n, sizeof(inst[0]), by_start);
    memcpy(ret, inst, n * sizeof(inst[0]));
    *ret_n = n;
    return 0;
}

int mig_layout_named(const struct mig_type *t, const char *name, struct mig_instance *ret,
                     size_t *ret_n, bool *ret_enabled, char *err, size_t errsize)
{
    struct mig_out o;
    mig_out_init(&o, err, errsize);
    if (!t) {
        mig_outf(&o, "a named MIG layout needs a GPU type with MIG");
        return GPO_EINVAL;
    }
    uint32_t counts[MIG_MAX_PROFILES] = {0};
    bool enabled = true;
    const char *nm = name ? name : "";
    if (mig_name_eq(nm, "all-disabled", strlen(nm))) {
        enabled = false;
    } else if (mig_name_eq(nm, "all-enabled", strlen(nm))) {
        /* MIG on, nothing created */
    } else if (mig_name_eq(nm, "all-balanced", strlen(nm))) {
        /* mig-parted's all-balanced: 2 x 1g, 1 x 2g, 1 x 3g. */
        counts[profile_by_slices(t, 1)] = 2;
        counts[profile_by_slices(t, 2)] = 1;
        counts[profile_by_slices(t, 3)] = 1;
    } else {
        int p =
            strlen(nm) > 4 && mig_prefix_eq(nm, "all-", 4) ? profile_find(t, nm + 4) : GPO_ENOENT;
        if (p < 0) {
            mig_outf(&o,
                     "no MIG layout \"%s\" for %s; known: all-disabled, all-enabled, "
                     "all-balanced, or all- and a profile: ",
                     nm, t->name);
            out_profiles(&o, t);
            return GPO_ENOENT;
        }
        counts[p] = t->profiles[p].max_count;
    }
    int rc = mig_layout_from_counts(t, counts, t->nprofiles, ret, ret_n, err, errsize);
    if (rc < 0)
        return rc;
    *ret_enabled = enabled;
    return 0;
}

/* ---- placement -------------------------------------------------------- */

/* Profile indices per type for one request, resolved once per call. */
struct resolved {
    int8_t p[MIG_NTYPES]; /* -2: not yet; -1: none */
};

static int resolve_cached(struct resolved *r, const struct mig_type *t,
                          const struct mig_request *req)
{
    if (!t || t->id >= MIG_NTYPES)
        return -1;
    if (r->p[t->id] == -2) {
        int p = mig_request_resolve(t, req);
        r->p[t->id] = (int8_t)(p >= 0 ? p : -1);
    }
    return r->p[t->id];
}

static unsigned popcount8(uint8_t m)
{
    unsigned c = 0;
    for (; m; m &= (uint8_t)(m - 1))
        c++;
    return c;
}

/* Is (free, score, gpu, start) better than the best so far? Fewer free
 * slots (the best fit), then a higher capacity; the scan order breaks ties
 * (lower GPU, lower start). */
static bool better(bool have, unsigned free, uint32_t score, unsigned best_free,
                   uint32_t best_score)
{
    if (!have)
        return true;
    if (free != best_free)
        return free < best_free;
    return score > best_score;
}

int mig_place(const struct mig_gpu *gpus, size_t ngpus, const struct mig_request *req,
              struct mig_pick *ret)
{
    if (!req || (!gpus && ngpus))
        return GPO_EINVAL;
    struct resolved r;
    memset(r.p, -2, sizeof(r.p));
    bool have = false;
    unsigned best_free = 0;
    uint32_t best_score = 0;
    struct mig_pick pick = {0};
    for (size_t i = 0; i < ngpus; i++) {
        const struct mig_gpu *g = &gpus[i];
        int p = resolve_cached(&r, g->type, req);
        if (p < 0)
            continue;
        uint8_t busy = 0;
        for (unsigned k = 0; k < g->n && k < MIG_MAX_INSTANCES; k++)
            if (g->inst[k].busy && g->inst[k].profile < g->type->nprofiles)
                busy |= mig_span(g->inst[k].start, g->type->profiles[g->inst[k].profile].size);
        unsigned free = MIG_SLOTS - popcount8(busy);
        for (unsigned k = 0; k < g->n && k < MIG_MAX_INSTANCES; k++) {
            const struct mig_instance *in = &g->inst[k];
            if (in->busy || in->profile != p)
                continue;
            uint8_t m = mig_span(in->start, g->type->profiles[p].size);
            uint32_t score = mig_capacity(g->type, (uint8_t) ~(busy | m));
            if (better(have, free, score, best_free, best_score) ||
                (free == best_free && score == best_score && pick.gpu == i &&
                 in->start < pick.start)) {
                have = true;
                best_free = free;
                best_score = score;
                pick = (struct mig_pick){.gpu = (uint32_t)i,
                                         .instance = (int32_t)k,
                                         .profile = (uint8_t)p,
                                         .start = in->start,
                                         .free_slots = (uint8_t)free,
                                         .capacity = score};
            }
        }
    }
    if (!have)
        return GPO_ENOENT;
    *ret = pick;
    return 0;
}

/* How many instances of `profile` the GPU holds. */
static unsigned count_profile(const struct mig_gpu *g, unsigned profile)
{
    unsigned c = 0;
    for (unsigned k = 0; k < g->n && k < MIG_MAX_INSTANCES; k++)
        c += g->inst[k].profile == profile;
    return c;
}

int mig_place_new(const struct mig_gpu *gpus, size_t ngpus, const struct mig_request *req,
                  struct mig_pick *ret)
{
    if (!req || (!gpus && ngpus))
        return GPO_EINVAL;
    struct resolved r;
    memset(r.p, -2, sizeof(r.p));
    bool have = false;
    unsigned best_free = 0;
    uint32_t best_score = 0;
    struct mig_pick pick = {0};
    for (size_t i = 0; i < ngpus; i++) {
        const struct mig_gpu *g = &gpus[i];
        int p = resolve_cached(&r, g->type, req);
        if (p < 0 || g->frozen || g->n >= MIG_MAX_INSTANCES ||
            count_profile(g, (unsigned)p) >= g->type->profiles[p].max_count)
            continue;
        uint8_t occ = mig_layout_slots(g->type, g->inst, g->n);
        uint32_t score;
        int s = mig_best_start(g->type, (unsigned)p, occ, &score);
        if (s < 0)
            continue;
        unsigned free = MIG_SLOTS - popcount8(occ);
        if (better(have, free, score, best_free, best_score)) {
            have = true;
            best_free = free;
            best_score = score;
            pick = (struct mig_pick){.gpu = (uint32_t)i,
                                     .instance = -1,
                                     .profile = (uint8_t)p,
                                     .start = (uint8_t)s,
                                     .free_slots = (uint8_t)free,
                                     .capacity = score};
        }
    }
    if (!have)
        return GPO_ENOENT;
    *ret = pick;
    return 0;
}

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "core/autoscale.h"
#include "base/banned.h"

#define RECENT_CAP                                                                                 \
    ((uint32_t)(sizeof(((struct autoscale_state *)0)->recent) /                                    \
                sizeof(((struct autoscale_state *)0)->recent[0])))

/* A window's slope needs this many seconds with data: two points fit any line. */
#define SLOPE_MIN_POINTS 3

/* The moving mean of startups weighs the last this many about equally. */
#define STARTUP_WEIGHT 8

static const char *const metric_names[AUTOSCALE_NMETRICS] = {
#define AUTOSCALE_METRIC_TEXT(name, text) [AUTOSCALE_METRIC_##name] = text,
    AUTOSCALE_METRIC_MAP(AUTOSCALE_METRIC_TEXT)
#undef AUTOSCALE_METRIC_TEXT
};

const char *autoscale_metric_name(enum autoscale_metric m)
{
    return (unsigned)m < AUTOSCALE_NMETRICS ? metric_names[m] : NULL;
}

int autoscale_metric_parse(const char *name)
{
    for (int m = 0; name && m < AUTOSCALE_NMETRICS; m++)
        if (strcmp(name, metric_names[m]) == 0)
            return m;
    return GPO_EINVAL;
}

void autoscale_spec_default(struct autoscale_spec *spec)
{
    *spec = (struct autoscale_spec){
        .metric = AUTOSCALE_METRIC_CONCURRENCY,
        .target_milli = 1000,
        .min = 0,
        .max = 1,
        .stable_window_ms = 60000,
        .panic_window_ms = 6000,
        .panic_threshold_pct = 200,
        .max_up_rate_pct = 1000,
        .max_down_rate_pct = 200,
        .scale_down_delay_ms = 30000,
        .zero_grace_ms = 30000,
        .headroom = true,
    };
}

/* ---- observations: one bucket per second ------------------------------ */

static int64_t second_of(int64_t ms)
{
    return ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
}

static size_t slot_of(int64_t s)
{
    int64_t k = s % AUTOSCALE_BUCKETS;
    return (size_t)(k < 0 ? k + AUTOSCALE_BUCKETS : k);
}

void autoscale_state_init(struct autoscale_state *st, int64_t now_ms)
{
    memset(st, 0, sizeof(*st));
    for (size_t k = 0; k < AUTOSCALE_BUCKETS; k++)
        st->buckets[k].at_s = INT64_MIN;
    st->panic_since_ms = INT64_MIN;
    st->last_down_ms = INT64_MIN;
    /* Nothing is known before now: a restarted controller keeps its
     * replicas through one whole grace before it may scale them to zero. */
    st->last_request_ms = now_ms;
    st->last_decision_ms = INT64_MIN;
}

/* The bucket of at_ms's second, emptied if it held an older one; NULL when
 * the second is older than the ring holds. */
static struct autoscale_bucket *bucket_at(struct autoscale_state *st, int64_t at_ms)
{
    int64_t s = second_of(at_ms);
    struct autoscale_bucket *b = &st->buckets[slot_of(s)];
    if (b->at_s != INT64_MIN && b->at_s > s)
        return NULL;
    if (b->at_s != s)
        *b = (struct autoscale_bucket){.at_s = s};
    return b;
}

void autoscale_observe(struct autoscale_state *st, int64_t at_ms, int64_t value_milli)
{
    struct autoscale_bucket *b = bucket_at(st, at_ms);
    if (!b)
        return;
    if (value_milli < 0)
        value_milli = 0;
    b->sum += value_milli;
    b->count++;
    if (value_milli > 0 && at_ms > st->last_request_ms)
        st->last_request_ms = at_ms;
}

void autoscale_observe_load(struct autoscale_state *st, int64_t at_ms, int64_t rps_milli,
                            int64_t queued)
{
    struct autoscale_bucket *b = bucket_at(st, at_ms);
    if (!b)
        return;
    b->rps_sum += rps_milli > 0 ? rps_milli : 0;
    b->queued_sum += queued > 0 ? queued : 0;
    b->loads++;
}

void autoscale_startup(struct autoscale_state *st, int64_t startup_ms)
{
    if (startup_ms < 0)
        return;
    if (st->startups < STARTUP_WEIGHT)
        st->startups++;
    st->startup_ms += (startup_ms - st->startup_ms) / st->startups;
}

/* A window's summary: the mean over its seconds with data, and the
 * least-squares slope of the per-second values (milli per second) with its
 * standard error (0 where there are too few points for one). */
struct window {
    int64_t seconds; /* its length */
    int32_t points;  /* seconds with data */
    double mean;
    double slope, slope_se;
    /* From autoscale_observe_load: the seconds with a load report, their
     * mean rate (milli) and queue, and over those with no queue and a value,
     * the sums of the values and of the rates (Little's law's two sides). */
    int32_t loads;
    double rps_mean, queued_mean;
    double free_value, free_rps;
};

static int64_t window_seconds(int64_t window_ms)
{
    int64_t n = (window_ms + 999) / 1000;
    return n < 1 ? 1 : n > AUTOSCALE_BUCKETS ? AUTOSCALE_BUCKETS : n;
}

static struct window window_read(const struct autoscale_state *st, int64_t now_ms,
                                 int64_t window_ms)
{
    struct window w = {.seconds = window_seconds(window_ms)};
    int64_t now_s = second_of(now_ms);
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (int64_t x = 0; x < w.seconds; x++) {
        int64_t s = now_s - w.seconds + 1 + x;
        const struct autoscale_bucket *b = &st->buckets[slot_of(s)];
        if (b->at_s != s)
            continue;
        if (b->loads > 0) {
            double rps = (double)b->rps_sum / b->loads, queued = (double)b->queued_sum / b->loads;
            w.loads++;
            w.rps_mean += rps;
            w.queued_mean += queued;
            if (queued == 0 && b->count > 0) {
                w.free_value += (double)b->sum / b->count;
                w.free_rps += rps;
            }
        }
        if (b->count <= 0)
            continue;
        double y = (double)b->sum / b->count;
        w.points++;
        sx += (double)x;
        sy += y;
        sxx += (double)x * (double)x;
        sxy += (double)x * y;
        syy += y * y;
    }
    if (w.loads > 0) {
        w.rps_mean /= w.loads;
        w.queued_mean /= w.loads;
    }
    if (w.points == 0)
        return w;
    double n = w.points;
    w.mean = sy / n;
    double den = n * sxx - sx * sx;
    if (w.points < SLOPE_MIN_POINTS || den <= 0)
        return w;
    w.slope = (n * sxy - sx * sy) / den;
    /* The residuals' variance over n - 2, over the centred sum of squares
     * of x (den / n): the slope's variance. */
    double sxx_c = den / n, syy_c = syy - sy * sy / n;
    double ssr = syy_c - w.slope * w.slope * sxx_c;
    w.slope_se = ssr > 0 ? sqrt(ssr / (n - 2) / sxx_c) : 0;
    return w;
}

/* ---- the decision ------------------------------------------------------ */

/* What one decision computed, for the reason. */
struct calc {
    struct window stable, panic;
    int64_t headroom_milli;               /* added to both means */
    double backlog_stable, backlog_panic; /* the backlog's rule's values where they set a want */
    int32_t delayed;                      /* the scale-down delay's hold, or -1 */
    int32_t up_limit, down_limit;
    int32_t unlimited_stable, unlimited_panic; /* the wants before the rate limits */
    bool in_panic, limited, at_min, at_max, grace_hold, zero, cold;
    bool paced; /* a step down waiting one startup after the last */
};

static int32_t clamp32(int64_t v, int64_t lo, int64_t hi)
{
    return (int32_t)(v < lo ? lo : v > hi ? hi : v);
}

/* Replicas for a value: ceil(value / target). A millionth of a replica is
 * forgiven, so that a mean of exactly 2 targets never rounds to 3. */
static int32_t want_of(double mean_milli, int64_t headroom_milli, int64_t target_milli)
{
    double w = ceil((mean_milli + (double)headroom_milli) / (double)target_milli - 1e-6);
    if (w >= (double)AUTOSCALE_REPLICAS_MAX)
        return AUTOSCALE_REPLICAS_MAX;
    return w <= 0 ? 0 : (int32_t)w;
}

/* The traffic that arrives while a new replica starts: the trend's slope
 * times the measured startup. The trend is fitted over the last startup's
 * length (at least the panic window, at most the stable window), never
 * over less time than it is carried forward: a line through six noisy
 * seconds, extrapolated over a minute's model load, turns noise into
 * replicas. And it counts only when the rise stands clear of the noise:
 * the slope at least HEADROOM_T times its standard error. */
#define HEADROOM_T 2.0
static int64_t headroom_of(const struct autoscale_state *st, const struct autoscale_spec *spec,
                           int64_t now_ms)
{
    if (!spec->headroom || st->startups == 0)
        return 0;
    int64_t span = st->startup_ms;
    if (span < spec->panic_window_ms)
        span = spec->panic_window_ms;
    if (span > spec->stable_window_ms)
        span = spec->stable_window_ms;
    struct window trend = window_read(st, now_ms, span);
    if (trend.slope <= 0 || trend.slope < HEADROOM_T * trend.slope_se)
        return 0;
    return (int64_t)floor(trend.slope * (double)st->startup_ms / 1000.0);
}

/* The startup's rules (the GPU part, on with the headroom, once a startup
 * is measured): what a replica's long start changes in Knative's rules.
 * - The scale-down delay is at least HOLD_STARTUPS measured startups. A
 *   replica let go and wanted back costs its model load twice over: the
 *   load's GPU time, and a load's time of requests waiting for it; kept
 *   idle it costs GPU time only. Pricing the wait like the GPU time, the
 *   ski-rental break-even is two startups of idling.
 * - After a step down, the next waits one startup: Knative halves at most
 *   once per two-second tick, about a pod's start; here once per replica's.
 * - In panic, while replicas are starting, the count grows only when the
 *   panic window wants the threshold times the ready and starting together
 *   (panic_step).
 * - A backlog counts as the work it is (backlog_value). */
#define HOLD_STARTUPS 2
static bool startup_rules(const struct autoscale_state *st, const struct autoscale_spec *spec)
{
    return spec->headroom && st->startups > 0;
}

/* The backlog's rule (with the startup's rules, the metric concurrency and
 * load reports): requests queued at the routers are work to finish, not
 * concurrency to staff. Concurrency counts each queued request as one more
 * in flight, so under a burst it grows with the backlog, without bound,
 * and asks for replicas by the hundred that are ready a startup later, when
 * the backlog is long gone. By Little's law a request's time at the
 * replicas is W = concurrency / rate over the seconds with no queue (the
 * last measure is kept); what the arrivals need is rate * W in flight, and
 * never less than what is in flight at the replicas (a W measured on other
 * requests may be short); finishing the backlog Q within one startup S adds
 * Q * W / S. A window that saw a queue counts the lower of that and its
 * concurrency (milli); -1 where the rule does not apply. Updates the
 * service's W from the stable window. */
static double backlog_value(struct autoscale_state *st, const struct autoscale_spec *spec,
                            const struct window *stable, const struct window *w)
{
    if (!startup_rules(st, spec) || spec->metric != AUTOSCALE_METRIC_CONCURRENCY)
        return -1;
    if (stable->free_rps > 0)
        st->service_s = stable->free_value / stable->free_rps;
    if (st->service_s <= 0 || w->loads == 0 || w->queued_mean <= 0)
        return -1;
    double startup_s = (double)st->startup_ms / 1000.0;
    double at_replicas = w->mean - w->queued_mean * 1000.0, arrivals = w->rps_mean * st->service_s;
    return (at_replicas > arrivals ? at_replicas : arrivals) +
           w->queued_mean * 1000.0 * st->service_s / (startup_s > 1 ? startup_s : 1);
}

/* Whether `want` is at least the panic threshold times `count` (0 counts
 * as 1). */
static bool over_threshold(const struct autoscale_spec *spec, int32_t want, int64_t count)
{
    return want > 0 && (int64_t)want * 100 >= spec->panic_threshold_pct * (count > 1 ? count : 1);
}

/* Panic: entered or re-triggered when the panic window wants at least
 * threshold times the ready count; left a whole stable window after the
 * last trigger. While in it the count only grows; with the startup's rules,
 * while replicas are starting, it grows only when the panic window wants
 * the threshold times the ready and starting together: the replicas asked
 * have not had their effect yet, and a backlog they will drain, or a burst
 * already over, asks for no more. */
static int32_t panic_step(struct autoscale_state *st, const struct autoscale_input *in,
                          int32_t want_stable, int32_t want_panic, int32_t raw_panic)
{
    const struct autoscale_spec *spec = in->spec;
    bool over = over_threshold(spec, raw_panic, in->ready);
    if (over) {
        if (st->panic_since_ms == INT64_MIN) {
            int32_t hold = st->last_desired > in->ready ? st->last_desired : in->ready;
            st->panic_peak = hold;
        }
        st->panic_since_ms = in->now_ms;
    } else if (st->panic_since_ms != INT64_MIN &&
               in->now_ms - st->panic_since_ms >= spec->stable_window_ms) {
        st->panic_since_ms = INT64_MIN;
        st->panic_peak = 0;
    }
    if (st->panic_since_ms == INT64_MIN)
        return want_stable;
    bool waiting = startup_rules(st, spec) && in->starting > 0 &&
                   !over_threshold(spec, raw_panic, (int64_t)in->ready + in->starting);
    if (want_panic > st->panic_peak && !waiting)
        st->panic_peak = want_panic;
    return st->panic_peak;
}

/* The scale-down delay: the highest want recorded within the delay. The
 * ring holds a decreasing run (a newer, higher want makes older lower ones
 * irrelevant), so its head is the maximum. */
static int32_t delay_step(struct autoscale_state *st, int64_t now_ms, int64_t delay_ms,
                          int32_t want)
{
    while (st->nrecent > 0 && st->recent[st->recent_head].at_ms <= now_ms - delay_ms) {
        st->recent_head = (st->recent_head + 1) % RECENT_CAP;
        st->nrecent--;
    }
    while (st->nrecent > 0) {
        uint32_t tail = (st->recent_head + st->nrecent - 1) % RECENT_CAP;
        if (st->recent[tail].want > want)
            break;
        st->nrecent--;
    }
    if (st->nrecent == RECENT_CAP) {
        /* Full of ever lower wants: keep the lowest one longer rather
         * than forget it early (holding errs on the side of capacity). */
        st->recent[(st->recent_head + st->nrecent - 1) % RECENT_CAP].at_ms = now_ms;
    } else {
        uint32_t slot = (st->recent_head + st->nrecent) % RECENT_CAP;
        st->recent[slot].at_ms = now_ms;
        st->recent[slot].want = want;
        st->nrecent++;
    }
    return st->recent[st->recent_head].want;
}

static int32_t compute(struct autoscale_state *st, const struct autoscale_input *in, struct calc *c)
{
    const struct autoscale_spec *spec = in->spec;
    int64_t target = spec->target_milli > 0 ? spec->target_milli : 1;
    int32_t current = in->ready + in->starting;
    c->stable = window_read(st, in->now_ms, spec->stable_window_ms);
    c->panic = window_read(st, in->now_ms, spec->panic_window_ms);
    c->delayed = -1;
    if (c->stable.points == 0) {
        return current; /* no data: hold what exists */
    }
    c->headroom_milli = headroom_of(st, spec, in->now_ms);
    double stable_v = c->stable.mean + (double)c->headroom_milli;
    double panic_raw = c->panic.mean, panic_v = c->panic.mean + (double)c->headroom_milli;
    double backlog = backlog_value(st, spec, &c->stable, &c->stable);
    if (backlog >= 0 && backlog < stable_v)
        stable_v = c->backlog_stable = backlog;
    backlog = backlog_value(st, spec, &c->stable, &c->panic);
    if (backlog >= 0 && backlog < panic_v) {
        panic_v = c->backlog_panic = backlog;
        panic_raw = backlog < panic_raw ? backlog : panic_raw;
    }
    int32_t want_stable = want_of(stable_v, 0, target);
    /* No report within the panic window: no reason to panic. */
    int32_t raw_panic = c->panic.points ? want_of(panic_raw, 0, target) : 0;
    int32_t want_panic = c->panic.points ? want_of(panic_v, 0, target) : want_stable;

    /* As Knative's: at most ready * up / 100 (ready 0 counts as 1) and at
     * least ready * 100 / down, but always one step either way. */
    int64_t base = in->ready > 1 ? in->ready : 1;
    int64_t up = (base * spec->max_up_rate_pct + 99) / 100;
    int64_t down =
        (int64_t)in->ready * 100 / (spec->max_down_rate_pct > 0 ? spec->max_down_rate_pct : 100);
    c->up_limit = clamp32(up > in->ready ? up : (int64_t)in->ready + 1, 1, AUTOSCALE_REPLICAS_MAX);
    c->down_limit =
        clamp32(down < in->ready ? down : (int64_t)in->ready - 1, 0, AUTOSCALE_REPLICAS_MAX);
    c->unlimited_stable = want_stable;
    c->unlimited_panic = want_panic;
    want_stable = clamp32(want_stable, c->down_limit, c->up_limit);
    want_panic = clamp32(want_panic, c->down_limit, c->up_limit);

    int32_t want = panic_step(st, in, want_stable, want_panic, raw_panic);
    c->in_panic = st->panic_since_ms != INT64_MIN;
    int64_t delay = spec->scale_down_delay_ms;
    if (startup_rules(st, spec) && HOLD_STARTUPS * st->startup_ms > delay)
        delay = HOLD_STARTUPS * st->startup_ms;
    int32_t held = delay_step(st, in->now_ms, delay, want);
    if (held > want)
        c->delayed = held;
    /* The pace holds the last decision's count, not ready + starting: a
     * roll's surge replica is starting too, and is no count of ours. */
    if (held < st->last_desired && startup_rules(st, spec) && st->last_down_ms != INT64_MIN &&
        in->now_ms - st->last_down_ms < st->startup_ms) {
        held = st->last_desired;
        c->paced = true;
    }

    return held;
}

static int32_t bound(struct autoscale_state *st, const struct autoscale_input *in, struct calc *c,
                     int32_t desired)
{
    const struct autoscale_spec *spec = in->spec;
    int32_t current = in->ready + in->starting;
    if (in->queued > 0)
        st->last_request_ms = in->now_ms;
    bool quiet = in->now_ms - st->last_request_ms >= spec->zero_grace_ms;
    if (desired == 0 && current > 0 && !quiet) {
        desired = 1; /* keep a replica through the grace */
        c->grace_hold = true;
    }
    if (desired < 1 && in->queued > 0) {
        desired = 1;
        c->cold = current == 0;
    }
    if (desired < spec->min) {
        desired = spec->min;
        c->at_min = true;
    }
    if (desired > spec->max) {
        desired = spec->max;
        c->at_max = true;
    }
    c->zero = desired == 0 && current > 0;
    /* A rate limit is worth saying only where it set the count. */
    int32_t unlimited = c->in_panic ? c->unlimited_panic : c->unlimited_stable;
    c->limited = c->stable.points > 0 &&
                 ((desired == c->up_limit && unlimited > c->up_limit) ||
                  (desired == c->down_limit && unlimited < c->down_limit && c->delayed < 0));
    return desired;
}

/* ---- the reason -------------------------------------------------------- */

/* A bounded writer; it always leaves buf terminated. */
struct text {
    char *buf;
    size_t size, len;
};

static void text_put(struct text *t, const char *s)
{
    for (; *s && t->len + 1 < t->size; s++)
        t->buf[t->len++] = *s;
    t->buf[t->len] = '\0';
}

/* A count, in decimal; what the reasons print is never negative. */
static void text_int(struct text *t, int64_t v)
{
    char d[24] = {0};
    size_t n = sizeof(d) - 1;
    for (uint64_t u = v > 0 ? (uint64_t)v : 0; n == sizeof(d) - 1 || u; u /= 10)
        d[--n] = (char)('0' + u % 10);
    text_put(t, d + n);
}

/* A milli value with one decimal: 9.6, 0.0. */
static void text_tenths(struct text *t, double milli)
{
    int64_t tenths = (int64_t)floor(milli / 100.0 + 0.5);
    char frac[3] = {'.', (char)('0' + tenths % 10), '\0'};
    text_int(t, tenths / 10);
    text_put(t, frac);
}

/* A milli value with as many decimals as it needs: 2, 0.8, 1.25. */
static void text_milli(struct text *t, int64_t milli)
{
    text_int(t, milli / 1000);
    int64_t r = milli % 1000;
    if (r == 0)
        return;
    char frac[5] = {'.', (char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10),
                    '\0'};
    for (int k = 3; k > 1 && frac[k] == '0'; k--)
        frac[k] = '\0';
    text_put(t, frac);
}

static const char *metric_label(enum autoscale_metric m)
{
    return m == AUTOSCALE_METRIC_REPLICA ? "metric" : autoscale_metric_name(m);
}

/* Opens a note: " (" for the first after a cause, ", " otherwise. */
static void note_open(struct text *t, bool *any, bool inside)
{
    text_put(t, *any || inside ? ", " : " (");
    *any = true;
}

/* The notes after a count's cause: panic, headroom, a rate limit, a hold,
 * a bound. Inside: the cause's parenthesis is open already. */
static void text_notes(struct text *t, const struct autoscale_state *st,
                       const struct autoscale_spec *spec, const struct calc *c, bool inside)
{
    bool any = false;
    if (c->in_panic) {
        note_open(t, &any, inside);
        text_put(t, "panic");
    }
    double backlog = c->in_panic ? c->backlog_panic : c->backlog_stable;
    if (backlog > 0) {
        note_open(t, &any, inside);
        text_put(t, "queue counted as work ");
        text_tenths(t, backlog);
    } else if (c->headroom_milli > 0) {
        note_open(t, &any, inside);
        text_put(t, "headroom ");
        text_tenths(t, (double)c->headroom_milli);
        text_put(t, " for a ");
        text_int(t, (st->startup_ms + 500) / 1000);
        text_put(t, " s startup");
    }
    if (c->limited) {
        note_open(t, &any, inside);
        text_put(t, "rate limit");
    }
    if (c->delayed >= 0) {
        note_open(t, &any, inside);
        text_put(t, "scale-down delay");
    }
    if (c->paced) {
        note_open(t, &any, inside);
        text_put(t, "one step down per ");
        text_int(t, (st->startup_ms + 500) / 1000);
        text_put(t, " s startup");
    }
    if (c->at_min) {
        note_open(t, &any, inside);
        text_put(t, "min ");
        text_int(t, spec->min);
    }
    if (c->at_max) {
        note_open(t, &any, inside);
        text_put(t, "max ");
        text_int(t, spec->max);
    }
    if (any && !inside)
        text_put(t, ")");
}

static void reason_write(struct text *t, const struct autoscale_state *st,
                         const struct autoscale_input *in, const struct calc *c, int32_t to)
{
    const struct autoscale_spec *spec = in->spec;
    int32_t from = in->ready + in->starting;
    const struct window *w = c->in_panic && c->panic.points ? &c->panic : &c->stable;
    text_int(t, from);
    text_put(t, " -> ");
    text_int(t, to);
    text_put(t, ": ");
    if (c->cold) {
        text_int(t, in->queued);
        text_put(t, in->queued == 1 ? " request waiting (cold start)"
                                    : " requests waiting (cold start)");
        return;
    }
    if (c->zero || c->grace_hold) {
        text_put(t, "no request for ");
        text_int(t, (in->now_ms - st->last_request_ms) / 1000);
        text_put(t, " s");
        if (c->grace_hold) {
            text_put(t, " (grace ");
            text_int(t, spec->zero_grace_ms / 1000);
            text_put(t, " s)");
        }
        return;
    }
    if (to == from || c->stable.points == 0) {
        text_put(t, "steady (");
        if (c->stable.points == 0) {
            text_put(t, "no observation for ");
            text_int(t, c->stable.seconds);
            text_put(t, " s");
        } else {
            text_put(t, metric_label(spec->metric));
            text_put(t, " ");
            text_tenths(t, w->mean);
            text_put(t, ", target ");
            text_milli(t, spec->target_milli);
        }
        text_notes(t, st, spec, c, true);
        text_put(t, ")");
        return;
    }
    text_put(t, metric_label(spec->metric));
    text_put(t, " ");
    text_tenths(t, w->mean);
    text_put(t, to > from ? " over target " : " under target ");
    text_milli(t, spec->target_milli);
    text_put(t, " for ");
    text_int(t, w->seconds);
    text_put(t, " s");
    text_notes(t, st, spec, c, false);
}

void autoscale_decide(struct autoscale_state *st, const struct autoscale_input *in,
                      struct autoscale_decision *out)
{
    struct calc c = {0};
    int32_t desired = compute(st, in, &c);
    desired = bound(st, in, &c, desired);
    struct text t = {.buf = out->reason, .size = sizeof(out->reason)};
    reason_write(&t, st, in, &c, desired);
    if (st->last_decision_ms != INT64_MIN && desired < st->last_desired)
        st->last_down_ms = in->now_ms;
    out->desired = desired;
    out->panic = st->panic_since_ms != INT64_MIN;
    st->last_desired = desired;
    st->last_decision_ms = in->now_ms;
}

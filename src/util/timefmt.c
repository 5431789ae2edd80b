/*
 * timefmt.c - RFC 3339 and Slurm durations by hand.
 *
 * The calendar is the proleptic Gregorian one, through Howard Hinnant's
 * days_from_civil / civil_from_days ("chrono-Compatible Low-Level Date
 * Algorithms"): exact for every year here, with no table and no library call.
 * Parsers read fixed-width fields byte by byte rather than through sscanf or
 * strtol, which would accept signs, spaces and short fields.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util/timefmt.h"
#include "base/banned.h"

#define MS_PER_DAY INT64_C(86400000)

/* Days since 1970-01-01 of y-m-d (m 1..12, d 1..31). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);                       /* [0, 399] */
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* [0, 146096] */
    return era * 146097 + (int64_t)doe - 719468;
}

/* The inverse: y-m-d of day z since 1970-01-01. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);                          /* [0, 146096] */
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365] */
    unsigned mp = (5 * doy + 2) / 153;                                    /* [0, 11] */
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static unsigned days_in_month(int64_t y, unsigned m)
{
    static const unsigned char days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Exactly n digits at s (no sign, no space). */
static bool fixed_digits(const char *s, int n, unsigned *ret)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *ret = v;
    return true;
}

int timefmt_rfc3339(int64_t ms, char *buf, size_t len)
{
    if (!buf)
        return GPO_EINVAL;
    if (ms < TIMEFMT_MIN_MS || ms > TIMEFMT_MAX_MS)
        return GPO_ERANGE;
    /* Floor division: -1 ms is the last millisecond of 1969-12-31. */
    int64_t days = ms / MS_PER_DAY, rem = ms % MS_PER_DAY;
    if (rem < 0) {
        rem += MS_PER_DAY;
        days--;
    }
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    unsigned msec = (unsigned)(rem % 1000), sec = (unsigned)(rem / 1000);
    char tmp[TIMEFMT_RFC3339_LEN + 8];
    int n = snprintf(tmp, sizeof(tmp), "%04d-%02u-%02uT%02u:%02u:%02u", (int)y, m, d, sec / 3600,
                     sec / 60 % 60, sec % 60);
    if (msec)
        n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, ".%03u", msec);
    tmp[n++] = 'Z';
    tmp[n] = '\0';
    if ((size_t)n >= len)
        return GPO_ENOBUFS;
    memcpy(buf, tmp, (size_t)n + 1);
    return 0;
}

/* "+HH:MM" / "-HH:MM" / "Z" at s, the whole rest of the string; minutes east. */
static int parse_offset(const char *s, int64_t *ret_min)
{
    if ((s[0] == 'Z' || s[0] == 'z') && s[1] == '\0') {
        *ret_min = 0;
        return 0;
    }
    unsigned hh, mm;
    if ((s[0] != '+' && s[0] != '-') || !fixed_digits(s + 1, 2, &hh) || s[3] != ':' ||
        !fixed_digits(s + 4, 2, &mm) || s[6] != '\0')
        return GPO_ESYNTAX;
    if (hh > 23 || mm > 59)
        return GPO_ERANGE;
    *ret_min = (s[0] == '-' ? -1 : 1) * (int64_t)(hh * 60 + mm);
    return 0;
}

int timefmt_parse_rfc3339(const char *s, int64_t *ret_ms)
{
    if (!s || !ret_ms)
        return GPO_EINVAL;
    unsigned y, mo, d, h = 0, mi = 0, sec = 0, frac = 0;
    if (!fixed_digits(s, 4, &y) || s[4] != '-' || !fixed_digits(s + 5, 2, &mo) || s[7] != '-' ||
        !fixed_digits(s + 8, 2, &d))
        return GPO_ESYNTAX;
    int64_t offset_min = 0;
    if (s[10] != '\0') {
        if (s[10] != 'T' && s[10] != 't' && s[10] != ' ')
            return GPO_ESYNTAX;
        if (!fixed_digits(s + 11, 2, &h) || s[13] != ':' || !fixed_digits(s + 14, 2, &mi) ||
            s[16] != ':' || !fixed_digits(s + 17, 2, &sec))
            return GPO_ESYNTAX;
        const char *p = s + 19;
        if (*p == '.') {
            p++;
            if (!is_digit(*p))
                return GPO_ESYNTAX;
            for (unsigned scale = 100; is_digit(*p); p++, scale /= 10)
                frac += (unsigned)(*p - '0') * scale;
        }
        int rc = parse_offset(p, &offset_min);
        if (rc < 0)
            return rc;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60)
        return GPO_ERANGE;
    if (sec == 60)
        sec = 59;
    int64_t ms = days_from_civil(y, mo, d) * MS_PER_DAY +
                 (int64_t)((h * 60 + mi) * 60 + sec) * 1000 + frac - offset_min * 60000;
    if (ms < TIMEFMT_MIN_MS || ms > TIMEFMT_MAX_MS)
        return GPO_ERANGE;
    *ret_ms = ms;
    return 0;
}

/* A run of digits at *p, advanced past it; at least one digit. */
static int parse_number(const char **p, int64_t *ret)
{
    const char *s = *p;
    int64_t v = 0;
    if (!is_digit(*s))
        return GPO_ESYNTAX;
    for (; is_digit(*s); s++)
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
            return GPO_EOVERFLOW;
    *p = s;
    *ret = v;
    return 0;
}

static bool equal_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char ca = (char)(*a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a);
        if (ca != *b)
            return false;
    }
    return *a == *b;
}

/* "90s", "30m", "4h", "2d": the whole string; 1 when s is not of that form. */
static int parse_suffixed(const char *s, int64_t *ret_s)
{
    static const struct {
        char unit;
        int64_t seconds;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    const char *p = s;
    while (is_digit(*p))
        p++;
    if (p == s || p[0] == '\0' || p[1] != '\0')
        return 1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (p[0] != units[i].unit)
            continue;
        int64_t v;
        int rc = parse_number(&s, &v);
        if (rc < 0)
            return rc;
        if (__builtin_mul_overflow(v, units[i].seconds, &v) || v > TIMEFMT_DURATION_MAX_S)
            return GPO_EOVERFLOW;
        *ret_s = v;
        return 0;
    }
    return 1;
}

int timefmt_parse_duration(const char *s, int64_t *ret_s)
{
    if (!s || !ret_s)
        return GPO_EINVAL;
    if (equal_nocase(s, "unlimited") || equal_nocase(s, "infinite") || strcmp(s, "-1") == 0) {
        *ret_s = TIMEFMT_UNLIMITED;
        return 0;
    }
    int rc = parse_suffixed(s, ret_s);
    if (rc <= 0)
        return rc;

    /* Slurm: [D-]A[:B[:C]]; the units of A, B, C depend on D and the count. */
    const char *p = s;
    int64_t days = -1, f[3];
    size_t nf = 0;
    if ((rc = parse_number(&p, &f[nf++])) < 0)
        return rc;
    if (*p == '-') {
        days = f[0];
        nf = 0;
        p++;
        if ((rc = parse_number(&p, &f[nf++])) < 0)
            return rc;
    }
    while (*p == ':' && nf < 3) {
        p++;
        if ((rc = parse_number(&p, &f[nf++])) < 0)
            return rc;
    }
    if (*p != '\0')
        return GPO_ESYNTAX;

    /* Seconds per field, by form. Every field but a leading MM or HH is capped
     * by its unit: hours after a day at 23, minutes and seconds at 59. */
    static const int64_t plain[3][3] = {{60}, {60, 1}, {3600, 60, 1}};
    static const int64_t dayed[3][3] = {{3600}, {3600, 60}, {3600, 60, 1}};
    const int64_t *unit = days < 0 ? plain[nf - 1] : dayed[nf - 1];
    int64_t total = 0;
    for (size_t i = 0; i < nf; i++) {
        int64_t cap = unit[i] == 3600 ? 23 : 59;
        if ((i > 0 || days >= 0) && f[i] > cap)
            return GPO_ERANGE;
        int64_t part;
        if (__builtin_mul_overflow(f[i], unit[i], &part) ||
            __builtin_add_overflow(total, part, &total))
            return GPO_EOVERFLOW;
    }
    if (days > 0) {
        int64_t part;
        if (__builtin_mul_overflow(days, INT64_C(86400), &part) ||
            __builtin_add_overflow(total, part, &total))
            return GPO_EOVERFLOW;
    }
    if (total > TIMEFMT_DURATION_MAX_S)
        return GPO_EOVERFLOW;
    *ret_s = total;
    return 0;
}

int timefmt_duration(int64_t s, char *buf, size_t len)
{
    if (!buf || s < 0)
        return GPO_EINVAL;
    char tmp[TIMEFMT_DURATION_LEN];
    int n;
    if (s == TIMEFMT_UNLIMITED)
        n = snprintf(tmp, sizeof(tmp), "UNLIMITED");
    else if (s >= 86400)
        n = snprintf(tmp, sizeof(tmp), "%lld-%02d:%02d:%02d", (long long)(s / 86400),
                     (int)(s / 3600 % 24), (int)(s / 60 % 60), (int)(s % 60));
    else
        n = snprintf(tmp, sizeof(tmp), "%02d:%02d:%02d", (int)(s / 3600), (int)(s / 60 % 60),
                     (int)(s % 60));
    if (n < 0 || (size_t)n >= len)
        return GPO_ENOBUFS;
    memcpy(buf, tmp, (size_t)n + 1);
    return 0;
}

/* ---- begin times (sbatch --begin) ------------------------------------------- */

#define S_PER_DAY INT64_C(86400)

/* "HH:MM[:SS]" at p, up to the end: seconds into the day. */
static int parse_clock(const char *p, int64_t *ret_s)
{
    unsigned h, m, sec = 0;
    if (!fixed_digits(p, 2, &h) || p[2] != ':' || !fixed_digits(p + 3, 2, &m))
        return GPO_ESYNTAX;
    p += 5;
    if (*p == ':') {
        if (!fixed_digits(p + 1, 2, &sec))
            return GPO_ESYNTAX;
        p += 3;
    }
    if (*p)
        return GPO_ESYNTAX;
    if (h > 23 || m > 59 || sec > 59)
        return GPO_ERANGE;
    *ret_s = (int64_t)h * 3600 + (int64_t)m * 60 + sec;
    return 0;
}

/* "now+N[unit]": N seconds (or minutes, hours, days, weeks) from now. */
static int parse_now_plus(const char *p, int64_t now_s, int64_t *ret_s)
{
    static const struct {
        const char *name;
        int64_t seconds;
    } units[] = {{"", 1},
                 {"s", 1},
                 {"sec", 1},
                 {"second", 1},
                 {"seconds", 1},
                 {"m", 60},
                 {"min", 60},
                 {"minute", 60},
                 {"minutes", 60},
                 {"h", 3600},
                 {"hour", 3600},
                 {"hours", 3600},
                 {"d", S_PER_DAY},
                 {"day", S_PER_DAY},
                 {"days", S_PER_DAY},
                 {"week", 7 * S_PER_DAY},
                 {"weeks", 7 * S_PER_DAY}};
    int64_t n;
    int rc = parse_number(&p, &n);
    if (rc)
        return rc;
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
        if (!equal_nocase(p, units[k].name))
            continue;
        if (__builtin_mul_overflow(n, units[k].seconds, &n) ||
            __builtin_add_overflow(now_s, n, ret_s) || *ret_s > TIMEFMT_BEGIN_MAX_S)
            return GPO_EOVERFLOW;
        return 0;
    }
    return GPO_ESYNTAX;
}

/* "YYYY-MM-DD[THH:MM[:SS]]" in the zone utc_offset_s east of UTC. */
static int parse_date(const char *p, int64_t utc_offset_s, int64_t *ret_s)
{
    unsigned y, mo, d;
    if (!fixed_digits(p, 4, &y) || p[4] != '-' || !fixed_digits(p + 5, 2, &mo) || p[7] != '-' ||
        !fixed_digits(p + 8, 2, &d))
        return GPO_ESYNTAX;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || y < 1970)
        return GPO_ERANGE;
    int64_t clock = 0;
    if (p[10] == 'T') {
        int rc = parse_clock(p + 11, &clock);
        if (rc)
            return rc;
    } else if (p[10]) {
        return GPO_ESYNTAX;
    }
    *ret_s = days_from_civil(y, mo, d) * S_PER_DAY + clock - utc_offset_s;
    return 0;
}

int timefmt_parse_begin(const char *s, int64_t now_s, int64_t utc_offset_s, int64_t *ret_s)
{
    if (!s || !ret_s || now_s < 0 || now_s > TIMEFMT_BEGIN_MAX_S || utc_offset_s < -S_PER_DAY ||
        utc_offset_s > S_PER_DAY)
        return GPO_EINVAL;
    /* Local midnight of today, and the named times of day. */
    int64_t local = now_s + utc_offset_s;
    int64_t today = local - (local % S_PER_DAY + S_PER_DAY) % S_PER_DAY - utc_offset_s;
    static const struct {
        const char *name;
        int64_t clock; /* seconds into the day; -1: today's midnight, -2: tomorrow's */
    } words[] = {{"today", -1},
                 {"tomorrow", -2},
                 {"midnight", 0},
                 {"noon", INT64_C(12) * 3600},
                 {"fika", INT64_C(15) * 3600},
                 {"teatime", INT64_C(16) * 3600}};
    int64_t v, clock = -3;
    int rc = 0;
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]) && clock == -3; k++)
        if (equal_nocase(s, words[k].name))
            clock = words[k].clock;
    if (clock == -1 || clock == -2) {
        v = today + (clock == -2 ? S_PER_DAY : 0);
    } else if (equal_nocase(s, "now")) {
        v = now_s;
    } else if (strncmp(s, "now+", 4) == 0 || strncmp(s, "NOW+", 4) == 0) {
        rc = parse_now_plus(s + 4, now_s, &v);
    } else if (clock >= 0 || (rc = parse_clock(s, &clock)) == 0) {
        /* A time of day: today's, or tomorrow's once it has passed. */
        v = today + clock;
        if (v <= now_s)
            v += S_PER_DAY;
    } else if (rc == GPO_ESYNTAX) {
        rc = parse_date(s, utc_offset_s, &v);
    }
    if (rc)
        return rc;
    if (v < 0 || v > TIMEFMT_BEGIN_MAX_S)
        return GPO_ERANGE;
    *ret_s = v;
    return 0;
}

/* test_util_timefmt.c - RFC 3339 both ways and Slurm durations: known
 * vectors (epoch, leap days, the ends of the four-digit years, times before
 * 1970), seeded round trips checked against the C library's gmtime_r, offsets,
 * and every malformed input refused with the code that says why. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "util/timefmt.h"
#include "base/banned.h"

struct vector {
    const char *text;
    int64_t ms;
};

/* Inputs refused, each with the code it must get and the reason. */
struct bad {
    const char *text;
    int code;
    const char *why;
};

static uint64_t next_random(uint64_t *s)
{
    /* xorshift64*: a fixed seed gives the same cases on every run. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}

static void assert_formats(int64_t ms, const char *want)
{
    char buf[TIMEFMT_RFC3339_LEN];
    assert_int_equal(timefmt_rfc3339(ms, buf, sizeof(buf)), 0);
    assert_string_equal(buf, want);
}

static void assert_parses(const char *text, int64_t want)
{
    int64_t ms = -7;
    int rc = timefmt_parse_rfc3339(text, &ms);
    if (rc != 0)
        fail_msg("'%s': %s", text, gpo_strerror(rc));
    if (ms != want)
        fail_msg("'%s': got %" PRId64 ", want %" PRId64, text, ms, want);
}

static void test_known_vectors_format_and_parse(void **state)
{
    (void)state;
    static const struct vector v[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"2026-11-30T13:23:27Z", INT64_C(1796045007000)},
        {"2024-02-29T00:00:00Z", INT64_C(1709164800000)},
        {"2000-02-29T12:34:56.789Z", INT64_C(951827696789)},
        {"1900-03-01T00:00:00Z", INT64_C(-2203891200000)},
        {"1969-12-31T23:59:59.999Z", -1},
        {"1969-07-20T20:17:40Z", INT64_C(-14182940000)},
        {"0001-01-01T00:00:00Z", INT64_C(-62135596800000)},
        {"0000-01-01T00:00:00Z", TIMEFMT_MIN_MS},
        {"9999-12-31T23:59:59.999Z", TIMEFMT_MAX_MS},
        {"1970-01-01T00:00:00.001Z", 1},
        {"1970-01-01T00:00:00.100Z", 100},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        assert_formats(v[i].ms, v[i].text);
        assert_parses(v[i].text, v[i].ms);
    }
}

static void test_round_trip_agrees_with_gmtime(void **state)
{
    (void)state;
    uint64_t seed = UINT64_C(0x9E3779B97F4A7C15);
    const uint64_t span = (uint64_t)(TIMEFMT_MAX_MS - TIMEFMT_MIN_MS) + 1;
    for (int i = 0; i < 200000; i++) {
        int64_t ms = TIMEFMT_MIN_MS + (int64_t)(next_random(&seed) % span);
        if (i % 4 == 0) /* also whole seconds, which print without a fraction */
            ms -= ((ms % 1000) + 1000) % 1000;
        char buf[TIMEFMT_RFC3339_LEN];
        assert_int_equal(timefmt_rfc3339(ms, buf, sizeof(buf)), 0);
        int64_t back;
        assert_int_equal(timefmt_parse_rfc3339(buf, &back), 0);
        assert_int_equal(back, ms);

        /* An independent calendar: glibc's gmtime_r on 64-bit time_t. */
        int64_t msec = ((ms % 1000) + 1000) % 1000;
        time_t t = (time_t)((ms - msec) / 1000);
        struct tm tm;
        assert_non_null(gmtime_r(&t, &tm));
        char want[64];
        int n = snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (msec)
            snprintf(want + n, sizeof(want) - (size_t)n, ".%03d", (int)msec);
        n = (int)strlen(want);
        snprintf(want + n, sizeof(want) - (size_t)n, "Z");
        assert_string_equal(buf, want);
    }
}

static void test_every_day_from_1600_to_2400_is_consecutive(void **state)
{
    (void)state;
    int64_t start, end;
    assert_int_equal(timefmt_parse_rfc3339("1600-01-01", &start), 0);
    assert_int_equal(timefmt_parse_rfc3339("2400-12-31", &end), 0);
    int64_t days = 0;
    for (int64_t ms = start; ms <= end; ms += INT64_C(86400000), days++) {
        char buf[TIMEFMT_RFC3339_LEN];
        assert_int_equal(timefmt_rfc3339(ms, buf, sizeof(buf)), 0);
        buf[10] = '\0'; /* the date alone parses as its midnight */
        int64_t back;
        assert_int_equal(timefmt_parse_rfc3339(buf, &back), 0);
        assert_int_equal(back, ms);
    }
    /* 801 years, 195 of them leap (1600, 2000 and 2400 are; 1700 ... 2300 are not). */
    assert_int_equal(days, 801 * 365 + 195);
}

static void test_leap_years_follow_the_gregorian_rules(void **state)
{
    (void)state;
    int64_t ms;
    assert_parses("2024-02-29", INT64_C(1709164800000));
    assert_int_equal(timefmt_parse_rfc3339("2000-02-29T00:00:00Z", &ms), 0);
    assert_int_equal(timefmt_parse_rfc3339("1900-02-29T00:00:00Z", &ms), GPO_ERANGE);
    assert_int_equal(timefmt_parse_rfc3339("2100-02-29", &ms), GPO_ERANGE);
    assert_int_equal(timefmt_parse_rfc3339("2023-02-29", &ms), GPO_ERANGE);
    assert_int_equal(timefmt_parse_rfc3339("0000-02-29", &ms), 0); /* year 0 = 1 BC: leap */
    /* One millisecond before 2024-03-01 is in the leap day. */
    assert_parses("2024-03-01T00:00:00Z", INT64_C(1709164800000) + INT64_C(86400000));
    assert_formats(INT64_C(1709164800000) + INT64_C(86400000) - 1, "2024-02-29T23:59:59.999Z");
}

static void test_offsets_separators_and_fractions(void **state)
{
    (void)state;
    const int64_t base = INT64_C(1796045007000); /* 2026-11-30T13:23:27Z */
    static const struct vector v[] = {
        {"2026-11-30T13:23:27Z", 0},
        {"2026-11-30t13:23:27z", 0},
        {"2026-11-30 13:23:27Z", 0},
        {"2026-11-30T13:23:27+00:00", 0},
        {"2026-11-30T13:23:27-00:00", 0},
        {"2026-11-30T14:23:27+01:00", 0},
        {"2026-11-30T07:53:27-05:30", 0},
        {"2026-12-01T13:22:27+23:59", 0},
        {"2026-11-29T13:24:27-23:59", 0},
        {"2026-11-30T13:23:27.5Z", 500},
        {"2026-11-30T13:23:27.05Z", 50},
        {"2026-11-30T13:23:27.123456789Z", 123},
        {"2026-11-30T13:23:27.9999999Z", 999},
        {"2026-11-30T13:23:27.000Z", 0},
        {"2026-11-30T14:23:27.250+01:00", 250},
        {"2026-11-30", -(13 * 3600 + 23 * 60 + 27) * INT64_C(1000)},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        assert_parses(v[i].text, base + v[i].ms);
    /* Across a day and a year boundary. */
    int64_t a, b;
    assert_int_equal(timefmt_parse_rfc3339("2026-01-01T00:30:00+01:00", &a), 0);
    assert_int_equal(timefmt_parse_rfc3339("2025-12-31T23:30:00Z", &b), 0);
    assert_int_equal(a, b);
    /* Before the epoch, with an offset and a fraction. */
    assert_parses("1969-12-31T19:00:00.001-05:00", 1);
}

static void test_leap_second_is_folded_to_59(void **state)
{
    (void)state;
    int64_t a, b;
    assert_int_equal(timefmt_parse_rfc3339("2016-12-31T23:59:60Z", &a), 0);
    assert_int_equal(timefmt_parse_rfc3339("2016-12-31T23:59:59Z", &b), 0);
    assert_int_equal(a, b);
    assert_int_equal(timefmt_parse_rfc3339("2016-12-31T23:59:60.5Z", &a), 0);
    assert_int_equal(a, b + 500);
    assert_int_equal(timefmt_parse_rfc3339("2016-12-31T23:59:61Z", &a), GPO_ERANGE);
}

static void test_malformed_times_are_refused_with_the_reason(void **state)
{
    (void)state;
    static const struct bad bad[] = {
        {"", GPO_ESYNTAX, "empty"},
        {"2026", GPO_ESYNTAX, "year only"},
        {"2026-11", GPO_ESYNTAX, "no day"},
        {"26-11-30", GPO_ESYNTAX, "two-digit year"},
        {"+2026-11-30", GPO_ESYNTAX, "signed year"},
        {"12026-11-30", GPO_ESYNTAX, "five-digit year"},
        {"2026-1-30", GPO_ESYNTAX, "one-digit month"},
        {"2026-11-3", GPO_ESYNTAX, "one-digit day"},
        {"2026/11/30", GPO_ESYNTAX, "slashes"},
        {"20261130T132327Z", GPO_ESYNTAX, "ISO 8601 basic format"},
        {" 2026-11-30", GPO_ESYNTAX, "leading space"},
        {"2026-11-30 ", GPO_ESYNTAX, "trailing space after a date"},
        {"2026-11-30T", GPO_ESYNTAX, "separator without a time"},
        {"2026-11-30X13:23:27Z", GPO_ESYNTAX, "unknown separator"},
        {"2026-11-30T13:23Z", GPO_ESYNTAX, "no seconds"},
        {"2026-11-30T13:23:27", GPO_ESYNTAX, "no offset"},
        {"2026-11-30T13:23:27 Z", GPO_ESYNTAX, "space before the offset"},
        {"2026-11-30T13:23:27Z ", GPO_ESYNTAX, "trailing space"},
        {"2026-11-30T13:23:27ZZ", GPO_ESYNTAX, "two offsets"},
        {"2026-11-30T13:23:27UTC", GPO_ESYNTAX, "zone name"},
        {"2026-11-30T13:23:27+0100", GPO_ESYNTAX, "offset without a colon"},
        {"2026-11-30T13:23:27+01", GPO_ESYNTAX, "offset without minutes"},
        {"2026-11-30T13:23:27+01:00:00", GPO_ESYNTAX, "offset with seconds"},
        {"2026-11-30T13:23:27.Z", GPO_ESYNTAX, "empty fraction"},
        {"2026-11-30T13:23:27,5Z", GPO_ESYNTAX, "comma fraction"},
        {"2026-11-30T1:23:27Z", GPO_ESYNTAX, "one-digit hour"},
        {"2026-11-30T-1:23:27Z", GPO_ESYNTAX, "negative hour"},
        {"2026-11-30T13:23:2aZ", GPO_ESYNTAX, "letter in the seconds"},
        {"2026-00-10", GPO_ERANGE, "month 0"},
        {"2026-13-10", GPO_ERANGE, "month 13"},
        {"2026-11-00", GPO_ERANGE, "day 0"},
        {"2026-11-31", GPO_ERANGE, "November 31"},
        {"2026-01-32", GPO_ERANGE, "January 32"},
        {"2026-02-29", GPO_ERANGE, "February 29 of a common year"},
        {"1900-02-29", GPO_ERANGE, "1900 is not a leap year"},
        {"2026-11-30T24:00:00Z", GPO_ERANGE, "hour 24"},
        {"2026-11-30T13:60:00Z", GPO_ERANGE, "minute 60"},
        {"2026-11-30T13:23:61Z", GPO_ERANGE, "second 61"},
        {"2026-11-30T13:23:27+24:00", GPO_ERANGE, "offset hour 24"},
        {"2026-11-30T13:23:27+01:60", GPO_ERANGE, "offset minute 60"},
        {"0000-01-01T00:00:00+00:01", GPO_ERANGE, "before year 0"},
        {"9999-12-31T23:59:59-00:01", GPO_ERANGE, "after year 9999"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        int rc = timefmt_parse_rfc3339(bad[i].text, &ms);
        if (rc != bad[i].code)
            fail_msg("'%s' (%s): got %d (%s), want %d", bad[i].text, bad[i].why, rc,
                     gpo_strerror(rc), bad[i].code);
        assert_int_equal(ms, 42); /* untouched on error */
    }
    int64_t ms;
    assert_int_equal(timefmt_parse_rfc3339(NULL, &ms), GPO_EINVAL);
    assert_int_equal(timefmt_parse_rfc3339("2026-11-30", NULL), GPO_EINVAL);
}

static void test_format_refuses_small_buffers_and_out_of_range(void **state)
{
    (void)state;
    char buf[TIMEFMT_RFC3339_LEN];
    memset(buf, 'x', sizeof(buf));
    /* "1970-01-01T00:00:00Z" is 20 characters: 21 bytes fit, 20 do not. */
    assert_int_equal(timefmt_rfc3339(0, buf, 20), GPO_ENOBUFS);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(timefmt_rfc3339(0, buf, 21), 0);
    assert_string_equal(buf, "1970-01-01T00:00:00Z");
    assert_int_equal(timefmt_rfc3339(1, buf, 24), GPO_ENOBUFS);
    assert_int_equal(timefmt_rfc3339(1, buf, 25), 0);
    assert_int_equal(timefmt_rfc3339(TIMEFMT_MAX_MS + 1, buf, sizeof(buf)), GPO_ERANGE);
    assert_int_equal(timefmt_rfc3339(TIMEFMT_MIN_MS - 1, buf, sizeof(buf)), GPO_ERANGE);
    assert_int_equal(timefmt_rfc3339(INT64_MIN, buf, sizeof(buf)), GPO_ERANGE);
    assert_int_equal(timefmt_rfc3339(INT64_MAX, buf, sizeof(buf)), GPO_ERANGE);
    assert_int_equal(timefmt_rfc3339(0, NULL, 0), GPO_EINVAL);
}

static void assert_duration(const char *text, int64_t want)
{
    int64_t s = -7;
    int rc = timefmt_parse_duration(text, &s);
    if (rc != 0)
        fail_msg("'%s': %s", text, gpo_strerror(rc));
    if (s != want)
        fail_msg("'%s': got %" PRId64 ", want %" PRId64, text, s, want);
}

static void test_slurm_and_suffixed_durations(void **state)
{
    (void)state;
    assert_duration("0", 0);
    assert_duration("90", 90 * 60);
    assert_duration("5:30", 5 * 60 + 30);
    assert_duration("1:00:00", 3600);
    assert_duration("36:00:00", 36 * 3600);
    assert_duration("2-12", 2 * 86400 + 12 * 3600);
    assert_duration("1-02:03", 86400 + 2 * 3600 + 3 * 60);
    assert_duration("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4);
    assert_duration("0-00:00:01", 1);
    assert_duration("007", 7 * 60);
    assert_duration("90s", 90);
    assert_duration("30m", 1800);
    assert_duration("4h", 4 * 3600);
    assert_duration("2d", 2 * 86400);
    assert_duration("0s", 0);
    assert_duration("UNLIMITED", TIMEFMT_UNLIMITED);
    assert_duration("unlimited", TIMEFMT_UNLIMITED);
    assert_duration("Infinite", TIMEFMT_UNLIMITED);
    assert_duration("-1", TIMEFMT_UNLIMITED);
    assert_duration("9223372036854775s", TIMEFMT_DURATION_MAX_S);
}

static void test_malformed_durations_are_refused_with_the_reason(void **state)
{
    (void)state;
    static const struct bad bad[] = {
        {"", GPO_ESYNTAX, "empty"},
        {" 5", GPO_ESYNTAX, "leading space"},
        {"5 ", GPO_ESYNTAX, "trailing space"},
        {"+5", GPO_ESYNTAX, "sign"},
        {"-5", GPO_ESYNTAX, "negative"},
        {"-1s", GPO_ESYNTAX, "negative with a unit"},
        {"1.5h", GPO_ESYNTAX, "fraction"},
        {"5x", GPO_ESYNTAX, "unknown unit"},
        {"5S", GPO_ESYNTAX, "upper-case unit"},
        {"5ms", GPO_ESYNTAX, "two-letter unit"},
        {"h", GPO_ESYNTAX, "unit without a number"},
        {"1h30m", GPO_ESYNTAX, "two units"},
        {"1:2:3:4", GPO_ESYNTAX, "four fields"},
        {"1-2-3", GPO_ESYNTAX, "two days"},
        {"1-", GPO_ESYNTAX, "days without hours"},
        {"-", GPO_ESYNTAX, "dash alone"},
        {":30", GPO_ESYNTAX, "empty first field"},
        {"30:", GPO_ESYNTAX, "empty last field"},
        {"1::3", GPO_ESYNTAX, "empty middle field"},
        {"1-2:3:4s", GPO_ESYNTAX, "Slurm form with a unit"},
        {"unlimitedx", GPO_ESYNTAX, "word with a tail"},
        {"5:60", GPO_ERANGE, "MM:SS with second 60"},
        {"1:60:00", GPO_ERANGE, "HH:MM:SS with minute 60"},
        {"1:00:60", GPO_ERANGE, "HH:MM:SS with second 60"},
        {"1-24", GPO_ERANGE, "D-HH with hour 24"},
        {"1-00:60", GPO_ERANGE, "D-HH:MM with minute 60"},
        {"1-00:00:60", GPO_ERANGE, "D-HH:MM:SS with second 60"},
        {"99999999999999999999", GPO_EOVERFLOW, "number past int64"},
        {"9223372036854776s", GPO_EOVERFLOW, "past the largest duration"},
        {"106751991167301d", GPO_EOVERFLOW, "days times 86400 past int64"},
        {"153722867280912931", GPO_EOVERFLOW, "minutes times 60 past int64"},
        {"106751991167300-00", GPO_EOVERFLOW, "D-HH past the largest duration"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t s = 42;
        int rc = timefmt_parse_duration(bad[i].text, &s);
        if (rc != bad[i].code)
            fail_msg("'%s' (%s): got %d (%s), want %d", bad[i].text, bad[i].why, rc,
                     gpo_strerror(rc), bad[i].code);
        assert_int_equal(s, 42);
    }
    int64_t s;
    assert_int_equal(timefmt_parse_duration(NULL, &s), GPO_EINVAL);
    assert_int_equal(timefmt_parse_duration("5", NULL), GPO_EINVAL);
}

static void test_durations_display_as_slurm_and_parse_back(void **state)
{
    (void)state;
    static const struct vector v[] = {
        {"00:00:00", 0},
        {"00:00:59", 59},
        {"01:00:00", 3600},
        {"23:59:59", 86399},
        {"1-00:00:00", 86400},
        {"1-02:03:04", 93784},
        {"365-00:00:00", 31536000},
    };
    char buf[TIMEFMT_DURATION_LEN];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        assert_int_equal(timefmt_duration(v[i].ms, buf, sizeof(buf)), 0);
        assert_string_equal(buf, v[i].text);
        assert_duration(buf, v[i].ms);
    }
    assert_int_equal(timefmt_duration(TIMEFMT_UNLIMITED, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "UNLIMITED");
    assert_duration(buf, TIMEFMT_UNLIMITED);
    assert_int_equal(timefmt_duration(TIMEFMT_DURATION_MAX_S, buf, sizeof(buf)), 0);
    assert_duration(buf, TIMEFMT_DURATION_MAX_S);

    uint64_t seed = 12345;
    for (int i = 0; i < 100000; i++) {
        int64_t s = (int64_t)(next_random(&seed) % (uint64_t)TIMEFMT_DURATION_MAX_S);
        if (i % 2)
            s %= 86400 * 3; /* short ones too, both display forms */
        assert_int_equal(timefmt_duration(s, buf, sizeof(buf)), 0);
        int64_t back;
        assert_int_equal(timefmt_parse_duration(buf, &back), 0);
        assert_int_equal(back, s);
    }

    memset(buf, 'x', sizeof(buf));
    assert_int_equal(timefmt_duration(0, buf, 8), GPO_ENOBUFS);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(timefmt_duration(0, buf, 9), 0);
    assert_int_equal(timefmt_duration(-5, buf, sizeof(buf)), GPO_EINVAL);
    assert_int_equal(timefmt_duration(5, NULL, 0), GPO_EINVAL);
}

/* ---- begin times -------------------------------------------------------------- */

/* 2026-12-02T10:30:00Z, a Wednesday, as "now". */
#define NOW_S INT64_C(1796207400)
#define DAY_S INT64_C(86400)

static void assert_begin(const char *text, int64_t offset_s, int64_t want)
{
    int64_t got = -1;
    int rc = timefmt_parse_begin(text, NOW_S, offset_s, &got);
    if (rc != 0 || got != want)
        fail_msg("'%s' (offset %" PRId64 "): rc %d, %" PRId64 ", expected %" PRId64, text, offset_s,
                 rc, got, want);
}

static void test_begin_takes_each_of_sbatchs_forms(void **state)
{
    (void)state;
    int64_t midnight = NOW_S - 10 * 3600 - 30 * 60; /* 2026-12-02T00:00:00Z */
    assert_begin("now", 0, NOW_S);
    assert_begin("now+60", 0, NOW_S + 60);
    assert_begin("now+90seconds", 0, NOW_S + 90);
    assert_begin("now+30minutes", 0, NOW_S + 1800);
    assert_begin("now+1hour", 0, NOW_S + 3600);
    assert_begin("NOW+2HOURS", 0, NOW_S + 7200);
    assert_begin("now+3days", 0, NOW_S + 3 * DAY_S);
    assert_begin("now+1week", 0, NOW_S + 7 * DAY_S);
    assert_begin("now+5m", 0, NOW_S + 300);
    /* A time of day: today's while it is ahead, else tomorrow's. */
    assert_begin("16:00", 0, midnight + 16 * 3600);
    assert_begin("16:00:30", 0, midnight + 16 * 3600 + 30);
    assert_begin("09:00", 0, midnight + DAY_S + 9 * 3600);
    assert_begin("10:30", 0, midnight + DAY_S + 10 * 3600 + 30 * 60); /* now itself has passed */
    assert_begin("noon", 0, midnight + 12 * 3600);
    assert_begin("fika", 0, midnight + 15 * 3600);
    assert_begin("teatime", 0, midnight + 16 * 3600);
    assert_begin("midnight", 0, midnight + DAY_S);
    assert_begin("today", 0, midnight);
    assert_begin("Tomorrow", 0, midnight + DAY_S);
    assert_begin("2026-12-24", 0, midnight + 22 * DAY_S);
    assert_begin("2026-12-24T08:15", 0, midnight + 22 * DAY_S + 8 * 3600 + 15 * 60);
    assert_begin("2026-12-24T08:15:07", 0, midnight + 22 * DAY_S + 8 * 3600 + 15 * 60 + 7);
    /* Local time: one hour east of UTC, 16:00 there is 15:00Z; a day there
     * begins at 23:00Z the day before. */
    assert_begin("16:00", 3600, midnight + 15 * 3600);
    assert_begin("2026-12-24T08:15", 3600, midnight + 22 * DAY_S + 7 * 3600 + 15 * 60);
    assert_begin("today", 3600, midnight - 3600);
    /* Five hours west, it is 05:30 there: 09:00 is still ahead today. */
    assert_begin("09:00", -5 * 3600, midnight + 14 * 3600);
    assert_begin("today", -5 * 3600, midnight + 5 * 3600);
}

static void test_begin_refuses_other_forms_with_the_reason(void **state)
{
    (void)state;
    static const struct bad bad[] = {
        {"", GPO_ESYNTAX, "empty"},
        {"soon", GPO_ESYNTAX, "not a form"},
        {"now-1hour", GPO_ESYNTAX, "only now+"},
        {"now+", GPO_ESYNTAX, "no count"},
        {"now+1fortnight", GPO_ESYNTAX, "unknown unit"},
        {"now+1 hour", GPO_ESYNTAX, "a space"},
        {"16", GPO_ESYNTAX, "an hour alone"},
        {"6:00", GPO_ESYNTAX, "one-digit hour"},
        {"16:00pm", GPO_ESYNTAX, "trailing text"},
        {"25:00", GPO_ERANGE, "hour 25"},
        {"12:60", GPO_ERANGE, "minute 60"},
        {"12:00:61", GPO_ERANGE, "second 61"},
        {"2026-02-30", GPO_ERANGE, "February 30"},
        {"2026-13-01", GPO_ERANGE, "month 13"},
        {"1969-12-31", GPO_ERANGE, "before 1970"},
        {"2026-12-24T25:00", GPO_ERANGE, "hour 25 of a date"},
        {"2026-12-24 08:00", GPO_ESYNTAX, "a space, not T"},
        {"2026-12-24T08", GPO_ESYNTAX, "an hour without minutes"},
        {"now+99999999999999999999", GPO_EOVERFLOW, "too many seconds"},
        {"now+9999999999999days", GPO_EOVERFLOW, "past 9999"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t got = 12345;
        int rc = timefmt_parse_begin(bad[i].text, NOW_S, 0, &got);
        if (rc != bad[i].code || got != 12345)
            fail_msg("'%s' (%s): rc %d, expected %d", bad[i].text, bad[i].why, rc, bad[i].code);
    }
    int64_t got;
    assert_int_equal(timefmt_parse_begin(NULL, NOW_S, 0, &got), GPO_EINVAL);
    assert_int_equal(timefmt_parse_begin("now", NOW_S, 0, NULL), GPO_EINVAL);
    assert_int_equal(timefmt_parse_begin("now", -1, 0, &got), GPO_EINVAL);
    assert_int_equal(timefmt_parse_begin("now", NOW_S, 2 * DAY_S, &got), GPO_EINVAL);
    /* The forms are named for messages. */
    assert_non_null(strstr(TIMEFMT_BEGIN_FORMS, "now[+N"));
    assert_non_null(strstr(TIMEFMT_BEGIN_FORMS, "YYYY-MM-DD"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vectors_format_and_parse),
        cmocka_unit_test(test_round_trip_agrees_with_gmtime),
        cmocka_unit_test(test_every_day_from_1600_to_2400_is_consecutive),
        cmocka_unit_test(test_leap_years_follow_the_gregorian_rules),
        cmocka_unit_test(test_offsets_separators_and_fractions),
        cmocka_unit_test(test_leap_second_is_folded_to_59),
        cmocka_unit_test(test_malformed_times_are_refused_with_the_reason),
        cmocka_unit_test(test_format_refuses_small_buffers_and_out_of_range),
        cmocka_unit_test(test_slurm_and_suffixed_durations),
        cmocka_unit_test(test_malformed_durations_are_refused_with_the_reason),
        cmocka_unit_test(test_durations_display_as_slurm_and_parse_back),
        cmocka_unit_test(test_begin_takes_each_of_sbatchs_forms),
        cmocka_unit_test(test_begin_refuses_other_forms_with_the_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

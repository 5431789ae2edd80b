/*
 * timefmt.h - times and durations as users read and write them.
 *
 * A timestamp is int64_t milliseconds since the Unix epoch, UTC; users see it
 * as RFC 3339 ("2026-11-30T13:23:27Z"). A duration is int64_t seconds; users
 * see it as Slurm shows a time limit ("1-04:00:00") and may write it as Slurm
 * accepts one ("90", "4:00:00", "2-12") or with a unit ("90s", "30m", "4h",
 * "2d").
 *
 * Every function is pure and thread-safe: no gmtime, no locale, no timezone
 * database (the calendar arithmetic is Howard Hinnant's days/civil pair).
 *
 * Errors: each function returns 0 or one of the negative TIMEFMT_* codes
 * below (a table of this module's own, as util depends on nothing but libc,
 * jansson and libsodium); out-parameters and caller buffers are written only
 * on success.
 */
#ifndef GPUORCH_UTIL_TIMEFMT_H
#define GPUORCH_UTIL_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* The timestamps RFC 3339's four-digit years can show:
 * 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z. */
#define TIMEFMT_MIN_MS INT64_C(-62167219200000)
#define TIMEFMT_MAX_MS INT64_C(253402300799999)

/* Bytes a buffer needs for any timefmt_rfc3339 result, NUL included:
 * "YYYY-MM-DDTHH:MM:SS.mmmZ". */
#define TIMEFMT_RFC3339_LEN 25

/*
 * Writes `ms` as RFC 3339 in UTC into buf (len bytes, NUL-terminated):
 * "2026-11-30T13:23:27Z", or "2026-11-30T13:23:27.120Z" when the milliseconds
 * are not zero (always three fraction digits then). Returns 0; GPO_ERANGE
 * when ms is outside [TIMEFMT_MIN_MS, TIMEFMT_MAX_MS]; GPO_ENOBUFS when
 * len is too small; GPO_EINVAL for a NULL buf.
 */
int timefmt_rfc3339(int64_t ms, char *buf, size_t len);

/*
 * Parses an RFC 3339 date-time into ms since the epoch, UTC:
 *     YYYY-MM-DD ("T" | "t" | " ") HH:MM:SS [ "." 1*DIGIT ] ("Z" | "z" | ("+"|"-") HH:MM)
 * or a plain date "YYYY-MM-DD", taken as midnight UTC (handy for --since).
 * Fraction digits past the millisecond are truncated (toward the earlier
 * time). Second 60 (a leap second) is accepted and read as second 59, at any
 * minute: the controller cannot know the leap-second table and one second of
 * error is harmless; "-00:00" is UTC. Nothing else is accepted: no leading or
 * trailing spaces, no missing seconds, no one-digit fields.
 * Returns 0; GPO_ESYNTAX when s does not have this shape; GPO_ERANGE
 * when a field is out of range (month 13, February 30 outside a leap year,
 * hour 24, minute 60, offset hour 24 or minute 60) or the result lies outside
 * [TIMEFMT_MIN_MS, TIMEFMT_MAX_MS] (so every parsed time can be printed);
 * GPO_EINVAL for a NULL argument. `s` is borrowed.
 */
int timefmt_parse_rfc3339(const char *s, int64_t *ret_ms);

/* The duration that means "no limit": Slurm's UNLIMITED. It is a value no
 * finite duration can have (finite ones are at most TIMEFMT_DURATION_MAX_S), so
 * a comparison "elapsed > limit" is false for it; never add it to a time. */
#define TIMEFMT_UNLIMITED INT64_MAX

/* The largest finite duration: its milliseconds still fit in int64_t. */
#define TIMEFMT_DURATION_MAX_S (INT64_MAX / 1000)

/*
 * Parses a duration into seconds. Accepted forms:
 *  - Slurm's time limits: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
 *    "D-HH:MM:SS". The first number may be any size ("90" is 90 minutes,
 *    "36:00:00" 36 hours); each later one is bounded by its unit (HH after a
 *    day at most 23, MM and SS at most 59), else GPO_ERANGE.
 *  - gpuorch's own: a number and one unit, "90s", "30m", "4h", "2d" (lower
 *    case only).
 *  - "UNLIMITED", "INFINITE" (any case) and "-1", as Slurm: TIMEFMT_UNLIMITED.
 * "0" and "0s" are a zero duration (what zero means is the caller's business).
 * Returns 0; GPO_ESYNTAX for anything else (empty, signs, spaces, other
 * units, an empty field); GPO_ERANGE as above; GPO_EOVERFLOW when the
 * total exceeds TIMEFMT_DURATION_MAX_S; GPO_EINVAL for a NULL argument.
 */
int timefmt_parse_duration(const char *s, int64_t *ret_s);

/* Bytes a buffer needs for any timefmt_duration result, NUL included. */
#define TIMEFMT_DURATION_LEN 32

/*
 * Writes a duration of `s` seconds as Slurm shows it: "HH:MM:SS" under a day
 * ("00:05:00"), "D-HH:MM:SS" from one day ("1-00:00:00"), and "UNLIMITED" for
 * TIMEFMT_UNLIMITED. Returns 0; GPO_EINVAL for a negative s or a NULL buf;
 * GPO_ENOBUFS when len is too small.
 */
int timefmt_duration(int64_t s, char *buf, size_t len);

/* The latest begin time: 9999-12-31T23:59:59Z. */
#define TIMEFMT_BEGIN_MAX_S INT64_C(253402300799)
/* The forms timefmt_parse_begin takes, for messages. */
#define TIMEFMT_BEGIN_FORMS                                                                        \
    "HH:MM[:SS], now[+N[seconds|minutes|hours|days|weeks]], YYYY-MM-DD[THH:MM[:SS]], "             \
    "today, tomorrow, midnight, noon, fika or teatime"

/*
 * Parses sbatch's --begin into Unix seconds, at now_s in a zone utc_offset_s
 * east of UTC (the caller's local time; -86400..86400): "HH:MM[:SS]" (today,
 * or tomorrow once that time has passed), "now", "now+N" with an optional
 * unit (seconds, the default, minutes, hours, days, weeks; also s, m, h, d),
 * "YYYY-MM-DD[THH:MM[:SS]]" local, "today" and "tomorrow" (midnight),
 * "midnight" (the next one), "noon", "fika" (15:00), "teatime" (16:00), as
 * times of day. Names in any case. Returns 0; GPO_ESYNTAX for another form;
 * GPO_ERANGE for a field out of range (25:00, 2026-02-30) or a time before
 * 1970 or after TIMEFMT_BEGIN_MAX_S; GPO_EOVERFLOW; GPO_EINVAL for bad
 * arguments.
 */
int timefmt_parse_begin(const char *s, int64_t now_s, int64_t utc_offset_s, int64_t *ret_s);

#endif

/*
 * sigspec.c - Slurm's --signal syntax both ways (sigspec.h).
 */
#include "util/sigspec.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    const char *name;
    int num;
} names[] = {
    {"HUP", SIGHUP},     {"INT", SIGINT},   {"QUIT", SIGQUIT},     {"ABRT", SIGABRT},
    {"KILL", SIGKILL},   {"USR1", SIGUSR1}, {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},
    {"ALRM", SIGALRM},   {"TERM", SIGTERM}, {"CONT", SIGCONT},     {"STOP", SIGSTOP},
    {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},     {"URG", SIGURG},
    {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},
    {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"PWR", SIGPWR},       {"SYS", SIGSYS},
};

/* Digits only, at most max, into *ret; false otherwise. */
static bool read_count(const char *s, size_t len, long max, long *ret)
{
    long v = 0;
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
        if (v > max)
            return false;
    }
    *ret = v;
    return true;
}

int sigspec_parse(const char *text, struct sigspec *ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *t = text ? text : "";
    const char *shown = jsonv_quote(t, strlen(t), q);
    bool batch = strncmp(t, "B:", 2) == 0;
    if (batch)
        t += 2;
    else if (t[0] && t[1] == ':')
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "in '%s', only 'B:' (the batch shell alone) may come before the signal",
                          shown);
    const char *at = strchr(t, '@');
    size_t nlen = at ? (size_t)(at - t) : strlen(t);
    long secs = SIGSPEC_DEFAULT_SECS, num = 0;
    if (at && !read_count(at + 1, strlen(at + 1), SIGSPEC_BEFORE_MAX, &secs))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "in '%s', the time after '@' is not 0..%d seconds", shown,
                          SIGSPEC_BEFORE_MAX);
    if (!read_count(t, nlen, SIGSPEC_NUM_MAX, &num)) {
        const char *name = nlen > 3 && strncasecmp(t, "SIG", 3) == 0 ? t + 3 : t;
        size_t len = nlen - (size_t)(name - t);
        for (size_t k = 0; k < ARRAY_LEN(names) && !num; k++)
            if (strlen(names[k].name) == len && strncasecmp(names[k].name, name, len) == 0)
                num = names[k].num;
    }
    if (num < 1)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "'%s' is not [B:]SIG[@SECS] with SIG a signal name (USR1, TERM, ...) "
                          "or a number 1..%d",
                          shown, SIGSPEC_NUM_MAX);
    *ret = (struct sigspec){(int32_t)num, (int32_t)secs, batch};
    return 0;
}

void sigspec_format(const struct sigspec *s, char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = '\0';
    if (s->num <= 0)
        return;
    const char *name = NULL;
    for (size_t k = 0; k < ARRAY_LEN(names) && !name; k++)
        if (names[k].num == s->num)
            name = names[k].name;
    const char *b = s->batch_only ? "B:" : "";
    if (name)
        snprintf(buf, len, "%s%s@%d", b, name, (int)s->before_s);
    else
        snprintf(buf, len, "%s%d@%d", b, (int)s->num, (int)s->before_s);
}

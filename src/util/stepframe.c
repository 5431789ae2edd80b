/*
 * stepframe.c - a job step's output frames (stepframe.h).
 */
#include "util/stepframe.h"

#include <string.h>

#include "base/err.h"
#include "base/banned.h"

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void stepframe_head(const struct stepframe *f, uint8_t out[STEPFRAME_HEAD])
{
    out[0] = (uint8_t)f->type;
    put32(out + 1, f->task);
    put32(out + 5, f->len);
}

int stepframe_parse(const uint8_t in[STEPFRAME_HEAD], struct stepframe *ret)
{
    struct stepframe f = {
        .type = (enum stepframe_type)in[0], .task = get32(in + 1), .len = get32(in + 5)};
    if (f.type < STEPFRAME_STDOUT || f.type > STEPFRAME_HANGUP || f.len > STEPFRAME_DATA_MAX ||
        (f.type == STEPFRAME_EXIT && f.len != 8) || (f.type == STEPFRAME_WINSIZE && f.len != 4) ||
        (f.type == STEPFRAME_HANGUP && f.len != 0))
        return GPO_EINVAL;
    *ret = f;
    return 0;
}

void stepframe_exit_data(int32_t status, int32_t signal, uint8_t out[8])
{
    put32(out, (uint32_t)status);
    put32(out + 4, (uint32_t)signal);
}

void stepframe_exit_read(const uint8_t in[8], int32_t *ret_status, int32_t *ret_signal)
{
    *ret_status = (int32_t)get32(in);
    *ret_signal = (int32_t)get32(in + 4);
}

bool stepframe_is_input(enum stepframe_type type)
{
    return type == STEPFRAME_STDIN || type == STEPFRAME_WINSIZE || type == STEPFRAME_HANGUP;
}

void stepframe_winsize_data(uint16_t rows, uint16_t cols, uint8_t out[4])
{
    out[0] = (uint8_t)(rows >> 8);
    out[1] = (uint8_t)rows;
    out[2] = (uint8_t)(cols >> 8);
    out[3] = (uint8_t)cols;
}

void stepframe_winsize_read(const uint8_t in[4], uint16_t *ret_rows, uint16_t *ret_cols)
{
    *ret_rows = (uint16_t)(in[0] << 8 | in[1]);
    *ret_cols = (uint16_t)(in[2] << 8 | in[3]);
}

int stepframe_reader_feed(struct stepframe_reader *r, const void *data, size_t len,
                          stepframe_frame_fn on_frame, void *ctx)
{
    const uint8_t *p = data;
    int rc = 0;
    while (len && !rc) {
        size_t room = sizeof(r->buf) - r->len, n = len < room ? len : room;
        memcpy(r->buf + r->len, p, n);
        r->len += n, p += n, len -= n;
        size_t at = 0;
        struct stepframe f;
        while (!rc && r->len - at >= STEPFRAME_HEAD) {
            if (stepframe_parse(r->buf + at, &f) != 0)
                return GPO_EINVAL;
            if (r->len - at < STEPFRAME_HEAD + f.len)
                break;
            rc = on_frame(ctx, &f, r->buf + at + STEPFRAME_HEAD);
            at += STEPFRAME_HEAD + f.len;
        }
        memmove(r->buf, r->buf + at, r->len - at);
        r->len -= at;
    }
    return rc;
}

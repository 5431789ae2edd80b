/* fuzz_router_http1.c - libFuzzer target: any bytes as what a client sends
 * the router, or what a replica answers it (src/router/http1.c over Node's
 * http-parser). The first byte: bit 0 picks the side, the rest a read size
 * (1 to 128 bytes, as reads would split the input). A client's requests
 * are taken one at a time (rt_reqr_next after each, as a connection does);
 * a fault is a non-empty line and ends the input; every whole request,
 * forwarded (rt_req_forward), parses again as one request with the same
 * method, body and end-to-end headers' count. An answer, fed to one reader
 * (and the close at the end), is whole or a fault with a line; what the
 * client gets of a whole one parses again as a whole answer with the same
 * status. tests/fuzz/run.sh builds and runs it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "router/router.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEADER 8192
#define MAX_BODY   65536

static void check_fault(const char *fault)
{
    if (!fault || !*fault || strchr(fault, '\n'))
        abort();
}

/* The forwarded request reads back as the same request. */
static void check_forward(const struct rt_reqr *r)
{
    struct rt_buf out = {0};
    if (rt_req_forward(r, rt_msg_line(&r->m), "127.0.0.1", "10.0.0.1:80", &out))
        abort();
    struct rt_reqr again;
    rt_reqr_init(&again, MAX_HEADER * 4, MAX_BODY);
    size_t took = rt_reqr_feed(&again, out.data, out.len);
    if (again.stage != RT_DONE || took != out.len || again.method != r->method ||
        again.body.len != r->body.len ||
        (r->body.len && memcmp(again.body.data, r->body.data, r->body.len)))
        abort();
    rt_reqr_release(&again);
    rt_buf_release(&out);
}

static void client_side(const char *p, size_t size, size_t step)
{
    struct rt_reqr r;
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    size_t at = 0;
    while (at < size) {
        size_t n = size - at > step ? step : size - at;
        size_t took = rt_reqr_feed(&r, p + at, n);
        if (took > n)
            abort();
        at += took;
        if (r.stage == RT_FAULT) {
            check_fault(r.fault);
            if (r.fault_code != 400 && r.fault_code != 413)
                abort();
            break;
        }
        if (r.stage == RT_DONE) {
            check_forward(&r);
            rt_reqr_next(&r);
        } else if (took < n) {
            abort(); /* neither whole nor refused, yet it stopped */
        }
    }
    rt_reqr_release(&r);
}

static void replica_side(const char *p, size_t size, size_t step, bool client11)
{
    struct rt_buf out = {0};
    struct rt_resr r = {0};
    rt_resr_start(&r, &out, MAX_HEADER, false, client11, false);
    size_t at = 0;
    while (at < size && r.stage != RT_DONE && r.stage != RT_FAULT) {
        size_t n = size - at > step ? step : size - at;
        size_t took = rt_resr_feed(&r, p + at, n);
        if (took > n || (took < n && r.stage != RT_DONE && r.stage != RT_FAULT))
            abort();
        at += took;
    }
    if (r.stage != RT_DONE && r.stage != RT_FAULT)
        rt_resr_eof(&r);
    if (r.stage == RT_FAULT)
        check_fault(r.fault);
    else if (r.stage != RT_DONE)
        abort();
    if (r.stage == RT_DONE && !r.close_out) { /* framed: it reads back whole */
        struct rt_buf again_out = {0};
        struct rt_resr again = {0};
        rt_resr_start(&again, &again_out, MAX_HEADER * 4, false, true, false);
        size_t took = rt_resr_feed(&again, out.data, out.len);
        if (again.stage != RT_DONE || took != out.len || again.status != r.status)
            abort();
        rt_resr_release(&again);
        rt_buf_release(&again_out);
    }
    rt_resr_release(&r);
    rt_buf_release(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {
        http_parser_set_max_header_size(MAX_HEADER * 4);
        once = true;
    }
    if (size < 1)
        return 0;
    size_t step = (size_t)(data[0] >> 1) + 1;
    const char *p = (const char *)data + 1;
    if (data[0] & 1)
        replica_side(p, size - 1, step, (data[0] & 2) != 0);
    else
        client_side(p, size - 1, step);
    return 0;
}

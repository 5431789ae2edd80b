#!/usr/bin/env python3
"""serve_replay.py - the Azure LLM trace as real HTTP load through the router.

bench/serve_replay.sh starts the cluster (controller, agent on the fake NVML,
router, a service of the example server) and runs this; it can also be pointed
at any running router. Each trace request (arrival_ms, input_tokens,
output_tokens; ../shared/traces/README.md) becomes one streamed
POST /v1/completions with the service's model, sent at arrival / COMPRESS on
its own connection (open loop: late answers never delay later arrivals).

Time compression: the trace's hour runs in 3600 / COMPRESS seconds (default
20: 3 minutes). Service time is compressed by the same factor by dividing the
token counts by TOKEN_SCALE (default COMPRESS; at least 1 token each) while the
example server keeps its own prefill and decode speeds, so a replica's load
(requests in flight) matches the uncompressed trace's. The wrapper scales the
autoscaler's windows and the model load time by COMPRESS too.

Measured: time to first token (the first SSE `data:` chunk) and end to end
(the last byte), in the compressed clock; replicas over time, sampled from
GET /v1/services/NAME every --sample-s; GPU-hours of the replicas that held a
GPU (placed: starting on a node, ready, draining), converted back to trace
time (x COMPRESS), against a fixed fleet of the peak replica count held for
the whole window.

Usage: serve_replay.py --router http://127.0.0.1:PORT --server URL --token T
       --service chat [--trace FILE] [--compress 20] [--token-scale N]
       [--start-s 0] [--window-s 3600] [--gpus-per-replica 1] [--csv FILE]
"""
import argparse
import asyncio
import csv
import gzip
import json
import sys
import time
import urllib.parse
import urllib.request


def load_trace(path, start_s, window_s):
    rows = []
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            t = int(r["arrival_ms"]) / 1000
            if t < start_s:
                continue
            if t >= start_s + window_s:
                break
            rows.append((t - start_s, int(r["input_tokens"]), int(r["output_tokens"])))
    return rows


async def one_request(host, port, model, tin, tout, results, t_sched):
    # The example server takes prompt_tokens as the prompt's length (its
    # README); other servers count the prompt's words.
    body = json.dumps({"model": model, "prompt": "tok " * min(tin, 64), "prompt_tokens": tin,
                       "max_tokens": tout, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode()
    ttft = None
    status = 0
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + body)
        await writer.drain()
        buf = b""
        header_end = -1
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            buf += chunk
            if header_end < 0:
                header_end = buf.find(b"\r\n\r\n")
                if header_end >= 0:
                    status = int(buf[9:12])
            if ttft is None and header_end >= 0 and b"data:" in buf[header_end:]:
                ttft = time.monotonic() - t_sched
            if len(buf) > 1 << 20:
                buf = buf[:header_end + 4] if header_end >= 0 else b""
        writer.close()
    except (OSError, ValueError) as e:
        results.append((0, None, None, str(e)))
        return
    e2e = time.monotonic() - t_sched
    results.append((status, ttft if ttft is not None else e2e, e2e, None))


def get_service(server, token, name):
    req = urllib.request.Request(f"{server}/v1/services/{name}",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def replica_counts(svc):
    st = svc.get("status") or {}
    reps = st.get("replicas") or []
    placed = sum(1 for r in reps if r.get("state") in ("ready", "draining")
                 or (r.get("state") == "starting" and r.get("node")))
    ready = sum(1 for r in reps if r.get("state") == "ready")
    return st.get("desired", 0), ready, placed


async def sampler(args, samples, stop, t0):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            svc = await loop.run_in_executor(None, get_service, args.server, args.token,
                                             args.service)
            samples.append((time.monotonic() - t0,) + replica_counts(svc))
        except (OSError, ValueError) as e:
            samples.append((time.monotonic() - t0, None, None, None))
            print(f"# sample failed: {e}", file=sys.stderr)
        try:
            await asyncio.wait_for(stop.wait(), args.sample_s)
        except asyncio.TimeoutError:
            pass


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")


async def replay(args, rows):
    u = urllib.parse.urlparse(args.router)
    host, port = u.hostname, u.port
    results, samples, tasks = [], [], []
    stop = asyncio.Event()
    t0 = time.monotonic()
    samp = asyncio.create_task(sampler(args, samples, stop, t0))
    for t, tin, tout in rows:
        at = t0 + t / args.compress
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tin = max(1, round(tin / args.token_scale))
        tout = max(1, round(tout / args.token_scale))
        tasks.append(asyncio.create_task(one_request(host, port, args.model or args.service,
                                                     tin, tout, results, at)))
    await asyncio.gather(*tasks)
    t_end = time.monotonic() - t0
    stop.set()
    await samp
    return results, samples, t_end


def report(args, rows, results, samples, t_end):
    ok = [r for r in results if r[0] == 200]
    by_status = {}
    for r in results:
        by_status[r[0]] = by_status.get(r[0], 0) + 1
    c = args.compress
    print(f"# serve_replay: {len(rows)} requests of {args.trace} "
          f"[{args.start_s:.0f} s, +{args.window_s:.0f} s), time / {c:g} "
          f"({args.window_s / c:.0f} s of wall clock), tokens / {args.token_scale:g}")
    print(f"requests     {len(results)} sent in {t_end:.1f} s; status "
          + ", ".join(f"{k or 'transport error'}: {v}" for k, v in sorted(by_status.items())))
    ttft, e2e = [r[1] * 1e3 for r in ok], [r[2] * 1e3 for r in ok]
    print(f"ttft ms      p50 {pct(ttft, 50):.1f}  p99 {pct(ttft, 99):.1f}  max "
          f"{max(ttft, default=float('nan')):.1f}   (compressed clock; x {c:g} for trace time)")
    print(f"e2e ms       p50 {pct(e2e, 50):.1f}  p99 {pct(e2e, 99):.1f}  max "
          f"{max(e2e, default=float('nan')):.1f}")
    errs = [r[3] for r in results if r[3]]
    if errs:
        print(f"first transport error: {errs[0]}")
    good = [s for s in samples if s[1] is not None]
    if not good:
        print("replicas     no sample of GET /v1/services answered")
        return
    # Replicas over time: one row per BUCKET_S of trace time.
    bucket = args.bucket_s / c
    print(f"replicas over time (per {args.bucket_s:.0f} s of trace time: requests/s in trace "
          f"time, desired, ready and placed replicas, mean/max):")
    arrivals = [t / c for t, _, _ in rows]
    nb = int(max(t_end, bucket) / bucket) + 1
    for b in range(nb):
        lo, hi = b * bucket, (b + 1) * bucket
        ss = [s for s in good if lo <= s[0] < hi]
        if not ss:
            continue
        n_arr = sum(1 for a in arrivals if lo <= a < hi)
        mean = lambda k: sum(s[k] for s in ss) / len(ss)
        print(f"  t={lo * c:6.0f}s rps={n_arr / args.bucket_s:6.2f} desired {mean(1):4.1f}/"
              f"{max(s[1] for s in ss):2d} ready {mean(2):4.1f}/{max(s[2] for s in ss):2d} "
              f"placed {mean(3):4.1f}/{max(s[3] for s in ss):2d}")
    gh = 0.0
    for a, b in zip(good, good[1:]):
        gh += a[3] * (b[0] - a[0])
    gh = gh * args.gpus_per_replica * c / 3600
    peak = max(s[3] for s in good)
    span = (good[-1][0] - good[0][0]) * c / 3600
    fixed = peak * args.gpus_per_replica * span
    print(f"gpu-hours    autoscaled {gh:.2f} over {span:.2f} h of trace time; fixed fleet of "
          f"the peak ({peak} replicas x {args.gpus_per_replica:g} GPU) {fixed:.2f}: "
          f"{100 * gh / fixed if fixed else float('nan'):.0f}% of it")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("t_s,desired,ready,placed\n")
            for s in good:
                f.write(f"{s[0] * c:.1f},{s[1]},{s[2]},{s[3]}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--router", required=True)
    p.add_argument("--server", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--service", default="chat")
    p.add_argument("--model", default=None, help="the body's model (default the service)")
    p.add_argument("--trace", default="../shared/traces/azure_llm2023_conv.csv.gz")
    p.add_argument("--compress", type=float, default=20)
    p.add_argument("--token-scale", type=float, default=None)
    p.add_argument("--start-s", type=float, default=0)
    p.add_argument("--window-s", type=float, default=3600)
    p.add_argument("--gpus-per-replica", type=float, default=1)
    p.add_argument("--sample-s", type=float, default=0.5)
    p.add_argument("--bucket-s", type=float, default=300, help="trace seconds per row")
    p.add_argument("--csv", default=None, help="the samples, in trace time")
    args = p.parse_args()
    args.token_scale = args.token_scale or args.compress
    rows = load_trace(args.trace, args.start_s, args.window_s)
    if not rows:
        sys.exit("serve_replay.py: no request in that window")
    results, samples, t_end = asyncio.run(replay(args, rows))
    report(args, rows, results, samples, t_end)
    return 0 if all(r[0] == 200 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

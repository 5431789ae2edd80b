#!/usr/bin/env python3
"""serve_replay.py - replays an LLM request trace (../shared/traces/
azure_llm2023_conv.csv.gz: request_id, arrival_ms, input_tokens,
output_tokens) as real HTTP load against an OpenAI-compatible endpoint (a
gpuorch router, or one example server), and, given the controller, records
the service's replicas over time. Python 3's standard library only.

    bench/serve_replay.py --url http://127.0.0.1:8081 --model chat
        [--trace FILE] [--speedup K] [--start-s S] [--duration-s S]
        [--limit N] [--max-output N] [--max-inflight N] [--timeout-s S]
        [--server URL --token-file FILE --service NAME] [--out DIR]

Each row becomes one streamed POST /v1/completions at arrival_ms / K after
the start, with "prompt_tokens" = input_tokens (the example server's length
hint) and "max_tokens" = output_tokens (capped by --max-output). Time is
compressed K times (default 10): run the example server with its
MODEL_PREFILL_TPS and MODEL_DECODE_TPS multiplied by K as well, so that a
request's service time shrinks with the gaps between arrivals and the
concurrency the replicas see is the trace's.

Prints one JSON summary (requests, failures by status, latency p50/p99 of the
first token and of the whole answer, in the compressed time, and with
--server the replicas' peak, their GPU-hours from the replica counts and a
fixed fleet's sized for the peak over the same time). With --out DIR writes
DIR/requests.csv (one row per request) and DIR/replicas.csv (one row per
second: desired, ready, starting, draining, in flight)."""

import argparse
import csv
import gzip
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "azure_llm2023_conv.csv.gz")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="serve_replay.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the endpoint: http://HOST:PORT")
    p.add_argument("--model", required=True, help="the body's model (the service's name)")
    p.add_argument("--trace", default=DEFAULT_TRACE, help="the trace (CSV, gzip or plain)")
    p.add_argument("--speedup", type=float, default=10.0, help="time compression (default 10)")
    p.add_argument("--start-s", type=float, default=0.0, help="skip the trace's first S s")
    p.add_argument("--duration-s", type=float, default=None,
                   help="replay S s of the trace (before compression)")
    p.add_argument("--limit", type=int, default=None, help="at most N requests")
    p.add_argument("--max-output", type=int, default=1024, help="cap on max_tokens")
    p.add_argument("--max-inflight", type=int, default=2000,
                   help="requests in flight at most; later ones wait (counted late)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="one request's limit")
    p.add_argument("--server", help="the controller, to record the service's replicas")
    p.add_argument("--token-file", help="a token for --server")
    p.add_argument("--service", help="the service to record (default --model)")
    p.add_argument("--gpus-per-replica", type=float, default=1.0,
                   help="GPUs per replica, for GPU-hours (default 1)")
    p.add_argument("--out", help="a folder for requests.csv and replicas.csv")
    a = p.parse_args(argv)
    if a.speedup <= 0:
        p.error("--speedup must be more than 0")
    return a


def read_trace(a):
    opener = gzip.open if a.trace.endswith(".gz") else open
    rows = []
    with opener(a.trace, "rt") as f:
        for r in csv.DictReader(f):
            t = int(r["arrival_ms"]) / 1000.0 - a.start_s
            if t < 0:
                continue
            if a.duration_s is not None and t >= a.duration_s:
                break
            rows.append((t, max(int(r["input_tokens"]), 1),
                         max(1, min(int(r["output_tokens"]), a.max_output))))
            if a.limit and len(rows) >= a.limit:
                break
    return rows


class Result:
    __slots__ = ("due", "sent", "first", "end", "status", "tokens", "error")

    def __init__(self, due):
        self.due, self.sent, self.first, self.end = due, None, None, None
        self.status, self.tokens, self.error = 0, 0, ""


def one_request(a, target, row, res, gate):
    _, prompt, output = row
    body = json.dumps({"model": a.model, "prompt": "replay", "prompt_tokens": prompt,
                       "max_tokens": output, "stream": True}).encode()
    try:
        res.sent = time.monotonic()
        c = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=a.timeout_s)
        c.request("POST", (target.path.rstrip("/") or "") + "/v1/completions", body=body,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        res.status = r.status
        while True:
            line = r.readline()
            if not line:
                break
            # A token's chunk has text; the finishing one has none.
            if line.startswith(b"data: ") and b'"text": ""' not in line and \
                    line.strip() != b"data: [DONE]":
                if res.first is None:
                    res.first = time.monotonic()
                res.tokens += 1
        c.close()
    except (OSError, http.client.HTTPException) as e:
        res.error = type(e).__name__
    finally:
        res.end = time.monotonic()
        gate.release()


class ReplicaLog:
    """GET /v1/services/NAME each second: the replicas by state."""

    def __init__(self, a, t0):
        u = urllib.parse.urlsplit(a.server)
        self.host, self.port = u.hostname, u.port or 80
        with open(a.token_file) as f:
            self.token = f.read().strip()
        self.name = a.service or a.model
        self.t0 = t0
        self.rows = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def sample(self):
        c = http.client.HTTPConnection(self.host, self.port, timeout=5)
        c.request("GET", "/v1/services/" + urllib.parse.quote(self.name),
                  headers={"Authorization": "Bearer " + self.token})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        st = body.get("status") or {}
        reps = st.get("replicas") or []
        count = {s: sum(1 for x in reps if x.get("state") == s)
                 for s in ("ready", "starting", "draining")}
        return {"t": round(time.monotonic() - self.t0, 3), "desired": st.get("desired"),
                "ready": count["ready"], "starting": count["starting"],
                "draining": count["draining"],
                "inflight": sum(x.get("inflight") or 0 for x in reps)}

    def loop(self):
        while not self.stop.is_set():
            try:
                self.rows.append(self.sample())
            except (OSError, ValueError, http.client.HTTPException):
                pass
            self.stop.wait(1.0)

    def finish(self):
        self.stop.set()
        self.thread.join()


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(p / 100.0 * len(v)))], 4)


def summary(a, rows, results, wall, log):
    ok = [r for r in results if r.status == 200 and not r.error]
    codes = {}
    for r in results:
        key = r.error or str(r.status)
        codes[key] = codes.get(key, 0) + 1
    out = {"trace": os.path.basename(a.trace), "speedup": a.speedup, "requests": len(results),
           "ok": len(ok), "outcomes": codes, "wall_s": round(wall, 1),
           "trace_s": round(rows[-1][0] if rows else 0, 1),
           "ttft_p50_s": pct([r.first - r.sent for r in ok if r.first], 50),
           "ttft_p99_s": pct([r.first - r.sent for r in ok if r.first], 99),
           "latency_p50_s": pct([r.end - r.sent for r in ok], 50),
           "latency_p99_s": pct([r.end - r.sent for r in ok], 99),
           "late_p99_s": pct([r.sent - r.due for r in results if r.sent], 99)}
    if log and log.rows:
        held = [x["ready"] + x["starting"] + x["draining"] for x in log.rows]
        peak = max(held)
        secs = len(held)  # one sample a second
        # GPU-hours in the trace's own time: compressed seconds times the speedup.
        used = sum(held) * a.gpus_per_replica * a.speedup / 3600.0
        fixed = peak * secs * a.gpus_per_replica * a.speedup / 3600.0
        out.update({"replicas_peak": peak, "replica_samples": secs,
                    "gpu_hours": round(used, 3), "fixed_fleet_gpu_hours": round(fixed, 3),
                    "saved_pct": round(100.0 * (1 - used / fixed), 1) if fixed else None})
    return out


def write_out(a, results, log):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "requests.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["due_s", "sent_s", "ttft_s", "latency_s", "status", "tokens", "error"])
        t0 = results[0].due if results else 0
        for r in results:
            w.writerow([round(r.due - t0, 4), round((r.sent or r.due) - t0, 4),
                        round(r.first - r.sent, 4) if r.first else "",
                        round(r.end - r.sent, 4) if r.end and r.sent else "",
                        r.status, r.tokens, r.error])
    if log:
        with open(os.path.join(a.out, "replicas.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, ["t", "desired", "ready", "starting", "draining", "inflight"])
            w.writeheader()
            w.writerows(log.rows)


def main(argv):
    a = parse_args(argv)
    rows = read_trace(a)
    if not rows:
        sys.exit("serve_replay.py: no request in the chosen part of the trace")
    target = urllib.parse.urlsplit(a.url)
    gate = threading.BoundedSemaphore(a.max_inflight)
    t0 = time.monotonic()
    log = ReplicaLog(a, t0) if a.server and a.token_file else None
    results, threads = [], []
    for row in rows:
        due = t0 + row[0] / a.speedup
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        gate.acquire()
        res = Result(due)
        results.append(res)
        t = threading.Thread(target=one_request, args=(a, target, row, res, gate), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if log:
        log.finish()
    if a.out:
        write_out(a, results, log)
    print(json.dumps(summary(a, rows, results, wall, log), indent=2))
    return 0 if all(r.status == 200 and not r.error for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""serving_test.py GPUORCH - the serving runtime end to end: a real `gpuorch
server` and real agents on the fake NVML, services applied through PUT
/v1/services/NAME, the test itself standing in for a router (it posts
/v1/router/report and long-polls /v1/router/routes with the join token), and
each replica a small `python3 -c` HTTP server answering /health on $PORT.
Prints TAP.

What it checks: a service at min 0 starts a replica as soon as a router
reports a queued request, and the replica reaches the routing table once its
probe passes; 8 requests in flight with a target of 2 bring 4 or more
replicas; with the load gone it goes back to min after the (short) windows,
its replicas stopped as "scaled down"; a replica killed is replaced; a
rolling update keeps a ready replica in the table throughout and ends on
the new generation; on a full pool a replica preempts a borrowed low-class
training job, which is requeued; a team at its quota leaves the replica
starting with the quota reason in the service's status; a controller restart
keeps the services and their replicas (same jobs), ready again once the
agents (restarted on the new port) report.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Conditions are polled with deadlines, never timed.
KEEP_TMP=1 keeps the directories."""

import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, diag, fake_gpu_uuid, ok, remove_tmp  # noqa: E402
from harness import run_as_root, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
SCALE_S = 60  # scaling waits for placements, startups and windows

SRV = Server(BIN, "gpuorch-serving-test-srv-", extra_args=["--pass-interval", "1"])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-serving-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = JOIN = None
AGENTS = {}

# A replica: /health 200 (the job and the generation it runs), its pid in
# SHARED/pid-JOB so that a check can kill it.
REPLICA = r"""
import http.server, json, os
job = os.environ.get("GPUORCH_JOB_ID", "?")
with open(os.path.join(os.getcwd(), "pid-" + job), "w") as f:
    f.write(str(os.getpid()))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"job": job, "gen": os.environ.get("GEN", "")}).encode()
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""


def spec(name, team="ml", pool="main", **over):
    s = {"name": name, "team": team, "model": f"{name}-model",
         "command": ["python3", "-c", REPLICA], "workdir": SHARED, "env": {"GEN": "1"},
         "resources": {"gpus": 1, "cpus": 1, "mem_mib": 256, "pool": pool},
         "readiness": {"path": "/health", "period_ms": 200, "timeout_ms": 500,
                       "failure_threshold": 2},
         "startup_timeout_s": 60, "drain_timeout_s": 2, "min": 0, "max": 6,
         "autoscaling": {"metric": "concurrency", "target": 2, "stable_window_s": 6,
                         "panic_window_s": 2, "scale_down_delay_s": 0,
                         "scale_to_zero_grace_s": 3}}
    s.update(over)
    return s


def apply(s):
    return SRV.api.expect("PUT", f"/v1/services/{s['name']}", s, want=(200, 201), token=MEMBER)


def service(name):
    st, body, _ = call("GET", f"/v1/services/{name}", token=ADMIN)
    return body if st == 200 else None


def status(name):
    return (service(name) or {}).get("status") or {}


def replicas(name, state=None):
    return [r for r in status(name).get("replicas") or [] if state is None
            or r.get("state") == state]


def routes(since=None, wait_ms=0):
    query = {"wait_ms": str(wait_ms)}
    if since is not None:
        query["since"] = str(since)
    st, body, raw = call("GET", "/v1/router/routes", token=JOIN, query=query)
    return body if st == 200 else None


def endpoints(name):
    table = routes() or {}
    svc = next((s for s in table.get("services") or [] if s.get("name") == name), {})
    return svc.get("endpoints") or []


def report(name, concurrency=0.0, queued=0, inflight=0, reps=(), router="t1"):
    body = {"router": router, "interval_ms": 1000, "services": [
        {"name": name, "concurrency": concurrency, "inflight": inflight, "queued": queued,
         "requests": inflight, "replicas": list(reps)}]}
    st, _, raw = call("POST", "/v1/router/report", body, token=JOIN)
    return st, raw


class Reporter:
    """Reports NAME's load every 0.5 s in a thread, as a router does."""

    def __init__(self, name, concurrency, queued=0):
        self.name, self.concurrency, self.queued = name, concurrency, queued
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop_ev.is_set():
            try:
                report(self.name, self.concurrency, self.queued, int(self.concurrency))
            except OSError as e:  # a slow answer: the next report counts
                diag(f"report: {e!r}")
            self.stop_ev.wait(0.5)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop_ev.set()
        self.t.join()


def health(ep):
    try:
        with urllib.request.urlopen(f"http://{ep['addr']}:{ep['port']}/health", timeout=2) as r:
            return r.status, json.loads(r.read())
    except (OSError, ValueError):
        return None, None


def job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def setup():
    global ADMIN, MEMBER, JOIN
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    JOIN = open(SRV.token_file("join")).read().strip()
    put("/v1/pools/main", {"description": "serving"})
    put("/v1/pools/small", {"description": "one GPU: preemption"})
    put("/v1/pools/capped", {"description": "two GPUs, one in ml's quota"})
    put("/v1/priority-classes/low", {"order": -10})
    put("/v1/teams/ml", {"quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": -1},
                                    {"pool": "small", "guaranteed": 1, "borrow_limit": 0},
                                    {"pool": "capped", "guaranteed": 1, "borrow_limit": 0}]})
    put("/v1/teams/train", {"quotas": [{"pool": "small", "guaranteed": 0, "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "ml", "role": "member"})
    put("/v1/users/tom", {"unix_user": JOB_USER, "team": "train", "role": "member"})
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=t", want=(201,),
                            token=ADMIN)["token"]
    for name, no, n, pool in (("n1", 1, 8, "main"), ("n2", 2, 1, "small"),
                              ("n3", 3, 2, "capped")):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [fake_gpu_uuid(no, g, "5000")
                                                       for g in range(n)], pool=pool)
        ag.write_gpu_list([{"uuid": u, "utilization": 30} for u in ag.uuids])
        AGENTS[name] = ag
        ag.start()

    def up():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(nodes.get(n, {}).get("state") == "up" for n in AGENTS)

    if not wait_until(up, timeout=30, step=0.1):
        raise RuntimeError("the agents did not register")


def cold_start():
    apply(spec("chat"))
    ok(not replicas("chat") and routes() is not None,
       "a service at min 0 has no replica until a request comes", json.dumps(status("chat")))
    st, raw = report("chat", queued=1)
    ok(st == 204, "a router's report is taken (204)", raw)
    started = wait_until(lambda: replicas("chat"), timeout=10, step=0.05)
    ok(started, "a queued request at zero starts a replica", json.dumps(status("chat")))
    eps = wait_until(lambda: [e for e in endpoints("chat") if e.get("state") == "ready"],
                     timeout=SCALE_S, step=0.1)
    ok(eps and eps[0].get("addr") == "127.0.0.1" and health(eps[0])[0] == 200,
       "the replica reaches the routing table once ready, at the node's address, and answers "
       "there", json.dumps(routes()) + AGENTS["n1"].tail())
    table = routes()
    rev = table.get("rev") if table else None
    t0 = time.monotonic()
    later = routes(since=rev, wait_ms=1000)
    ok(later and later.get("rev") == rev and time.monotonic() - t0 >= 0.5,
       "a long-poll with the current revision waits and answers the same revision",
       json.dumps(later))


def scale_up_and_down():
    with Reporter("chat", 8.0):
        many = wait_until(lambda: len(replicas("chat", "ready")) >= 4, timeout=SCALE_S, step=0.2)
        ok(many, "8 requests in flight with a target of 2: 4 or more ready replicas",
           json.dumps(status("chat")))
        st = status("chat")
        ok((st.get("decision") or {}).get("to", 0) >= 4 and st.get("desired", 0) >= 4,
           "the status shows the decision and the desired count", json.dumps(st))
    jobs = [r["job"] for r in replicas("chat")]
    gone = wait_until(lambda: not replicas("chat"), timeout=SCALE_S, step=0.2)
    ok(gone, "with the load gone the service goes back to min (0)", json.dumps(status("chat")))
    ended = [job(j) for j in jobs]
    ok(all(j and j["state"] == "CANCELLED" and "scaled down" in (j.get("reason") or "")
           for j in ended), "its replicas ended CANCELLED, scaled down",
       json.dumps([(j or {}).get("reason") for j in ended]))
    # Its replicas over time (the series the dashboard charts), and nothing of it
    # for another team's member while private_data keeps jobs.
    st, body, raw = call("GET", "/v1/metrics/series?metric=replicas&by=service&key=chat"
                         "&since=-10m&step=1s", token=ADMIN)
    vals = [v for s in (body or {}).get("series") or [] for v in s.get("values") or []
            if v is not None]
    ok(st == 200 and vals and max(vals) >= 4 and vals[-1] == 0,
       "GET /v1/metrics/series?metric=replicas&by=service: chat went to 4 or more and back to 0",
       raw[-600:])
    st, body, raw = call("GET", "/v1/metrics/series?metric=replicas&by=team", token=ADMIN)
    ok(st == 400 and b"by: expected service" in raw, "replicas by team: 400 naming by", raw[:300])
    st, body, raw = call("GET", "/metrics", token=ADMIN)
    ok(st == 200 and 'gpuorch_service_desired_replicas{service="chat"}' in raw.decode()
       and "gpuorch_service_replicas{" in raw.decode(), "/metrics has the service families",
       raw[-1500:])


def replaced_when_killed():
    apply(spec("chat", min=1))
    first = wait_until(lambda: replicas("chat", "ready"), timeout=SCALE_S, step=0.2)
    if not first:
        ok(False, "a min-1 service has a ready replica", json.dumps(status("chat")))
        return
    jid = first[0]["job"]
    pid = int(open(os.path.join(SHARED, f"pid-{jid}")).read())
    os.kill(pid, signal.SIGKILL)
    new = wait_until(lambda: [r for r in replicas("chat", "ready") if r["job"] != jid],
                     timeout=SCALE_S, step=0.2)
    ok(new, "a replica killed is replaced by a new ready one", json.dumps(status("chat")))
    ok(all(e["job"] != jid for e in endpoints("chat")), "the killed one left the table",
       json.dumps(routes()))


def rolling_update():
    gen0 = (service("chat") or {}).get("generation")
    seen_empty = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if not [e for e in endpoints("chat") if e.get("state") == "ready"]:
                seen_empty.append(time.monotonic())
            stop.wait(0.05)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    apply(spec("chat", min=1, env={"GEN": "2"}))
    gen1 = (service("chat") or {}).get("generation")
    rolled = wait_until(lambda: replicas("chat") and all(
        r["generation"] == gen1 and r["state"] == "ready" for r in replicas("chat")),
        timeout=SCALE_S, step=0.2)
    stop.set()
    w.join()
    ok(gen1 and gen0 and gen1 > gen0 and rolled,
       "a spec change rolls the replicas to the new generation", json.dumps(status("chat")))
    ok(not seen_empty, "the routing table kept a ready replica throughout the roll",
       f"{len(seen_empty)} samples without one")
    eps = [e for e in endpoints("chat") if e.get("state") == "ready"]
    ok(eps and health(eps[0])[1] and health(eps[0])[1].get("gen") == "2",
       "the new replica runs the new spec", json.dumps(eps))


def running_job(name, pool, priority, token):
    """A one-GPU job that sleeps, submitted and running; its id."""
    jid = SRV.api.expect("POST", "/v1/jobs", {"name": name, "pool": pool, "gpus": 1,
                                              "priority": priority, "workdir": SHARED,
                                              "command": ["sleep", "600"]},
                         want=(201,), token=token)["id"]
    wait_until(lambda: (job(jid) or {}).get("state") == "RUNNING", timeout=30, step=0.1)
    return jid


def preempts_training():
    tom = SRV.api.expect("POST", "/v1/users/tom/tokens?label=t", want=(201,),
                         token=ADMIN)["token"]
    train = running_job("train", "small", "low", tom)
    apply(spec("big", pool="small", min=1, max=1))
    ready = wait_until(lambda: replicas("big", "ready"), timeout=SCALE_S, step=0.2)
    j = job(train) or {}
    preempted = [a for a in j.get("attempts") or [] if a.get("state") == "PREEMPTED"]
    ok(ready and j.get("state") == "PENDING" and preempted,
       "a serving replica preempts a borrowed low-class training job, which is requeued",
       json.dumps(j) + json.dumps(status("big")))
    call("POST", f"/v1/jobs/{train}/cancel", token=ADMIN)


def waits_at_quota():
    filler = running_job("filler", "capped", "serving", MEMBER)
    apply(spec("capped", pool="capped", min=1, max=1))
    why = wait_until(lambda: [r for r in replicas("capped", "starting")
                              if "quota" in (r.get("reason") or "")], timeout=30, step=0.2)
    ok(why, "with its team at its quota the replica waits, the quota reason in the status",
       json.dumps(status("capped")))
    call("POST", f"/v1/jobs/{filler}/cancel", token=ADMIN)


def blocked_by_budget():
    # A replica is a job: a team over its monthly budget gets no replica below
    # the budget's class (POST /v1/jobs answers 403 there), and says why.
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    node = {n["name"]: n for n in (body or {}).get("nodes") or []}.get("n1") or {}
    gpu_type = ((node.get("gpus") or [{}])[0]).get("gpu_type")
    put(f"/v1/prices/{gpu_type}", {"per_gpu_hour": 360000})
    put("/v1/priority-classes/critical", {"order": 1000})
    put("/v1/teams/ml", {"quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": -1},
                                    {"pool": "small", "guaranteed": 1, "borrow_limit": 0},
                                    {"pool": "capped", "guaranteed": 1, "borrow_limit": 0}],
                         "budget": {"monthly": 1, "block_below": "critical"}})
    # ml's replicas run and cost 100 a GPU-second: over 1 at once.
    apply(spec("poor", min=1, max=1))
    why = wait_until(lambda: (status("poor") or {}).get("blocked"), timeout=30, step=0.2)
    ok(why and "budget" in why and "critical" in why and not replicas("poor"),
       "over its budget, the team's service gets no replica, and its status says why (blocked)",
       json.dumps(status("poor")))
    put("/v1/teams/ml", {"quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": -1},
                                    {"pool": "small", "guaranteed": 1, "borrow_limit": 0},
                                    {"pool": "capped", "guaranteed": 1, "borrow_limit": 0}]})
    started = wait_until(lambda: replicas("poor") and not (status("poor") or {}).get("blocked"),
                         timeout=30, step=0.2)
    ok(started, "with the budget gone, the replica starts and the reason goes",
       json.dumps(status("poor")))
    call("DELETE", "/v1/services/poor", token=ADMIN)


def restart_keeps_services():
    before = sorted(r["job"] for r in replicas("chat"))
    # The server comes back on another port: the agents follow it (their
    # jobs run on meanwhile, and a restarted agent takes them up).
    for ag in AGENTS.values():
        ag.stop()
    SRV.stop()
    SRV.start()
    for ag in AGENTS.values():
        ag.start()
    st, body, raw = call("GET", "/v1/services", token=ADMIN)
    names = sorted(s["name"] for s in (body or {}).get("services") or [])
    ok(st == 200 and {"chat", "big", "capped"} <= set(names),
       "a controller restart keeps the services", raw[:800])
    after = wait_until(lambda: sorted(r["job"] for r in replicas("chat")) or None, timeout=10)
    ok(after == before, "... and their replicas (the same jobs)", f"{before} -> {after}")
    eps = wait_until(lambda: [e for e in endpoints("chat") if e.get("state") == "ready"],
                     timeout=SCALE_S, step=0.2)
    ok(eps, "... ready in the routing table again once the agents report", json.dumps(routes()))


def main():
    print("TAP version 13")
    setup()
    st, _, raw = call("GET", "/v1/services", token=ADMIN)
    if st == 404:
        ok(False, "GET /v1/services exists (the services API)", raw[:300])
        return
    for step in (cold_start, scale_up_and_down, replaced_when_killed, rolling_update,
                 preempts_training, waits_at_quota, blocked_by_budget, restart_keeps_services):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    jobs = [r["job"] for n in ("chat", "big", "capped") for r in replicas(n)]
    for name in ("chat", "big", "capped"):
        call("DELETE", f"/v1/services/{name}", token=ADMIN)
    final = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
    gone = wait_until(lambda: all((job(j) or {}).get("state") in final for j in jobs),
                      timeout=SCALE_S, step=0.2)
    ok(jobs and gone and not endpoints("chat"),
       "deleting the services stops every replica and empties the table",
       json.dumps([job(j) for j in jobs])[:1500])
    reports = [n for n, ag in AGENTS.items()
               if "Sanitizer" in ag.log() or "runtime error:" in ag.log()]
    ok(not reports, "the agents' logs hold no sanitizer report", reports)
    for ag in AGENTS.values():
        ag.stop()
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")
    diag("done")


def on_exit():
    for ag in AGENTS.values():
        ag.kill()
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

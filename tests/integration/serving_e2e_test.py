#!/usr/bin/env python3
"""serving_e2e_test.py GPUORCH - model serving with every part real: a
`gpuorch server`, two agents on the fake NVML, one `gpuorch router` joined
with the controller's join token, and replicas that are the example model
server (examples/serving/server.py, a short --load-s: cold starts are real
but short). Every request goes through the router. Prints TAP.

What it checks: at min 0 the first request (by the body's model, then by
/s/NAME/...) waits through the cold start and succeeds, and none of the
requests sent while the service scales from zero is lost; 8 streams in a
loop with a target of 2 bring 4 or more ready replicas within the panic
window plus the startup time, and the service goes back to min after the
stable window and the grace, its replicas CANCELLED as scaled down; a streamed answer's first chunk reaches the
client while the router still counts the request in flight (30 tokens at 10
tokens/s); a rolling update (the command changes) under a client's steady
loop fails no request and ends with the new generation answering; a replica
killed with SIGKILL in the middle of a stream: the next requests succeed on
the other and the service gets a replacement; a restarted router routes
again from the controller's table; with the controller stopped the router
keeps routing to the last endpoints, and with it back (same port) its
changes reach the router again; bad input: min > max (400 naming the
field, nothing stored), an unknown model (404 with the known names),
Content-Length with Transfer-Encoding (400, connection closed), a body over
--max-body (413).

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Conditions are polled with deadlines, never timed.
KEEP_TMP=1 keeps the directories."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, diag, fake_gpu_uuid, free_port, ok  # noqa: E402
from harness import prom_samples, remove_tmp, run_as_root, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
EXAMPLE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "examples", "serving", "server.py"))
JOB_USER = "gpuorch-test1"
SCALE_S = 60  # placements, startups and windows, on a loaded machine
MAX_BODY = 65536
MODEL = "chat-model"


class FixedServer(Server):
    """The controller on one port for the whole test: the router and the
    agents reach it again at the same URL after a restart."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.fixed = free_port()

    def start(self):
        self.proc = None
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "server", "--data", self.data, "--listen",
             f"127.0.0.1:{self.fixed}"] + self.extra_args, stdout=self.log, stderr=self.log)
        self.port = self.fixed

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        if not wait_until(up, timeout=30, step=0.05):
            raise RuntimeError("server did not start")


# A pass interval far above the serving tick: a service's first reconcile
# must not wait for it.
SRV = FixedServer(BIN, "gpuorch-serving-e2e-srv-", extra_args=["--pass-interval", "30"])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-serving-e2e-")
os.chmod(TMP, 0o755)
ADMIN = MEMBER = None
AGENTS = {}


class Router:
    def __init__(self):
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(TMP, "router.log")

    def start(self):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [BIN, "router", "--server", SRV.url, "--join-token", SRV.token_file("join"),
             "--listen", f"127.0.0.1:{self.port}", "--name", "e2e", "--threads", "2",
             "--max-body", str(MAX_BODY)], stdout=self.log, stderr=self.log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self):
        try:
            with open(self.log_path) as f:
                return "-- router's log:\n" + f.read()[-2000:]
        except OSError:
            return ""

    def conn(self, timeout=SCALE_S):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=SCALE_S):
        """(status, headers, bytes); an OSError when the connection fails."""
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def metrics(self):
        try:
            st, _, data = self.request("GET", "/metrics", timeout=5)
        except OSError:
            return []
        return prom_samples(data.decode()) if st == 200 else []

    def models(self):
        try:
            st, _, data = self.request("GET", "/v1/models", timeout=5)
            return [m["id"] for m in json.loads(data)["data"]] if st == 200 else []
        except (OSError, ValueError, KeyError):
            return []


ROUTER = Router()


def completion(path="/v1/chat/completions", model=MODEL, max_tokens=2, timeout=SCALE_S):
    """A non-streamed completion through the router: (status, body or raw)."""
    body = {"model": model, "max_tokens": max_tokens}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "hello"}]
    else:
        body["prompt"] = "hello"
    if max_tokens is None:
        del body["max_tokens"]
    try:
        st, _, data = ROUTER.request("POST", path, json.dumps(body),
                                     {"Content-Type": "application/json"}, timeout)
    except (OSError, http.client.HTTPException) as e:
        return None, repr(e)
    try:
        return st, json.loads(data)
    except ValueError:
        return st, data


def answered(res):
    st, body = res
    return st == 200 and isinstance(body, dict) and bool(body.get("choices"))


def spec(**over):
    s = {"name": "chat", "team": "ml", "model": MODEL,
         "command": ["python3", EXAMPLE, "--load-s", "1", "--decode-tps", "10",
                     "--max-tokens", "3"],
         "workdir": TMP,
         "resources": {"gpus": 1, "cpus": 1, "mem_mib": 256, "pool": "main"},
         "readiness": {"path": "/health", "period_ms": 200, "timeout_ms": 1000,
                       "failure_threshold": 2},
         "startup_timeout_s": 60, "drain_timeout_s": 5, "min": 0, "max": 6,
         "queue": {"limit": 100, "timeout_ms": SCALE_S * 1000},
         "autoscaling": {"metric": "concurrency", "target": 2, "stable_window_s": 6,
                         "panic_window_s": 2, "scale_down_delay_s": 0,
                         "scale_to_zero_grace_s": 2}}
    s.update(over)
    return s


def apply(s):
    return SRV.api.expect("PUT", f"/v1/services/{s['name']}", s, want=(200, 201), token=MEMBER)


def service(name="chat"):
    try:
        st, body, _ = call("GET", f"/v1/services/{name}", token=ADMIN)
    except OSError:
        return None
    return body if st == 200 else None


def status(name="chat"):
    return (service(name) or {}).get("status") or {}


def replicas(state=None, name="chat"):
    return [r for r in status(name).get("replicas") or []
            if state is None or r.get("state") == state]


def show(name="chat"):
    """`gpuorch service show NAME --json`, as a user reads it."""
    out = subprocess.run([BIN, "service", "show", name, "--json", "--server", SRV.url],
                         capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, GPUORCH_TOKEN=ADMIN))
    try:
        return json.loads(out.stdout) if out.returncode == 0 else None
    except ValueError:
        return None


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def replica_pid(job):
    """The pid of the example server of replica job JOB (by its environment)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            cwd = os.readlink(f"/proc/{d}/cwd")
        except OSError:
            continue
        argv = cmd.split(b"\0")
        # The python process itself, not the shim above it, and this test's
        # (its workdir): other tests' replicas have the same job numbers.
        if (os.path.basename(argv[0]).startswith(b"python") and b"server.py" in cmd
                and cwd == os.path.realpath(TMP) and f"GPUORCH_JOB_ID={job}".encode() in env):
            return int(d)
    return None


def running_on(rep):
    """vllm:num_requests_running of replica REP (its own /metrics), or None."""
    try:
        c = http.client.HTTPConnection(rep["addr"], rep["port"], timeout=5)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, KeyError, TypeError):
        return None
    for name, _, value in prom_samples(text):
        if name == "vllm:num_requests_running":
            return int(value)
    return None


class Load:
    """THREADS client threads, each sending requests in a loop through the
    router until stopped; every result kept."""

    def __init__(self, threads, stream=False, max_tokens=2, path="/v1/chat/completions"):
        self.stream, self.max_tokens, self.path = stream, max_tokens, path
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (status, detail, completion tokens or None)
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]

    def one(self):
        if not self.stream:
            st, body = completion(self.path, max_tokens=self.max_tokens)
            tokens = ((body.get("usage") or {}).get("completion_tokens")
                      if isinstance(body, dict) else None)
            return (st if answered((st, body)) else None), str(body)[:200], tokens
        events, err = stream_events(self.max_tokens)
        good = events and events[-1] == "[DONE]"
        return (200 if good else None), err or str(events[-2:]), None

    def loop(self):
        while not self.stop_ev.is_set():
            res = self.one()
            with self.lock:
                self.results.append(res)
            if res[0] != 200:  # a failure is kept; no busy loop on it
                self.stop_ev.wait(0.05)

    def failures(self):
        with self.lock:
            return [r for r in self.results if r[0] != 200]

    def count(self):
        with self.lock:
            return len(self.results)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *a):
        self.stop_ev.set()
        for t in self.threads:
            t.join(SCALE_S + 10)


def open_stream(max_tokens):
    """A streamed chat completion through the router: (connection, response)."""
    c = ROUTER.conn()
    c.request("POST", "/v1/chat/completions", json.dumps(
        {"model": MODEL, "stream": True, "max_tokens": max_tokens,
         "messages": [{"role": "user", "content": "tell me"}]}),
        {"Content-Type": "application/json"})
    return c, c.getresponse()


def read_event(resp):
    """The data of the next SSE event, or None at the end."""
    buf = b""
    while not buf.endswith(b"\n\n"):
        piece = resp.read1(4096) if buf == b"" else resp.read(1)
        if not piece:
            return None
        buf += piece
    text = buf.decode().strip()
    return text[len("data: "):] if text.startswith("data: ") else text


def stream_events(max_tokens):
    """Every event's data of one stream; (events, error text or None)."""
    events = []
    try:
        c, r = open_stream(max_tokens)
        if r.status != 200:
            return events, f"status {r.status}: {r.read()[:200]!r}"
        while True:
            ev = read_event(r)
            if ev is None:
                break
            events.append(ev)
        c.close()
    except (OSError, http.client.HTTPException) as e:
        return events, repr(e)
    return events, None


# -- the steps --------------------------------------------------------------------------------


def setup():
    global ADMIN, MEMBER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"description": "serving"})
    put("/v1/teams/ml", {"quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "ml", "role": "member"})
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=t", want=(201,),
                            token=ADMIN)["token"]
    for name, no in (("n1", 1), ("n2", 2)):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name,
                       [fake_gpu_uuid(no, g, "5e2e") for g in range(4)], pool="main")
        ag.write_gpu_list([{"uuid": u, "utilization": 30} for u in ag.uuids])
        AGENTS[name] = ag
        ag.start()

    def up():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(nodes.get(n, {}).get("state") == "up" for n in AGENTS)

    if not wait_until(up, timeout=30, step=0.1):
        raise RuntimeError("the agents did not register")
    ROUTER.start()
    if not wait_until(lambda: ROUTER.metrics(), timeout=30, step=0.1):
        raise RuntimeError("the router did not start" + ROUTER.tail())


def cold_start():
    apply(spec())
    # The pass interval is 30 s: the router learns of the new service (and
    # the controller reconciles it) without waiting for it.
    known = wait_until(lambda: MODEL in ROUTER.models(), timeout=10, step=0.05)
    ok(known, "a new service reaches the router's GET /v1/models within seconds",
       ROUTER.tail())
    ok(not replicas(), "at min 0 the service has no replica before a request",
       json.dumps(status()))
    t0 = time.monotonic()
    res = completion()
    ok(answered(res), "the first request (by the body's model) waits through the cold start "
       "and succeeds", f"{res} after {time.monotonic() - t0:.1f} s" + ROUTER.tail())
    gone = wait_until(lambda: not replicas(), timeout=SCALE_S, step=0.2)
    ok(gone, "idle, the service scales back to zero after the window and the grace",
       json.dumps(status()))
    # Back at zero: a burst by /s/NAME/... and by model while it scales up.
    results = [None] * 10

    def send(k):
        path = "/s/chat/v1/completions" if k % 2 else "/v1/chat/completions"
        results[k] = completion(path)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SCALE_S + 10)
    lost = [(k, r) for k, r in enumerate(results) if not answered(r)]
    ok(answered(results[1]), "the first request by /s/chat/... at zero succeeds", results[1])
    ok(not lost, "none of 10 requests sent while scaling from zero is lost", lost)


def scale_up_and_down():
    # From zero again (the burst before scaled it up): the count of the load.
    zero = wait_until(lambda: not replicas(), timeout=SCALE_S, step=0.2)
    ok(zero, "the service is back at zero before the load", json.dumps(status()))
    seen = []
    t0 = time.monotonic()
    with Load(8, stream=True, max_tokens=20) as load:
        many = wait_until(lambda: seen.append(replicas("ready")) or len(seen[-1]) >= 4,
                          timeout=SCALE_S, step=0.2)
        took = time.monotonic() - t0
        shown = show()
    ok(many, "8 concurrent streams with a target of 2: 4 or more ready replicas",
       json.dumps(status()))
    # The bound: the panic window, the slowest replica's own start (launch
    # to ready, as measured), and a few reconcile ticks and reports.
    startup = max([(r["ready_ms"] - r["started_ms"]) / 1000 for r in seen[-1]
                   if r.get("ready_ms") and r.get("started_ms")] or [0])
    bound = spec()["autoscaling"]["panic_window_s"] + startup + 10
    ok(many and took <= bound, "... within the panic window plus the startup time",
       f"{took:.1f} s, bound {bound:.1f} s (startup {startup:.1f} s)")
    diag(f"4 replicas ready {took:.1f} s after the load began (replica startup {startup:.1f} s)")
    listed = [r.get("state") for r in (shown or {}).get("status", shown or {}).get("replicas")
              or []] if isinstance(shown, dict) else []
    ok(listed.count("ready") >= 4 or (shown and len(
        (shown.get("status") or {}).get("replicas") or []) >= 4),
       "`gpuorch service show chat --json` lists them", json.dumps(shown)[:1500])
    lat = (((shown or {}).get("status") or {}).get("observed") or {}).get("latency") or {} \
        if isinstance(shown, dict) else {}
    ok(lat.get("window_s") == 60 and lat.get("requests", 0) > 0 and
       0 < lat.get("p50_s", 0) <= lat.get("p99_s", 0) < 30,
       "... with the last minute's answers and their p50 and p99 latency, from the router's "
       "reports", json.dumps(lat))
    # The same figures over time, as the dashboard's charts read them.
    def svc_series(metric):
        st, body, _ = call("GET", f"/v1/metrics/series?metric={metric}&by=service&since=-10m"
                           "&step=1s", token=ADMIN)
        got = [s for s in (body or {}).get("series") or [] if s.get("key") == "chat"]
        return [v for v in got[0]["values"] if v is not None] if st == 200 and got else []
    peak = {m: max(svc_series(m) or [0]) for m in ("replicas", "desired_replicas", "rps")}
    p50, p99 = svc_series("latency_p50"), svc_series("latency_p99")
    ok(peak["replicas"] >= 4 and peak["desired_replicas"] >= 4 and peak["rps"] > 0 and p50 and
       p99 and 0 < max(p50) <= max(p99) < 30,
       "GET /v1/metrics/series by service: chat's ready and desired replicas reached 4, its "
       "requests per second and p50/p99 latency have values", json.dumps(peak))
    fails = load.failures()
    ok(load.count() >= 8 and not fails, f"every stream of the load ended whole "
       f"({load.count()} streams)", fails[:5])
    jobs = {r["job"] for r in replicas()}
    back = wait_until(lambda: not replicas(), timeout=SCALE_S, step=0.2)
    ok(back, "with the streams gone the service goes back to min (0)", json.dumps(status()))
    ended = [call("GET", f"/v1/jobs/{j}", token=ADMIN)[1] or {} for j in sorted(jobs)]
    ok(ended and all(j.get("state") == "CANCELLED" and "scaled down" in (j.get("reason") or "")
                     for j in ended),
       "its replicas (the example server, which exits 0 on SIGTERM) end CANCELLED, scaled down",
       json.dumps([(j.get("id"), j.get("state"), j.get("reason")) for j in ended]))


def first_chunk_early():
    apply(spec(min=1))
    reps = wait_until(lambda: replicas("ready"), timeout=SCALE_S, step=0.2)
    if not reps:
        ok(False, "a min-1 service has a ready replica", json.dumps(status()))
        return
    c, r = open_stream(30)  # 30 tokens at 10 tokens/s
    first = read_event(r)
    inflight = sum(v for n, labels, v in ROUTER.metrics() if n == "gpuorch_router_inflight"
                   and labels.get("service") == "chat")
    running = [running_on(x) for x in replicas("ready")]
    rest = []
    while True:
        ev = read_event(r)
        if ev is None:
            break
        rest.append(ev)
    c.close()
    ok(r.status == 200 and first and "chat.completion.chunk" in first,
       "a stream's first event is a chunk", first)
    ok(inflight >= 1 and any(n and n >= 1 for n in running),
       "after the first chunk arrived the router and the replica still run the request",
       f"router in flight {inflight}, replicas running {running}")
    tokens = [e for e in rest if e != "[DONE]" and '"content"' in e]
    ok(rest and rest[-1] == "[DONE]" and len(tokens) >= 25,
       "then the rest of the 30 tokens follows, to [DONE]", f"{len(tokens)} {rest[-3:]}")


def rolling_update():
    gen0 = (service() or {}).get("generation")
    old = {r["job"] for r in replicas()}
    with Load(2, max_tokens=None) as load:
        wait_until(lambda: load.count() >= 4, timeout=SCALE_S, step=0.05)
        new = spec(min=1)
        new["command"] = [a if a != "3" else "4" for a in new["command"]]  # --max-tokens 4
        apply(new)
        gen1 = (service() or {}).get("generation")
        rolled = wait_until(lambda: replicas() and all(
            r["generation"] == gen1 and r["state"] == "ready" and r["job"] not in old
            for r in replicas()), timeout=SCALE_S, step=0.2)
        n_at_roll = load.count()
        wait_until(lambda: load.count() >= n_at_roll + 4, timeout=SCALE_S, step=0.05)
    fails = load.failures()
    ok(gen0 and gen1 and gen1 > gen0 and rolled,
       "a changed command rolls the replicas to the new generation", json.dumps(status()))
    ok(load.count() > 8 and not fails,
       f"no request of a steady loop failed during the roll ({load.count()} requests)",
       fails[:5])
    after = [completion(max_tokens=None) for _ in range(4)]
    ok(all(answered(a) and a[1]["usage"]["completion_tokens"] == 4 for a in after),
       "the new generation answers afterwards (its --max-tokens 4)", after)


def replica_killed():
    apply(spec(min=2, max=2))
    two = wait_until(lambda: len(replicas("ready")) == 2 and len(replicas()) == 2,
                     timeout=SCALE_S, step=0.2)
    if not two:
        ok(False, "a min-2 service has two ready replicas", json.dumps(status()))
        return
    before = {r["job"] for r in replicas()}
    c, r = open_stream(100)
    first = read_event(r)
    busy = wait_until(lambda: [x for x in replicas("ready") if (running_on(x) or 0) >= 1],
                      timeout=10, step=0.05)
    pid = replica_pid(busy[0]["job"]) if busy else None
    ok(first and busy and pid, "a stream runs on one replica, its process found",
       f"{first} {busy}")
    if not pid:
        c.close()
        return
    os.kill(pid, signal.SIGKILL)
    cut = False  # the request in flight dies with its replica: a truncated stream
    try:
        while read_event(r) is not None:
            pass
    except (OSError, http.client.HTTPException):
        cut = True
    c.close()
    diag(f"the stream in flight on the killed replica was {'cut' if cut else 'ended'}")
    after = [completion() for _ in range(6)]
    ok(all(answered(a) for a in after), "the requests after the kill succeed (the other replica)",
       after)
    killed = busy[0]["job"]
    new = wait_until(lambda: len([x for x in replicas("ready") if x["job"] not in before]) >= 1
                     and killed not in {x["job"] for x in replicas("ready")},
                     timeout=SCALE_S, step=0.2)
    ok(new, "the service gets a replacement for the killed replica", json.dumps(status()))


def router_restart():
    ROUTER.stop()
    ROUTER.start()
    known = wait_until(lambda: MODEL in ROUTER.models(), timeout=15, step=0.05)
    res = [completion() for _ in range(4)]
    ok(known and all(answered(a) for a in res),
       "a restarted router routes again from the controller's table", f"{res}" + ROUTER.tail())


def controller_away():
    rev = [v for n, _, v in ROUTER.metrics() if n == "gpuorch_router_table_revision"]
    rc = SRV.stop()
    ok(rc == 0, "the controller stops cleanly", SRV.log_tail())
    res = [completion() for _ in range(6)]
    ok(all(answered(a) for a in res),
       "with the controller stopped the router routes to the last known endpoints", res)
    SRV.start()
    ready = wait_until(lambda: len(replicas("ready")) == 2, timeout=SCALE_S, step=0.2)
    ok(ready, "the controller back: the replicas are ready again once the agents report",
       json.dumps(status()))
    apply(spec(min=1, max=1))
    one = wait_until(lambda: len(replicas()) == 1 and len(replicas("ready")) == 1,
                     timeout=SCALE_S, step=0.2)
    # The restarted controller counts revisions from its own start: the
    # router follows its table all the same.
    routed = wait_until(lambda: len([s for n, labels, s in ROUTER.metrics()
                                     if n == "gpuorch_router_inflight"
                                     and labels.get("service") == "chat"]) == 1,
                        timeout=SCALE_S, step=0.2)
    res = [completion() for _ in range(4)]
    ok(one and routed and all(answered(a) for a in res),
       "... and a change made then (max 1) reaches the router, requests succeed",
       f"revision before {rev}; {res}; {json.dumps(status())}" + ROUTER.tail())


def raw_exchange(data):
    """Sends DATA on a new connection to the router; (answer bytes, closed after)."""
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=10)
    s.sendall(data)
    got = b""
    closed = False
    try:
        while True:
            piece = s.recv(65536)
            if not piece:
                closed = True
                break
            got += piece
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return got, closed


def bad_input():
    bad = spec(name="bad", min=3, max=2)
    st, body, raw = call("PUT", "/v1/services/bad", bad, token=MEMBER)
    msg = json.dumps(body)
    ok(st == 400 and "'min'" in msg and "max" in msg, "min > max: 400 naming the field", raw)
    st, _, _ = call("GET", "/v1/services/bad", token=ADMIN)
    ok(st == 404, "... and nothing is stored", st)
    st, body = completion(model="no-such-model")
    err = body.get("error") or {} if isinstance(body, dict) else {}
    ok(st == 404 and err.get("code") == "model_not_found" and MODEL in err.get("message", "")
       and "no-such-model" in err.get("message", ""),
       "an unknown model: 404 with the known names", f"{st} {body}")
    payload = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1}).encode()
    got, closed = raw_exchange(
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
        % (len(payload), len(payload), payload))
    ok(got.startswith(b"HTTP/1.1 400") and closed,
       "Content-Length with Transfer-Encoding: 400 from the router, the connection closed",
       got[:300])
    big = json.dumps({"model": MODEL, "prompt": "x" * (MAX_BODY * 2)})
    try:
        st, _, data = ROUTER.request("POST", "/v1/completions", big,
                                     {"Content-Type": "application/json"}, 30)
    except OSError as e:
        st, data = None, repr(e)
    ok(st == 413, "a body over --max-body is refused (413)", f"{st} {data[:200]}")


def main():
    print("TAP version 13")
    setup()
    for step in (cold_start, scale_up_and_down, first_chunk_early, rolling_update,
                 replica_killed, router_restart, controller_away, bad_input):
        t0 = time.monotonic()
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e) + ROUTER.tail())
        diag(f"{step.__name__}: {time.monotonic() - t0:.1f} s")
    jobs = [r["job"] for r in replicas()]
    call("DELETE", "/v1/services/chat", token=ADMIN)
    final = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
    gone = wait_until(lambda: all((call("GET", f"/v1/jobs/{j}", token=ADMIN)[1] or {})
                                  .get("state") in final for j in jobs), timeout=SCALE_S)
    gone_router = wait_until(lambda: MODEL not in ROUTER.models(), timeout=15, step=0.1)
    ok(gone and gone_router, "deleting the service stops its replicas and leaves the router",
       jobs)
    rc = ROUTER.stop()
    ok(rc == 0, "the router stops cleanly", f"{rc}" + ROUTER.tail())
    logs = {n: ag.log() for n, ag in AGENTS.items()}
    with open(ROUTER.log_path) as f:
        logs["router"] = f.read()
    reports = [n for n, text in logs.items() if "Sanitizer" in text or "runtime error:" in text]
    ok(not reports, "the agents' and the router's logs hold no sanitizer report", reports)
    for ag in AGENTS.values():
        ag.stop()
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")
    diag("done")


def on_exit():
    ROUTER.kill()
    for ag in AGENTS.values():
        ag.kill()
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

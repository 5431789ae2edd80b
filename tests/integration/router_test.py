#!/usr/bin/env python3
"""router_test.py GPUORCH - `gpuorch router` against a stand-in controller
(an http.server in this process serving GET /v1/router/routes from a table
the test sets, and recording every POST /v1/router/report) and stand-in
replicas (this file run with --replica NAME PORT: an echo server, a stream
that waits for the test before its last chunk, a slow answer that waits
likewise). Prints TAP.

Checks: routing by /s/SERVICE/..., by Host and by the body's "model";
GET /v1/models; an unknown model's 404 with the known names; proxy headers
in, hop-by-hop headers out; a stream's first chunk reaching the client
while the replica still holds its last; a client that does not read
holding the replica back (no whole answer buffered), and whole answers
through the pauses; two replicas sharing load by what they have in
flight; the per-replica concurrency limit; a request held at zero
replicas, reported at once, and forwarded when the table gains an
endpoint; the queue's timeout and bound (503, Retry-After); framing
attacks refused with 400 (413 for a body over --max-body) and the
connection closed; pipelined requests answered in order; a chunked request
written a byte at a time; a held request's client that goes away leaving
the queue; --max-connections; API keys; a replica killed in the middle of a stream,
the next requests going to the other; reports every second whose counts
add up to the requests sent; /metrics; routing going on with the
controller stopped, and a restarted controller's table (its revisions
counting from 1 again) taken. No sleeps decide a verdict: every wait is a
deadline or an event."""

import hashlib
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import free_port, ok, prom_samples, remove_tmp, run, wait_until  # noqa: E402

TOKEN = "gpo_jointoken"
KEY = "sk-router-test"
BIG = 64 << 20  # bytes of the answer a slow client does not read


# -- a stand-in replica (this file with --replica) -----------------------------------------


def replica_main(name, port):
    events = {}
    lock = threading.Lock()
    state = {"inflight": 0}

    def event(key):
        with lock:
            return events.setdefault(key, threading.Event())

    class Replica(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, obj, code=200):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def chunk(self, text):
            data = text.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n).decode()
            url = urllib.parse.urlsplit(self.path)
            key = urllib.parse.parse_qs(url.query).get("id", [""])[0]
            if url.path == "/_release":
                event(key).set()
                return self.reply({})
            if url.path == "/_state":
                return self.reply(dict(state))
            if url.path == "/stream":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.chunk(f"data: {name} first\n\n")
                event(key).wait(30)
                self.chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                return None
            if url.path == "/big":  # 64 MiB, as fast as the reader takes it
                chunked = "chunked" in url.query
                self.send_response(200)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(BIG))
                self.end_headers()
                self.connection.settimeout(3)  # a write blocked this long: the reader waits
                piece = b"x" * 65536
                try:
                    for _ in range(BIG // len(piece)):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked
                                         else piece)
                        with lock:
                            state["written"] = state.get("written", 0) + len(piece)
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    with lock:
                        state["stalled"] = state.get("written", 0)
                    self.close_connection = True
                return None
            if url.path == "/slow":
                with lock:
                    state["inflight"] += 1
                event(key).wait(30)
                with lock:
                    state["inflight"] -= 1
            return self.reply({"replica": name, "path": self.path, "method": self.command,
                               "body": body,
                               "headers": {k.lower(): v for k, v in self.headers.items()}})

        do_GET = do_POST = do_PUT = answer

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Replica)
    srv.daemon_threads = True
    print("ready", flush=True)
    srv.serve_forever()


class ReplicaProc:
    def __init__(self, name):
        self.name = name
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--replica",
                                      name, str(self.port)], stdout=subprocess.PIPE)
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"replica {name} did not start")

    def endpoint(self, replica, job, state="ready"):
        return {"replica": replica, "job": job, "attempt": 1, "addr": "127.0.0.1",
                "port": self.port, "state": state}

    def call(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", path)
        data = json.loads(c.getresponse().read() or b"{}")
        c.close()
        return data

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# -- the stand-in controller -----------------------------------------------------------------


class Controller:
    def __init__(self, port=0):
        self.rev = 1
        self.services = []
        self.reports = []  # (monotonic time, body)
        self.auth = set()
        self.stopped = False
        self.cond = threading.Condition()
        ctl = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, code, data=b""):
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                if data:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                ctl.auth.add(self.headers.get("Authorization"))
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/v1/router/routes":
                    return self.send(404)
                q = urllib.parse.parse_qs(url.query)
                since = int(q.get("since", ["-1"])[0])
                wait = int(q.get("wait_ms", ["0"])[0]) / 1000
                with ctl.cond:
                    ctl.cond.wait_for(lambda: ctl.rev != since or ctl.stopped, timeout=wait)
                    body = json.dumps({"rev": ctl.rev, "services": ctl.services}).encode()
                if ctl.stopped:  # as a controller that dies: the connection just closes
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                self.send(200, body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n))
                with ctl.cond:
                    ctl.reports.append((time.monotonic(), body))
                    ctl.cond.notify_all()
                self.send(204)

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def set(self, services):
        with self.cond:
            self.services = services
            self.rev += 1
            self.cond.notify_all()
        return self.rev

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.srv.shutdown()
        self.srv.server_close()


def service(name, eps, **kw):
    s = {"name": name, "model": kw.pop("model", name), "hosts": kw.pop("hosts", []),
         "key_hashes": kw.pop("key_hashes", []), "concurrency_limit": 0, "queue_limit": 100,
         "queue_timeout_ms": 10000, "endpoints": eps}
    s.update(kw)
    return s


# -- the router --------------------------------------------------------------------------------


class Router:
    def __init__(self, binary, ctl, tmp, name="r1", extra=("--threads", "2")):
        self.port = free_port()
        token = os.path.join(tmp, "join.token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        self.log = open(os.path.join(tmp, f"{name}.log"), "w+")
        self.proc = subprocess.Popen(
            [binary, "router", "--server", f"http://127.0.0.1:{ctl.port}", "--join-token", token,
             "--listen", f"127.0.0.1:{self.port}", "--name", name, "--max-body", "4096",
             "--max-header", "4096", *extra], stderr=self.log)

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None):
        st, h, data = self.request(method, path, body, headers)
        try:
            return st, h, json.loads(data)
        except ValueError:
            return st, h, data

    def revision(self):
        try:
            st, _, data = self.request("GET", "/metrics")
        except OSError:
            return None
        for name, labels, value in prom_samples(data.decode()):
            if name == "gpuorch_router_table_revision":
                return int(value)
        return None

    def wait_rev(self, rev):
        return wait_until(lambda: (self.revision() or -1) >= rev)

    def tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)


# -- the cases ---------------------------------------------------------------------------------

CTL = None
ROUTER = None
ROUTERS = []
REPLICAS = {}
TMP = tempfile.mkdtemp(prefix="gpuorch-router-test-")
SENT = {"alpha": 0}  # requests the test sent to alpha


def table(extra=None, cold_eps=None, kill_eps=None):
    a, b, d1, d2 = (REPLICAS[n] for n in ("a1", "b1", "d1", "d2"))
    k1, k2 = REPLICAS["k1"], REPLICAS["k2"]
    services = [
        service("alpha", [a.endpoint(1, 11)], hosts=["alpha.example.com"]),
        service("beta", [b.endpoint(1, 21), d1.endpoint(2, 22, "draining")], model="beta-model"),
        service("duo", [d1.endpoint(1, 31), d2.endpoint(2, 32)]),
        service("cold", cold_eps or []),
        service("tiny", [], queue_timeout_ms=300),
        service("full", [], queue_limit=0),
        service("lim", [REPLICAS["d2"].endpoint(1, 61)], concurrency_limit=1),
        service("keyed", [a.endpoint(1, 11)],
                key_hashes=[hashlib.sha256(KEY.encode()).hexdigest()]),
        service("kill", kill_eps if kill_eps is not None
                else [k1.endpoint(1, 41), k2.endpoint(2, 42)]),
    ]
    return services + (extra or [])


def alpha(method, path, body=None, headers=None):
    SENT["alpha"] += 1
    return ROUTER.json(method, path, body, headers)


def check_routing():
    st, _, j = alpha("GET", "/s/alpha/hello/there?x=1&y=2")
    ok(st == 200 and j["replica"] == "a1" and j["path"] == "/hello/there?x=1&y=2",
       "/s/alpha/REST forwards /REST and its query to alpha's replica", f"{st} {j}")
    st, _, j = alpha("GET", "/s/alpha")
    ok(st == 200 and j["path"] == "/", "/s/alpha alone forwards /", f"{st} {j}")
    st, _, j = alpha("GET", "/v2/things?q=1", headers={"Host": "alpha.example.com:8081"})
    ok(st == 200 and j["replica"] == "a1" and j["path"] == "/v2/things?q=1",
       "a service's host routes the path unchanged", f"{st} {j}")
    body = json.dumps({"model": "beta-model", "messages": [{"role": "user", "content": "hi"}]})
    st, _, j = ROUTER.json("POST", "/v1/chat/completions", body,
                           {"Content-Type": "application/json"})
    ok(st == 200 and j["replica"] == "b1" and j["path"] == "/v1/chat/completions" and
       j["body"] == body, "the body's model routes /v1/chat/completions, the body unchanged, "
       "never to a draining endpoint", f"{st} {j}")
    st, _, j = ROUTER.json("POST", "/v1/embeddings", json.dumps({"model": "beta-model"}))
    ok(st == 200 and j["replica"] == "b1", "and /v1/embeddings", f"{st} {j}")
    st, _, j = ROUTER.json("GET", "/v1/models")
    ids = sorted(m["id"] for m in j.get("data", [])) if st == 200 else []
    ok(st == 200 and j["object"] == "list" and "beta-model" in ids and "alpha" in ids and
       all(m["object"] == "model" and m["owned_by"] == "gpuorch" for m in j["data"]),
       "GET /v1/models lists the models in OpenAI's format", f"{st} {j}")
    st, _, j = ROUTER.json("POST", "/v1/completions", json.dumps({"model": "nope"}))
    err = j.get("error", {}) if isinstance(j, dict) else {}
    ok(st == 404 and err.get("code") == "model_not_found" and
       err.get("type") == "invalid_request_error" and "unknown model 'nope'" in
       err.get("message", "") and "beta-model" in err.get("message", ""),
       "an unknown model: 404 in OpenAI's words, with the known names", f"{st} {j}")
    st, _, j = ROUTER.json("GET", "/s/nosuch/x")
    ok(st == 404, "an unknown service: 404", f"{st} {j}")


def check_headers():
    st, _, j = alpha("GET", "/s/alpha/h", headers={
        "Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5",
        "TE": "trailers", "Proxy-Authorization": "x", "X-End": "2"})
    h = j.get("headers", {}) if st == 200 else {}
    ok(st == 200 and "127.0.0.1" in h.get("x-forwarded-for", "") and
       "gpuorch" in h.get("via", "") and h.get("x-end") == "2",
       "X-Forwarded-For and Via reach the replica, end-to-end headers too", f"{st} {h}")
    gone = [k for k in ("x-hop", "keep-alive", "te", "proxy-authorization") if k in h]
    ok(st == 200 and not gone and h.get("connection", "keep-alive").lower() != "x-hop",
       "hop-by-hop headers stay on their hop", f"forwarded: {gone} {h}")


def read_event(resp):
    """One SSE event (up to a blank line) of a streamed answer."""
    buf = b""
    while not buf.endswith(b"\n\n"):
        piece = resp.read1(4096) if hasattr(resp, "read1") else resp.read(1)
        if not piece:
            break
        buf += piece
    return buf.decode()


def check_streaming():
    c = ROUTER.conn()
    c.request("GET", "/s/alpha/stream?id=s1")
    SENT["alpha"] += 1
    r = c.getresponse()
    first = read_event(r)
    ok(r.status == 200 and "a1 first" in first and
       r.getheader("Content-Type") == "text/event-stream",
       "a stream's first event reaches the client while the replica holds its last", first)
    REPLICAS["a1"].call("/_release?id=s1")
    rest = r.read().decode()
    ok("[DONE]" in rest, "then the rest follows, to the end", rest)
    c.close()


def check_backpressure():
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=20)
    s.sendall(b"GET /s/alpha/big HTTP/1.1\r\nHost: t\r\n\r\n")
    head = s.recv(4096)  # then read no more
    a1 = REPLICAS["a1"]
    stalled = wait_until(lambda: a1.call("/_state").get("stalled"), timeout=60)
    ok(head.startswith(b"HTTP/1.1 200") and stalled and stalled < BIG // 2,
       "a client that does not read holds the replica back: the router buffers no whole answer",
       f"stalled after {stalled} of {BIG} bytes; {head[:100]!r}")
    s.close()
    st, _, data = alpha("GET", "/s/alpha/big")
    ok(st == 200 and len(data) == BIG, "a client that reads gets the whole answer, through the "
       "pauses", f"{st}: {len(data)} of {BIG} bytes")
    st, _, data = alpha("GET", "/s/alpha/big?chunked=1")
    ok(st == 200 and len(data) == BIG, "and so for a chunked answer, read in many small chunks",
       f"{st}: {len(data)} of {BIG} bytes")
    SENT["alpha"] += 1


def check_load_sharing():
    results = {}

    def send(k):
        results[k] = ROUTER.json("GET", f"/s/duo/slow?id=duo{k}")

    t1 = threading.Thread(target=send, args=(1,))
    t1.start()
    d1, d2 = REPLICAS["d1"], REPLICAS["d2"]
    busy = lambda: d1.call("/_state")["inflight"] + d2.call("/_state")["inflight"]  # noqa: E731
    wait_until(lambda: busy() == 1)
    t2 = threading.Thread(target=send, args=(2,))
    t2.start()
    wait_until(lambda: busy() == 2)
    both = (d1.call("/_state")["inflight"], d2.call("/_state")["inflight"])
    ok(both == (1, 1), "a second request goes to the replica with fewer in flight",
       f"in flight on d1, d2: {both}")
    for rep in (d1, d2):
        for k in (1, 2):
            rep.call(f"/_release?id=duo{k}")
    t1.join(20)
    t2.join(20)
    names = sorted(results[k][2]["replica"] for k in (1, 2) if results.get(k, (0,))[0] == 200)
    ok(names == ["d1", "d2"], "both answered, one from each replica", f"{results}")


def queue_length(name):
    for n, labels, v in prom_samples(ROUTER.request("GET", "/metrics")[2].decode()):
        if n == "gpuorch_router_queue_length" and labels.get("service") == name:
            return v
    return None


def check_concurrency_limit():
    results = {}
    t1 = threading.Thread(target=lambda: results.update(a=ROUTER.json("GET", "/s/lim/slow?id=l1")))
    t1.start()
    d2 = REPLICAS["d2"]
    wait_until(lambda: d2.call("/_state")["inflight"] == 1)
    t2 = threading.Thread(target=lambda: results.update(b=ROUTER.json("GET", "/s/lim/next")))
    t2.start()
    held = wait_until(lambda: queue_length("lim") == 1)
    ok(held and "b" not in results,
       "a replica at its concurrency limit gets nothing more: the next request is held", results)
    d2.call("/_release?id=l1")
    t1.join(20)
    t2.join(20)
    st, _, j = results.get("b", (0, {}, {}))
    ok(st == 200 and j.get("path") == "/next" and results.get("a", (0,))[0] == 200,
       "when its request ends, the held one goes to it", results)


def reports_since(t0):
    with CTL.cond:
        return [b for t, b in CTL.reports if t >= t0]


def svc_in(report, name):
    for s in report["services"]:
        if s["name"] == name:
            return s
    return None


def check_hold_at_zero():
    results = {}
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: results.update(r=ROUTER.json("GET", "/s/cold/x")))
    th.start()
    got = wait_until(lambda: [b for b in reports_since(t0)
                              if (svc_in(b, "cold") or {}).get("queued") == 1])
    early = wait_until(lambda: [b for b in reports_since(t0)
                                if (svc_in(b, "cold") or {}).get("queued") == 1 and
                                b["interval_ms"] < 1000])
    ok(got and early, "a request held at zero replicas is reported at once (queued 1, before "
       "the tick)", f"{got}")
    m = ROUTER.request("GET", "/metrics")[2].decode()
    ok('gpuorch_router_queue_length{service="cold"} 1' in m, "and /metrics shows it held",
       m[-1500:])
    rev = CTL.set(table(cold_eps=[REPLICAS["b1"].endpoint(1, 51)]))
    th.join(20)
    st, _, j = results.get("r", (0, {}, {}))
    ok(st == 200 and j.get("replica") == "b1" and j.get("path") == "/x",
       "when the table gains an endpoint, the held request goes to it", f"{st} {j} rev {rev}")
    CTL.set(table())


def check_queue_bounds():
    st, h, j = ROUTER.json("GET", "/s/tiny/x")
    ok(st == 503 and h.get("retry-after") == "1" and j["error"]["code"] == "queue_timeout",
       "past the queue timeout: 503 with Retry-After", f"{st} {h} {j}")
    st, h, j = ROUTER.json("GET", "/s/full/x")
    ok(st == 503 and "retry-after" in h and j["error"]["code"] == "queue_full",
       "past the queue's bound: 503 with Retry-After at once", f"{st} {h} {j}")


def raw(data, deadline_s=10):
    """Sends DATA on a new connection; (status, whether the router closed it)."""
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=deadline_s)
    try:
        s.sendall(data)
    except OSError:
        pass
    got = b""
    closed = False
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            piece = s.recv(65536)
        except ConnectionResetError:
            closed = True
            break
        except socket.timeout:
            break
        if not piece:
            closed = True
            break
        got += piece
    s.close()
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.") else None
    return status, closed, got


def check_framing():
    head = b"POST /s/alpha/x HTTP/1.1\r\nHost: t\r\n"
    cases = [
        ("Content-Length with Transfer-Encoding", head + b"Content-Length: 4\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", 400),
        ("two different Content-Lengths", head + b"Content-Length: 4\r\nContent-Length: 5\r\n"
         b"\r\nabcde", 400),
        ("a malformed Content-Length", head + b"Content-Length: 4x\r\n\r\nabcd", 400),
        ("a signed Content-Length", head + b"Content-Length: +4\r\n\r\nabcd", 400),
        ("a body over --max-body", head + b"Content-Length: 5000\r\n\r\n" + b"x" * 5000, 413),
        ("headers over --max-header", head + b"X-Big: " + b"y" * 6000 + b"\r\n\r\n", 400),
    ]
    for name, data, want in cases:
        st, closed, got = raw(data)
        ok(st == want and closed and got.count(b"HTTP/1.") == 1,
           f"{name}: {want} and the connection closed", got[:300])


def read_answers(s, n, deadline_s=10):
    """N answers framed by Content-Length from socket S: [(status, body)]."""
    buf, out = b"", []
    end = time.monotonic() + deadline_s
    while len(out) < n and time.monotonic() < end:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buf[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if len(buf) >= head_end + 4 + length:
                out.append((int(head.split(" ", 2)[1]), buf[head_end + 4:head_end + 4 + length]))
                buf = buf[head_end + 4 + length:]
                continue
        piece = s.recv(65536)
        if not piece:
            break
        buf += piece
    return out


def check_pipelining():
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=10)
    s.sendall(b"GET /s/alpha/p1 HTTP/1.1\r\nHost: t\r\n\r\n"
              b"POST /s/alpha/p2 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
              b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
              b"GET /s/alpha/p3 HTTP/1.1\r\nHost: t\r\n\r\n")
    SENT["alpha"] += 3
    got = read_answers(s, 4)
    s.close()
    paths = [json.loads(b).get("path") if st == 200 and b.startswith(b"{") else b.decode()
             for st, b in got]
    ok(len(got) == 4 and paths[0] == "/p1" and paths[1] == "/p2" and
       json.loads(got[1][1])["body"] == "hello" and paths[2].startswith("ok") and
       paths[3] == "/p3", "pipelined requests on one connection are answered in order",
       f"{got}")
    # one request written a byte at a time: the router reads it in pieces
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = (b"POST /s/alpha/bytes HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    for k in range(len(req)):
        s.sendall(req[k:k + 1])
    SENT["alpha"] += 1
    got = read_answers(s, 1)
    s.close()
    j = json.loads(got[0][1]) if got and got[0][0] == 200 else {}
    ok(j.get("path") == "/bytes" and j.get("body") == "abcde" and
       j.get("headers", {}).get("content-length") == "5",
       "a chunked request written a byte at a time reaches the replica whole, with its length",
       f"{got}")


def check_held_client_gone():
    s = socket.create_connection(("127.0.0.1", ROUTER.port), timeout=10)
    s.sendall(b"GET /s/cold/gone HTTP/1.1\r\nHost: t\r\n\r\n")
    held = wait_until(lambda: queue_length("cold") == 1)
    s.close()
    gone = wait_until(lambda: queue_length("cold") == 0)
    ok(held and gone, "a held request whose client goes away leaves the queue at once",
       f"held {held}, gone {gone}")


def check_keys():
    st, _, j = ROUTER.json("GET", "/s/keyed/x")
    ok(st == 401 and j["error"]["code"] == "invalid_api_key", "no key: 401", f"{st} {j}")
    st, _, _ = ROUTER.json("GET", "/s/keyed/x", headers={"Authorization": "Bearer wrong"})
    ok(st == 401, "a wrong key: 401", st)
    st, _, j = ROUTER.json("GET", "/s/keyed/x", headers={"Authorization": f"Bearer {KEY}"})
    ok(st == 200 and j["replica"] == "a1", "Authorization: Bearer KEY opens it", f"{st} {j}")
    st, _, j = ROUTER.json("GET", "/s/keyed/x", headers={"x-api-key": KEY})
    ok(st == 200, "and x-api-key: KEY", f"{st} {j}")


def check_replica_killed():
    c = ROUTER.conn()
    c.request("GET", "/s/kill/stream?id=k")
    r = c.getresponse()
    first = read_event(r)
    victim = "k1" if "k1 first" in first else "k2"
    other = "k2" if victim == "k1" else "k1"
    REPLICAS[victim].stop()
    try:
        rest = r.read().decode()
    except (http.client.IncompleteRead, OSError) as e:
        rest = f"cut: {e!r}"
    c.close()
    ok("[DONE]" not in rest, "a stream cut by its replica's death does not look complete",
       f"{first!r} {rest!r}")
    answers = [ROUTER.json("GET", "/s/kill/x") for _ in range(6)]
    ok(all(st == 200 and j["replica"] == other for st, _, j in answers),
       "after the replica is killed, the next requests go to the other one",
       f"{[(st, j) for st, _, j in answers]}")


def check_reports():
    t0 = time.monotonic()
    for _ in range(5):
        alpha("GET", "/s/alpha/count")

    def summed():
        with CTL.cond:
            rs = [b for _, b in CTL.reports]
        return sum((svc_in(b, "alpha") or {}).get("requests", 0) for b in rs)

    total = wait_until(lambda: summed() == SENT["alpha"] and summed())
    ok(total == SENT["alpha"], "the reports' requests for alpha add up to the requests sent",
       f"reported {summed()}, sent {SENT['alpha']}")
    late = wait_until(lambda: len(reports_since(t0)) >= 3 and reports_since(t0))
    ok(late and all(b["router"] == "r1" and 500 <= b["interval_ms"] <= 1500 for b in late[1:]),
       "reports keep coming, about every second", f"{late}")
    last = late[-1] if late else {"services": []}
    a = svc_in(last, "alpha") or {}
    reps = a.get("replicas", [])
    ok(a.get("inflight") == 0 and a.get("queued") == 0 and reps and reps[0]["job"] == 11 and
       reps[0]["inflight"] == 0, "an idle service reports nothing in flight, per replica too",
       f"{a}")
    ok(TOKEN in " ".join(x or "" for x in CTL.auth), "the router sends the join token",
       f"{CTL.auth}")
    samples = prom_samples(ROUTER.request("GET", "/metrics")[2].decode())
    names = {n for n, _, _ in samples}
    ok({"gpuorch_router_requests_total", "gpuorch_router_ttfb_seconds_bucket",
        "gpuorch_router_request_seconds_count", "gpuorch_router_queue_length",
        "gpuorch_router_inflight"} <= names and
       any(n == "gpuorch_router_requests_total" and lb.get("service") == "alpha" and
           lb.get("code") == "200" and v >= 5 for n, lb, v in samples),
       "/metrics: requests by service and code, latency histograms, queue, in flight",
       f"{sorted(names)}")


def check_max_connections():
    r2 = Router(os.path.abspath(sys.argv[1]), CTL, TMP, "r2", ("--max-connections", "2"))
    ROUTERS.append(r2)
    ok(r2.wait_rev(CTL.rev), "a second router starts", r2.tail())
    held = []
    for _ in range(2):
        c = r2.conn()
        c.request("GET", "/s/alpha/c")
        c.getresponse().read()
        held.append(c)
    s3 = socket.create_connection(("127.0.0.1", r2.port), timeout=10)
    s3.sendall(b"GET /s/alpha/c HTTP/1.1\r\nHost: t\r\n\r\n")
    got = s3.recv(4096)
    closed = s3.recv(4096) == b""
    s3.close()
    ok(got.startswith(b"HTTP/1.1 503") and closed,
       "a connection past --max-connections: 503 and closed", got[:200])
    held.pop().close()
    back = wait_until(lambda: r2.request("GET", "/s/alpha/c")[0] == 200)
    ok(back, "once one closes, a new connection is served", r2.tail())
    for c in held:
        c.close()


def check_controller_away():
    global CTL
    CTL.stop()
    answers = [ROUTER.json("GET", "/s/alpha/away")[0] for _ in range(3)]
    ok(answers == [200, 200, 200], "with the controller stopped, routing goes on",
       f"{answers} {ROUTER.tail()}")
    port = CTL.port
    CTL = Controller(port)  # restarted: its revisions count from 1 again
    CTL.set(table([service("late", [REPLICAS["b1"].endpoint(1, 71)])]))
    got = wait_until(lambda: ROUTER.json("GET", "/s/late/x")[0] == 200, timeout=30)
    ok(got, "a restarted controller's table is taken, though its revision is lower",
       ROUTER.tail())


def main():
    global CTL, ROUTER
    print("TAP version 13")
    for name in ("a1", "b1", "d1", "d2", "k1", "k2"):
        REPLICAS[name] = ReplicaProc(name)
    CTL = Controller()
    rev = CTL.set(table())
    ROUTER = Router(os.path.abspath(sys.argv[1]), CTL, TMP)
    ok(ROUTER.wait_rev(rev), "the router starts and takes the controller's table", ROUTER.tail())
    check_routing()
    check_headers()
    check_streaming()
    check_backpressure()
    check_load_sharing()
    check_concurrency_limit()
    check_hold_at_zero()
    check_queue_bounds()
    check_framing()
    check_pipelining()
    check_held_client_gone()
    check_keys()
    check_replica_killed()
    check_reports()
    check_max_connections()
    check_controller_away()
    ok(ROUTER.proc.poll() is None, "the router still runs", ROUTER.tail())


class Cleanup:
    def cleanup(self):
        for r in [ROUTER] + ROUTERS:
            if r:
                r.stop()
        for r in REPLICAS.values():
            r.stop()
        remove_tmp(TMP)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--replica":
        replica_main(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    run(main, Cleanup())

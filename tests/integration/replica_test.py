#!/usr/bin/env python3
"""replica_test.py GPUORCH - a real node agent (`gpuorch agent`, on the fake
NVML) running serving replicas (attempts whose spec has "serve") for a
stand-in controller in this test, which hands out the assignments and keeps
every report. The replicas are small HTTP servers (`python3 -c`) on $PORT.
Prints TAP.

What it checks: a replica gets PORT (a free port the agent chose),
GPUORCH_SERVICE, GPUORCH_REPLICA and its GPUs; its RUNNING report carries
the endpoint with ready false, then ready true (with ready_ms) once its
probe answers 200, and the sum of its /metrics metric over the label sets;
an agent killed with -9 and started again probes the same port (the
journal keeps it) and reports it ready; a replica that never gets ready is
killed at its startup timeout and reported FAILED with the reason; a ready
replica whose probe starts failing is reported not ready once it failed
probe_failures probes in a row.

Needs root (the agent switches to the job's user gpuorch-test1). The agent
is a child process stopped by PID; conditions are polled with deadlines,
never timed. KEEP_TMP=1 keeps the directory."""

import http.server
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, ok, remove_tmp, run_as_root  # noqa: E402
from harness import DEADLINE_S, diag, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
NODE = "r1"
TMP = tempfile.mkdtemp(prefix="gpuorch-replica-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED")

# The replica: /health answers 503 until READY_AFTER s after its start, then
# 200, and 503 again from FAIL_AFTER s (0: never), counting the 503s it gave
# after it was ready in COUNT; /metrics has `reqs` in two label sets (2 +
# 1.5); its environment goes to ENV_FILE at start.
REPLICA = r"""
import http.server, json, os, sys, time
ready_after, fail_after, env_file, count = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
start = time.monotonic()
with open(env_file + ".tmp", "w") as f:
    json.dump(dict(os.environ), f)
os.rename(env_file + ".tmp", env_file)
failed = [0]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        t = time.monotonic() - start
        if self.path == "/metrics":
            code, body = 200, b'# TYPE reqs gauge\nreqs{a="1"} 2\nreqs{a="x}y"} 1.5\nreqsother 9\n'
        elif self.path == "/health":
            up = t >= ready_after and not (fail_after > 0 and t >= fail_after)
            code, body = (200, b"ok") if up else (503, b"loading")
            if not up and fail_after > 0 and t >= fail_after:
                failed[0] += 1
                with open(count + ".tmp", "w") as f:
                    f.write(str(failed[0]))
                os.rename(count + ".tmp", count)
        else:
            code, body = 404, b"no"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
"""


# -- The stand-in controller. -----------------------------------------------------------------

class Controller:
    """What the agent meets of a controller: registration, heartbeats, the
    long-polled assignments (ATTEMPTS, by (job, attempt)) and the reports
    (REPORTS: (job, attempt, body) in arrival order). A final report drops
    its attempt from the assignments, as the controller does."""

    def __init__(self):
        self.cond = threading.Condition()
        self.rev = 1
        self.attempts = {}
        self.reports = []
        ctl = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, code, obj=None):
                body = json.dumps(obj).encode() if obj is not None else b""
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # an agent killed while it waited
                    pass

            def body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def do_PUT(self):
                node = self.body()
                node.update(name=NODE, state="up", log_token="t0k3n")
                self.reply(201, node)

            def do_POST(self):
                m = re.match(r"/v1/nodes/[^/]+/attempts/(\d+)/(\d+)$", self.path)
                if self.path.endswith("/heartbeat"):
                    self.body()
                    return self.reply(204)
                if not m:
                    return self.reply(404, {"error": "no route"})
                report = self.body()
                key = (int(m.group(1)), int(m.group(2)))
                with ctl.cond:
                    ctl.reports.append((key, report))
                    if report.get("state") in FINAL and key in ctl.attempts:
                        del ctl.attempts[key]
                        ctl.rev += 1
                    ctl.cond.notify_all()
                self.reply(200, {})

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                if not url.path.endswith("/assignments"):
                    return self.reply(404, {"error": "no route"})
                q = urllib.parse.parse_qs(url.query)
                since = int(q.get("since", ["-1"])[0])
                wait = float(q.get("wait", ["5"])[0])
                with ctl.cond:
                    ctl.cond.wait_for(lambda: ctl.rev != since, timeout=wait)
                    answer = {"rev": ctl.rev, "node": NODE,
                              "attempts": list(ctl.attempts.values())}
                self.reply(200, answer)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.token = os.path.join(TMP, "join.token")
        with open(self.token, "w") as f:
            f.write("join-token-of-the-test\n")
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token_file(self, name):
        return self.token

    def run(self, job, attempt):
        with self.cond:
            self.attempts[(job["job"], job["attempt"])] = job
            self.rev += 1
            self.cond.notify_all()

    def reports_of(self, job, attempt=1):
        with self.cond:
            return [r for k, r in self.reports if k == (job, attempt)]

    def endpoints(self, job, attempt=1):
        return [r["endpoint"] for r in self.reports_of(job, attempt) if "endpoint" in r]

    def final(self, job, attempt=1):
        return next((r for r in self.reports_of(job, attempt) if r["state"] in FINAL), None)


CTL = Controller()
UUIDS = [fake_gpu_uuid(7, g) for g in range(2)]
AGENT = FakeAgent(BIN, CTL, TMP, FAKENVML, NODE, UUIDS, kill_grace=1)


def replica(job, name, ready_after, fail_after=0, startup_s=900, period_ms=200, failures=3,
            metric="reqs"):
    """A run assignment of replica job JOB; its files are SHARED/NAME.*."""
    argv = ["python3", "-c", REPLICA, str(ready_after), str(fail_after),
            os.path.join(SHARED, f"{name}.env"), os.path.join(SHARED, f"{name}.failed")]
    return {"job": job, "attempt": 1, "action": "run",
            "gpus": [{"uuid": UUIDS[job % 2], "milli": 1000, "mem_mib": 0}],
            "user": "alice", "unix_user": JOB_USER,
            "spec": {"name": name, "command": argv, "workdir": SHARED,
                     "env": {"PORT": "1", "PYTHONDONTWRITEBYTECODE": "1"},
                     "serve": {"service": name, "replica": job, "generation": 1,
                               "probe_path": "/health", "probe_period_ms": period_ms,
                               "probe_timeout_ms": 1000, "probe_failures": failures,
                               "startup_timeout_s": startup_s, "metric": metric}},
            "gang": {"nodes": [NODE], "rank": 0, "master_addr": "127.0.0.1",
                     "master_port": 20000}}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


# -- The checks. --------------------------------------------------------------------------------

def ready_then_metric():
    CTL.run(replica(1, "chat", ready_after=1.0), 1)
    env = wait_until(lambda: read_json(os.path.join(SHARED, "chat.env")))
    ok(env is not None, "the replica started", AGENT.tail(3000))
    env = env or {}
    port = int(env.get("PORT") or 0)
    ok(port > 1 and env.get("GPUORCH_SERVICE") == "chat" and env.get("GPUORCH_REPLICA") == "1"
       and env.get("GPUORCH_GPUS") == UUIDS[1] and env.get("GPUORCH_JOB_ID") == "1",
       "a replica gets a free PORT (not its own env's), GPUORCH_SERVICE, GPUORCH_REPLICA and "
       "its GPUs", {k: v for k, v in env.items() if k == "PORT" or k.startswith("GPUORCH_")})
    first = wait_until(lambda: CTL.endpoints(1))
    ok(first and first[0]["port"] == port and first[0]["ready"] is False
       and first[0]["ready_ms"] is None and CTL.reports_of(1)[0]["state"] == "RUNNING",
       "its first report is RUNNING with the endpoint on that port, not ready", first)
    ready = wait_until(lambda: [e for e in CTL.endpoints(1) if e["ready"]])
    ok(ready and ready[0]["port"] == port and isinstance(ready[0]["ready_ms"], int),
       "once its probe answers 200 it is reported ready, with when", CTL.endpoints(1))
    if ready:  # for people: how late the agent saw it (the env file is written at its start)
        turned = (os.stat(os.path.join(SHARED, "chat.env")).st_mtime + 1.0) * 1000
        diag(f"ready_ms is {ready[0]['ready_ms'] - turned:.0f} ms after the replica's /health "
             "turned 200")
    metric = wait_until(lambda: [e for e in CTL.endpoints(1) if e.get("metric") is not None])
    ok(metric and metric[-1]["metric"] == 3.5 and metric[-1]["ready"],
       "its metric is the sum of its /metrics samples over their label sets (2 + 1.5)",
       CTL.endpoints(1))
    # The journal keeps the port: an agent killed and started again probes it.
    AGENT.kill9()
    seen = len(CTL.endpoints(1))
    AGENT.start()
    again = wait_until(lambda: [e for e in CTL.endpoints(1)[seen:] if e["ready"]])
    ok(again and again[-1]["port"] == port and not CTL.final(1),
       "an agent killed with -9 and started again reports the replica ready on the same port",
       CTL.endpoints(1)[seen:])
    return port


def never_ready():
    CTL.run(replica(2, "slow", ready_after=3600, startup_s=2), 1)
    final = wait_until(lambda: CTL.final(2), timeout=DEADLINE_S + 2)
    ok(final and final["state"] == "FAILED"
       and final.get("reason") == "not ready within the startup timeout (2 s)",
       "a replica never ready is killed at its startup timeout and reported FAILED with "
       "the reason", final)
    eps = CTL.endpoints(2)
    ok(eps and not any(e["ready"] for e in eps), "it was never reported ready", eps)


def fails_after_ready():
    CTL.run(replica(3, "flaky", ready_after=0.5, fail_after=2.0, failures=3), 1)
    ready = wait_until(lambda: [e for e in CTL.endpoints(3) if e["ready"]])
    ok(ready, "the flaky replica got ready", CTL.endpoints(3))
    eps = CTL.endpoints(3)

    def unready():
        e = CTL.endpoints(3)
        k = next((i for i, x in enumerate(e) if x["ready"]), None)
        return k is not None and any(not x["ready"] for x in e[k + 1:])

    counted = [0]

    def watch():
        hit = unready()
        if hit and not counted[0]:
            counted[0] = read_int(os.path.join(SHARED, "flaky.failed"))
        return hit
    got = wait_until(watch)
    eps = CTL.endpoints(3)
    ok(got, "a ready replica whose probe fails is reported not ready", eps)
    ok(counted[0] >= 3, "only once it had failed probe_failures (3) probes in a row",
       f"{counted[0]} failed probes when the report came")
    ok(not CTL.final(3), "and it is not killed for it (the controller replaces it)",
       CTL.reports_of(3))


def stop_replicas():
    with CTL.cond:
        for key in list(CTL.attempts):
            del CTL.attempts[key]
        CTL.rev += 1
        CTL.cond.notify_all()
    done = wait_until(lambda: all(CTL.final(j) for j in (1, 3)))
    ok(done, "replicas the controller drops are stopped and reported",
       [CTL.final(j) for j in (1, 3)])


def main():
    print("TAP version 13")
    AGENT.write_gpu_list([{"uuid": u, "utilization": 0, "memory_utilization": 0}
                          for u in UUIDS])
    AGENT.start()
    for step in (ready_then_metric, never_ready, fails_after_ready, stop_replicas):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    log = AGENT.log()
    ok("Sanitizer" not in log and "runtime error:" not in log,
       "the agent's log holds no sanitizer report", AGENT.tail(6000))
    rc = AGENT.stop()
    ok(rc == 0, "the agent stops with status 0 on SIGTERM", AGENT.tail(3000))


def on_exit():
    if AGENT.proc and AGENT.proc.poll() is None:
        AGENT.proc.kill()
        AGENT.proc.wait()
    if os.environ.get("VERBOSE"):
        diag(AGENT.tail(8000))
    CTL.httpd.shutdown()
    remove_tmp(TMP)


class NoServer:
    """run_as_root's server: the stand-in controller needs no cleanup there."""

    def cleanup(self):
        pass


if __name__ == "__main__":
    run_as_root(main, NoServer(), TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""follow_test.py GPUORCH - clients given a list of controllers find the
leader and follow it (util/httpc.h, docs/admin-guide.md "Clients and several
controllers"). Prints TAP.

The leader is a real `gpuorch server` on SQLite. Stand-ins for the other
controllers are small HTTP servers of this test on 127.0.0.1, each recording
every request it gets: a follower that answers everything with 307 and the
leader's URL (Location, X-Gpuorch-Role: follower), a follower that answers
503 + Retry-After + X-Gpuorch-Role: follower (no leader known), and a closed
port (a controller that is down). The lists start with the dead and follower
addresses, the redirecting follower last, so that only following it reaches
the leader:
- a real `gpuorch agent` on the fake NVML registers, heartbeats and runs a
  job; each follower sees the agent's first heartbeat only, the leader the
  rest;
- the real `gpuorch` CLI submits (the POST reaches the leader exactly once:
  one job there, one POST at each follower), lists and says whoami (the
  leader's URL);
- `gpuorch router` gets its routing table through the same list;
- a list of followers only: the 503 comes back to the CLI as an error that
  names the address; a list of closed ports: "Couldn't connect";
- a bad entry in a list is a usage error naming it, for the CLI, the agent
  and the router.

Needs root (the agent switches to the job's user gpuorch-test1). Processes
are stopped by PID; conditions are polled with deadlines, never timed.
KEEP_TMP=1 keeps the directories."""

import http.client
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, fake_gpu_uuid, free_port, ok, prom_samples  # noqa: E402
from harness import remove_tmp, run_as_root, wait_job_until, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-follow-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-follow-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = None
STUBS = []
AGENTS = {}
ROUTERS = []


# -- Stand-ins for the controllers that do not lead. ---------------------------------------


class Follower(http.server.ThreadingHTTPServer):
    """A follower on 127.0.0.1: ROLE "redirect" answers 307 to LEADER (a
    function giving its URL), "refuse" answers 503. .seen lists every
    request as (method, path)."""

    daemon_threads = True

    def __init__(self, role, leader=None):
        super().__init__(("127.0.0.1", 0), FollowerHandler)
        self.role, self.leader = role, leader
        self.seen = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()
        STUBS.append(self)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, method, path):
        with self.lock:
            return sum(1 for m, p in self.seen if m == method and p == path)

    def stop(self):
        self.shutdown()
        self.server_close()


class FollowerHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a controller does

    def log_message(self, fmt, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        srv = self.server
        with srv.lock:
            srv.seen.append((self.command, self.path.split("?")[0]))
        if srv.role == "redirect":
            leader = srv.leader()
            body = json.dumps({"error": f"not the leader; the leader is {leader}"}).encode()
            self.send_response(307)
            self.send_header("Location", leader + self.path)
        else:
            body = json.dumps({"error": "no leader yet"}).encode()
            self.send_response(503)
            self.send_header("Retry-After", "1")
        self.send_header("X-Gpuorch-Role", "follower")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer


def dead_url():
    """A loopback port nobody listens on: a controller that is down."""
    return f"http://127.0.0.1:{free_port()}"


# -- The CLI. ------------------------------------------------------------------------------


def cli(*args, server, token=None):
    """`gpuorch ARGS` with GPUORCH_SERVER=SERVER and the token (default alice's);
    (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update({"GPUORCH_SERVER": server, "GPUORCH_TOKEN": token or MEMBER, "HOME": TMP})
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, cwd=SHARED,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def one_line_error(res, code, needles):
    rc, out, err = res
    lines = err.splitlines()
    return (rc == code and out == "" and len(lines) == 1 and lines[0].startswith("gpuorch ")
            and all(n in lines[0] for n in needles))


# -- The agent, pointed at a list. ---------------------------------------------------------


def list_agent(name, node_no, servers):
    """harness.FakeAgent with --server SERVERS (a list) and one GPU."""
    ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [fake_gpu_uuid(node_no, 0)])
    ag.server = servers
    ag.write_gpu_list([{"uuid": u} for u in ag.uuids])
    return ag


def setup():
    global ADMIN, MEMBER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for path, body in (("/v1/pools/main", {}), ("/v1/priority-classes/normal", {"order": 0}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]}),
                       ("/v1/users/alice",
                        {"unix_user": JOB_USER, "team": "research", "role": "member"})):
        SRV.api.expect("PUT", path, body, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]


def main():
    print("TAP version 13")
    setup()
    leader = SRV.url
    refuse = Follower("refuse")
    redirect = Follower("redirect", lambda: SRV.url)
    servers = ",".join([dead_url(), refuse.url, redirect.url])

    agent_and_cli(leader, refuse, redirect, servers)
    router(refuse, redirect, servers)
    no_leader()
    bad_entries()

    codes = {n: ag.stop() for n, ag in AGENTS.items()}
    reports = [n for n, ag in AGENTS.items()
               if "Sanitizer" in ag.log() or "runtime error:" in ag.log()]
    ok(not reports, "the agent's log holds no sanitizer report",
       "\n".join(AGENTS[n].tail(6000) for n in reports))
    ok(all(c == 0 for c in codes.values()), "the agent stops with status 0 on SIGTERM", codes)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def agent_and_cli(leader, refuse, redirect, servers):
    ag = AGENTS["f1"] = list_agent("f1", 1, servers)
    ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return nodes.get("f1", {}).get("state") == "up"

    ok(wait_until(registered, timeout=30),
       "an agent given [dead, 503 follower, 307 follower] registers at the leader",
       ag.tail())
    ok(refuse.count("PUT", "/v1/nodes/f1") == 1 and redirect.count("PUT", "/v1/nodes/f1") == 1,
       "its registration went past each follower once",
       f"{refuse.seen[:20]}\n{redirect.seen[:20]}")

    # The CLI: submit through the same list; the job runs on the agent.
    out_file = os.path.join(SHARED, "followed")
    rc, out, err = cli("submit", "--parsable", "--team", "research", "-D", SHARED,
                       "--wrap", f"echo followed > {out_file}", server=servers)
    jid = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    ok(jid, "gpuorch submit through the list is accepted", f"{rc}\n{out}\n{err}")
    st, body, _ = call("GET", "/v1/jobs", token=ADMIN)
    jobs = (body or {}).get("jobs") or []
    ok(len(jobs) == 1 and jobs[0].get("id") == jid,
       "the leader holds the job exactly once", json.dumps(body)[:1500])
    ok(refuse.count("POST", "/v1/jobs") == 1 and redirect.count("POST", "/v1/jobs") == 1,
       "the POST was passed over once by the 503 follower and redirected once by the other",
       f"{refuse.seen[-10:]}\n{redirect.seen[-10:]}")
    done, j = wait_job_until(SRV.api, jid, lambda j: j["state"] in FINAL, ADMIN,
                             timeout=30) if jid else (False, None)
    text = open(out_file).read() if os.path.exists(out_file) else ""
    ok(done and j["state"] == "COMPLETED" and text == "followed\n",
       "the job runs on the agent and completes", f"{json.dumps(j)}\n{ag.tail()}")

    rc, out, err = cli("queue", "--all", server=servers)
    ok(rc == 0 and str(jid) in out.split(),
       "gpuorch queue --all through the list lists the job", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("whoami", server=servers)
    ok(rc == 0 and "server:" in out and leader in out and refuse.url not in out,
       "gpuorch whoami names the leader it reached", f"{rc}\n{out}\n{err}")

    # The agent stayed with the leader: the followers saw its first heartbeat
    # (the heartbeat thread's own client) and no other; the leader got many.
    hb = "/v1/nodes/f1/heartbeat"
    ok(refuse.count("POST", hb) == 1 and redirect.count("POST", hb) == 1,
       "each follower saw one heartbeat of the agent, the first; the rest went to the leader",
       f"503 follower: {refuse.count('POST', hb)}, 307 follower: {redirect.count('POST', hb)}")


def router(refuse, redirect, servers):
    port = free_port()
    log = open(os.path.join(TMP, "router.log"), "w+")
    proc = subprocess.Popen([BIN, "router", "--server", servers, "--join-token",
                             SRV.token_file("join"), "--listen", f"127.0.0.1:{port}",
                             "--name", "r1"], stdout=log, stderr=log)
    ROUTERS.append(proc)

    def revision():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/metrics")
            data = c.getresponse().read().decode()
            c.close()
        except OSError:
            return None
        for name, _, value in prom_samples(data):
            if name == "gpuorch_router_table_revision" and float(value) >= 0:
                return True
        return None

    got = wait_until(revision, timeout=30)
    log.seek(0)
    ok(got and redirect.count("GET", "/v1/router/routes") >= 1,
       "gpuorch router given the list gets its routing table from the leader",
       f"{redirect.seen[-10:]}\n{log.read()[-1500:]}")
    proc.terminate()
    proc.wait(timeout=20)


def no_leader():
    f1, f2 = Follower("refuse"), Follower("refuse")
    res = cli("queue", server=f"{f1.url},{f2.url}")
    ok(one_line_error(res, 1, ["503 from " + f2.url, "follower", "no leader yet"]),
       "every address a follower: exit 1, one line naming the address that answered last",
       res)
    ok(f1.count("GET", "/v1/jobs") == 1 and f2.count("GET", "/v1/jobs") == 1,
       "each follower was asked once", f"{f1.seen}\n{f2.seen}")
    d1, d2 = dead_url(), dead_url()
    res = cli("queue", server=f"{d1},{d2}")
    ok(one_line_error(res, 1, ["Couldn't connect", d2, "after 1 other address"]),
       "every address down: exit 1, one line naming the last one tried", res)


def bad_entries():
    good = dead_url()
    res = cli("queue", server=f"{good},bogus:2")
    ok(one_line_error(res, 2, ["'bogus:2'", "entry 2 of 2", "expected http://HOST:PORT"]),
       "the CLI: a bad entry of the list is a usage error naming it", res)
    res = cli("queue", server=f"{good},,{good}")
    ok(one_line_error(res, 2, ["entry 2 of 3", "an empty entry"]),
       "the CLI: an empty entry is a usage error naming its place", res)
    for cmd in ("agent", "router"):
        r = subprocess.run([BIN, cmd, "--server", f"{good},ftp://x:1", "--join-token",
                            SRV.token_file("join")], capture_output=True, text=True, timeout=30)
        ok(r.returncode == 2 and f"gpuorch {cmd}: --server 'ftp://x:1' (entry 2 of 2)" in r.stderr,
           f"gpuorch {cmd}: a bad entry of --server is a usage error naming it",
           f"{r.returncode}\n{r.stderr}")


def on_exit():
    for ag in AGENTS.values():
        ag.kill()
    for proc in ROUTERS:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for s in STUBS:
        s.stop()
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""leader_test.py GPUORCH - several `gpuorch server` processes on one
PostgreSQL (tests/tools/pgserver.py, on loopback), --lease 2, one leading:

- exactly one leads; the followers' health names it and its epoch; a
  follower answers a submit with 307 to the leader's URL (path and query
  kept, no token needed) and X-Gpuorch-Role: follower;
- jobs submitted to the leader; kill -9 of the leader: a follower leads
  within the lease plus one renewal (plus its start, measured), under a
  higher epoch, and every acknowledged job is there;
- the leader stopped (SIGSTOP) past its lease: another leads; continued
  (SIGCONT), the old one acknowledges nothing (a submit sent to it while it
  was stopped is not 201 and is nowhere in the store) and follows;
- SIGTERM of the leader hands over at once (well under the lease);
- PostgreSQL stopped: the leader stops leading, every controller answers
  503 with Retry-After and "no leader"; PostgreSQL back: one leads again
  and every acknowledged job is there;
- an agent given the list of the three controllers follows the leader
  across a kill -9 and gets the new leader's work;
- a new leader offers a node no work before the node's first heartbeat to
  it: an agent stopped (SIGSTOP) across a kill -9 of its controller keeps
  its node awaiting a heartbeat and a new job pending; continued, the node
  gets the job.

Needs PostgreSQL (Debian's package) and root for the agent's part, as the
other agent tests. Every process is a child stopped by PID; conditions are
polled with deadlines, never timed; durations are measured and bounded by
the lease. KEEP_TMP=1 keeps the directories."""

import os
import signal
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from harness import (DEADLINE_S, FakeAgent, Server, diag, fake_gpu_uuid, job_of,  # noqa: E402
                     ok, remove_tmp, run, wait_until)
from pgserver import PgServer  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
LEASE_S = 2
RENEW_S = LEASE_S / 5
# What a new leader takes to load the store and start serving, on top of the
# lease: allowed, and printed, since a sanitizer build on a busy machine is slow.
START_ALLOWANCE_S = 1.5
SECRETS = ("join.token", "logs.key", "steps.key")  # shared by every controller (admin guide)

TMP = tempfile.mkdtemp(prefix="gpuorch-leader-test-")
os.chmod(TMP, 0o755)
PG = PgServer(os.path.join(TMP, "pg"))
CTLS = []
AGENT = None
ADMIN = None


class Controller(Server):
    """`gpuorch server --store URL --lease 2` on 127.0.0.1:PORT (0: a free one,
    kept across its restarts once known)."""

    def __init__(self, n, url, extra=()):
        super().__init__(BIN, f"gpuorch-leader-test-c{n}-",
                         ["--store", url, "--lease", LEASE_S] + list(extra))
        self.n = n

    def start(self):
        super().start()
        self.listen_port = self.port  # its restarts come back on the same port

    def health(self):
        """The health answer's JSON, or None (not answering now)."""
        try:
            st, body, _ = self.call("GET", "/v1/health", timeout=2)
        except OSError:
            return None
        return body if st == 200 else None

    def role(self):
        h = self.health()
        return h.get("role") if h else None


def leaders(ctls):
    return [c for c in ctls if c.proc and c.role() == "leader"]


def wait_leader(ctls, timeout=DEADLINE_S, step=0.02):
    """The one controller of CTLS that says it leads, polled; None."""
    got = wait_until(lambda: leaders(ctls), timeout, step)
    return got[0] if got and len(got) == 1 else None


def submit(ctl, name, token=None):
    body = {"command": ["/bin/true"], "gpus": 1, "team": "research", "name": name}
    return ctl.call("POST", "/v1/jobs", body, token=ADMIN if token is None else token)


def all_present(ctl, ids):
    missing = [i for i in ids if not job_of(ctl.api, i, ADMIN)]
    return missing


def secrets_of(ctl):
    """The join token and keys in CTL's data directory (None for a file it lacks)."""
    out = []
    for name in SECRETS:
        try:
            with open(os.path.join(ctl.data, name), "rb") as f:
                out.append(f.read())
        except FileNotFoundError:
            out.append(None)
    return out


def secrets_shared():
    """Nobody copied the secrets: each controller that has led took the first
    one's from the store, so agents authenticate to whichever leads."""
    first = secrets_of(CTLS[0])
    led = [c for c in CTLS[1:] if secrets_of(c)[0] is not None]
    ok(led and all(secrets_of(c) == first for c in led),
       "every controller that has led holds the first one's join token, logs key and steps key "
       "(from the store; none copied)", [c.n for c in led])


def main():
    global ADMIN
    print("TAP version 13")
    url = PG.start()
    diag(f"PostgreSQL at {url}")
    CTLS.extend(Controller(n, url) for n in range(3))
    CTLS[0].start()
    first = wait_leader(CTLS[:1])
    ok(first is CTLS[0], "the first controller on an empty store leads", CTLS[0].log_tail())
    ADMIN = open(CTLS[0].token_file("admin")).read().strip()
    for c in CTLS[1:]:
        c.start()
    steps = [one_leader, follower_redirects, kill9_failover, secrets_shared, sigstop_fenced,
             sigterm_handover,
             store_lost, agent_follows_the_leader, new_leader_waits_for_heartbeat]
    for step in steps:
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    for c in CTLS:
        if c.proc:
            rc = c.stop()
            ok(rc == 0, f"controller {c.n} stops cleanly", f"{rc}\n{c.log_tail()}")
    logs = "".join(c.log_tail() for c in CTLS)
    ok("Sanitizer" not in logs and "runtime error:" not in logs,
       "the controllers' logs hold no sanitizer report", logs)


ACKED = []  # ids of jobs answered 201


def one_leader():
    wait_until(lambda: all(c.role() for c in CTLS), DEADLINE_S)
    hs = [c.health() for c in CTLS]
    lead = [c for c, h in zip(CTLS, hs) if h and h["role"] == "leader"]
    ok(len(lead) == 1 and lead[0] is CTLS[0], "exactly one of three controllers leads", hs)
    L = CTLS[0]
    lh = hs[0]
    ok(lh["leader"] == L.url and lh["epoch"] >= 1 and lh["status"] == "ok" and "jobs" in lh,
       "the leader's health: role, its own URL, its epoch and the existing fields", lh)
    fol = [h for h in hs[1:]]
    ok(all(h and h["role"] == "follower" and h["leader"] == L.url and h["epoch"] == lh["epoch"]
           for h in fol), "each follower's health names the leader's URL and epoch", fol)
    L.api.expect("PUT", "/v1/pools/main", {"description": "main"}, token=ADMIN)
    L.api.expect("PUT", "/v1/teams/research",
             {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]}, token=ADMIN)
    for k in range(20):
        st, body, raw = submit(L, f"before-{k}")
        if st == 201:
            ACKED.append(body["id"])
    ok(len(ACKED) == 20, "20 jobs submitted to the leader: 201 each", len(ACKED))


def follower_redirects():
    L, F = CTLS[0], CTLS[1]
    a = F.api.call("POST", "/v1/jobs?probe=1", {"command": ["/bin/true"], "gpus": 1,
                                                 "team": "research"}, token=ADMIN)
    ok(a.status == 307 and a.headers.get("location") == f"{L.url}/v1/jobs?probe=1"
       and a.headers.get("x-gpuorch-role") == "follower",
       "a follower answers a submit 307 with Location = the leader's URL + path?query",
       f"{a.status} {a.headers} {a.raw[:200]!r}")
    ok(isinstance(a.json, dict) and L.url in str(a.json.get("error")),
       "the 307's body names the leader", a.raw[:300])
    b = F.api.call("GET", "/v1/jobs/1", token="")
    ok(b.status == 307 and b.headers.get("location") == f"{L.url}/v1/jobs/1",
       "a follower redirects without checking tokens", f"{b.status} {b.headers}")
    st, body, _ = F.call("GET", "/v1/health", token="")
    ok(st == 200 and body["role"] == "follower", "a follower serves its own health", body)


def kill9_failover():
    L = leaders(CTLS)[0]
    old_epoch = L.health()["epoch"]
    rest = [c for c in CTLS if c is not L]
    t0 = time.monotonic()
    L.kill9()
    new = wait_leader(rest, LEASE_S + RENEW_S + START_ALLOWANCE_S + 10, 0.01)
    took = time.monotonic() - t0
    bound = LEASE_S + RENEW_S + START_ALLOWANCE_S
    diag(f"kill -9 of the leader to a follower serving as leader: {took:.2f} s "
         f"(lease {LEASE_S} s, renewal every {RENEW_S} s)")
    ok(new is not None and took <= bound,
       f"after kill -9 a follower leads within the lease plus one renewal (<= {bound} s with "
       f"its start)", f"{took:.2f} s; {[c.log_tail()[-600:] for c in rest]}")
    h = new.health() if new else {}
    ok(h and h["epoch"] > old_epoch, "the new leader's epoch is higher", f"{old_epoch} -> {h}")
    missing = all_present(new, ACKED) if new else ACKED
    ok(not missing, "every acknowledged job is on the new leader", missing)
    st, body, _ = submit(new, "after-kill9")
    ok(st == 201, "the new leader acknowledges a submit", body)
    if st == 201:
        ACKED.append(body["id"])
    other = [c for c in rest if c is not new][0]
    ok(wait_until(lambda: (other.health() or {}).get("leader") == new.url),
       "the other follower now names the new leader", other.health())
    L.start()  # back on its port, as a follower now
    ok(wait_until(lambda: (L.health() or {}).get("leader") == new.url)
       and L.role() == "follower",
       "the killed controller, started again, follows the new leader", L.health())


def sigstop_fenced():
    L = leaders(CTLS)[0]
    rest = [c for c in CTLS if c is not L]
    L.proc.send_signal(signal.SIGSTOP)
    answer = {}
    try:
        new = wait_leader(rest, DEADLINE_S)
        ok(new is not None, "with the leader stopped past its lease, another leads",
           [c.health() for c in rest])
        # Sent while it is stopped: the kernel queues it; the old leader reads
        # it when continued, with its lease long gone.
        def late():
            try:
                answer["a"] = submit(L, "to-the-stopped-leader")
            except OSError as e:
                answer["a"] = e
        t = threading.Thread(target=late)
        t.start()
        time.sleep(0.2)  # not a check: lets the request reach the socket before SIGCONT
    finally:
        L.proc.send_signal(signal.SIGCONT)
    t.join(30)
    a = answer.get("a")
    status = a.status if hasattr(a, "status") else a
    ok(status != 201, "continued, the old leader does not acknowledge the submit it was sent",
       f"{status} {getattr(a, 'raw', b'')[:200]!r}")
    ok(wait_until(lambda: L.role() == "follower" and L.health()["leader"] == new.url),
       "the old leader steps down and follows the new one", f"{L.health()}\n{L.log_tail()}")
    st, body, _ = new.call("GET", "/v1/jobs", query={"limit": 1000}, token=ADMIN)
    names = [j.get("name") or j.get("spec", {}).get("name") for j in body.get("jobs", [])]
    ok(st == 200 and "to-the-stopped-leader" not in names,
       "the store holds nothing of what the old leader was sent", names)
    ok("no longer leading" in L.log_tail(), "the old leader says it stopped leading",
       L.log_tail())


def sigterm_handover():
    L = leaders(CTLS)[0]
    rest = [c for c in CTLS if c is not L]
    t0 = time.monotonic()
    rc = L.stop()
    new = wait_leader(rest, DEADLINE_S, 0.01)
    took = time.monotonic() - t0
    diag(f"SIGTERM of the leader to a follower serving as leader: {took:.2f} s")
    ok(rc == 0 and new is not None and took < LEASE_S,
       f"SIGTERM hands the lease over at once (under the {LEASE_S} s lease)", f"{took:.2f} s")
    missing = all_present(new, ACKED) if new else ACKED
    ok(not missing, "every acknowledged job is on the leader after the handover", missing)
    L.start()
    ok(wait_until(lambda: L.role() == "follower"), "the stopped controller comes back a follower",
       L.log_tail())


def store_lost():
    L = leaders(CTLS)[0]
    PG.stop()
    try:
        ok(wait_until(lambda: L.role() == "follower", DEADLINE_S + 10),
           "PostgreSQL gone: the leader stops leading", L.log_tail())

        def all_503():
            for c in CTLS:
                try:
                    a = submit(c, "no-store")
                except OSError:
                    return False
                if not (a.status == 503 and a.headers.get("retry-after") == "1"
                        and a.headers.get("x-gpuorch-role") == "follower"):
                    return False
            return True
        ok(wait_until(all_503, DEADLINE_S + 10),
           "with no leader every controller answers 503, Retry-After: 1, X-Gpuorch-Role",
           [c.health() for c in CTLS])
        hs = [c.health() for c in CTLS]
        ok(all(h and h["role"] == "follower" and h["leader"] is None for h in hs),
           "their health says follower with no leader", hs)
    finally:
        PG.start()
    new = wait_leader(CTLS, DEADLINE_S + 10)
    ok(new is not None, "PostgreSQL back: one controller leads again",
       [c.log_tail()[-800:] for c in CTLS])
    missing = all_present(new, ACKED) if new else ACKED
    ok(not missing, "every acknowledged job is still there", missing)


def node_on(ctl, name):
    """Node NAME as controller CTL's GET /v1/nodes shows it, or None."""
    try:
        st, body, _ = ctl.call("GET", "/v1/nodes", token=ADMIN, timeout=2)
    except OSError:
        return None
    found = [n for n in body["nodes"] if n["name"] == name] if st == 200 else []
    return found[0] if found else None


def agent_follows_the_leader():
    """An agent given the list of the three controllers registers with the
    leader, follows the new one after a kill -9 and gets its work there."""
    L = leaders(CTLS)[0]
    uuid = fake_gpu_uuid(26, 1)
    ag = FakeAgent(BIN, L, TMP, FAKENVML, "lead2", [uuid])
    ag.server = ",".join(c.url for c in CTLS)
    ag.write_gpu_list([{"uuid": uuid, "utilization": 0}])
    ag.start()
    try:
        ok(wait_until(lambda: (node_on(L, "lead2") or {}).get("awaiting_heartbeat") is False),
           "an agent with the list of controllers registers with the leader and heartbeats",
           f"{node_on(L, 'lead2')}\n{ag.tail()}")
        L.kill9()
        new = wait_leader([c for c in CTLS if c is not L], DEADLINE_S)
        ok(new is not None and wait_until(
            lambda: (node_on(new, "lead2") or {}).get("awaiting_heartbeat") is False),
           "after kill -9 of the leader the agent heartbeats to the new one",
           f"{new and node_on(new, 'lead2')}\n{ag.tail()}")
        st, body, _ = submit(new, "on-lead2") if new else (0, {}, b"")
        jid = body["id"] if st == 201 else 0
        ok(jid and wait_until(lambda: (job_of(new.api, jid, ADMIN) or {}).get("state")
                              not in (None, "PENDING")),
           "the new leader's work reaches the agent", job_of(new.api, jid, ADMIN) if new else None)
        if jid:
            new.call("POST", f"/v1/jobs/{jid}/cancel", {}, token=ADMIN)
        L.start()
        ok(wait_until(lambda: L.role() == "follower"), "the killed controller follows again",
           L.log_tail())
    finally:
        rc = ag.stop()
    ok(rc == 0, "the agent that followed the leader stops cleanly", ag.tail())


def new_leader_waits_for_heartbeat():
    """One controller on the store, with an agent; the agent stopped, the
    controller killed and started again (a new leader, once its old lease
    lapsed): the node gets no work until the agent's first heartbeat."""
    global AGENT
    for c in CTLS:
        if c.proc:
            c.stop()
    D = CTLS[0]
    D.start()
    ok(wait_leader([D]) is D, "a lone controller on the store leads", D.log_tail())
    uuid = fake_gpu_uuid(26, 0)
    AGENT = FakeAgent(BIN, D, TMP, FAKENVML, "lead1", [uuid])
    AGENT.write_gpu_list([{"uuid": uuid, "utilization": 0}])
    AGENT.start()

    def node():
        return node_on(D, "lead1")
    ok(wait_until(lambda: (node() or {}).get("state") == "up"
                  and (node() or {}).get("awaiting_heartbeat") is False),
       "the agent registers and heartbeats", f"{node()}\n{AGENT.tail()}")
    AGENT.proc.send_signal(signal.SIGSTOP)
    try:
        old_epoch = D.health()["epoch"]
        D.kill9()
        D.start()
        ok(wait_leader([D], DEADLINE_S) is D and D.health()["epoch"] > old_epoch,
           "started again, it leads under a new epoch", D.health())
        n = node()
        ok(n and n["state"] == "up" and n["awaiting_heartbeat"] is True,
           "the new leader counts the node's silence from its own start and awaits a heartbeat",
           n)
        st, body, _ = submit(D, "waits-for-heartbeat")
        jid = body["id"] if st == 201 else 0
        # A pass has considered it once it carries a wait reason.
        seen = wait_until(lambda: (job_of(D.api, jid, ADMIN) or {}).get("wait_reason"))
        j = job_of(D.api, jid, ADMIN)
        ok(st == 201 and seen and j["state"] == "PENDING",
           "a pass offers the silent node nothing: the job waits", j)
    finally:
        AGENT.proc.send_signal(signal.SIGCONT)
    ok(jid and wait_until(lambda: (job_of(D.api, jid, ADMIN) or {}).get("state")
                          not in (None, "PENDING")),
       "after the agent's first heartbeat the node gets the job",
       f"{job_of(D.api, jid, ADMIN)}\n{node()}")
    ok(node() is not None and node()["awaiting_heartbeat"] is False,
       "the node no longer awaits a heartbeat",
       node())
    D.call("POST", f"/v1/jobs/{jid}/cancel", {}, token=ADMIN)
    rc = AGENT.stop()
    ok(rc == 0, "the agent stops cleanly", AGENT.tail())


def cleanup():
    for c in CTLS:
        c.cleanup()
    if AGENT:
        AGENT.kill()
    PG.stop()
    remove_tmp(TMP)


class _Nothing:
    def cleanup(self):
        pass


run(main, _Nothing(), on_exit=cleanup)

#!/usr/bin/env python3
"""partition_test.py GPUORCH [--only N,N] [--sqlite] - several hosts on one
machine, as network namespaces on one bridge (netns.py): PostgreSQL
(tests/tools/pgserver.py) on a host of its own, each `gpuorch server` on
its own (one PostgreSQL store, one leader), each `gpuorch agent` on its own
with the fake NVML ($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1),
and the test's own sockets on a host "t". Partitions are made by pulling a
host's cable at the switch (netns.Net.cut) or by dropping some of its
traffic with nftables (netns.Net.drop). Prints TAP.

Throughout each case, history.Sampler records every 100 ms the leader's
running jobs (their attempts, nodes and GPUs) and the processes alive for
each job on each host; history.check then asserts, over the whole
history, that no job had two attempts' processes alive at once and no GPU
two jobs' processes (or, in the leader's view, two jobs' attempts).

1. The leader is killed with -9 while 4 clients submit 1,000 jobs (each
   with an Idempotency-Key, retried through the controller list by the
   follow rules: 307 followed, a follower's 503 and a broken connection
   sent to the next controller): a follower leads within the lease plus
   one renewal; every acknowledged submission is there exactly once; the
   jobs running at the kill run on; the new leader gives the GPUs of two
   jobs cancelled through it to two waiting ones.
2. The leader is cut off from PostgreSQL (nftables in its host): it stops
   leading within its lease and acknowledges no submission from the cut
   on (then it answers 503 as a follower, 307, or refuses), an agent's
   long-poll open on it ends handing out nothing, a follower leads within
   the lease plus one renewal, no attempt starts under the old epoch, the
   jobs running at the cut run on; healed, the old leader follows the new
   one and redirects to it.
In both, the controllers' health is asked every 50 ms: never two leaders.
3. (run after 4, on the same cluster) An agent is cut off for longer than
   its fence lease: its jobs' processes end before their new attempts start
   on another node, the node is marked down, and it rejoins when the link
   comes back (its GPUs run jobs again).
4. An agent is cut off for less than its fence lease: nothing is killed,
   no attempt ends, the node is never marked down.
5. The leader is frozen (SIGSTOP: it accepts connections and answers
   none) past the fence lease: a follower leads within the lease plus one
   renewal, a job submitted meanwhile runs, the jobs running at the freeze
   run on (the agents found the new leader within their fence lease);
   continued, the old leader never says it leads again, and follows.

Case 5 runs only when asked for (--only 5: meson's partition_frozen).
Settings: --lease 2, --node-timeout 8, --fence-lease 4, --fence-grace 1,
--pass-interval 1; every bound is derived from them. --only runs some
cases; --sqlite runs cases 3 and 4 on one controller with its SQLite store
(to check the checker on a build without PostgreSQL or fencing: case 3
must then fail). Needs root (namespaces; the agents switch to the job's
user gpuorch-test1, scripts/setup.sh); without it, one TAP line says why
and nothing runs, as for the other root-only tests. Everything started is
stopped by PID and the namespaces deleted, also on failure. KEEP_TMP=1
keeps the directories."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import harness  # noqa: E402
import history  # noqa: E402
import netns  # noqa: E402
from harness import (AGENT_FLAGS, Client, FakeAgent, Periodic, diag, fake_gpu_uuid,  # noqa: E402
                     file_tail, ok, remove_tmp, stop_process, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
PORT = 8080  # every controller listens on its own host's address

LEASE_S = 2
NODE_TIMEOUT_S = 8
FENCE_LEASE_S = 4
FENCE_GRACE_S = 1
PASS_S = 1
HEARTBEAT_S = AGENT_FLAGS["sample-interval"] / 1000
KILL_SLACK_S = 2  # SIGKILL's end seen by /proc, and the sampler's period, on a busy machine
SERVER_FLAGS = ["--lease", LEASE_S, "--node-timeout", NODE_TIMEOUT_S, "--fence-lease",
                FENCE_LEASE_S, "--fence-grace", FENCE_GRACE_S, "--pass-interval", PASS_S]

FOREVER = ["/bin/sh", "-c", "while true; do sleep 0.2; done"]

NET = None
TMP = tempfile.mkdtemp(prefix="gpuorch-partition-test-")
os.chmod(TMP, 0o755)


def parse_argv(argv):
    only, sqlite = {1, 2, 3, 4}, False
    i = 2
    while i < len(argv):
        if argv[i] == "--only" and i + 1 < len(argv):
            only = {int(x) for x in argv[i + 1].split(",")}
            i += 2
        elif argv[i] == "--sqlite":
            sqlite = True
            i += 1
        else:
            sys.exit(f"partition_test.py: unknown argument {argv[i]!r} "
                     "(expected --only N,N or --sqlite)")
    return only, sqlite


ONLY, SQLITE = parse_argv(sys.argv)


# -- Controllers, and a client that follows the leader. ------------------------------------


class Controller:
    """`gpuorch server` on host HOST, listening on HOST's address:PORT, its data in DIR."""

    def __init__(self, host, tmp, store_url):
        self.host = NET.hosts[host]
        self.name = host
        self.data = os.path.join(tmp, f"{host}-data")
        self.log_path = os.path.join(tmp, f"{host}.log")
        self.port_file = os.path.join(tmp, f"{host}.port")
        self.store_url = store_url
        self.url = f"http://{self.host.addr}:{PORT}"
        self.proc = None

    def start(self):
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        args = [BIN, "server", "--data", self.data, "--listen", f"{self.host.addr}:{PORT}",
                "--port-file", self.port_file] + SERVER_FLAGS
        if self.store_url:
            args += ["--store", self.store_url, "--advertise", self.url]
        with open(self.log_path, "a") as log:
            log.write(f"---- test: starting {' '.join(str(a) for a in args)}\n")
            log.flush()
            self.proc = NET.popen(self.name, args, stdout=log, stderr=log,
                                  stdin=subprocess.DEVNULL)
        if not wait_until(lambda: self.proc.poll() is not None or (
                os.path.exists(self.port_file) and open(self.port_file).read().endswith("\n")),
                timeout=30, step=0.05) or self.proc.poll() is not None:
            raise RuntimeError(f"controller {self.name} did not start: {self.tail()}")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        return stop_process(self.proc)

    def tail(self, size=2000):
        return f"-- {self.name}'s log:\n{file_tail(self.log_path, size)}"


def raw_call(base, method, path, body=None, token=None, headers=None, query=None, timeout=5):
    """One request to BASE (harness.Client): an Answer; OSError when it breaks."""
    return Client(base, token, timeout=timeout).call(method, path, body, headers=headers,
                                                     query=query)


class Follow:
    """Requests to a list of controllers by the follow rules of docs/api.md:
    a 307 is followed to its Location (the leader), a follower's 503 or a
    broken connection moves to the next controller (after a short pause once
    every controller has been tried), until DEADLINE seconds have passed.
    The answer of the controller that took the request is returned."""

    def __init__(self, urls, token):
        self.urls, self.token = list(urls), token
        self.cur = 0
        self.lock = threading.Lock()

    def call(self, method, path, body=None, headers=None, query=None, timeout=5, deadline=60):
        end = time.monotonic() + deadline
        tries = 0
        with self.lock:
            base = self.urls[self.cur]
        last = None
        while True:
            try:
                a = raw_call(base, method, path, body, self.token, headers, query, timeout)
                if a.status == 307 and a.headers.get("location"):
                    u = urllib.parse.urlsplit(a.headers["location"])
                    base = f"{u.scheme}://{u.netloc}"
                    self._note(base)
                    continue
                if a.status == 503 and a.headers.get("x-gpuorch-role") == "follower":
                    last = a
                else:
                    return a
            except OSError as e:
                last = e
            tries += 1
            with self.lock:  # the next request, too, begins at the next controller
                self.cur = (self.urls.index(base) + 1 if base in self.urls else self.cur + 1) \
                    % len(self.urls)
                base = self.urls[self.cur]
            if time.monotonic() > end:
                if isinstance(last, OSError):
                    raise last
                return last
            if tries % len(self.urls) == 0:
                time.sleep(0.1)

    def _note(self, base):
        with self.lock:
            if base in self.urls:
                self.cur = self.urls.index(base)

    def expect(self, method, path, body=None, want=(200, 201), **kwargs):
        a = self.call(method, path, body, **kwargs)
        if a.status not in want:
            raise RuntimeError(f"{method} {path}: {a.status} {a.raw[:300]!r}")
        return a.json


def health(ctl, timeout=0.5):
    """GET /v1/health of controller CTL as JSON, or None."""
    try:
        a = raw_call(ctl.url, "GET", "/v1/health", timeout=timeout)
        return a.json if a.status == 200 and isinstance(a.json, dict) else None
    except OSError:
        return None


def leads(ctl):
    """The epoch of CTL if its health says it leads (a controller without
    roles, one alone, does), else None."""
    h = health(ctl)
    if h and h.get("role", "leader") == "leader":
        return h.get("epoch")
    return None


# -- A cluster: PostgreSQL, controllers, agents. -------------------------------------------


class Cluster:
    """CONTROLLERS (host names) on one PostgreSQL on host pg (or, with
    SQLITE, one controller on its own store), agents AGENTS {host: GPUs}
    in pool main, team research with user alice (JOB_USER). TAG makes the
    fake GPUs' UUIDs this case's own."""

    def __init__(self, tag, controllers, agents, sqlite=False):
        self.tag = tag
        self.tmp = tempfile.mkdtemp(prefix=f"case{tag}-", dir=TMP)
        os.chmod(self.tmp, 0o755)
        self.shared = os.path.join(self.tmp, "shared")
        os.mkdir(self.shared)
        os.chmod(self.shared, 0o777)
        self.sqlite = sqlite
        self.pg = None
        self.store_url = None
        self.ctl_names = controllers[:1] if sqlite else list(controllers)
        self.ctls = []
        self.agent_gpus = dict(agents)
        self.agents = {}
        self.admin = self.member = None
        self.sampler = None
        self.follows = {}

    @property
    def urls(self):
        return [c.url for c in self.ctls]

    def ctl(self, name):
        return next(c for c in self.ctls if c.name == name)

    def start(self):
        if not self.sqlite:
            from pgserver import PgServer  # tests/tools/pgserver.py
            self.pg = PgServer(os.path.join(self.tmp, "pg"), host=NET.hosts["pg"].addr,
                               port=5432)
            with NET.inside("pg"):  # postgres and its children live on host pg
                self.store_url = self.pg.start()
        self.ctls = [Controller(n, self.tmp, self.store_url) for n in self.ctl_names]
        first = self.ctls[0]
        first.start()  # the first start writes the admin and join tokens
        if not wait_until(lambda: leads(first) is not None, timeout=30, step=0.1):
            raise RuntimeError(f"controller {first.name} does not lead: {first.tail()}")
        for c in self.ctls[1:]:
            # The secrets (what agents join with, what signs log and step
            # tokens) come from the store to each controller that leads.
            c.start()
        self.admin = open(os.path.join(first.data, "admin.token")).read().strip()
        api = self.api(self.admin)
        api.expect("PUT", "/v1/pools/main", {})
        total = sum(self.agent_gpus.values())
        api.expect("PUT", "/v1/teams/research", {"quotas": [
            {"pool": "main", "guaranteed": total, "borrow_limit": -1}]})
        api.expect("PUT", "/v1/users/alice", {"unix_user": JOB_USER, "team": "research",
                                              "role": "member"})
        self.member = api.expect("POST", "/v1/users/alice/tokens?label=test",
                                 want=(201,))["token"]
        for no, (name, ngpus) in enumerate(self.agent_gpus.items(), start=1):
            uuids = [fake_gpu_uuid(no, g, tag=f"5{self.tag:03d}") for g in range(ngpus)]
            ag = FakeAgent(BIN, None, self.tmp, FAKENVML, name, uuids)
            ag.write_gpu_list([{"uuid": u, "process_memory_mib": 512} for u in uuids])
            ag.server = ",".join(self.urls)
            ag.addr = NET.hosts[name].addr
            ag.prefix = NET.prefix_args(name)
            ag.join_file = os.path.join(first.data, "join.token")
            self.agents[name] = ag
        self.sampler = history.Sampler(lambda: self.urls, self._sample_call,
                                       [u for ag in self.agents.values() for u in ag.uuids],
                                       NET.host_of_inode).start()
        for ag in self.agents.values():
            ag.start()
            NET.adopt(ag.proc)
        for name, ag in self.agents.items():
            if not wait_until(lambda: self.node_up(name, ag.uuids), timeout=30, step=0.1):
                raise RuntimeError(f"agent {name} does not register: {ag.tail()}")
        return self

    def _sample_call(self, base, method, path, query, timeout):
        a = raw_call(base, method, path, token=self.admin, query=query, timeout=timeout)
        return a.status, a.json

    def api(self, token=None):
        """The test's client for TOKEN (the admin's by default): one per token,
        so that it keeps to the controller that last answered."""
        token = token or self.admin
        if token not in self.follows:
            self.follows[token] = Follow(self.urls, token)
        return self.follows[token]

    def leader(self):
        """(controller, epoch) of the one whose health says it leads, or (None, None)."""
        for c in self.ctls:
            if c.proc and c.proc.poll() is None:
                e = leads(c)
                if e is not None:
                    return c, e
        return None, None

    def node(self, name):
        try:
            a = self.api().call("GET", "/v1/nodes", deadline=5)
        except OSError:
            return None
        for n in (a.json or {}).get("nodes") or [] if a.status == 200 else []:
            if n.get("name") == name:
                return n
        return None

    def node_up(self, name, uuids=None):
        n = self.node(name)
        return bool(n and n.get("state") == "up" and (
            uuids is None or sorted(g.get("uuid") for g in n.get("gpus") or []) == sorted(uuids)))

    def submit(self, name, **spec):
        body = dict({"name": name, "workdir": self.shared, "gpus": 1, "pool": "main",
                     "command": FOREVER}, **spec)
        return self.api(self.member).expect("POST", "/v1/jobs", body, want=(201,))["id"]

    def job(self, jid):
        try:
            a = self.api().call("GET", f"/v1/jobs/{jid}", deadline=5)
        except OSError:
            return None
        return a.json if a.status == 200 else None

    def all_jobs(self):
        out, after = [], None
        while True:
            q = {"limit": 1000}
            if after is not None:
                q["after"] = after
            body = self.api().expect("GET", "/v1/jobs", query=q, want=(200,))
            out += body.get("jobs") or []
            after = body.get("next_after")
            if after is None:
                return out

    def procs(self):
        """history.scan_processes of this case's GPUs now."""
        uuids = {u for ag in self.agents.values() for u in ag.uuids}
        return history.scan_processes(uuids, NET.host_of_inode)[0]

    def sampled_since(self, t):
        """Waits until the sampler has a sample taken after monotonic time T."""
        return wait_until(lambda: (self.sampler.snapshot() or [None])[-1] is not None and
                          self.sampler.snapshot()[-1].t > t, timeout=10, step=0.02)

    def check_history(self, what):
        samples = self.sampler.stop()
        bad = history.check(samples)
        with_view = sum(1 for s in samples if s.view is not None)
        diag(f"case {what}: {len(samples)} samples over "
             f"{samples[-1].t - samples[0].t if samples else 0:.1f} s, {with_view} with a "
             f"leader's view; sampler errors: {self.sampler.errors[:3]}")
        ok(len(samples) > 10 and with_view > 0 and not bad,
           f"{what}: over the recorded history, no job ran two attempts at once and no GPU "
           "ran two jobs' processes (or was given to two jobs)",
           "\n".join(bad[:30]) or f"{len(samples)} samples, {with_view} with a view")
        return samples

    def stop(self):
        if self.sampler:
            self.sampler.stopped.set()
        for ag in self.agents.values():
            ag.kill()
        for c in self.ctls:
            c.stop()
        if self.pg:
            try:
                self.pg.stop()
            except Exception as e:  # a failed stop is said; the namespaces go anyway
                diag(f"PostgreSQL did not stop: {e!r}")
        # The agents' jobs outlive the agents (by design): end them by PID.
        for p in self.procs().values():
            for pid in p["pids"]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def running_on(cl, jid, node):
    j = cl.job(jid)
    cur = (j or {}).get("current_attempt") or {}
    return j and j["state"] == "RUNNING" and cur.get("state") == "RUNNING" and \
        (node is None or cur.get("nodes") == [node]) and j


def roots(pids):
    """Of PIDS (one job's processes), the ones whose parent is not among them:
    the job's own program, not the short-lived children it forks."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) not in pids:
            out.append(pid)
    return sorted(out)


def alive(cl, jid, attempt=None, host=None):
    """PIDs of job JID's processes (of ATTEMPT, on HOST) alive now."""
    out = []
    for (j, a), p in cl.procs().items():
        if j == jid and (attempt is None or a == attempt) and (host is None or host in p["hosts"]):
            out += p["pids"]
    return sorted(out)


# -- Case 1: kill -9 of the leader under 1,000 submissions. ---------------------------------


SUBMITS, CLIENTS, KILL_AT = 1000, 4, 250
PROBE_S = 0.05  # how often the test asks the controllers' health: its measurement's grain
HEALTH_TIMEOUT_S = 0.3


def case_leader_kill():
    cl = Cluster(1, ["c1", "c2", "c3"], {"a1": 2, "a2": 2})
    try:
        cl.start()
        old, epoch = cl.leader()
        ok(old is not None, "case 1: one controller leads", [c.tail() for c in cl.ctls])
        acked, statuses, errors = {}, {}, []
        lock = threading.Lock()
        counts = {"acked": 0}

        def client(n):
            api = Follow(cl.urls, cl.member)
            api.cur = n % len(cl.urls)  # some start at a follower
            for i in range(SUBMITS // CLIENTS):
                key = f"k{n}-{i}"
                body = {"name": key, "workdir": cl.shared, "gpus": 1, "pool": "main",
                        "command": FOREVER}
                try:
                    a = api.call("POST", "/v1/jobs", body, headers={"Idempotency-Key": key},
                                 timeout=5, deadline=60)
                except OSError as e:
                    with lock:
                        errors.append(f"{key}: {e!r}")
                    continue
                with lock:
                    statuses[a.status] = statuses.get(a.status, 0) + 1
                    if a.status in (200, 201) and isinstance(a.json, dict):
                        acked[key] = int(a.json["id"])
                        counts["acked"] += 1
                    else:
                        errors.append(f"{key}: {a.status} {a.raw[:200]!r}")

        watch = HealthWatch(cl.ctls).start()
        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(n,), daemon=True)
                   for n in range(CLIENTS)]
        for t in threads:
            t.start()
        wait_until(lambda: counts["acked"] >= KILL_AT, timeout=120, step=0.01)
        running = cl.procs()
        t_kill = time.monotonic()
        acked_at_kill = counts["acked"]
        old.kill9()
        found = watch.wait(t_kill, lambda r: new_leader(r, old, epoch), 30)
        t_led = found[0] if found else None
        new = new_leader(found[1], old, epoch) if found else None
        bound = LEASE_S + renewal_s() + PROBE_S
        diag(f"case 1: {acked_at_kill} submissions acknowledged at the kill; a follower led "
             f"{secs(t_led)} after it (bound {bound:.2f} s)")
        ok(new is not None and t_led <= bound,
           f"case 1: after kill -9 of the leader, a follower leads within the lease plus one "
           f"renewal ({bound:.2f} s): {secs(t_led)}, epoch {epoch} -> "
           f"{new[1] if new else None}", [c.tail() for c in cl.ctls if c is not old])
        for t in threads:
            t.join(timeout=180)
        took = time.monotonic() - t0
        diag(f"case 1: {SUBMITS} submissions by {CLIENTS} clients in {took:.1f} s; answers "
             f"{statuses}; {len(errors)} without one")
        ok(len(acked) == SUBMITS and not errors,
           f"case 1: every one of the {SUBMITS} submissions is acknowledged (201, or 200 "
           "for a retried key)", "\n".join(errors[:20]))
        jobs = cl.all_jobs()
        bad = history.check_submits(acked, jobs)
        ok(not bad and len(jobs) == SUBMITS,
           f"case 1: every acknowledged submission is there exactly once ({len(jobs)} jobs)",
           "\n".join(bad[:20]))
        kept = survived(cl, running)
        ok(running and len(kept) == len(running),
           f"case 1: the {len(running)} jobs running at the kill run on, the same attempts "
           "(no agent fenced them, nothing requeued)", f"{sorted(running)} -> {kept}\n"
           f"{[cl.agents[n].tail(600) for n in cl.agents]}")
        # The new leader's own decisions: two jobs cancelled, two pending ones take their GPUs.
        ngpus = sum(cl.agent_gpus.values())
        gone = sorted(running)[:2]
        for j, _ in gone:
            cl.api().expect("POST", f"/v1/jobs/{j}/cancel", want=(200, 202))
        busy = wait_until(lambda: len({j for (j, _) in cl.procs()}) == ngpus and not any(
            k in cl.procs() for k in gone), timeout=30, step=0.1)
        ok(busy, f"case 1: two jobs cancelled through the new leader, two waiting ones take "
           f"their GPUs: {ngpus} GPUs busy, each with one job", cl.procs())
        cl.sampled_since(time.monotonic())
        watch.halt()
        two = watch.two_leaders()
        ok(not two, "case 1: no two controllers said they lead at once", two[:5])
        cl.check_history("case 1")
    finally:
        cl.stop()


class HealthWatch(Periodic):
    """Every PROBE_S, every controller's health: .rounds [(t, {name: (role,
    epoch)})], the role "leader" or "follower", else "refused" (nothing
    listens), "no answer" (none within HEALTH_TIMEOUT_S), "gone" (the process
    ended) or "status N". The questions go out at once, on a thread each, so
    that one hung controller does not slow the round."""

    PERIOD = PROBE_S

    def __init__(self, ctls):
        super().__init__()
        self.ctls = ctls
        self.rounds = []
        self.errors = []

    def sample(self):
        t = time.monotonic()
        seen = {}

        def ask(c):
            if not (c.proc and c.proc.poll() is None):
                seen[c.name] = ("gone", None)
                return
            try:
                a = raw_call(c.url, "GET", "/v1/health", timeout=HEALTH_TIMEOUT_S)
                h = a.json if a.status == 200 and isinstance(a.json, dict) else {}
                seen[c.name] = (h.get("role", "leader") if h else f"status {a.status}",
                                h.get("epoch"))
            except ConnectionRefusedError:
                seen[c.name] = ("refused", None)
            except OSError:
                seen[c.name] = ("no answer", None)

        threads = [threading.Thread(target=ask, args=(c,), daemon=True) for c in self.ctls]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=1)
        with self.lock:
            self.rounds.append((t, dict(seen)))

    def failed(self, error):
        self.errors.append(repr(error))

    def first(self, since, pred):
        """The first round's (t - SINCE, roles) at or after SINCE where pred(roles); None."""
        with self.lock:
            rounds = list(self.rounds)
        return next(((t - since, r) for t, r in rounds if t >= since and pred(r)), None)

    def wait(self, since, pred, timeout):
        wait_until(lambda: self.first(since, pred), timeout=timeout, step=PROBE_S)
        return self.first(since, pred)

    def two_leaders(self):
        """Rounds in which two controllers said they lead."""
        with self.lock:
            return [(round(t, 2), r) for t, r in self.rounds
                    if sum(1 for role, _ in r.values() if role == "leader") > 1]


def new_leader(roles, old, epoch):
    """The name and epoch of a controller other than OLD leading past EPOCH in ROLES."""
    return next(((n, e) for n, (role, e) in roles.items()
                 if n != old.name and role == "leader" and (epoch is None or (e or 0) > epoch)),
                None)


def survived(cl, before):
    """Of BEFORE {(job, attempt): pids} (cl.procs() at some moment), those whose
    job's current attempt is still that one, running, its processes alive."""
    now = cl.procs()
    out = []
    for (j, a) in before:
        cur = (cl.job(j) or {}).get("current_attempt") or {}
        if cur.get("attempt") == a and cur.get("state") == "RUNNING" and (j, a) in now:
            out.append((j, a))
    return out


def renewal_s():
    """How often a leader renews its lease, and a follower tries for it:
    every fifth of it (src/server/lead/lead.h)."""
    return LEASE_S / 5


# -- Case 2: the leader cut off from PostgreSQL. -------------------------------------------


def case_leader_pg_partition():
    cl = Cluster(2, ["c1", "c2", "c3"], {"a1": 2, "a2": 2})
    try:
        cl.start()
        old, epoch = cl.leader()
        ok(old is not None, "case 2: one controller leads", [c.tail() for c in cl.ctls])
        ids = [cl.submit(f"p{i}", max_retries=3) for i in range(2)]
        ok(wait_until(lambda: all(running_on(cl, j, None) for j in ids), timeout=30, step=0.1),
           "case 2: two jobs run", [cl.job(j) for j in ids])
        join = open(os.path.join(cl.ctls[0].data, "join.token")).read().strip()
        # A long-poll of node a1's assignments open on the old leader at the cut.
        first = raw_call(old.url, "GET", "/v1/nodes/a1/assignments", token=join)
        rev = (first.json or {}).get("rev")
        poll = {}

        def long_poll():
            t = time.monotonic()
            try:
                a = raw_call(old.url, "GET", "/v1/nodes/a1/assignments", token=join,
                             query={"since": rev, "wait": 60}, timeout=90)
                poll["end"] = (a.status, (a.json or {}).get("rev") if a.status == 200 else
                               a.raw[:200])
            except OSError as e:
                poll["end"] = repr(e)
            poll["after"] = time.monotonic() - t

        poller = threading.Thread(target=long_poll, daemon=True)
        poller.start()
        running = cl.procs()
        watch = HealthWatch(cl.ctls).start()
        time.sleep(0.3)  # let the long-poll reach the controller before the cut
        NET.drop(old.name, [NET.hosts["pg"].addr])
        t_cut = time.monotonic()
        cut_wall = time.time()
        # Submissions straight to the old leader, from the cut on, never followed.
        direct = []
        stop_direct = threading.Event()

        def submit_direct():
            i = 0
            while not stop_direct.is_set():
                key = f"d{i}"
                try:
                    a = raw_call(old.url, "POST", "/v1/jobs",
                                 {"name": key, "workdir": cl.shared, "gpus": 1, "pool": "main",
                                  "command": FOREVER}, cl.member,
                                 headers={"Idempotency-Key": key}, timeout=DIRECT_TIMEOUT_S)
                    direct.append((time.monotonic() - t_cut, a.status,
                                   a.headers.get("x-gpuorch-role")))
                except OSError as e:
                    direct.append((time.monotonic() - t_cut, repr(e)[:60], None))
                i += 1
                stop_direct.wait(DIRECT_PAUSE_S)

        sender = threading.Thread(target=submit_direct, daemon=True)
        sender.start()
        # The old leader leads until its last renewal (before the cut) plus the
        # lease; a follower takes the lease at its next try after that; the
        # step-down stops the old leader's HTTP server, ending its long-polls.
        stop_by = LEASE_S + PROBE_S
        lead_by = LEASE_S + renewal_s() + PROBE_S
        poll_by = 2 * LEASE_S
        watch.wait(t_cut, lambda r: r[old.name][0] in ("follower", "refused") and
                   new_leader(r, old, epoch), LEASE_S * 5)
        poller.join(timeout=LEASE_S * 5)
        stopped = watch.first(t_cut, lambda r: r[old.name][0] in ("follower", "refused"))
        hung = [round(t - t_cut, 2) for t, r in watch.rounds
                if t >= t_cut and r[old.name][0] == "no answer"]
        led = watch.first(t_cut, lambda r: new_leader(r, old, epoch))
        t_stop, t_led = (stopped or (None,))[0], (led or (None,))[0]
        new = new_leader(led[1], old, epoch) if led else None
        new = (cl.ctl(new[0]), new[1]) if new else None
        refused = [d[0] for d in direct if "Refused" in str(d[1])]
        diag(f"case 2: the old leader's health said it no longer leads {secs(t_stop)} after the "
             f"cut ({stopped[1][old.name] if stopped else None}); its health did not answer "
             f"within {HEALTH_TIMEOUT_S} s from {secs(min(hung, default=None))} to "
             f"{secs(max(hung, default=None))}; connections to it refused "
             f"from {secs(min(refused, default=None))} to {secs(max(refused, default=None))}; "
             f"a follower led after {secs(t_led)}; the long-poll ended "
             f"{secs(poll.get('after', 0.3) - 0.3)} after the cut with {poll.get('end')}")
        ok(t_stop is not None and t_stop <= stop_by,
           f"case 2: cut off from PostgreSQL, the old leader stops leading within the lease "
           f"({stop_by:.2f} s): {secs(t_stop)}", f"{watch.rounds[-3:]}\n{old.tail()}")
        ok(new is not None and t_led <= lead_by,
           f"case 2: a follower leads within the lease plus one renewal of the cut "
           f"({lead_by:.2f} s): {secs(t_led)}", [c.tail() for c in cl.ctls])
        two = watch.two_leaders()
        ok(not two, "case 2: no two controllers said they lead at once", two[:5])
        end = poll.get("end")
        handed = isinstance(end, tuple) and end[0] == 200 and end[1] != rev
        ok(end is not None and not handed and poll.get("after", 99) - 0.3 <= poll_by,
           f"case 2: the agent's long-poll open on the old leader ends within {poll_by} s of "
           f"the cut, handing out nothing new: {secs(poll.get('after', 0.3) - 0.3)}", poll)
        stop_direct.set()
        sender.join(timeout=10)
        late = [d for d in direct if d[1] in (200, 201)]
        ok(not late, "case 2: from the cut on, the old leader acknowledges no submission",
           late)
        after = [d for d in direct if t_stop is not None and d[0] > t_stop + DIRECT_TIMEOUT_S
                 and not (not_leading(d) or d[1] == 307 or "Timeout" in str(d[1]))]
        ok(t_stop is not None and not after,
           "case 2: once stopped, it answers only 503 (role follower) or 307, or refuses",
           after[:10])
        # Healed: the old leader follows the new one.
        NET.undrop(old.name)
        follows = wait_until(lambda: (health(old) or {}).get("role") == "follower" and (
            health(old) or {}).get("leader") == (new[0].url if new else None),
            timeout=LEASE_S * 5, step=0.1)
        ok(follows, "case 2: healed, the old leader is a follower and names the new leader",
           f"{health(old)}\n{old.tail()}")
        watch.halt()
        kept = survived(cl, running)
        ok(running and len(kept) == len(running),
           f"case 2: the {len(running)} jobs running at the cut run on, the same attempts "
           "(no agent fenced them, nothing requeued)", f"{sorted(running)} -> {kept}\n"
           f"{[cl.agents[n].tail(600) for n in cl.agents]}")
        a = raw_call(old.url, "GET", "/v1/jobs", token=cl.admin)
        ok(a.status == 307 and new and a.headers.get("location", "").startswith(new[0].url),
           "case 2: a request to the old leader is redirected (307) to the new one",
           f"{a.status} {a.headers}")
        # Nothing decided under the old epoch after the cut (attempts carry their epoch).
        jobs = cl.all_jobs()
        stale = [(j["id"], at.get("attempt"), at.get("started_at"))
                 for j in jobs for at in j.get("attempts") or []
                 if at.get("epoch") == epoch and at.get("started_at")
                 and rfc3339(at["started_at"]) > cut_wall + 0.5]
        ok(not stale, f"case 2: no attempt of epoch {epoch} started after the cut", stale)
        ids2 = [cl.submit(f"q{i}") for i in range(2)]
        ok(wait_until(lambda: all(running_on(cl, j, None) for j in ids2 + ids), timeout=30,
                      step=0.1),
           "case 2: the new leader runs new work (two more jobs) beside the first two",
           [cl.job(j) for j in ids + ids2])
        cl.check_history("case 2")
    finally:
        cl.stop()


# -- Case 5: the leader frozen (SIGSTOP), then continued. ----------------------------------


def case_leader_frozen():
    cl = Cluster(5, ["c1", "c2", "c3"], {"a1": 2, "a2": 2})
    old = None
    try:
        cl.start()
        old, epoch = cl.leader()
        ok(old is not None, "case 5: one controller leads", [c.tail() for c in cl.ctls])
        ids = [cl.submit(f"f{i}", max_retries=3) for i in range(2)]
        ok(wait_until(lambda: all(running_on(cl, j, None) for j in ids), timeout=30, step=0.1)
           and wait_until(lambda: all(alive(cl, j) for j in ids), timeout=10),
           "case 5: two jobs run", [cl.job(j) for j in ids])
        running = cl.procs()
        watch = HealthWatch(cl.ctls).start()
        old.proc.send_signal(signal.SIGSTOP)  # it accepts connections, and answers none
        t_stop = time.monotonic()
        try:
            led = watch.wait(t_stop, lambda r: new_leader(r, old, epoch), LEASE_S * 5)
            t_led = led[0] if led else None
            new = new_leader(led[1], old, epoch) if led else None
            bound = LEASE_S + renewal_s() + PROBE_S
            ok(new is not None and t_led <= bound,
               f"case 5: the leader frozen, a follower leads within the lease plus one renewal "
               f"({bound:.2f} s): {secs(t_led)}", [c.tail() for c in cl.ctls])
            jid = cl.submit("f-during")
            t_sub = time.monotonic()
            # An agent's long-poll open on the frozen leader ends within its wait
            # (--poll-wait) and the agent's 2 s of slack for its answer, the next
            # controller within the fence lease's worth of tries (its heartbeats
            # must get there in that time, or it fences); then a pass or two
            # places the job.
            run_by = AGENT_FLAGS["poll-wait"] + 2 + FENCE_LEASE_S + 2 * PASS_S
            runs = wait_until(lambda: running_on(cl, jid, None), timeout=run_by + 40, step=0.1)
            t_run = time.monotonic() - t_sub if runs else None
            ok(runs and t_run <= run_by,
               f"case 5: a job submitted through the controller list meanwhile runs under the new "
               f"leader within {run_by} s: {secs(t_run)}", cl.job(jid))
            # Past the fence lease since the freeze: an agent stuck on the frozen one fences.
            wait_until(lambda: time.monotonic() > t_stop + FENCE_LEASE_S + FENCE_GRACE_S +
                       KILL_SLACK_S, timeout=FENCE_LEASE_S + FENCE_GRACE_S + KILL_SLACK_S + 1)
            kept = survived(cl, running)
            ok(len(kept) == len(running),
               f"case 5: the {len(running)} jobs running at the freeze run on, the same "
               "attempts: the agents moved to the new leader within the fence lease",
               f"{sorted(running)} -> {kept}\n{[cl.agents[n].tail(700) for n in cl.agents]}")
        finally:
            old.proc.send_signal(signal.SIGCONT)
        t_cont = time.monotonic()
        follows = watch.wait(t_cont, lambda r: r[old.name][0] == "follower", LEASE_S * 5)
        watch.halt()
        claims = [(round(t - t_cont, 2), r[old.name]) for t, r in watch.rounds
                  if t >= t_cont and r[old.name][0] == "leader"]
        ok(follows and not claims,
           "case 5: continued, the old leader never says it leads, and follows the new one",
           f"{claims[:5]} {watch.rounds[-1:]}\n{old.tail()}")
        two = watch.two_leaders()
        ok(not two, "case 5: no two controllers said they lead at once", two[:5])
        cl.check_history("case 5")
    finally:
        if old and old.proc:
            old.proc.send_signal(signal.SIGCONT)
        cl.stop()


DIRECT_TIMEOUT_S, DIRECT_PAUSE_S = 0.5, 0.2  # case 2's submissions straight to the old leader


def not_leading(answer):
    """Whether a direct submission's (t, status or error, role) says the
    controller does not lead: a follower's 503, or a refused connection."""
    return (answer[1] == 503 and answer[2] == "follower") or "Refused" in str(answer[1])


def secs(t):
    return "never" if t is None else f"{t:.2f} s"


def rfc3339(text):
    import datetime
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- Cases 4 and 3: an agent cut off, shorter and longer than its fence lease. ---------------


def case_agent_cuts():
    cl = Cluster(3, ["c1", "c2"], {"a1": 2, "a2": 2}, sqlite=SQLITE)
    try:
        cl.start()
        api = cl.api()
        api.expect("POST", "/v1/nodes/a2/drain")
        ids = [cl.submit(f"j{i}", max_retries=3) for i in range(2)]
        good = wait_until(lambda: all(running_on(cl, j, "a1") for j in ids), timeout=30,
                          step=0.1)
        good = good and wait_until(lambda: all(alive(cl, j, 1, "a1") for j in ids), timeout=10)
        ok(good, "cases 3-4: two jobs run on a1 (a2 drained meanwhile)",
           f"{[cl.job(j) for j in ids]}\n{cl.agents['a1'].tail()}")
        api.expect("POST", "/v1/nodes/a2/resume")
        if 4 in ONLY:
            short_cut(cl, ids)
        if 3 in ONLY:
            long_cut(cl, ids)
        cl.check_history("cases 3-4")
    finally:
        cl.stop()


def short_cut(cl, ids):
    """Case 4: a1 cut off for a third of its fence lease."""
    before = {j: roots(alive(cl, j, 1, "a1")) for j in ids}
    n0 = len(cl.sampler.snapshot())
    NET.cut("a1")
    t_cut = time.monotonic()
    time.sleep(FENCE_LEASE_S / 3)  # the partition's length: the stimulus, not a check
    NET.heal("a1")
    # Wait past the moment a wrongly fencing agent would have killed, and past
    # the node's next heartbeat after the heal.
    heard = (cl.node("a1") or {}).get("last_heartbeat")
    wait_until(lambda: time.monotonic() > t_cut + FENCE_LEASE_S + FENCE_GRACE_S + KILL_SLACK_S,
               timeout=FENCE_LEASE_S + FENCE_GRACE_S + KILL_SLACK_S + 1, step=0.1)
    again = wait_until(lambda: (cl.node("a1") or {}).get("last_heartbeat") != heard, timeout=10)
    window = cl.sampler.snapshot()[n0:]
    after = {j: roots(alive(cl, j, 1, "a1")) for j in ids}
    ok(again and after == before and all(before.values()),
       f"case 4: a1 cut off for {FENCE_LEASE_S / 3:.1f} s (fence lease {FENCE_LEASE_S} s): its "
       "jobs' processes are the same ones afterwards", f"{before} -> {after}\n"
       f"{cl.agents['a1'].tail()}")
    gaps = [j for j in ids for s in window if (j, 1) not in s.procs]
    moved = [(j, s.view[j]) for s in window if s.view for j in ids
             if j in s.view and (s.view[j]["attempt"] != 1 or s.view[j]["nodes"] != ["a1"])]
    missing = [j for s in window if s.view is not None for j in ids if j not in s.view]
    ok(window and not gaps and not moved and not missing,
       f"case 4: in each of the {len(window)} samples since the cut, both jobs ran attempt 1 "
       "on a1, in the leader's view and on a1", f"gaps {gaps[:5]} moved {moved[:5]} "
       f"missing {missing[:5]}")
    n = cl.node("a1") or {}
    ok(n.get("state") == "up" and all(running_on(cl, j, "a1") for j in ids),
       "case 4: a1 stayed up and its jobs are RUNNING, nothing requeued",
       f"{n}\n{[cl.job(j) for j in ids]}")


def long_cut(cl, ids):
    """Case 3: a1 cut off until its node times out, then healed."""
    old_pids = {j: alive(cl, j, None, "a1") for j in ids}
    attempts = {j: (cl.job(j) or {}).get("current_attempt", {}).get("attempt") for j in ids}
    n0 = len(cl.sampler.snapshot())
    NET.cut("a1")
    t_cut = time.monotonic()
    try:
        fence_by = FENCE_LEASE_S + FENCE_GRACE_S + HEARTBEAT_S + KILL_SLACK_S
        restart_by = NODE_TIMEOUT_S + 2 * PASS_S + 5

        def gone():
            return not any(alive(cl, j, None, "a1") for j in ids)

        def restarted():
            return all((running_on(cl, j, "a2") or {}).get("current_attempt", {}).get(
                "attempt", 0) > (attempts[j] or 0) for j in ids) and \
                all(alive(cl, j, None, "a2") for j in ids)

        wait_until(lambda: gone() and restarted(), timeout=restart_by + 10, step=0.1)
        cl.sampled_since(time.monotonic())
        # When each happened, from the recorded history (sampled every 100 ms).
        window = [s for s in cl.sampler.snapshot()[n0:] if s.t >= t_cut]
        t_gone = next((s.t - t_cut for s in window if not any(
            (j, a) in s.procs and "a1" in s.procs[(j, a)]["hosts"]
            for j in ids for a in [attempts[j]])), None)
        t_new = next((s.t - t_cut for s in window if all(any(
            k[0] == j and k[1] > attempts[j] for k in s.procs) for j in ids)), None)
        ok(t_gone is not None and t_gone <= fence_by,
           f"case 3: a1 cut off: its jobs' processes end within the fence lease and grace "
           f"({fence_by:.1f} s): {secs(t_gone)}", f"{old_pids}\n{cl.agents['a1'].tail()}")
        log = cl.agents["a1"].log()
        ok(all(f"job {j}.{attempts[j]}: stopping (fenced" in log for j in ids),
           "case 3: a1's agent says it fenced each job (its log)", cl.agents["a1"].tail())
        ok(t_new is not None and t_new <= restart_by and restarted(),
           f"case 3: their new attempts run on a2 within {restart_by} s of the cut: "
           f"{secs(t_new)}",
           [cl.job(j) for j in ids])
        ok(t_gone is not None and t_new is not None and t_gone < t_new,
           "case 3: the old processes were gone before the new attempts' first process",
           f"gone at {secs(t_gone)}, new at {secs(t_new)}")
        ok(wait_until(lambda: all(alive(cl, j, None, "a2") for j in ids), timeout=10),
           "case 3: the new attempts' processes run on a2", cl.procs())
        n = cl.node("a1") or {}
        ok(n.get("state") == "down", "case 3: node a1 is marked down", n)
        diag(f"case 3: a1's processes gone {secs(t_gone)} after the cut, the new attempts' "
             f"processes first seen at {secs(t_new)} (node timeout {NODE_TIMEOUT_S} s)")
        for j, w in sorted(history.double_runs(cl.sampler.snapshot()).items()):
            diag(f"case 3: job {j} ran twice: {w}")
    finally:
        NET.heal("a1")
    back = wait_until(lambda: cl.node_up("a1"), timeout=NODE_TIMEOUT_S + 20, step=0.1)
    ok(back, "case 3: the link back, a1 rejoins (up)", f"{cl.node('a1')}\n"
       f"{cl.agents['a1'].tail()}")
    more = [cl.submit(f"m{i}") for i in range(2)]
    ok(wait_until(lambda: all(running_on(cl, j, "a1") for j in more), timeout=30, step=0.1),
       "case 3: a1's GPUs run jobs again (two new jobs, a2's GPUs taken)",
       f"{[cl.job(j) for j in more]}\n{cl.node('a1')}")


# -- Main. ---------------------------------------------------------------------------------


def build_network():
    global NET
    NET = netns.Net().start()
    for name in ("t", "pg", "c1", "c2", "c3", "a1", "a2"):
        NET.host(name)
    NET.enter("t")  # the test's own sockets (and its threads') are on host t


def main():
    print("TAP version 13")
    netns.Net.catch_sigterm()
    build_network()
    diag(f"hosts: {', '.join(f'{h.name}={h.addr}' for h in NET.hosts.values())}")
    steps = []
    if 1 in ONLY and not SQLITE:
        steps.append(case_leader_kill)
    if 2 in ONLY and not SQLITE:
        steps.append(case_leader_pg_partition)
    if ONLY & {3, 4}:
        steps.append(case_agent_cuts)
    if 5 in ONLY and not SQLITE:
        steps.append(case_leader_frozen)
    for step in steps:
        t0 = time.monotonic()
        try:
            step()
        except Exception as e:  # one broken case should not hide the others' results
            ok(False, f"{step.__name__} ran to its end", repr(e))
        diag(f"{step.__name__} took {time.monotonic() - t0:.1f} s")


def finish():
    prefix = NET.prefix if NET else None
    left = NET.cleanup() if NET else []
    if prefix:
        ok(not left and not netns.leftovers(prefix),
           "every namespace of the test is deleted and every process it started is killed",
           f"{left} {netns.leftovers(prefix)}")
    remove_tmp(TMP)


if __name__ == "__main__":
    why = netns.need_root()
    if why:
        print(f"1..0 # SKIP {why}")
        remove_tmp(TMP)
        sys.exit(0)
    try:
        main()
    except BaseException as e:  # a crash or meson's SIGTERM is a failure, with the reason
        ok(False, "the test ran to its end", repr(e))
    finally:
        finish()
    print(f"1..{harness._count}")
    sys.exit(1 if harness._failed else 0)

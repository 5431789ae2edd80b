"""A simulated node agent for the lifecycle test, and the bookkeeping that
checks every assignments answer as it arrives: no GPU in two attempts at once,
only the node's own GPUs and as many as the job asked for, no job on two live
nodes, no attempt assigned again after its final report.

The agents run nothing: the command of an assignment says which reports to send
(MANUAL, HOLD, exits())."""

import heapq
import re
import threading
import time

from harness import DEADLINE_S, wait_until

POLL_WAIT_S = 5  # the simulated agents' long-poll wait

# -- What every simulated agent sees, checked as it arrives. -------------------------------

LOCK = threading.RLock()
SEQ = [0]
VIOLATIONS = {}  # category -> [detail]
EVENTS = []  # (seq, "add"|"del", node, (job, attempt)): an agent starts or stops holding GPUs
FINAL_SENT = {}  # (job, attempt) -> (state, seq when the report was sent)
FINAL_ACKED = {}  # (job, attempt) -> seq when the controller answered 200 to it
AGENTS = []
ANSWERS = [0]

# Commands the simulated agents understand (they run nothing):
MANUAL = ["/bin/sleep", "3600"]  # the test sends every report itself
HOLD = ["/bin/sleep", "infinity"]  # RUNNING at once, then held until the test ends it


def exits(code, after=0.0):
    """A command the agent reports RUNNING, then ends with exit CODE after AFTER s."""
    return ["/bin/sh", "-c", f"sleep {after}; exit {code}"]


def gpu_ids(a):
    """The GPU UUIDs of an assignment: its "gpus" are UUID strings, or shares
    {"uuid", "milli", "mem_mib"}."""
    return [g.get("uuid") if isinstance(g, dict) else g for g in (a or {}).get("gpus") or []]


def next_seq():
    with LOCK:
        SEQ[0] += 1
        return SEQ[0]


def violation(category, detail):
    with LOCK:
        VIOLATIONS.setdefault(category, []).append(detail)


class Agent:
    """A node agent as the controller meets it: a heartbeat thread, a long-poll
    thread and a thread that sends the reports its attempts' commands call for.
    API is a harness.Client of the controller with the join token."""

    def __init__(self, name, index, api):
        self.name = name
        self.api = api
        self.uuids = [f"GPU-{index:08x}-{g:04x}-4{g:03x}-8000-{index * 16 + g:012x}"
                      for g in range(4)]
        self.held = {}  # (job, attempt) -> GPUs: started, no final report sent
        self.killing = set()
        self.runs_seen = {}  # (job, attempt) -> its first run assignment
        self.kills_seen = {}  # (job, attempt) -> its first kill assignment
        self.dropped = []  # attempts the controller stopped listing before a final report
        self.reports = []  # ((job, attempt), state, status)
        self.errors = []  # unexpected answers to heartbeats, polls and automatic reports
        self.last = None  # the latest assignments answer
        self.last_req = 0  # the sequence number taken before that answer's request
        self.paused = False
        self.stopped = False
        self.queue = []  # heap of (due, n, key, report body)
        self.cv = threading.Condition(LOCK)
        self.threads = []
        self.polling = False

    def body(self):
        return {"pool": "main", "cpus": 64, "mem_mib": 515000,
                "gpus": [{"index": i, "uuid": u, "gpu_type": "H100-80GB", "mem_mib": 81559,
                          "nvlink_domain": 0, "mig_slices": 0, "mig_enabled": False}
                         for i, u in enumerate(self.uuids)]}

    def register(self):
        return self.api.call("PUT", f"/v1/nodes/{self.name}", self.body())

    def start(self, poll=True):
        self.polling = poll
        todo = [self.beat_loop, self.act_loop] + ([self.poll_loop] if poll else [])
        for fn in todo:
            self.spawn(fn)

    def start_polling(self):
        self.polling = True
        self.spawn(self.poll_loop)

    def spawn(self, fn):
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        self.threads.append(t)

    def stop(self):
        self.stopped = True
        for t in self.threads:
            t.join(timeout=POLL_WAIT_S + 35)

    def beat_loop(self):
        while not self.stopped:
            if not self.paused:
                try:
                    # A body (no samples, nothing dirty: the simulated agents run
                    # nothing) tells a rejoining node's controller its GPUs are clean.
                    st, _, raw = self.api.call("POST", f"/v1/nodes/{self.name}/heartbeat",
                                               {"gpus": [], "dirty": []}, timeout=10)
                    if st not in (204, 503):
                        self.errors.append(f"heartbeat: {st} {raw[:200]!r}")
                except OSError:  # the controller is down (kill -9): retry
                    pass
            time.sleep(0.2)

    def poll_loop(self):
        since = None
        while not self.stopped:
            if self.paused:
                since = None
                time.sleep(0.05)
                continue
            query = {"wait": POLL_WAIT_S}
            if since is not None:
                query["since"] = since
            req = next_seq()
            try:
                st, ans, raw = self.api.call("GET", f"/v1/nodes/{self.name}/assignments",
                                             query=query, timeout=POLL_WAIT_S + 30)
            except OSError:  # the controller is down: ask afresh once it is back
                since = None
                time.sleep(0.1)
                continue
            if self.paused or self.stopped:
                continue  # a dead node hears nothing
            if st != 200 or not isinstance(ans, dict) or not isinstance(ans.get("rev"), int):
                if st != 503:
                    self.errors.append(f"assignments: {st} {raw[:300]!r}")
                since = None
                time.sleep(0.2)
                continue
            since = ans["rev"]
            try:
                self.handle(ans, req)
            except Exception as e:  # a malformed answer: say so, keep polling
                self.errors.append(f"assignments answer {ans}: {e!r}")

    def act_loop(self):
        while not self.stopped:
            with self.cv:
                if self.paused or not self.queue or self.queue[0][0] > time.monotonic():
                    self.cv.wait(0.05)
                    continue
                _, _, key, body = heapq.heappop(self.queue)
            self.report(key[0], key[1], body, auto=True)

    def push(self, delay, key, body):
        with self.cv:
            heapq.heappush(self.queue, (time.monotonic() + delay, next_seq(), key, body))
            self.cv.notify_all()

    def report(self, job, attempt, body, auto=False):
        """Sends a report; a final one stops holding the attempt's GPUs before it
        is sent (so that nothing the controller does after it can look like an
        overlap). Returns (status, answer)."""
        key = (job, attempt)
        final = body.get("state") != "RUNNING"
        with LOCK:
            if auto and key not in self.held:
                return None, None  # the controller ended it already
            if final:
                if key in self.held:
                    del self.held[key]
                    EVENTS.append((next_seq(), "del", self.name, key))
                self.killing.discard(key)
                FINAL_SENT.setdefault(key, (body.get("state"), next_seq()))
        deadline = time.monotonic() + 30
        while True:
            try:
                st, ans, raw = self.api.call(
                    "POST", f"/v1/nodes/{self.name}/attempts/{job}/{attempt}", body)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    self.errors.append(f"report {key} {body}: {e!r}")
                    return None, None
                time.sleep(0.1)
        with LOCK:
            self.reports.append((key, body.get("state"), st))
            if final and st == 200:
                FINAL_ACKED.setdefault(key, next_seq())
        if auto and st != 200:
            self.errors.append(f"report {key} {body}: {st} {raw[:300]!r}")
        return st, ans

    def handle(self, ans, req):
        with LOCK:
            ANSWERS[0] += 1
            self.last, self.last_req = ans, req
            if ans.get("node") != self.name:
                violation("shape", f"{self.name}: answer names node {ans.get('node')!r}")
            runs, kills = {}, {}
            for a in ans.get("attempts") or []:
                key = (a.get("job"), a.get("attempt"))
                if a.get("action") == "run":
                    runs[key] = a
                elif a.get("action") == "kill":
                    kills[key] = a
                else:
                    violation("shape", f"{self.name}: unknown action in {a}")
            used = {}
            for key, a in runs.items():
                gpus = gpu_ids(a)
                want = (a.get("spec") or {}).get("gpus")
                if isinstance(want, (int, float)) and want >= 1 and len(gpus) != want:
                    violation("count", f"{self.name}: {key} asked {want} GPUs, got {gpus}")
                for g in gpus:
                    if g not in self.uuids:
                        violation("foreign", f"{self.name}: {key} got {g}, not this node's")
                    if g in used:
                        violation("double", f"{self.name}: {g} in {used[g]} and {key} at once")
                    used[g] = key
            # An attempt the controller stopped listing without our final report
            # ended there (a lost node); a real agent would kill it.
            for key in list(self.held):
                if key not in runs and key not in kills:
                    del self.held[key]
                    self.killing.discard(key)
                    self.dropped.append(key)
                    EVENTS.append((next_seq(), "del", self.name, key))
            for key, a in runs.items():
                gpus = gpu_ids(a)
                if key in self.held:
                    if sorted(self.held[key]) != sorted(gpus):
                        violation("moved", f"{self.name}: {key} GPUs {self.held[key]} -> {gpus}")
                    continue
                sent = FINAL_SENT.get(key)
                if sent:
                    # Asked after the controller acknowledged the final report: it
                    # should be gone (before that, the answer may predate the report).
                    if FINAL_ACKED.get(key, req) < req:
                        violation("again", f"{self.name}: {key} listed to run after its "
                                  f"{sent[0]} report was acknowledged")
                    continue
                if key in self.runs_seen:
                    violation("again", f"{self.name}: {key} listed again after it was dropped")
                    continue
                for other, og in self.held.items():
                    if set(og) & set(gpus):
                        violation("double", f"{self.name}: {key} got {sorted(set(og) & set(gpus))}"
                                  f" which {other} still holds")
                for ag in AGENTS:
                    if ag is self or ag.paused:
                        continue
                    for other in ag.held:
                        if other[0] == key[0]:
                            violation("twice", f"job {key[0]}: {other} on {ag.name} and {key} "
                                      f"on {self.name}")
                self.held[key] = gpus
                self.runs_seen[key] = a
                EVENTS.append((next_seq(), "add", self.name, key))
                self.schedule(key, a)
            for key, a in kills.items():
                self.kills_seen.setdefault(key, a)
                if key in self.held and key not in self.killing:
                    self.killing.add(key)
                    state = "PREEMPTED" if "preempt" in str(a.get("reason")) else "CANCELLED"
                    # A short delay: the GPUs stay busy while the process stops.
                    self.push(0.3, key, {"state": state, "signal": 15})
            self.cv.notify_all()

    def schedule(self, key, a):
        cmd = (a.get("spec") or {}).get("command") or []
        if cmd == MANUAL:
            return
        self.push(0, key, {"state": "RUNNING"})
        m = re.fullmatch(r"sleep ([0-9.]+); exit ([0-9]+)", cmd[2]) if len(cmd) == 3 else None
        if cmd[:2] == ["/bin/sh", "-c"] and m:
            code = int(m.group(2))
            final = ({"state": "COMPLETED", "exit_code": 0} if code == 0
                     else {"state": "FAILED", "exit_code": code})
            self.push(float(m.group(1)), key, final)


# -- What the agents saw. ---------------------------------------------------------------


def held_by(jid, attempt=None, timeout=DEADLINE_S):
    """Waits until an agent holds an attempt of job JID; returns (agent, key,
    assignment), or Nones."""
    found = []

    def check():
        with LOCK:
            for ag in AGENTS:
                for key in ag.held:
                    if key[0] == jid and (attempt is None or key[1] == attempt):
                        found[:] = [ag, key, ag.runs_seen[key]]
                        return True
        return False

    wait_until(check, timeout)
    return tuple(found) if found else (None, None, None)


def ever_ran(jid):
    with LOCK:
        return sorted(k for ag in AGENTS for k in ag.runs_seen if k[0] == jid)


def max_concurrent(ids):
    """The most attempts of jobs IDS that agents held at once, replaying EVENTS."""
    with LOCK:
        events = sorted(EVENTS)
    now, top = set(), 0
    for _, kind, node, key in events:
        if key[0] in ids:
            (now.add if kind == "add" else now.discard)((node, key))
            top = max(top, len(now))
    return top


def first_add(jid):
    with LOCK:
        return min((s for s, kind, _, key in EVENTS if kind == "add" and key[0] == jid),
                   default=None)

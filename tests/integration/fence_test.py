#!/usr/bin/env python3
"""fence_test.py GPUORCH - an agent fences itself (docs/agent.md, "Fencing"):
one `gpuorch server` (SQLite, --node-timeout 8, --fence-lease 3,
--fence-grace 1) and one real agent on the fake NVML ($GPUORCH_FAKENVML,
else BUILD/tests/libnvidia-ml.so.1), --kill-grace 2, running two jobs as
the test user gpuorch-test1: one that ends on SIGTERM, one that ignores it.
The controller is cut off by SIGSTOP (the agent's connections then hang, as
they would through a partition that drops packets) and brought back by
SIGCONT. Prints TAP.

What it checks:
  (b) cut off for less than the lease: nothing is killed (the same processes
      run throughout, and for the lease and grace after), nothing is
      requeued, the agent does not fence;
  (a) cut off for longer: every job's processes are gone by lease + grace +
      1 s from the cut-off (the agent's last answered heartbeat was sent no
      later), none before the lease less the heartbeat's period and a margin,
      the SIGTERM-ignoring one only after the grace (its SIGKILL); the
      agent's journal names each fenced attempt while it is still cut off;
      once the controller is back, the agent reports them fenced, the
      controller ends them NODE_FAIL with the agent's reason and requeues
      them, and new attempts start;
  (c) an agent stopped and restarted while cut off still fences, at the
      same bound from the cut-off (or from its start, if that came later),
      and journals it; its attempts are requeued once the controller is back;
  (d) cut off past the node timeout: fenced at the same bound, and once the
      controller is back (it ends the silent node's attempts itself), the
      jobs run again on the rejoined node;
  (e) the agent killed while the controller runs: its shims fence the jobs
      from the lease in the agent's fence file (by lease + 0.25 s + grace +
      1 s, none before the lease, the SIGTERM-ignoring one after the grace),
      their statuses say so; past the node timeout the controller ends the
      attempts NODE_FAIL, and the agent started again runs the jobs again.
Throughout, a sampler reads /proc every 100 ms without asking the
controller (which is frozen part of the time): no job ever has live
processes of two attempts at once, and no GPU runs two jobs' processes.

Needs root (the agent switches to the job's user) and the user
gpuorch-test1 (scripts/setup.sh). Agent and server are child processes
stopped by PID; bounds come from the settings, never from fixed sleeps.
KEEP_TMP=1 keeps the directories."""

import json
import os
import signal
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE_S, FakeAgent, Server, diag, end_checks, fake_gpu_uuid,  # noqa: E402
                     ok, pid_alive, remove_tmp, run_as_root, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
NODE_TIMEOUT_S, LEASE_S, GRACE_S, KILL_GRACE_S = 8, 3, 1, 2
SAMPLE_S = 0.2  # the agent's heartbeat period (harness.AGENT_FLAGS)
FENCE_GRACE_S = min(GRACE_S, KILL_GRACE_S)
SLACK_S = 1.0  # the bound's allowance: the fence's 100 ms rounds, process exit, sampling
SAVE_S = 0.25  # how much older the fence file's time may be (FENCE_SAVE_EVERY_MS)

SRV = Server(BIN, "gpuorch-fence-test-srv-",
             ["--node-timeout", NODE_TIMEOUT_S, "--fence-lease", LEASE_S, "--fence-grace",
              GRACE_S, "--pass-interval", 1])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-fence-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
UUIDS = [fake_gpu_uuid(1, g) for g in range(4)]
AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "n1", UUIDS, kill_grace=KILL_GRACE_S)
ADMIN = MEMBER = None
JOBS = {}  # name -> job id
STOP = os.path.join(SHARED, "stop")  # the SIGTERM-ignoring job ends once this exists


# -- The sampler: job processes by attempt, from /proc alone. --------------------------------


def job_processes():
    """{job id: {attempt: {pid, ...}}} of live processes that hold one of UUIDS
    (CUDA_VISIBLE_DEVICES) and name their job and attempt in the environment;
    and {uuid: {job id, ...}}."""
    by_job, by_gpu = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if b"=" in item)
        gpus = [u for u in env.get(b"CUDA_VISIBLE_DEVICES", b"").decode(errors="replace").split(",")
                if u in UUIDS]
        job, att = env.get(b"GPUORCH_JOB_ID"), env.get(b"GPUORCH_ATTEMPT")
        if not gpus or not job or not att or not pid_alive(pid):
            continue
        by_job.setdefault(int(job), {}).setdefault(int(att), set()).add(int(pid))
        for u in gpus:
            by_gpu.setdefault(u, set()).add(int(job))
    return by_job, by_gpu


class Sampler:
    """Every 100 ms: job_processes(), kept with the time; violations noted."""

    def __init__(self):
        self.history = []  # (monotonic time, by_job)
        self.violations = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stopped.is_set():
            t0 = time.monotonic()
            by_job, by_gpu = job_processes()
            with self.lock:
                self.history.append((t0, by_job))
                for job, atts in by_job.items():
                    if len(atts) > 1 and len(self.violations) < 50:
                        self.violations.append(f"{t0:.2f}: job {job} runs attempts "
                                               f"{sorted(atts)} at once: {atts}")
                for u, jobs in by_gpu.items():
                    if len(jobs) > 1 and len(self.violations) < 50:
                        self.violations.append(f"{t0:.2f}: GPU {u} runs jobs {sorted(jobs)}")
            self.stopped.wait(max(0.0, 0.1 - (time.monotonic() - t0)))

    def since(self, t):
        with self.lock:
            return [(ts, s) for ts, s in self.history if ts >= t]

    def latest(self):
        with self.lock:
            return self.history[-1] if self.history else (0, {})

    def stop(self):
        self.stopped.set()
        self.thread.join(timeout=10)
        return list(self.violations)


SAMPLER = Sampler()


def last_seen(samples, job, attempt=None):
    """The time of the last sample in SAMPLES with a live process of JOB
    (of ATTEMPT, if given), or None."""
    t = None
    for ts, by_job in samples:
        atts = by_job.get(job) or {}
        if (atts.get(attempt) if attempt else atts):
            t = ts
    return t


def running_attempt(job):
    """The one attempt of JOB with live processes in the latest sample, or None."""
    atts = SAMPLER.latest()[1].get(job) or {}
    return next(iter(atts)) if len(atts) == 1 else None


# -- Helpers over the API and the agent's files. ---------------------------------------------


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def journal_fenced():
    """{(job, attempt): unreached_ms} of the agent's journal's "fenced" lines."""
    out = {}
    try:
        with open(os.path.join(AGENT.state, "net", "journal")) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("op") == "fenced":
                    out[(rec.get("job"), rec.get("attempt"))] = rec.get("unreached_ms")
    except OSError:
        pass
    return out


def agent_lines(word):
    return [ln for ln in AGENT.log().splitlines() if word in ln]


def wait_attempt(n):
    """Until both jobs run attempt N (processes seen, reported RUNNING)."""
    def both():
        for jid in JOBS.values():
            j = get_job(jid) or {}
            cur = j.get("current_attempt") or {}
            if running_attempt(jid) != n or cur.get("attempt") != n or cur.get("state") != "RUNNING":
                return False
        return True
    return wait_until(both, timeout=DEADLINE_S, step=0.1)


def freeze():
    """SIGSTOP to the controller: the time it was sent."""
    t = time.monotonic()
    os.kill(SRV.proc.pid, signal.SIGSTOP)
    return t


def thaw():
    os.kill(SRV.proc.pid, signal.SIGCONT)


def wait_gone(t_from, deadline):
    """Until no process of any job is seen (sampled after T_FROM), or DEADLINE
    (monotonic) passes; the time of the first empty sample, or None."""
    def gone():
        for ts, by_job in SAMPLER.since(t_from):
            if not any(by_job.get(j) for j in JOBS.values()):
                return ts
        return None
    wait_until(lambda: gone() or time.monotonic() > deadline, timeout=DEADLINE_S, step=0.05)
    return gone()


def gone_within(t0, within, what):
    """Checks that every job's processes are gone WITHIN s of T0 (the line
    says WHAT); when the plain job and the stubborn one were last seen."""
    bound = t0 + within
    gone_at = wait_gone(t0, bound + 3)
    samples = SAMPLER.since(t0)
    ok(gone_at is not None and gone_at <= bound,
       f"{what} ({within:.2f} s; gone after {(gone_at or 0) - t0:.2f} s)",
       f"{samples[-5:]}\n{AGENT.tail(3000)}")
    return last_seen(samples, JOBS["plain"]), last_seen(samples, JOBS["stubborn"])


def node_failed(attempt, seen):
    """Whether both jobs' attempt ATTEMPT ended NODE_FAIL; the jobs as read in SEEN."""
    for name, jid in JOBS.items():
        seen[name] = j = get_job(jid) or {}
        a = next((x for x in j.get("attempts") or [] if x.get("attempt") == attempt), {})
        if a.get("state") != "NODE_FAIL":
            return False
    return True


def requeued_as_fenced(attempt):
    """Until both jobs' attempt ATTEMPT ended NODE_FAIL with the fenced reason
    and attempt ATTEMPT + 1 runs; the jobs as last read."""
    seen = {}

    def check():
        for name, jid in JOBS.items():
            j = get_job(jid) or {}
            seen[name] = j
            a = next((x for x in j.get("attempts") or [] if x.get("attempt") == attempt), {})
            if a.get("state") != "NODE_FAIL" or "fenced: no controller reached for" not in str(
                    a.get("reason")):
                return False
        return True
    return wait_until(check, timeout=DEADLINE_S, step=0.2), seen


# -- The steps. ------------------------------------------------------------------------------


def setup():
    global ADMIN, MEMBER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for path, body in (("/v1/pools/main", {"description": "one node"}),
                       ("/v1/priority-classes/normal", {"order": 0}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]}),
                       ("/v1/users/alice",
                        {"unix_user": JOB_USER, "team": "research", "role": "member"})):
        SRV.api.expect("PUT", path, body, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    AGENT.write_gpu_list([{"uuid": u, "utilization": 30, "memory_utilization": 10,
                           "process_memory_mib": 512} for u in UUIDS])
    AGENT.start()
    SAMPLER.thread.start()
    for name, script in (("plain", "exec sleep 600"),
                         ("stubborn", f"trap '' TERM; while [ ! -e {STOP} ]; do sleep 0.2; done")):
        JOBS[name] = SRV.api.expect("POST", "/v1/jobs", {
            "name": name, "pool": "main", "gpus": 1, "workdir": SHARED, "max_retries": 5,
            "command": ["/bin/sh", "-c", script]}, want=(201,), token=MEMBER)["id"]
    ok(wait_attempt(1), "both jobs run their first attempt on the agent",
       f"{[get_job(j) for j in JOBS.values()]}\n{AGENT.tail()}")
    ok(agent_lines(f"fence: lease {LEASE_S * 1000} ms, grace {GRACE_S * 1000} ms"),
       "the agent learns the fence lease and grace from the controller's answers", AGENT.tail())


def short_cut():
    """(b) Cut off for less than the lease: nothing killed, nothing requeued."""
    before = {jid: SAMPLER.latest()[1].get(jid) or {} for jid in JOBS.values()}
    t0 = freeze()
    time.sleep(LEASE_S / 2)  # the cut-off's length, not an assertion
    thaw()
    t_back = time.monotonic()
    # A fence would have come by the lease and grace after the cut-off; look that long.
    wait_until(lambda: time.monotonic() > t_back + LEASE_S + GRACE_S + SLACK_S,
               timeout=LEASE_S + GRACE_S + 5)
    samples = SAMPLER.since(t0)
    # Each job's first attempt only, and its process from before in every
    # sample (the loop's short sleeps come and go).
    same = all(set(s.get(jid) or {}) == {1} and before[jid].get(1, set()) & s[jid][1]
               for _, s in samples for jid in JOBS.values())
    ok(samples and same, f"cut off for {LEASE_S / 2} s (less than the {LEASE_S} s lease): the "
       f"same processes run in all {len(samples)} samples through it and the "
       f"{LEASE_S + GRACE_S + SLACK_S} s after", f"{before} vs {samples[-3:]}")
    jobs = [get_job(jid) or {} for jid in JOBS.values()]
    ok(all(len(j.get("attempts") or []) == 1 and j.get("state") == "RUNNING" for j in jobs),
       "nothing is requeued: each job is RUNNING its first attempt", json.dumps(jobs)[:2000])
    ok(not agent_lines("fence: no controller reached"), "the agent did not fence", AGENT.tail())


def long_cut():
    """(a) Cut off for longer than the lease: fenced, reported, requeued."""
    t0 = freeze()
    t_plain, t_stub = gone_within(
        t0, LEASE_S + GRACE_S + SLACK_S,
        f"cut off: every job's processes are gone within lease + grace + {SLACK_S} s")
    # The last answered heartbeat went out at most a period (and its answer's
    # latency) before the cut-off: the fence comes no sooner than that.
    early = t0 + LEASE_S - SAMPLE_S - 0.8
    ok(t_plain is not None and t_plain >= early,
       f"nothing is stopped before the lease: the plain job ran until "
       f"{(t_plain or 0) - t0:.2f} s after the cut-off (lease {LEASE_S} s, heartbeat "
       f"period {SAMPLE_S} s)", AGENT.tail())
    ok(t_plain is not None and t_stub is not None and t_stub >= t_plain + FENCE_GRACE_S - 0.5,
       f"the job that ignores SIGTERM runs on for the grace ({FENCE_GRACE_S} s, the lesser of "
       f"--fence-grace and --kill-grace) and is then killed: seen until "
       f"{(t_stub or 0) - t0:.2f} s, the other until {(t_plain or 0) - t0:.2f} s",
       AGENT.tail())
    fenced = journal_fenced()
    ok(all((jid, 1) in fenced and fenced[(jid, 1)] >= LEASE_S * 1000 for jid in JOBS.values()),
       "while still cut off, the agent's journal names each fenced attempt, with the time "
       "unreached", f"{fenced}")
    lines = agent_lines("stopping (fenced: no controller reached for")
    ok(len(lines) == 2 and all(f"job {jid}.1:" in " ".join(lines) for jid in JOBS.values()),
       "the agent logs one line per fenced attempt", "\n".join(lines) + AGENT.tail())
    thaw()
    held, jobs = requeued_as_fenced(1)
    ok(held, "back: the agent reports both attempts fenced; the controller ends them "
       "NODE_FAIL with the agent's reason and requeues them", json.dumps(jobs)[:3000]
       + AGENT.tail(2000))
    ok(wait_attempt(2), "new attempts start", AGENT.tail())
    ok(agent_lines("fence: a controller answers again"), "the agent says it is back",
       AGENT.tail())


def restart_while_cut():
    """(c) An agent stopped and started again while cut off still fences."""
    t0 = freeze()
    rc = AGENT.stop()
    started = time.monotonic()
    AGENT.start()
    ready = wait_until(lambda: len(agent_lines("attempt(s) taken up from the journal")) >= 2,
                       timeout=30, step=0.05)
    t_ready = time.monotonic()
    bound = max(t0 + LEASE_S, t_ready) + GRACE_S + SLACK_S
    gone_at = wait_gone(t0, bound + 3)
    ok(rc == 0 and ready and gone_at is not None and gone_at <= bound,
       f"an agent stopped and started again while cut off (started {started - t0:.2f} s, ready "
       f"{t_ready - t0:.2f} s after) still fences: every job's processes gone "
       f"{(gone_at or 0) - t0:.2f} s after the cut-off (bound {bound - t0:.2f} s)",
       f"{SAMPLER.since(t0)[-3:]}\n{AGENT.tail(3000)}")
    fenced = journal_fenced()
    ok(all((jid, 2) in fenced for jid in JOBS.values()),
       "the restarted agent's journal names what it fenced", f"{fenced}")
    thaw()
    held, jobs = requeued_as_fenced(2)
    ok(held and wait_attempt(3), "back: reported fenced, requeued, and run again",
       json.dumps(jobs)[:3000] + AGENT.tail(2000))


def past_node_timeout():
    """(d) Cut off past the node timeout: the controller, back, finds the node
    silent and ends its attempts itself; the agent fenced them long before."""
    t0 = freeze()
    bound = t0 + LEASE_S + GRACE_S + SLACK_S
    gone_at = wait_gone(t0, bound + 3)
    ok(gone_at is not None and gone_at <= bound,
       f"cut off past the {NODE_TIMEOUT_S} s node timeout: every job's processes gone "
       f"{(gone_at or 0) - t0:.2f} s after the cut-off (bound {bound - t0:.2f} s)",
       f"{SAMPLER.since(t0)[-3:]}\n{AGENT.tail(3000)}")
    wait_until(lambda: time.monotonic() > t0 + NODE_TIMEOUT_S + 2, timeout=NODE_TIMEOUT_S + 5)
    thaw()
    seen = {}
    ok(wait_until(lambda: node_failed(3, seen), timeout=DEADLINE_S, step=0.2) and wait_attempt(4),
       "back after the node timeout: the attempts end NODE_FAIL (the controller's timeout or "
       "the agent's fenced report, whichever came first), and the jobs run again on the "
       "rejoined node", json.dumps(seen)[:3000] + AGENT.tail(2000))


def dead_agent():
    """(e) The agent killed, the controller up: the agent cannot fence, its
    shims do (shim.h, --fence), from the lease in its fence file; past the
    node timeout the controller ends the attempts, and the agent, started
    again, finds what its shims fenced and runs the jobs again."""
    t0 = time.monotonic()
    AGENT.kill9()
    t_plain, t_stub = gone_within(
        t0, LEASE_S + SAVE_S + GRACE_S + SLACK_S,
        f"the agent killed (SIGKILL): its shims stop every job within lease + the file's "
        f"{SAVE_S} s + grace + {SLACK_S} s")
    ok(t_plain is not None and t_plain >= t0 + LEASE_S - SAMPLE_S - 0.8,
       f"nothing is stopped before the lease: the plain job ran until "
       f"{(t_plain or 0) - t0:.2f} s after the agent's death (lease {LEASE_S} s)")
    ok(t_plain is not None and t_stub is not None and t_stub >= t_plain + GRACE_S - 0.5,
       f"the job that ignores SIGTERM runs on for the fence's grace ({GRACE_S} s) and is then "
       f"killed: seen until {(t_stub or 0) - t0:.2f} s, the other until "
       f"{(t_plain or 0) - t0:.2f} s")
    statuses = {}
    for jid in JOBS.values():
        try:
            with open(os.path.join(AGENT.state, "attempts", f"{jid}.4", "status")) as f:
                statuses[jid] = json.load(f)
        except (OSError, ValueError) as e:
            statuses[jid] = repr(e)
    ok(all(isinstance(v, dict) and v.get("fenced_ms", 0) >= LEASE_S * 1000
           for v in statuses.values()),
       "each shim's status says it fenced its command, and after how long unreached",
       json.dumps(statuses))
    seen = {}
    ok(wait_until(lambda: node_failed(4, seen), timeout=NODE_TIMEOUT_S + DEADLINE_S, step=0.2),
       f"past the {NODE_TIMEOUT_S} s node timeout the controller ends the attempts NODE_FAIL",
       json.dumps(seen)[:3000])
    AGENT.start()
    ok(wait_attempt(5), "the agent started again: the jobs run again", AGENT.tail(2000))


def finish():
    with open(STOP, "w"):
        pass
    for jid in JOBS.values():
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    ok(wait_until(lambda: not any(SAMPLER.latest()[1].get(j) for j in JOBS.values()),
                  timeout=DEADLINE_S), "cancelled at the end, the jobs stop", AGENT.tail())
    violations = SAMPLER.stop()
    ok(not violations, f"in {len(SAMPLER.history)} samples, no job ever ran two attempts at "
       "once and no GPU two jobs", "\n".join(violations))
    end_checks({"n1": AGENT}, SRV)


def main():
    setup()
    short_cut()
    long_cut()
    restart_while_cut()
    past_node_timeout()
    dead_agent()
    finish()


def on_exit():
    try:
        thaw()
    except (OSError, AttributeError):
        pass
    AGENT.kill()
    SAMPLER.stopped.set()
    remove_tmp(TMP)


if __name__ == "__main__":
    diag(f"controller --node-timeout {NODE_TIMEOUT_S} --fence-lease {LEASE_S} "
         f"--fence-grace {GRACE_S}; agent --kill-grace {KILL_GRACE_S}")
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""holder_test.py GPUORCH - "one GPU, one holder" with real agents (`gpuorch
agent`) on the fake NVML ($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1)
under a real `gpuorch server` (--node-timeout 2): the three ways a GPU was once
handed out twice, each reproduced, while harness.GpuWatch samples the
controller's assignments and the fake GPUs' processes every 100 ms and notes
any GPU two jobs hold at once. Prints TAP.

- Twin records: an agent started again under another --name on the same GPUs
  is refused (409 naming the old node and the UUID) until the old record is
  deleted (`gpuorch nodes delete`, refused while an attempt holds its GPUs);
  then the new name registers, and four 1-GPU jobs on its two GPUs run two at
  a time.
- Re-registering inside a kill grace: a job that ignores SIGTERM runs, its
  agent is killed -9, the node is marked down, the job ends NODE_FAIL; the
  agent starts again (--kill-grace 6) and re-registers: the waiting job gets
  the node's GPU only once the old job's processes are gone.
- Back by itself: an agent stopped (SIGSTOP) until its node is marked down,
  then continued (SIGCONT), rejoins by heartbeat with no restart, and a job
  waiting for the node starts there once the lost job's processes are gone;
  a drained node that falls silent and comes back stays drained.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Agents and server are child processes stopped by PID;
conditions are polled with deadlines, never timed. KEEP_TMP=1 keeps the
directories."""

import os
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE_S, FakeAgent, GpuWatch, Server, agent_cgroups,  # noqa: E402
                     diag, fake_gpu_uuid, file_tail, gpu_processes, job_of, message, ok,
                     remove_cgroups, remove_tmp, run_as_root, wait_job_until, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
NODE_TIMEOUT_S = 2
LONG_GRACE_S = 6
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-holder-test-srv-",
             ["--node-timeout", NODE_TIMEOUT_S, "--pass-interval", 1])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-holder-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
ADMIN = MEMBER = JOIN = None
AGENTS = []
WATCH = None
CGROUP_BASE = None
CGROUPS = {}
POOLS = ("twin", "grace", "stop")

# A job that ignores SIGTERM (only SIGKILL, after the kill grace, ends it).
STUBBORN = ["/bin/sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]
FOREVER = ["/bin/sh", "-c", "while true; do sleep 0.2; done"]


def agent(name, node_no, ngpus, pool, **flags):
    ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name,
                   [fake_gpu_uuid(node_no, g) for g in range(ngpus)], pool=pool, **flags)
    ag.write_gpu_list([{"uuid": u, "process_memory_mib": 512} for u in ag.uuids])
    ag.cgroup = CGROUPS.get(pool)
    AGENTS.append(ag)
    WATCH.add(ag.uuids)
    return ag


def node(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    for n in (body or {}).get("nodes") or [] if st == 200 else []:
        if n.get("name") == name:
            return n
    return None


def node_state(name):
    n = node(name)
    return n and n.get("state")


def submit(spec):
    spec = dict({"workdir": SHARED, "gpus": 1}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=MEMBER)["id"]


def get_job(jid):
    return job_of(SRV.api, jid, ADMIN)


def wait_job(jid, pred, timeout=DEADLINE_S):
    return wait_job_until(SRV.api, jid, pred, ADMIN, timeout)


def running(j):
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def procs_of(jid, uuids):
    procs, _ = gpu_processes(set(uuids))
    return [p for per in procs.values() for p in per.get(str(jid), [])]


def cancel(*ids):
    for jid in ids:
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    for jid in ids:
        wait_job(jid, lambda j: j["state"] in FINAL, timeout=30)


def cli(*args):
    env = dict(os.environ, GPUORCH_SERVER=SRV.url, GPUORCH_TOKEN=ADMIN)
    p = subprocess.run([BIN] + list(args), env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def logged(agent_or_srv, text):
    path = agent_or_srv.log_path
    return text in file_tail(path, 10 ** 7)


def first_after(jid, t):
    """Whether job JID's attempt was first listed by the controller, and its
    processes first seen, only after monotonic time T. The checker samples on
    its own thread: wait until it has seen the assignment the API reported."""
    wait_until(lambda: WATCH.assigned.get(str(jid)) is not None, timeout=10, step=0.05)
    a = WATCH.assigned.get(str(jid))
    s = WATCH.seen.get(str(jid), (None, None))[0]
    return a is not None and a > t and (s is None or s > t)


# -- The steps. ----------------------------------------------------------------------------


def setup():
    global ADMIN, MEMBER, JOIN, WATCH, CGROUP_BASE, CGROUPS
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    JOIN = open(SRV.token_file("join")).read().strip()
    for pool in POOLS:
        SRV.api.expect("PUT", f"/v1/pools/{pool}", {}, token=ADMIN)
    SRV.api.expect("PUT", "/v1/teams/research", {"quotas": [
        {"pool": p, "guaranteed": 2, "borrow_limit": -1} for p in POOLS]}, token=ADMIN)
    SRV.api.expect("PUT", "/v1/users/alice", {"unix_user": JOB_USER, "team": "research",
                                              "role": "member"}, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    CGROUP_BASE, CGROUPS = agent_cgroups("gpuorch-holder-test", list(POOLS))
    WATCH = GpuWatch(SRV.client(ADMIN)).start()


def registered(name, uuids):
    n = node(name)
    return (n and n.get("state") == "up"
            and sorted(g.get("uuid") for g in n.get("gpus") or []) == sorted(uuids))


def twin_records():
    """Finding 1: two node records, one machine's GPUs."""
    old = agent("m1", 1, 2, "twin")
    old.start()
    ok(wait_until(lambda: registered("m1", old.uuids), timeout=30, step=0.1),
       "agent m1 registers with two GPUs", old.tail())
    old.kill9()
    ok(wait_until(lambda: node_state("m1") == "down", step=0.1),
       "once m1's agent is gone, its node is marked down", node("m1"))
    body = {"pool": "twin", "cpus": 8, "mem_mib": 65536, "gpus": [
        {"index": i, "uuid": u, "gpu_type": "H100-80GB", "mem_mib": 81559}
        for i, u in enumerate(old.uuids)]}
    st, ans, raw = call("PUT", "/v1/nodes/m1b", body, token=JOIN)
    msg = message(ans, raw)
    ok(st == 409 and "'m1'" in msg and old.uuids[0] in msg,
       "a registration of m1b with m1's GPU UUIDs is refused: 409 naming node m1 and the UUID",
       f"{st} {raw[:400]!r}")
    new = FakeAgent(BIN, SRV, TMP, FAKENVML, "m1b", old.uuids, pool="twin",
                    gpu_file=old.gpu_file)
    new.cgroup = old.cgroup
    AGENTS.append(new)
    new.start()
    refused = wait_until(lambda: logged(new, "409"), timeout=30, step=0.1)
    ok(refused and node("m1b") is None,
       "agent m1b on the same GPUs is refused too, and keeps retrying", new.tail())
    st, _, raw = call("DELETE", "/v1/nodes/m1", token=MEMBER)
    ok(st == 403, "a member may not delete a node: 403", f"{st} {raw[:300]!r}")
    rc, out = cli("nodes", "delete", "m1")
    ok(rc == 0 and "node/m1 deleted" in out and node("m1") is None,
       "gpuorch nodes delete m1 (an admin): the old record goes", f"{rc} {out}")
    st, _, raw = call("DELETE", "/v1/nodes/m1", token=ADMIN)
    ok(st == 404, "deleting it again: 404", f"{st} {raw[:300]!r}")
    ok(wait_until(lambda: registered("m1b", old.uuids), timeout=30, step=0.1),
       "then agent m1b registers on those GPUs", new.tail())
    ids = [submit({"name": f"twin{i}", "pool": "twin", "command": FOREVER}) for i in range(4)]
    try:
        started = wait_until(lambda: sum(1 for i in ids if running(get_job(i))) >= 2, step=0.1)
        late = [get_job(i) for i in ids]
        ok(started and sum(1 for j in late if j["state"] == "RUNNING") == 2
           and sum(1 for j in late if j["state"] == "PENDING") == 2,
           "four 1-GPU jobs on m1b's two GPUs: two run, two wait",
           [(j["id"], j["state"]) for j in late])
        st, ans, raw = call("DELETE", "/v1/nodes/m1b", token=ADMIN)
        ok(st == 409 and "holds attempt" in message(ans, raw),
           "deleting a node while an attempt holds its GPUs: 409", f"{st} {raw[:300]!r}")
    finally:
        cancel(*ids)
    new.stop()


def kill_grace_rejoin():
    """Finding 2: an agent re-registers while its lost attempt is in its kill grace."""
    ag = agent("k1", 2, 1, "grace", kill_grace=LONG_GRACE_S)
    ag.start()
    ok(wait_until(lambda: registered("k1", ag.uuids), timeout=30, step=0.1),
       "agent k1 registers with one GPU", ag.tail())
    old = submit({"name": "stubborn", "pool": "grace", "command": STUBBORN})
    good, j = wait_job(old, running)
    good = good and wait_until(lambda: procs_of(old, ag.uuids), step=0.1)
    ok(good, "a job that ignores SIGTERM runs on k1's GPU", f"{j}\n{ag.tail()}")
    ag.kill9()
    good, j = wait_job(old, lambda j: j["state"] == "NODE_FAIL")
    ok(good and node_state("k1") == "down" and procs_of(old, ag.uuids),
       "k1's agent is killed: the node is marked down, the job ends NODE_FAIL, and its "
       "processes still run", f"{j}\n{node('k1')}")
    nxt = submit({"name": "next", "pool": "grace", "command": FOREVER})
    ag.start()
    back = wait_until(lambda: node_state("k1") == "up", timeout=30, step=0.1)
    ok(back, "the agent starts again and re-registers: k1 is up", ag.tail())
    killing = wait_until(lambda: logged(ag, "SIGTERM, SIGKILL in"), timeout=30, step=0.1)
    ok(killing and procs_of(old, ag.uuids),
       f"it stops the job it took up from its journal: SIGTERM, ignored, SIGKILL after "
       f"{LONG_GRACE_S} s", ag.tail())
    k1 = node("k1") or {}
    ok(procs_of(old, ag.uuids) and (k1.get("rejoin_hold") is True or
                                    set(ag.uuids) <= set(k1.get("dirty_gpus") or [])),
       "while the old processes run, GET /v1/nodes shows k1's GPU held: rejoin_hold, or "
       "named in dirty_gpus", k1)
    gone = wait_until(lambda: not procs_of(old, ag.uuids), timeout=LONG_GRACE_S + 20, step=0.05)
    good, k = wait_job(nxt, running, timeout=30)
    last_seen = WATCH.seen.get(str(old), (0, 0))[1]
    ok(gone and good and first_after(nxt, last_seen),
       "the waiting job gets k1's GPU only after the old job's processes are gone, and runs",
       f"gone {gone}, old last seen {last_seen}, next assigned "
       f"{WATCH.assigned.get(str(nxt))}\n{k}\n{ag.tail()}")
    cancel(nxt)
    ag.stop()


def stop_and_continue():
    """Finding 3: a stopped agent comes back by itself."""
    ag = agent("s1", 3, 1, "stop")
    ag.start()
    ok(wait_until(lambda: registered("s1", ag.uuids), timeout=30, step=0.1),
       "agent s1 registers with one GPU", ag.tail())
    lost = submit({"name": "lost", "pool": "stop", "command": FOREVER})
    good, _ = wait_job(lost, running)
    ok(good and wait_until(lambda: procs_of(lost, ag.uuids), step=0.1),
       "a job runs on s1's GPU", ag.tail())
    ag.proc.send_signal(signal.SIGSTOP)
    try:
        good, j = wait_job(lost, lambda j: j["state"] == "NODE_FAIL")
        ok(good and node_state("s1") == "down",
           "s1's agent is stopped (SIGSTOP): its node is marked down, its job ends NODE_FAIL",
           f"{j}\n{node('s1')}")
        waiting = submit({"name": "waiting", "pool": "stop", "command": FOREVER})
        good, w = wait_job(waiting, lambda j: j["state"] == "PENDING" and j.get("wait_reason"))
        ok(good, "a job for s1's pool waits", w)
    finally:
        ag.proc.send_signal(signal.SIGCONT)
    ok(wait_until(lambda: node_state("s1") == "up", step=0.1) and ag.proc.poll() is None,
       "continued (SIGCONT), the same agent heartbeats again and s1 is up, with no restart",
       f"{node('s1')}\n{SRV.log_tail()}")
    gone = wait_until(lambda: not procs_of(lost, ag.uuids), step=0.05)
    last_seen = WATCH.seen.get(str(lost), (0, 0))[1]
    good, w = wait_job(waiting, running)
    ok(gone and good and first_after(waiting, last_seen),
       "the agent stops the lost job; the waiting job starts on s1 once its processes are gone",
       f"last seen {last_seen}, waiting assigned {WATCH.assigned.get(str(waiting))}\n{w}\n"
       f"{ag.tail()}")
    cancel(waiting)
    # A drained node is the admin's: a timeout and a heartbeat do not undo it.
    SRV.api.expect("POST", "/v1/nodes/s1/drain", token=ADMIN)
    ag.proc.send_signal(signal.SIGSTOP)
    try:
        silent = wait_until(lambda: logged(SRV, "node s1 lost, and stays drained"), step=0.1)
    finally:
        ag.proc.send_signal(signal.SIGCONT)
    heard = node("s1") and node("s1").get("last_heartbeat")
    again = wait_until(lambda: (node("s1") or {}).get("last_heartbeat") != heard, step=0.1)
    ok(silent and again and node_state("s1") == "draining",
       "a drained node that falls silent and heartbeats again stays draining",
       f"{node('s1')}\n{SRV.log_tail()}")
    SRV.api.expect("POST", "/v1/nodes/s1/resume", token=ADMIN)
    ag.stop()


def main():
    print("TAP version 13")
    setup()
    for step in (twin_records, kill_grace_rejoin, stop_and_continue):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    seen = WATCH.stop()
    diag(f"the GPU checker took {WATCH.samples} samples")
    ok(WATCH.samples > 0 and not seen,
       "no GPU was in two jobs' attempts, or ran two jobs' processes, at once", "\n".join(seen))
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    if WATCH:
        WATCH.stopped.set()
    for ag in AGENTS:
        if ag.proc and ag.proc.poll() is None:
            ag.proc.send_signal(signal.SIGCONT)
            ag.proc.kill()
            ag.proc.wait()
    remove_cgroups(CGROUP_BASE)
    # Without cgroups, what a failed check left on the test's GPUs goes by pid.
    procs, _ = gpu_processes(set(u for ag in AGENTS for u in ag.uuids))
    for per in procs.values():
        for pids in per.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

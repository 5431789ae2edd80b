#!/usr/bin/env python3
"""mig_e2e_test.py GPUORCH - MIG end to end: a real `gpuorch server` and real
agents (`gpuorch agent`) on the fake NVML ($GPUORCH_FAKENVML, else
BUILD/tests/libnvidia-ml.so.1) with H100s in MIG mode, whose MIG state lives
in the fake's state file (tests/fakenvml/README.md). Prints TAP.

- Packing: jobs of several profiles on one H100 split into instances, each
  job seeing only its own instance (CUDA_VISIBLE_DEVICES=MIG-..., the UUID
  the fake NVML gave it); a profile that fits nowhere waits with a reason
  naming it.
- A dynamic pool: a queue of 1g.10gb jobs turns an idle 7g GPU into 1g
  instances (the fake's state shows them) and the jobs run there; a 3g
  instance a job runs on is never destroyed; a queue alternating between
  profiles does not make the layout flap (plans counted in /metrics), with
  the damping off and with it on (hold, min_interval).
- A static pool: its layout is applied to an idle GPU.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Agents and server are child processes stopped by PID;
conditions are polled with deadlines, never timed. KEEP_TMP=1 keeps the
directories."""

import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE_S, FakeAgent, Server, diag, end_checks,  # noqa: E402
                     fake_gpu_uuid, ok, prom_samples, remove_tmp, run, wait_job_until,
                     wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
SRV = Server(BIN, "gpuorch-mig-e2e-test-srv-", ["--pass-interval", 1])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-mig-e2e-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
# The GPU files and the fake's MIG state beside them (its state file and
# lock), in a folder either half of the agent (root, or the unprivileged
# network half, which reads MIG state) may write.
NVMLDIR = os.path.join(TMP, "nvml")
os.mkdir(NVMLDIR)
os.chmod(NVMLDIR, 0o777)
ADMIN = MEMBER = None
AGENTS = []
PID = {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}
POOLS = {"pack": None,
         "dyn": {"dynamic": True, "settle": 0, "hold": 0, "min_interval": 0},
         "stat": {"layout": "all-1g.10gb"},
         "damp": {"dynamic": True, "settle": 0, "hold": 3, "min_interval": 600}}
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

# Writes the MIG device it was given, then runs until cancelled.
ENV_THEN_WAIT = ["/bin/sh", "-c",
                 f"echo \"$CUDA_VISIBLE_DEVICES\" > {SHARED}/$GPUORCH_JOB_ID.env; "
                 "while true; do sleep 0.2; done"]


def agent(name, node_no, pool, instances):
    """An agent with one H100 in MIG mode holding INSTANCES [(profile, start)]."""
    uuid = fake_gpu_uuid(node_no, 0)
    ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [uuid], pool=pool,
                   gpu_file=os.path.join(NVMLDIR, f"{name}-gpus.json"))
    ag.write_gpu_list([{"uuid": uuid, "mig_capable": True, "mig_enabled": True,
                        "mig_instances": [{"profile_id": PID[p], "start": s}
                                          for p, s in instances]}])
    AGENTS.append(ag)
    ag.start()
    return ag


def fake_layout(ag):
    """The fake NVML's GPU instances of the agent's GPU: sorted (profile id, start)."""
    try:
        with open(ag.gpu_file + ".state") as f:
            st = json.load(f)
    except (OSError, ValueError):
        return None
    gpu = (st.get("gpus") or {}).get(ag.uuids[0]) or {}
    return sorted((gi.get("profile_id"), gi.get("start")) for gi in gpu.get("gpu_instances") or [])


def fake_mig_uuids(ag):
    """{start: MIG UUID} of the fake's compute instances on the agent's GPU."""
    try:
        with open(ag.gpu_file + ".state") as f:
            st = json.load(f)
    except (OSError, ValueError):
        return {}
    gpu = (st.get("gpus") or {}).get(ag.uuids[0]) or {}
    return {gi.get("start"): ci.get("uuid") for gi in gpu.get("gpu_instances") or []
            for ci in gi.get("compute_instances") or []}


def node(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    for n in (body or {}).get("nodes") or [] if st == 200 else []:
        if n.get("name") == name:
            return n
    return None


def up_with_instances(name):
    n = node(name)
    return bool(n and n.get("state") == "up" and (n.get("gpus") or [{}])[0].get("mig"))


def submit(profile, pool, command=None):
    spec = {"workdir": SHARED, "pool": pool, "mig_profile": profile,
            "command": command or ENV_THEN_WAIT}
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=MEMBER)["id"]


def job(jid):
    st, b, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return b if st == 200 else None


def wait_job(jid, pred, timeout=DEADLINE_S):
    return wait_job_until(SRV.api, jid, pred, ADMIN, timeout)


def running(j):
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def env_of(jid):
    try:
        with open(os.path.join(SHARED, f"{jid}.env")) as f:
            return f.read().strip()
    except OSError:
        return None


def cancel(*ids):
    for jid in ids:
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    for jid in ids:
        wait_job(jid, lambda j: j["state"] in FINAL, timeout=30)


def plans_sent():
    text = SRV.api.scrape(token=ADMIN).text
    return sum(v for name, lab, v in prom_samples(text)
               if name == "gpuorch_mig_plans_total" and lab.get("outcome") == "sent")


def setup():
    global ADMIN, MEMBER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for pool, mig in POOLS.items():
        SRV.api.expect("PUT", f"/v1/pools/{pool}", {"mig": mig} if mig else {}, token=ADMIN)
    SRV.api.expect("PUT", "/v1/priority-classes/normal", {"order": 0}, token=ADMIN)
    SRV.api.expect("PUT", "/v1/teams/research", {"quotas": [
        {"pool": p, "guaranteed": 2, "borrow_limit": -1} for p in POOLS]}, token=ADMIN)
    SRV.api.expect("PUT", "/v1/users/alice", {"unix_user": JOB_USER, "team": "research",
                                              "role": "member"}, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]


def packing():
    """Several profiles on one H100, each job on its own MIG device."""
    ag = agent("p1", 1, "pack", [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)])
    ok(wait_until(lambda: up_with_instances("p1"), timeout=30),
       "an agent registers an H100 in MIG mode with its four instances", ag.tail())
    jobs = {p: submit(p, "pack") for p in ("3g.40gb", "2g.20gb", "1g.10gb")}
    for p, jid in jobs.items():
        held, j = wait_job(jid, running)
        ok(held, f"the {p} job runs on the H100", f"{j}\n{ag.tail()}")
    # The MIG devices the agent read from the fake NVML and reported.
    uuids = {m.get("start"): m.get("uuid")
             for m in ((node("p1") or {}).get("gpus") or [{}])[0].get("mig") or []}
    starts = {"3g.40gb": [4], "2g.20gb": [0], "1g.10gb": [2, 3]}
    for p, jid in jobs.items():
        wait_until(lambda: env_of(jid) is not None, timeout=10)
        env = env_of(jid) or ""
        ok(env.startswith("MIG-") and env in [uuids.get(s) for s in starts[p]],
           f"the {p} job's CUDA_VISIBLE_DEVICES is its instance's MIG UUID", f"{env} {uuids}")
    envs = [env_of(j) for j in jobs.values()]
    ok(len(set(envs)) == 3, "the three jobs see three different MIG devices", f"{envs}")
    rc_nodes = node("p1") or {}
    held = sorted((m.get("profile"), m.get("job")) for m in
                  (rc_nodes.get("gpus") or [{}])[0].get("mig") or [] if m.get("job"))
    ok(held == sorted((p, jid) for p, jid in jobs.items()),
       "GET /v1/nodes names the job on each instance", f"{held}")
    big = submit("7g.80gb", "pack")
    wait_until(lambda: "7g.80gb" in str((job(big) or {}).get("wait_reason")), timeout=20)
    reason = str((job(big) or {}).get("wait_reason"))
    ok((job(big) or {}).get("state") == "PENDING" and "7g.80gb" in reason,
       "a 7g.80gb job that fits no instance waits with a reason naming the profile", reason)
    cancel(big, *jobs.values())


def dynamic():
    """1g demand reshapes an idle 7g GPU; a running 3g is never destroyed; no flapping."""
    ag = agent("d1", 2, "dyn", [("7g.80gb", 0)])
    ok(wait_until(lambda: up_with_instances("d1"), timeout=30),
       "an agent of the dynamic pool registers an H100 holding a 7g instance", ag.tail())
    ones = [submit("1g.10gb", "dyn") for _ in range(3)]
    ok(wait_until(lambda: (fake_layout(ag) or []).count((PID["1g.10gb"], 6)) == 1
                  and len([x for x in fake_layout(ag) or [] if x[0] == PID["1g.10gb"]]) >= 3
                  and (PID["7g.80gb"], 0) not in (fake_layout(ag) or []), timeout=40),
       "a queue of 1g.10gb jobs: the fake NVML's state shows the 7g gone and 1g instances",
       f"{fake_layout(ag)}\n{ag.tail()}")
    for jid in ones:
        held, j = wait_job(jid, running)
        ok(held, f"1g job {jid} runs on a new instance", f"{j}")
    uuids = set(fake_mig_uuids(ag).values())
    envs = set()
    for jid in ones:
        wait_until(lambda: env_of(jid) is not None, timeout=10)
        envs.add(env_of(jid))
    ok(len(envs) == 3 and envs <= uuids, "each runs on its own new MIG device", f"{envs} {uuids}")
    cancel(*ones)
    # A 3g job on the GPU; then 1g demand beyond what is free: the 3g stays.
    three = submit("3g.40gb", "dyn")
    held, j = wait_job(three, running, timeout=60)
    ok(held, "a 3g.40gb job runs (its instance made by a plan)", f"{j}\n{fake_layout(ag)}")
    many = [submit("1g.10gb", "dyn") for _ in range(7)]
    wait_until(lambda: sum(1 for jid in many if running(job(jid) or {"state": ""})) >= 3, 60)
    layout = fake_layout(ag) or []
    ok(any(p == PID["3g.40gb"] for p, _ in layout) and running(job(three) or {"state": ""}),
       "under 1g demand the running 3g instance is never destroyed", f"{layout}")
    cancel(three, *many)
    # An alternating queue: 1g, 2g, 1g, 2g ... in quick succession; hold and
    # min_interval 0 here, so the planner's rule 4 (only surplus is
    # destroyed) and the idle instances are what keep it calm.
    before = plans_sent()
    alt = []
    for k in range(6):
        jid = submit("1g.10gb" if k % 2 == 0 else "2g.20gb", "dyn", ["/bin/true"])
        alt.append(jid)
        wait_job(jid, lambda j: j["state"] in FINAL, timeout=60)
    after = plans_sent()
    ok(after - before <= 2, "an alternating 1g/2g queue: at most 2 plans for 6 jobs (no flapping)",
       f"{after - before} plans")


def damped():
    """Under the planner's damping (hold 3 s, min_interval 10 min) a queue
    alternating between 1g.10gb and 7g.80gb jobs changes the GPU once: the 7g
    once destroyed for the first 1g job, the 7g jobs wait for min_interval
    while the 1g jobs keep using the instance made for them."""
    ag = agent("f1", 5, "damp", [("7g.80gb", 0)])
    ok(wait_until(lambda: up_with_instances("f1"), timeout=30),
       "an agent of a damped dynamic pool registers an H100 holding a 7g instance", ag.tail())
    before = plans_sent()
    first = submit("1g.10gb", "damp", ["/bin/true"])
    held, j = wait_job(first, lambda j: j["state"] in FINAL, timeout=60)
    ok(held and j["state"] == "COMPLETED" and plans_sent() - before == 1,
       "the first 1g job: once the 7g has been idle for `hold`, one plan makes its instance, "
       "and it runs", f"{j} {plans_sent() - before}")
    base = plans_sent()
    waiting = []
    for k in range(3):
        big = submit("7g.80gb", "damp", ["/bin/true"])
        waiting.append(big)
        small = submit("1g.10gb", "damp", ["/bin/true"])
        held, j = wait_job(small, lambda j: j["state"] in FINAL, timeout=60)
        ok(held and j["state"] == "COMPLETED", f"alternation {k + 1}: the 1g job runs on the idle "
           "1g instance", f"{j}")
    # Past `hold` since the 1g instance's last job: only min_interval keeps
    # it now. A plan would show within the wait; none should.
    wait_until(lambda: plans_sent() != base, timeout=5)
    reasons = [str((job(b) or {}).get("wait_reason")) for b in waiting]
    ok(plans_sent() == base and all("7g.80gb" in r for r in reasons)
       and all((job(b) or {}).get("state") == "PENDING" for b in waiting),
       "meanwhile no plan: the 7g jobs wait (min_interval), naming their profile; the layout "
       "does not flap", f"{plans_sent() - base} plans; {reasons}")
    cancel(*waiting)


def static():
    ag = agent("s1", 3, "stat", [("7g.80gb", 0)])
    ok(wait_until(lambda: fake_layout(ag) == [(PID["1g.10gb"], s) for s in range(7)], 40),
       "a static pool's all-1g.10gb is applied to an idle 7g GPU: seven 1g.10gb in the fake's state",
       f"{fake_layout(ag)}\n{ag.tail()}")


def main():
    setup()
    packing()
    dynamic()
    damped()
    static()
    with open(SRV.log_path) as f:
        log = f.read()
    ok("Sanitizer" not in log and "runtime error:" not in log,
       "the server's log holds no sanitizer report", log[-3000:])
    end_checks({ag.name: ag for ag in AGENTS}, SRV)


def on_exit():
    for ag in AGENTS:
        ag.stop()
    if os.environ.get("KEEP_TMP") != "1":
        remove_tmp(TMP)
    else:
        diag(f"kept {TMP}")


if __name__ == "__main__":
    run(main, SRV, on_exit)

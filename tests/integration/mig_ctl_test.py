#!/usr/bin/env python3
"""mig_ctl_test.py GPUORCH - the controller's side of MIG against a node agent
this test plays over HTTP on loopback (registration, heartbeats, the
assignments long-poll, plan results): reported instances in the model, in
GET /v1/nodes, `gpuorch nodes` and /metrics; a profile id the catalogue does
not know; a job on an instance gets the instance's UUID (mig_uuid); plans of
a dynamic pool and towards a static layout, never naming a busy instance;
bad plan results refused with a 400 naming the field; plans re-derived after
a controller restart. Prints TAP.

The real agent on the fake NVML in MIG mode is mig_e2e_test.py's; here the
node's answers are the test's own, so that every case is exact. The server
runs as a child process (--pass-interval 1), stopped by PID; conditions are
polled with deadlines, never timed."""

import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, ok, prom_samples, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRV = Server(BIN, "gpuorch-mig-ctl-test-", ["--pass-interval", 1, "--node-timeout", 30])
call = SRV.call
ADMIN = JOIN = None

# H100-80GB's NVML profile ids (tests/fakenvml/README.md, NVIDIA's MIG guide).
PID = {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0}
NAME = {v: k for k, v in PID.items()}


def gpu_uuid(node_no, g):
    return f"GPU-{node_no:08x}-{g:04x}-4{g:03x}-8000-{node_no * 16 + g:012x}"


class MigNode:
    """One node with H100s in MIG mode, as its agent reports it: LAYOUT[g] is
    the list of (profile, start) on GPU g; every instance has a compute
    instance and a UUID unless listed in `no_ci`."""

    def __init__(self, name, node_no, layouts, pool):
        self.name, self.pool = name, pool
        self.uuids = [gpu_uuid(node_no, g) for g in range(len(layouts))]
        self.layout = [list(l) for l in layouts]
        self.extra = {}  # g -> extra raw instances (unknown profile ids)
        self.no_ci = set()  # (g, start)
        self.procs = {}  # g -> the processes a heartbeat lists on GPU g
        self.stopped = False
        self.lock = threading.Lock()
        self.answers = []
        self.api = SRV.client(JOIN)

    def mig_uuid(self, g, start):
        return f"MIG-{self.uuids[g][4:12]}-{start:04x}-4000-8000-{g:012x}"

    def instances(self, g):
        out = []
        for gi, (profile, start) in enumerate(sorted(self.layout[g], key=lambda x: x[1])):
            ci = (g, start) not in self.no_ci
            out.append({"profile_id": PID[profile], "start": start, "gi_id": gi + 1,
                        "ci_id": 0 if ci else None,
                        "uuid": self.mig_uuid(g, start) if ci else None})
        return out + self.extra.get(g, [])

    def body(self):
        return {"pool": self.pool, "cpus": 64, "mem_mib": 515000,
                "gpus": [{"index": g, "uuid": u, "gpu_type": "H100-80GB", "mem_mib": 81559,
                          "mig_slices": 7, "mig_enabled": True, "mig_pending": True,
                          "mig": self.instances(g)} for g, u in enumerate(self.uuids)]}

    def register(self):
        return self.api.call("PUT", f"/v1/nodes/{self.name}", self.body())

    def heartbeat(self):
        with self.lock:
            gpus = [{"index": g, "uuid": u, "utilization_pct": 0, "memory_used_mib": 0,
                     "memory_total_mib": 81559, "processes": self.procs.get(g, []),
                     "mig": {"enabled": True, "pending": True, "instances": self.instances(g)}}
                    for g, u in enumerate(self.uuids)]
        return self.api.call("POST", f"/v1/nodes/{self.name}/heartbeat",
                             {"gpus": gpus, "dirty": []}, timeout=10)

    def beat_loop(self):
        while not self.stopped:
            try:
                self.heartbeat()
            except OSError:
                pass
            time.sleep(0.3)

    def start(self):
        threading.Thread(target=self.beat_loop, daemon=True).start()

    def assignments(self):
        st, ans, raw = self.api.call("GET", f"/v1/nodes/{self.name}/assignments",
                                     query={"wait": 0})
        return ans if st == 200 else None

    def apply(self, plan, ok_=True):
        """Applies PLAN to the layout (as an agent would) and reports it."""
        g = self.uuids.index(plan["gpu_uuid"])
        with self.lock:
            for d in plan.get("destroy") or []:
                self.layout[g].remove((NAME[d["profile_id"]], d["start"]))
            for c in plan.get("create") or []:
                self.layout[g].append((NAME[c["profile_id"]], c["start"]))
            inst = self.instances(g)
        body = {"ok": ok_, "gpu_uuid": plan["gpu_uuid"], "mig": inst}
        if not ok_:
            body["error"] = "NVML_ERROR_INSUFFICIENT_RESOURCES"
        return self.api.call("POST", f"/v1/nodes/{self.name}/mig/{plan['id']}", body)


def node_json(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    for n in (body or {}).get("nodes") or []:
        if n.get("name") == name:
            return n
    return None


def cli(*args):
    env = dict(os.environ, GPUORCH_SERVER=SRV.url, GPUORCH_TOKEN=ADMIN)
    p = subprocess.run([BIN, *args], env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def put(path, body):
    st, b, raw = call("PUT", path, body, token=ADMIN)
    if st not in (200, 201):
        raise RuntimeError(f"PUT {path}: {st} {raw[:300]!r}")
    return b


def submit(spec):
    st, b, raw = call("POST", "/v1/jobs", dict({"team": "research"}, **spec), token=ADMIN)
    if st != 201:
        raise RuntimeError(f"submit: {st} {raw[:300]!r}")
    return b["id"]


def job(jid):
    st, b, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return b if st == 200 else None


def setup():
    global ADMIN, JOIN
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    JOIN = open(SRV.token_file("join")).read().strip()
    put("/v1/pools/plain", {"description": "MIG as the nodes have it"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "plain", "guaranteed": 8,
                                           "borrow_limit": -1}]})


def reported_instances():
    """Registration and heartbeats: the instances in GET /v1/nodes, the CLI and /metrics."""
    n = MigNode("m1", 1, [[("3g.40gb", 4), ("1g.10gb", 0)], []], "plain")
    n.extra[1] = [{"profile_id": 33, "start": 2, "gi_id": 9, "ci_id": 0,
                   "uuid": "MIG-00000001-0002-4000-8000-000000000001"}]
    st, body, raw = n.register()
    ok(st == 201, "a node registers two H100s in MIG mode with their instances", f"{st} {raw[:300]!r}")
    got = node_json("m1") or {}
    g0 = (got.get("gpus") or [{}])[0]
    inst = sorted(((m.get("profile"), m.get("start"), m.get("in_use"), m.get("job"))
                   for m in g0.get("mig") or []), key=lambda x: x[1])
    ok(inst == [("1g.10gb", 0, False, None), ("3g.40gb", 4, False, None)]
       and got.get("mig_mode") == "off" and g0.get("mig_planning") is False,
       "GET /v1/nodes: GPU 0's instances by profile name (resolved from NVML ids 19 and 9), "
       "free; the pool's MIG mode off", f"{got}")
    g1 = (got.get("gpus") or [{}, {}])[1]
    unk = (g1.get("mig") or [{}])[0]
    ok(unk.get("profile_id") == 33 and "profile" not in unk and unk.get("start") == 2,
       "an instance of an NVML profile id H100-80GB lacks (33) is kept, without a profile",
       f"{g1}")
    for _ in range(3):
        st, _, raw = n.heartbeat()
    log = SRV.log_tail()
    ok(st == 204 and log.count("has NVML profile id 33, unknown for H100-80GB") == 1,
       "heartbeats naming it: the unknown profile id is logged once", f"{st} {raw!r}\n{log[-1500:]}")
    n.start()
    with n.lock:
        n.layout[1] = [("2g.20gb", 0)]
        n.extra = {}
    wait_until(lambda: [m.get("profile") for m in
                        ((node_json("m1") or {}).get("gpus") or [{}, {}])[1].get("mig") or []]
               == ["2g.20gb"])
    g1 = ((node_json("m1") or {}).get("gpus") or [{}, {}])[1]
    ok([(m.get("profile"), m.get("start")) for m in g1.get("mig") or []] == [("2g.20gb", 0)],
       "a heartbeat's instances replace the registration's", f"{g1}")
    rc, out, err = cli("nodes")
    ok(rc == 0 and "m1 gpu 0 MIG off: 1g.10gb@0 free, 3g.40gb@4 free" in out
       and "m1 gpu 1 MIG off: 2g.20gb@0 free" in out,
       "gpuorch nodes lists each MIG GPU's instances as PROFILE@SLOT and free", out + err)
    text = SRV.api.scrape(token=ADMIN).text
    samples = prom_samples(text)
    info = [lab for name, lab, _ in samples if name == "gpuorch_mig_instance_info"
            and lab.get("Hostname") == "m1"]
    ok(any(lab.get("GPU_I_PROFILE") == "3g.40gb" and lab.get("GPU_I_ID") == "2"
           and lab.get("UUID") == n.uuids[0] and lab.get("gpu") == "0"
           and lab.get("modelName") == "H100-80GB" for lab in info) and len(info) == 3,
       "/metrics: gpuorch_mig_instance_info per instance with dcgm-exporter's GPU_I_PROFILE "
       "and GPU_I_ID besides the GPU's labels", f"{info}")
    return n


def bad_results(n):
    """Results for plans that are not there, or that do not fit, are refused."""
    st, body, raw = n.api.call("POST", f"/v1/nodes/{n.name}/mig/77",
                               {"ok": True, "gpu_uuid": n.uuids[0], "mig": []})
    raw = raw.decode(errors="replace")
    ok(st == 404 and "no MIG plan 77" in raw, "a result for a plan not in flight: 404", f"{st} {raw}")
    st, body, raw = n.api.call("POST", f"/v1/nodes/{n.name}/mig/77", {"ok": "yes"})
    raw = raw.decode(errors="replace")
    ok(st == 400 and "'ok'" in raw, "a result whose 'ok' is no boolean: 400 naming it", f"{st} {raw}")
    st, body, raw = n.api.call("POST", f"/v1/nodes/{n.name}/mig/0",
                               {"ok": True, "gpu_uuid": n.uuids[0], "mig": []})
    raw = raw.decode(errors="replace")
    ok(st == 400 and "plan id" in raw, "plan id 0: 400", f"{st} {raw}")


def plans_of(n):
    ans = n.assignments() or {}
    return ans.get("mig_plans") or []


def wait_plan(n, timeout=20):
    got = []
    wait_until(lambda: got.append(plans_of(n)) or got[-1], timeout)
    return got[-1] if got else []


def dynamic_pool():
    """A queue of 1g jobs turns an idle 7g instance into 1g instances; once
    they are there, nothing more is planned (no flapping)."""
    put("/v1/pools/dyn", {"description": "dynamic MIG",
                          "mig": {"dynamic": True, "settle": 0, "hold": 0, "min_interval": 0}})
    put("/v1/teams/research", {"quotas": [{"pool": "plain", "guaranteed": 8, "borrow_limit": -1},
                                          {"pool": "dyn", "guaranteed": 8, "borrow_limit": -1}]})
    n = MigNode("d1", 2, [[("7g.80gb", 0)]], "dyn")
    st, _, raw = n.register()
    ok(st == 201, "a node of the dynamic pool registers an H100 holding one 7g instance",
       f"{st} {raw[:300]!r}")
    n.start()
    wait_until(lambda: bool(plans_of(n)), 2)
    ok(plans_of(n) == [], "no demand, no plan")
    # The jobs come while the node is drained, so that one pass sees them all.
    call("POST", "/v1/nodes/d1/drain", token=ADMIN)
    jobs = [submit({"command": ["/bin/true"], "pool": "dyn", "mig_profile": "1g.10gb"})
            for _ in range(3)]
    wait_until(lambda: all((job(j) or {}).get("wait_reason") for j in jobs))
    call("POST", "/v1/nodes/d1/resume", token=ADMIN)
    plans = wait_plan(n)
    p = plans[0] if len(plans) == 1 else {}
    ok(len(plans) == 1 and p.get("gpu_uuid") == n.uuids[0]
       and p.get("destroy") == [{"profile_id": PID["7g.80gb"], "start": 0}]
       and sorted(c["profile_id"] for c in p.get("create") or []) == [PID["1g.10gb"]] * 3,
       "three pending 1g.10gb jobs: a plan destroys the idle 7g instance and creates three 1g",
       f"{plans}")
    node = node_json("d1") or {}
    ok(node.get("mig_mode") == "dynamic" and node["gpus"][0].get("mig_planning") is True,
       "GET /v1/nodes: the node's MIG mode dynamic, its GPU with a plan in flight", f"{node}")
    rc, out, err = cli("nodes")
    ok("d1 gpu 0 MIG dynamic, plan in flight: 7g.80gb@0 free" in out,
       "gpuorch nodes shows the plan in flight", out + err)
    # Results that do not fit the plan are refused and change nothing.
    st, _, raw = n.api.call("POST", f"/v1/nodes/d1/mig/{p.get('id')}",
                            {"ok": True, "gpu_uuid": gpu_uuid(9, 0), "mig": []})
    raw = raw.decode(errors="replace")
    ok(st == 400 and "field 'gpu_uuid'" in raw, "a result naming another GPU: 400 naming "
       "gpu_uuid", f"{st} {raw}")
    bad = [{"profile_id": PID["2g.20gb"], "start": 0, "gi_id": 1, "ci_id": 0, "uuid": "MIG-a"},
           {"profile_id": PID["1g.10gb"], "start": 1, "gi_id": 2, "ci_id": 0, "uuid": "MIG-b"}]
    st, _, raw = n.api.call("POST", f"/v1/nodes/d1/mig/{p.get('id')}",
                            {"ok": True, "gpu_uuid": n.uuids[0], "mig": bad})
    raw = raw.decode(errors="replace")
    ok(st == 400 and "field 'mig'" in raw and "overlaps" in raw,
       "a result whose instances overlap: 400 naming mig", f"{st} {raw}")
    ok(len(plans_of(n)) == 1, "after the refused results the plan is still in flight")
    st, _, raw = n.apply(p)
    ok(st == 204, "the node applies the plan and reports it: 204", f"{st} {raw[:300]!r}")
    got = ((node_json("d1") or {}).get("gpus") or [{}])[0]
    ok(sorted((m.get("profile"), m.get("start")) for m in got.get("mig") or [])
       == sorted((c, s_) for c, s_ in n.layout[0]) and len(got.get("mig") or []) == 3
       and got.get("mig_planning") is False,
       "the reported layout is the GPU's: three 1g.10gb instances, no plan in flight", f"{got}")
    # The jobs are placed on the new instances: each attempt names its MIG UUID.
    def runs():
        ans = n.assignments() or {}
        return [a for a in ans.get("attempts") or [] if a.get("action") == "run"]
    wait_until(lambda: len(runs()) == 3)
    attempts = runs()
    got_uuids = sorted(g.get("mig_uuid") or "" for a in attempts for g in a.get("gpus") or [])
    want = sorted(n.mig_uuid(0, st_) for _, st_ in n.layout[0])
    ok(len(attempts) == 3 and got_uuids == want
       and all(g.get("uuid") == n.uuids[0] for a in attempts for g in a.get("gpus") or []),
       "the three jobs are assigned, each share naming the GPU and its instance's mig_uuid",
       f"{attempts}")
    # Per-instance memory in /metrics, from the heartbeat's processes.
    held_job = attempts[0]["job"]
    held_uuid = attempts[0]["gpus"][0]["mig_uuid"]
    held_gi = next(m["gi_id"] for m in n.instances(0) if m["uuid"] == held_uuid)
    with n.lock:
        n.procs[0] = [{"pid": 4242, "memory_mib": 700, "job": held_job, "attempt": 1}]

    def memory():
        for name, lab, v in prom_samples(SRV.api.scrape(token=ADMIN).text):
            if (name == "gpuorch_mig_instance_memory_used_mib" and lab.get("Hostname") == "d1"
                    and lab.get("GPU_I_ID") == str(held_gi)):
                return (v, lab.get("hpc_job"), lab.get("GPU_I_PROFILE"))
        return None
    wait_until(lambda: (memory() or (0,))[0] == 700)
    ok(memory() == (700.0, str(held_job), "1g.10gb"),
       "/metrics: gpuorch_mig_instance_memory_used_mib of the held instance is its job's "
       "processes' memory, labelled with the job and the profile", f"{memory()}")
    with n.lock:
        n.procs = {}
    # An instance gone before its attempt started: the attempt is not sent,
    # and ends NODE_FAIL, as on a lost node (then requeued or failed by the
    # job's retry policy: max_retries 0 here).
    gone_job = next(a["job"] for a in attempts
                    if a["gpus"][0]["mig_uuid"] == n.mig_uuid(0, n.layout[0][0][1]))
    with n.lock:
        n.layout[0] = n.layout[0][1:]
    wait_until(lambda: gone_job not in [a["job"] for a in runs()])
    ok(gone_job not in [a["job"] for a in runs()],
       "its instance gone, the attempt is no longer in the node's assignments")
    wait_until(lambda: ((job(gone_job) or {}).get("attempts") or [{}])[0].get("state")
               == "NODE_FAIL")
    j = job(gone_job) or {}
    ok(((j.get("attempts") or [{}])[0].get("state")) == "NODE_FAIL"
       and "MIG instance" in str((j.get("attempts") or [{}])[0].get("reason")),
       "and it ends NODE_FAIL, naming the MIG instance", f"{j.get('attempts')}")
    # The demand is met by idle instances: more passes plan nothing.
    passes = [0]

    def calm():
        passes[0] += 1
        return bool(plans_of(n))
    wait_until(calm, 4)
    ok(not plans_of(n), "with the demand met, no new plan over later passes (no flapping)")
    text = SRV.api.scrape(token=ADMIN).text
    counts = {lab.get("outcome"): v for name, lab, v in prom_samples(text)
              if name == "gpuorch_mig_plans_total"}
    ok(counts.get("sent") == 1 and counts.get("done") == 1,
       "gpuorch_mig_plans_total: one plan sent, one done", f"{counts}")
    for j in jobs:
        call("POST", f"/v1/jobs/{j}/cancel", token=ADMIN)
    n.stopped = True


def static_pool():
    """A static layout is applied to an idle GPU, then left alone."""
    put("/v1/pools/stat", {"description": "static MIG", "mig": {"layout": "all-1g.10gb"}})
    n = MigNode("s1", 3, [[("7g.80gb", 0)]], "stat")
    st, _, raw = n.register()
    ok(st == 201, "a node of the static pool registers an idle 7g instance", f"{st} {raw[:300]!r}")
    n.start()
    plans = wait_plan(n)
    p = plans[0] if len(plans) == 1 else {}
    ok(len(plans) == 1 and p.get("destroy") == [{"profile_id": PID["7g.80gb"], "start": 0}]
       and sorted(c["start"] for c in p.get("create") or []) == list(range(7))
       and all(c["profile_id"] == PID["1g.10gb"] for c in p.get("create") or []),
       "static all-1g.10gb on an idle 7g GPU: destroy it, create seven 1g.10gb at slots 0-6",
       f"{plans}")
    st, _, raw = n.apply(p)
    ok(st == 204, "the plan's result: 204", f"{st} {raw[:300]!r}")
    wait_until(lambda: bool(plans_of(n)), 3)
    ok(not plans_of(n), "the layout reached, no further plan")
    n.stopped = True


def restart():
    """Plans are re-derived after a controller restart: the one in flight is
    forgotten (its result is a 404) and planned again under a new id."""
    n = MigNode("r1", 4, [[("7g.80gb", 0)]], "stat")
    st, _, raw = n.register()
    n.start()
    plans = wait_plan(n)
    ok(len(plans) == 1, "a static pool's node: a plan in flight", f"{st} {plans}")
    old = plans[0] if plans else {"id": 0}
    SRV.stop()
    SRV.start()
    again = wait_plan(n, timeout=30)
    new = again[0] if len(again) == 1 else {}
    ok(len(again) == 1 and new.get("id", 0) > old["id"] and new.get("destroy") == old.get("destroy")
       and new.get("create") == old.get("create"),
       "after a restart the same plan comes again under a larger id", f"{old} {again}")
    st, _, raw = n.apply(old)  # the node had applied it before the restart
    ok(st == 404, "the forgotten plan's result: 404", f"{st} {raw[:200]!r}")
    st, _, raw = n.api.call("POST", f"/v1/nodes/r1/mig/{new.get('id')}",
                            {"ok": True, "gpu_uuid": n.uuids[0], "mig": n.instances(0)})
    ok(st == 204, "the new plan's result, the layout already reached: 204", f"{st} {raw[:200]!r}")
    wait_until(lambda: bool(plans_of(n)), 3)
    ok(not plans_of(n), "then nothing more is planned")
    n.stopped = True


def main():
    setup()
    n = reported_instances()
    bad_results(n)
    n.stopped = True
    dynamic_pool()
    static_pool()
    restart()
    rc = SRV.stop()
    with open(SRV.log_path) as f:
        log = f.read()
    ok(rc == 0 and "Sanitizer" not in log and "runtime error:" not in log,
       "the server stops cleanly (status 0, no sanitizer report)", f"{rc}\n{log[-3000:]}")


if __name__ == "__main__":
    run(main, SRV)

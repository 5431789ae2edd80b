#!/usr/bin/env python3
"""gang_test.py GPUORCH - #SBATCH scripts get what Slurm would give them, with
a real `gpuorch server`, two real agents on the fake NVML ($GPUORCH_FAKENVML,
else BUILD/tests/libnvidia-ml.so.1) posing as nodes n1 and n2 with 8 H100s
each (pool main, aliased "gpu"; n2 has feature "ib"), and the `gpuorch` CLI
submitting the scripts. Prints TAP.

What it checks, against sbatch(1)'s meaning of each directive:
`--nodes=2 --gres=gpu:8` runs its script once on the first node and a
`gpuorch run` step on both nodes with 8 GPUs each, every rank sees
WORLD_SIZE=2 and its own node's 8 GPUs, and GET /v1/jobs/{id} shows each node
and its GPUs; `--gres=gpu:h100:2` runs (a short type name) and the job keeps
the canonical name; `--gres=gpu:b200:1` is refused at submit naming the known
types; `--exclusive` holds its node whole, so a one-GPU job that fits nowhere
else waits; `--mem=0` holds its node's memory likewise; `--constraint=ib`
with `--partition=gpu` (an alias) steers to n2; `--nodes=3` on two nodes, an
unknown feature and an unknown directive are refused with the reason.

Needs root (the agent switches to the job's user gpuorch-test1). Agents and
server are child processes stopped by PID; conditions are polled with
deadlines, never timed. KEEP_TMP=1 keeps the directories."""

import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, env_file, fake_gpu_uuid, ok, remove_tmp  # noqa: E402
from harness import run_as_root  # noqa: E402
from harness import wait_job_until, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-gang-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-gang-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = None
AGENTS = {}
GPU_TYPE = None


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def wait_job(jid, pred, timeout=30):
    return wait_job_until(SRV.api, jid, pred, ADMIN, timeout)


def running(j):
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def attempt(j):
    cur = (j or {}).get("current_attempt")
    if cur:
        return cur
    atts = (j or {}).get("attempts") or []
    return atts[-1] if atts else {}


def gpus_by_node(j):
    """{node: [uuid, ...]} of the job's attempt: its GPUs by the node that has
    each (an attempt lists UUIDs, or objects with one)."""
    out = {}
    for g in attempt(j).get("gpus") or []:
        uuid = g.get("uuid") if isinstance(g, dict) else g
        node = next((n for n, ag in AGENTS.items() if uuid in ag.uuids), None)
        out.setdefault(node, []).append(uuid)
    return out


def script(name, directives, body):
    path = os.path.join(SHARED, f"{name}.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body + "\n")
    os.chmod(path, 0o755)
    return path


def submit(name, directives, body="true"):
    """`gpuorch submit --parsable SCRIPT` as alice: (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update({"GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}", "GPUORCH_TOKEN": MEMBER,
                "HOME": TMP})
    r = subprocess.run([BIN, "submit", "--parsable", "-D", SHARED,
                        script(name, directives, body)],
                       capture_output=True, text=True, env=env, cwd=SHARED, timeout=60)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def submitted(res):
    rc, out, _ = res
    return int(out) if rc == 0 and out.isdigit() else None


def cancel(*jids):
    for jid in jids:
        if jid:
            call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    for jid in jids:
        if jid:
            wait_job(jid, lambda j: j["state"] in FINAL)


def setup():
    global ADMIN, MEMBER, GPU_TYPE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"aliases": ["gpu"],
                           "node_features": [{"node": "n2", "features": ["ib"]}]})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 16, "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    for name, no in (("n1", 1), ("n2", 2)):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [fake_gpu_uuid(no, g) for g in range(8)])
        ag.write_gpu_list([{"uuid": u} for u in ag.uuids])
        AGENTS[name] = ag
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        good = all(n in nodes and nodes[n].get("state") == "up"
                   and len(nodes[n].get("gpus") or []) == 8 for n in AGENTS)
        return nodes if good else None

    nodes = wait_until(registered, timeout=30, step=0.1)
    ok(nodes, "two agents register, n1 and n2 with 8 GPUs each",
       "\n".join(ag.tail() for ag in AGENTS.values()))
    if not nodes:
        raise RuntimeError("the agents did not register")
    GPU_TYPE = nodes["n1"]["gpus"][0].get("gpu_type")


def two_node_gang():
    """sbatch: --nodes=2 --gres=gpu:8 is 16 GPUs, 8 on each of two nodes."""
    rank = os.path.join(SHARED, "rank-$SLURM_PROCID")
    # As under Slurm, the script runs once, on the first node; its job step
    # (srun: `gpuorch run`, one task per node) runs on both.
    res = submit("gang", ["--nodes=2", "--gres=gpu:8", "--time=5"],
                 f"env > {os.path.join(SHARED, 'batch')}\n"
                 f"{BIN} run sh -c 'env > {rank}.tmp && mv {rank}.tmp {rank}'")
    jid = submitted(res)
    done, j = wait_job(jid, lambda j: j["state"] in FINAL) if jid else (False, None)
    envs = [env_file(os.path.join(SHARED, f"rank-{r}")) for r in (0, 1)]
    batch = env_file(os.path.join(SHARED, "batch"))
    ok(jid and j and j["state"] == "COMPLETED" and all(envs),
       "#SBATCH --nodes=2 --gres=gpu:8 runs a task on both nodes through `gpuorch run` and "
       "completes", f"{res}\n{json.dumps(j)}")
    ok(batch and batch.get("GPUORCH_NODE") == "n1" and batch.get("SLURM_NNODES") == "2",
       "the batch script itself runs once, on the first node, and sees SLURM_NNODES=2",
       json.dumps({k: v for k, v in (batch or {}).items() if k.startswith(("SLURM_N", "GPUORCH_N"))}))
    ok(all(e.get("WORLD_SIZE") == "2" for e in envs)
       and sorted(e.get("GPUORCH_NODE", "") for e in envs) == ["n1", "n2"],
       "each rank sees WORLD_SIZE=2, one on n1 and one on n2",
       json.dumps([{k: v for k, v in e.items() if k in ("WORLD_SIZE", "GPUORCH_NODE")}
                   for e in envs]))
    own = [set(AGENTS[e["GPUORCH_NODE"]].uuids) if e.get("GPUORCH_NODE") in AGENTS else set()
           for e in envs]
    seen = [set(u for u in e.get("CUDA_VISIBLE_DEVICES", "").split(",") if u) for e in envs]
    ok(all(len(s) == 8 and s == o for s, o in zip(seen, own)),
       "each rank sees the 8 GPUs of its own node", f"{seen}")
    by_node = gpus_by_node(j)
    ok(sorted(attempt(j).get("nodes") or []) == ["n1", "n2"]
       and {n: len(u) for n, u in by_node.items()} == {"n1": 8, "n2": 8}
       and all(set(by_node[n]) == set(AGENTS[n].uuids) for n in by_node),
       "GET /v1/jobs/{id} shows the gang on n1 and n2 with each node's 8 GPUs",
       json.dumps(attempt(j)))
    spec = (j or {}).get("spec") or {}
    ok(spec.get("nodes") == 2 and spec.get("gpus_per_node") == 8 and spec.get("gpus") == 16,
       "the stored spec says nodes 2, gpus_per_node 8, 16 GPUs in all", json.dumps(spec))


def gpu_type_names():
    short = (GPU_TYPE or "").split("-")[0].lower()
    res = submit("short", [f"--gres=gpu:{short}:2"])
    jid = submitted(res)
    _, j = wait_job(jid, lambda j: j["state"] in FINAL) if jid else (False, None)
    ok(short == "h100" and j and j["state"] == "COMPLETED"
       and (j.get("spec") or {}).get("gpu_type") == GPU_TYPE,
       f"--gres=gpu:h100:2 runs on the {GPU_TYPE} nodes and keeps the type's own name",
       f"{res}\n{json.dumps(j)}")
    rc, out, err = submit("b200", ["--gres=gpu:b200:1"])
    ok(rc != 0 and not out and "unknown GPU type 'b200'" in err and GPU_TYPE in err,
       "--gres=gpu:b200:1 is refused at submit, naming the known types", f"{rc} {out!r} {err!r}")


def exclusive_and_whole_memory():
    for directive, what in (("--exclusive", "an exclusive job"), ("--mem=0", "a --mem=0 job")):
        a = submitted(submit("holder", ["--gres=gpu:1", directive], "sleep 60"))
        ok_a, ja = wait_job(a, running) if a else (False, None)
        node = (attempt(ja).get("nodes") or [None])[0]
        other = "n2" if node == "n1" else "n1"
        b = submitted(submit("fills-other", ["--gres=gpu:8"], "sleep 60"))
        ok_b, jb = wait_job(b, running) if b else (False, None)
        c = submitted(submit("no-room", ["--gres=gpu:1"], "true"))
        stays, jc = wait_job(c, lambda j: j["state"] == "PENDING" and j.get("wait_reason"),
                             timeout=10) if c else (False, None)
        held = len(gpus_by_node(ja).get(node) or []) if ok_a else 0
        ok(ok_a and ok_b and (attempt(jb).get("nodes") or [None])[0] == other and stays
           and (held == 8 if directive == "--exclusive" else held == 1),
           f"{what} holds its node ({'every GPU' if directive == '--exclusive' else 'its memory'})"
           ": with the other node full, a one-GPU job waits",
           f"{json.dumps(ja)}\n{json.dumps(jb)}\n{json.dumps(jc)}")
        cancel(a, b, c)


def constraint_and_alias():
    res = submit("featured", ["--gres=gpu:1", "--constraint=ib", "--partition=gpu"], "true")
    jid = submitted(res)
    _, j = wait_job(jid, lambda j: j["state"] in FINAL) if jid else (False, None)
    ok(j and j["state"] == "COMPLETED" and attempt(j).get("nodes") == ["n2"]
       and (j.get("spec") or {}).get("pool") == "main",
       "--constraint=ib --partition=gpu runs on n2, the node with the feature, in pool main "
       "(gpu is its alias)", f"{res}\n{json.dumps(j)}")


def refusals():
    cases = [
        (["--nodes=3", "--gres=gpu:8"], "Requested node configuration is not available",
         "three nodes of a two-node cluster"),
        (["--gres=gpu:9"], "Requested node configuration is not available",
         "9 GPUs on one node of 8"),
        (["--constraint=nvme"], "unknown feature 'nvme' (known: ib)", "an unknown feature"),
        (["--partition=nosuch"], "no pool 'nosuch' (pools: main)", "an unknown partition"),
        (["--nodes=1-2"], "a node range (1-2) is not supported", "a node range"),
        (["--hint=compute_bound"], "unknown #SBATCH directive '--hint'", "an unknown directive"),
    ]
    for directives, needle, what in cases:
        rc, out, err = submit("refused", directives)
        ok(rc != 0 and not out and needle in err, f"{what} is refused at submit: '{needle}'",
           f"{rc} {out!r} {err!r}")


def main():
    print("TAP version 13")
    setup()
    for step in (two_node_gang, gpu_type_names, exclusive_and_whole_memory, constraint_and_alias,
                 refusals):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    codes = {n: ag.stop() for n, ag in AGENTS.items()}
    ok(all(c == 0 for c in codes.values()), "every agent stops with status 0 on SIGTERM", codes)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    for ag in AGENTS.values():
        ag.kill()
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""slurm_env_test.py GPUORCH - what a Slurm user's script meets in a job, with
real node agents (`gpuorch agent`) under a real `gpuorch server` on loopback
and the fake NVML: two agents pose as nodes n1 and n2 (2 GPUs each, pool
main). Jobs run as the test user gpuorch-test1. Prints TAP.

What it checks: a script job's SLURM_* variables (job id, name, node list,
nodes, tasks, ranks, partition, account, user, submit directory, GPUs), which
the job's own env cannot override (its other SLURM_* names pass); a 2-node gang's, on both nodes (the node
list in Slurm's compressed form, each node its rank); -o without -e gets both
streams in one file, in order, and the logs API reads it as either stream;
an existing output file is truncated, or kept with open_mode append;
--signal=B:USR1@N with a short time limit makes the script's checkpoint
trap write ckpt.<jobid> before the job is killed (TIMEOUT), once, also when
the agent is killed with kill -9 and started again after the signal, and
not to the script's children; without B: the children get it too.

Needs root (the agent switches to the job's user) and the user
gpuorch-test1 (scripts/setup.sh). Conditions are polled with deadlines,
never timed. KEEP_TMP=1 keeps the directories."""

import json
import os
import pwd
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE_S, FakeAgent, Server, agent_cgroups, fake_gpu_uuid,  # noqa: E402
                     ok, remove_cgroups, remove_tmp, run_as_root, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-slurm-env-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-slurm-env-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
SUBMIT_DIR = "/home/alice/project"  # where the submission says it was made
ADMIN = MEMBER = None
AGENTS = {}
CGROUP_BASE = None


def shared(name):
    return os.path.join(SHARED, name)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def env_of(text):
    """NAME=VALUE lines (env's output) as a dict."""
    out = {}
    for line in (text or "").splitlines():
        k, eq, v = line.partition("=")
        if eq:
            out[k] = v
    return out


def submit(spec):
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1, "submit_dir": SUBMIT_DIR},
                **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=MEMBER)["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_final(jid, timeout=DEADLINE_S):
    last = [None]

    def done():
        last[0] = get_job(jid)
        return last[0] is not None and last[0].get("state") in FINAL

    wait_until(done, timeout, 0.1)
    return last[0]


def nodes_of(j):
    cur = (j or {}).get("current_attempt") or ((j or {}).get("attempts") or [{}])[-1]
    v = cur.get("nodes") or cur.get("node") or []
    return v if isinstance(v, list) else [v]


def detail(j, extra=""):
    return "\n".join([json.dumps(j), extra] + [ag.tail() for ag in AGENTS.values()])


def logs(jid, stream):
    st, _, raw = call("GET", f"/v1/jobs/{jid}/logs", token=MEMBER, query={"stream": stream})
    return st, raw


def script(body):
    return "#!/bin/sh\n" + body


def setup():
    global ADMIN, MEMBER, CGROUP_BASE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for path, body in (("/v1/pools/main", {"description": "2-GPU nodes"}),
                       ("/v1/priority-classes/normal", {"order": 0}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]}),
                       ("/v1/users/alice",
                        {"unix_user": JOB_USER, "team": "research", "role": "member"})):
        SRV.api.expect("PUT", path, body, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    for name, no in (("n1", 1), ("n2", 2)):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name,
                       [fake_gpu_uuid(no, g, tag="5000") for g in range(2)], kill_grace=2)
        ag.write_gpu_list([{"uuid": u, "utilization": 30, "memory_utilization": 10,
                            "process_memory_mib": 512} for u in ag.uuids])
        AGENTS[name] = ag
    CGROUP_BASE, roots = agent_cgroups("gpuorch-slurm-env-test", list(AGENTS))
    for name, ag in AGENTS.items():
        ag.cgroup = roots.get(name)
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(n in nodes and nodes[n].get("state") == "up"
                   and len(nodes[n].get("gpus") or []) == 2 for n in AGENTS)

    good = wait_until(registered, timeout=30, step=0.1)
    ok(good, "two agents register, n1 and n2 with 2 GPUs each in pool main",
       "\n".join(ag.tail() for ag in AGENTS.values()))
    if not good:
        raise RuntimeError("the agents did not register; the other checks need them")


def one_node_environment():
    """A script job's Slurm variables, which its own env cannot set."""
    out = shared("env-%j.txt")
    jid = submit({"name": "envjob", "script": script("env\n"), "output": out,
                  "cpus": 2, "env": {"SLURM_JOB_ID": "1", "SLURM_NNODES": "9",
                                            "SLURM_CPU_BIND": "cores"}})
    j = wait_final(jid)
    env = env_of(read(shared(f"env-{jid}.txt")))
    node = (nodes_of(j) or [""])[0]
    uid = pwd.getpwnam(JOB_USER).pw_uid
    cur = (j or {}).get("attempts") or [{}]
    gpus = [g.get("uuid") if isinstance(g, dict) else g for g in cur[-1].get("gpus") or []]
    index = {u: i for ag in AGENTS.values() for i, u in enumerate(ag.uuids)}
    want = {"SLURM_JOB_ID": str(jid), "SLURM_JOBID": str(jid), "SLURM_JOB_NAME": "envjob",
            "SLURM_JOB_NODELIST": node, "SLURM_NODELIST": node, "SLURM_NNODES": "1",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "1", "SLURM_NPROCS": "1",
            "SLURM_TASKS_PER_NODE": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0", "SLURMD_NODENAME": node, "SLURM_CLUSTER_NAME": "gpuorch",
            "SLURM_JOB_PARTITION": "main", "SLURM_JOB_ACCOUNT": "research",
            "SLURM_JOB_QOS": "normal", "SLURM_JOB_USER": JOB_USER, "SLURM_JOB_UID": str(uid),
            "SLURM_SUBMIT_DIR": SUBMIT_DIR, "SLURM_CPUS_ON_NODE": "2",
            "SLURM_JOB_CPUS_PER_NODE": "2", "SLURM_GPUS_ON_NODE": "1",
            "SLURM_JOB_GPUS": ",".join(str(index.get(u)) for u in gpus),
            "SLURM_CPU_BIND": "cores"}
    wrong = {k: (env.get(k), v) for k, v in want.items() if env.get(k) != v}
    ok(j and j["state"] == "COMPLETED" and env and not wrong,
       "a script job sees its Slurm variables: job id, name, node list, nodes, tasks, ranks, "
       "partition, account, QOS, user, uid, submit directory, CPUs and GPUs; its own env "
       "sets none of them, and passes a Slurm name gpuorch does not set (SLURM_CPU_BIND)", detail(j, f"wrong (got, want): {wrong}"))
    unset = [k for k in ("SLURM_CPUS_PER_TASK", "SLURM_ARRAY_JOB_ID", "SLURM_STEP_ID",
                         "SLURM_MEM_PER_NODE", "SLURM_RESTART_COUNT") if k in env]
    ok(env and not unset, "variables the job did not ask for (--cpus-per-task, an array, "
       "a step, --mem) are not set", f"set: {unset}")


def gang_environment():
    """Both nodes of a 2-node gang: the compressed node list, each its rank."""
    jid = submit({"name": "gangenv", "gpus": 4, "multi_node": True,
                  "command": ["/bin/sh", "-c", f"env > {SHARED}/gang-$SLURM_JOB_ID-$SLURM_NODEID"]})
    j = wait_final(jid)
    envs = [env_of(read(shared(f"gang-{jid}-{r}"))) for r in (0, 1)]
    nodes = nodes_of(j)
    same = {"SLURM_JOB_ID": str(jid), "SLURM_JOB_NODELIST": "n[1-2]",
            "SLURM_NODELIST": "n[1-2]", "SLURM_NNODES": "2", "SLURM_NTASKS": "2",
            "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_GPUS_ON_NODE": "2", "WORLD_SIZE": "2"}
    wrong = []
    for rank, env in enumerate(envs):
        want = dict(same, SLURM_NODEID=str(rank), SLURM_PROCID=str(rank), RANK=str(rank),
                    SLURM_LOCALID="0",
                    SLURMD_NODENAME=nodes[rank] if rank < len(nodes) else "?")
        wrong += [(rank, k, env.get(k), v) for k, v in want.items() if env.get(k) != v]
    ok(j and j["state"] == "COMPLETED" and sorted(nodes) == ["n1", "n2"] and all(envs)
       and not wrong,
       "each rank of a 2-node gang sees SLURM_JOB_NODELIST=n[1-2], SLURM_NNODES=2, "
       "SLURM_NTASKS=2, SLURM_TASKS_PER_NODE=1(x2), and its own SLURM_NODEID, SLURM_PROCID "
       "and SLURMD_NODENAME in the gang's rank order", detail(j, f"wrong: {wrong}"))


def merged_output():
    """-o without -e: one file, both streams in the order written."""
    out = shared("merged-%j.out")
    jid = submit({"name": "merged", "output": out,
                  "script": script("echo one\necho two >&2\necho three\necho four >&2\n")})
    j = wait_final(jid)
    text = read(shared(f"merged-{jid}.out"))
    st_out, raw_out = logs(jid, "stdout")
    st_err, raw_err = logs(jid, "stderr")
    ok(j and j["state"] == "COMPLETED" and text == "one\ntwo\nthree\nfour\n",
       "-o without -e puts stdout and stderr into the one file, in the order written",
       detail(j, repr(text)))
    ok(st_out == 200 and st_err == 200 and raw_out == raw_err == text.encode(),
       "the logs API reads that file as the job's stdout and as its stderr",
       f"{st_out} {raw_out[:200]!r} {st_err} {raw_err[:200]!r}")


def open_modes():
    """An existing output file: truncated by default, kept with open_mode append."""
    paths = {mode: shared(f"mode-{mode}.out") for mode in ("truncate", "append")}
    for path in paths.values():
        with open(path, "w") as f:
            f.write("earlier\n")
        os.chown(path, pwd.getpwnam(JOB_USER).pw_uid, -1)
    texts, jobs = {}, {}
    for mode, path in paths.items():
        spec = {"name": f"mode-{mode}", "output": path, "script": script("echo new\n")}
        if mode == "append":
            spec["open_mode"] = "append"
        jid = submit(spec)
        jobs[mode] = wait_final(jid)
        texts[mode] = read(path)
    ok(all(j and j["state"] == "COMPLETED" for j in jobs.values())
       and texts == {"truncate": "new\n", "append": "earlier\nnew\n"},
       "an existing output file is truncated when the job starts, and kept with "
       "--open-mode=append", detail(jobs.get("append"), repr(texts)))


def checkpoint_signal(batch_only, restart):
    """--signal=[B:]USR1@3 with a 6 s limit: the trap writes ckpt.<jobid>."""
    tag = "B" if batch_only else "all"
    body = (f"trap 'echo saved >> ckpt.$SLURM_JOB_ID' USR1\n"
            f"sh -c \"trap 'echo child >> child.\\$SLURM_JOB_ID' USR1; "
            f"while :; do sleep 1 & wait \\$!; done\" &\n"
            f"while :; do sleep 1 & wait $!; done\n")
    jid = submit({"name": f"ckpt-{tag}", "time_limit_s": 6,
                  "signal": ("B:" if batch_only else "") + "USR1@3", "script": script(body)})
    ckpt, child = shared(f"ckpt.{jid}"), shared(f"child.{jid}")
    got = wait_until(lambda: read(ckpt), timeout=30, step=0.05)
    node = None
    if restart and got:
        node = (nodes_of(get_job(jid)) or [None])[0]
        if node in AGENTS:
            AGENTS[node].kill9()
            AGENTS[node].start()
    j = wait_final(jid, timeout=60)
    lines = (read(ckpt) or "").splitlines()
    what = (", once, also across a kill -9 and restart of its agent" if restart else "")
    ok(got and j and j["state"] == "TIMEOUT" and lines == ["saved"],
       f"--signal={'B:' if batch_only else ''}USR1@3 with a 6 s time limit: the script's "
       f"trap writes ckpt.<jobid> before the job is killed (TIMEOUT){what}",
       detail(j, f"{lines} node {node}"))
    children = (read(child) or "").splitlines()
    if batch_only:
        ok(children == [], "with B: the script's children do not get the signal", children)
    else:
        ok(children == ["child"], "without B: the script's children get it too", children)


def cleanup_jobs():
    st, body, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1000", token=ADMIN)
    for j in (body or {}).get("jobs") or [] if st == 200 else []:
        call("POST", f"/v1/jobs/{j['id']}/cancel", token=ADMIN)
        wait_final(j["id"], timeout=10)


def main():
    print("TAP version 13")
    setup()
    steps = (one_node_environment, gang_environment, merged_output, open_modes,
             lambda: checkpoint_signal(True, False), lambda: checkpoint_signal(False, False),
             lambda: checkpoint_signal(True, True))
    for step in steps:
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {getattr(step, '__name__', 'signal')} ran to its end", repr(e))
            for ag in AGENTS.values():
                if ag.proc and ag.proc.poll() is not None:
                    ag.start()
    cleanup_jobs()
    reports = [n for n, ag in AGENTS.items()
               if "Sanitizer" in ag.log() or "runtime error:" in ag.log()]
    ok(not reports, "the agents' logs hold no sanitizer report",
       "\n".join(AGENTS[n].tail(6000) for n in reports))
    codes = {n: ag.stop() for n, ag in AGENTS.items()}
    ok(all(c == 0 for c in codes.values()), "every agent stops with status 0 on SIGTERM", codes)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    for ag in AGENTS.values():
        if ag.proc and ag.proc.poll() is None:
            ag.proc.kill()
            ag.proc.wait()
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

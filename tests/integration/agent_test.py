#!/usr/bin/env python3
"""agent_test.py GPUORCH - real node agents (`gpuorch agent`) under a real
`gpuorch server`, over HTTP on loopback, with the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1): three agents on this
machine pose as nodes n1 and n2 (8 GPUs each, pool main) and n3 (one GPU, pool
frac). Jobs really run, as the test user gpuorch-test1. Prints TAP.

What it checks: a job sees exactly its GPUs and runs as its user; two 0.5-GPU
jobs share one GPU at the same time; a 16-GPU gang over n1 and n2 starts both
ranks with the right environment, and ends all of them when one fails; the
time limit and cancel stop a job with SIGTERM, then SIGKILL (a setsid child
included where cgroups exist); kill -9 of an agent while jobs run, then a
restart, launches nothing twice and reports every outcome; logs through the
controller (follow, offset, auth); GPU samples reach the controller; a job
that would run as root is refused; each agent's network half runs as the
unprivileged account (real, effective and saved uid and gid, no capability,
no_new_privs) while its privileged half keeps root, a script job still runs
as its user, and a request that the privileged half's table does not allow,
sent on the agent's own socket, is refused there; a journal found at
STATE/journal is moved to STATE/net and its attempt taken up; gpuorch-shim
links libc only; an exit is seen through the shim's pidfd, and with
--exit-poll by reading its status file. Throughout,
harness.GpuWatch samples the assignments and the fake GPUs' processes: no
GPU two jobs' at once.

Needs root (the agent switches to the job's user) and the users gpuorch-test1
and gpuorch-test2 (scripts/setup.sh). The test directory is a mkdtemp of mode
0755 with a `shared` subdirectory of mode 0777 for what jobs write. Agents and
server are child processes stopped by PID; conditions are polled with
deadlines, never timed. KEEP_TMP=1 keeps the directories."""

import ctypes
import fcntl
import json
import os
import pwd
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, GpuWatch, fake_gpu_uuid, remove_tmp, run_as_root  # noqa: E402
from harness import (DEADLINE_S, Server, agent_cgroups, diag, ok, pid_alive,  # noqa: E402
                     remove_cgroups, wait_until, write_atomic)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
OTHER_USER = "gpuorch-test2"
KILL_GRACE_S = 2
BASE_UTIL = 35  # every fake GPU's utilization until a check changes it
RUN_AS = "gpuorch"  # the agent's default --run-as
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-agent-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-agent-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
ADMIN = MEMBER = OTHER = None
AGENTS = {}
CGROUP_BASE = None  # this test's cgroup directory, when cgroup v2 is writable here
LEFT = []  # pids of job processes that a failed check may leave behind


# -- The agents. ---------------------------------------------------------------------------


def gpu_uuid(node_no, index):
    return fake_gpu_uuid(node_no, index)


class AgentProc(FakeAgent):
    """A test agent (harness.FakeAgent) with NGPUS GPUs at BASE_UTIL."""

    def __init__(self, name, node_no, ngpus, pool="main"):
        super().__init__(BIN, SRV, TMP, FAKENVML, name,
                         [gpu_uuid(node_no, g) for g in range(ngpus)], pool=pool,
                         kill_grace=KILL_GRACE_S)
        self.write_gpus()

    def write_gpus(self, util=None):
        """UTIL maps an index to its utilization, BASE_UTIL for the others."""
        self.write_gpu_list([{"uuid": u, "utilization": (util or {}).get(i, BASE_UTIL),
                              "memory_utilization": 10, "process_memory_mib": 512}
                             for i, u in enumerate(self.uuids)])


def setup_cgroups():
    """A cgroup root of its own for each agent (harness.agent_cgroups)."""
    global CGROUP_BASE
    CGROUP_BASE, roots = agent_cgroups("gpuorch-agent-test", list(AGENTS))
    for name, ag in AGENTS.items():
        ag.cgroup = roots.get(name)


def kill_job_process(pid):
    """SIGKILL to PID if it is still a job process of this test: its environment
    names a gpuorch job and it runs in the shared directory (a pid written by a
    job may have been reused since)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
        if (b"GPUORCH_JOB_ID=" in env and os.readlink(f"/proc/{pid}/cwd") == SHARED
                and pid_alive(pid)):
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


# -- Helpers over the API. -----------------------------------------------------------------


def submit(spec, token=None):
    """Submits SPEC as alice (team research), in pool main and the shared
    directory unless SPEC says otherwise; returns the job's id."""
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=token or MEMBER)["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_job(jid, pred, timeout=DEADLINE_S, step=0.1):
    """Polls job JID until pred(job) holds; returns (held, the last job read)."""
    last = [None]

    def check():
        last[0] = get_job(jid)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError, IndexError):
            return False

    return bool(wait_until(check, timeout, step)), last[0]


def state_is(*states):
    return lambda j: j["state"] in states


def launched(j):
    """The agent has reported the attempt RUNNING (a job is RUNNING from its
    assignment on), or the job has ended."""
    return j["state"] in FINAL or (j["state"] == "RUNNING"
                                   and (j.get("current_attempt") or {}).get("state") == "RUNNING")


def wait_final(jid, timeout=DEADLINE_S):
    return wait_job(jid, state_is(*FINAL), timeout)[1]


def attempts_of(j):
    return (j or {}).get("attempts") or []


def last_attempt(j):
    atts = attempts_of(j)
    return atts[-1] if atts else {}


def uuids_of(a):
    """An attempt's GPU UUIDs: "gpus" holds strings, or objects with a uuid."""
    return [g.get("uuid") if isinstance(g, dict) else g for g in (a or {}).get("gpus") or []]


def job_gpus(j):
    """The GPUs of the job's attempt: the current one while it runs, else the last."""
    cur = (j or {}).get("current_attempt")
    return uuids_of(cur) if cur and cur.get("gpus") else uuids_of(last_attempt(j))


def job_nodes(j):
    cur = (j or {}).get("current_attempt") or last_attempt(j)
    v = cur.get("nodes") or cur.get("node") or []
    return v if isinstance(v, list) else [v]


def detail(j, *names):
    """A failed check's diagnostics: the job and the logs of its agents (or NAMES)."""
    names = names or tuple(n for n in job_nodes(j) if n in AGENTS) or tuple(AGENTS)
    return "\n".join([json.dumps(j)] + [AGENTS[n].tail() for n in names])


def sh(script):
    return ["/bin/sh", "-c", script]


def shared(name):
    return os.path.join(SHARED, name)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_pid(path):
    text = read(path)
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def env_file(path):
    """A file of NAME=VALUE lines (the output of env) as a dict."""
    out = {}
    for line in (read(path) or "").splitlines():
        k, eq, v = line.partition("=")
        if eq:
            out[k] = v
    return out


def logs(jid, token=None, **query):
    """GET /v1/jobs/JID/logs with QUERY: (status, raw body bytes)."""
    st, _, raw = call("GET", f"/v1/jobs/{jid}/logs", token=token or MEMBER, query=query)
    return st, raw


def on_disk(jid, attempt=1, stream="stdout"):
    """The attempt's log as the agents wrote it (for diagnostics only)."""
    for ag in AGENTS.values():
        text = read(os.path.join(ag.state, "attempts", f"{jid}.{attempt}", stream))
        if text is not None:
            return f"{ag.name}'s {stream} file: {text[-800:]!r}"
    return f"no {stream} file of {jid}.{attempt} on any node"


def samples(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    nodes = (body or {}).get("nodes") or [] if st == 200 else []
    for n in nodes:
        if n.get("name") == name:
            return n.get("gpu_samples") or []
    return []


def sample_of(name, uuid):
    return next((g for g in samples(name) if g.get("uuid") == uuid), None)


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def new_token(user):
    return SRV.api.expect("POST", f"/v1/users/{user}/tokens?label=test", want=(201,),
                          token=ADMIN)["token"]


# -- The steps. ----------------------------------------------------------------------------


def setup():
    global ADMIN, MEMBER, OTHER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"description": "8-GPU nodes"})
    put("/v1/pools/frac", {"description": "one GPU, shared"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 16, "borrow_limit": -1},
                                          {"pool": "frac", "guaranteed": 1, "borrow_limit": -1}]})
    put("/v1/teams/other", {})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    put("/v1/users/bob", {"unix_user": OTHER_USER, "team": "other", "role": "member"})
    MEMBER, OTHER = new_token("alice"), new_token("bob")

    for name, no, n, pool in (("n1", 1, 8, "main"), ("n2", 2, 8, "main"), ("n3", 3, 1, "frac")):
        AGENTS[name] = AgentProc(name, no, n, pool)
    setup_cgroups()
    for ag in AGENTS.values():
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        good = all(
            name in nodes and nodes[name].get("state") == "up"
            and sorted(g.get("uuid") for g in nodes[name].get("gpus") or []) == sorted(ag.uuids)
            and nodes[name].get("pool") == ag.pool and nodes[name].get("addr") == "127.0.0.1"
            and isinstance(nodes[name].get("log_port"), int) and nodes[name]["log_port"] > 0
            and len(nodes[name].get("gpu_samples") or []) == len(ag.uuids)
            for name, ag in AGENTS.items())
        return nodes if good else None

    nodes = wait_until(registered, timeout=30, step=0.1)
    st, body, raw = call("GET", "/v1/nodes", token=ADMIN)
    ok(nodes, "three agents register: n1 and n2 with 8 GPUs in main, n3 with 1 in frac, each "
       "up, with addr 127.0.0.1, a log_port and GPU samples",
       f"{raw[:1500]!r}\n" + "\n".join(ag.tail() for ag in AGENTS.values()))
    if not nodes:
        raise RuntimeError("the agents did not register; the other checks need them")
    for ag in AGENTS.values():
        if ag.proc.poll() is not None:
            raise RuntimeError(f"agent {ag.name} exited: {ag.tail()}")


def visible_devices():
    """Check 1: a 2-GPU job sees exactly its GPUs and runs as the job user."""
    jid = submit({"name": "visible", "gpus": 2, "command": sh(
        'echo "CUDA=$CUDA_VISIBLE_DEVICES"; echo "NVIDIA=$NVIDIA_VISIBLE_DEVICES"; '
        'echo "ID=$(id -un)"; echo "USER=$USER"; echo "HOME=$HOME"; echo "PWD=$(pwd)"')})
    j = wait_final(jid)
    a = last_attempt(j)
    ok(j and j["state"] == "COMPLETED" and a.get("exit_code") == 0,
       "a 2-GPU job ends COMPLETED with exit code 0", detail(j))
    st, raw = logs(jid, stream="stdout")
    out = {}
    for line in raw.decode(errors="replace").splitlines():
        k, eq, v = line.partition("=")
        if eq:
            out[k] = v
    gpus = uuids_of(a)
    cuda = [u for u in out.get("CUDA", "").split(",") if u]
    nvidia = [u for u in out.get("NVIDIA", "").split(",") if u]
    ok(st == 200 and len(gpus) == 2 and sorted(cuda) == sorted(gpus) == sorted(nvidia),
       "its stdout, read through the logs API, shows CUDA_VISIBLE_DEVICES == "
       "NVIDIA_VISIBLE_DEVICES == its attempt's 2 GPU UUIDs",
       f"{st} {raw[:600]!r}\nattempt GPUs {gpus}\n{on_disk(jid)}\n{detail(j)}")
    home = os.path.expanduser(f"~{JOB_USER}")
    ok(out.get("ID") == JOB_USER and out.get("USER") == JOB_USER and out.get("HOME") == home
       and out.get("PWD") == SHARED,
       f"it runs as {JOB_USER} (id -un, USER, HOME), not root, in its workdir",
       f"{out}\n{on_disk(jid)}")


def fractional():
    """Check 2: two 0.5-GPU jobs on n3's single GPU run at the same time."""
    def script(mine, theirs):
        return sh(f'touch {shared(mine)}; i=0; while [ ! -e {shared(theirs)} ] && [ $i -lt 300 ]; '
                  f'do sleep 0.1; i=$((i+1)); done; [ -e {shared(theirs)} ] || exit 9; '
                  f'echo "CUDA=$CUDA_VISIBLE_DEVICES"')
    ids = [submit({"name": f"half-{x}", "gpus": 0.5, "pool": "frac", "command": script(x, y)})
           for x, y in (("frac-a", "frac-b"), ("frac-b", "frac-a"))]
    jobs = [wait_final(jid, timeout=45) for jid in ids]
    ok(all(j and j["state"] == "COMPLETED" and last_attempt(j).get("exit_code") == 0
           for j in jobs),
       "two 0.5-GPU jobs in pool frac run at the same time (each sees the other's marker) "
       "and end COMPLETED", "\n".join(detail(j) for j in jobs))
    seen = [logs(jid, stream="stdout") for jid in ids]
    cuda = [raw.decode(errors="replace").strip().partition("CUDA=")[2] for _, raw in seen]
    ok(all(st == 200 for st, _ in seen) and cuda[0] == cuda[1] == AGENTS["n3"].uuids[0]
       and all(job_gpus(j) == cuda[:1] for j in jobs),
       "both print the same single UUID, n3's GPU, as their attempts say",
       f"{seen}\n{[job_gpus(j) for j in jobs]}\n{[on_disk(jid) for jid in ids]}")


def array_index():
    """An array task sees its index, under gpuorch's and Slurm's names."""
    st, body, raw = call("POST", "/v1/jobs", {
        "team": "research", "pool": "main", "workdir": SHARED, "gpus": 1, "array": "0-2",
        "command": sh('echo "$GPUORCH_ARRAY_JOB_ID $GPUORCH_ARRAY_TASK_ID '
                      '$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID"')}, token=MEMBER)
    ids = (body or {}).get("array_jobs") or []
    jobs = [wait_final(jid) for jid in ids]
    outs = [logs(jid, stream="stdout")[1].decode(errors="replace").split() for jid in ids]
    want = [[str(ids[0]), str(k), str(ids[0]), str(k)] for k in range(3)] if ids else None
    ok(st == 201 and len(ids) == 3 and all(j and j["state"] == "COMPLETED" for j in jobs)
       and outs == want,
       "each task of an array sees its array and its index in GPUORCH_ARRAY_JOB_ID / "
       "GPUORCH_ARRAY_TASK_ID and SLURM_ARRAY_JOB_ID / SLURM_ARRAY_TASK_ID",
       f"{st} {raw[:300]!r}\n{outs} want {want}")


def output_patterns():
    """sbatch's %j and %x in an output path name the file; the logs API reads it."""
    jid = submit({"name": "patterned", "output": os.path.join(SHARED, "out-%j-%x.txt"),
                  "command": sh("echo written")})
    j = wait_final(jid)
    path = os.path.join(SHARED, f"out-{jid}-patterned.txt")
    st, raw = logs(jid, stream="stdout")
    ok(j and j["state"] == "COMPLETED" and read(path) == "written\n" and st == 200
       and raw == b"written\n",
       "an output path with %j and %x writes out-JOB-NAME.txt, and the logs API reads it",
       f"{detail(j)}\n{sorted(os.listdir(SHARED))}\n{st} {raw[:200]!r}")


def node_dirty(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    for n in (body or {}).get("nodes") or []:
        if n.get("name") == name:
            return n.get("dirty_gpus")
    return None


def dirty_gpu():
    """A GPU that still runs a process of an ended attempt (a CUDA context stuck
    in the driver, say: here a process the test starts with the attempt's
    environment, outside its cgroup) is reported dirty and gets no new work
    until NVML shows it clean."""
    n3 = AGENTS["n3"]
    uuid = n3.uuids[0]
    go = shared("dirty-go")
    jid = submit({"name": "leaves-a-process", "pool": "frac", "command": sh(
        f'i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done')})
    good, j = wait_job(jid, launched)
    stray = subprocess.Popen(["sleep", "600"], start_new_session=True, env=dict(
        os.environ, CUDA_VISIBLE_DEVICES=uuid, GPUORCH_JOB_ID=str(jid), GPUORCH_ATTEMPT="1"))
    LEFT.append(stray.pid)
    write_atomic(go, "go\n")
    j = wait_final(jid)
    # Read at once: the final report names the GPU, and the controller holds it
    # back before the job shows COMPLETED (a heartbeat may only come later).
    held = node_dirty("n3") == [uuid]
    ok(j and j["state"] == "COMPLETED" and held,
       "a job whose process stays on its GPU ends COMPLETED, and by then GET /v1/nodes lists "
       "that GPU in n3's dirty_gpus", f"{detail(j)}\ndirty: {node_dirty('n3')}\n{n3.tail()}")
    nxt = submit({"name": "after-dirty", "pool": "frac", "command": ["true"]})
    waiting, k = wait_job(nxt, lambda k: k["state"] == "PENDING" and k.get("wait_reason"))
    ok(waiting and k["state"] == "PENDING" and node_dirty("n3") == [uuid]
       and "resources" in (k.get("wait_reason") or ""),
       "while it is dirty, the next job for that GPU waits (wait_reason resources)",
       f"{detail(k)}\ndirty: {node_dirty('n3')}")
    stray.kill()
    stray.wait()
    LEFT.remove(stray.pid)
    k = wait_final(nxt)
    ok(k and k["state"] == "COMPLETED" and node_dirty("n3") == [],
       "once NVML no longer shows the process, the GPU is clean again and the job runs",
       f"{detail(k)}\ndirty: {node_dirty('n3')}\n{n3.tail()}")


def gang():
    """Check 3: a 16-GPU gang over n1 and n2; then one whose rank 1 fails."""
    rank = shared("rank-$GPUORCH_NODE_RANK")
    # Rank 1 ends 2 s after rank 0: the gang is COMPLETED only when both are.
    jid = submit({"name": "gang", "gpus": 16, "multi_node": True, "command": sh(
        f'env > {rank}.tmp && mv {rank}.tmp {rank} || exit 1; '
        f'if [ "$GPUORCH_NODE_RANK" = 1 ]; then sleep 2; touch {shared("rank-1.done")}; fi')})
    j = wait_final(jid, timeout=30)
    envs = [env_file(shared(f"rank-{r}")) for r in (0, 1)]
    ok(j and j["state"] == "COMPLETED" and all(envs),
       "a 16-GPU multi_node job runs on n1 and n2: both ranks start, the job ends COMPLETED",
       f"{envs}\n{detail(j, 'n1', 'n2')}")
    ok(j and j["state"] == "COMPLETED" and os.path.exists(shared("rank-1.done")),
       "it completes only once its slower rank has: rank 1, 2 s behind rank 0, ran to its end",
       detail(j, "n1", "n2"))
    lists = [e.get("GPUORCH_NODELIST", "") for e in envs]
    uuids = [[u for u in e.get("CUDA_VISIBLE_DEVICES", "").split(",") if u] for e in envs]
    own = [set(AGENTS[e["GPUORCH_NODE"]].uuids) if e.get("GPUORCH_NODE") in AGENTS else set()
           for e in envs]
    ok(all(envs) and lists[0] == lists[1] and sorted(lists[0].split(",")) == ["n1", "n2"]
       and [e.get("GPUORCH_NODE_RANK") for e in envs] == ["0", "1"]
       and [e.get("RANK") for e in envs] == ["0", "1"]
       and all(e.get("WORLD_SIZE") == "2" and e.get("GPUORCH_NUM_NODES") == "2" for e in envs)
       and [e.get("GPUORCH_NODE") for e in envs] == lists[0].split(",")
       and envs[0].get("MASTER_ADDR") and envs[0].get("MASTER_PORT")
       and all(e.get("MASTER_ADDR") == envs[0].get("MASTER_ADDR")
               and e.get("MASTER_PORT") == envs[0].get("MASTER_PORT") for e in envs),
       "both ranks get the same GPUORCH_NODELIST (n1,n2), ranks 0 and 1, WORLD_SIZE 2 and the "
       "same MASTER_ADDR and MASTER_PORT",
       json.dumps([{k: v for k, v in e.items() if k.startswith(("GPUORCH", "MASTER", "WORLD",
                                                                  "RANK"))} for e in envs]))
    ok(all(envs) and all(len(u) == 8 and set(u) == o for u, o in zip(uuids, own))
       and sorted(uuids[0] + uuids[1]) == sorted(job_gpus(j)),
       "each rank sees the 8 UUIDs of its own node, 16 in all, the attempt's",
       f"{uuids}\n{job_gpus(j)}")

    pidf = shared("gang-pid")
    jid = submit({"name": "gang-fails", "gpus": 16, "multi_node": True, "command": sh(
        f'if [ "$GPUORCH_NODE_RANK" = 1 ]; then i=0; while [ ! -s {pidf} ] && [ $i -lt 300 ]; '
        f'do sleep 0.1; i=$((i+1)); done; exit 3; fi; '
        f'echo $$ > {pidf}.tmp; mv {pidf}.tmp {pidf}; exec sleep 600')})
    j = wait_final(jid, timeout=40)
    pid = read_pid(pidf)
    if pid:
        LEFT.append(pid)
    ok(j and j["state"] == "FAILED", "when rank 1 exits 3, the gang job ends FAILED",
       detail(j, "n1", "n2"))
    gone = pid and wait_until(lambda: not pid_alive(pid))
    ok(gone, "and rank 0's process (sleep 600) is gone", f"pid {pid}\n{detail(j, 'n1', 'n2')}")


def time_limit():
    """Check 4: time_limit_s 1, a shell that traps SIGTERM: TIMEOUT, SIGKILL after grace."""
    termf, pidf = shared("tl-term"), shared("tl-pid")
    jid = submit({"name": "limited", "time_limit_s": 1, "command": sh(
        f'trap "echo term > {termf}" TERM; echo $$ > {pidf}.tmp; mv {pidf}.tmp {pidf}; '
        f'while :; do sleep 1; done')})
    j = wait_final(jid, timeout=30)
    pid = read_pid(pidf)
    if pid:
        LEFT.append(pid)
    ok(j and j["state"] == "TIMEOUT", "a job past its time_limit_s of 1 ends TIMEOUT", detail(j))
    ok((read(termf) or "").strip() == "term", "its shell got SIGTERM first (its trap wrote 'term')",
       f"{read(termf)!r}\n{detail(j)}")
    gone = pid and wait_until(lambda: not pid_alive(pid))
    ok(gone, f"the shell that ignored SIGTERM is gone (SIGKILL after the {KILL_GRACE_S} s grace)",
       f"pid {pid}\n{detail(j)}")


def cancel():
    """Check 5: cancel of a running job; its setsid child too where cgroups exist.
    The child also ignores SIGTERM, so only the final kill of what the job left
    behind (cgroup.kill) can end it."""
    childf, mainf = shared("cancel-child"), shared("cancel-main")
    jid = submit({"name": "cancelled", "command": sh(
        f'setsid sh -c \'trap "" TERM; exec sleep 1000\' & '
        f'echo $! > {childf}.tmp; mv {childf}.tmp {childf}; '
        f'echo $$ > {mainf}.tmp; mv {mainf}.tmp {mainf}; sleep 1000')})
    started = wait_until(lambda: read_pid(childf) and read_pid(mainf), timeout=30)
    child, main_pid = read_pid(childf), read_pid(mainf)
    LEFT.extend(p for p in (child, main_pid) if p)
    j = get_job(jid)
    node = (job_nodes(j) or ["n1"])[0]
    if not started:
        ok(False, "the job to cancel starts", detail(j))
        return
    st, body, raw = call("POST", f"/v1/jobs/{jid}/cancel", token=MEMBER)
    ok(st == 202, "cancel of a running job: 202", f"{st} {raw[:300]!r}")
    j = wait_final(jid, timeout=30)
    ok(j and j["state"] == "CANCELLED", "the job ends CANCELLED", detail(j))
    ok(main_pid and wait_until(lambda: not pid_alive(main_pid)), "its main process is gone",
       f"pid {main_pid}\n{detail(j)}")
    if node in AGENTS and "no cgroups" not in AGENTS[node].log():
        ok(child and wait_until(lambda: not pid_alive(child)),
           "with cgroups, its child that called setsid (and ignores SIGTERM) is gone too",
           f"pid {child}\n{detail(j)}")
    else:
        diag(f"{node} has no writable cgroup v2 (its log says 'no cgroups'): a setsid child "
             f"escapes the process group; not checked")
    if child:
        kill_job_process(child)  # without cgroups it lives on, and keeps its GPU dirty


def restart_after_kill9():
    """Check 6: kill -9 of n1 while 3 jobs run, then a restart with the same state."""
    st, _, raw = call("POST", "/v1/nodes/n2/drain", token=ADMIN)
    if st != 200:
        raise RuntimeError(f"drain n2: {st} {raw!r}")
    try:
        launch = shared("launch-$GPUORCH_JOB_ID")
        codes = (0, 0, 3)
        ids = [submit({"name": f"survivor-{k}", "command": sh(
            f'echo "attempt $GPUORCH_ATTEMPT" >> {launch}; sleep 3; exit {code}')})
            for k, code in enumerate(codes)]
        started = wait_until(lambda: all(read(shared(f"launch-{jid}")) for jid in ids),
                             timeout=30)
        jobs = [get_job(jid) for jid in ids]
        ok(started and all(job_nodes(j) == ["n1"] and j["state"] == "RUNNING" for j in jobs),
           "three jobs run at once on n1 (n2 drained)",
           "\n".join(json.dumps(j) for j in jobs) + AGENTS["n1"].tail())
        AGENTS["n1"].kill9()
        before = len(AGENTS["n1"].log())
        AGENTS["n1"].start()
        jobs = [wait_final(jid, timeout=40) for jid in ids]
        want = [("COMPLETED", 0), ("COMPLETED", 0), ("FAILED", 3)]
        got = [(j and j["state"], last_attempt(j).get("exit_code")) for j in jobs]
        ok("3 attempt(s) taken up from the journal" in AGENTS["n1"].log()[before:],
           "n1, killed with kill -9 and started again, takes the 3 attempts up from its journal",
           AGENTS["n1"].tail())
        ok(got == want, "after kill -9 of n1 and its restart, every job ends with its outcome: "
           "COMPLETED, COMPLETED, FAILED exit 3", f"{got}\n" + detail(jobs[-1], "n1"))
        ok(all(j and len(attempts_of(j)) == 1 for j in jobs), "each job has exactly one attempt",
           "\n".join(json.dumps(attempts_of(j)) for j in jobs))
        lines = [(read(shared(f"launch-{jid}")) or "").splitlines() for jid in ids]
        ok(all(len(x) == 1 for x in lines), "no job was launched twice (one line per launch file)",
           f"{lines}\n{AGENTS['n1'].tail()}")
    finally:
        call("POST", "/v1/nodes/n2/resume", token=ADMIN)


def follow(jid):
    """A follow request for JID's stdout: (status, body, how it ended)."""
    return SRV.api.follow(f"/v1/jobs/{jid}/logs?stream=stdout&follow=1", token=MEMBER)


def logs_through_controller():
    """Check 7: follow, offset, another team's member, a job that never ran."""
    want = [f"line {i}" for i in range(1, 16)]
    jid = submit({"name": "talker", "command": sh(
        'i=1; while [ $i -le 15 ]; do echo "line $i"; i=$((i+1)); sleep 0.2; done')})
    later = submit({"name": "after-talker", "command": ["true"],
                    "dependencies": [{"type": "afterok", "job": jid}]})
    st, raw = logs(later)
    ok(st == 404, "logs of a job that never ran: 404", f"{st} {raw[:300]!r}")
    st, body, raw = call("POST", f"/v1/jobs/{later}/cancel", token=MEMBER)
    good, j = wait_job(jid, launched)
    running = j and j["state"] not in FINAL
    st, body, ended = follow(jid)
    text = body.decode(errors="replace")
    j = wait_final(jid)
    ok(running and st == 200 and ended == "end" and text.splitlines() == want,
       "a follow request started while the job runs gets every line, in order, and ends "
       "when the job ends", f"running {running}, {st}, ended: {ended}: {text!r}\n"
       f"{on_disk(jid)}\n{detail(j)}")
    st, full = logs(jid, stream="stdout")
    st2, tail = logs(jid, stream="stdout", offset=10)
    ok(st == 200 and full.decode(errors="replace").splitlines() == want and st2 == 200
       and tail == full[10:], "without follow the whole log; offset=10 gives the log from byte 10",
       f"{st} {full!r}\n{st2} {tail!r}")
    st, raw = logs(jid, token=OTHER, stream="stdout")
    ok(st == 403, "a member of another team: 403", f"{st} {raw[:300]!r}")
    follow_at_start()


def follow_at_start(n=6):
    """Follow requests made the moment jobs turn RUNNING (which they are from
    their assignment on), as `logs -f` right after a submit would: until the
    agent has the attempt it answers 404, and the request is made again; once
    it has, the log file may not exist yet, and the stream must wait for it,
    not break."""
    want = ["a", "b", "c"]
    ids = [submit({"name": f"quick-{k}", "command": sh("echo a; echo b; sleep 0.5; echo c")})
           for k in range(n)]
    got, early = {}, [0]

    def one(jid):
        if not wait_job(jid, state_is("RUNNING", *FINAL), step=0.01)[0]:
            return
        deadline = time.monotonic() + DEADLINE_S
        while True:
            got[jid] = follow(jid)
            if got[jid][0] != 404 or time.monotonic() > deadline:
                return
            early[0] += 1
            time.sleep(0.005)

    threads = [threading.Thread(target=one, args=(jid,)) for jid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for jid in ids:
        wait_final(jid)
    if early[0]:
        diag(f"{early[0]} follow request(s) answered 404 before their attempt was launched")
    bad = {jid: (st, how, body) for jid, (st, body, how) in got.items()
           if st != 200 or how != "end" or body.decode(errors="replace").splitlines() != want}
    ok(len(got) == n and not bad, f"{n} follow requests made as soon as their jobs are RUNNING "
       "each get the whole log and end cleanly", f"{len(got)} made; failed: {bad}\n" + "\n".join(
           on_disk(jid) for jid in bad))


def sampling():
    """Check 8: GPU samples reach the controller, follow the GPU file, and list
    a job's process with its job id."""
    n1 = AGENTS["n1"]
    util = lambda: [g.get("utilization_pct") for g in samples("n1")]  # noqa: E731
    good = wait_until(lambda: util() == [BASE_UTIL] * 8)
    ok(good, f"GET /v1/nodes shows n1's 8 GPU samples with the fake's utilization {BASE_UTIL}",
       f"{samples('n1')}\n{n1.tail()}")
    n1.write_gpus({0: 77})
    good = wait_until(lambda: (sample_of("n1", n1.uuids[0]) or {}).get("utilization_pct") == 77)
    ok(good, "after n1's GPU file says 77 for GPU 0, the controller shows 77",
       f"{sample_of('n1', n1.uuids[0])}\n{n1.tail()}")
    n1.write_gpus()
    jid = submit({"name": "sampled", "command": ["sleep", "60"]})
    good, j = wait_job(jid, launched)
    node, gpus = (job_nodes(j) or [None])[0], job_gpus(j)

    def listed():
        g = sample_of(node, gpus[0]) if gpus else None
        return g and [p for p in g.get("processes") or [] if p.get("job") == jid]

    procs = good and node in AGENTS and wait_until(listed)
    ok(procs and procs[0].get("attempt") == 1 and pid_alive(procs[0].get("pid")),
       "while a job runs, its process appears in its GPU's sample with its job id and attempt",
       f"{node} {gpus}: {sample_of(node, gpus[0]) if gpus else None}\n{detail(j)}")
    call("POST", f"/v1/jobs/{jid}/cancel", token=MEMBER)
    wait_final(jid)


def root_refused():
    """Check 9: a job whose user maps to root, on an agent without --allow-root."""
    st, me, raw = call("GET", "/v1/users/admin", token=ADMIN)
    unix = (me or {}).get("unix_user")
    diag(f"the admin's unix_user: {unix!r} (users made through the API must name one)")
    jid = submit({"name": "as-root", "team": "research", "command": ["id", "-u"]}, token=ADMIN)
    j = wait_final(jid)
    why = " ".join(str(x) for x in ((j or {}).get("reason"), last_attempt(j).get("reason")))
    ok(j and j["state"] == "FAILED" and "root" in why.lower(),
       "a job that would run as root, on an agent without --allow-root, ends FAILED with a "
       "reason that names root", detail(j))
    diag(f"its reason: {why!r}")



# -- The network half without root. -------------------------------------------------------


def proc_status(pid):
    """/proc/PID/status as a dict of its fields (values as text)."""
    out = {}
    for line in (read(f"/proc/{pid}/status") or "").splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def priv_half(pid):
    """The agent's privileged half: its child named gpuorch-priv."""
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in (read(f"/proc/{pid}/task/{task}/children") or "").split():
            if (read(f"/proc/{child}/comm") or "").strip() == "gpuorch-priv":
                return int(child)
    return None


def unprivileged():
    """Each agent's network process (the one the test started) runs as the
    account: real, effective, saved and filesystem uid and gid, no capability,
    no_new_privs set; its privileged half is root."""
    acct = pwd.getpwnam(RUN_AS)
    want_uid, want_gid = " ".join([str(acct.pw_uid)] * 4), " ".join([str(acct.pw_gid)] * 4)
    seen = {}
    for name, ag in AGENTS.items():
        st = proc_status(ag.proc.pid)
        ph = priv_half(ag.proc.pid)
        pst = proc_status(ph) if ph else {}
        seen[name] = {k: st.get(k) for k in ("Uid", "Gid", "CapPrm", "CapEff", "NoNewPrivs")}
        seen[name]["priv"] = (ph, pst.get("Uid"))
    ok(all(v["Uid"].split() == want_uid.split() and v["Gid"].split() == want_gid.split()
           for v in seen.values()),
       f"each agent's network half runs as {RUN_AS}: real, effective, saved and fs uid and gid "
       "(/proc/PID/status)", json.dumps(seen))
    ok(all(int(v["CapPrm"], 16) == 0 and int(v["CapEff"], 16) == 0 and v["NoNewPrivs"] == "1"
           for v in seen.values()),
       "it keeps no capability and has no_new_privs set", json.dumps(seen))
    ok(all(v["priv"][0] and v["priv"][1].split() == ["0"] * 4 for v in seen.values()),
       "its privileged half (gpuorch-priv) runs as root", json.dumps(seen))


def script_job():
    """A script job: the script, written by the unprivileged half, is given
    to the job's user by the privileged half, and runs as that user."""
    jid = submit({"name": "scripted",
                  "script": "#!/bin/sh\necho \"script as $(id -un)\"\n"})
    j = wait_final(jid)
    st, raw = logs(jid, stream="stdout")
    ok(j and j["state"] == "COMPLETED" and raw == f"script as {JOB_USER}\n".encode(),
       f"a script job runs as {JOB_USER} and its log streams back", f"{st} {raw!r}\n{detail(j)}")


def priv_socket_fd(pid):
    """The agent's end of its socket to the privileged half: its only
    SOCK_SEQPACKET unix socket that lives (log opens make short-lived ones)."""
    seqpacket = set()
    for line in (read("/proc/net/unix") or "").splitlines()[1:]:
        f = line.split()
        if len(f) >= 7 and f[4] == "0005":
            seqpacket.add(f[6])
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in seqpacket:
            fds.append(int(fd))
    return fds[0] if len(fds) == 1 else None


def in_flight(pid, fd):
    """Whether a thread of PID waits on FD (recvmsg or sendmsg on it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        words = (read(f"/proc/{pid}/task/{task}/syscall") or "").split()
        if len(words) > 1 and words[0] in ("46", "47") and int(words[1], 16) == fd:
            return True
    return False


def pidfd_getfd(pid, fd):
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd
        if got < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return got
    finally:
        os.close(pidfd)


def raw_request(pid, payload):
    """Sends PAYLOAD on the agent's own socket to its privileged half while the
    agent is stopped with no request of its own in flight, and returns the
    reply's code and message (None: no quiet moment came)."""
    fd = priv_socket_fd(pid)
    if fd is None:
        return None
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(0.2)  # let a request already sent be answered (seen below)
            if in_flight(pid, fd):
                continue
            # A duplicate of the agent's descriptor: closing it leaves the agent's.
            with socket.socket(fileno=pidfd_getfd(pid, fd)) as mine:
                pending = struct.unpack("i", fcntl.ioctl(mine, termios.FIONREAD, b"\0" * 4))[0]
                if pending:  # a reply its thread has yet to read: not ours to take
                    continue
                mine.send(payload)
                reply = mine.recv(1 << 16)
            rc = struct.unpack_from("<i", reply)[0]
            msg = reply[len(reply) - 512:].split(b"\0")[0].decode(errors="replace")
            return rc, msg
        finally:
            os.kill(pid, signal.SIGCONT)
    return None


def refused_through_the_socket():
    """A request the table does not allow, and one with a field out of range,
    sent on the agent's own socket: refused by the privileged half, which goes
    on serving (a job runs after)."""
    n1 = AGENTS["n1"]
    unknown = struct.pack("<6I", 99, 0, 0, 0, 0, 0)
    got = raw_request(n1.proc.pid, unknown)
    ok(got and got[0] == -22 and got[1].startswith("type: 99"),
       "a request of a type the privileged half's table lacks, sent on the agent's socket, is "
       "refused (EINVAL, 'type: 99 ...')", repr(got))
    attribute_zero = struct.pack("<II64i", 4, 0, *([0] * 64))
    got = raw_request(n1.proc.pid, attribute_zero)
    ok(got and got[0] == -22 and got[1].startswith("n: 0"),
       "an attribute request for no pid is refused naming its field", repr(got))
    jid = submit({"name": "after-refusals", "command": ["true"]})
    j = wait_final(jid)
    ok(j and j["state"] == "COMPLETED", "the agents go on running jobs after the refusals",
       detail(j))


def old_journal_moved():
    """A journal found at STATE/journal (root's) is moved to STATE/net/journal
    at start, and the attempt it lists is taken up, not launched again."""
    st, _, raw = call("POST", "/v1/nodes/n1/drain", token=ADMIN)
    if st != 200:
        raise RuntimeError(f"drain n1: {st} {raw!r}")
    try:
        mark, go = shared("moved-launch"), shared("moved-go")
        jid = submit({"name": "moved-journal", "command": sh(
            f'echo "attempt $GPUORCH_ATTEMPT" >> {mark}; i=0; '
            f'while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done')})
        good, j = wait_job(jid, launched)
        n2 = AGENTS["n2"]
        ok(good and job_nodes(j) == ["n2"], "a job runs on n2 (n1 drained)", detail(j, "n2"))
        code = n2.stop()
        net, old = os.path.join(n2.state, "net", "journal"), os.path.join(n2.state, "journal")
        os.rename(net, old)
        os.chown(old, 0, 0)
        before = len(n2.log())
        n2.start()
        write_atomic(go, "go\n")
        j = wait_final(jid)
        log = n2.log()[before:]
        ok(code == 0 and os.path.exists(net) and not os.path.exists(old)
           and "1 attempt(s) taken up from the journal" in log,
           "an agent started on a state with the journal at STATE/journal "
           "moves it to STATE/net/journal and takes its attempt up", f"{code}\n{n2.tail()}")
        ok(j and j["state"] == "COMPLETED" and (read(mark) or "").splitlines() == ["attempt 1"],
           "that job ends COMPLETED, launched once", f"{read(mark)!r}\n{detail(j, 'n2')}")
    finally:
        call("POST", "/v1/nodes/n1/resume", token=ADMIN)


def shim_links_libc_only():
    """gpuorch-shim, which every launch execs as root, needs libc and nothing else
    (the dynamic loader and the vDSO apart; in a sanitized build also the
    sanitizers' runtimes and what they need)."""
    shim = os.path.join(os.path.dirname(BIN), "gpuorch-shim")

    def libs(path):
        """{name: path} of what ldd lists for PATH, loader and vDSO left out; its text."""
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        found = {}
        for line in out.splitlines():
            words = line.split()
            if words and not words[0].startswith("linux-vdso") and "ld-linux" not in words[0]:
                found[os.path.basename(words[0])] = words[2] if len(words) > 2 else words[0]
        return found, out

    found, out = libs(shim)
    runtimes = [n for n in found if n.startswith(("libasan.so", "libubsan.so"))]
    theirs = {n for rt in runtimes for n in libs(found[rt])[0]}
    rest = set(found) - set(runtimes) - (theirs - {"libc.so.6"})
    ok(os.access(shim, os.X_OK) and rest == {"libc.so.6"},
       "gpuorch-shim, built beside gpuorch, links libc only (ldd)", out)


def restart(agent):
    """Starts AGENT and waits until it has registered (a SIGTERM before it
    handles signals would kill it); the length its log had before."""
    before = len(agent.log())
    agent.start()
    wait_until(lambda: f"registered node '{agent.name}'" in agent.log()[before:], timeout=30)
    return before


def exits_seen():
    """An exit is seen through the shim's pidfd; with --exit-poll (no pidfd, as
    on kernels before 5.3) by reading its status file; both reported."""
    st, _, raw = call("POST", "/v1/nodes/n2/drain", token=ADMIN)
    if st != 200:
        raise RuntimeError(f"drain n2: {st} {raw!r}")
    n1, n3 = AGENTS["n1"], AGENTS["n3"]
    try:
        go = shared("exit-go")
        wait_go = sh(f'i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); '
                     f'done; exit 4')
        jid = submit({"name": "exit-by-pidfd", "command": wait_go})
        good = wait_until(lambda: f"job {jid}.1: started" in n1.log(), timeout=30)
        write_atomic(go, "go\n")
        j = wait_final(jid)
        ok(good and j and j["state"] == "FAILED" and last_attempt(j).get("exit_code") == 4
           and f"job {jid}.1: exited (seen by its pidfd)" in n1.log(),
           "the agent sees a job's exit through its shim's pidfd and reports it (exit 4)",
           detail(j, "n1"))
        os.unlink(go)
        n3.stop()
        n3.flags["exit-poll"] = True
        before = restart(n3)
        jid = submit({"name": "exit-by-poll", "pool": "frac", "gpus": 1, "command": wait_go})
        good = wait_until(lambda: f"job {jid}.1: started" in n3.log()[before:], timeout=30)
        write_atomic(go, "go\n")
        j = wait_final(jid)
        log = n3.log()[before:]
        ok(good and j and j["state"] == "FAILED" and last_attempt(j).get("exit_code") == 4
           and "exits are seen by reading the status files every second (--exit-poll)" in log
           and f"job {jid}.1: exited (seen by reading its status file)" in log,
           "with --exit-poll (no pidfd) the agent sees the exit by reading the status file, "
           "and reports it", detail(j, "n3"))
    finally:
        call("POST", "/v1/nodes/n2/resume", token=ADMIN)
        if n3.flags.pop("exit-poll", None):
            n3.stop()
            restart(n3)


def cleanup_jobs():
    """Cancels what a failed check left running, so that no shim outlives the test."""
    st, body, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1000", token=ADMIN)
    live = [j["id"] for j in (body or {}).get("jobs") or []] if st == 200 else []
    for jid in live:
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    for jid in live:
        wait_final(jid, timeout=10)


def main():
    print("TAP version 13")
    setup()
    watch = GpuWatch(SRV.client(ADMIN), [u for ag in AGENTS.values() for u in ag.uuids]).start()
    for step in (unprivileged, visible_devices, script_job, array_index, output_patterns,
                 sampling, fractional, dirty_gpu, gang, time_limit, logs_through_controller,
                 root_refused, restart_after_kill9, old_journal_moved, cancel,
                 refused_through_the_socket, shim_links_libc_only, exits_seen):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
            for ag in AGENTS.values():
                if ag.proc and ag.proc.poll() is not None:
                    diag(f"agent {ag.name} had exited ({ag.proc.returncode}); starting it again")
                    ag.start()
    cleanup_jobs()
    seen = watch.stop()
    ok(watch.samples > 0 and not seen,
       f"in {watch.samples} samples no GPU was in two jobs' attempts, or ran two jobs' "
       "processes, at once (fractions apart)", "\n".join(seen))
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
    for pid in LEFT:
        kill_job_process(pid)
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""steps_test.py GPUORCH - job steps (`gpuorch run`, Slurm's srun) inside a
2-node gang: a real `gpuorch server` and two real agents on the fake NVML
(n1 and n2, 8 GPUs each), batch scripts submitted with `gpuorch submit` that
call `gpuorch run`. Prints TAP.

What it checks: a batch script runs once, on the gang's first node, while the
second node's agent holds its part of the allocation; a plain shell step of 4
tasks gets each task's rank, node, local rank and its own GPUs
(--gpus-per-task); Debian's PyTorch (torch.distributed, gloo on the CPU) does
an all_reduce over 4 tasks on 2 nodes and the job is COMPLETED; a task that
exits 3 is named by `gpuorch run` ("task 2 (node n2): exited with status 3")
and the job is FAILED; SIGTERM to `gpuorch run` ends the step's tasks on
both nodes; `gpuorch alloc` driven through a pty opens a shell on the first
node's terminal (its job id, a /dev/pts of the job's user), `gpuorch run`
and `gpuorch run --pty -w n2` work from it, a window size change reaches
it, and its `exit 3` is alloc's status; `gpuorch run --pty` outside a job
allocates, runs on a terminal there and exits with the task's status; a request to an agent's step
server, or its input route, without the attempt's credential is refused
(401).

Needs root (jobs run as gpuorch-test1) and python3-torch (scripts/setup.sh);
the torch checks are skipped, and say so, without it. Agents and server are
child processes stopped by PID; conditions are polled with deadlines.
KEEP_TMP=1 keeps the directories."""

import fcntl
import json
import os
import pwd
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, agent_cgroups, diag, fake_gpu_uuid, ok  # noqa: E402
from harness import end_checks, remove_cgroups, remove_tmp, run_as_root, run_steps  # noqa: E402
from harness import wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
# Two nodes of 8 GPUs: Slurm's `--nodes=2 --gpus=16` (16 in all, 8 on each).
GANG = "#SBATCH --nodes=2 --gpus=16\n"
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch

SRV = Server(BIN, "gpuorch-steps-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-steps-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = None
AGENTS = {}
CGROUP_BASE = None

ALLREDUCE = r'''
import os, sys
import torch
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t, op=dist.ReduceOp.SUM)
want = world * (world + 1) / 2
print(f"rank {rank} of {world} on {os.environ['GPUORCH_NODE']}: sum {t.item():g} want {want:g}",
      flush=True)
dist.barrier()
dist.destroy_process_group()
if str(rank) == os.environ.get("FAIL_RANK"):
    sys.exit(3)
sys.exit(0 if t.item() == want else 1)
'''


def setup():
    global ADMIN, MEMBER, CGROUP_BASE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for path, body in (("/v1/pools/main", {"description": "8-GPU nodes"}),
                       ("/v1/priority-classes/normal", {"order": 0}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 16, "borrow_limit": -1}]}),
                       ("/v1/users/alice",
                        {"unix_user": JOB_USER, "team": "research", "role": "member"})):
        SRV.api.expect("PUT", path, body, token=ADMIN)
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=steps", want=(201,),
                            token=ADMIN)["token"]
    for name, no in (("n1", 1), ("n2", 2)):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [fake_gpu_uuid(no, g) for g in range(8)],
                       kill_grace=2)
        ag.write_gpu_list([{"uuid": u, "utilization": 30, "memory_utilization": 10,
                            "process_memory_mib": 512} for u in ag.uuids])
        AGENTS[name] = ag
    CGROUP_BASE, roots = agent_cgroups("gpuorch-steps-test", list(AGENTS))
    for name, ag in AGENTS.items():
        ag.cgroup = roots.get(name)
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return nodes if all(nodes.get(n, {}).get("state") == "up" and nodes[n].get("log_port")
                            for n in AGENTS) else None

    nodes = wait_until(registered, timeout=30, step=0.1)
    ok(nodes, "two agents register, n1 and n2 with 8 GPUs each",
       "\n".join(ag.tail() for ag in AGENTS.values()))
    if not nodes:
        raise RuntimeError("the agents did not register")
    return nodes


def cli(*args, timeout=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update(GPUORCH_SERVER=f"http://127.0.0.1:{SRV.port}", GPUORCH_TOKEN=MEMBER)
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout,
                       cwd=SHARED, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_final(jid, timeout=90):
    return wait_until(lambda: (lambda j: j if j and j["state"] in FINAL else None)(get_job(jid)),
                      timeout=timeout, step=0.2) or get_job(jid)


def shared(name):
    return os.path.join(SHARED, name)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def submit_script(name, body):
    """Writes SHARED/NAME.sh (a batch script with the gang's directives, its
    output in SHARED/NAME.out) and submits it; the job's id, or None."""
    path = shared(f"{name}.sh")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\n{GANG}#SBATCH -J {name} -o {shared(name + '.out')}\n"
                f"#SBATCH -D {SHARED}\nGPUORCH={BIN}\n{body}")
    rc, out, err = cli("submit", "--pool", "main", "--parsable", path)
    try:
        return int(out.strip().split(";")[0])
    except ValueError:
        diag(f"submit {name}: {rc} {out!r} {err!r}")
        return None


def nodes_of(j):
    cur = (j or {}).get("current_attempt") or ((j or {}).get("attempts") or [{}])[-1]
    v = cur.get("nodes") or cur.get("node") or []
    return v if isinstance(v, list) else [v]


def detail(j, name):
    return "\n".join([json.dumps(j)[:1500], read(shared(name + ".out"))[-3000:]] +
                     [ag.tail() for ag in AGENTS.values()])


# -- The checks. ---------------------------------------------------------------------------


def shell_step():
    """A 4-task plain shell step: ranks, nodes and GPU bindings."""
    jid = submit_script("ranks", 'echo "script on $GPUORCH_NODE"\n'
                        '"$GPUORCH" run -n 4 --gpus-per-task 4 -l sh -c '
                        "'echo \"$SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $GPUORCH_NODE "
                        "$RANK $LOCAL_RANK $WORLD_SIZE $CUDA_VISIBLE_DEVICES $SLURM_JOB_ID "
                        "$SLURM_NTASKS $SLURM_STEP_NUM_NODES\"'\n")
    j = wait_final(jid) if jid else None
    out = read(shared("ranks.out"))
    ok(j and j["state"] == "COMPLETED" and sorted(nodes_of(j)) == ["n1", "n2"],
       "a script with --nodes=2 runs as a 2-node gang and ends COMPLETED", detail(j, "ranks"))
    ok(out.count("script on ") == 1 and "script on n1" in out,
       "the batch script runs once, on the gang's first node (n1)", out[-2000:])
    rows = {}
    for line in out.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label.isdigit():
            rows[int(label)] = rest.split()
    want_nodes = {0: ("0", "n1"), 1: ("0", "n1"), 2: ("1", "n2"), 3: ("1", "n2")}
    good = sorted(rows) == [0, 1, 2, 3] and all(
        r[0] == str(t) and r[1] == str(t % 2) and (r[2], r[3]) == want_nodes[t]
        and r[4] == str(t) and r[5] == str(t % 2) and r[6] == "4" for t, r in rows.items())
    ok(good, "4 tasks, two per node, each with SLURM_PROCID/RANK = its rank, SLURM_LOCALID/"
       "LOCAL_RANK its rank on the node, SLURM_NODEID and GPUORCH_NODE its node, WORLD_SIZE 4, "
       "each line labelled with -l", out[-2000:])
    gpus = {t: r[7].split(",") for t, r in rows.items() if len(r) > 7}
    node_uuids = {"n1": set(AGENTS["n1"].uuids), "n2": set(AGENTS["n2"].uuids)}
    bound = len(gpus) == 4 and all(
        len(g) == 4 and set(g) <= node_uuids[want_nodes[t][1]] for t, g in gpus.items()) \
        and not set(gpus[0]) & set(gpus[1]) and not set(gpus[2]) & set(gpus[3])
    ok(bound, "--gpus-per-task 4: each task sees 4 GPUs of its own node in "
       "CUDA_VISIBLE_DEVICES, none shared with the other task there", json.dumps(gpus))
    ok(len(rows) == 4 and all(r[8:11] == [str(jid), "4", "2"] for r in rows.values()),
       "each task has the Slurm variables of the job and step: SLURM_JOB_ID, SLURM_NTASKS 4, "
       "SLURM_STEP_NUM_NODES 2", json.dumps(rows))


def torch_available():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True)
    return r.returncode == 0


def torch_steps():
    if not torch_available():
        for name in ("an all_reduce over 4 tasks on 2 nodes completes",
                     "a failing task is named and the job FAILED"):
            ok(True, f"{name} # SKIP python3-torch is not installed (scripts/setup.sh)")
        return
    with open(shared("allreduce.py"), "w") as f:
        f.write(ALLREDUCE)
    run = ('export GLOO_SOCKET_IFNAME=lo\n'
           '"$GPUORCH" run --ntasks-per-node 2 -l ' + PYTHON + ' allreduce.py 2>&1\n')
    jid = submit_script("torch", run)
    j = wait_final(jid, timeout=180) if jid else None
    out = read(shared("torch.out"))
    sums = [line for line in out.splitlines() if ": rank " in line and "sum 10 want 10" in line]
    ok(j and j["state"] == "COMPLETED" and len(sums) == 4,
       "Debian's PyTorch: 4 tasks on 2 nodes do an all_reduce (gloo) through `gpuorch run` in "
       "the script, every task gets the sum 10, and the job is COMPLETED", detail(j, "torch"))
    jid = submit_script("torchfail", "export GLOO_SOCKET_IFNAME=lo FAIL_RANK=2\n" + run)
    j = wait_final(jid, timeout=180) if jid else None
    out = read(shared("torchfail.out"))
    ok(j and j["state"] == "FAILED" and "task 2 (node n2): exited with status 3" in out,
       "a task that exits 3 is named by `gpuorch run` (task 2 (node n2): exited with status 3) "
       "and the job ends FAILED", detail(j, "torchfail"))


def interrupted_step():
    """SIGTERM to `gpuorch run` ends its tasks on both nodes."""
    pids = shared("sleepers")
    jid = submit_script("interrupt", f'"$GPUORCH" run sh -c \'echo $$ >> {pids}; exec sleep 300\' &\n'
                        'RUN=$!\n'
                        f'i=0; while [ "$(wc -l < {pids} 2>/dev/null)" != 2 ] && [ $i -lt 300 ]; '
                        'do sleep 0.1; i=$((i+1)); done\n'
                        'kill -TERM $RUN; wait $RUN; echo "run exited $?"\n'
                        'sleep 4\n'
                        f'for p in $(cat {pids}); do kill -0 $p 2>/dev/null && echo "alive $p"; '
                        'done; true\n')
    j = wait_final(jid) if jid else None
    out = read(shared("interrupt.out"))
    pid_list = read(pids).split()
    alive = []
    for p in pid_list:
        try:
            os.kill(int(p), 0)
            alive.append(p)
        except (OSError, ValueError):
            pass
    ok(j and j["state"] == "COMPLETED" and len(pid_list) == 2 and "run exited 143" in out
       and "alive" not in out and not alive,
       "SIGTERM to `gpuorch run` ends its tasks on both nodes, and it exits 128+15",
       detail(j, "interrupt") + f"\nalive: {alive}")


def jobs_named(name):
    st, body, _ = call("GET", "/v1/jobs", token=ADMIN, query={"state": ",".join(
        ("PENDING", "RUNNING") + FINAL)})
    jobs = (body or {}).get("jobs") or [] if st == 200 else []
    return sorted(j["id"] for j in jobs if (j.get("spec") or {}).get("name") == name)


def run_outside():
    """`gpuorch run -N 2 --gpus-per-node 8` outside a job: it allocates, says
    it waits while the GPUs are busy, runs the step, and releases them."""
    blocker = SRV.api.expect("POST", "/v1/jobs", {
        "name": "blocker", "pool": "main", "gpus": 16, "multi_node": True, "workdir": SHARED,
        "command": ["sh", "-c", "sleep 4"]}, want=(201,), token=MEMBER)["id"]
    wait_until(lambda: (get_job(blocker) or {}).get("state") == "RUNNING", timeout=30, step=0.1)
    rc, out, err = cli("run", "-N", "2", "--gpus-per-node", "8", "-J", "outside", "-l", "--",
                       "sh", "-c", 'echo "task $SLURM_PROCID on $GPUORCH_NODE"', timeout=120)
    ids = jobs_named("outside")
    j = wait_final(ids[-1]) if ids else None
    lines = sorted(line for line in out.splitlines() if ": task " in line)
    ok(rc == 0 and len(lines) == 2 and {line.split()[-1] for line in lines} == {"n1", "n2"},
       "outside a job, `gpuorch run -N 2 --gpus-per-node 8` allocates two nodes and runs one "
       "task on each", f"{rc}\n{out}\n{err}")
    ok(f"job {ids[-1] if ids else '?'} queued and waiting for resources" in err,
       "while the GPUs are busy it says 'job N queued and waiting for resources', as srun does",
       err)
    ok(j and j["state"] == "CANCELLED" and wait_final(blocker)["state"] == "COMPLETED",
       "when the step ends, the allocation's job is released (CANCELLED)", json.dumps(j)[:800])


def read_until(fd, want, timeout=60):
    """Reads the pty until every string of WANT appeared; what it read."""
    got = b""
    deadline = time.monotonic() + timeout
    while not all(w.encode() in got for w in want):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    return got.decode(errors="replace")


def on_pty(args, env):
    """Starts BIN ARGS on a new pty (its controlling terminal) in SHARED: the
    process, the pty's master and the slave's name."""
    master, slave = os.openpty()
    name = os.ttyname(slave)

    def controlling():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([BIN, *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                            cwd=SHARED, preexec_fn=controlling)
    os.close(slave)
    return proc, master, name


def wait_proc(proc):
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def wrong_key_refused(port, path):
    """The HTTP status of POST PATH on an agent's step server with a wrong credential."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST", data=b"",
                                 headers={"Authorization": "Bearer " + "0" * 64})
    try:
        urllib.request.urlopen(req, timeout=10)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


def alloc_with_pty(nodes):
    """`gpuorch alloc` driven through a pty: a shell on the allocation's first
    node, on a terminal there, with the allocation's variables; a step and an
    interactive step run from it; a window size change; its exit status; the
    allocation released."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update(GPUORCH_SERVER=f"http://127.0.0.1:{SRV.port}", GPUORCH_TOKEN=MEMBER,
               SHELL="/bin/sh", PS1="alloc$ ")
    proc, master, here = on_pty(["alloc", "-N", "2", "--gpus-per-node", "8", "-J", "interactive"],
                                env)
    seen = read_until(master, ["granted job allocation", "alloc$ "])
    ids = jobs_named("interactive")
    jid = ids[-1] if ids else 0
    os.write(master, b'echo "job=$SLURM_JOB_ID node=$GPUORCH_NODE"; tty; hostname\n')
    got = read_until(master, [f"job={jid} node=n1", "/dev/pts/", "alloc$ "])
    seen += got
    ttys = [w for w in got.split() if w.startswith("/dev/pts/")]
    try:
        owner = os.stat(ttys[0]).st_uid if ttys else -1
    except OSError:
        owner = -1
    ok(f"job={jid} node=n1" in got and ttys and ttys[0] != here
       and owner == pwd.getpwnam(JOB_USER).pw_uid,
       "`gpuorch alloc` with no command opens a shell on the allocation's first node (n1), "
       "SLURM_JOB_ID the allocation's, on a terminal there (a /dev/pts device of the job's "
       "user, not the one alloc runs on)", f"{here} {ttys} {owner}\n{seen[-2000:]}")
    status = wrong_key_refused(nodes["n1"]["log_port"],
                               f"/v1/steps/{jid}/1/input/{'ab' * 16}")
    ok(status == 401, "the step input route refuses a wrong credential (401) for an attempt "
       "that runs there", str(status))
    os.write(master, f"{BIN} run -l sh -c 'echo step-$SLURM_PROCID-$SLURM_JOB_ID'\n".encode())
    seen += read_until(master, [f"0: step-0-{jid}", f"1: step-1-{jid}", "alloc$ "])
    ok(f"0: step-0-{jid}" in seen and f"1: step-1-{jid}" in seen,
       "`gpuorch run` in the shell runs a task on each of the allocation's nodes, with "
       "SLURM_JOB_ID the allocation's", seen[-2000:])
    os.write(master, f"{BIN} run --pty -w n2 sh -c 'echo inner=$GPUORCH_NODE; "
             "read line; echo got=$line; exit 4'; echo inner-exit=$?\n".encode())
    seen += read_until(master, ["inner=n2"])
    os.write(master, b"typed\n")
    got = read_until(master, ["got=typed", "inner-exit=4", "alloc$ "])
    seen += got
    ok("got=typed" in got and "inner-exit=4" in got,
       "`gpuorch run --pty -w n2` in the shell runs an interactive task on n2 that reads what "
       "is typed, and exits with its status (4)", seen[-2000:])
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    os.write(master, b"stty size\n")
    got = read_until(master, ["33 101"])
    seen += got
    ok("33 101" in got, "a window size change of alloc's terminal reaches the shell's "
       "(stty size: 33 101)", seen[-1500:])
    os.write(master, b"exit 3\n")
    seen += read_until(master, ["relinquishing job allocation"])
    rc = wait_proc(proc)
    os.close(master)
    j = wait_final(jid) if jid else None
    ok(rc == 3 and j and j["state"] == "CANCELLED",
       "the shell's `exit 3` ends `gpuorch alloc` with status 3 and releases the allocation",
       f"{rc}\n{json.dumps(j)[:800]}\n{seen[-800:]}")


def pty_outside():
    """`gpuorch run --pty` outside a job allocates, runs the task on a terminal
    on the allocation's node, exits with its status and releases the job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update(GPUORCH_SERVER=f"http://127.0.0.1:{SRV.port}", GPUORCH_TOKEN=MEMBER)
    proc, master, _ = on_pty(["run", "--pty", "-G", "1", "-J", "ptyout", "sh", "-c",
                              "echo node=$GPUORCH_NODE; tty; read x; echo got=$x; exit 6"], env)
    seen = read_until(master, ["node=n", "/dev/pts/"])
    os.write(master, b"typed-outside\r")
    seen += read_until(master, ["got=typed-outside"])
    rc = wait_proc(proc)
    seen += read_until(master, [], timeout=1)
    os.close(master)
    ids = jobs_named("ptyout")
    j = wait_final(ids[-1]) if ids else None
    ok(rc == 6 and "got=typed-outside" in seen and "/dev/pts/" in seen and j
       and j["state"] == "CANCELLED",
       "outside a job, `gpuorch run --pty -G 1 CMD` allocates, runs CMD on a terminal on the "
       "allocation's node (reading what is typed), exits with its status (6) and releases the "
       "allocation", f"{rc}\n{seen[-1500:]}\n{json.dumps(j)[:600]}")
    r = subprocess.run([BIN, "run", "--pty", "-G", "1", "-J", "ptypipe", "sh", "-c",
                        "cat; echo cat-ended; exit 2"], input="line1\nline2\n",
                       capture_output=True, text=True, env=env, timeout=90, cwd=SHARED)
    ok(r.returncode == 2 and "line2" in r.stdout and "cat-ended" in r.stdout,
       "`gpuorch run --pty` with a pipe for stdin: the task reads it, and its end (the "
       "terminal's end-of-file), then exits with its status (2)",
       f"{r.returncode} {r.stdout!r} {r.stderr!r}")


def credential_required(nodes):
    """The step route refuses a request without the attempt's credential."""
    port = nodes["n2"]["log_port"]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/steps/1/1", method="POST",
                                 data=b"{}", headers={"Authorization": "Bearer " + "0" * 64,
                                                      "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10)
        status = 200
    except urllib.error.HTTPError as e:
        status = e.code
    ok(status in (401, 404), "an agent's step route refuses a wrong credential (401) or an "
       "attempt it does not run (404)", str(status))


def main():
    print("TAP version 13")
    nodes = setup()
    run_steps((shell_step, torch_steps, interrupted_step, run_outside,
               lambda: alloc_with_pty(nodes), pty_outside, lambda: credential_required(nodes)))
    end_checks(AGENTS, SRV)


def on_exit():
    for ag in AGENTS.values():
        ag.kill()
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

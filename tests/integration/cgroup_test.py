#!/usr/bin/env python3
"""cgroup_test.py GPUORCH - cgroup limits through a real node agent (`gpuorch
agent`) under a real `gpuorch server`, on the fake NVML ($GPUORCH_FAKENVML,
else BUILD/tests/libnvidia-ml.so.1). Jobs really run, as the test user
gpuorch-test1. Prints TAP.

What it checks: the agent's attempts get a cgroup of their own in the cpu and
the memory controller's hierarchy (on cgroup v2 where the cgroup2 mount has
them, else in their v1 hierarchies, as on a hybrid machine); a job whose
memory is over its --mem is killed by the kernel, and its attempt and the job
end FAILED with the reason "out of memory: ..." in the API and in `gpuorch
show`; a job's memory limit is its mem_mib; its CPU weight (cpu.weight on
v2, cpu.shares on v1) follows its cpus: four CPUs weigh four times one.

The agent's cgroup root is MOUNT/gpuorch-cgroup-test-PID/n1 (harness.
agent_cgroups); the agent makes its directories in the v1 hierarchies, and
the test removes all of them at its end. A machine where the cpu or memory
controller is not to be had fails the checks, saying what is missing; the
test never skips them (except without root, when nothing of it can run).

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Agent and server are child processes stopped by PID;
conditions are polled with deadlines, never timed. KEEP_TMP=1 keeps the
directories."""

import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEADLINE_S, FakeAgent, Server, agent_cgroups, cgroup_mounts,  # noqa: E402
                     cgroup_v1_twins, fake_gpu_uuid, ok, remove_cgroups, remove_tmp,
                     run_as_root, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
MEM_MIB = 64  # the out-of-memory job's limit; it writes three times as much

SRV = Server(BIN, "gpuorch-cgroup-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-cgroup-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
ADMIN = MEMBER = None
AGENT = None
CGROUP_BASE = None


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def submit(spec):
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1, "max_retries": 0}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=MEMBER)["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_final(jid):
    return wait_until(lambda: (lambda j: j if j and j["state"] in FINAL else None)(get_job(jid)),
                      timeout=DEADLINE_S * 3, step=0.1) or get_job(jid)


def command_pid(jid):
    """The pid of attempt 1's command, from the shim's pid file, once written."""
    def read():
        try:
            with open(os.path.join(AGENT.state, "attempts", f"{jid}.1", "pid")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None
    return wait_until(read, timeout=DEADLINE_S, step=0.1)


def layout():
    """{controller: (kind, mount point)} of this machine: "v2" where the
    cgroup2 mount's root enables the controller for its children, else "v1"
    where a v1 hierarchy has it mounted."""
    mounts = cgroup_mounts()
    v2 = next((m[0] for m in mounts if m[1] == "cgroup2"), None)
    enabled = []
    if v2:
        try:
            with open(os.path.join(v2, "cgroup.subtree_control")) as f:
                enabled = f.read().split()
        except OSError:
            pass
    out = {}
    for ctrl in ("cpu", "memory"):
        v1 = next((m[0] for m in mounts if m[1] == "cgroup" and ctrl in m[2]), None)
        out[ctrl] = ("v2", v2) if ctrl in enabled else ("v1", v1) if v1 else (None, None)
    return out


def missing_text(ctrl):
    mounts = cgroup_mounts()
    return (f"this machine has no {ctrl} controller the agent can use: the cgroup2 mount "
            f"({next((m[0] for m in mounts if m[1] == 'cgroup2'), 'none')}) does not enable it "
            f"for its children and no cgroup v1 hierarchy has it mounted "
            f"(cgroup mounts: {mounts}); see /proc/cgroups")


def cgroup_dir_of(pid, ctrl):
    """The directory of process PID's cgroup that holds CTRL's files, read
    from /proc/PID/cgroup: its v1 hierarchy's line, else the v2 line (where
    the file is there); None when it has none."""
    kinds = layout()
    kind, mount = kinds[ctrl]
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        return None
    for hid, ctrls, path in lines:
        if kind == "v1" and ctrl in ctrls.split(","):
            return mount.rstrip("/") + path
        if kind == "v2" and hid == "0":
            return mount.rstrip("/") + path
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def setup():
    global ADMIN, MEMBER, AGENT, CGROUP_BASE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"description": "test nodes"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "n1", [fake_gpu_uuid(1, g, "c600") for g in range(4)])
    AGENT.write_gpu_list([{"uuid": u, "utilization": 0, "memory_utilization": 0,
                           "process_memory_mib": 0} for u in AGENT.uuids])
    CGROUP_BASE, roots = agent_cgroups("gpuorch-cgroup-test", ["n1"])
    AGENT.cgroup = roots.get("n1")
    ok(AGENT.cgroup, "a cgroup root of the test's own is made for the agent",
       "harness.agent_cgroups found no writable cgroup filesystem (see its diagnostics)")
    AGENT.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = (body or {}).get("nodes") or [] if st == 200 else []
        return any(n.get("name") == "n1" and n.get("state") == "up" for n in nodes)

    ok(wait_until(registered, timeout=30, step=0.1), "the agent registers", AGENT.tail())
    ok("no cgroups" not in AGENT.log(), "the agent uses cgroups (its log says no 'no cgroups')",
       AGENT.tail())
    kinds = layout()
    want = (f"cgroups under {AGENT.cgroup} (CPU limits: cgroup {kinds['cpu'][0]}, memory limits: "
            f"cgroup {kinds['memory'][0]})")
    ok(wait_until(lambda: want in AGENT.log(), timeout=DEADLINE_S), f"its log says '{want}'",
       AGENT.tail())


def controllers_available():
    """Check: the cpu and memory controllers are to be had here, on v2 or v1."""
    kinds = layout()
    for ctrl in ("cpu", "memory"):
        ok(kinds[ctrl][0], f"the {ctrl} controller is available (cgroup {kinds[ctrl][0]} at "
           f"{kinds[ctrl][1]})", missing_text(ctrl))


def over_memory_limit_is_reported():
    """Check: a job writing three times its --mem is killed by the kernel and
    ends FAILED, out of memory, in the API and in `gpuorch show`."""
    script = f"b = b'x' * ({3 * MEM_MIB} << 20); print('survived')"
    jid = submit({"name": "oom", "command": ["python3", "-c", script], "mem_mib": MEM_MIB,
                  "cpus": 1})
    j = wait_final(jid)
    att = ((j or {}).get("attempts") or [{}])[-1]
    ok(j and j["state"] == "FAILED" and "out of memory" in (j.get("reason") or ""),
       f"a job writing {3 * MEM_MIB} MiB under --mem {MEM_MIB} ends FAILED with reason "
       "'out of memory'", f"{j}\n{AGENT.tail()}")
    ok(att.get("state") == "FAILED" and att.get("signal") == 9
       and (att.get("reason") or "").startswith("out of memory: the kernel killed 1 process"),
       "its attempt ends FAILED, by SIGKILL, with reason 'out of memory: the kernel killed 1 "
       "process of the job at its memory limit'", att)
    out = read(os.path.join(AGENT.state, "attempts", f"{jid}.1", "stdout")) or ""
    ok("survived" not in out, "the job did not get past its allocation", out)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update({"GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}",
                "GPUORCH_TOKEN_FILE": SRV.token_file("admin"), "HOME": TMP})
    r = subprocess.run([BIN, "show", str(jid)], capture_output=True, text=True, env=env,
                       timeout=60)
    ok(r.returncode == 0 and "out of memory" in r.stdout and "FAILED" in r.stdout,
       "`gpuorch show` says FAILED and out of memory", f"rc={r.returncode}\n{r.stdout}{r.stderr}")


def cpu_weight_follows_request():
    """Check: a job's cgroup has its memory limit, and CPU weights in the
    proportion of the jobs' cpus."""
    jobs = {cpus: submit({"name": f"cpu{cpus}", "command": ["sleep", "1000"], "cpus": cpus,
                          "mem_mib": 100})
            for cpus in (1, 4)}
    kinds = layout()
    weight_file = "cpu.shares" if kinds["cpu"][0] == "v1" else "cpu.weight"
    limit_file = "memory.limit_in_bytes" if kinds["memory"][0] == "v1" else "memory.max"
    weights = {}
    for cpus, jid in jobs.items():
        pid = command_pid(jid)
        cpu_dir = cgroup_dir_of(pid, "cpu") if pid else None
        mem_dir = cgroup_dir_of(pid, "memory") if pid else None
        ok(cpu_dir and cpu_dir.endswith(f"/job-{jid}.1") and mem_dir
           and mem_dir.endswith(f"/job-{jid}.1"),
           f"the {cpus}-CPU job's command is in its attempt's cgroup for cpu and memory",
           f"pid {pid}: /proc/{pid}/cgroup = {read(f'/proc/{pid}/cgroup')}\n"
           f"{missing_text('cpu') if not kinds['cpu'][0] else ''}"
           f"{missing_text('memory') if not kinds['memory'][0] else ''}\n{AGENT.tail()}")
        limit = read(os.path.join(mem_dir, limit_file)) if mem_dir else None
        ok(limit == str(100 << 20), f"the {cpus}-CPU job's {limit_file} is its 100 MiB",
           f"{mem_dir}/{limit_file}: {limit}")
        w = read(os.path.join(cpu_dir, weight_file)) if cpu_dir else None
        weights[cpus] = int(w) if w and w.isdigit() else None
    one, four = weights.get(1), weights.get(4)
    ok(one and four and four == 4 * one and one == (1024 if weight_file == "cpu.shares" else 100),
       f"{weight_file} follows the request: one CPU weighs the kernel's default, four CPUs "
       "four times that", weights)
    for jid in jobs.values():
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    finals = {jid: wait_final(jid) for jid in jobs.values()}
    ok(all(j and j["state"] == "CANCELLED" for j in finals.values()),
       "both jobs end CANCELLED", finals)


def main():
    print("TAP version 13")
    setup()
    for step in (controllers_available, over_memory_limit_is_reported,
                 cpu_weight_follows_request):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    ok("Sanitizer" not in AGENT.log() and "runtime error:" not in AGENT.log(),
       "the agent's log holds no sanitizer report", AGENT.tail(6000))
    ok(AGENT.stop() == 0, "the agent stops with status 0 on SIGTERM", AGENT.tail())
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    if AGENT and AGENT.proc and AGENT.proc.poll() is None:
        AGENT.proc.kill()
        AGENT.proc.wait()
    if CGROUP_BASE:
        dirs = [CGROUP_BASE] + cgroup_v1_twins(CGROUP_BASE)
        remove_cgroups(CGROUP_BASE)
        left = [d for d in dirs if os.path.exists(d)]
        ok(not left, "the test's cgroup directories (its root and the agent's v1 ones) are gone",
           left)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

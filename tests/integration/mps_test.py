#!/usr/bin/env python3
"""mps_test.py GPUORCH FAKEMPS - fractions held to their share with CUDA MPS, with
a real `gpuorch server` and real agents on the fake NVML ($GPUORCH_FAKENVML,
else BUILD/tests/libnvidia-ml.so.1), and FAKEMPS (tests/fakemps/
nvidia-cuda-mps-control, NVIDIA's control program's stand-in) as the agents'
--mps-control. Prints TAP.

Nodes: n1 (one GPU) in pool "shared" (sharing: mps), n2 (one GPU) in pool
"plain" (no setting: time-slicing), both with --mps-control FAKEMPS; n3 (one
GPU) in pool "nobin" (sharing: mps) with no nvidia-cuda-mps-control at all.

What it checks: a bad "sharing" value is refused naming the field and the
values it takes (through the API and apply -f), and the stored pool is
unchanged; two fractional jobs (0.25
and 0.5, with GPU memory) on n1's GPU run at once, each with
CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY of one daemon,
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 25 and 50 and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
0=<its share's MiB>M; the daemon was started once, with CUDA_VISIBLE_DEVICES
the GPU and those directories, got only documented commands, and got `quit`
after both ended; across a kill -9 of n1's agent a running client keeps its
daemon, and a daemon whose client ended meanwhile is told to quit by the
restarted agent; fractions of two users run at once under one daemon (the
agent does not wait on the second); a whole-GPU job of that pool gets no MPS
variable and starts no daemon; a fraction in pool plain gets none and n2
starts no daemon; a fraction on n3 fails with a reason naming the missing
program rather than run unenforced.

Needs root (the agent switches to the jobs' users gpuorch-test1 and
gpuorch-test2). Agents and server are child processes stopped by PID;
conditions are polled with deadlines, never timed. KEEP_TMP=1 keeps the directories."""

import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, Server, env_file, fake_gpu_uuid, ok, remove_tmp  # noqa: E402
from harness import run_as_root  # noqa: E402
from harness import end_checks, file_tail, run_steps, wait_job_until, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKEMPS = os.path.abspath(sys.argv[2])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
OTHER_USER = "gpuorch-test2"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
MPS_VARS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")

# n3 must find no nvidia-cuda-mps-control on PATH, even on a machine with NVIDIA's.
os.environ["PATH"] = ":".join(
    d for d in os.environ.get("PATH", "/usr/bin:/bin").split(":")
    if d and not os.path.exists(os.path.join(d, "nvidia-cuda-mps-control")))

SRV = Server(BIN, "gpuorch-mps-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-mps-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = OTHER = None
AGENTS = {}


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def submit(spec, token=None):
    spec = dict({"workdir": SHARED}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=token or MEMBER)["id"]


def wait_final(jid, timeout=45):
    return wait_job_until(SRV.api, jid, lambda j: j["state"] in FINAL, ADMIN, timeout)[1]


def attempt(j):
    cur = (j or {}).get("current_attempt")
    if cur:
        return cur
    atts = (j or {}).get("attempts") or []
    return atts[-1] if atts else {}


def mps_dir(node, uuid):
    return os.path.join(AGENTS[node].state, "mps", uuid)


def control_log(node, uuid):
    try:
        with open(os.path.join(mps_dir(node, uuid), "log", "control.log")) as f:
            return f.read().splitlines()
    except OSError:
        return []


def body_of(lines):
    """control.log lines without their "[date time Control PID] " prefix."""
    return [line.split("] ", 1)[1] if "] " in line else line for line in lines]


def detail(j, *names):
    return "\n".join([json.dumps(j)] + [AGENTS[n].tail() for n in names or AGENTS])


def waiting_pair(mine, theirs, gpus):
    """A job that writes its environment, then waits for the other's marker (so
    that both run at once), up to 30 s."""
    marker, other = os.path.join(SHARED, mine), os.path.join(SHARED, theirs)
    script = (f"env > {marker}.env; touch {marker}; i=0; "
              f"while [ ! -e {other} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
              f"[ -e {other} ]")
    return {"name": mine, "gpus": gpus, "pool": "shared",
            "command": ["/bin/sh", "-c", script]}


def setup():
    global ADMIN, MEMBER, OTHER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/shared", {"description": "fractions under MPS", "sharing": "mps"})
    put("/v1/pools/plain", {"description": "time-sliced fractions"})
    put("/v1/pools/nobin", {"sharing": "mps"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": p, "guaranteed": 1, "borrow_limit": -1}
                                          for p in ("shared", "plain", "nobin")]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    put("/v1/users/bob", {"unix_user": OTHER_USER, "team": "research", "role": "member"})
    MEMBER, OTHER = (SRV.api.expect("POST", f"/v1/users/{u}/tokens?label=test", want=(201,),
                                    token=ADMIN)["token"] for u in ("alice", "bob"))
    for name, no, pool, mps in (("n1", 1, "shared", FAKEMPS), ("n2", 2, "plain", FAKEMPS),
                                ("n3", 3, "nobin", None)):
        ag = FakeAgent(BIN, SRV, TMP, FAKENVML, name, [fake_gpu_uuid(no, 0, tag="4d50")], pool,
                       mps_control=mps)
        ag.write_gpu_list([{"uuid": u} for u in ag.uuids])
        AGENTS[name] = ag
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(n in nodes and nodes[n].get("state") == "up" for n in AGENTS)

    ok(wait_until(registered, timeout=30, step=0.1), "three agents register (n1, n2, n3)",
       "\n".join(ag.tail() for ag in AGENTS.values()))


def bad_setting():
    st, body, raw = call("PUT", "/v1/pools/shared", {"sharing": "mig"}, token=ADMIN)
    msg = json.dumps(body)
    ok(st == 400 and "field 'sharing'" in msg and "none, mps" in msg,
       "sharing: mig is refused (400) naming the field and the values it takes", f"{st} {raw!r}")
    st, body, _ = call("GET", "/v1/pools/shared", token=ADMIN)
    ok(st == 200 and body.get("sharing") == "mps" and body.get("description") ==
       "fractions under MPS", "the refused PUT changed nothing stored", f"{st} {body}")
    st, body, raw = call("PUT", "/v1/pools/other", {"sharing": ""}, token=ADMIN)
    st2, _, _ = call("GET", "/v1/pools/other", token=ADMIN)
    ok(st == 400 and "field 'sharing'" in json.dumps(body) and st2 == 404,
       "an empty sharing is refused too, and no pool 'other' was made", f"{st} {raw!r} {st2}")


def apply_file():
    """The setting through `gpuorch apply -f`, as an admin writes it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update({"GPUORCH_SERVER": SRV.url, "GPUORCH_TOKEN": ADMIN, "HOME": TMP})

    def apply(name, text):
        path = os.path.join(TMP, name)
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([BIN, "apply", "-f", path], capture_output=True, text=True, env=env,
                           timeout=60)
        return r.returncode, r.stdout.strip(), r.stderr.strip()

    doc = ("pools:\n  - name: shared\n    description: fractions under MPS\n    sharing: mps\n"
           "  - name: plain\n    description: time-sliced fractions\n    sharing: none\n")
    rc, out, err = apply("pools.yaml", doc)
    ok(rc == 0 and out.splitlines() == ["pool/shared unchanged", "pool/plain unchanged"],
       "apply -f with sharing: mps and sharing: none as stored: both unchanged",
       f"{rc}\n{out}\n{err}")
    rc, out, err = apply("bad.yaml", doc.replace("sharing: none", "sharing: sometimes"))
    st, body, _ = call("GET", "/v1/pools/plain", token=ADMIN)
    ok(rc == 1 and "pool/plain: 400" in err and "field 'sharing'" in err and "none, mps" in err
       and st == 200 and body.get("sharing") == "none",
       "apply -f with sharing: sometimes: one line naming the object, the field and the values "
       "it takes; the pool is unchanged", f"{rc}\n{out}\n{err}\n{body}")


def fractions_under_mps():
    uuid = AGENTS["n1"].uuids[0]
    # A fraction gets that share of the GPU's memory too (docs/scheduling.md).
    ids = [submit(waiting_pair("quarter", "half", 0.25)),
           submit(waiting_pair("half", "quarter", 0.5))]
    jobs = [wait_final(jid) for jid in ids]
    ok(all(j and j["state"] == "COMPLETED" for j in jobs),
       "a 0.25 and a 0.5 job of pool shared run at once on n1's GPU and complete",
       "\n".join(detail(j, "n1") for j in jobs))
    envs = [env_file(os.path.join(SHARED, f"{n}.env")) for n in ("quarter", "half")]
    pipe, log = os.path.join(mps_dir("n1", uuid), "pipe"), os.path.join(mps_dir("n1", uuid), "log")
    # The share's memory: milli/1000 of the GPU's (the API shows no share's MiB).
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    node = next((n for n in (body or {}).get("nodes") or [] if n.get("name") == "n1"), {})
    total = (node.get("gpus") or [{}])[0].get("mem_mib")
    mems = [total * milli // 1000 if isinstance(total, int) else None for milli in (250, 500)]
    ok(all(e.get("CUDA_VISIBLE_DEVICES") == uuid and e.get("CUDA_MPS_PIPE_DIRECTORY") == pipe
           and e.get("CUDA_MPS_LOG_DIRECTORY") == log for e in envs),
       "both are clients of one daemon: CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY "
       "are STATE/mps/UUID/pipe and .../log of their GPU", f"{envs}")
    ok([e.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") for e in envs] == ["25", "50"],
       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is 25 for 0.25 and 50 for 0.5",
       f"{[e.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE') for e in envs]}")
    ok(all(isinstance(m, int) and m > 0 for m in mems)
       and [e.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") for e in envs] == [f"0={m}M" for m in mems],
       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is 0=<the share's MiB>M (device 0: the one GPU the "
       "client sees)", f"{mems} {[e.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT') for e in envs]}")

    def quit_seen():
        return body_of(control_log("n1", uuid))[-1:] == ["Shutting down"]

    wait_until(quit_seen, timeout=15)
    lines = body_of(control_log("n1", uuid))
    starts = [x for x in lines if x.startswith("Starting control daemon")]
    ok(len(starts) == 1 and f"environment: CUDA_VISIBLE_DEVICES={uuid} "
       f"CUDA_MPS_PIPE_DIRECTORY={pipe} CUDA_MPS_LOG_DIRECTORY={log}" in lines,
       "one control daemon was started for the two, with CUDA_VISIBLE_DEVICES the GPU and "
       "those directories", "\n".join(lines))
    commands = [x for x in lines if x.startswith(("command:", "refused:"))]
    ok(commands == ["command: quit"] and lines[-1] == "Shutting down",
       "after both ended the daemon got `quit` (and nothing else, nothing refused) and shut "
       "down", "\n".join(lines) + "\n" + AGENTS["n1"].tail())
    ok(not os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid")),
       "no daemon is left: its pid file is gone", file_tail(os.path.join(mps_dir("n1", uuid),
                                                                       "control.out")))


def two_users():
    """Fractions of two Unix users on one GPU: the agent launches both at once
    under one daemon (NVIDIA's daemon, not the agent, queues the second user's
    MPS server until the first's clients are done)."""
    uuid = AGENTS["n1"].uuids[0]
    mark = len(control_log("n1", uuid))
    ids = [submit(waiting_pair("alice-q", "bob-q", 0.25)),
           submit(waiting_pair("bob-q", "alice-q", 0.25), token=OTHER)]
    jobs = [wait_final(jid) for jid in ids]
    envs = [env_file(os.path.join(SHARED, f"{n}.env")) for n in ("alice-q", "bob-q")]
    ok(all(j and j["state"] == "COMPLETED" for j in jobs)
       and [e.get("USER") for e in envs] == [JOB_USER, OTHER_USER]
       and envs[0].get("CUDA_MPS_PIPE_DIRECTORY") == envs[1].get("CUDA_MPS_PIPE_DIRECTORY"),
       "a 0.25 job of each of two users runs at once on n1's GPU, both clients of one daemon "
       "(the agent does not wait on the second user)", "\n".join(detail(j, "n1") for j in jobs))
    wait_until(lambda: body_of(control_log("n1", uuid))[-1:] == ["Shutting down"], timeout=15)
    after = body_of(control_log("n1", uuid)[mark:])
    ok(len([x for x in after if x.startswith("Starting")]) == 1
       and [x for x in after if x.startswith("command:")] == ["command: quit"],
       "one daemon for both users, told to quit once after both", "\n".join(after))


def agent_log_has(node, text):
    return wait_until(lambda: text in AGENTS[node].log(), timeout=20)


def agent_restart():
    """kill -9 of n1's agent: a client still running keeps its daemon across the
    restart; a daemon whose only client ended while the agent was away is told
    to quit by the restarted agent."""
    uuid = AGENTS["n1"].uuids[0]
    pid_file = os.path.join(mps_dir("n1", uuid), "pipe", "nvidia-cuda-mps-control.pid")
    mark = len(control_log("n1", uuid))

    def job(name):
        started, go = os.path.join(SHARED, f"{name}.started"), os.path.join(SHARED, f"{name}.go")
        # It ends 0 only if its daemon still runs when it is let go.
        script = (f"touch {started}; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; "
                  f"i=$((i+1)); done; [ -e {pid_file} ]")
        jid = submit({"name": name, "gpus": 0.25, "pool": "shared",
                      "command": ["/bin/sh", "-c", script]})
        return jid, started, go

    jid, started, go = job("survivor")
    ok(wait_until(lambda: os.path.exists(started), timeout=30), "a 0.25 job runs on n1",
       AGENTS["n1"].tail())
    AGENTS["n1"].kill9()
    AGENTS["n1"].start()
    kept = agent_log_has("n1", f"the daemon of GPU {uuid} is kept for 1 client(s)")
    ok(kept, "the restarted agent counts the running client again and keeps its daemon",
       AGENTS["n1"].tail())
    with open(go, "w"):
        pass
    j = wait_final(jid)
    ok(j and j["state"] == "COMPLETED", "the job found its daemon still running when it ended",
       detail(j, "n1"))
    wait_until(lambda: body_of(control_log("n1", uuid))[-1:] == ["Shutting down"], timeout=15)
    after = body_of(control_log("n1", uuid)[mark:])
    ok([x for x in after if x.startswith(("Starting", "command:"))] ==
       [after[0], "command: quit"] and after[0].startswith("Starting control daemon"),
       "one daemon across the restart, told to quit once, after its client ended",
       "\n".join(after))

    mark = len(control_log("n1", uuid))
    jid, started, go = job("orphan")
    ok(wait_until(lambda: os.path.exists(started), timeout=30), "another 0.25 job runs on n1",
       AGENTS["n1"].tail())
    AGENTS["n1"].kill9()
    with open(go, "w"):
        pass
    status = os.path.join(AGENTS["n1"].state, "attempts", f"{jid}.1", "status")
    ok(wait_until(lambda: os.path.exists(status), timeout=30),
       "it ends while n1's agent is down (its shim wrote its status)", status)
    AGENTS["n1"].start()
    j = wait_final(jid)
    quit_seen = wait_until(lambda: body_of(control_log("n1", uuid))[-1:] == ["Shutting down"],
                           timeout=20)
    after = body_of(control_log("n1", uuid)[mark:])
    ok(j and j["state"] == "COMPLETED" and quit_seen and "command: quit" in after
       and not os.path.exists(pid_file),
       "the restarted agent tells the daemon left without clients to quit",
       "\n".join(after) + "\n" + AGENTS["n1"].tail())


def whole_gpu_in_mps_pool():
    uuid = AGENTS["n1"].uuids[0]
    before = control_log("n1", uuid)
    marker = os.path.join(SHARED, "whole.env")
    j = wait_final(submit({"name": "whole", "gpus": 1, "pool": "shared",
                           "command": ["/bin/sh", "-c", f"env > {marker}"]}))
    env = env_file(marker)
    ok(j and j["state"] == "COMPLETED" and env.get("CUDA_VISIBLE_DEVICES") == uuid
       and not [v for v in MPS_VARS if v in env],
       "a whole-GPU job of pool shared runs with no CUDA_MPS_* variable",
       f"{sorted(k for k in env if k.startswith('CUDA'))}\n{detail(j, 'n1')}")
    ok(control_log("n1", uuid) == before, "and starts no daemon (control.log unchanged)",
       "\n".join(control_log("n1", uuid)))


def plain_pool():
    marker = os.path.join(SHARED, "plain.env")
    j = wait_final(submit({"name": "plain", "gpus": 0.5, "pool": "plain",
                           "command": ["/bin/sh", "-c", f"env > {marker}"]}))
    env = env_file(marker)
    ok(j and j["state"] == "COMPLETED" and env.get("GPUORCH_GPU_MILLI") == "500"
       and not [v for v in MPS_VARS if v in env],
       "a 0.5 job of pool plain (no sharing setting) runs with no CUDA_MPS_* variable",
       f"{sorted(k for k in env if k.startswith(('CUDA', 'GPUORCH_GPU')))}\n{detail(j, 'n2')}")
    ok(not os.path.exists(os.path.join(AGENTS["n2"].state, "mps")),
       "n2 started no MPS daemon (no STATE/mps)", AGENTS["n2"].tail())


def missing_program():
    j = wait_final(submit({"name": "nobin", "gpus": 0.5, "pool": "nobin",
                           "command": ["/bin/true"]}))
    reason = attempt(j).get("reason") or (j or {}).get("reason") or ""
    ok(j and j["state"] == "FAILED" and "nvidia-cuda-mps-control" in json.dumps(j),
       "a fraction of an mps pool on a node without nvidia-cuda-mps-control FAILS with a "
       "reason naming it, rather than run unenforced", f"{reason}\n{detail(j, 'n3')}")


def main():
    print("TAP version 13")
    setup()
    run_steps((bad_setting, apply_file, fractions_under_mps, two_users, agent_restart,
               whole_gpu_in_mps_pool, plain_pool, missing_program))
    end_checks(AGENTS, SRV)


def on_exit():
    for ag in AGENTS.values():
        ag.kill()
    # A daemon a failed check left behind: quit it as the agent would.
    for name, ag in AGENTS.items():
        for uuid in ag.uuids:
            pid_file = os.path.join(mps_dir(name, uuid), "pipe", "nvidia-cuda-mps-control.pid")
            try:
                with open(pid_file) as f:
                    os.kill(int(f.read().strip()), 15)
            except (OSError, ValueError):
                pass
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

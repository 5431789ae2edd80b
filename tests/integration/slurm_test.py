#!/usr/bin/env python3
"""slurm_test.py GPUORCH - the commands Slurm users reach for, against a real
`gpuorch server` and one real `gpuorch agent` on the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1). Prints TAP.

What it checks: `gpuorch slurm-wrappers DIR` writes sbatch, squeue, scancel,
srun, salloc, sacct, sinfo, scontrol and seff, executable, each running this
binary, and keeps a file it did not write; a shell script that uses sbatch,
squeue, scancel, sacct, sinfo and scontrol show hostnames with the wrappers
first in PATH runs as it would under Slurm (squeue's default columns, sacct's
-P output with Slurm's state names and exit codes, sinfo's pool row with the
compressed node list and GRES); `queue` shows an array's pending tasks in one
row (41_[1-3%1]) and -r one row per task; `history` keeps the jobs across a
controller restart; `eff` reports GPU-hours and the GPU samples of a job that
ran, and "no GPU samples" for one that did not; GET /v1/accounting/jobs
answers 400 naming a bad parameter.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Processes are stopped by PID; conditions are polled with
deadlines. KEEP_TMP=1 keeps the directories."""

import json
import os
import stat
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, remove_tmp, run_as_root  # noqa: E402
from harness import Server, diag, file_tail, message, ok, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
WRAPPERS = ("sbatch", "squeue", "scancel", "srun", "salloc", "sacct", "sinfo", "scontrol", "seff")

SRV = Server(BIN, "gpuorch-slurm-test-srv-", ["--pass-interval", "1"])
TMP = tempfile.mkdtemp(prefix="gpuorch-slurm-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
WRAPDIR = os.path.join(TMP, "bin")
os.mkdir(WRAPDIR)
API = SRV.client()
ALICE = None
AGENT = None


def env():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUORCH_", "SQUEUE_",
                                                                       "SACCT_", "SLURM_"))}
    base.update({"GPUORCH_SERVER": SRV.url, "GPUORCH_TOKEN": ALICE, "TZ": "UTC",
                 "PATH": WRAPDIR + ":" + os.environ.get("PATH", "/usr/bin:/bin")})
    return base


def cli(*args, timeout=60):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env(), cwd=SHARED,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def sh(script, timeout=120):
    r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env=env(),
                       cwd=SHARED, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def job(jid):
    st, body, _ = API.call("GET", f"/v1/jobs/{jid}")
    return body if st == 200 else None


def wait_state(jid, states, timeout=60):
    return wait_until(lambda: (job(jid) or {}).get("state") in states, timeout, 0.1)


def setup():
    global ALICE, AGENT
    SRV.start()
    API.token = open(SRV.token_file("admin")).read().strip()
    API.expect("PUT", "/v1/pools/main", {})
    API.expect("PUT", "/v1/teams/research", {})
    API.expect("PUT", "/v1/users/alice", {"unix_user": JOB_USER, "team": "research",
                                          "role": "member"})
    ALICE = API.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,))["token"]
    AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "node01", [fake_gpu_uuid(9, i) for i in range(2)])
    AGENT.write_gpu_list([{"uuid": u, "utilization": 40, "memory_utilization": 10,
                           "process_memory_mib": 512} for u in AGENT.uuids])
    AGENT.start()

    def registered():
        st, body, _ = API.call("GET", "/v1/nodes")
        nodes = (body or {}).get("nodes") or [] if st == 200 else []
        return any(n.get("name") == "node01" and n.get("state") == "up" for n in nodes)
    ok(wait_until(registered, timeout=30, step=0.1), "the agent registers",
       file_tail(AGENT.log_path))


def helps():
    for cmd in ("history", "eff", "info", "slurm-wrappers", "hostlist", "queue", "cancel"):
        rc, out, err = cli(cmd, "--help")
        ok(rc == 0 and out.startswith(f"usage: gpuorch {cmd}") and "Exit codes" in out,
           f"gpuorch {cmd} --help: usage and exit codes on stdout, exit 0", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("queue", "-h", "--sort", "x")
    ok(rc == 2 and "unknown option '--sort'" in err, "an option squeue has and gpuorch not: 2",
       err)


def wrappers():
    rc, out, err = cli("slurm-wrappers", WRAPDIR)
    written = out.split()
    modes = {w: os.stat(os.path.join(WRAPDIR, w)).st_mode for w in WRAPPERS
             if os.path.exists(os.path.join(WRAPDIR, w))}
    ok(rc == 0 and sorted(os.path.basename(p) for p in written) == sorted(WRAPPERS)
       and all(m & stat.S_IXUSR and m & stat.S_IXOTH for m in modes.values())
       and len(modes) == len(WRAPPERS),
       "slurm-wrappers writes the nine commands, executable by all", f"{rc}\n{out}\n{err}")
    text = open(os.path.join(WRAPDIR, "sacct")).read()
    ok(f"'{BIN}' history" in text, "sacct runs this binary's history by its absolute path", text)
    rc, out, err = cli("slurm-wrappers", WRAPDIR)
    ok(rc == 0, "writing them again replaces its own files", f"{rc}\n{err}")
    mine = os.path.join(TMP, "other")
    os.mkdir(mine)
    with open(os.path.join(mine, "sinfo"), "w") as f:
        f.write("#!/bin/sh\necho a site's own sinfo\n")
    rc, out, err = cli("slurm-wrappers", mine)
    ok(rc == 1 and "gpuorch did not write it" in err
       and "site's own" in open(os.path.join(mine, "sinfo")).read(),
       "a file of that name it did not write is kept (exit 1, named)", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("slurm-wrappers", os.path.join(TMP, "nowhere"))
    ok(rc == 1 and "not a directory" in err, "a missing directory is refused", err)


SCRIPT = """set -e
cat > job.sh <<'EOF'
#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --gres=gpu:1
#SBATCH -t 5
echo "hello from $SLURM_JOB_ID"
sleep 2
EOF
jid=$(sbatch --parsable -p main job.sh)
long=$(sbatch --parsable -J long --gres=gpu:1 --wrap 'sleep 300')
echo "jid=$jid long=$long"
squeue
squeue -h -j "$long" -o '%i %T'
while [ -z "$(squeue -h -j "$long" -t R -o %i)" ]; do sleep 0.2; done
scancel "$long"
while squeue -h -j "$jid" -o %i | grep -q .; do sleep 0.2; done
while squeue -h -j "$long" -o %i | grep -q .; do sleep 0.2; done
echo "--sacct"
sacct -X -P -n -j "$jid,$long" --format=JobID,JobName,State,ExitCode,NNodes,NodeList
echo "--sinfo"
sinfo
echo "--hostnames"
scontrol show hostnames 'node[01-03]'
"""


def script():
    rc, out, err = sh(SCRIPT)
    diag("the script's output:\n# " + "\n# ".join(out.splitlines()))
    ok(rc == 0, "a script using sbatch, squeue, scancel, sacct, sinfo runs to its end",
       f"{rc}\n{out}\n{err}")
    lines = out.splitlines()
    ids = dict(w.split("=") for w in (lines[0].split() if lines else []) if "=" in w)
    jid, long = ids.get("jid", "?"), ids.get("long", "?")
    head = lines[1].split() if len(lines) > 1 else []
    ok(head == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES",
                "NODELIST(REASON)"], "squeue prints squeue's default columns", out)
    sacct = lines[lines.index("--sacct") + 1:lines.index("--sinfo")] if "--sinfo" in lines else []
    rows = {r.split("|")[0]: r.split("|") for r in sacct}
    ok(rows.get(jid) == [jid, "hello", "COMPLETED", "0:0", "1", "node01"],
       "sacct -P: the script's job COMPLETED, exit 0:0, on node01", sacct)
    ok((rows.get(long) or [""] * 3)[2] == "CANCELLED", "sacct: the scancel'd job CANCELLED",
       sacct)
    sinfo = lines[lines.index("--sinfo") + 1:lines.index("--hostnames")] if "--hostnames" in lines \
        else []
    ok(sinfo and sinfo[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE",
                                      "NODELIST", "GRES"]
       and len(sinfo) > 1 and sinfo[1].split()[:6] == ["main", "up", "infinite", "1", "idle",
                                                        "node01"]
       and sinfo[1].split()[6].startswith("gpu:") and sinfo[1].split()[6].endswith(":2"),
       "sinfo: the pool's row, idle, with its node and gpu:TYPE:2", sinfo)
    ok(lines[-3:] == ["node01", "node02", "node03"], "scontrol show hostnames expands a list",
       lines[-3:])
    return int(jid) if jid.isdigit() else 0, int(long) if long.isdigit() else 0


def info():
    API.expect("PUT", "/v1/pools/spare", {})
    rc, out, err = cli("info")
    rows = [ln.split() for ln in out.splitlines()]
    ok(rc == 0 and len(rows) == 3 and rows[1][:5] == ["main", "up", "infinite", "1", "idle"]
       and rows[2] == ["spare", "up", "infinite", "0", "n/a", "(null)"],
       "info: a row per pool, an empty pool with 0 nodes and n/a", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("info", "-N", "-h")
    rows = [ln.split() for ln in out.splitlines()]
    ok(rc == 0 and len(rows) == 1 and rows[0][:4] == ["node01", "1", "main", "idle"],
       "info -N -h: one row per node, no header", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("info", "-t", "down,drain", "--json")
    ok(rc == 0 and json.loads(out) == {"partitions": []}, "info -t down,drain: none", out)
    rc, out, err = cli("info", "-t", "sleeping")
    ok(rc == 2 and "'sleeping' is not a node state" in err, "info -t: a bad state is refused",
       err)


def arrays():
    st, body, _ = API.call("POST", "/v1/jobs", {"pool": "main", "gpus": 1, "workdir": SHARED,
                                                "command": ["sleep", "300"], "array": "1-4%1",
                                                "name": "arr"}, token=ALICE)
    ok(st == 201, "an array of 4 tasks, 1 at a time", body)
    ids = body.get("array_jobs") or []
    first = ids[0] if ids else 0
    wait_until(lambda: (job(first) or {}).get("state") == "RUNNING", 30, 0.1)
    rc, out, err = cli("queue", "-j", str(first))
    rows = [ln.split()[0] for ln in out.splitlines()[1:]]
    ok(rc == 0 and rows == [f"{first}_1", f"{first}_[2-4%1]"],
       "queue: the running task on a row of its own, the pending ones collapsed",
       f"{rc}\n{out}\n{err}")
    rc, out, err = cli("queue", "-r", "-h", "-j", str(first), "-o", "%i %t")
    ok(rc == 0 and out.split("\n")[:4] == [f"{first}_1 R", f"{first}_2 PD", f"{first}_3 PD",
                                           f"{first}_4 PD"],
       "queue -r -h -o: one row per task, squeue's state codes, no header", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("queue", "--json", "-j", str(first))
    ok(rc == 0 and len(json.loads(out)["jobs"]) == 4, "queue --json: one object per task", out)
    rc, out, err = cli("cancel", f"{first}_2")
    states = [(job(i) or {}).get("state") for i in ids]
    ok(rc == 0 and out.strip() == f"Cancelled job {ids[1]}" and states[1] == "CANCELLED"
       and "CANCELLED" not in states[2:], "cancel ARRAY_INDEX cancels that task only",
       f"{rc}\n{out}\n{err}\n{states}")
    rc, out, err = sh(f"scancel {first}")
    ok(rc == 0 and all(wait_state(i, FINAL) for i in ids),
       "scancel ARRAY cancels every live task of the array", f"{rc}\n{out}\n{err}")
    named = [API.expect("POST", "/v1/jobs", {"pool": "main", "gpus": 8, "workdir": SHARED,
                                             "command": ["true"], "name": "sweep"},
                        want=(201,), token=ALICE)["id"] for _ in range(2)]
    rc, out, err = sh("scancel -Q -u alice -n sweep,other")
    ok(rc == 0 and out == "" and all((job(i) or {}).get("state") == "CANCELLED" for i in named),
       "scancel -u -n -Q: the user's jobs of that name, silently", f"{rc}\n{out}\n{err}")
    rc, out, err = sh(f"scancel {first}_9")
    ok(rc == 1 and "no pending or running task" in err, "scancel of a task that is not live: 1",
       f"{rc}\n{out}\n{err}")


def history(jid, long):
    want = {str(jid): "COMPLETED", str(long): "CANCELLED"}

    def states():
        rc, out, err = cli("history", "-P", "-n", "--format=jobid,state", "-S", "now-1hours")
        return rc, dict(ln.split("|") for ln in out.splitlines() if "|" in ln)
    rc, got = states()
    ok(rc == 0 and all(got.get(k) == v for k, v in want.items()),
       "history: the jobs with Slurm's states", got)
    rc, out, err = cli("history", "-j", str(jid))
    lines = out.splitlines()
    ok(rc == 0 and lines[0].split() == ["JobID", "JobName", "Partition", "Account", "AllocCPUS",
                                        "State", "ExitCode"]
       and set(lines[1]) <= {"-", " "} and lines[2].split()[0] == str(jid),
       "history -j: sacct's default columns, the dashes line, the job", out)
    rc, out, err = cli("history", "-j", str(jid), "--json")
    got_json = json.loads(out)["jobs"] if rc == 0 else []
    ok(len(got_json) == 1 and got_json[0]["slurm_state"] == "COMPLETED"
       and got_json[0]["attempts"][0]["started_at"], "history --json: the job with its attempts",
       out[:500])
    rc, out, err = cli("history", "--format=JobID,Colour")
    ok(rc == 2 and "no field 'Colour'" in err, "an unknown --format field is refused, named", err)
    rc, out, err = cli("history", "-S", "yesterday-ish")
    ok(rc == 2 and "--starttime" in err, "a time sacct would not read is refused", err)
    st, body, raw = API.call("GET", "/v1/accounting/jobs?since=soon", token=ALICE)
    ok(st == 400 and "since" in message(body, raw), "the API names a bad since (400)", body)
    st, body, raw = API.call("GET", "/v1/accounting/jobs?job=x7", token=ALICE)
    ok(st == 400 and "job" in message(body, raw), "the API names a bad job (400)", body)
    # Newest first, page by page (the dashboard's history), as the oldest-first pages.
    st, body, raw = API.call("GET", "/v1/accounting/jobs?limit=1000", token=ALICE)
    every = [j["id"] for j in body["jobs"]] if st == 200 else []
    pages, after = [], None
    while len(pages) < 50:
        q = "order=desc&limit=2" + (f"&after={after}" if after is not None else "")
        st, body, raw = API.call("GET", "/v1/accounting/jobs?" + q, token=ALICE)
        if st != 200:
            break
        pages.append([j["id"] for j in body["jobs"]])
        after = body["next_after"]
        if after is None:
            break
    flat = [i for p in pages for i in p]
    ok(len(every) >= 3 and flat == sorted(every, reverse=True) and all(len(p) <= 2 for p in pages),
       "order=desc: every job newest first, in keyset pages of 2", (every, pages))
    st, body, raw = API.call("GET", "/v1/accounting/jobs?order=sideways", token=ALICE)
    ok(st == 400 and message(body, raw).startswith("order:"), "a bad order is a 400 naming it", raw)
    AGENT.stop()
    SRV.stop()
    SRV.start()
    AGENT.start()
    rc, got = states()
    ok(rc == 0 and all(got.get(k) == v for k, v in want.items()),
       "history after a controller restart: the same jobs and states", got)


def eff(jid, long):
    rc, out, err = cli("eff", str(jid))
    diag("eff:\n# " + "\n# ".join(out.splitlines()))
    fields = dict(ln.split(": ", 1) for ln in out.splitlines() if ": " in ln)
    ok(rc == 0 and fields.get("State", "").startswith("COMPLETED")
       and fields.get("GPUs") == "1" and float(fields.get("GPU-hours", "0")) > 0,
       "eff: state, GPUs and GPU-hours of the job that ran", f"{rc}\n{out}\n{err}")
    util = fields.get("GPU Utilization", "")
    ok(util.startswith("40.0%") and "MiB" in fields.get("GPU Memory Peak", ""),
       "eff: the mean utilization of its GPU samples (the fake GPU's 40 %), the peak memory",
       out)
    # 8 GPUs: more than the node has, so it stays pending.
    st, body, _ = API.call("POST", "/v1/jobs", {"pool": "main", "gpus": 8, "workdir": SHARED,
                                                "command": ["true"], "name": "never"},
                           token=ALICE)
    never = body.get("id") if st == 201 else 0
    rc, out, err = cli("eff", str(never))
    ok(rc == 0 and "GPU Utilization: no GPU samples" in out,
       "eff of a job that never ran: no GPU samples, not 0 %", f"{st} {body}\n{rc}\n{out}\n{err}")
    cli("cancel", str(never))


def main():
    print("TAP version 13")
    setup()
    helps()
    wrappers()
    jid, long = script()
    for step in (info, arrays, lambda: history(jid, long), lambda: eff(jid, long)):
        try:
            step()
        except Exception as e:
            ok(False, f"step {getattr(step, '__name__', '?')} ran to its end", repr(e))
    ok("Sanitizer" not in SRV.log_tail() and "runtime error:" not in SRV.log_tail(),
       "the server's log holds no sanitizer report", SRV.log_tail())
    ok(AGENT.stop() == 0, "the agent stops cleanly")
    ok(SRV.stop() == 0, "the server stops cleanly", SRV.log_tail())


def on_exit():
    if AGENT:
        AGENT.kill()
    remove_tmp(TMP)


run_as_root(main, SRV, TMP, on_exit)

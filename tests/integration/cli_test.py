#!/usr/bin/env python3
"""cli_test.py GPUORCH - the `gpuorch` CLI as a user runs it, against a real
`gpuorch server` on loopback: where the server and token come from (flags,
environment, config file), apply -f twice (the second run all unchanged),
submit with flags and with a #SBATCH script (the job's spec shows the
directives), queue and show (text and --json, paging past 1,000 jobs),
cancel, nodes / drain / resume on a node registered with the join token,
logs through a stand-in for the node's log server, whoami, and every error
path: one line on stderr, exit 1 (failed) or 2 (usage). Prints TAP.

The server runs as a child process on 127.0.0.1 with an ephemeral port and a
temporary data directory; the log server is a thread of this test, also on
127.0.0.1 and port 0. Both are stopped at the end."""

import http.server
import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, ok, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRV = Server(BIN, "gpuorch-cli-test-")
call = SRV.call
WORK = os.path.join(SRV.tmp, "work")  # the CLI's current directory
HOME = os.path.join(SRV.tmp, "home")  # its $HOME: no user config file leaks in
ADMIN = None
LOGS = None  # the stand-in log server


def cli(*args, env=None, stdin=None, timeout=60):
    """Runs `gpuorch ARGS` in WORK with only the GPUORCH_* variables of ENV
    (default: the server and the admin token); (exit status, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("GPUORCH_") and k != "XDG_CONFIG_HOME"}
    base["HOME"] = HOME
    if env is None:
        env = {"GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}",
               "GPUORCH_TOKEN_FILE": SRV.token_file("admin")}
    base.update(env)
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=base, cwd=WORK,
                       input=stdin, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def fails(res, code, needle, name):
    """A failure as users should see it: exit CODE, nothing on stdout, one
    line on stderr that begins "gpuorch CMD:" and holds NEEDLE."""
    rc, out, err = res
    lines = err.splitlines()
    ok(rc == code and out == "" and len(lines) == 1 and lines[0].startswith("gpuorch ")
       and needle in lines[0], f"{name}: exit {code}, one line naming '{needle}'",
       f"rc={rc}\nstdout={out!r}\nstderr={err!r}")


def write(name, text, mode=0o644):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


# -- A stand-in for a node's log server (src/agent/logsrv.h): it answers any
# -- token with "<stream> line N" lines; a follow gets a second line later.
# -- With `refuse_heads` > 0, that many HEADs get a 403 first: a log the shim
# -- has not handed to the job's user yet, as a real node answers in the
# -- moment before it does.

class LogHandler(http.server.BaseHTTPRequestHandler):
    refuse_heads = 0

    def _head(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()

    def do_HEAD(self):  # noqa: N802 (http.server's naming)
        if LogHandler.refuse_heads > 0:
            LogHandler.refuse_heads -= 1
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            return
        self._head()

    def do_GET(self):  # noqa: N802
        stream = "stderr" if "stream=stderr" in self.path else "stdout"
        self._head()
        self.wfile.write(f"{stream} line 1\n".encode())
        self.wfile.flush()
        if "follow=1" in self.path:
            time.sleep(0.3)
            self.wfile.write(f"{stream} line 2\n".encode())

    def log_message(self, *args):
        pass


def start_logs():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LogHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# -- The checks. -----------------------------------------------------------------------------

APPLY = """\
# the test cluster
pools:
  - name: main
    description: the test pool
priority_classes:
  - name: high
    order: 20
    may_preempt: true
teams:
  - name: research
    weight: 2
    quotas:
      - pool: main
        guaranteed: 8
        borrow_limit: 4
  - name: other
users:
  - name: bob
    unix_user: bob
    team: other
"""


def connection():
    st, me, _ = call("GET", "/v1/whoami", token=ADMIN)
    url = f"http://127.0.0.1:{SRV.port}"
    rc, out, err = cli("whoami", "--server", url, "--token-file", SRV.token_file("admin"), env={})
    ok(rc == 0 and "admin" in out and url in out, "whoami with --server and --token-file",
       f"{rc}\n{out}\n{err}")
    rc, out, err = cli("whoami", "--json", env={"GPUORCH_SERVER": url, "GPUORCH_TOKEN": ADMIN})
    ok(rc == 0 and json.loads(out) == me, "whoami --json from GPUORCH_SERVER and GPUORCH_TOKEN: "
       "the API's JSON", f"{rc}\n{out}\n{err}")
    cfg = write("cli.conf", f"# made by the test\nserver = {url}\n"
                f"token_file = {os.path.relpath(SRV.token_file('admin'), WORK)}\n")
    rc, out, err = cli("whoami", env={"GPUORCH_CONFIG": cfg})
    ok(rc == 0 and "admin" in out, "whoami from GPUORCH_CONFIG (token_file relative to the file)",
       f"{rc}\n{out}\n{err}")
    xdg = os.path.join(HOME, ".config", "gpuorch")
    os.makedirs(xdg, exist_ok=True)
    with open(os.path.join(xdg, "config"), "w") as f:
        f.write(f"server = {url}\ntoken = {ADMIN}\n")
    rc, out, err = cli("whoami", env={})
    ok(rc == 0 and "admin" in out, "whoami from ~/.config/gpuorch/config", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("whoami", env={"GPUORCH_TOKEN": "gpo_" + "A" * 43})
    ok(rc == 1 and "401" in err, "the environment wins over the config file (its token: 401)",
       f"{rc}\n{out}\n{err}")
    os.remove(os.path.join(xdg, "config"))

    fails(cli("whoami", env={}), 2, "no token", "no token anywhere")
    bad = write("bad.conf", f"server = {url}\nsevrer = x\n")
    fails(cli("whoami", env={"GPUORCH_CONFIG": bad}), 2, "bad.conf:2: unknown key 'sevrer'",
          "a config file with an unknown key")
    fails(cli("whoami", env={"GPUORCH_CONFIG": os.path.join(WORK, "nope")}), 2,
          "No such file", "GPUORCH_CONFIG naming no file")
    fails(cli("whoami", "--server", "127.0.0.1:1", "--token", "x", env={}), 2,
          "expected http://HOST:PORT", "a server that is no URL")
    fails(cli("queue", "--server", "http://127.0.0.1:1", "--token", "x", env={}), 1,
          "Couldn't connect", "an unreachable server")
    fails(cli("queue", "--token", "gpo_" + "B" * 43), 1, "401 unauthorized",
          "an unknown token")
    fails(cli("queue", "--bogus"), 2, "unknown option '--bogus'", "an unknown flag")
    for cmd in ("submit", "queue", "show", "cancel", "logs", "nodes", "drain", "resume", "apply",
                "whoami"):
        rc, out, err = cli(cmd, "--help", env={})
        ok(rc == 0 and out.startswith(f"usage: gpuorch {cmd}") and "Exit codes" in out,
           f"gpuorch {cmd} --help: usage and exit codes on stdout, exit 0", f"{rc}\n{out}\n{err}")


def apply():
    path = write("cluster.yaml", APPLY)
    rc, out, err = cli("apply", "-f", path)
    want = ["pool/main created", "priority-class/high created", "team/research created",
            "team/other created", "user/bob created"]
    ok(rc == 0 and out.splitlines() == want, "apply -f: each object created, dependencies first",
       f"{rc}\n{out}\n{err}")
    rc, out, err = cli("apply", "-f", path)
    ok(rc == 0 and out.splitlines() == [w.replace("created", "unchanged") for w in want],
       "apply -f the same file again: every object unchanged", f"{rc}\n{out}\n{err}")
    st, team, _ = call("GET", "/v1/teams/research", token=ADMIN)
    ok(team["weight"] == 2 and team["quotas"][0]["borrow_limit"] == 4,
       "the team is as the file says", team)

    changed = APPLY.replace("weight: 2", "weight: 5").replace(
        "  - name: other\n", "  - name: other\n  - name: bad\n"
        "    quotas: [{pool: nowhere, guaranteed: 1}]\n")
    path2 = write("cluster2.yaml", changed)
    rc, out, err = cli("apply", "-f", path2, "--dry-run")
    st, team, _ = call("GET", "/v1/teams/research", token=ADMIN)
    ok(rc == 0 and "team/research configured (dry run)" in out and "team/bad created (dry run)"
       in out and team["weight"] == 2, "--dry-run says what would change and changes nothing",
       f"{rc}\n{out}\n{err}\n{team}")
    rc, out, err = cli("apply", "-f", path2)
    st, team, _ = call("GET", "/v1/teams/research", token=ADMIN)
    lines = err.splitlines()
    ok(rc == 1 and "team/research configured" in out and "pool/main unchanged" in out
       and team["weight"] == 5 and team["quotas"][0]["guaranteed"] == 8,
       "a changed field: that object configured, the rest unchanged, other fields kept",
       f"{rc}\n{out}\n{err}\n{team}")
    ok(len(lines) == 1 and "cluster2.yaml:17: team/bad: 400 invalid_field" in lines[0]
       and "nowhere" in lines[0], "an object the API refuses: one line with file:line, the "
       "object and the API's message; exit 1", err)
    stdin_doc = json.dumps({"pools": [{"name": "main", "description": "the test pool"}]})
    rc, out, err = cli("apply", "-f", "-", stdin=stdin_doc)
    ok(rc == 0 and out.strip() == "pool/main unchanged", "apply -f - reads JSON from stdin",
       f"{rc}\n{out}\n{err}")
    fails(cli("apply", "-f", write("shape.yaml", "pools: []\nteamz: []\n")), 1,
          "shape.yaml:2: unknown list 'teamz'", "a document with an unknown list")
    fails(cli("apply", "-f", os.path.join(WORK, "missing.yaml")), 1, "No such file",
          "apply of a missing file")
    fails(cli("apply"), 2, "expected -f FILE", "apply without -f")


def submit_flags():
    rc, out, err = cli("submit", "--team", "research", "--gpus", "0.25", "--mem", "4G",
                       "--cpus", "2", "-t", "1:30:00", "-J", "train", "--priority", "high",
                       "--pool", "main", "--export", "SEED=7", "--max-retries", "2",
                       "--checkpointable", "--", "python", "train.py", "--lr", "0.1")
    jid = int(out.split()[-1]) if rc == 0 and out.startswith("Submitted batch job ") else None
    ok(jid is not None and err == "", "submit with flags: 'Submitted batch job ID'",
       f"{rc}\n{out}\n{err}")
    spec = (job(jid) or {}).get("spec", {})
    ok(spec.get("gpus") == 0.25 and spec.get("mem_mib") == 4096 and spec.get("cpus") == 2
       and spec.get("time_limit_s") == 5400 and spec.get("name") == "train"
       and spec.get("priority") == "high" and spec.get("pool") == "main"
       and spec.get("env") == {"SEED": "7"} and spec.get("max_retries") == 2
       and spec.get("checkpointable") is True and spec.get("workdir") == WORK
       and spec.get("command") == ["python", "train.py", "--lr", "0.1"],
       "the job's spec holds every flag; workdir is the current directory", spec)
    rc, out, err = cli("submit", "--team", "research", "--parsable", "--dependency",
                       f"afterok:{jid}", "--array", "0-3%2", "--", "true")
    first = int(out) if rc == 0 and out.strip().isdigit() else None
    body = job(first) or {}
    ok(first and body.get("spec", {}).get("dependencies") == [{"type": "afterok", "job": jid}]
       and body.get("array_index") == 0, "--parsable prints only the id; the dependency and "
       "array are in the spec", f"{rc}\n{out}\n{err}\n{body}")
    rc, out, err = cli("submit", "--team", "research", "--json", "--wrap", "echo hi")
    sub = json.loads(out) if rc == 0 else {}
    ok(sub.get("state") == "PENDING" and sub["spec"]["script"] == "#!/bin/sh\necho hi\n",
       "--json prints the API's job; --wrap sends a sh script", f"{rc}\n{out}\n{err}")

    fails(cli("submit", "--team", "nosuch", "--", "true"), 1,
          "400 invalid_field: field 'team': no team 'nosuch'", "submit for an unknown team")
    fails(cli("submit", "--gpus", "1.5", "--", "true"), 2, "--gpus: expected", "a bad --gpus")
    fails(cli("submit", "--time", "soon", "--", "true"), 2, "--time: expected", "a bad --time")
    fails(cli("submit", "--dependency", "afternotok:1", "--", "true"), 2,
          "'afternotok' is not supported", "an unsupported dependency type")
    fails(cli("submit", "-J", "x"), 2, "nothing to run", "submit with nothing to run")
    firsts = [cli("submit", "--team", "research", "--idempotency-key", "retry-1", "--parsable",
                  "--", "true") for _ in range(2)]
    ok(all(rc == 0 for rc, _, _ in firsts) and firsts[0][1] == firsts[1][1]
       and firsts[0][1].strip().isdigit(),
       "--idempotency-key: a retry with the same key gives the first job's id, no second job",
       firsts)
    fails(cli("submit", "--idempotency-key", "a\tb", "--", "true"), 2, "--idempotency-key",
          "a bad --idempotency-key")
    fails(cli("submit", os.path.join(WORK, "missing.sh")), 1, "No such file",
          "submit of a missing script")
    return jid


SCRIPT = """\
#!/bin/bash
# train.sh: a Slurm batch script
#SBATCH --job-name=sbatch-job
#SBATCH --time=2:00:00
#SBATCH --gres=gpu:H100-80GB:2
#SBATCH --cpus-per-task=4 --mem=8G
#SBATCH --account=research
#SBATCH --partition=main
#SBATCH --qos=high
#SBATCH --mail-user=ann@example.org
#SBATCH --output=out-%j.txt
#GPUORCH --max-retries 1
python train.py
#SBATCH --time=5
"""


def submit_script():
    path = write("train.sh", SCRIPT, 0o755)
    rc, out, err = cli("submit", "-J", "from-cli", "train.sh")
    jid = int(out.split()[-1]) if rc == 0 and out.startswith("Submitted batch job ") else None
    spec = (job(jid) or {}).get("spec", {})
    ok(jid and spec.get("gpus") == 2 and spec.get("gpu_type") == "H100-80GB"
       and spec.get("time_limit_s") == 7200 and spec.get("cpus") == 4
       and spec.get("mem_mib") == 8192 and spec.get("team") == "research"
       and spec.get("pool") == "main" and spec.get("priority") == "high"
       and spec.get("output") == os.path.join(WORK, "out-%j.txt")
       and spec.get("max_retries") == 1
       and spec.get("script") == SCRIPT, "a #SBATCH script: the spec shows its directives, "
       "and the script is sent", f"{rc}\n{out}\n{err}\n{spec}")
    ok(spec.get("name") == "from-cli", "a command-line flag wins over the script's directive",
       spec.get("name"))
    warns = err.splitlines()
    ok(warns == ["gpuorch submit: warning: train.sh:10: #SBATCH --mail-user changes nothing "
                 "gpuorch controls (ignored)",
                 "gpuorch submit: warning: train.sh:14: a directive after the first command "
                 "(line 13) is ignored, as sbatch does"],
       "one warning line per ignored or misplaced directive, with its line", err)
    write("unknown.sh", "#!/bin/sh\n#SBATCH --hint=nomultithread\ntrue\n")
    fails(cli("submit", "unknown.sh"), 2, "unknown.sh:2: unknown #SBATCH directive '--hint'",
          "a directive sbatch has and gpuorch does not")
    write("bad.sh", "#!/bin/sh\n#SBATCH --time=soon\ntrue\n")
    fails(cli("submit", "bad.sh"), 2, "bad.sh:2: #SBATCH --time: expected",
          "a directive with a bad value")
    fails(cli("submit", "train.sh", "arg"), 2, "arguments after the script",
          "arguments after the script")
    return jid


def queue_and_show(jid):
    wait_until(lambda: (job(jid) or {}).get("wait_reason"))  # a scheduling pass has seen it
    rc, out, err = cli("queue")
    lines = out.splitlines()
    head = lines[0].split() if lines else []
    mine = [ln for ln in lines if ln.split()[:1] == [str(jid)]]
    body = job(jid)
    ok(rc == 0 and head == ["JOBID", "NAME", "USER", "TEAM", "STATE", "TIME", "GPUS", "NODES",
                            "REASON"],
       "queue: squeue's columns", f"{rc}\n{out}\n{err}")
    wait = body.get("wait_reason") or "-"
    ok(len(mine) == 1 and "PENDING" in mine[0] and mine[0].rstrip().endswith(wait),
       "queue: a pending job's line ends with why it waits", f"{mine}\n{wait}")
    rc, out, err = cli("queue", "--json")
    st, api, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING", token=ADMIN)

    def durable(jobs):  # without what each scheduling pass recomputes
        return [{k: v for k, v in j.items() if k not in ("wait_reason", "estimated_start")}
                for j in jobs]
    ok(rc == 0 and durable(json.loads(out)["jobs"]) == durable(api["jobs"]),
       "queue --json: the API's jobs", f"{rc}\n{err}")
    rc, out, err = cli("show", str(jid))
    flat = " ".join(out.split())
    ok(rc == 0 and f"job: {jid} " in flat and "waits because: " in flat
       and "estimated start: " in flat and "time limit: 01:30:00" in flat,
       "show: the job's fields, why it waits and its estimated start", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("show", str(jid), "--json")
    got = json.loads(out) if rc == 0 else {}
    ok(got.get("id") == jid and got.get("spec") == body["spec"] and "attempts" in got,
       "show --json: the API's job", f"{rc}\n{out[:300]}\n{err}")
    fails(cli("show", "999999"), 1, "404 not_found: no job 999999", "show of an unknown job")
    fails(cli("show", "abc"), 2, "'abc' is not a job id", "show of a bad id")
    fails(cli("show"), 2, "expected one JOB", "show without a job")
    fails(cli("queue", "--state", "WAITING"), 2, "'WAITING' is not a job state",
          "queue with a bad state")


def cancel(jid):
    rc, out, err = cli("cancel", str(jid))
    ok(rc == 0 and out.strip() == f"Cancelled job {jid}" and job(jid)["state"] == "CANCELLED",
       "cancel a pending job: 'Cancelled job ID', and it is CANCELLED", f"{rc}\n{out}\n{err}")
    fails(cli("cancel", str(jid)), 1, "409 conflict", "cancel it again")
    rc, out, err = cli("cancel", "999999", str(jid))
    ok(rc == 1 and len(err.splitlines()) == 2 and "404" in err and "409" in err,
       "cancel of several: one line per job that failed, exit 1", f"{rc}\n{out}\n{err}")
    fails(cli("cancel", "x1"), 2, "'x1' is not a job id", "cancel of a bad id")
    rc, out, err = cli("queue", "--all")
    ok(rc == 0 and any(ln.split()[:1] == [str(jid)] and "CANCELLED" in ln
                       and "cancelled by user" in ln for ln in out.splitlines()),
       "queue --all lists the cancelled job with why it ended", out)
    rc, out, err = cli("queue", "--state", "ca", "--team", "research", "--json")
    states = {j["state"] for j in json.loads(out)["jobs"]} if rc == 0 else set()
    ok(states == {"CANCELLED"}, "queue --state ca --team research: cancelled jobs only", out[:300])


def nodes_and_logs():
    # The node's two GPUs are for the job below: nothing else may wait for them.
    st, lst, _ = call("GET", "/v1/jobs?state=PENDING", token=ADMIN)
    for j in lst["jobs"]:
        call("POST", f"/v1/jobs/{j['id']}/cancel", token=ADMIN)
    join = open(SRV.token_file("join")).read().strip()
    node = {"pool": "main", "cpus": 64, "mem_mib": 512 * 1024, "addr": "127.0.0.1",
            "log_port": LOGS.server_address[1],
            "gpus": [{"index": i, "uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}",
                      "gpu_type": "H100-80GB", "mem_mib": 81559} for i in range(2)]}
    st, body, _ = call("PUT", "/v1/nodes/node-a", node, token=join)
    ok(st == 201, "a node registers with the join token", body)
    rc, out, err = cli("nodes")
    rows = [ln.split() for ln in out.splitlines()]
    ok(rc == 0 and rows[0] == ["NAME", "POOL", "STATE", "GPUS", "TYPE", "FREE", "CPUS", "MEM",
                               "HEARTBEAT"]
       and rows[1][:8] == ["node-a", "main", "up", "2", "H100-80GB", "2", "64", "512G"],
       "nodes: the node's pool, state, GPUs, type, free GPUs, CPUs and memory",
       f"{rc}\n{out}\n{err}")
    rc, out, err = cli("nodes", "--json")
    ok(rc == 0 and [n["name"] for n in json.loads(out)["nodes"]] == ["node-a"],
       "nodes --json: the API's nodes", out[:300])

    rc, out, err = cli("submit", "--team", "research", "--gpus", "1", "--parsable", "--",
                       "/bin/echo", "hi")
    jid = int(out) if rc == 0 else 0
    placed = wait_until(lambda: (job(jid) or {}).get("current_attempt"))
    ok(placed, "a one-GPU job is placed on the node", job(jid))
    rc, out, err = cli("queue")
    line = [ln for ln in out.splitlines() if ln.split()[:1] == [str(jid)]]
    ok(line and "RUNNING" in line[0] and line[0].rstrip().endswith("node-a"),
       "queue: a running job's line ends with its node", out)
    rc, out, err = cli("nodes")
    ok(rc == 0 and out.splitlines()[1].split()[5] == "1", "nodes: one GPU left free", out)
    rc, out, err = cli("logs", str(jid))
    ok(rc == 0 and out == "stdout line 1\n", "logs: the attempt's stdout, read through the "
       "controller", f"{rc}\n{out!r}\n{err}")
    rc, out, err = cli("logs", str(jid), "--stderr", "-f")
    ok(rc == 0 and out == "stderr line 1\nstderr line 2\n",
       "logs --stderr -f: stderr, followed until it ends", f"{rc}\n{out!r}\n{err}")
    LogHandler.refuse_heads = 1
    rc, out, err = cli("logs", str(jid))
    ok(rc == 0 and out == "stdout line 1\n" and LogHandler.refuse_heads == 0,
       "logs while the node hands the log over (its HEAD 403, then its GET 200): the log, "
       "not a 502", f"{rc}\n{out!r}\n{err}")
    rc, out, err = cli("show", str(jid))
    ok(rc == 0 and "current attempt: 1 " in " ".join(out.split()) and "node-a" in out
       and "ATTEMPT" in out,
       "show: the current attempt and the attempts table", out)
    fails(cli("logs", str(jid), "--attempt", "7"), 1, "404 not_found: job "
          f"{jid} has no attempt 7", "logs of an attempt that does not exist")
    rc, out, err = cli("submit", "--team", "research", "--gpus", "64", "--parsable", "--", "true")
    fails(cli("logs", out.strip()), 1, "has not run yet", "logs of a job that has not run")
    fails(cli("logs", str(jid), "--rank", "x"), 2, "--rank: expected", "logs with a bad --rank")

    rc, out, err = cli("drain", "node-a")
    st, lst, _ = call("GET", "/v1/nodes", token=ADMIN)
    ok(rc == 0 and out.strip() == "node/node-a draining" and lst["nodes"][0]["state"] ==
       "draining", "drain: 'node/node-a draining', and it is", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("resume", "node-a")
    st, lst, _ = call("GET", "/v1/nodes", token=ADMIN)
    ok(rc == 0 and out.strip() == "node/node-a up" and lst["nodes"][0]["state"] == "up",
       "resume: 'node/node-a up', and it is", f"{rc}\n{out}\n{err}")
    fails(cli("drain", "node-zz"), 1, "404 not_found: no node 'node-zz'", "drain of no node")
    fails(cli("drain"), 2, "expected NODE", "drain without a node")


def member():
    st, body, _ = call("POST", "/v1/users/bob/tokens?label=cli", token=ADMIN)
    env = {"GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}", "GPUORCH_TOKEN": body["token"]}
    rc, out, err = cli("whoami", env=env)
    ok(rc == 0 and "bob" in out and "member" in out and "other" in out,
       "whoami as a member: name, role, team", out)
    rc, out, err = cli("submit", "--parsable", "--", "true", env=env)
    mine = int(out) if rc == 0 and out.strip().isdigit() else None
    rc, out, err = cli("queue", "--me", "--json", env=env)
    ids = [j["id"] for j in json.loads(out)["jobs"]] if rc == 0 else None
    ok(mine and ids == [mine], "queue --me: the member's own jobs only", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("nodes", env=env)
    ok(rc == 0 and out.splitlines()[1].split()[5] == "?",
       "nodes as a member: FREE is '?' (only admins see every job)", out)
    fails(cli("drain", "node-a", env=env), 1, "403 forbidden", "drain as a member")
    fails(cli("queue", "--team", "research", env=env), 1, "403 forbidden",
          "a member listing another team")


def paging():
    rc, out, err = cli("submit", "--team", "other", "--array", "0-1199", "--gpus", "64",
                       "--parsable", "--", "true")
    rc, out, err = cli("queue", "--team", "other", "--json")
    n = len(json.loads(out)["jobs"]) if rc == 0 else None
    ok(n is not None and n >= 1200, "queue reads every page: 1,200 jobs and more", n)


def main():
    global ADMIN, LOGS
    print("TAP version 13")
    os.makedirs(WORK)
    os.makedirs(HOME)
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    LOGS = start_logs()
    connection()
    apply()
    jid = submit_flags()
    submit_script()
    queue_and_show(jid)
    cancel(jid)
    nodes_and_logs()
    member()
    paging()


def stop_logs():
    if LOGS:
        LOGS.shutdown()
        LOGS.server_close()


run(main, SRV, on_exit=stop_logs)

#!/usr/bin/env python3
"""idle_test.py GPUORCH - idle-GPU detection (docs/idle.md) with a real
`gpuorch server` and one real `gpuorch agent` on the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1), whose GPUs'
utilization the test scripts by rewriting the fake's file. Prints TAP.

What it checks: teams with an "idle" policy go in with `gpuorch apply -f`
(durations as "2s") and a second apply changes nothing; a bad policy is a 400
naming the field and stores nothing; with threshold 10 %, window 2 s and action
report, a job on GPUs at 0 % is flagged in the job's JSON, in `gpuorch queue`
(IDLE in REASON), in `gpuorch show` and in /metrics, and raising its GPU to
50 % clears the flag; a job at 80 % is never flagged while an idle one beside
it is; with action cancel and a 1 s warning the job is cancelled with the idle
reason; with action requeue its attempt is preempted, the job goes back to the
queue and a second attempt runs (and /metrics counts it). And on GPUs whose
file scripts no figures (the fake's "Busy GPUs", tests/fakenvml/README.md): a
job spinning on one core reads high utilization and is never flagged, a job
that sleeps reads 0 % and is flagged; each whole-GPU job's memory is its GPU's.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). The agent and server are child processes stopped by PID;
conditions are polled with deadlines. KEEP_TMP=1 keeps the directories."""

import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, remove_tmp, run_as_root  # noqa: E402
from harness import Server, diag, file_tail, ok, wait_until, write_atomic  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
NGPUS = 4
DEADLINE_S = 30
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")

SRV = Server(BIN, "gpuorch-idle-test-srv-", ["--pass-interval", "1"])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-idle-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = None
TOKENS = {}
UUIDS = [fake_gpu_uuid(0x1d1e, g) for g in range(NGPUS)]
AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "n1", UUIDS)
GPU_FILE = AGENT.gpu_file
AGENT_LOG = AGENT.log_path

TEAMS_YAML = """\
pools:
  - name: main
priority_classes:
  - name: normal
    order: 0
teams:
  - name: idle-rep
    idle: {threshold_pct: 10, window_s: 2s, action: report}
  - name: idle-can
    idle: {threshold_pct: 10, window_s: 2s, action: cancel, warning_s: 1s}
  - name: idle-req
    idle: {threshold_pct: 10, window_s: 2s, action: requeue, warning_s: 1}
"""


def set_util(default, per_uuid=None):
    """Scripts the fake GPUs: DEFAULT % for each, PER_UUID for some; None:
    no figures at all (the fake's own, from the GPUs' processes)."""
    gpus = [{"uuid": u} if default is None else
            {"uuid": u, "utilization": (per_uuid or {}).get(u, default),
             "memory_utilization": 10, "process_memory_mib": 512} for u in UUIDS]
    write_atomic(GPU_FILE, json.dumps({"gpus": gpus}))


def cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update({"GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}",
                "GPUORCH_TOKEN_FILE": SRV.token_file("admin")})
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, cwd=TMP,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def submit(team, name, command=("sleep", "600")):
    spec = {"name": name, "pool": "main", "workdir": SHARED, "gpus": 1,
            "command": list(command)}
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=TOKENS[team])["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_job(jid, pred, timeout=DEADLINE_S):
    last = [None]

    def check():
        last[0] = get_job(jid)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError, IndexError):
            return False

    return bool(wait_until(check, timeout, 0.1)), last[0]


def launched(j):
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def gpu_of(j):
    return ((j.get("current_attempt") or {}).get("gpus") or [None])[0]


def detail(j):
    return f"{json.dumps(j)}\n-- agent:\n{file_tail(AGENT_LOG, 1500)}\n-- server:\n" \
           f"{SRV.log_tail()}"


def cancel(jid):
    call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    wait_job(jid, lambda j: j["state"] in FINAL)


def setup():
    global ADMIN
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    path = os.path.join(TMP, "teams.yaml")
    with open(path, "w") as f:
        f.write(TEAMS_YAML)
    rc, out, err = cli("apply", "-f", path)
    ok(rc == 0 and "team/idle-can created" in out, "apply -f creates teams with idle policies",
       f"{rc}\n{out}\n{err}")
    rc, out, err = cli("apply", "-f", path)
    lines = out.splitlines()
    ok(rc == 0 and lines and all(line.endswith(" unchanged") for line in lines),
       "apply -f of the same file again: every object unchanged (\"2s\" is 2 seconds)",
       f"{rc}\n{out}\n{err}")
    st, team, raw = call("GET", "/v1/teams/idle-can", token=ADMIN)
    ok(st == 200 and team.get("idle") == {"threshold_pct": 10, "window_s": 2,
                                          "action": "cancel", "warning_s": 1},
       "GET shows the team's idle policy in seconds", raw)

    st, body, raw = call("PUT", "/v1/teams/idle-can",
                         {"idle": {"threshold_pct": 101, "action": "cancel"}}, token=ADMIN)
    msg = ((body or {}).get("error") or {}).get("message", "")
    st2, team2, _ = call("GET", "/v1/teams/idle-can", token=ADMIN)
    ok(st == 400 and "idle.threshold_pct" in msg and team2 == team,
       "a threshold of 101 %: 400 naming idle.threshold_pct, the team unchanged", raw)
    st, body, raw = call("PUT", "/v1/teams/idle-can", {"idle": {"action": "nap"}}, token=ADMIN)
    msg = ((body or {}).get("error") or {}).get("message", "")
    ok(st == 400 and "idle.action" in msg and "report" in msg,
       "an unknown action: 400 naming idle.action and the allowed ones", raw)

    for team in ("idle-rep", "idle-can", "idle-req"):
        user = "u-" + team
        put(f"/v1/users/{user}", {"unix_user": JOB_USER, "team": team, "role": "member"})
        TOKENS[team] = SRV.api.expect("POST", f"/v1/users/{user}/tokens?label=test",
                                      want=(201,), token=ADMIN)["token"]

    set_util(80)
    AGENT.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = (body or {}).get("nodes") or [] if st == 200 else []
        return any(n.get("name") == "n1" and n.get("state") == "up"
                   and len(n.get("gpu_samples") or []) == NGPUS for n in nodes)

    if not wait_until(registered, timeout=30, step=0.1):
        raise RuntimeError(f"the agent did not register: {file_tail(AGENT_LOG)}")


def report():
    """A job at 0 % is flagged (JSON, queue, show, metrics); 50 % clears it;
    a job at 80 % beside it is not flagged."""
    busy = submit("idle-rep", "busy")
    good, jb = wait_job(busy, launched)
    if not good:
        raise RuntimeError(f"the busy job did not start: {detail(jb)}")
    busy_gpu = gpu_of(jb)
    set_util(0, {busy_gpu: 80})
    jid = submit("idle-rep", "idle")
    good, j = wait_job(jid, lambda j: launched(j) and j.get("idle"))
    idle = (j or {}).get("idle") or {}
    ok(good and idle.get("threshold_pct") == 10 and idle.get("window_s") == 2
       and idle.get("action") == "report" and idle.get("since") and idle.get("action_at") is None,
       "a job on a GPU at 0 % is flagged in its JSON: since, threshold 10, window 2 s, report",
       detail(j))
    jb = get_job(busy)
    ok(jb and jb["state"] == "RUNNING" and jb.get("idle") is None,
       "the job on a GPU at 80 %, running longer, is not flagged", detail(jb))

    rc, out, err = cli("queue")
    row = next((line for line in out.splitlines() if line.split()[:1] == [str(jid)]), "")
    brow = next((line for line in out.splitlines() if line.split()[:1] == [str(busy)]), "")
    ok(rc == 0 and "IDLE(<10%" in row and "n1" in row and "IDLE" not in brow,
       "gpuorch queue shows IDLE(<10% ...) in the idle job's REASON, not in the busy one's",
       f"{rc}\n{out}\n{err}")
    diag(f"queue: {row}")
    rc, out, err = cli("show", str(jid))
    line = next((x for x in out.splitlines() if x.startswith("idle:")), "")
    diag(f"show: {line}")
    ok(rc == 0 and "under 10%" in line and "report" in line,
       "gpuorch show has an idle: line with the threshold and the action", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("queue", "--json")
    try:
        listed = {x["id"]: x for x in json.loads(out)} if rc == 0 else {}
    except (ValueError, TypeError, KeyError):
        listed = {}
    if not listed and rc == 0:
        try:
            listed = {x["id"]: x for x in json.loads(out).get("jobs", [])}
        except (ValueError, AttributeError, KeyError):
            listed = {}
    ok(listed.get(jid, {}).get("idle", {}).get("threshold_pct") == 10
       and "idle" in listed.get(busy, {}) and listed[busy]["idle"] is None,
       "gpuorch queue --json carries the idle object (null for the busy job)", out[:1500])

    st, _, raw = SRV.api.scrape(ADMIN)
    text = raw.decode(errors="replace")
    want = f'gpuorch_job_idle{{hpc_job="{jid}",team="idle-rep"'
    ok(st == 200 and want in text and f'hpc_job="{busy}"' not in "\n".join(
        x for x in text.splitlines() if x.startswith("gpuorch_job_idle{")),
       "GET /metrics has gpuorch_job_idle for the idle job only",
       f"GET /metrics: {st}\n" + "\n".join(x for x in text.splitlines() if "idle" in x)[:1500])

    set_util(0, {busy_gpu: 80, gpu_of(j): 50})
    good, j = wait_job(jid, lambda j: j["state"] == "RUNNING" and j.get("idle") is None)
    ok(good, "raising its GPU to 50 % clears the flag", detail(j))
    cancel(jid)
    cancel(busy)


def cancelled():
    """Action cancel, warning 1 s: the job is cancelled with the idle reason."""
    set_util(0)
    jid = submit("idle-can", "to-cancel")
    good, j = wait_job(jid, lambda j: (j.get("idle") or {}).get("action_at"))
    idle = (j or {}).get("idle") or {}
    ok(good and idle.get("action") == "cancel" and idle.get("warned_at"),
       "action cancel: the flagged job is warned, with action_at in its JSON", detail(j))
    good, j = wait_job(jid, lambda j: j["state"] in FINAL)
    reason = (j or {}).get("reason") or ""
    ok(good and j["state"] == "CANCELLED" and "idle: GPUs under 10% for 2s" in reason,
       "after the warning it is CANCELLED with reason 'idle: GPUs under 10% for 2s'", detail(j))
    log = file_tail(SRV.log_path, 10 ** 6)
    ok(f"job {jid} (team idle-can): idle" in log and f"job {jid} (team idle-can): cancelled" in log,
       "the server logged the warning and the cancel", log[-2000:])


def requeued():
    """Action requeue: preempted, back to PENDING, a second attempt runs."""
    set_util(0)
    jid = submit("idle-req", "to-requeue")

    def second(j):
        atts = j.get("attempts") or []
        return j.get("attempts_made", 0) >= 2 and atts and atts[0].get("state") == "PREEMPTED"

    good, j = wait_job(jid, second, timeout=60)
    first = ((j or {}).get("attempts") or [{}])[0]
    ok(good and j["state"] in ("PENDING", "RUNNING") and "idle" in (first.get("reason") or ""),
       "action requeue: attempt 1 ends PREEMPTED for idleness and a second attempt is made",
       detail(j))
    st, _, raw = SRV.api.scrape(ADMIN)
    text = raw.decode(errors="replace")
    ok(st == 200 and 'gpuorch_idle_actions_total{team="idle-req",action="requeue"}' in text
       and 'gpuorch_idle_actions_total{team="idle-req",action="requeue"} 0' not in text,
       "GET /metrics counts the requeue in gpuorch_idle_actions_total",
       f"GET /metrics: {st}\n" + "\n".join(x for x in text.splitlines() if "idle_actions" in x))
    set_util(80)
    cancel(jid)


def gpu_sample(uuid):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    nodes = (body or {}).get("nodes") or [] if st == 200 else []
    return next((g for n in nodes for g in n.get("gpu_samples") or [] if g.get("uuid") == uuid),
                None)


def unscripted():
    """The fake's own figures: a busy job's GPU reads high and the job is never
    flagged; a sleeping one's reads 0 % and it is flagged; memory is the
    whole GPU's for each."""
    # Samples lag the file by a heartbeat or two: a scripted 100 % seen on
    # every GPU first, so that the 0 % below is the fake's own figure, not a
    # sample taken before an earlier step's file took effect.
    set_util(100)
    ok(wait_until(lambda: all((gpu_sample(u) or {}).get("utilization_pct") == 100
                              for u in UUIDS), timeout=DEADLINE_S, step=0.2),
       "a scripted 100 % reaches every GPU's sample", json.dumps([gpu_sample(u) for u in UUIDS]))
    set_util(None)
    ok(wait_until(lambda: all((gpu_sample(u) or {}).get("utilization_pct") == 0 for u in UUIDS),
                  timeout=DEADLINE_S, step=0.2),
       "without figures in the file, the GPUs without jobs read 0 %",
       json.dumps([gpu_sample(u) for u in UUIDS]))
    burn = submit("idle-rep", "burn", ("sh", "-c", "while :; do :; done"))
    nap = submit("idle-rep", "nap")
    good, jb = wait_job(burn, launched)
    good2, jn = wait_job(nap, launched)
    if not (good and good2):
        raise RuntimeError(f"the jobs did not start: {detail(jb)}\n{detail(jn)}")
    bgpu, ngpu = gpu_of(jb), gpu_of(jn)
    seen = {"burn": [], "nap": []}

    def hot():
        b, n = gpu_sample(bgpu), gpu_sample(ngpu)
        seen["burn"].append((b or {}).get("utilization_pct"))
        seen["nap"].append((n or {}).get("utilization_pct"))
        return (b or {}).get("utilization_pct") is not None and b["utilization_pct"] >= 30

    good = wait_until(hot, timeout=60, step=0.3)
    diag(f"burn's GPU read {seen['burn'][-5:]}, nap's {seen['nap'][-5:]}")
    ok(good, "the GPU of a job spinning on one core reads at least 30 % (no figure scripted)",
       f"burn's GPU: {seen['burn'][-20:]}")
    good, j = wait_job(nap, lambda j: j.get("idle"))
    ok(good and all(u is None or u <= 5 for u in seen["nap"] + [
        (gpu_sample(ngpu) or {}).get("utilization_pct")]),
       "the sleeping job's GPU reads 0..5 % and the job is flagged idle",
       f"nap's GPU: {seen['nap'][-20:]}\n{detail(j)}")
    jb = get_job(burn)
    ok(jb and jb["state"] == "RUNNING" and jb.get("idle") is None,
       "the busy job is not flagged", detail(jb))
    for what, uuid, jid in (("burn", bgpu, burn), ("nap", ngpu, nap)):
        g = gpu_sample(uuid) or {}
        mine = [p for p in g.get("processes") or [] if p.get("job") == jid]
        total = g.get("memory_total_mib")
        ok(total and g.get("memory_used_mib") == total
           and sum(p.get("memory_mib") or 0 for p in mine) == total,
           f"{what}: a whole-GPU job's memory is its GPU's, in the GPU's figure and its processes'",
           json.dumps(g))
    cancel(burn)
    cancel(nap)


def main():
    print("TAP version 13")
    setup()
    for step in (report, cancelled, requeued, unscripted):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    st, body, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1000", token=ADMIN)
    for j in (body or {}).get("jobs") or [] if st == 200 else []:
        cancel(j["id"])
    log = file_tail(AGENT_LOG, 10 ** 7) + file_tail(SRV.log_path, 10 ** 7)
    ok("Sanitizer" not in log and "runtime error:" not in log,
       "no sanitizer report in the agent's or server's log", log[-3000:])
    rc = AGENT.stop()
    ok(rc == 0, "the agent stops with status 0", rc)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    AGENT.kill()
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""cost_test.py GPUORCH - the cost ledger, prices and budgets against a real
`gpuorch server` and one real `gpuorch agent` on the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1), over HTTP on
loopback. Prints TAP.

What it checks: bad prices (unknown GPU type, negative, not a number, too
large, 7 decimals), negative budgets and impossible time ranges are refused
with the field named, and nothing stored changes; a job that runs ~2 s costs
price x GPUs x its recorded run time; a price change while a job runs charges
each part at its price; a failed job shows under failed; `by` project, model,
user and job; members see only their team; over budget, a low-class job gets
403 budget_exceeded and a normal one is accepted; a controller restart keeps
the ledger and the running job's accrual goes on.

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). Processes are stopped by PID; conditions are polled with
deadlines. KEEP_TMP=1 keeps the directories."""

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, remove_tmp  # noqa: E402
from harness import DEADLINE_S, Server, diag, file_tail, message, ok, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
PRICE = 3600.0  # per GPU-hour: one unit per GPU-second, so costs read as seconds

SRV = Server(BIN, "gpuorch-cost-test-srv-", ["--pass-interval", "1"])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-cost-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = ALICE = BOB = None
API = SRV.client()  # the admin's token once the server made it (setup)
AGENT = None
GPU_TYPE = None


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Agent(FakeAgent):
    """A test agent (harness.FakeAgent) with NGPUS GPUs at 40 %."""

    def __init__(self, name, ngpus):
        super().__init__(BIN, SRV, TMP, FAKENVML, name,
                         [fake_gpu_uuid(7, i) for i in range(ngpus)], poll_wait=2, dirty_wait=1)
        self.write_gpu_list([{"uuid": u, "utilization": 40, "memory_utilization": 10,
                              "process_memory_mib": 512} for u in self.uuids])


def put(path, body):
    return API.expect("PUT", path, body)


def get(path, token=None):
    return API.call("GET", path, token=token)


def submit(spec, token=None):
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1}, **spec)
    return API.expect("POST", "/v1/jobs", spec, want=(201,), token=token or ALICE)["id"]


def job(jid):
    st, body, _ = get(f"/v1/jobs/{jid}")
    return body if st == 200 else None


def wait_job(jid, pred, timeout=DEADLINE_S):
    last = [None]

    def check():
        last[0] = job(jid)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError, IndexError):
            return False
    return bool(wait_until(check, timeout, 0.1)), last[0]


def final(j):
    return j["state"] in FINAL


def launched(j):
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def run_seconds(j):
    """Each attempt's [start, end) as recorded, in seconds."""
    return [(ts(a["started_at"]), ts(a["ended_at"])) for a in j.get("attempts") or []]


def cost(query, token=None):
    st, body, raw = get(f"/v1/cost?{query}", token)
    if st != 200:
        raise RuntimeError(f"GET /v1/cost?{query}: {st} {raw[:300]!r}")
    return body


def row(report, key):
    return next((r for r in report["rows"] if r["key"] == key), None)


def new_token(user):
    return API.expect("POST", f"/v1/users/{user}/tokens?label=test", want=(201,))["token"]


# -- steps ------------------------------------------------------------------------------


def setup():
    global ADMIN, ALICE, BOB, AGENT, GPU_TYPE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    API.token = ADMIN
    put("/v1/pools/main", {})
    put("/v1/priority-classes/low", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 2, "borrow_limit": -1}]})
    put("/v1/teams/other", {})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    put("/v1/users/bob", {"unix_user": JOB_USER, "team": "other", "role": "member"})
    ALICE, BOB = new_token("alice"), new_token("bob")
    AGENT = Agent("c1", 4)
    AGENT.start()

    def registered():
        st, body, _ = get("/v1/nodes")
        nodes = (body or {}).get("nodes") or [] if st == 200 else []
        n = next((n for n in nodes if n.get("name") == "c1" and n.get("state") == "up"), None)
        return n if n and len(n.get("gpus") or []) == 4 else None
    node = wait_until(registered, timeout=30, step=0.1)
    ok(node, "the agent registers with 4 GPUs", file_tail(AGENT.log_path))
    if not node:
        raise RuntimeError("no agent")
    GPU_TYPE = node["gpus"][0]["gpu_type"]
    diag(f"the fake GPUs' type: {GPU_TYPE}")


def bad_input():
    before = get("/v1/prices")[2]
    checks = [
        ("A100-40GB", {"per_gpu_hour": 1}, "unknown GPU type"),
        (GPU_TYPE, {"per_gpu_hour": -1}, "per_gpu_hour"),
        (GPU_TYPE, {"per_gpu_hour": "2.5"}, "per_gpu_hour"),
        (GPU_TYPE, {"per_gpu_hour": 2e6}, "per_gpu_hour"),
        (GPU_TYPE, {"per_gpu_hour": 1.1234567}, "per_gpu_hour"),
        (GPU_TYPE, {"per_gpu_hour": 1, "colour": "red"}, "colour"),
    ]
    for name, body, want in checks:
        st, b, raw = call("PUT", f"/v1/prices/{name}", body, token=ADMIN)
        msg = message(b, raw)
        ok(st == 400 and want in msg, f"PUT /v1/prices/{name} {json.dumps(body)}: 400 naming "
           f"'{want}'", f"{st} {msg}")
    st, b, raw = call("PUT", "/v1/prices/A100-40GB", {"per_gpu_hour": 1}, token=ADMIN)
    ok(GPU_TYPE in message(b, raw), "the unknown-type error lists the known types", raw)
    ok(get("/v1/prices")[2] == before, "refused prices change nothing stored")
    team_before = get("/v1/teams/research")[2]
    for budget, field in (({"monthly": -5}, "budget.monthly"), ({"monthly": 0}, "budget.monthly"),
                          ({"monthly": 10, "alert_at": 1.5}, "budget.alert_at"),
                          ({"monthly": 10, "block_below": "nope"}, "budget.block_below"),
                          ({"monthly": 10, "extra": 1}, "extra")):
        st, b, raw = call("PUT", "/v1/teams/research",
                          {"quotas": [{"pool": "main", "guaranteed": 2, "borrow_limit": -1}],
                           "budget": budget}, token=ADMIN)
        ok(st == 400 and field in message(b, raw), f"budget {json.dumps(budget)}: 400 naming "
           f"'{field}'", f"{st} {raw!r}")
    ok(get("/v1/teams/research")[2] == team_before, "refused budgets change nothing stored")
    for q, name in (("since=2026-01-02&until=2026-01-01", "since"), ("by=colour", "by"),
                    ("since=yesterday", "since"), ("until=2026-13-01", "until"),
                    ("since=now&until=now", "since"), ("since=2026-%2B1-01", "since"),
                    ("until=2026-01-%201", "until"), ("by=job&key=", "key"),
                    ("by=team&key=" + "x" * 129, "key")):
        st, b, raw = get(f"/v1/cost?{q}")
        ok(st == 400 and message(b, raw).startswith(name), f"GET /v1/cost?{q}: 400 naming {name}",
           f"{st} {raw!r}")


def priced_run():
    b = put(f"/v1/prices/{GPU_TYPE}", {"per_gpu_hour": PRICE, "description": "test"})
    ok(b and b.get("per_gpu_hour") == PRICE and b.get("name") == GPU_TYPE,
       "PUT /v1/prices/TYPE stores the price", b)
    jid = submit({"gpus": 2, "project": "p1", "model": "m1", "command": ["sleep", "2"]})
    done, j = wait_job(jid, final)
    (start, end), = run_seconds(j) if done else [(0, 0)]
    want = 2 * (end - start)  # 2 GPUs x PRICE/3600 per second
    ok(done and j["state"] == "COMPLETED" and abs(j["cost"] - want) <= 0.01 and want >= 1.5,
       f"a 2-GPU job of ~2 s costs price x GPUs x its run time ({want:.3f})",
       json.dumps(j)[:1500])
    r = row(cost("by=job&since=-1h&until=now"), str(jid))
    ok(r and abs(r["cost"] - want) <= 0.01 and abs(r["gpu_hours"] - want / 3600) < 1e-5,
       "GET /v1/cost?by=job has its cost and GPU-hours", r)
    for by, key in (("project", "p1"), ("model", "m1"), ("user", "alice"), ("team", "research")):
        r = row(cost(f"by={by}&since=-1h"), key)
        ok(r and r["cost"] >= want - 0.01, f"by={by} has a row '{key}' with the job's cost", r)
    return jid


def key_filter():
    """key= keeps one group: its row as in the full answer, the total its figures."""
    full = cost("by=job&since=-1h&until=now")
    ok(len(full["rows"]) >= 2, "two jobs or more have cost by now", full)
    # an ended job's: a running one's figures grow between the two answers
    jid = next((r["key"] for r in full["rows"] if final(job(int(r["key"])))), None)
    one = cost(f"by=job&key={jid}&since=-1h&until=now")
    mine = row(full, jid)
    ok(one["rows"] == [mine] and one["total"] == {k: v for k, v in mine.items() if k != "key"},
       "GET /v1/cost?by=job&key=ID: that job's row alone, the total its figures",
       json.dumps(one)[:800])
    r = cost("by=project&key=p1&since=-1h")
    ok([x["key"] for x in r["rows"]] == ["p1"], "key= with by=project: the project's row alone", r)
    r = cost("by=job&key=999999&since=-1h")
    ok(r["rows"] == [] and r["total"]["cost"] == 0 and r["rate_per_hour"] == 0,
       "key= of a job that cost nothing: no row, a zero total and rate", r)


def price_change():
    jid = submit({"gpus": 1, "command": ["sleep", "3"]})
    up, _ = wait_job(jid, launched)
    time.sleep(1)  # let it run at the first price; the result is checked from the records
    before = time.time()
    put(f"/v1/prices/{GPU_TYPE}", {"per_gpu_hour": 2 * PRICE})
    after = time.time()
    done, j = wait_job(jid, final)
    (start, end), = run_seconds(j) if done else [(0, 0)]
    # cost = (change - start) + 2 (end - change) = (end - start) + (end - change)
    lo, hi = (end - start) + (end - after) - 0.01, (end - start) + (end - before) + 0.01
    ok(up and done and lo <= j["cost"] <= hi,
       f"a price change mid-run charges each part at its price ({lo:.3f} <= cost <= {hi:.3f})",
       json.dumps(j)[:800])
    put(f"/v1/prices/{GPU_TYPE}", {"per_gpu_hour": PRICE})


def failed_job():
    jid = submit({"gpus": 1, "command": ["sh", "-c", "sleep 1; exit 3"]})
    done, j = wait_job(jid, final)
    r = row(cost("by=job&since=-1h"), str(jid))
    ok(done and j["state"] == "FAILED" and r and r["failed_cost"] > 0 and
       abs(r["failed_cost"] - r["cost"]) < 1e-6 and r["failed_gpu_hours"] > 0,
       "a failed job's cost and GPU-hours show under failed", r)
    t = cost("by=team&since=-1h")["total"]
    ok(t["failed_cost"] > 0 and t["failed_cost"] < t["cost"], "the total splits failed cost out", t)


def members():
    jid = submit({"gpus": 1, "command": ["sleep", "1"]}, token=BOB)
    wait_job(jid, final)
    a = cost("by=team&since=-1h", token=ALICE)
    b = cost("by=team&since=-1h", token=BOB)
    adm = cost("by=team&since=-1h")
    ok([r["key"] for r in a["rows"]] == ["research"], "a member of research sees research only",
       a["rows"])
    ok([r["key"] for r in b["rows"]] == ["other"], "a member of other sees other only", b["rows"])
    ok(sorted(r["key"] for r in adm["rows"]) == ["other", "research"], "an admin sees both",
       adm["rows"])


def budget():
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 2, "borrow_limit": -1}],
                               "budget": {"monthly": 1, "alert_at": 0.5, "block_below": "normal"}})
    st, b, raw = call("POST", "/v1/jobs", {"pool": "main", "workdir": SHARED, "gpus": 1,
                                           "priority": "low", "command": ["true"]}, token=ALICE)
    msg = message(b, raw)
    ok(st == 403 and (b or {}).get("error", {}).get("code", (b or {}).get("error")) and
       "budget_exceeded" in raw.decode() and "research" in msg and "below class 'normal'" in msg,
       "over budget, a low-class job gets 403 budget_exceeded with the reason", f"{st} {raw!r}")
    st, b, raw = call("POST", "/v1/jobs", {"pool": "main", "workdir": SHARED, "gpus": 1,
                                           "command": ["true"]}, token=ALICE)
    ok(st == 201, "a normal-class job of the same team is accepted", f"{st} {raw!r}")
    if st == 201:
        wait_job(b["id"], final)
    st, b, raw = get("/v1/budgets", token=ALICE)
    r = next((x for x in b or [] if x.get("team") == "research"), None)
    ok(st == 200 and r and r["over"] is True and r["alert"] is True and r["spent"] > 1 and
       r["monthly"] == 1 and len(r["month"]) == 7, "GET /v1/budgets shows research over", raw)
    ok(wait_until(lambda: "team research spent" in SRV.log_tail(), timeout=10),
       "the controller logs the budget alert", SRV.log_tail())
    st, _, raw = API.scrape()
    text = raw.decode(errors="replace")
    want = ['gpuorch_budget_over{team="research"} 1', 'gpuorch_budget_monthly{team="research"} 1',
            'gpuorch_cost_total{team="research"} ', 'gpuorch_cost_rate_per_hour{team="other"} ']
    ok(st == 200 and all(w in text for w in want), "/metrics has the cost and budget families",
       "\n".join(line for line in text.splitlines() if "cost" in line or "budget" in line)
       or f"{st} {text[:500]}")
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 2, "borrow_limit": -1}]})


def restart():
    jid = submit({"gpus": 1, "command": ["sleep", "30"]})
    up, _ = wait_job(jid, launched)
    time.sleep(0.5)
    total_before = cost("by=team&since=-1h")["total"]["cost"]
    c1 = job(jid)["cost"]
    port = SRV.port
    rc = SRV.stop()
    SRV.extra_args += ["--listen", f"127.0.0.1:{port}"]
    SRV.start()
    j = job(jid)
    ok(up and rc == 0 and j and j["state"] == "RUNNING" and j["cost"] >= c1,
       "after a restart the running job's cost is at least what it was", f"{c1} {j}")
    grew = wait_until(lambda: (job(jid) or {}).get("cost", 0) > c1 + 1, timeout=10)
    ok(grew, "its accrual goes on after the restart", job(jid))
    total_after = cost("by=team&since=-1h")["total"]["cost"]
    ok(total_after >= total_before, "the ledger's totals survive the restart",
       f"{total_before} -> {total_after}")
    call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    done, j = wait_job(jid, final, timeout=30)
    ok(done and j["state"] == "CANCELLED" and j["cost"] > c1,
       "the cancelled job keeps what it cost", j and j.get("cost"))


def cli(*args, token=None, stdin=None):
    env = dict(os.environ, GPUORCH_SERVER=f"http://127.0.0.1:{SRV.port}",
               GPUORCH_TOKEN=token or ADMIN)
    env.pop("GPUORCH_TOKEN_FILE", None)
    env.pop("GPUORCH_CONFIG", None)
    p = subprocess.run([BIN] + list(args), input=stdin, capture_output=True, text=True, env=env,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def command_line():
    doc = f"prices:\n  - name: {GPU_TYPE}\n    per_gpu_hour: {PRICE}\n    description: test\n"
    rc, out, err = cli("apply", "-f", "-", stdin=doc)
    ok(rc == 0 and f"price/{GPU_TYPE}" in out, "gpuorch apply -f takes a prices: section",
       f"{rc} {out} {err}")
    rc, out, err = cli("cost", "--by", "project", "--since", "-1h")
    lines = out.splitlines()
    ok(rc == 0 and lines and lines[0].split() == ["PROJECT", "GPU-HOURS", "COST", "FAILED",
                                                  "UTIL%", "WASTE"]
       and any(line.split()[0] == "p1" for line in lines[1:] if line.split())
       and any(line.startswith("TOTAL") for line in lines),
       "gpuorch cost --by project prints the table with a total", f"{rc} {out} {err}")
    rc, out, err = cli("cost", "--since", "-1h", "--csv")
    ok(rc == 0 and out.splitlines()[0].startswith("team,gpu_hours,cost"),
       "gpuorch cost --csv prints CSV", out)
    rc, out, err = cli("cost", "--since", "-1h", "--json")
    ok(rc == 0 and json.loads(out)["by"] == "team", "gpuorch cost --json prints the answer", out)
    rc, out, err = cli("cost", "--since", "yesterday")
    ok(rc == 2 and "--since" in err, "gpuorch cost --since yesterday: exit 2 naming the flag", err)
    rc, out, err = cli("cost", "--since", "2026-01-02", "--until", "2026-01-01")
    ok(rc == 1 and "since" in err, "since after until: the server's 400 is shown", err)


def main():
    print("TAP version 13")
    setup()
    for step in (bad_input, priced_run, price_change, failed_job, key_filter, members,
                 command_line, budget, restart):
        try:
            step()
        except Exception as e:
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    ok("Sanitizer" not in SRV.log_tail() and "runtime error:" not in SRV.log_tail(),
       "the server's log holds no sanitizer report", SRV.log_tail())
    ok(AGENT.stop() == 0, "the agent stops cleanly")
    ok(SRV.stop() == 0, "the server stops cleanly", SRV.log_tail())


def on_exit():
    if AGENT and AGENT.proc and AGENT.proc.poll() is None:
        AGENT.proc.kill()
        AGENT.proc.wait()
    remove_tmp(TMP)


run(main, SRV, on_exit)

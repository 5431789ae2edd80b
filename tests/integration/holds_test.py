#!/usr/bin/env python3
"""holds_test.py GPUORCH - scontrol's habits against a real `gpuorch server`
and one node agent this test simulates (four GPUs): hold and release (a
user's hold, an admin's, which a user may not release, another team's job),
requeue of a running and of an ended job (the same id, a new attempt),
update of the time limit (a user only lowers it; a running attempt's
assignment carries the new one), the priority class and dependencies (a bad
field is a 400 naming it and changes nothing), arrays (the array's id holds
every pending task, ARRAY_TASK one), --hold and --begin at submit (the job
waits "begin time not reached" and starts at its time although passes run
only every 30 s), the CLI's hold, release, requeue and update, and a
controller restart that keeps a hold and an updated time limit. Prints TAP.

The server runs as a child process on 127.0.0.1 with an ephemeral port, a
temporary data directory and --pass-interval 30 (so only events and the
begin-time timer start jobs); it is stopped by PID. Conditions are polled
with generous deadlines, never timed."""

import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_sim import AGENTS, HOLD, LOCK, MANUAL, Agent, held_by  # noqa: E402
from harness import Server, ok, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRV = Server(BIN, "gpuorch-holds-test-", ["--pass-interval", 30, "--node-timeout", 30])
call = SRV.call
TOK = {}  # admin, alice (research), bob (research), carol (other)


def api(method, path, who="alice", body=None):
    st, b, raw = call(method, path, body, token=TOK[who])
    return st, b, raw


def submit(spec, who="alice"):
    st, body, raw = api("POST", "/v1/jobs", who, dict({"gpus": 1, "command": HOLD}, **spec))
    if st != 201:
        raise RuntimeError(f"submit: {st} {raw[:300]!r}")
    return body


def job(jid):
    st, body, _ = api("GET", f"/v1/jobs/{jid}", "admin")
    return body if st == 200 else None


def wait_job(jid, pred, timeout=20):
    last = [None]

    def check():
        last[0] = job(jid)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError):
            return False

    return bool(wait_until(check, timeout)), last[0]


def running(j):
    return j["state"] == "RUNNING"


def end(jid):
    """Ends JID's attempt as its agent would (COMPLETED)."""
    ag, key, _ = held_by(jid, timeout=10)
    if ag:
        ag.report(key[0], key[1], {"state": "COMPLETED", "exit_code": 0})
    return wait_job(jid, lambda j: j["state"] == "COMPLETED")[0]


def cli(*args, who="alice"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env["GPUORCH_SERVER"] = SRV.url
    env["GPUORCH_TOKEN"] = TOK[who]
    env["HOME"] = SRV.tmp
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=60)
    return r.returncode, r.stdout, r.stderr


def setup():
    SRV.start()
    TOK["admin"] = open(SRV.token_file("admin")).read().strip()
    join = open(SRV.token_file("join")).read().strip()
    for path, body in (("/v1/pools/main", {"description": "test"}),
                       ("/v1/priority-classes/normal", {"order": 0}),
                       ("/v1/priority-classes/high", {"order": 10}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 4, "borrow_limit": -1}]}),
                       ("/v1/teams/other", {})):
        st, _, raw = api("PUT", path, "admin", body)
        if st not in (200, 201):
            raise RuntimeError(f"PUT {path}: {st} {raw[:300]!r}")
    for name, team, unix in (("alice", "research", "gpuorch-test1"),
                             ("bob", "research", "gpuorch-test2"), ("carol", "other", "nobody")):
        api("PUT", f"/v1/users/{name}", "admin", {"unix_user": unix, "team": team,
                                                   "role": "member"})
        st, body, raw = api("POST", f"/v1/users/{name}/tokens?label=t", "admin")
        if st != 201:
            raise RuntimeError(f"{name}'s token: {st} {raw[:300]!r}")
        TOK[name] = body["token"]
    ag = Agent("n1", 1, SRV.client(join))
    AGENTS.append(ag)
    st, _, raw = ag.register()
    if st != 201:
        raise RuntimeError(f"register: {st} {raw[:300]!r}")
    ag.start()


# -- The checks. -----------------------------------------------------------------------------


def hold_and_release():
    a = submit({"hold": True})
    held, j = wait_job(a["id"], lambda j: j["wait_reason"] == "hold: held by user")
    ok(held and j["state"] == "PENDING" and j["hold"] == "user" and a["hold"] == "user",
       "a job submitted with hold waits, 'held by user', GET shows hold 'user'", str(j)[:400])
    st, body, raw = api("POST", f"/v1/jobs/{a['id']}/hold", "carol")
    ok(st == 403, "another team's member may not hold the job: 403", f"{st} {raw[:200]!r}")
    st, body, raw = api("POST", f"/v1/jobs/{a['id']}/release", "bob")
    ok(st == 200 and body["jobs"][0]["hold"] is None,
       "a member of the job's team releases it: 200, hold null", f"{st} {raw[:300]!r}")
    ran, j = wait_job(a["id"], running)
    ok(ran, "the released job is scheduled and runs", str(j)[:300])
    st, body, raw = api("POST", f"/v1/jobs/{a['id']}/hold")
    ok(st == 409 and "RUNNING" in raw.decode(), "holding a running job: 409 naming RUNNING",
       f"{st} {raw[:200]!r}")

    b = submit({"command": MANUAL, "gpus": 8})  # never fits: stays pending
    st, body, raw = api("POST", f"/v1/jobs/{b['id']}/hold", "admin")
    ok(st == 200 and body["jobs"][0]["hold"] == "admin"
       and body["jobs"][0]["wait_reason"] == "hold: held by an admin",
       "an admin's hold: 200, 'held by an admin'", f"{st} {raw[:300]!r}")
    st, _, raw = api("POST", f"/v1/jobs/{b['id']}/hold")
    st2, body, _ = api("GET", f"/v1/jobs/{b['id']}")
    ok(st == 200 and body["hold"] == "admin", "a user's hold leaves an admin's in place",
       f"{st} {raw[:200]!r}")
    st, _, raw = api("POST", f"/v1/jobs/{b['id']}/release")
    ok(st == 403 and "admin" in raw.decode(), "a user may not release an admin's hold: 403",
       f"{st} {raw[:200]!r}")
    st, body, raw = api("POST", f"/v1/jobs/{b['id']}/release", "admin")
    ok(st == 200 and body["jobs"][0]["hold"] is None, "the admin releases it: 200",
       f"{st} {raw[:200]!r}")
    api("POST", f"/v1/jobs/{b['id']}/cancel", "admin")
    st, _, raw = api("POST", "/v1/jobs/999999/hold")
    ok(st == 404, "holding a job that does not exist: 404", f"{st} {raw[:200]!r}")
    st, _, raw = api("POST", "/v1/jobs/1x/hold")
    ok(st == 400, "a malformed job id: 400", f"{st} {raw[:200]!r}")
    return a["id"]


def requeue(running_id):
    first = job(running_id)["current_attempt"]["attempt"]
    st, body, raw = api("POST", f"/v1/jobs/{running_id}/requeue")
    ok(st == 200, "requeue of a running job: 200", f"{st} {raw[:300]!r}")
    again, j = wait_job(running_id, lambda j: running(j) and j["current_attempt"]["attempt"] > first)
    ok(again and j["id"] == running_id and j["reason"] is None
       and j["attempts"][first - 1]["state"] in ("PREEMPTED", "CANCELLED"),
       "the requeued job keeps its id and runs again as a new attempt", str(j)[:500])
    ok(end(running_id), "its new attempt completes")
    st, body, raw = api("POST", f"/v1/jobs/{running_id}/requeue")
    ok(st == 200 and body["jobs"][0]["state"] == "PENDING"
       and body["jobs"][0]["reason"] == "requeued by user",
       "requeue of a COMPLETED job: PENDING, 'requeued by user'", f"{st} {raw[:300]!r}")
    ran, j = wait_job(running_id, running)
    ok(ran, "the requeued completed job runs again", str(j)[:300])
    ok(end(running_id), "and completes again")
    p = submit({"command": MANUAL, "gpus": 8})
    st, _, raw = api("POST", f"/v1/jobs/{p['id']}/requeue")
    ok(st == 409 and "PENDING" in raw.decode(), "requeue of a pending job: 409 naming PENDING",
       f"{st} {raw[:200]!r}")
    api("POST", f"/v1/jobs/{p['id']}/cancel", "admin")


def update():
    u = submit({"command": MANUAL, "gpus": 8, "time_limit_s": 3600})
    path = f"/v1/jobs/{u['id']}"
    st, body, raw = api("PATCH", path, "alice", {"time_limit_s": 1800})
    ok(st == 200 and body["jobs"][0]["spec"]["time_limit_s"] == 1800,
       "a user lowers a pending job's time limit: 200", f"{st} {raw[:300]!r}")
    st, _, raw = api("PATCH", path, "alice", {"time_limit_s": 7200})
    ok(st == 403 and "time_limit_s" in raw.decode(), "a user may not raise it: 403 naming the field",
       f"{st} {raw[:200]!r}")
    st, _, raw = api("PATCH", path, "alice", {"time_limit_s": 0})
    ok(st == 403, "nor lift it (0: no limit): 403", f"{st} {raw[:200]!r}")
    st, body, raw = api("PATCH", path, "admin", {"time_limit_s": 7200})
    ok(st == 200 and body["jobs"][0]["spec"]["time_limit_s"] == 7200, "an admin raises it: 200",
       f"{st} {raw[:200]!r}")
    for bad, field in (({"gpus": 2}, "gpus"), ({"priority": "nope"}, "priority"),
                       ({"time_limit_s": "x"}, "time_limit_s"),
                       ({"dependencies": [{"type": "afterok", "job": 999999}]}, "dependencies"),
                       ({"priority": "high", "cpus": 3}, "cpus")):
        st, _, raw = api("PATCH", path, "alice", bad)
        ok(st == 400 and field in raw.decode(), f"update {bad}: 400 naming '{field}'",
           f"{st} {raw[:200]!r}")
    j = job(u["id"])
    ok(j["spec"]["time_limit_s"] == 7200 and j["spec"]["priority"] is None
       and j["spec"]["cpus"] == 1, "a refused update changed nothing stored", str(j["spec"])[:300])
    st, _, raw = api("PATCH", path, "carol", {"time_limit_s": 60})
    ok(st == 403, "another team's member may not update the job: 403", f"{st} {raw[:200]!r}")
    st, body, raw = api("PATCH", path, "alice", {"priority": "high", "dependencies": [
        {"type": "afterany", "job": u["id"] - 1}]})
    ok(st == 200 and body["jobs"][0]["spec"]["priority"] == "high"
       and body["jobs"][0]["spec"]["dependencies"] == [{"type": "afterany", "job": u["id"] - 1}],
       "the priority class and the dependencies change: 200", f"{st} {raw[:300]!r}")

    d = submit({"command": MANUAL, "gpus": 8, "dependencies": [{"type": "afterany", "job": u["id"]}]})
    st, _, raw = api("PATCH", path, "alice", {"dependencies": [{"type": "afterok", "job": d["id"]}]})
    ok(st == 400 and "cycle" in raw.decode() and "dependencies[0].job" in raw.decode(),
       "a dependency on a job that waits for this one: 400, a cycle", f"{st} {raw[:200]!r}")
    st, _, raw = api("PATCH", path, "alice", {"dependencies": [{"type": "afterok", "job": u["id"]}]})
    ok(st == 400 and "cycle" in raw.decode(), "a dependency on itself: 400", f"{st} {raw[:200]!r}")
    api("POST", f"/v1/jobs/{d['id']}/cancel", "admin")

    r = submit({"time_limit_s": 600})
    ran, _ = wait_job(r["id"], running)
    st, _, raw = api("PATCH", f"/v1/jobs/{r['id']}", "alice", {"time_limit_s": 300})
    ok(ran and st == 200, "a running job's time limit is lowered: 200", f"{st} {raw[:200]!r}")

    def limit_seen():
        ag = AGENTS[0]
        with LOCK:
            runs = [a for a in (ag.last or {}).get("attempts") or []
                    if a.get("job") == r["id"] and a.get("action") == "run"]
        return runs and runs[0]["spec"]["time_limit_s"] == 300

    ok(wait_until(limit_seen, 20), "the running attempt's assignment carries the new limit")
    st, _, raw = api("PATCH", f"/v1/jobs/{r['id']}", "alice",
                     {"dependencies": [{"type": "afterany", "job": u["id"]}]})
    ok(st == 409, "dependencies of a running job: 409", f"{st} {raw[:200]!r}")
    end(r["id"])
    return u["id"]


def arrays():
    a = submit({"command": MANUAL, "array": "0-3", "hold": True})
    aid = a["array_id"]
    ids = a["array_jobs"]
    st, body, raw = api("POST", f"/v1/jobs/{aid}_2/release")
    ok(st == 200 and [j["id"] for j in body["jobs"]] == [ids[2]],
       "ARRAY_TASK releases one task", f"{st} {raw[:300]!r}")
    ran, _ = wait_job(ids[2], running)
    others = [job(i) for i in (ids[0], ids[1], ids[3])]
    ok(ran and all(j["hold"] == "user" and j["state"] == "PENDING" for j in others),
       "that task runs; the others stay held", str(others)[:300])
    st, body, raw = api("POST", f"/v1/jobs/{aid}/hold", "admin")
    ok(st == 200 and sorted(j["id"] for j in body["jobs"]) == [ids[0], ids[1], ids[3]],
       "the array's id holds every pending task (the running one is left out)",
       f"{st} {raw[:300]!r}")
    st, body, raw = api("POST", f"/v1/jobs/{aid}/release")
    ok(st == 403 and "admin" in raw.decode(),
       "a user may not release an array an admin holds: 403, nothing released",
       f"{st} {raw[:200]!r}")
    st, body, raw = api("PATCH", f"/v1/jobs/{aid}", "alice", {"time_limit_s": 120})
    ok(st == 200 and sorted(j["id"] for j in body["jobs"]) == ids
       and all(j["spec"]["time_limit_s"] == 120 for j in body["jobs"]),
       "an update of the array's id changes every task that has not ended", f"{st} {raw[:300]!r}")
    st, body, raw = api("POST", f"/v1/jobs/{aid}_9/hold")
    ok(st == 404, "a task the array does not have: 404", f"{st} {raw[:200]!r}")
    for i in ids:
        api("POST", f"/v1/jobs/{i}/cancel", "admin")


def begin_time():
    at = int(time.time()) + 4
    b = submit({"begin": at})
    waits, j = wait_job(b["id"], lambda j: str(j["wait_reason"]).startswith(
        "deferred: begin time not reached (starts at "))
    ok(waits and j["estimated_start"] is not None,
       "a job with a begin time waits 'begin time not reached (starts at ...)'", str(j)[:400])
    ran, j = wait_job(b["id"], running, timeout=15)
    ok(ran and time.time() >= at - 1,
       "it starts at its begin time, though passes run only every 30 s", str(j)[:300])
    end(b["id"])


def honest_estimates():
    big = submit({"gpus": 4})  # every GPU, no time limit
    ran, _ = wait_job(big["id"], running)
    w = submit({"gpus": 1, "time_limit_s": 60})
    waits, j = wait_job(w["id"], lambda j: j["wait_reason"] is not None)
    ok(ran and waits and j["wait_reason"]
       == "resources: not enough free GPUs in pool main (need 1, 0 free)"
       or j["wait_reason"] == "resources: not enough free GPUs (need 1, 0 free)",
       "a job that does not fit says what it needs and what is free", str(j)[:400])
    ok(j["estimated_start"] is None
       and j.get("estimated_start_note") == "unknown: the running jobs have no time limit",
       "and promises no start while the running job has no time limit", str(j)[:400])
    rc, out, err = cli("show", str(w["id"]))
    ok(rc == 0 and "unknown: the running jobs have no time limit" in out,
       "gpuorch show says why the start is unknown", out[-500:])
    end(big["id"])
    ran, _ = wait_job(w["id"], running)
    ok(ran, "it starts once the GPUs are free")
    end(w["id"])


def cli_commands():
    rc, out, err = cli("submit", "--hold", "--gpus", "1", "--wrap", "sleep 3600")
    jid = out.strip().split()[-1] if rc == 0 else "0"
    j = job(int(jid)) if jid.isdigit() else None
    ok(rc == 0 and j and j["hold"] == "user", "gpuorch submit --hold: the job is held",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("show", jid)
    ok(rc == 0 and "held by user" in out, "gpuorch show says it is held by user", out[-600:])
    rc, out, err = cli("release", jid)
    ok(rc == 0 and out == f"Released job {jid}\n", "gpuorch release: one line", f"{out!r} {err!r}")
    wait_job(int(jid), running)
    rc, out, err = cli("hold", jid)
    ok(rc == 1 and out == "" and "409" in err and "RUNNING" in err,
       "gpuorch hold of a running job: exit 1 naming its state", f"{rc} {out!r} {err!r}")
    rc, out, err = cli("update", jid, "TimeLimit=10:00")
    ok(rc == 0 and out == f"Updated job {jid}\n" and job(int(jid))["spec"]["time_limit_s"] == 600,
       "gpuorch update JOB TimeLimit=10:00: the limit is 600 s", f"{out!r} {err!r}")
    rc, out, err = cli("update", jid, "Nodes=3")
    ok(rc == 2 and "Nodes=3" in err and out == "", "gpuorch update of an unknown field: exit 2",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("update", jid, "TimeLimit=2:00:00")
    ok(rc == 1 and "only an admin" in err, "gpuorch update raising the limit: exit 1, why",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("requeue", jid)
    ok(rc == 0 and out == f"Requeued job {jid}\n", "gpuorch requeue: one line", f"{out!r} {err!r}")
    rc, out, err = cli("submit", "--begin", "tomorrow", "--gpus", "1", "--wrap", "true")
    bid = out.strip().split()[-1] if rc == 0 else "0"
    j = job(int(bid)) if bid.isdigit() else None
    ok(rc == 0 and j and j["spec"]["begin"] > time.time() + 60
       and j["wait_reason"].startswith("deferred: begin time not reached"),
       "gpuorch submit --begin tomorrow: not before tomorrow", f"{rc} {out!r} {err!r} {j}"[:500])
    rc, out, err = cli("submit", "--begin", "soon", "--wrap", "true")
    ok(rc == 2 and "now[+N" in err and "soon" in err, "--begin soon: exit 2 naming the forms",
       f"{rc} {err!r}")
    for i in (jid, bid):
        if i.isdigit():
            api("POST", f"/v1/jobs/{i}/cancel", "admin")


def restart(updated_id):
    h = submit({"command": MANUAL, "gpus": 8, "hold": True})
    before = job(updated_id)["spec"]["time_limit_s"]
    SRV.stop()
    SRV.start()
    j = job(h["id"])
    ok(j and j["hold"] == "user" and j["state"] == "PENDING",
       "a restart keeps a hold", str(j)[:300])
    waits, j = wait_job(h["id"], lambda j: j["wait_reason"] == "hold: held by user")
    ok(waits, "and the job still waits 'held by user'", str(j)[:300])
    u = job(updated_id)
    ok(u and u["spec"]["time_limit_s"] == before == 7200 and u["spec"]["priority"] == "high",
       "a restart keeps an updated time limit and class", str(u and u["spec"])[:300])


def main():
    print("TAP version 13")
    setup()
    steps = [hold_and_release, requeue, update, arrays, begin_time, honest_estimates, cli_commands,
             restart]
    carried = {}
    for step in steps:
        try:
            if step is requeue:
                step(carried["running"])
            elif step is restart:
                step(carried["updated"])
            else:
                r = step()
                if step is hold_and_release:
                    carried["running"] = r
                if step is update:
                    carried["updated"] = r
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    for ag in AGENTS:
        ag.stopped = True


if __name__ == "__main__":
    run(main, SRV)

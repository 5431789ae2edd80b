#!/usr/bin/env python3
"""lifecycle_test.py GPUORCH - a job's life between `gpuorch server` and node
agents that this test simulates (two nodes of four GPUs each), over HTTP on
loopback: registration, heartbeats, the assignments long-poll and attempt
reports; completion, retries, cancel, dependencies, arrays with a concurrency
cap, a node that stops heartbeating, kill -9 of the controller while jobs run,
and the agent routes' bad-input and auth matrix. Prints TAP.

Every assignments answer of every node is checked as it arrives: no GPU in two
attempts at once, only the node's own GPUs and as many as the job asked for, no
job on two live nodes, no attempt assigned again after its final report. And
harness.GpuWatch samples the controller's assignments (and the GPUs' processes,
none here: the simulated agents run nothing) every 100 ms throughout.

The server runs as a child process on 127.0.0.1 with an ephemeral port, a
temporary data directory, --node-timeout 2 and --pass-interval 1; it is stopped
by PID. Conditions are polled with generous deadlines, never timed."""

import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_sim import (AGENTS, ANSWERS, FINAL_SENT, HOLD, LOCK, MANUAL, VIOLATIONS,  # noqa: E402
                       Agent, ever_ran, exits, first_add, gpu_ids, held_by, max_concurrent,
                       next_seq)
from harness import (DEADLINE_S, GpuWatch, Server, diag, message, ok, run,  # noqa: E402
                     wait_until)

NODE_TIMEOUT_S = 2
PASS_INTERVAL_S = 1
SRV = Server(sys.argv[1], "gpuorch-lifecycle-test-",
             ["--node-timeout", NODE_TIMEOUT_S, "--pass-interval", PASS_INTERVAL_S])
call = SRV.call
ADMIN = None
JOIN = None
MEMBER = None
MEMBER_UNIX = "gpuorch-test1"


# -- Helpers over the API. -------------------------------------------------------------


def submit(spec, token=None):
    """Submits SPEC (as admin, for team research, unless told otherwise)."""
    if token is None:
        token, spec = ADMIN, dict({"team": "research"}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=token)


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def wait_job(jid, pred, timeout=DEADLINE_S):
    """Polls the job until pred(job) holds; returns (held, last job read)."""
    last = [None]

    def check():
        last[0] = get_job(jid)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError, IndexError):
            return False

    return bool(wait_until(check, timeout)), last[0]


def waits_for(code):
    """A pending job whose wait_reason is CODE: the reason is the code, or the
    code, a colon and an explanation ("dependency: waiting for ...")."""
    return lambda j: (j["state"] == "PENDING"
                      and str(j.get("wait_reason")).split(":")[0] == code)


def state_is(*states):
    return lambda j: j["state"] in states


def attempts_of(j):
    return (j or {}).get("attempts") or []


def finish(jid, state="COMPLETED", code=0):
    """Ends the attempt of JID an agent holds, as its agent would."""
    ag, key, _ = held_by(jid, timeout=5)
    if not ag:
        return None
    st, _ = ag.report(key[0], key[1], {"state": state, "exit_code": code})
    return st


def cleanup(ids):
    """Ends whatever of IDS is still alive, so that a failed step does not hold
    GPUs that the next one needs."""
    for jid in ids:
        j = get_job(jid)
        if j and j["state"] in ("PENDING", "RUNNING"):
            if held_by(jid, timeout=0)[0]:
                finish(jid)
            else:
                call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    for jid in ids:
        wait_job(jid, lambda j: j["state"] not in ("PENDING", "RUNNING"), timeout=10)


def pick(obj, *names):
    for name in names:
        if isinstance(obj, dict) and obj.get(name) is not None:
            return obj[name]
    return None


def attempt_nodes(a):
    v = pick(a, "nodes", "node")
    return v if isinstance(v, list) else [v]


def health_epoch():
    st, body, _ = call("GET", "/v1/health")
    return body.get("epoch") if st == 200 and body else None


# -- The steps. --------------------------------------------------------------------------


def setup():
    global ADMIN, JOIN, MEMBER
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    join_path = SRV.token_file("join")
    mode = os.stat(join_path).st_mode & 0o777 if os.path.exists(join_path) else None
    ok(mode == 0o600, "the join token file is created with mode 0600", mode and oct(mode))
    JOIN = open(join_path).read().strip()
    ok(JOIN.startswith("gpo_") and JOIN != ADMIN, "the join token is a token of its own", JOIN[:4])

    st, body, raw = call("PUT", "/v1/pools/main", {"description": "H100 nodes"}, token=ADMIN)
    if st != 201:
        raise RuntimeError(f"PUT pool: {st} {raw!r}")
    # The class jobs get when they name none.
    st, body, raw = call("PUT", "/v1/priority-classes/normal", {"order": 0}, token=ADMIN)
    if st not in (200, 201):
        raise RuntimeError(f"PUT priority class: {st} {raw!r}")
    team = {"quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": -1}]}
    st, body, raw = call("PUT", "/v1/teams/research", team, token=ADMIN)
    if st != 201:
        raise RuntimeError(f"PUT team: {st} {raw!r}")
    st, body, raw = call("PUT", "/v1/users/alice",
                         {"unix_user": MEMBER_UNIX, "team": "research", "role": "member"},
                         token=ADMIN)
    st, body, raw = call("POST", "/v1/users/alice/tokens?label=test", token=ADMIN)
    if st != 201:
        raise RuntimeError(f"alice's token: {st} {raw!r}")
    MEMBER = body["token"]


def long_poll_and_first_job():
    """Registration, the long-poll's answers, and step 1: a job from submit to
    COMPLETED. Only n1 exists while the long-poll is checked, so the job goes there."""
    n1 = Agent("n1", 1, SRV.client(JOIN))
    AGENTS.append(n1)
    st, body, raw = n1.register()
    ok(st == 201 and body and body.get("name") == "n1" and body.get("state") == "up"
       and len(body.get("gpus") or []) == 4,
       "an agent registers its node with the join token: 201, up, 4 GPUs", f"{st} {raw[:400]!r}")
    st, body, raw = n1.register()
    ok(st == 200, "registering it again: 200, updated", f"{st} {raw[:300]!r}")
    st, _, raw = call("POST", "/v1/nodes/n1/heartbeat", token=JOIN)
    ok(st == 204, "a heartbeat: 204", f"{st} {raw[:300]!r}")
    n1.start(poll=False)

    st, a0, raw = call("GET", "/v1/nodes/n1/assignments?wait=1", token=JOIN)
    ok(st == 200 and isinstance(a0.get("rev"), int) and a0.get("node") == "n1"
       and a0.get("attempts") == [],
       "assignments without since answer at once: a revision, no attempts", f"{st} {raw!r}")
    rev0 = a0["rev"] if st == 200 and isinstance(a0, dict) else 0
    st, a1, raw = call("GET", f"/v1/nodes/n1/assignments?since={rev0}&wait=1", token=JOIN)
    ok(st == 200 and a1.get("rev") == rev0 and a1.get("attempts") == [],
       "with since=rev and nothing new, the wait ends with the same revision", f"{st} {raw!r}")

    woke = {}

    def waiter():
        woke["answer"] = call("GET", f"/v1/nodes/n1/assignments?since={rev0}&wait=60",
                              token=JOIN, timeout=90)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.2)  # not an assertion: gives the poll a head start before the change
    spec = {"name": "first", "command": MANUAL, "gpus": 2, "env": {"SEED": "7"}}
    job = submit(spec, token=MEMBER)
    jid = job["id"]
    t.join(timeout=DEADLINE_S)
    st, ans, raw = woke.get("answer", (None, None, b"no answer"))
    ok(not t.is_alive() and st == 200 and ans["rev"] > rev0
       and any(a.get("job") == jid for a in ans.get("attempts") or []),
       "a waiting long-poll answers when a job is assigned to its node (well before its wait)",
       f"{st} {raw[:400]!r}")
    n1.start_polling()

    # Step 1: the assignment, RUNNING, COMPLETED, the attempt row.
    ag, key, a = held_by(jid)
    ok(ag is n1 and a.get("action") == "run" and len(gpu_ids(a)) == 2
       and set(gpu_ids(a)) <= set(n1.uuids) and len(set(gpu_ids(a))) == 2,
       "the job is assigned to run with 2 distinct GPUs of its node", a)
    ok(a and a.get("unix_user") == MEMBER_UNIX, "the assignment names the submitter's unix_user",
       a)
    ok(a and (a.get("spec") or {}).get("command") == MANUAL
       and (a.get("spec") or {}).get("env") == {"SEED": "7"},
       "the assignment carries the job's spec (command, env)", a)
    if not ag:
        return n1
    st, body = n1.report(jid, key[1], {"state": "RUNNING"})
    ok(st == 200, "the agent reports RUNNING: 200", f"{st} {body}")
    good, j = wait_job(jid, state_is("RUNNING"))
    ok(good and j["user"] == "alice", "the job reads back RUNNING", j)
    st, body = n1.report(jid, key[1], {"state": "COMPLETED", "exit_code": 0})
    ok(st == 200, "the agent reports COMPLETED, exit 0: 200", f"{st} {body}")
    good, j = wait_job(jid, state_is("COMPLETED"))
    ok(good, "the job ends COMPLETED", j)
    atts = attempts_of(j)
    at = atts[0] if atts else {}
    start, end = pick(at, "started_at", "start", "start_time"), pick(at, "ended_at", "end",
                                                                      "end_time", "finished_at")
    epoch = health_epoch()
    ok(len(atts) == 1 and attempt_nodes(at) == ["n1"] and sorted(at.get("gpus") or []) ==
       sorted(gpu_ids(a)) and isinstance(start, str) and start.endswith("Z")
       and isinstance(end, str) and end.endswith("Z") and at.get("exit_code") == 0
       and pick(at, "epoch", "leader_epoch") == epoch,
       f"GET /v1/jobs/{{id}} lists the attempt: node, GPUs, start, end, exit code, epoch {epoch}",
       json.dumps(atts))
    req = next_seq()
    gone = wait_until(lambda: n1.last_req > req and all(
        x.get("job") != jid for x in n1.last.get("attempts") or []))
    ok(gone, "the attempt leaves the node's assignments once its final state is reported",
       n1.last)
    st, body = n1.report(jid, key[1], {"state": "COMPLETED", "exit_code": 0})
    ok(st == 409, "a second final report for it: 409", f"{st} {body}")
    st, body = n1.report(jid, key[1] + 1, {"state": "RUNNING"})
    ok(st == 409, "a report for an attempt the job never had: 409", f"{st} {body}")
    good, j2 = wait_job(jid, state_is("COMPLETED"), timeout=1)
    ok(good and attempts_of(j2) == atts, "and those reports changed nothing", j2)
    return n1


def retries():
    """Step 2: FAILED with max_retries 1 runs twice, then fails for good."""
    jid = submit({"name": "flaky", "command": exits(1), "gpus": 1, "max_retries": 1})["id"]
    good, j = wait_job(jid, lambda j: j["state"] == "FAILED" and len(attempts_of(j)) == 2)
    ok(good, "a failing job with max_retries 1 is requeued once, then ends FAILED", j)
    atts = attempts_of(j)
    ok(good and all(a.get("exit_code") == 1 for a in atts)
       and [a.get("attempt") for a in atts] == [1, 2],
       "both attempts are listed, numbered 1 and 2, with exit code 1", json.dumps(atts))
    ok(ever_ran(jid) == [(jid, 1), (jid, 2)], "agents were given attempts 1 and 2, no third",
       ever_ran(jid))
    cleanup([jid])


def cancel_running():
    """Step 3, and step 6's waiting job: a cancel of a running job kills it; its
    GPUs go to a job that waited for them."""
    ids = []
    try:
        a = submit({"name": "big-a", "command": HOLD, "gpus": 4})["id"]
        ids.append(a)
        ag_a, key_a, as_a = held_by(a)
        b = submit({"name": "big-b", "command": HOLD, "gpus": 4})["id"]
        ids.append(b)
        ag_b, key_b, _ = held_by(b)
        ok(ag_a and ag_b and ag_a is not ag_b, "two 4-GPU jobs run, one on each node",
           f"{ag_a and ag_a.name} {ag_b and ag_b.name}")
        good, _ = wait_job(a, state_is("RUNNING"))
        c = submit({"name": "big-c", "command": HOLD, "gpus": 4})["id"]
        ids.append(c)
        good, j = wait_job(c, lambda j: j["state"] == "PENDING" and j.get("wait_reason"))
        ok(good and not ever_ran(c), "a job that does not fit waits, with a wait_reason",
           j)
        diag(f"wait_reason of a job that does not fit: {j and j.get('wait_reason')!r}")
        st, body, raw = call("POST", f"/v1/jobs/{a}/cancel", token=ADMIN)
        ok(st in (200, 202) and body.get("state") in ("RUNNING", "CANCELLED"),
           "cancel a running job: 200/202", f"{st} {raw[:300]!r}")
        if not ag_a:
            return
        kill = wait_until(lambda: ag_a.kills_seen.get(key_a))
        ok(kill, "its assignment turns to action kill", ag_a.last)
        good, j = wait_job(a, state_is("CANCELLED"))
        good = good and wait_until(lambda: (key_a, "CANCELLED", 200) in ag_a.reports)
        ok(good,
           "the agent reports CANCELLED (200) and the job ends CANCELLED", f"{j}\n{ag_a.reports}")
        ag_c, key_c, as_c = held_by(c)
        ok(ag_c is ag_a and as_c and sorted(gpu_ids(as_c)) == sorted(gpu_ids(as_a)),
           "its GPUs are free again: the waiting job gets them",
           f"{ag_c and ag_c.name} {as_c} / {as_a}")
    finally:
        cleanup(ids)


def dependencies():
    """Step 4: afterok waits for COMPLETED; afterok on a failure fails; afterany
    runs after a failure."""
    ids = []
    try:
        a = submit({"name": "dep-a", "command": HOLD, "gpus": 1})["id"]
        ids.append(a)
        b = submit({"name": "dep-b", "command": exits(0), "gpus": 1,
                    "dependencies": [{"type": "afterok", "job": a}]})["id"]
        ids.append(b)
        held_by(a)
        good, j = wait_job(b, waits_for("dependency"))
        ok(good, "B afterok A waits with wait_reason 'dependency' while A runs", j)
        st = finish(a)
        good, j = wait_job(b, state_is("COMPLETED"))
        ok(st == 200 and good, "once A is COMPLETED, B runs and completes", f"{st} {j}")
        sent, first = FINAL_SENT.get(ever_ran(a)[0] if ever_ran(a) else None), first_add(b)
        ok(sent and first and first > sent[1], "B was assigned only after A's COMPLETED report",
           f"{sent} {first}")

        d = submit({"name": "dep-d", "command": HOLD, "gpus": 1})["id"]
        ids.append(d)
        c = submit({"name": "dep-c", "command": exits(0), "gpus": 1,
                    "dependencies": [{"type": "afterok", "job": d}]})["id"]
        ids.append(c)
        e = submit({"name": "dep-e", "command": exits(0), "gpus": 1,
                    "dependencies": [{"type": "afterany", "job": d}]})["id"]
        ids.append(e)
        held_by(d)
        for x, kind in ((c, "afterok"), (e, "afterany")):
            good, j = wait_job(x, waits_for("dependency"))
            ok(good, f"{kind} on a running job waits with wait_reason 'dependency'", j)
        st = finish(d, "FAILED", 3)
        good, j = wait_job(d, state_is("FAILED"))
        ok(st == 200 and good, "D fails (exit 3, no retries)", f"{st} {j}")
        good, j = wait_job(c, state_is("FAILED"))
        ok(good and str(d) in str(j.get("reason")) and not ever_ran(c),
           "C afterok D fails without running, its reason naming D", j)
        good, j = wait_job(e, state_is("COMPLETED"))
        ok(good, "E afterany D runs after D's failure and completes", j)
    finally:
        cleanup(ids)


def array_cap():
    """Step 5: an array of 6 with %2 never has more than 2 tasks assigned."""
    body = submit({"name": "arr", "command": exits(0, 0.4), "gpus": 1, "array": "0-5%2"})
    ids = body.get("array_jobs") or []
    ok(len(ids) == 6, "an array 0-5%2 makes 6 tasks", body)
    try:
        last = ids[-1]
        good, j = wait_job(last, lambda j: waits_for("array_limit")(j) or j["state"] != "PENDING")
        ok(good and waits_for("array_limit")(j),
           "a task held back by the cap waits with wait_reason 'array_limit'", j)
        done = wait_until(lambda: all((get_job(i) or {}).get("state") == "COMPLETED"
                                      for i in ids), timeout=40, step=0.2)
        ok(done, "all 6 tasks complete", [(get_job(i) or {}).get("state") for i in ids])
        top = max_concurrent(set(ids))
        ok(top <= 2, "never more than 2 tasks were assigned at once", top)
        diag(f"array: at most {top} tasks at once")
        ok(all(len(ever_ran(i)) == 1 for i in ids), "each task ran exactly once",
           [ever_ran(i) for i in ids])
    finally:
        cleanup(ids)


def bad_agent_input():
    """Step 9: the agent routes' auth and bad-input matrix."""
    jid = submit({"name": "probe", "command": MANUAL, "gpus": 1})["id"]
    try:
        ag, key, _ = held_by(jid)
        if not ag:
            ok(False, "the probe job is assigned", get_job(jid))
            return
        ag.report(jid, key[1], {"state": "RUNNING"})
        wait_job(jid, state_is("RUNNING"))
        other = next(x for x in AGENTS if x is not ag)
        path = f"/v1/nodes/{ag.name}/attempts/{jid}/{key[1]}"
        done = {"state": "COMPLETED", "exit_code": 0}
        st, body, raw = call("POST", path, done, token=ADMIN)
        ok(st in (401, 403), "the admin token cannot report an attempt (403)", f"{st} {raw!r}")
        st, body, raw = call("POST", path, done, token=MEMBER)
        ok(st == 403, "a member's token on an agent route: 403", f"{st} {raw!r}")
        st, body, raw = call("POST", path, done)
        ok(st == 401, "no token on an agent route: 401", f"{st} {raw!r}")
        for method, p, b in (("PUT", f"/v1/nodes/{ag.name}", ag.body()),
                             ("POST", f"/v1/nodes/{ag.name}/heartbeat", None),
                             ("GET", f"/v1/nodes/{ag.name}/assignments?wait=0", None)):
            st, body, raw = call(method, p, b, token=MEMBER)
            ok(st == 403, f"a member's token on {method} {p.split('?')[0]}: 403", f"{st} {raw!r}")
        for method, p, b in (("GET", "/v1/jobs", None), (
                "POST", "/v1/jobs", {"command": ["/bin/true"]}), ("GET", f"/v1/jobs/{jid}", None),
                ("POST", f"/v1/jobs/{jid}/cancel", None), ("GET", "/v1/whoami", None)):
            st, body, raw = call(method, p, b, token=JOIN)
            ok(st in (401, 403), f"the join token on {method} {p}: 401/403", f"{st} {raw!r}")
        st, body, raw = call("POST", f"/v1/nodes/{other.name}/attempts/{jid}/{key[1]}", done,
                             token=JOIN)
        good, j = wait_job(jid, state_is("RUNNING"), timeout=1)
        ok(400 <= st < 500 and good, "another node cannot report this node's attempt (4xx)",
           f"{st} {raw!r} {j}")
        st, body, raw = call("POST", f"/v1/nodes/{ag.name}/attempts/999999/1", done, token=JOIN)
        ok(st in (404, 409), "a report for an unknown job: 404/409", f"{st} {raw!r}")
        for method, p in (("POST", "/v1/nodes/ghost/heartbeat"),
                          ("GET", "/v1/nodes/ghost/assignments?wait=0"),
                          ("POST", f"/v1/nodes/ghost/attempts/{jid}/{key[1]}")):
            st, body, raw = call(method, p, done if "attempts" in p else None, token=JOIN)
            ok(st == 404, f"unknown node: {method} {p.split('?')[0]} is 404", f"{st} {raw!r}")
        for desc, b, needle in (
                ("an unknown state", {"state": "DONE"}, "state"),
                ("no state", {"exit_code": 0}, "state"),
                ("a misspelt field", {"state": "COMPLETED", "exit_cod": 0}, "exit_cod"),
                ("a wrong type", {"state": "FAILED", "exit_code": "one"}, "exit_code")):
            st, body, raw = call("POST", path, b, token=JOIN)
            ok(st == 400 and needle in message(body, raw),
               f"a report with {desc}: 400 naming '{needle}'", f"{st} {raw!r}")
        good, j = wait_job(jid, state_is("RUNNING"), timeout=1)
        ok(good and not (attempts_of(j) or [{}])[-1].get("exit_code"),
           "after those reports the job still runs", j)
        base = ag.body()
        gpu = base["gpus"][0]
        for desc, b, needle in (
                ("cpus of the wrong type", dict(base, cpus="many"), "cpus"),
                ("no pool", {k: v for k, v in base.items() if k != "pool"}, "pool"),
                ("an unknown pool", dict(base, pool="nope"), "nope"),
                ("a misspelt field", dict(base, mem=1), "mem"),
                ("a GPU without a uuid", dict(base, gpus=[{k: v for k, v in gpu.items()
                                                           if k != "uuid"}]), "uuid"),
                ("a GPU with zero memory", dict(base, gpus=[dict(gpu, mem_mib=0)]), "mem_mib")):
            st, body, raw = call("PUT", "/v1/nodes/n9", b, token=JOIN)
            ok(st == 400 and needle in message(body, raw),
               f"a node body with {desc}: 400 naming '{needle}'", f"{st} {raw!r}")
        st, body, raw = call("GET", "/v1/nodes", token=ADMIN)
        ok(st == 200 and sorted(x["name"] for x in body["nodes"]) == ["n1", "n2"],
           "and no node was made by them", f"{st} {raw[:300]!r}")
        st, body, raw = call("GET", f"/v1/nodes/{ag.name}/assignments?since=abc", token=JOIN)
        ok(st == 400 and "since" in message(body, raw), "assignments?since=abc: 400 naming it",
           f"{st} {raw!r}")
        st, body, raw = call("GET", f"/v1/nodes/{ag.name}/assignments?colour=red", token=JOIN)
        ok(st == 400, "an unknown query parameter on assignments: 400", f"{st} {raw!r}")
    finally:
        cleanup([jid])


def kill9_with_running_jobs():
    """Step 8: kill -9 while jobs run on both nodes; after the restart the agents
    get the same attempts, on the same GPUs, and new jobs get only free GPUs."""
    ids = []
    try:
        k1 = submit({"name": "k1", "command": HOLD, "gpus": 3})["id"]
        k2 = submit({"name": "k2", "command": HOLD, "gpus": 3})["id"]
        ids += [k1, k2]
        ag1, key1, _ = held_by(k1)
        ag2, key2, _ = held_by(k2)
        ok(ag1 and ag2 and ag1 is not ag2, "two 3-GPU jobs run, one on each node",
           f"{ag1 and ag1.name} {ag2 and ag2.name}")
        for k in (k1, k2):
            wait_job(k, state_is("RUNNING"))
        wait_until(lambda: all(any(r[0] == key and r[1] == "RUNNING" for r in ag.reports)
                               for ag, key in ((ag1, key1), (ag2, key2)) if ag))
        with LOCK:
            before = {ag.name: {k: sorted(g) for k, g in ag.held.items()} for ag in AGENTS}
        epoch0 = health_epoch()
        restart = next_seq()
        SRV.kill9()
        SRV.start()
        epoch1 = health_epoch()
        ok(isinstance(epoch0, int) and isinstance(epoch1, int) and epoch1 > epoch0,
           "the restarted controller has a higher leader epoch", f"{epoch0} -> {epoch1}")
        fresh = wait_until(lambda: all(ag.last_req > restart for ag in AGENTS))
        with LOCK:
            after = {ag.name: {(a.get("job"), a.get("attempt")): sorted(gpu_ids(a))
                               for a in ag.last.get("attempts") or [] if a.get("action") == "run"}
                     for ag in AGENTS}
        ok(fresh and after == before,
           "after kill -9 the agents' assignments hold the same attempts on the same GPUs",
           f"before {before}\nafter  {after}")
        for k in (k1, k2):
            good, j = wait_job(k, lambda j: j["state"] == "RUNNING" and len(attempts_of(j)) == 1)
            ok(good and pick(attempts_of(j)[0], "epoch", "leader_epoch") == epoch0,
               f"job {k} still runs its first attempt, made under epoch {epoch0}", j)
        busy = set(g for per in before.values() for gs in per.values() for g in gs)
        new = [submit({"name": f"new{i}", "command": HOLD, "gpus": 1})["id"] for i in range(2)]
        ids += new
        got = [held_by(x) for x in new]
        gpus = [g for _, _, a in got if a for g in gpu_ids(a)]
        ok(all(a for _, _, a in got) and len(set(gpus)) == 2 and not set(gpus) & busy,
           "new jobs get the two free GPUs, none that running attempts hold",
           f"{gpus} / busy {sorted(busy)}")
        j = get_job(new[0])
        ok(j and attempts_of(j) and pick(attempts_of(j)[0], "epoch", "leader_epoch") == epoch1,
           f"their attempts are made under the new epoch {epoch1}", j)
        late = submit({"name": "late", "command": HOLD, "gpus": 1})["id"]
        ids.append(late)
        good, j = wait_job(late, lambda j: j["state"] == "PENDING" and j.get("wait_reason"))
        ok(good and not ever_ran(late), "with every GPU busy a new job waits, with a wait_reason",
           j)
        st = finish(k1)
        ag_l, _, a_l = held_by(late)
        ok(st == 200 and a_l and set(gpu_ids(a_l)) <= set(before[ag1.name][key1]),
           "when one ends, the waiting job gets one of its GPUs", f"{st} {a_l}")
    finally:
        cleanup(ids)


def node_timeout():
    """Step 7: a node that stops heartbeating is marked down; its attempts end
    NODE_FAIL; a job with a retry left runs again on the other node."""
    ids = []
    try:
        fill = submit({"name": "fill", "command": HOLD, "gpus": 4})["id"]
        ids.append(fill)
        other, _, _ = held_by(fill)
        if not other:
            ok(False, "a 4-GPU job fills one node", get_job(fill))
            return
        dying = next(x for x in AGENTS if x is not other)
        retry = submit({"name": "retry", "command": HOLD, "gpus": 1, "max_retries": 1})["id"]
        once = submit({"name": "once", "command": HOLD, "gpus": 1})["id"]
        ids += [retry, once]
        placed = [held_by(x)[0] for x in (retry, once)]
        ok(placed == [dying, dying], f"two 1-GPU jobs run on the other node ({dying.name})",
           [p and p.name for p in placed])
        for x in (retry, once):
            wait_job(x, state_is("RUNNING"))
        # Its RUNNING reports went out before it falls silent (none is left queued).
        wait_until(lambda: all(any(r[0][0] == x and r[1] == "RUNNING" for r in dying.reports)
                               for x in (retry, once)))
        dying.paused = True  # it stops heartbeating, polling and reporting
        good, j = wait_job(once, state_is("NODE_FAIL"))
        ok(good and "NODE_FAIL" in json.dumps(attempts_of(j)[:1]),
           "a job without retries on the silent node ends NODE_FAIL", j)
        good, j = wait_job(retry, lambda j: j["state"] in ("PENDING", "RUNNING")
                           and len(attempts_of(j)) >= 1
                           and "NODE_FAIL" in json.dumps(attempts_of(j)[0]))
        ok(good, "a job with a retry left: its attempt ends NODE_FAIL and the job is requeued", j)
        st, body, raw = call("GET", "/v1/nodes", token=ADMIN)
        states = {x["name"]: x["state"] for x in body["nodes"]} if st == 200 else {}
        ok(states.get(dying.name) == "down" and states.get(other.name) == "up",
           "GET /v1/nodes shows the silent node down, the other up", f"{st} {raw[:500]!r}")
        st = finish(fill)
        ag, key, _ = held_by(retry, attempt=2)
        ok(st == 200 and ag is other, "the requeued job runs again, attempt 2 on the other node",
           f"{st} {ag and ag.name} {key}")
        st, body, raw = call("POST", f"/v1/nodes/{dying.name}/attempts/{retry}/1",
                             {"state": "COMPLETED", "exit_code": 0}, token=JOIN)
        ok(st == 409, "a late report for the attempt that ended NODE_FAIL: 409", f"{st} {raw!r}")
        st, body, raw = dying.register()
        revived = next_seq()
        dying.paused = False
        ok(st == 200 and body.get("state") == "up", "the node registers again and is up",
           f"{st} {raw[:300]!r}")
        fresh = wait_until(lambda: dying.last_req > revived)
        ok(fresh and all(a.get("job") not in (retry, once) for a in dying.last.get("attempts")),
           "its assignments no longer hold the attempts that ended NODE_FAIL", dying.last)
    finally:
        for ag in AGENTS:
            ag.paused = False
        cleanup(ids)


def main():
    print("TAP version 13")
    setup()
    try:
        long_poll_and_first_job()
    except Exception as e:
        ok(False, "step long_poll_and_first_job ran to its end", repr(e))
    for ag in AGENTS:  # n1's long-poll thread, if the step stopped before it
        if not ag.polling:
            ag.start_polling()
    n2 = Agent("n2", 2, SRV.client(JOIN))
    AGENTS.append(n2)
    st, body, raw = n2.register()
    ok(st == 201, "a second node registers: 201", f"{st} {raw[:300]!r}")
    n2.start()
    watch = GpuWatch(SRV.client(ADMIN), [u for ag in AGENTS for u in ag.uuids]).start()
    st, body, raw = call("GET", "/v1/nodes", token=ADMIN)
    nodes = {x["name"]: x for x in body["nodes"]} if st == 200 else {}
    ok(sorted(nodes) == ["n1", "n2"] and all(
        x["state"] == "up" and x["pool"] == "main" and len(x["gpus"]) == 4
        and x.get("last_heartbeat") for x in nodes.values()),
       "GET /v1/nodes lists both nodes up, in pool main, 4 GPUs each, with a heartbeat",
       f"{st} {raw[:600]!r}")

    for step in (retries, cancel_running, dependencies, array_cap, bad_agent_input,
                 kill9_with_running_jobs, node_timeout):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            name = getattr(step, "__name__", "step")
            ok(False, f"step {name} ran to its end", repr(e))
            if SRV.proc is None or SRV.proc.poll() is not None:
                SRV.proc = None
                SRV.start()

    seen = watch.stop()
    ok(watch.samples > 0 and not seen,
       f"no GPU was in two jobs' attempts at once in {watch.samples} samples of the API",
       "\n".join(seen))
    for ag in AGENTS:
        ag.stop()
    with LOCK:
        v = dict(VIOLATIONS)
        errors = [e for ag in AGENTS for e in ag.errors]
    diag(f"{ANSWERS[0]} assignments answers checked")
    ok(not v.get("double"), "no GPU was ever in two attempts at once", v.get("double"))
    ok(not v.get("foreign") and not v.get("count"),
       "every run assignment named as many GPUs as the job asked, all of its node's",
       (v.get("foreign") or []) + (v.get("count") or []))
    ok(not v.get("twice"), "no job ever ran on two live nodes at once", v.get("twice"))
    ok(not v.get("again") and not v.get("moved"),
       "no attempt was assigned again after it ended, or moved to other GPUs",
       (v.get("again") or []) + (v.get("moved") or []))
    ok(not v.get("shape"), "every assignments answer names its node and known actions",
       v.get("shape"))
    ok(not errors, "every heartbeat, poll and automatic report was answered 2xx", errors[:10])
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", rc)


def stop_agents():
    for agent in AGENTS:
        agent.stopped = True


if __name__ == "__main__":
    run(main, SRV, on_exit=stop_agents)

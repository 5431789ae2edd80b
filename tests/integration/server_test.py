#!/usr/bin/env python3
"""server_test.py GPUORCH - `gpuorch server` as clients meet it, over HTTP on
loopback: auth, submit and read back, idempotent retries, the bad-input matrix
(each case a 4xx and the store unchanged), cancel, and kill -9 of the
controller while 1,000 submissions are in flight. Prints TAP.

The server runs as a child process on 127.0.0.1 with an ephemeral port and a
temporary data directory; it is stopped by PID."""

import os
import sqlite3
import sys
import threading

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, message, ok, run, wait_until  # noqa: E402

SRV = Server(sys.argv[1], "gpuorch-server-test-")
call = SRV.call


def dump_store():
    con = sqlite3.connect(os.path.join(SRV.data, "gpuorch.db"))
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def main():
    print("TAP version 13")
    SRV.start()
    token_path = SRV.token_file("admin")
    mode = os.stat(token_path).st_mode & 0o777
    ok(mode == 0o600, "the admin token file is created with mode 0600", oct(mode))
    admin = open(token_path).read().strip()

    st, body, _ = call("GET", "/v1/health")
    ok(st == 200 and body["status"] == "ok", "health answers without a token", body)
    st, body, _ = call("GET", "/v1/jobs")
    ok(st == 401 and body["error"]["code"] == "unauthorized", "no token: 401", body)
    st, body, _ = call("GET", "/v1/jobs", token="gpo_" + "A" * 43)
    ok(st == 401, "unknown token: 401", body)
    st, body, _ = call("GET", "/v1/whoami", token=admin)
    ok(st == 200 and body["name"] == "admin" and body["role"] == "admin", "whoami: admin", body)

    config_and_users(admin)

    job = {"command": ["/bin/echo", "hello"], "gpus": 1, "team": "research", "name": "first",
           "time_limit_s": 600}
    st, body, _ = call("POST", "/v1/jobs", job, token=admin)
    ok(st == 201 and body["state"] == "PENDING", "submit: 201 and PENDING", body)
    jid = body["id"] if st == 201 else 0
    st, got, _ = call("GET", f"/v1/jobs/{jid}", token=admin)
    ok(st == 200 and got["id"] == jid and got["spec"]["command"] == ["/bin/echo", "hello"]
       and got["spec"]["gpus"] == 1 and got["team"] == "research" and got["user"] == "admin"
       and got["submitted_at"].endswith("Z"),
       "the job reads back as submitted, times in RFC 3339 UTC", got)
    st, lst, _ = call("GET", "/v1/jobs?state=PENDING", token=admin)
    ok(st == 200 and [j["id"] for j in lst["jobs"]] == [jid], "list by state finds it", lst)

    # Idempotency: the same key twice makes one job.
    key = {"Idempotency-Key": "retry-1"}
    st1, b1, _ = call("POST", "/v1/jobs", job, token=admin, headers=key)
    st2, b2, _ = call("POST", "/v1/jobs", job, token=admin, headers=key)
    ok(st1 == 201 and st2 == 200 and b1["id"] == b2["id"],
       "a retried submit with the same Idempotency-Key answers with the first job",
       f"{st1} {b1} / {st2} {b2}")
    st, lst, _ = call("GET", "/v1/jobs", token=admin)
    ok(st == 200 and len(lst["jobs"]) == 2, "and there are two jobs, not three", lst)

    # Arrays: one submission, N jobs.
    st, body, _ = call("POST", "/v1/jobs", dict(job, array="0-3%2"), token=admin)
    ok(st == 201 and len(body.get("array_jobs", [])) == 4 and body["array_index"] == 0,
       "an array submission makes its four tasks", body)

    # The bad-input matrix: each case a 4xx naming the problem, the store unchanged.
    before = dump_store()
    cases = [
        ("unknown field", dict(job, gpu=1), 400, "gpu"),
        ("wrong type", dict(job, gpus="two"), 400, "gpus"),
        ("out of range", dict(job, gpus=5000), 400, "gpus"),
        ("negative", dict(job, cpus=-1), 400, "cpus"),
        ("bad fraction", dict(job, gpus=0.3333), 400, "gpus"),
        ("no command", {"gpus": 1, "team": "research"}, 400, "command"),
        ("bad array", dict(job, array="5-3"), 400, "array"),
        ("unknown dependency", dict(job, dependencies=[{"type": "afterok", "job": 999999}]), 400,
         "dependencies"),
        ("bad env name", dict(job, env={"1X": "y"}), 400, "env"),
        ("zero CPUs", dict(job, cpus=0), 400, "cpus"),
        ("zero memory (not Slurm's whole node)", dict(job, mem_mib=0), 400, "mem_mib"),
        ("a control character in the name", dict(job, name="a\nb"), 400, "name"),
    ]
    for name, body_in, want, needle in cases:
        st, body, raw = call("POST", "/v1/jobs", body_in, token=admin)
        ok(st == want and needle in message(body, raw),
           f"bad input ({name}): {want} naming '{needle}'", f"{st} {raw!r}")
    raw_cases = [
        ("invalid JSON", b'{"gpus": 1,', 400),
        ("invalid UTF-8", b'{"name": "\xff", "command": ["x"], "team": "r"}', 400),
        ("duplicate key", b'{"gpus": 1, "gpus": 2, "command": ["x"], "team": "r"}', 400),
        ("not an object", b'[1, 2]', 400),
        ("empty body", b'', 400),
    ]
    for name, raw_in, want in raw_cases:
        try:
            st, body, raw = call("POST", "/v1/jobs", token=admin, raw=raw_in)
        except OSError as e:
            st, raw = None, repr(e)
        ok(st == want, f"bad input ({name}): {want}", f"{st} {raw!r}"[:300])
    st = SRV.api.status_before_body("POST", "/v1/jobs", 2 * 1024 * 1024, token=admin)
    ok(st == 413, "bad input (body over the limit): 413, answered before the body is read", st)
    st, body, _ = call("POST", "/v1/jobs", job, token=admin, headers={"Idempotency-Key": " "})
    ok(st == 400, "bad Idempotency-Key: 400", body)
    st, body, _ = call("GET", "/v1/jobs?colour=red", token=admin)
    ok(st == 400 and "colour" in body["error"]["message"], "unknown query parameter: 400", body)
    st, body, _ = call("GET", "/v1/jobs/abc", token=admin)
    ok(st == 400, "non-numeric job id: 400", body)
    st, body, _ = call("GET", "/v1/jobs/999999", token=admin)
    ok(st == 404, "unknown job: 404", body)
    after = dump_store()
    ok(before == after, "after every bad input the store is unchanged (same SQL dump)")

    # Cancel.
    st, body, _ = call("POST", f"/v1/jobs/{jid}/cancel", token=admin)
    ok(st == 200 and body["state"] == "CANCELLED", "cancel a pending job: CANCELLED", body)
    st, body, _ = call("POST", f"/v1/jobs/{jid}/cancel", token=admin)
    ok(st == 409, "cancel it again: 409", body)

    # A clean restart keeps everything.
    st, lst_before, _ = call("GET", "/v1/jobs", token=admin)
    rc = SRV.stop()
    ok(rc == 0, "SIGTERM stops the server cleanly (exit 0)", rc)
    SRV.start()
    st, lst_after, _ = call("GET", "/v1/jobs", token=admin)

    def durable(lst):  # without what each pass recomputes
        return [{k: v for k, v in j.items() if k not in ("wait_reason", "estimated_start")}
                for j in lst["jobs"]]
    ok(st == 200 and durable(lst_after) == durable(lst_before),
       "after a restart the jobs read back the same", f"{lst_before}\n{lst_after}")

    isolation(admin, jid)
    drain_and_resume(admin)
    agent_input(admin)
    kill9_under_load(admin)

    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", rc)


def config_and_users(admin):
    """Pools, priority classes, teams and users through the API, admin only."""
    st, body, _ = call("PUT", "/v1/pools/main", {"description": "the main pool"}, token=admin)
    ok(st == 201 and body["name"] == "main", "PUT a new pool: 201", body)
    st, body, _ = call("PUT", "/v1/priority-classes/high", {"order": 20, "may_preempt": True},
                       token=admin)
    ok(st == 201 and body["may_preempt"] is True, "PUT a priority class: 201", body)
    team = {"weight": 2, "quotas": [{"pool": "main", "guaranteed": 8, "borrow_limit": 4}]}
    st, body, _ = call("PUT", "/v1/teams/research", team, token=admin)
    ok(st == 201 and body["weight"] == 2 and body["quotas"][0]["guaranteed"] == 8,
       "PUT a new team with a quota: 201", body)
    st, body, _ = call("PUT", "/v1/teams/research", dict(team, weight=3), token=admin)
    ok(st == 200 and body["weight"] == 3, "PUT it again: 200, replaced", body)
    for t in ("other", "load"):
        call("PUT", f"/v1/teams/{t}", {}, token=admin)
    st, body, _ = call("GET", "/v1/teams", token=admin)
    ok(st == 200 and [t["name"] for t in body["teams"]] == ["load", "other", "research"],
       "teams list in name order", body)
    st, body, _ = call("PUT", "/v1/teams/bad", {"quotas": [{"pool": "nope", "guaranteed": 1}]},
                       token=admin)
    ok(st == 400 and "nope" in body["error"]["message"], "a quota in an unknown pool: 400", body)
    st, body, _ = call("PUT", "/v1/teams/bad", {"wieght": 1}, token=admin)
    ok(st == 400 and "did you mean 'weight'" in body["error"]["message"],
       "a misspelt team field: 400 with a suggestion", body)
    st, body, _ = call("PUT", "/v1/teams/x", {"name": "y"}, token=admin)
    ok(st == 400, "a body naming another team than the path: 400", body)
    st, body, _ = call("DELETE", "/v1/pools/main", token=admin)
    ok(st == 409 and "research" in body["error"]["message"],
       "deleting a pool a team's quota uses: 409", body)

    for name, team_ in (("alice", "research"), ("bob", "other")):
        st, body, _ = call("PUT", f"/v1/users/{name}",
                           {"unix_user": "gpuorch-test1", "team": team_, "role": "member"},
                           token=admin)
        ok(st == 201 and body["team"] == team_, f"create user {name}: 201", body)
        st, body, _ = call("POST", f"/v1/users/{name}/tokens?label=test", token=admin)
        ok(st == 201 and body["token"].startswith("gpo_"), f"issue {name} a token: 201", body)
        TOKENS[name] = body["token"]
    st, body, _ = call("PUT", "/v1/users/carol", {"unix_user": "c", "team": "nope"}, token=admin)
    ok(st == 400 and "nope" in body["error"]["message"], "a user of an unknown team: 400", body)
    st, body, _ = call("PUT", "/v1/users/carol", {"unix_user": "c"}, token=admin)
    ok(st == 400, "a member without a team: 400", body)
    st, body, _ = call("GET", "/v1/whoami", token=TOKENS["alice"])
    ok(st == 200 and body == {"name": "alice", "team": "research", "role": "member"},
       "whoami with a member's token", body)
    st, body, _ = call("PUT", "/v1/teams/research", {}, token=TOKENS["alice"])
    ok(st == 403, "a member may not change teams: 403", body)
    st, body, _ = call("GET", "/v1/users", token=TOKENS["alice"])
    ok(st == 403, "a member may not list users: 403", body)
    st, body, _ = call("POST", "/v1/users/alice/tokens", token=TOKENS["alice"])
    ok(st == 403, "a member may not issue tokens: 403", body)


TOKENS = {}


def isolation(admin, admin_job):
    """A member sees and acts on their own team's jobs only."""
    alice, bob = TOKENS["alice"], TOKENS["bob"]
    job = {"command": ["/bin/true"], "gpus": 1}
    st, body, _ = call("POST", "/v1/jobs", job, token=alice)
    ok(st == 201 and body["team"] == "research" and body["user"] == "alice",
       "a member's job goes to their team by default", body)
    ajob = body["id"]
    st, body, _ = call("POST", "/v1/jobs", dict(job, team="other"), token=alice)
    ok(st == 403, "a member may not submit for another team: 403", body)
    st, body, _ = call("GET", f"/v1/jobs/{ajob}", token=bob)
    ok(st == 403, "another team's job: 403 on read", body)
    st, body, _ = call("POST", f"/v1/jobs/{ajob}/cancel", token=bob)
    ok(st == 403, "another team's job: 403 on cancel", body)
    st, body, _ = call("GET", "/v1/jobs", token=bob)
    ok(st == 200 and body["jobs"] == [], "a member lists only their team's jobs", body)
    st, body, _ = call("GET", "/v1/jobs?team=research", token=bob)
    ok(st == 403, "listing another team: 403", body)
    st, body, _ = call("GET", f"/v1/jobs/{ajob}", token=admin)
    ok(st == 200, "an admin sees every team's jobs", body)
    st, body, _ = call("DELETE", "/v1/teams/research", token=admin)
    ok(st == 409, "deleting a team with live jobs: 409", body)
    st, body, _ = call("DELETE", "/v1/users/bob", token=admin)
    ok(st == 204, "delete a user: 204", body)
    st, body, _ = call("GET", "/v1/jobs", token=bob)
    ok(st == 401, "a deleted user's token no longer works: 401", body)


def drain_and_resume(admin):
    """An admin drains a node (it keeps its work, gets nothing new) and resumes it."""
    join = open(SRV.token_file("join")).read().strip()
    node = {"pool": "main", "cpus": 8, "mem_mib": 65536,
            "gpus": [{"index": 0, "uuid": "GPU-11111111-2222-3333-4444-555555555555",
                      "gpu_type": "H100-80GB", "mem_mib": 81559}]}
    st, body, _ = call("PUT", "/v1/nodes/gpu-01", node, token=join)
    ok(st == 201 and body["state"] == "up", "an agent registers a node with the join token", body)
    st, body, _ = call("PUT", "/v1/nodes/gpu-02", node, token=admin)
    ok(st == 403, "a user token cannot register nodes: 403", body)
    st, body, _ = call("POST", "/v1/nodes/gpu-01/drain", token=TOKENS["alice"])
    ok(st == 403, "a member may not drain: 403", body)
    st, body, _ = call("POST", "/v1/nodes/gpu-01/drain", token=admin)
    ok(st == 200 and body["state"] == "draining", "an admin drains it", body)
    st, body, _ = call("PUT", "/v1/nodes/gpu-01", node, token=join)
    ok(st == 200 and body["state"] == "draining", "registering again keeps it drained", body)
    st, body, _ = call("POST", "/v1/nodes/gpu-01/resume", token=admin)
    ok(st == 200 and body["state"] == "up", "an admin resumes it", body)
    st, body, _ = call("GET", "/v1/nodes", token=TOKENS["alice"])
    ok(st == 200 and [n["name"] for n in body["nodes"]] == ["gpu-01"]
       and body["nodes"][0]["last_heartbeat"].endswith("Z"), "anyone lists nodes", body)
    st, body, _ = call("POST", "/v1/nodes/nope/drain", token=admin)
    ok(st == 404, "draining an unknown node: 404", body)
    # The route says drain or resume, not the path's text: a node whose name
    # holds "drain" is resumed by /resume.
    node["gpus"][0]["uuid"] = "GPU-11111111-2222-3333-4444-666666666666"
    st, body, _ = call("PUT", "/v1/nodes/drainer", node, token=join)
    ok(st == 201 and body["state"] == "up", "an agent registers node 'drainer'", body)
    st, body, _ = call("POST", "/v1/nodes/drainer/drain", token=admin)
    ok(st == 200 and body["state"] == "draining", "an admin drains 'drainer'", body)
    st, body, _ = call("POST", "/v1/nodes/drainer/resume", token=admin)
    ok(st == 200 and body["state"] == "up", "resume of 'drainer' resumes it (not drains)", body)


def agent_input(admin):
    """What an agent sends is checked field by field: a heartbeat with garbage
    samples, a long dirty name, a sample of a GPU the node does not have, a
    registration of 0 CPUs, and a token label with a newline each get a 400
    naming the field, and change nothing (the node as listed, the store)."""
    join = open(SRV.token_file("join")).read().strip()
    uuid = "GPU-11111111-2222-3333-4444-555555555555"  # gpu-01's one GPU
    good = {"gpus": [{"index": 0, "uuid": uuid, "utilization_pct": 50, "memory_used_mib": 10,
                      "memory_total_mib": 81559, "power_mw": 300000, "temperature_c": 60,
                      "processes": []}], "dirty": []}
    st, body, _ = call("POST", "/v1/nodes/gpu-01/heartbeat", good, token=join)
    ok(st == 204, "a heartbeat of the node's own GPU: 204", body)

    def node_and_store():
        _, lst, _ = call("GET", "/v1/nodes", token=admin)
        return [n for n in lst["nodes"] if n["name"] == "gpu-01"], dump_store()

    def settled():
        """The scheduler has placed what it can (a pass follows a node's event
        within milliseconds): every GPU of the up nodes runs a job, or none waits."""
        _, lst, _ = call("GET", "/v1/nodes", token=admin)
        ngpus = sum(len(n["gpus"]) for n in lst["nodes"] if n["state"] == "up")
        _, run_, _ = call("GET", "/v1/jobs?state=RUNNING&limit=1000", token=admin)
        _, pend, _ = call("GET", "/v1/jobs?state=PENDING&limit=1000", token=admin)
        return len(run_["jobs"]) >= ngpus or not pend["jobs"]
    wait_until(settled, timeout=30)
    before = node_and_store()
    sample = good["gpus"][0]
    other = "GPU-99999999-2222-3333-4444-555555555555"
    cases = [
        ("garbage samples", {"gpus": [{"uuid": 5, "utilization": "high"}]}, "gpus[0]"),
        ("a figure of the wrong type", {"gpus": [dict(sample, utilization_pct="high")]},
         "gpus[0].utilization_pct"),
        ("utilization over 100", {"gpus": [dict(sample, utilization_pct=101)]},
         "gpus[0].utilization_pct"),
        ("more memory used than there is", {"gpus": [dict(sample, memory_used_mib=90000)]},
         "gpus[0].memory_used_mib"),
        ("a 3,000-character dirty GPU name", {"gpus": [], "dirty": ["\x1b[2J" + "A" * 2996]},
         "dirty[0]"),
        ("a 3,000-character GPU UUID", {"gpus": [dict(sample, uuid="G" * 3000)]},
         "gpus[0].uuid"),
        ("a newline in a UUID", {"gpus": [dict(sample, uuid="GPU-1\n")]}, "gpus[0].uuid"),
        ("a sample of a GPU the node does not have", {"gpus": [dict(sample, uuid=other)]},
         other),
        ("a dirty GPU the node does not have", {"gpus": [], "dirty": [other]}, other),
        ("the same GPU twice", {"gpus": [sample, dict(sample, index=1)]}, "gpus[1].uuid"),
    ]
    for name, hb, needle in cases:
        st, body, raw = call("POST", "/v1/nodes/gpu-01/heartbeat", hb, token=join)
        ok(st == 400 and needle in message(body, raw),
           f"heartbeat ({name}): 400 naming '{needle}'", f"{st} {raw[:300]!r}")
    node = {"pool": "main", "cpus": 8, "mem_mib": 65536,
            "gpus": [{"index": 0, "uuid": uuid, "gpu_type": "H100-80GB", "mem_mib": 81559}]}
    for field in ("cpus", "mem_mib"):
        st, body, raw = call("PUT", "/v1/nodes/gpu-01", dict(node, **{field: 0}),
                             token=join)
        ok(st == 400 and f"'{field}'" in message(body, raw),
           f"a registration of 0 {field}: 400 naming it", f"{st} {raw[:300]!r}")
    st, body, raw = call("PUT", "/v1/nodes/gpu-01", dict(node, pool="ma\nin"), token=join)
    ok(st == 400 and "'pool'" in message(body, raw),
       "a registration with a newline in its pool: 400 naming it", f"{st} {raw[:300]!r}")
    for label in ("a\nb", "\x1b[31mred", "x\x7f"):
        st, body, raw = call("POST", "/v1/users/alice/tokens", token=admin,
                             query={"label": label})
        ok(st == 400 and "'label'" in message(body, raw),
           f"a token label {label!r}: 400 naming 'label'", f"{st} {raw[:300]!r}")
    after = node_and_store()
    ok(before[0] == after[0], "the node reads as before every refused message", after[0])
    ok(before[1] == after[1], "and the store is unchanged (same SQL dump)")
    st, body, _ = call("POST", "/v1/nodes/gpu-01/heartbeat", good, token=join)
    ok(st == 204, "the node's next good heartbeat is taken: 204", body)


def kill9_under_load(admin):
    """kill -9 while 1,000 submissions are in flight from 8 clients; every 201
    is there exactly once after a restart."""
    clients, per = 8, 125
    accepted = {}  # key -> id, for every 201
    lock = threading.Lock()
    started = threading.Event()
    job = {"command": ["/bin/true"], "gpus": 0.25, "team": "load"}

    def client(c):
        for i in range(per):
            key = f"load-{c}-{i}"
            try:
                st, body, _ = call("POST", "/v1/jobs", job, token=admin,
                                   headers={"Idempotency-Key": key})
            except Exception:  # the controller died under us: expected
                return
            if st == 201:
                with lock:
                    accepted[key] = body["id"]
                    if len(accepted) >= 200:
                        started.set()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    started.wait(timeout=120)
    SRV.kill9()
    for t in threads:
        t.join()
    ok(200 <= len(accepted) < clients * per,
       f"kill -9 landed mid-load ({len(accepted)} of {clients * per} acknowledged)")
    SRV.start()
    missing = []
    for key, jid in accepted.items():
        st, body, _ = call("GET", f"/v1/jobs/{jid}", token=admin)
        if st != 200:
            missing.append((key, jid, st))
    ok(not missing, "every acknowledged job is there after the restart", missing[:5])
    # Retrying every key: acknowledged ones answer with their job, the others
    # are made now; each key names exactly one job.
    ids = {}
    bad = []
    for c in range(clients):
        for i in range(per):
            key = f"load-{c}-{i}"
            st, body, _ = call("POST", "/v1/jobs", job, token=admin,
                               headers={"Idempotency-Key": key})
            if st not in (200, 201) or (key in accepted and body["id"] != accepted[key]):
                bad.append((key, st, body))
            else:
                ids[key] = body["id"]
    ok(not bad, "a retry of an acknowledged key returns its job, never a second one", bad[:5])
    ok(len(set(ids.values())) == clients * per, "each of the 1,000 keys has its own job",
       len(set(ids.values())))
    jobs = []
    after = 0
    while True:
        st, lst, _ = call("GET", f"/v1/jobs?team=load&limit=1000&after={after}", token=admin)
        jobs += lst["jobs"]
        if lst["next_after"] is None:
            break
        after = lst["next_after"]
    ok(len(jobs) == clients * per and sorted(j["id"] for j in jobs) == sorted(ids.values()),
       "team 'load' holds exactly those 1,000 jobs: none lost, none twice", len(jobs))


if __name__ == "__main__":
    run(main, SRV)

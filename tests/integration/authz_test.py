#!/usr/bin/env python3
"""authz_test.py GPUORCH - every route of docs/api.md as member A against
team B's objects, on a real `gpuorch server` with one node driven by hand
through the agent routes (register, assignments, reports, heartbeats with GPU
samples naming the jobs' processes). Prints TAP.

The routes are read from docs/api.md (every `METHOD /path` the page names, in
headings, tables and lists, query strings cut off): a route there without a
case in CASES fails the test, and so does a case for a route the page does
not name. Each case sends its requests as alice (team alpha-lab) against
bob's team bravo-ops: its job (running on the node, with samples, cost, a
budget and an idle policy), its pending job, its team and its user. Every
answer must be a 401/403/404, or a body with none of team B's markers: its
team, user, project, model and job names anywhere in the body's text, and its
job ids wherever the body names a job (an "id", "job" or "key" member, a
"job N" in a sentence).

A's job queued behind the reservation of B's names no job of B in its wait
reason ("behind the reservation for another team's job"), until private_data
opens jobs. Then the same reads as the admin (the markers are there: the scan
can fail),
with private_data opened (`PUT /v1/settings {"private_data": false}`: B's
jobs, series, costs, teams and processes show again), and with it partly
open (["usage"]: B's job is readable, without its cost and figures; its
series and costs stay hidden).

No agent process runs: nothing is launched. Conditions are polled with
deadlines."""

import json
import os
import re
import subprocess
import sys
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, fake_gpu_uuid, ok, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
API_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "api.md")
SRV = Server(BIN, "gpuorch-authz-test-srv-", ["--pass-interval", "1"])
call = SRV.call

NODE = "authz-n1"
GPU_TYPE = "H100-80GB"
UUIDS = [fake_gpu_uuid(21, i) for i in range(2)]
TEAM_A, TEAM_B = "alpha-lab", "bravo-ops"
USER_A, USER_B = "alice-a", "bobby-b"
# Everything that names team B or its work, as text.
MARKERS = [TEAM_B, USER_B, "bravo-proj", "bravo-model", "bravo-secret-run", "bravo-pending-run"]
TOK = {}  # "admin", "a", "b", "join" -> token
B_JOBS = []  # B's job ids (the running one first)
A_JOB = [None]
ROUTE_RE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s?]*)")
JOB_KEYS = ("id", "job", "key", "array_id", "hpc_job", "other_job")


def doc_routes():
    """(METHOD, PATH) of every route docs/api.md names."""
    with open(API_MD) as f:
        text = f.read()
    return {(m, p) for m, p in ROUTE_RE.findall(text)}


# -- the scan --------------------------------------------------------------------------------


def job_refs(v, out):
    """Job ids the JSON value V names: members of JOB_KEYS, "job N" in strings."""
    if isinstance(v, dict):
        for k, x in v.items():
            if k in JOB_KEYS and isinstance(x, (int, str)) and str(x).isdigit():
                out.add(int(x))
            job_refs(x, out)
    elif isinstance(v, list):
        for x in v:
            job_refs(x, out)
    elif isinstance(v, str):
        out.update(int(n) for n in re.findall(r"\bjobs? (\d+)\b", v))
    return out


def leaks(answer, ids=True):
    """What of team B the answer shows: markers and (IDS) job ids; empty: none."""
    text = answer.text
    found = [m for m in MARKERS if m in text]
    if not ids:
        return found
    refs = job_refs(answer.json, set()) if answer.json is not None else {
        int(n) for n in re.findall(r"hpc_job=\"(\d+)\"", text)}
    found += [f"job {j}" for j in B_JOBS if j in refs]
    return found


def as_user(who, method, path, body=None, query=None, token=None):
    return call(method, path, body, token=TOK[who] if token is None else token, query=query)


# -- the cases: member A against B -------------------------------------------------------------
# A case returns a list of (label, answer, want): want "deny" (401, 403 or 404), or "clean"
# (2xx without B's markers).


def reqs(*items):
    return list(items)


def r(method, path, want, body=None, query=None, who="a", token=None):
    label = method + " " + path + ("?" + urllib.parse.urlencode(query) if query else "")
    return (label, as_user(who, method, path, body, query, token), want)


def series_queries():
    out = []
    for metric in ("gpu_util", "mem_used", "power", "temperature"):
        for by in ("node", "team", "gpu", "job"):
            out.append({"metric": metric, "by": by, "since": "-10m"})
    for by in ("team", "priority", "total"):
        out.append({"metric": "queue_length", "by": by, "since": "-10m"})
    out.append({"metric": "gpu_util", "by": "team", "key": TEAM_B, "since": "-10m"})
    out.append({"metric": "gpu_util", "by": "job", "key": str(B_JOBS[0]), "since": "-10m"})
    return out


def kind_cases(kind, name):
    return {
        ("GET", f"/v1/{kind}"): lambda: reqs(r("GET", f"/v1/{kind}", "clean")),
        ("GET", f"/v1/{kind}/{{name}}"): lambda: reqs(r("GET", f"/v1/{kind}/{name}", "clean")),
        ("PUT", f"/v1/{kind}/{{name}}"): lambda: reqs(r("PUT", f"/v1/{kind}/{name}", "deny", {})),
        ("DELETE", f"/v1/{kind}/{{name}}"): lambda: reqs(r("DELETE", f"/v1/{kind}/{name}", "deny")),
    }


def b_job():
    return B_JOBS[0]


CASES = {
    ("GET", "/"): lambda: reqs(r("GET", "/", "clean", token="")),
    ("GET", "/v1/health"): lambda: reqs(r("GET", "/v1/health", "clean", token="")),
    ("GET", "/v1/whoami"): lambda: reqs(r("GET", "/v1/whoami", "clean")),
    # Submitting for B, or after B's job, is refused without naming it.
    ("POST", "/v1/jobs"): lambda: reqs(
        r("POST", "/v1/jobs", "deny", {"team": TEAM_B, "command": ["/bin/true"]}),
        r("POST", "/v1/jobs", "refused", {"command": ["/bin/true"], "workdir": "/tmp",
                                          "dependencies": [{"type": "afterany", "job": b_job()}]})),
    ("GET", "/v1/jobs"): lambda: reqs(
        r("GET", "/v1/jobs", "clean"),
        r("GET", "/v1/jobs", "clean", query={"state": "RUNNING,PENDING"}),
        r("GET", "/v1/jobs", "clean", query={"user": USER_B}),
        r("GET", "/v1/jobs", "deny", query={"team": TEAM_B})),
    ("GET", "/v1/accounting/jobs"): lambda: reqs(
        r("GET", "/v1/accounting/jobs", "clean"),
        r("GET", "/v1/accounting/jobs", "clean", query={"job": ",".join(map(str, B_JOBS))}),
        r("GET", "/v1/accounting/jobs", "clean", query={"user": USER_B}),
        r("GET", "/v1/accounting/jobs", "deny", query={"team": TEAM_B})),
    ("GET", "/v1/jobs/{id}"): lambda: [r("GET", f"/v1/jobs/{j}", "deny") for j in B_JOBS]
    + [r("GET", f"/v1/jobs/{A_JOB[0]}", "clean")],
    ("GET", "/v1/jobs/{id}/logs"): lambda: [r("GET", f"/v1/jobs/{j}/logs", "deny") for j in B_JOBS],
    ("POST", "/v1/jobs/{id}/cancel"): lambda: [r("POST", f"/v1/jobs/{j}/cancel", "deny")
                                               for j in B_JOBS],
    ("POST", "/v1/jobs/{id}/hold"): lambda: [r("POST", f"/v1/jobs/{j}/hold", "deny")
                                             for j in B_JOBS],
    ("POST", "/v1/jobs/{id}/release"): lambda: [r("POST", f"/v1/jobs/{j}/release", "deny")
                                                for j in B_JOBS],
    ("POST", "/v1/jobs/{id}/requeue"): lambda: [r("POST", f"/v1/jobs/{j}/requeue", "deny")
                                                for j in B_JOBS],
    ("PATCH", "/v1/jobs/{id}"): lambda: [r("PATCH", f"/v1/jobs/{j}", "deny", {"time_limit_s": 60})
                                         for j in B_JOBS],
    ("GET", "/v1/jobs/{id}/step"): lambda: [r("GET", f"/v1/jobs/{j}/step", "deny")
                                            for j in B_JOBS],
    ("GET", "/v1/cost"): lambda: [r("GET", "/v1/cost", "clean", query={"by": by})
                                  for by in ("team", "project", "model", "user", "job")],
    ("GET", "/v1/budgets"): lambda: reqs(r("GET", "/v1/budgets", "clean")),
    ("GET", "/metrics"): lambda: reqs(r("GET", "/metrics", "deny")),
    ("GET", "/v1/metrics/series"): lambda: [r("GET", "/v1/metrics/series", "clean", query=q)
                                            for q in series_queries()],
    ("GET", "/v1/users"): lambda: reqs(r("GET", "/v1/users", "deny")),
    ("GET", "/v1/users/{name}"): lambda: reqs(r("GET", f"/v1/users/{USER_B}", "deny"),
                                              r("GET", f"/v1/users/{USER_A}", "clean")),
    ("PUT", "/v1/users/{name}"): lambda: reqs(
        r("PUT", f"/v1/users/{USER_B}", "deny", {"unix_user": "nobody", "team": TEAM_A})),
    ("DELETE", "/v1/users/{name}"): lambda: reqs(r("DELETE", f"/v1/users/{USER_B}", "deny")),
    ("POST", "/v1/users/{name}/tokens"): lambda: reqs(
        r("POST", f"/v1/users/{USER_B}/tokens", "deny")),
    ("GET", "/v1/nodes"): lambda: reqs(r("GET", "/v1/nodes", "clean")),
    ("PUT", "/v1/nodes/{name}"): lambda: reqs(r("PUT", f"/v1/nodes/{NODE}", "deny", node_body())),
    ("POST", "/v1/nodes/{name}/heartbeat"): lambda: reqs(
        r("POST", f"/v1/nodes/{NODE}/heartbeat", "deny", {"gpus": []})),
    ("GET", "/v1/nodes/{name}/assignments"): lambda: reqs(
        r("GET", f"/v1/nodes/{NODE}/assignments", "deny")),
    ("POST", "/v1/nodes/{name}/attempts/{job}/{attempt}"): lambda: reqs(
        r("POST", f"/v1/nodes/{NODE}/attempts/{b_job()}/1", "deny", {"state": "COMPLETED"})),
    ("POST", "/v1/nodes/{name}/mig/{id}"): lambda: reqs(
        r("POST", f"/v1/nodes/{NODE}/mig/1", "deny", {"ok": True, "gpu_uuid": "GPU-x", "mig": []})),
    ("PUT", "/v1/nodes/{name}/mig"): lambda: reqs(
        r("PUT", f"/v1/nodes/{NODE}/mig", "deny", {"mig": "off"})),
    ("POST", "/v1/nodes/{name}/drain"): lambda: reqs(r("POST", f"/v1/nodes/{NODE}/drain", "deny")),
    ("POST", "/v1/nodes/{name}/resume"): lambda: reqs(
        r("POST", f"/v1/nodes/{NODE}/resume", "deny")),
    ("DELETE", "/v1/nodes/{name}"): lambda: reqs(r("DELETE", f"/v1/nodes/{NODE}", "deny")),
    ("GET", "/v1/settings"): lambda: reqs(r("GET", "/v1/settings", "clean")),
    ("PUT", "/v1/settings"): lambda: reqs(r("PUT", "/v1/settings", "deny",
                                            {"private_data": False})),
}
SVC = {"command": ["/bin/sleep", "3600"], "workdir": "/tmp", "max": 1,
       "resources": {"gpus": 1, "pool": "main"}}
# B's service: not listed nor shown to A, and not A's to change.
CASES[("GET", "/v1/services")] = lambda: reqs(r("GET", "/v1/services", "clean"))
CASES[("GET", "/v1/router/routes")] = lambda: reqs(
    r("GET", "/v1/router/routes", "deny"))
CASES[("POST", "/v1/router/report")] = lambda: reqs(
    r("POST", "/v1/router/report", "deny", {"router": "r1", "interval_ms": 1000, "services": []}))
CASES[("GET", "/v1/services/{name}")] = lambda: reqs(r("GET", "/v1/services/bravo-svc", "deny"),
                                                     r("GET", "/v1/services/alpha-svc", "clean"))
CASES[("PUT", "/v1/services/{name}")] = lambda: reqs(
    r("PUT", "/v1/services/bravo-svc", "deny", SVC),
    r("PUT", "/v1/services/alpha-new", "deny", dict(SVC, team=TEAM_B)))
CASES[("DELETE", "/v1/services/{name}")] = lambda: reqs(
    r("DELETE", "/v1/services/bravo-svc", "deny"))
CASES.update(kind_cases("pools", "main"))
CASES.update(kind_cases("priority-classes", "normal"))
CASES.update(kind_cases("prices", GPU_TYPE))
CASES.update(kind_cases("teams", TEAM_A))
# Team B's own definition: not there for A.
CASES[("GET", "/v1/teams/{name}")] = lambda: reqs(r("GET", f"/v1/teams/{TEAM_B}", "deny"),
                                                  r("GET", f"/v1/teams/{TEAM_A}", "clean"))
CASES[("PUT", "/v1/teams/{name}")] = lambda: reqs(r("PUT", f"/v1/teams/{TEAM_B}", "deny", {}))
CASES[("DELETE", "/v1/teams/{name}")] = lambda: reqs(r("DELETE", f"/v1/teams/{TEAM_B}", "deny"))


def verdict(label, ans, want):
    if want == "deny":
        good = ans.status in (401, 403, 404)
    elif want == "refused":  # a 400 that names nothing of B but the id the request gave
        good = ans.status == 400
    else:
        good = 200 <= ans.status < 300
    found = [] if want == "deny" else leaks(ans, ids=want != "refused")
    return good and not found, f"{label}: {ans.status} {found} {ans.text[:300]}"


# -- the cluster -------------------------------------------------------------------------------


def node_body():
    return {"pool": "main", "cpus": 32, "mem_mib": 256000,
            "gpus": [{"index": i, "uuid": u, "gpu_type": GPU_TYPE, "mem_mib": 81559}
                     for i, u in enumerate(UUIDS)]}


def admin(method, path, body=None, want=(200, 201)):
    ans = as_user("admin", method, path, body)
    if ans.status not in want:
        raise RuntimeError(f"{method} {path}: {ans.status} {ans.text[:300]}")
    return ans.json


def agent_pump():
    """What an agent would do once: read its assignments, report each new run
    RUNNING, and send a heartbeat whose samples name the holders' processes."""
    ans = call("GET", f"/v1/nodes/{NODE}/assignments", token=TOK["join"])
    held = {u: [] for u in UUIDS}
    for a in (ans.json or {}).get("attempts") or []:
        if a.get("action") != "run":
            continue
        call("POST", f"/v1/nodes/{NODE}/attempts/{a['job']}/{a['attempt']}", {"state": "RUNNING"},
             token=TOK["join"])
        for g in a.get("gpus") or []:
            held.setdefault(g["uuid"] if isinstance(g, dict) else g, []).append(a)
    gpus = [{"index": i, "uuid": u, "utilization_pct": 1, "memory_utilization_pct": 1,
             "memory_used_mib": 1000, "memory_total_mib": 81559, "power_mw": 100000,
             "temperature_c": 40,
             "processes": [{"pid": 4000 + a["job"], "memory_mib": 1000, "job": a["job"],
                            "attempt": a["attempt"]} for a in held.get(u, [])]}
            for i, u in enumerate(UUIDS)]
    call("POST", f"/v1/nodes/{NODE}/heartbeat", {"gpus": gpus}, token=TOK["join"])


def running(jid):
    agent_pump()
    j = as_user("admin", "GET", f"/v1/jobs/{jid}").json or {}
    return (j.get("current_attempt") or {}).get("state") == "RUNNING"


def setup():
    SRV.start()
    TOK["admin"] = open(SRV.token_file("admin")).read().strip()
    TOK["join"] = open(SRV.token_file("join")).read().strip()
    admin("PUT", "/v1/pools/main", {"description": "one node"})
    st = call("PUT", f"/v1/nodes/{NODE}", node_body(), token=TOK["join"]).status
    if st not in (200, 201):
        raise RuntimeError(f"registering the node: {st}")
    admin("PUT", f"/v1/prices/{GPU_TYPE}", {"per_gpu_hour": 3.5})
    for team in (TEAM_A, TEAM_B):
        admin("PUT", f"/v1/teams/{team}", {
            "quotas": [{"pool": "main", "guaranteed": 1, "borrow_limit": -1}],
            "budget": {"monthly": 1000}, "idle": {"threshold_pct": 50, "window_s": 1}})
    for user, team, unix in ((USER_A, TEAM_A, "gpuorch-test1"), (USER_B, TEAM_B, "gpuorch-test2")):
        admin("PUT", f"/v1/users/{user}", {"unix_user": unix, "team": team, "role": "member"})
        TOK["a" if team == TEAM_A else "b"] = admin("POST", f"/v1/users/{user}/tokens")["token"]
    admin("PUT", "/v1/priority-classes/high", {"order": 20})
    for who, name, project in (("b", "bravo-svc", "bravo-proj"), ("a", "alpha-svc", "alpha-proj")):
        ans = as_user(who, "PUT", f"/v1/services/{name}", dict(SVC, project=project,
                                                               model=project + "-model"))
        if ans.status != 201:
            raise RuntimeError(f"service {name}: {ans.status} {ans.text[:300]}")
    spec = {"command": ["/bin/sleep", "3600"], "workdir": "/tmp", "gpus": 1, "pool": "main",
            "time_limit_s": 3600}
    B_JOBS.append(as_user("b", "POST", "/v1/jobs", dict(spec, name="bravo-secret-run",
                                                        project="bravo-proj",
                                                        model="bravo-model")).json["id"])
    A_JOB[0] = as_user("a", "POST", "/v1/jobs", dict(spec, name="alpha-run",
                                                     project="alpha-proj")).json["id"]
    # Three GPUs never fit the node: it waits, with a reason.
    B_JOBS.append(as_user("b", "POST", "/v1/jobs", dict(spec, gpus=3, name="bravo-pending-run",
                                                        project="bravo-proj")).json["id"])
    ok(wait_until(lambda: running(B_JOBS[0]) and running(A_JOB[0])),
       "B's and A's jobs run on the node (assigned, reported RUNNING by the test's agent)",
       json.dumps(as_user("admin", "GET", "/v1/jobs").json)[:1500])

    def sampled():
        agent_pump()
        q = {"metric": "gpu_util", "by": "job", "since": "-5m", "step": "1s"}
        keys = {s["key"] for s in (as_user("admin", "GET", "/v1/metrics/series",
                                           query=q).json or {}).get("series") or []}
        return str(B_JOBS[0]) in keys
    ok(wait_until(sampled), "the samples reach B's job's series")


# -- the checks ---------------------------------------------------------------------------------


def every_route_has_a_case():
    routes = doc_routes()
    ok(len(routes) >= 30, f"docs/api.md names {len(routes)} routes", sorted(routes))
    missing = sorted(routes - set(CASES))
    ok(not missing, "every route of docs/api.md has a case here", missing)
    stale = sorted(set(CASES) - routes)
    ok(not stale, "every case here is a route of docs/api.md", stale)


def member_a_sees_nothing_of_b():
    for route in sorted(set(CASES) & doc_routes()):
        results = CASES[route]()
        bad = [d for good, d in (verdict(*x) for x in results) if not good]
        ok(not bad, f"{route[0]} {route[1]} as member A: no team B data ({len(results)} requests)",
           "\n".join(bad))
    j = as_user("admin", "GET", f"/v1/jobs/{B_JOBS[0]}").json or {}
    ok(j.get("state") == "RUNNING", "B's job still runs after A's cancel and report attempts",
       json.dumps(j)[:500])
    nodes = (as_user("a", "GET", "/v1/nodes").json or {}).get("nodes") or [{}]
    n = nodes[0]
    procs = [p for g in n.get("gpu_samples") or [] for p in g.get("processes") or []]
    ok(n.get("gpus_in_use") == 2 and all(g.get("in_use") for g in n.get("gpus") or [])
       and [p.get("job") for p in procs] == [A_JOB[0]],
       "member A sees both GPUs in use (an aggregate) and only its own job's process",
       json.dumps(n)[:800])


# Reads where B's data shows when it may: (label, route query) as (method, path, query).
READS = [
    ("jobs", "GET", "/v1/jobs", None),
    ("job", "GET", "/v1/jobs/{b}", None),
    ("series by team", "GET", "/v1/metrics/series", {"metric": "gpu_util", "by": "team",
                                                     "since": "-10m"}),
    ("series by job", "GET", "/v1/metrics/series", {"metric": "gpu_util", "by": "job",
                                                    "since": "-10m"}),
    ("cost by team", "GET", "/v1/cost", {"by": "team"}),
    ("cost by project", "GET", "/v1/cost", {"by": "project"}),
    ("budgets", "GET", "/v1/budgets", None),
    ("teams", "GET", "/v1/teams", None),
    ("nodes", "GET", "/v1/nodes", None),
    ("services", "GET", "/v1/services", None),
]


def read(who, method, path, query):
    return as_user(who, method, path.replace("{b}", str(B_JOBS[0])), query=query)


def admins_see_everything():
    agent_pump()
    for label, method, path, query in READS:
        ans = read("admin", method, path, query)
        ok(ans.status == 200 and leaks(ans), f"the admin sees team B in {label}",
           f"{ans.status} {ans.text[:400]}")
    ans = read("admin", "GET", "/metrics", None)
    ok(ans.status == 200 and TEAM_B in ans.text and f'hpc_job="{B_JOBS[0]}"' in ans.text,
       "the admin's GET /metrics names team B and its job", ans.text[:300])


def wait_reason_names_no_job_of_b():
    """A's job queued behind the reservation of B's: the reason says whose it is not."""
    call("POST", f"/v1/nodes/{NODE}/attempts/{A_JOB[0]}/1", {"state": "COMPLETED", "exit_code": 0},
         token=TOK["join"])
    spec = {"command": ["/bin/sleep", "3600"], "workdir": "/tmp", "pool": "main"}
    big = as_user("b", "POST", "/v1/jobs", dict(spec, gpus=2, priority="high", time_limit_s=600,
                                                name="bravo-big-run")).json["id"]
    B_JOBS.append(big)
    mine = as_user("a", "POST", "/v1/jobs", dict(spec, gpus=1, time_limit_s=7200,
                                                 name="alpha-long-run")).json["id"]
    last = [None]

    def reserved():
        agent_pump()
        last[0] = as_user("a", "GET", f"/v1/jobs/{mine}").json or {}
        return (last[0].get("wait_reason") or "").startswith("reservation:")
    ok(wait_until(reserved) and "another team's job" in last[0]["wait_reason"]
       and not leaks(as_user("a", "GET", f"/v1/jobs/{mine}")),
       "A's job waits behind B's reservation: 'behind the reservation for another team's job'",
       json.dumps(last[0])[:600])
    ans = as_user("a", "GET", "/v1/jobs", query={"state": "PENDING"})
    ok(ans.status == 200 and not leaks(ans), "A's queue names no job of B", ans.text[:600])
    settings(["usage", "nodes", "teams"])

    def named():
        last[0] = as_user("a", "GET", f"/v1/jobs/{mine}").json or {}
        return f"job {big}" in (last[0].get("wait_reason") or "")
    ok(wait_until(named), "with jobs open, the next pass's reason names B's job",
       json.dumps(last[0])[:600])
    settings(True)
    as_user("admin", "POST", f"/v1/jobs/{mine}/cancel")


def settings(value):
    ans = as_user("admin", "PUT", "/v1/settings", {"private_data": value})
    ok(ans.status == 200 and ans.json == {"private_data": value},
       f"PUT /v1/settings private_data {json.dumps(value)}: 200", f"{ans.status} {ans.text}")


def opened_shows_b_again():
    settings(False)
    agent_pump()
    for label, method, path, query in READS:
        ans = read("a", method, path, query)
        ok(ans.status == 200 and leaks(ans), f"private_data false: member A sees team B in {label}",
           f"{ans.status} {ans.text[:400]}")
    ans = read("a", "GET", f"/v1/jobs/{B_JOBS[0]}/logs", None)
    ok(ans.status == 403 and not leaks(ans, ids=False), "private_data false: B's logs stay B's (403)",
       f"{ans.status} {ans.text[:300]}")
    ans = read("a", "POST", f"/v1/jobs/{B_JOBS[0]}/cancel", None)
    ok(ans.status == 403, "private_data false: A still may not cancel B's job", ans.status)
    ans = read("a", "GET", "/metrics", None)
    ok(ans.status == 403, "private_data false: /metrics still needs an admin or metrics token",
       ans.status)


def partly_open():
    settings(["usage"])
    j = read("a", "GET", "/v1/jobs/{b}", None)
    body = j.json or {}
    ok(j.status == 200 and body.get("team") == TEAM_B and "cost" not in body and "idle" not in body
       and "gpu_utilization_pct" not in body,
       "private_data [usage]: A reads B's job, without its cost, idle flag and GPU figures",
       f"{j.status} {j.text[:500]}")
    for label, method, path, query in READS:
        if label.startswith(("series", "cost", "budgets")):
            ans = read("a", method, path, query)
            ok(ans.status == 200 and not leaks(ans),
               f"private_data [usage]: member A sees nothing of team B in {label}",
               f"{ans.status} {leaks(ans)} {ans.text[:400]}")
    settings(True)
    ans = read("a", "GET", "/v1/jobs/{b}", None)
    ok(ans.status == 403, "private_data true again: B's job is 403 to A", ans.status)


def survives_restart():
    """After a restart the series before it come from the stored minutes:
    filtered the same way."""
    settings(["jobs", "usage"])
    SRV.stop()
    SRV.start()
    ans = as_user("a", "GET", "/v1/settings")
    ok(ans.status == 200 and ans.json == {"private_data": ["jobs", "usage"]},
       "the setting survives a restart", f"{ans.status} {ans.text}")
    for by in ("team", "job"):
        q = {"metric": "gpu_util", "by": by, "since": "-10m"}
        ans = as_user("admin", "GET", "/v1/metrics/series", query=q)
        ok(ans.status == 200 and leaks(ans), f"after the restart the admin's series by {by} "
           "(stored minutes) name team B", ans.text[:400])
        ans = as_user("a", "GET", "/v1/metrics/series", query=q)
        ok(ans.status == 200 and not leaks(ans) and ans.json.get("series"),
           f"and member A's series by {by} hold its own team's only", ans.text[:400])
    ans = as_user("admin", "PUT", "/v1/settings", {"private_data": ["jobs", "gpus"]})
    ok(ans.status == 400 and "private_data[1]" in ans.text,
       "an unknown kind is refused with 400 naming the element", f"{ans.status} {ans.text}")


def cli(*args, stdin=None):
    env = dict(os.environ, GPUORCH_SERVER=SRV.url, GPUORCH_TOKEN=TOK["admin"])
    p = subprocess.run([BIN] + list(args), input=stdin, capture_output=True, text=True,
                       env=env, timeout=60)
    return p.returncode, p.stdout, p.stderr


def cli_settings_and_scraper():
    doc = "settings:\n  private_data: [jobs, teams]\n"
    rc, out, err = cli("apply", "-f", "-", stdin=doc)
    ok(rc == 0 and out == "settings/cluster configured\n",
       "gpuorch apply -f with settings: 'settings/cluster configured'", f"{rc} {out!r} {err!r}")
    rc, out, err = cli("apply", "-f", "-", stdin=doc)
    ok(rc == 0 and out == "settings/cluster unchanged\n", "applied again: 'unchanged'",
       f"{rc} {out!r} {err!r}")
    ans = as_user("a", "GET", "/v1/settings")
    ok(ans.json == {"private_data": ["jobs", "teams"]}, "the file's list is the setting", ans.text)
    rc, out, err = cli("apply", "-f", "-", stdin="settings:\n  private_data: [gpus]\n")
    ok(rc == 1 and "private_data[0]" in err, "a bad settings file: exit 1 naming the element",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("apply", "-f", "-", stdin="users:\n  - {name: scraper, unix_user: nobody, "
                       "role: metrics}\n")
    ok(rc == 0, "apply makes a user of role metrics", f"{rc} {out!r} {err!r}")
    rc, out, err = cli("token", "scraper", "--label", "prometheus")
    tok = out.strip()
    ok(rc == 0 and tok.startswith("gpo_") and len(out.splitlines()) == 1,
       "gpuorch token prints one token alone on a line", f"{rc} {out!r} {err!r}")
    ans = call("GET", "/metrics", token=tok)
    ok(ans.status == 200 and TEAM_B in ans.text, "the metrics user's token reads GET /metrics",
       ans.status)
    ans = call("GET", "/v1/nodes", token=tok)
    ok(ans.status == 403, "and nothing else: GET /v1/nodes 403", ans.status)
    rc, out, err = cli("token", "scraper", "--token", TOK["a"])
    ok(rc == 1 and "admin" in err, "gpuorch token with a member's token: exit 1, admins only",
       f"{rc} {out!r} {err!r}")


def main():
    print("TAP version 13")
    every_route_has_a_case()
    setup()
    member_a_sees_nothing_of_b()
    admins_see_everything()
    wait_reason_names_no_job_of_b()
    opened_shows_b_again()
    partly_open()
    survives_restart()
    cli_settings_and_scraper()
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly", f"{rc}\n{SRV.log_tail()}")
    with open(SRV.log_path) as f:
        log = f.read()
    ok("runtime error:" not in log and "Sanitizer" not in log,
       "the server's log holds no sanitizer report", log[-4000:])


run(main, SRV)

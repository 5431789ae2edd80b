#!/usr/bin/env python3
"""services_test.py GPUORCH - services as configuration (/v1/services), on a
real `gpuorch server` with one node registered by hand (no agent: nothing is
launched): a store from before services (schema 6) migrated; the class
"serving" made there as at first start; a member's PUT (team and
user filled in, 201, then 200 and "generation" 1 again, a live change keeping
it, a replica change growing it); every bad spec a 400 that names the field
with nothing stored changed; another team's member refused (403) and not
shown (404, left out of the list); a team, pool or class a service names not
deletable; POST /v1/jobs with "serve" refused; services kept across a
restart; delete; and `gpuorch apply -f` with a services list (created, then
unchanged). Prints TAP."""

import json
import os
import sqlite3
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, fake_gpu_uuid, message, ok, run  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRV = Server(BIN, "gpuorch-services-test-")
call = SRV.call
TOK = {}
NODE = "svc-n1"
GPU_TYPE = "H100-80GB"

CHAT = {"project": "assistant", "model": "llama-3-8b",
        "command": ["python3", "/opt/gpuorch/examples/serving/server.py"],
        "env": {"MODEL_LOAD_S": "20"},
        "resources": {"gpus": 1, "gpu_type": "h100", "cpus": 4, "mem_mib": 16384, "pool": "main"},
        "readiness": {"path": "/health"}, "min": 0, "max": 8, "concurrency_limit": 4,
        "hosts": ["chat.example.com"]}


def as_(who, method, path, body=None):
    return call(method, path, body, token=TOK[who])


def admin(method, path, body=None, want=(200, 201, 204)):
    ans = as_("admin", method, path, body)
    if ans.status not in want:
        raise RuntimeError(f"{method} {path}: {ans.status} {ans.text[:300]}")
    return ans.json


def setup():
    SRV.start()
    TOK["admin"] = open(SRV.token_file("admin")).read().strip()
    TOK["join"] = open(SRV.token_file("join")).read().strip()
    admin("PUT", "/v1/pools/main", {})
    admin("PUT", "/v1/pools/spare", {})  # named by a service only
    node = {"pool": "main", "cpus": 32, "mem_mib": 256000,
            "gpus": [{"index": i, "uuid": fake_gpu_uuid(31, i), "gpu_type": GPU_TYPE,
                      "mem_mib": 81559} for i in range(2)]}
    st = call("PUT", f"/v1/nodes/{NODE}", node, token=TOK["join"]).status
    if st not in (200, 201):
        raise RuntimeError(f"registering the node: {st}")
    for team in ("ml", "cv"):
        admin("PUT", f"/v1/teams/{team}", {"quotas": [{"pool": "main", "guaranteed": 1}]})
    for user, team, unix in (("alice", "ml", "gpuorch-test1"), ("bob", "cv", "gpuorch-test2")):
        admin("PUT", f"/v1/users/{user}", {"unix_user": unix, "team": team, "role": "member"})
        TOK[user] = admin("POST", f"/v1/users/{user}/tokens")["token"]


def store_from_before_services():
    """The store as the version before services left it: schema 6, no services
    table, no class 'serving' and no mark of its seeding."""
    SRV.stop()
    db = sqlite3.connect(os.path.join(SRV.data, "gpuorch.db"))
    db.executescript("DROP TABLE services; DELETE FROM priority_classes WHERE name = 'serving';"
                     " DELETE FROM meta WHERE key = 'serving_seeded'; PRAGMA user_version = 6;")
    db.commit()
    db.close()
    SRV.start()
    db = sqlite3.connect(os.path.join(SRV.data, "gpuorch.db"))
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = db.execute("SELECT name FROM sqlite_master WHERE name = 'services'").fetchall()
    db.close()
    ok(version == 7 and tables, "a store at schema 6 migrates to 7 (the services table)",
       f"{version} {tables}")


def serving_class_is_made_at_first_start():
    ans = as_("alice", "GET", "/v1/priority-classes/serving")
    normal = as_("alice", "GET", "/v1/priority-classes/normal").json or {}
    body = ans.json or {}
    ok(ans.status == 200 and body.get("order", 0) > normal.get("order", 0)
       and body.get("may_preempt") is True,
       "the class 'serving' exists (made on the migrated store): above 'normal', may preempt",
       ans.text)


def member_creates_its_service():
    ans = as_("alice", "PUT", "/v1/services/chat", CHAT)
    b = ans.json or {}
    ok(ans.status == 201 and b.get("team") == "ml" and b.get("user") == "alice"
       and b.get("generation") == 1 and b.get("priority") == "serving"
       and b["resources"]["gpu_type"] == GPU_TYPE and b["resources"]["pool"] == "main"
       and b["autoscaling"]["target"] == 2.8 and b["startup_timeout_s"] == 900,
       "alice's PUT: 201, team ml and user alice filled in, generation 1, canonical GPU type, "
       "target 70 % of the concurrency limit", ans.text[:800])
    ans = as_("alice", "PUT", "/v1/services/chat", CHAT)
    ok(ans.status == 200 and ans.json.get("generation") == 1,
       "the same PUT again: 200, generation 1", ans.text[:300])
    # min stays 0: with no agent, a replica started now would stay RUNNING
    # (a service write is reconciled at once) and hold the team.
    ans = as_("alice", "PUT", "/v1/services/chat", dict(CHAT, max=4, autoscaling={"target": 3}))
    ok(ans.status == 200 and ans.json.get("generation") == 1 and ans.json.get("max") == 4,
       "max and autoscaling change live: generation stays 1", ans.text[:300])
    ans = as_("alice", "PUT", "/v1/services/chat", dict(CHAT, env={"MODEL_LOAD_S": "5"}))
    ok(ans.status == 200 and ans.json.get("generation") == 2,
       "a new env changes the replicas: generation 2", ans.text[:300])
    ans = as_("alice", "GET", "/v1/services/chat")
    ok(ans.status == 200 and ans.json.get("max") == 8 and ans.json.get("generation") == 2,
       "GET /v1/services/chat shows what was stored", ans.text[:300])


BAD = [
    ({"min": 9}, "field 'min': 9 is more than 'max' 8"),
    ({"autoscaling": {"target": 0}}, "field 'autoscaling.target': expected a number above 0"),
    ({"autoscaling": {"metric": "foo"}},
     "field 'autoscaling.metric': unknown 'foo' (expected concurrency, rps, replica)"),
    ({"autoscaling": {"metric": "replica"}}, "autoscaling.replica_metric"),
    ({"readiness": {"path": "health"}},
     "field 'readiness.path': expected a path starting with '/'"),
    ({"resources": dict(CHAT["resources"], pool="nowhere")}, "resources.pool"),
    ({"resources": dict(CHAT["resources"], gpu_type="A100")}, "field 'resources.gpu_type'"),
    ({"resources": dict(CHAT["resources"], gpus=1.5)}, "field 'resources.gpus'"),
    ({"priority": "urgent"}, "field 'priority': unknown priority class 'urgent' (known: normal, "
     "serving)"),
    ({"replicas": 2}, "unknown field 'replicas'"),
    ({"name": "other"}, "field 'name': must be 'chat', as in the path"),
]


def bad_specs_name_the_field_and_change_nothing():
    before = as_("alice", "GET", "/v1/services/chat").text
    for change, want in BAD:
        ans = as_("alice", "PUT", "/v1/services/chat", dict(CHAT, **change))
        ok(ans.status == 400 and want in message(ans.json, ans.raw)
           and (ans.json or {}).get("error", {}).get("code", "invalid_field") == "invalid_field",
           f"PUT {json.dumps(change)[:60]}: 400 naming '{want[:50]}'", ans.text[:300])
    ans = as_("admin", "PUT", "/v1/services/chat", dict(CHAT, team="nobody"))
    ok(ans.status == 400 and "field 'team': unknown team 'nobody' (known: cv, ml)"
       in message(ans.json, ans.raw), "an unknown team: 400 listing the known ones", ans.text)
    after = as_("alice", "GET", "/v1/services/chat").text
    ok(before == after, "after the bad PUTs the stored service is unchanged", after[:300])


def other_team_is_refused():
    ans = as_("bob", "PUT", "/v1/services/chat", dict(CHAT, team="cv"))
    ok(ans.status == 403, "bob (team cv) may not replace ml's service: 403", ans.text)
    ans = as_("bob", "PUT", "/v1/services/fresh", dict(CHAT, team="ml"))
    ok(ans.status == 403, "bob may not create a service for team ml: 403", ans.text)
    ans = as_("bob", "DELETE", "/v1/services/chat")
    ok(ans.status == 403, "bob may not delete ml's service: 403", ans.text)
    ans = as_("bob", "GET", "/v1/services/chat")
    ok(ans.status == 404, "bob does not see ml's service (private data): 404", ans.text)
    ans = as_("bob", "PUT", "/v1/services/vision",
              dict(CHAT, hosts=[], resources={"gpus": 1, "pool": "spare"}))
    ok(ans.status == 201 and ans.json.get("team") == "cv", "bob creates his own team's service",
       ans.text[:300])
    names = [s["name"] for s in (as_("bob", "GET", "/v1/services").json or {}).get("services", [])]
    ok(names == ["vision"], "bob's list holds only his team's service", names)
    names = [s["name"] for s in (as_("admin", "GET", "/v1/services").json or {})["services"]]
    ok(names == ["chat", "vision"], "the admin's list holds both, by name", names)
    admin("PUT", "/v1/settings", {"private_data": False})
    ans = as_("bob", "GET", "/v1/services/chat")
    ok(ans.status == 200 and ans.json.get("user") == "alice",
       "with private_data false bob reads ml's service", ans.text[:200])
    ans = as_("bob", "PUT", "/v1/services/chat", CHAT)
    ok(ans.status == 403, "... and still may not write it: 403", ans.text)
    admin("PUT", "/v1/settings", {"private_data": True})


def named_objects_stay():
    for path, who in (("/v1/teams/ml", "team"), ("/v1/priority-classes/serving", "class"),
                      ("/v1/pools/spare", "pool")):
        ans = as_("admin", "DELETE", path)
        ok(ans.status == 409 and "service '" in message(ans.json, ans.raw),
           f"DELETE {path}: 409, a service names the {who}", ans.text)


def jobs_may_not_claim_serve():
    ans = as_("alice", "POST", "/v1/jobs", {"command": ["/bin/true"], "serve": {
        "service": "chat", "replica": 1, "probe_path": "/health"}})
    ok(ans.status == 400 and "field 'serve': set by the controller on service replicas only"
       in message(ans.json, ans.raw), "POST /v1/jobs with 'serve': 400", ans.text)


def services_survive_a_restart():
    def specs():
        # The spec survives; "status" is the serving runtime's, of this start.
        body = as_("admin", "GET", "/v1/services").json
        for s in body["services"]:
            s.pop("status", None)
        return body

    before = specs()
    SRV.stop()
    SRV.start()
    after = specs()
    ok(before == after and len(after["services"]) == 2, "both services survive a restart",
       json.dumps(after)[:300])


def delete_forgets():
    ans = as_("alice", "DELETE", "/v1/services/chat")
    ok(ans.status == 204, "alice deletes her team's service: 204", ans.text)
    ok(as_("alice", "GET", "/v1/services/chat").status == 404, "then GET is 404")
    ok(as_("alice", "DELETE", "/v1/services/chat").status == 404, "and DELETE again 404")
    ok(as_("admin", "DELETE", "/v1/services/vision").status == 204,
       "the admin deletes another team's service: 204")


APPLY = """\
teams:
  - name: ml
    quotas: [{pool: main, guaranteed: 1}]
services:
  - name: summarize
    team: ml
    model: mistral-7b
    command: [python3, server.py]
    workdir: /srv
    resources: {gpus: 0.5, pool: main}
    max: 3
    autoscaling: {metric: rps, target: 5}
"""


def apply_services():
    path = os.path.join(SRV.tmp, "cluster.yaml")
    with open(path, "w") as f:
        f.write(APPLY)
    env = dict(os.environ, GPUORCH_SERVER=SRV.url, GPUORCH_TOKEN_FILE=SRV.token_file("admin"),
               HOME=SRV.tmp)
    r = subprocess.run([BIN, "apply", "-f", path], capture_output=True, text=True, env=env)
    ok(r.returncode == 0 and "service/summarize created" in r.stdout,
       "apply -f with a services list: service/summarize created", r.stdout + r.stderr)
    svc = as_("admin", "GET", "/v1/services/summarize").json or {}
    ok(svc.get("resources", {}).get("gpus") == 0.5 and svc.get("generation") == 1
       and svc["autoscaling"]["metric"] == "rps", "the applied service is stored as the file says",
       json.dumps(svc)[:400])
    r = subprocess.run([BIN, "apply", "-f", path], capture_output=True, text=True, env=env)
    ok(r.returncode == 0 and "service/summarize unchanged" in r.stdout
       and "team/ml unchanged" in r.stdout, "apply -f again: unchanged", r.stdout + r.stderr)
    r = subprocess.run([BIN, "apply", "--help"], capture_output=True, text=True, env=env)
    ok("services:" in r.stdout, "apply --help lists the services section")


def main():
    setup()
    store_from_before_services()
    serving_class_is_made_at_first_start()
    member_creates_its_service()
    bad_specs_name_the_field_and_change_nothing()
    other_team_is_refused()
    named_objects_stay()
    jobs_may_not_claim_serve()
    services_survive_a_restart()
    delete_forgets()
    apply_services()


run(main, SRV)

#!/usr/bin/env python3
"""metrics_test.py GPUORCH - GET /metrics of a real `gpuorch server` with two
real node agents (`gpuorch agent`, nodes m1 and m2 of two GPUs each) on the
fake NVML ($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1), then
scraped by a real Prometheus server (Debian's /usr/bin/prometheus) started
on loopback by the test. Prints TAP.

What it checks: 401 without a token; 403 with a member's token (the labels
name every team's jobs); a token of a user with role "metrics" reads it, and
nothing else (403 on /v1/jobs); the text passes `promtool check
metrics` (see below); the DCGM series carry each GPU's UUID, Hostname,
modelName, and the running job's hpc_job, team and project (a free GPU no
job labels); their values follow the fake NVML file when it is rewritten;
the gpuorch_* families count the running and the pending job, the quota
used, the allocated GPU (a 0.25 GPU job counts 0.25), the wait observed when the job started and the
passes; a Prometheus server scraping it with the metrics user's bearer token
(from a credentials file) answers a PromQL query with the scripted value; with
--metrics-public no token is needed.

promtool (2.42) exits 3 when the format is valid but its naming lint has
complaints, 1 when it does not parse. dcgm-exporter's label modelName is
camelCase, which the lint names; we keep it for dashboard compatibility. So
the whole text must give exit 0, or exit 3 with only that complaint on DCGM
families; and the text with modelName renamed must give exit 0.

Needs root (the agent switches to the job's user) and the user
gpuorch-test1 (scripts/setup.sh). Processes are stopped by PID; conditions
are polled with deadlines. KEEP_TMP=1 keeps the directories."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, free_port, prom_samples, remove_tmp  # noqa: E402
from harness import (DEADLINE_S, Client, Server, agent_cgroups, diag, file_tail, ok,  # noqa: E402
                     remove_cgroups, run_as_root, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
JOB_USER = "gpuorch-test1"
GPU_NAME = "NVIDIA H100 80GB HBM3"

SRV = Server(BIN, "gpuorch-metrics-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-metrics-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = SCRAPER = None
AGENTS = {}
CGROUP_BASE = None
PROM = None  # the Prometheus child process


def gpu_uuid(node_no, index):
    return fake_gpu_uuid(node_no, index)


class Agent(FakeAgent):
    """A test agent (harness.FakeAgent) whose GPUs report every DCGM figure."""

    def __init__(self, name, node_no, ngpus):
        super().__init__(BIN, SRV, TMP, FAKENVML, name,
                         [gpu_uuid(node_no, g) for g in range(ngpus)], kill_grace=1,
                         dirty_wait=1)
        self.write_gpus({})

    def write_gpus(self, figures):
        """FIGURES maps an index to the fields it changes from the base ones."""
        gpus = []
        for i, u in enumerate(self.uuids):
            g = {"uuid": u, "name": GPU_NAME, "memory_mib": 81559, "utilization": 20 + i,
                 "memory_used_mib": 1000 + i, "power_mw": 100000 + i, "temperature_c": 40 + i}
            g.update(figures.get(i, {}))
            gpus.append(g)
        self.write_gpu_list(gpus)


# -- The exposition. -----------------------------------------------------------------------

def find(samples, name, **labels):
    return [s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in labels.items())]


def value(samples, name, **labels):
    got = find(samples, name, **labels)
    return got[0][2] if len(got) == 1 else None


def scrape(token=None):
    """(status, content type, text) of GET /metrics."""
    answer = SRV.api.scrape(token)
    # The exposition must be UTF-8: decoded strictly, so that a bad byte fails the step.
    return answer.status, answer.content_type, (answer.raw.decode() if answer.status == 200
                                                else answer.text)


def metrics():
    st, _, text = scrape(SCRAPER)
    return prom_samples(text) if st == 200 else []


def promtool(text):
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=60)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


# -- Helpers over the API. -----------------------------------------------------------------


def put(path, body):
    st, _, raw = call("PUT", path, body, token=ADMIN)
    if st not in (200, 201):
        raise RuntimeError(f"PUT {path}: {st} {raw[:300]!r}")


def submit(spec):
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1}, **spec)
    st, body, raw = call("POST", "/v1/jobs", spec, token=MEMBER)
    if st != 201:
        raise RuntimeError(f"submit {spec}: {st} {raw[:300]!r}")
    return body["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else {}


def job_gpu(j):
    cur = j.get("current_attempt") or {}
    gpus = cur.get("gpus") or []
    g = gpus[0] if gpus else None
    return (g.get("uuid") if isinstance(g, dict) else g), (cur.get("nodes") or [None])[0]


# -- The steps. ----------------------------------------------------------------------------


def setup():
    global ADMIN, MEMBER, SCRAPER, CGROUP_BASE
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"description": "2-GPU nodes"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 2, "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    st, body, raw = call("POST", "/v1/users/alice/tokens?label=test", token=ADMIN)
    if st != 201:
        raise RuntimeError(f"alice's token: {st} {raw!r}")
    MEMBER = body["token"]
    put("/v1/users/prometheus", {"unix_user": "nobody", "role": "metrics"})
    st, body, raw = call("POST", "/v1/users/prometheus/tokens?label=scraper", token=ADMIN)
    if st != 201:
        raise RuntimeError(f"prometheus's token: {st} {raw!r}")
    SCRAPER = body["token"]
    for name, no in (("m1", 1), ("m2", 2)):
        AGENTS[name] = Agent(name, no, 2)
    CGROUP_BASE, roots = agent_cgroups("gpuorch-metrics-test", list(AGENTS))
    for name, ag in AGENTS.items():
        ag.cgroup = roots.get(name)
        ag.start()

    def sampled():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(len(nodes.get(n, {}).get("gpu_samples") or []) == 2 for n in AGENTS)
    if not wait_until(sampled):
        raise RuntimeError("agents did not register: " + "\n".join(a.tail() for a in AGENTS.values()))


def unauthorized():
    st, _, text = scrape()
    ok(st == 401, "GET /metrics without a token: 401", f"{st} {text[:300]}")
    st, _, text = scrape("not-a-token")
    ok(st == 401, "GET /metrics with a bad token: 401", f"{st} {text[:300]}")
    st, _, text = scrape(MEMBER)
    ok(st == 403 and "metrics" in text, "GET /metrics with a member's token: 403 naming the role",
       f"{st} {text[:300]}")
    st, _, raw = call("GET", "/v1/jobs", token=SCRAPER)
    ok(st == 403, "a metrics user's token reads nothing but /metrics: GET /v1/jobs 403",
       f"{st} {raw[:300]!r}")


def running_job():
    """Starts the job the other steps look at; returns (job id, UUID, node)."""
    jid = submit({"command": ["/bin/sleep", "600"], "project": "llm-pretrain", "name": "train"})
    # 4 GPUs on one node: never fits 2-GPU nodes, so it stays pending.
    pending = submit({"command": ["/bin/true"], "gpus": 4})
    held = wait_until(lambda: (get_job(jid).get("current_attempt") or {}).get("state")
                      == "RUNNING")
    j = get_job(jid)
    ok(held, "the job runs", json.dumps(j)[:1500])
    uuid, node = job_gpu(j)
    return jid, pending, uuid, node


def exposition(jid, pending, uuid, node):
    st, ctype, text = scrape(SCRAPER)
    ok(st == 200 and ctype == "text/plain; version=0.0.4; charset=utf-8",
       "GET /metrics with a metrics user's token: 200, text format 0.0.4", f"{st} {ctype}")
    rc, out = promtool(text)
    lint = [ln for ln in out.splitlines() if ln.strip()]
    only_model_name = all(re.match(r"^DCGM_FI_DEV_\w+ label names should be written in "
                                   r"'snake_case' not 'camelCase'$", ln) for ln in lint)
    ok(rc == 0 or (rc == 3 and only_model_name),
       "promtool check metrics: valid; lint at most names DCGM's camelCase label modelName",
       f"rc {rc}\n{out}")
    rc2, out2 = promtool(text.replace("modelName=", "model_name="))
    ok(rc2 == 0, "promtool check metrics: exit 0 once modelName is renamed (no other problem)",
       f"rc {rc2}\n{out2}")
    diag(f"promtool on the exposition: exit {rc}; {' / '.join(sorted(set(lint))) or 'no lint'}")
    s = prom_samples(text)
    mine = find(s, "DCGM_FI_DEV_GPU_UTIL", UUID=uuid)
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    gpu_type = next((g.get("gpu_type") for n in (body or {}).get("nodes") or []
                     for g in n.get("gpus") or [] if g.get("uuid") == uuid), None)
    want = {"Hostname": node, "hpc_job": str(jid), "team": "research", "project": "llm-pretrain",
            "modelName": gpu_type}
    ag = AGENTS.get(node)
    idx = ag.uuids.index(uuid) if ag and uuid in ag.uuids else -1
    ok(len(mine) == 1 and all(mine[0][1].get(k) == v for k, v in want.items())
       and mine[0][1].get("gpu") == str(idx) and mine[0][1].get("device") == f"nvidia{idx}"
       and mine[0][2] == 20 + idx,
       "DCGM_FI_DEV_GPU_UTIL of the job's GPU: UUID, gpu, device, Hostname, modelName (the "
       "node's GPU type), hpc_job, team, project and the fake's utilization",
       f"{mine}\nwant {want}, gpu {idx}")
    free = [x for x in find(s, "DCGM_FI_DEV_GPU_UTIL") if x[1]["UUID"] != uuid]
    ok(len(free) == 3 and all("hpc_job" not in x[1] and "team" not in x[1] for x in free),
       "the three free GPUs have one series each, without job labels", f"{free}")
    figures = {f: value(s, f, UUID=uuid) for f in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                                                    "DCGM_FI_DEV_POWER_USAGE",
                                                    "DCGM_FI_DEV_GPU_TEMP")}
    ok(figures == {"DCGM_FI_DEV_FB_USED": 1000 + idx, "DCGM_FI_DEV_FB_FREE": 81559 - 1000 - idx,
                   "DCGM_FI_DEV_POWER_USAGE": (100000 + idx) / 1000,
                   "DCGM_FI_DEV_GPU_TEMP": 40 + idx},
       "memory used and free (MiB), power (W) and temperature (C) are the fake's", f"{figures}")
    checks = {
        ("gpuorch_jobs", (("state", "RUNNING"),)): 1,
        ("gpuorch_jobs", (("state", "PENDING"),)): 1,
        ("gpuorch_queue_length", (("team", "research"), ("priority", "normal"))): 1,
        ("gpuorch_quota_used_gpus", (("team", "research"), ("pool", "main"))): 1,
        ("gpuorch_quota_guaranteed_gpus", (("team", "research"), ("pool", "main"))): 2,
        ("gpuorch_quota_borrowed_gpus", (("team", "research"), ("pool", "main"))): 0,
        ("gpuorch_gpus", (("state", "allocated"),)): 1,
        ("gpuorch_gpus", (("state", "free"),)): 3,
        ("gpuorch_nodes", (("state", "up"),)): 2,
        ("gpuorch_wait_seconds_count", (("team", "research"), ("priority", "normal"))): 1,
    }
    got = {k: value(s, k[0], **dict(k[1])) for k in checks}
    ok(got == checks, "gpuorch_* families count the jobs, queue, quota, GPUs, nodes and the wait",
       "\n".join(f"{k}: got {got[k]}, want {v}" for k, v in checks.items()))
    passes = value(s, "gpuorch_scheduling_pass_duration_seconds_count")
    ages = {n: value(s, "gpuorch_heartbeat_age_seconds", Hostname=n) for n in AGENTS}
    ok(passes and passes >= 1 and all(a is not None and 0 <= a < 30 for a in ages.values()),
       "pass durations are observed; each node has a recent heartbeat age", f"{passes} {ages}")


def follows_file(uuid, node):
    ag = AGENTS[node]
    idx = ag.uuids.index(uuid)
    ag.write_gpus({idx: {"utilization": 77, "power_mw": 123456, "memory_used_mib": 2048}})

    def follows():
        s = metrics()
        return (value(s, "DCGM_FI_DEV_GPU_UTIL", UUID=uuid) == 77
                and value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid) == 123.456
                and value(s, "DCGM_FI_DEV_FB_USED", UUID=uuid) == 2048)
    ok(wait_until(follows), "after the GPU file is rewritten, /metrics shows 77 %, 123.456 W, "
       "2048 MiB", f"{[x for x in metrics() if x[1].get('UUID') == uuid]}\n{ag.tail()}")


def prometheus(jid, uuid):
    global PROM
    if not os.path.exists(PROMETHEUS):
        ok(False, "a real Prometheus scrapes the server",
           f"{PROMETHEUS} is missing: the Debian package prometheus (scripts/setup.sh installs it)")
        return
    pdir = os.path.join(TMP, "prometheus")
    os.mkdir(pdir)
    cred = os.path.join(pdir, "token")
    with open(cred, "w") as f:
        f.write(SCRAPER)
    os.chmod(cred, 0o600)
    cfg = os.path.join(pdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpuorch
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: {cred}
    static_configs:
      - targets: ["127.0.0.1:{SRV.port}"]
""")
    port = free_port()
    log_path = os.path.join(pdir, "prometheus.log")
    with open(log_path, "w") as log:
        PROM = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}",
                                 f"--storage.tsdb.path={os.path.join(pdir, 'data')}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=pdir)
    query = f'DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}'
    prom = Client(f"http://127.0.0.1:{port}", timeout=5)
    last = [None]

    def answered():
        try:
            st, last[0], raw = prom.call("GET", "/api/v1/query", query={"query": query})
        except OSError as e:
            last[0] = repr(e)
            return False
        if not isinstance(last[0], dict):
            last[0] = f"{st} {raw[:300]!r}"
            return False
        res = (last[0].get("data") or {}).get("result") or []
        return len(res) == 1 and res[0]["value"][1] == "77" and res[0]["metric"].get(
            "hpc_job") == str(jid) and res[0]["metric"].get("team") == "research"
    good = wait_until(answered, timeout=60, step=0.5)
    ok(good, "a real Prometheus scraping with the token answers the query "
       f"{query} with 77, hpc_job {jid} and team research",
       f"{last[0]}\n{file_tail(log_path, 1500)}")
    PROM.send_signal(signal.SIGTERM)
    try:
        PROM.wait(timeout=30)
    except subprocess.TimeoutExpired:
        PROM.kill()
        PROM.wait()
    ok(PROM.returncode == 0, "Prometheus stops on SIGTERM", f"{PROM.returncode}")
    PROM = None


def public():
    SRV.stop()
    SRV.extra_args.append("--metrics-public")
    SRV.start()
    st, _, text = scrape()
    ok(st == 200 and "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text,
       "with --metrics-public, GET /metrics needs no token", f"{st} {text[:300]}")


def quarter_gpu():
    """A job of 0.25 GPU beside the 1-GPU one: GPUs in use count GPU shares,
    so gpuorch_gpus{state="allocated"} is 1.25, the rest of that GPU free
    (the states still sum to the 4 GPUs), as the nodes' gpus_in_use say."""
    frac = submit({"command": ["/bin/sleep", "600"], "gpus": 0.25, "name": "notebook"})
    running = wait_until(lambda: get_job(frac).get("state") == "RUNNING")
    s = metrics()
    states = {st: value(s, "gpuorch_gpus", state=st)
              for st in ("allocated", "free", "dirty", "unavailable")}
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    in_use = sum(n.get("gpus_in_use") or 0 for n in (body or {}).get("nodes") or [])
    ok(running and states == {"allocated": 1.25, "free": 2.75, "dirty": 0, "unavailable": 0}
       and in_use == 1.25
       and value(s, "gpuorch_quota_used_gpus", team="research", pool="main") == 1.25,
       "with a 0.25 GPU job beside the 1-GPU one gpuorch_gpus counts GPU shares: 1.25 allocated, "
       "2.75 free (4 in all), as the nodes' gpus_in_use and the quota used",
       f"{states} nodes: {in_use}")
    call("POST", f"/v1/jobs/{frac}/cancel", token=ADMIN)
    wait_until(lambda: get_job(frac).get("state") == "CANCELLED", timeout=DEADLINE_S)


def main():
    print("TAP version 13")
    setup()
    unauthorized()
    jid, pending, uuid, node = running_job()
    for step in (lambda: exposition(jid, pending, uuid, node), lambda: follows_file(uuid, node),
                 lambda: prometheus(jid, uuid), quarter_gpu):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, "a step ran to its end", repr(e))
    for j in (jid, pending):
        call("POST", f"/v1/jobs/{j}/cancel", token=ADMIN)
    wait_until(lambda: get_job(jid).get("state") == "CANCELLED", timeout=DEADLINE_S)
    public()
    codes = {n: ag.stop() for n, ag in AGENTS.items()}
    ok(all(c == 0 for c in codes.values()), "every agent stops with status 0 on SIGTERM", codes)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")
    logs = {"server": file_tail(SRV.log_path, 10 ** 7)}
    logs.update({n: file_tail(ag.log_path, 10 ** 7) for n, ag in AGENTS.items()})
    bad = [n for n, text in logs.items() if "Sanitizer" in text or "runtime error:" in text]
    ok(not bad, "the server's and agents' logs hold no sanitizer report",
       "\n".join(logs[n][-6000:] for n in bad))


def on_exit():
    if PROM and PROM.poll() is None:
        PROM.kill()
        PROM.wait()
    for ag in AGENTS.values():
        if ag.proc and ag.proc.poll() is None:
            ag.proc.kill()
            ag.proc.wait()
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

"""series_test.py GPUORCH - the metrics history (docs/monitoring.md) against a
real `gpuorch server` and one `gpuorch agent` on the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1) with scripted
utilization (its FAKENVML_CONFIG file rewritten). Prints TAP.
What it checks: GET /v1/metrics/series?metric=gpu_util&by=node|gpu returns the
scripted values; bad parameters get a 400 naming the parameter; a running
job's gpu_utilization_pct and gpu_memory_used_mib follow its GPU, and its
series by job and team too; after a (test-length, --metrics-minute-ms) minute
the metric_minutes rows are in the sqlite file; a restarted controller, whose
rings are empty, serves the older series from them. Needs root and the user
gpuorch-test1 for the job (scripts/setup.sh). Conditions are polled with
deadlines; processes are stopped by PID; the temporary directory is removed."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid  # noqa: E402
from harness import Server, file_tail, message, ok, run, wait_until, write_atomic  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
SRV = Server(BIN, "gpuorch-series-test.", ["--metrics-minute-ms", "2000", "--pass-interval", "1"])
TMP = tempfile.mkdtemp(prefix="gpuorch-series-agent.")
os.chmod(TMP, 0o755)
UUIDS = [fake_gpu_uuid(0x5e51e5, i) for i in range(2)]
AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "s1", UUIDS, kill_grace=None, dirty_wait=None)
GPU_FILE = AGENT.gpu_file
MEMBER = None
API = None  # SRV's client with the admin's token


def write_gpus(util):
    gpus = [{"uuid": u, "utilization": util[i], "memory_utilization": 10,
             "process_memory_mib": 512} for i, u in enumerate(UUIDS)]
    write_atomic(GPU_FILE, json.dumps({"gpus": gpus}))


def series(**q):
    return API.call("GET", "/v1/metrics/series", query=q)


def latest(body, key):
    """The latest non-null value of series KEY."""
    for s in (body or {}).get("series") or []:
        if s.get("key") == key:
            vals = [v for v in s.get("values") or [] if v is not None]
            return vals[-1] if vals else None
    return None


def near(v, want, tol=0.01):
    return v is not None and abs(v - want) <= tol


def main():
    global API, MEMBER
    print("TAP version 13")
    SRV.start()
    API = SRV.client(open(SRV.token_file("admin")).read().strip())
    API.expect("PUT", "/v1/pools/main", {"description": "series test"})
    API.expect("PUT", "/v1/priority-classes/normal", {"order": 0})
    API.expect("PUT", "/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": 2}]})
    API.expect("PUT", "/v1/users/alice",
               {"unix_user": "gpuorch-test1", "team": "research", "role": "member"})
    st, body, _ = API.call("POST", "/v1/users/alice/tokens")
    MEMBER = body.get("token") if isinstance(body, dict) else None
    write_gpus([73, 20])
    AGENT.start()

    # Raw samples by node (the mean of its GPUs) and by GPU.
    def by_node():
        st, body, _ = series(metric="gpu_util", by="node", since="-2m", step="1s")
        return body if st == 200 and near(latest(body, "s1"), 46.5) else None
    body = wait_until(by_node, timeout=60)
    ok(body is not None, "by=node: the node's series is the mean of its GPUs' scripted 73 and 20",
       json.dumps(series(metric="gpu_util", by="node", since="-2m", step="1s")[1])[:600])
    ok(body and body.get("step_s") == 1 and len(body["t"]) == len(body["series"][0]["values"]),
       "the answer has step_s and one value per time", json.dumps(body)[:300])
    st, body, _ = series(metric="gpu_util", by="gpu", key=UUIDS[0], since="-2m", step="1s")
    ok(st == 200 and [s["key"] for s in body["series"]] == [UUIDS[0]] and
       near(latest(body, UUIDS[0]), 73), "by=gpu with key: that GPU's 73 only", json.dumps(body)[:400])
    st, body, _ = series(metric="mem_used", by="gpu", since="-2m")
    ok(st == 200 and len(body["series"]) == 2, "mem_used by gpu: both GPUs", json.dumps(body)[:300])
    st, body, _ = series(metric="gpu_util", by="gpu", key=",".join(UUIDS), since="-2m", step="1s")
    ok(st == 200 and [s["key"] for s in body["series"]] == sorted(UUIDS) and
       near(latest(body, UUIDS[0]), 73) and near(latest(body, UUIDS[1]), 20),
       "by=gpu with a key list: those GPUs, each its own figure", json.dumps(body)[:400])
    st, body, _ = series(metric="gpu_util", by="gpu", key=UUIDS[1] + ",GPU-none", since="-2m")
    ok(st == 200 and [s["key"] for s in body["series"]] == [UUIDS[1]],
       "a key list naming an unknown GPU: the known one only", json.dumps(body)[:300])
    st, body, _ = series(metric="power", by="gpu", node="s1", since="-2m")
    ok(st == 200 and sorted(s["key"] for s in body["series"]) == sorted(UUIDS),
       "by=gpu&node=s1: the node's GPUs", json.dumps(body)[:300])
    st, body, _ = series(metric="gpu_util", by="gpu", node="nowhere", since="-2m")
    ok(st == 200 and body["series"] == [], "node=nowhere: no series", json.dumps(body)[:300])

    for q, word in (({"metric": "bogus"}, "metric"), ({"metric": "gpu_util", "by": "priority"}, "by"),
                    ({"metric": "gpu_util", "since": "yesterday"}, "since"),
                    ({"metric": "gpu_util", "until": "x"}, "until"),
                    ({"metric": "gpu_util", "step": "0"}, "step"),
                    ({"metric": "gpu_util", "since": "-1m", "until": "-2m"}, "since"),
                    ({"metric": "gpu_util", "since": "-1d", "step": "1s"}, "step"),
                    ({"metric": "gpu_util", "by": "gpu", "key": "a,,b"}, "key"),
                    ({"metric": "gpu_util", "by": "gpu", "key": ",".join(["k"] * 65)}, "key"),
                    ({"metric": "gpu_util", "by": "team", "node": "s1"}, "node"),
                    ({"metric": "gpu_util", "by": "gpu", "node": ""}, "node")):
        st, body, raw = series(**q)
        ok(st == 400 and message(body, raw).startswith(word), f"400 naming '{word}' for {q}",
           f"{st} {raw[:200]!r}")

    # A job: its figures follow its GPU.
    st, body, raw = API.call("POST", "/v1/jobs", {"command": ["sleep", "300"], "gpus": 1, "name": "sleeper",
                                                  "pool": "main", "workdir": TMP}, token=MEMBER)
    jid = body.get("id") if st == 201 else None
    ok(jid is not None, "a one-GPU job is accepted", f"{st} {raw[:200]!r}")

    def running():
        st, j, _ = API.call("GET", f"/v1/jobs/{jid}")
        return j if st == 200 and j.get("state") == "RUNNING" and \
            j.get("gpu_utilization_pct") is not None else None
    job = wait_until(running, timeout=60)
    ok(job is not None, "the job runs and shows gpu_utilization_pct",
       file_tail(AGENT.log_path, 1500))
    gpu = job["current_attempt"]["gpus"][0] if job else UUIDS[0]
    idx = UUIDS.index(gpu)
    ok(job and near(job["gpu_utilization_pct"], [73, 20][idx]) and
       isinstance(job.get("gpu_memory_used_mib"), int),
       "gpu_utilization_pct is its GPU's scripted value, gpu_memory_used_mib a number",
       json.dumps(job)[:500])
    util = [73, 20]
    util[idx] = 55
    write_gpus(util)

    def follows():
        st, j, _ = API.call("GET", f"/v1/jobs/{jid}")
        return st == 200 and near(j.get("gpu_utilization_pct"), 55)
    ok(wait_until(follows, timeout=30), "gpu_utilization_pct follows the GPU to 55")
    # The step that saw the change mixes 73 and 55: wait for a whole step at 55.
    def job_at(by, key):
        st, body, _ = series(metric="gpu_util", by=by, since="-2m", step="1s")
        return st == 200 and near(latest(body, key), 55)
    ok(wait_until(lambda: job_at("job", str(jid)), timeout=15),
       "by=job: the job's series reaches 55")
    ok(wait_until(lambda: job_at("team", "research"), timeout=15),
       "by=team: the team's series reaches 55")
    st, body, _ = series(metric="queue_length", by="total", since="-2m")
    ok(st == 200 and body["series"] and body["series"][0]["key"] == "total",
       "queue_length by total has a series", json.dumps(body)[:300])

    # Minutes in the store (a minute is 2 s here).
    db = os.path.join(SRV.data, "gpuorch.db")

    def rows():
        out = subprocess.run(["sqlite3", db, "SELECT kind, COUNT(*) FROM metric_minutes"
                              " GROUP BY kind ORDER BY kind"], capture_output=True, text=True)
        got = dict(line.split("|") for line in out.stdout.split())
        return got if int(got.get("gpu", 0)) >= 2 and int(got.get("job", 0)) >= 1 and \
            int(got.get("gauge", 0)) >= 1 else None
    got = wait_until(rows, timeout=30)
    ok(got is not None, "metric_minutes rows of kind gpu, job and gauge (the queue length) are in the sqlite file", got)

    # The history's search: an id, a user, or part of a name (any case).
    for q, want in ((str(jid), [jid]), ("alice", [jid]), ("LEE", [jid]), ("nothing-like-it", [])):
        st, body, _ = API.call("GET", "/v1/accounting/jobs", query={"q": q})
        ok(st == 200 and [j["id"] for j in body["jobs"]] == want,
           f"GET /v1/accounting/jobs?q={q}: {want}", json.dumps(body)[:300])
    st, body, raw = API.call("GET", "/v1/accounting/jobs", query={"q": "x" * 129})
    ok(st == 400 and message(body, raw).startswith("q:"), "q of 129 bytes: 400 naming q", raw[:200])

    API.call("POST", f"/v1/jobs/{jid}/cancel")
    wait_until(lambda: API.call("GET", f"/v1/jobs/{jid}").json.get("state") == "CANCELLED",
               timeout=30)
    AGENT.stop()
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly", SRV.log_tail())
    SRV.start()
    st, body, _ = series(metric="gpu_util", by="node", since="-10m", step="2s")
    ok(st == 200 and latest(body, "s1") is not None,
       "after a restart, older by=node values come from the stored minutes", json.dumps(body)[:400])
    st, body, _ = series(metric="gpu_util", by="job", since="-10m", step="2s")
    ok(st == 200 and latest(body, str(jid)) is not None,
       "... and the job's from its attempt minutes", json.dumps(body)[:400])
    st, body, _ = series(metric="queue_length", by="total", since="-10m", step="2s")
    ok(st == 200 and latest(body, "total") is not None,
       "... and the queue length's from its stored minutes", json.dumps(body)[:400])
    rc = SRV.stop()
    ok(rc == 0, "the restarted server stops cleanly", SRV.log_tail())
    ok("Sanitizer" not in SRV.log_tail() and "runtime error" not in SRV.log_tail(),
       "no sanitizer report in the server's log")


def on_exit():
    AGENT.stop()
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    run(main, SRV, on_exit)

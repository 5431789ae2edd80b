#!/usr/bin/env bash
# failover.sh BUILD_DIR - failover time of several controllers on one
# PostgreSQL: from kill -9 of the leader to the new leader's first commit,
# p50 and max of RUNS runs (docs/performance.md, "Several controllers").
#
# Starts its own PostgreSQL on loopback (tests/tools/pgserver.py, fsync on)
# and three `gpuorch server --store URL --lease LEASE` on 127.0.0.1. Each run:
# a client submits one job after another (POST /v1/jobs) against the list of
# the three controllers, as an agent or the CLI does (a follower's 307
# followed, a 503 or a refused connection: the next URL at once); the leader
# is killed with SIGKILL; the failover time is the first 201 after the kill
# minus the moment just before it, that is: the lease lapsing, a follower's
# next try (every LEASE/5), the new leader's start (it loads the store as a
# restarted controller does) and its first durable commit. The kill comes at
# a random point between two renewals. The killed controller is started
# again (it follows) before the next run.
#
# Usage: bench/failover.sh build-bench    (a release build's gpuorch)
# Environment: RUNS (20), LEASE (seconds, 5: the default of --lease),
#        KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/failover.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$bin" ] || { echo "failover.sh: $bin is missing: build $build first" >&2; exit 2; }
export RUNS=${RUNS:-20} LEASE=${LEASE:-5}
tmp=$(mktemp -d)
chmod 0755 "$tmp"
cleanup() {
  python3 "$here/../tests/tools/pgserver.py" stop --dir "$tmp/pg" >/dev/null 2>&1 || true
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
url=$(python3 "$here/../tests/tools/pgserver.py" start --dir "$tmp/pg")
echo "# PostgreSQL at $url; lease $LEASE s; $RUNS runs; $(nproc) CPUs"
BIN=$bin TMP=$tmp PG_URL=$url python3 - <<'EOF'
import http.client, json, os, random, shutil, signal, statistics, subprocess, threading, time
import urllib.parse

BIN, TMP, URL = os.environ["BIN"], os.environ["TMP"], os.environ["PG_URL"]
RUNS, LEASE = int(os.environ["RUNS"]), int(os.environ["LEASE"])


def call(base, method, path, body=None, token=None, timeout=2.0):
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        h = {"Connection": "close", "Content-Type": "application/json"}
        if token:
            h["Authorization"] = f"Bearer {token}"
        c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = c.getresponse()
        data = r.read()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
    finally:
        c.close()


class Ctl:
    def __init__(self, n):
        self.n = n
        self.dir = os.path.join(TMP, f"c{n}")
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.dir)
        self.port = 0
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        pf = os.path.join(self.dir, "port")
        if os.path.exists(pf):
            os.remove(pf)
        log = open(os.path.join(self.dir, "log"), "a")
        self.proc = subprocess.Popen(
            [BIN, "server", "--data", self.data, "--listen", f"127.0.0.1:{self.port}",
             "--port-file", pf, "--store", URL, "--lease", str(LEASE)], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                text = open(pf).read()
                if text.endswith("\n"):
                    self.port = int(text)
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"controller {self.n} did not start")

    def role(self):
        try:
            st, _, data = call(self.url, "GET", "/v1/health", timeout=1)
            return json.loads(data).get("role") if st == 200 else None
        except (OSError, ValueError):
            return None


def wait(fn, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError("timed out")


ctls = [Ctl(n) for n in range(3)]
ctls[0].start()
wait(lambda: ctls[0].role() == "leader")
token = open(os.path.join(ctls[0].data, "admin.token")).read().strip()
for c in ctls[1:]:
    os.makedirs(c.data, mode=0o700)
    for f in ("join.token", "logs.key", "steps.key"):
        shutil.copy2(os.path.join(ctls[0].data, f), os.path.join(c.data, f))
    c.start()
wait(lambda: all(c.role() for c in ctls))
L = ctls[0]
call(L.url, "PUT", "/v1/pools/main", {"description": "bench"}, token)
call(L.url, "PUT", "/v1/teams/bench", {"quotas": [{"pool": "main", "guaranteed": 1}]}, token)
JOB = {"command": ["/bin/true"], "gpus": 1, "team": "bench"}


def submitter(stop, acks):
    """Submits against the list; records (sent, answered) monotonic times of
    every 201."""
    k = 0
    while not stop.is_set():
        base = ctls[k % 3].url
        k += 1
        for _ in range(3):  # a 307 is followed
            sent = time.monotonic()
            try:
                st, h, _ = call(base, "POST", "/v1/jobs", JOB, token, timeout=1)
            except OSError:
                break
            if st == 201:
                acks.append((sent, time.monotonic()))
                k -= 1  # stay on the one that answered
                break
            if st == 307 and h.get("location"):
                u = urllib.parse.urlsplit(h["location"])
                base = f"{u.scheme}://{u.netloc}"
                continue
            break


times = []
for run in range(RUNS):
    leader = wait(lambda: [c for c in ctls if c.role() == "leader"])[0]
    stop, acks = threading.Event(), []
    t = threading.Thread(target=submitter, args=(stop, acks))
    t.start()
    wait(lambda: len(acks) >= 5)
    # At a random point between two renewals: the submissions' commits wait
    # on the lease row as the renewals do, and would otherwise line the kill
    # up with a renewal.
    time.sleep(random.uniform(0, LEASE / 5))
    t_kill = time.monotonic()
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait()
    # The first 201 of a request sent after the kill: one in flight before
    # it may still have been answered by the old leader.
    wait(lambda: [a for s, a in acks if s > t_kill], LEASE * 3 + 30)
    took = min(a for s, a in acks if s > t_kill) - t_kill
    stop.set()
    t.join()
    times.append(took)
    print(f"run {run + 1:2d}: kill -9 of controller {leader.n} -> first 201: {took:.3f} s",
          flush=True)
    leader.start()
    wait(lambda: leader.role() == "follower")

for c in ctls:
    c.proc.send_signal(signal.SIGTERM)
    c.proc.wait()
times.sort()
print(f"failover (kill -9 -> the new leader's first commit), lease {LEASE} s, {RUNS} runs: "
      f"p50 {statistics.median(times):.2f} s, max {times[-1]:.2f} s, min {times[0]:.2f} s")
EOF

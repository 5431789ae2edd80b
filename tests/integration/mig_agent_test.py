#!/usr/bin/env python3
"""mig_agent_test.py GPUORCH - `gpuorch agent` on the fake NVML in MIG mode,
under a stand-in controller (this script answers the node routes the agent
calls: registration, heartbeats, assignments, reports, MIG results), so that
the agent's half of issue 25 is checked on its own. Prints TAP.

The node m1 has three H100s: GPU 0 in MIG mode with no instance, GPU 1 in
MIG mode with two 3g.40gb instances (slots 0 and 4), GPU 2 not in MIG mode.

What it checks: the registration and the heartbeats list each GPU's MIG
mode and instances with their MIG UUIDs, the fake's own (its state file);
a plan of seven 1g instances on the empty GPU makes them (the state file
says so: through the agent's privileged half, as root) and its result is
posted with the layout; a plan listed again, in
later answers and across an agent restart, is applied once (instances
removed behind the agent's back do not come back); a job on a share with
mig_uuid sees CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES = its MIG
device, GPUORCH_GPUS its GPU, and its process is reported as the attempt's
on that GPU; a plan that would destroy the job's instance fails, saying
why, destroys nothing (not the idle instance either) and reports the layout
unchanged; a plan on the GPU not in MIG mode fails and leaves MIG mode off.

Needs root (the agent switches to the job's user) and the users gpuorch and
gpuorch-test1 (scripts/setup.sh). Agents are child processes stopped by
PID; conditions are polled with deadlines, never timed. KEEP_TMP=1 keeps
the directory."""

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (FakeAgent, diag, fake_gpu_uuid, ok, remove_tmp, run_as_root,  # noqa: E402
                     wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
NODE = "m1"
P1G, P3G = 19, 9  # H100 profile ids

TMP = tempfile.mkdtemp(prefix="gpuorch-mig-agent-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")  # what jobs write; the fake's state
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
STATE_FILE = os.path.join(SHARED, "fakenvml.state")
UUIDS = [fake_gpu_uuid(0x25, g, tag="4a1e") for g in range(3)]


class StandIn:
    """The controller's node routes, answered from what the test sets, and
    every request the agent made, kept for the checks."""

    def __init__(self):
        self.data = os.path.join(TMP, "data")
        os.mkdir(self.data)
        with open(self.token_file("join"), "w") as f:
            f.write("join-token-for-the-mig-test\n")
        self.cv = threading.Condition()
        self.rev = 1
        self.attempts, self.plans = [], []
        self.registrations, self.heartbeats, self.reports, self.results = [], [], [], []
        self.polls = 0
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body=None):
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_PUT(self):
                parts = urllib.parse.urlparse(self.path).path.split("/")
                body = self.body()
                with stand_in.cv:
                    stand_in.registrations.append(body)
                self.answer(200, dict(body, name=parts[3], state="up", log_token="tok"))

            def do_POST(self):
                parts = urllib.parse.urlparse(self.path).path.split("/")
                body = self.body()
                with stand_in.cv:
                    if parts[4:] == ["heartbeat"]:
                        stand_in.heartbeats.append(body)
                        stand_in.cv.notify_all()
                        return self.answer(204)
                    if parts[4] == "attempts":
                        stand_in.reports.append((int(parts[5]), int(parts[6]), body))
                    elif parts[4] == "mig":
                        stand_in.results.append((int(parts[5]), body))
                    stand_in.cv.notify_all()
                self.answer(200, {})

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(url.query)
                since = int(q.get("since", ["-1"])[0])
                with stand_in.cv:
                    stand_in.polls += 1
                    stand_in.cv.notify_all()
                    if since >= stand_in.rev:  # a long poll, cut short for the test
                        stand_in.cv.wait(1.0)
                    ans = {"rev": stand_in.rev, "node": NODE, "attempts": stand_in.attempts}
                    if stand_in.plans:
                        ans["mig_plans"] = stand_in.plans
                self.answer(200, ans)

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def token_file(self, name):
        return os.path.join(self.data, f"{name}.token")

    def set(self, attempts=None, plans=None):
        with self.cv:
            if attempts is not None:
                self.attempts = attempts
            if plans is not None:
                self.plans = plans
            self.rev += 1
            self.cv.notify_all()

    def polls_after(self, n):
        """Waits until the agent polled n more times (so it saw the answer)."""
        with self.cv:
            start = self.polls
        return wait_until(lambda: self.polls >= start + n)

    def results_of(self, plan_id):
        with self.cv:
            return [b for i, b in self.results if i == plan_id]

    def last_heartbeat(self):
        with self.cv:
            return self.heartbeats[-1] if self.heartbeats else None

    def cleanup(self):
        self.http.shutdown()


SRV = StandIn()
AGENT = None


def state():
    """The fake NVML's MIG state: {gpu uuid: [(profile_id, start, gi id, MIG uuid)]}."""
    try:
        with open(STATE_FILE) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for uuid, g in s.get("gpus", {}).items():
        out[uuid] = sorted((i["profile_id"], i["start"], i["id"],
                            (i.get("compute_instances") or [{}])[0].get("uuid"))
                           for i in g.get("gpu_instances", []))
    return out


def probed():
    """The fake's MIG state as another process reads it (`gpuorch agent
    --probe`'s devices, from NVML): as state() lists it, for when no change
    has written the state file yet."""
    env = dict(os.environ, FAKENVML_CONFIG=AGENT.gpu_file, FAKENVML_STATE=STATE_FILE)
    out = subprocess.run([BIN, "agent", "--probe", "--nvml", FAKENVML], env=env,
                         capture_output=True, text=True, timeout=60)
    view = {}
    for d in json.loads(out.stdout)["devices"]:
        view[d["uuid"]] = sorted(
            (i["profile_id"], i["placement"]["start"], i["id"],
             (i.get("compute_instances") or [{}])[0].get("uuid"))
            for i in (d.get("mig") or {}).get("instances") or [])
    return view


def layout(instances):
    """A wire list of instances as state() lists them."""
    return sorted((i["profile_id"], i["start"], i["gi_id"], i.get("uuid")) for i in instances or [])


def proc_uid(pid):
    """The effective uid of process PID."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[2])
    return None


def start_agent():
    global AGENT
    AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, NODE, UUIDS)
    AGENT.write_gpu_list([
        {"uuid": UUIDS[0], "mig_enabled": True},
        {"uuid": UUIDS[1], "mig_enabled": True,
         "mig_instances": [{"profile_id": P3G, "start": 0}, {"profile_id": P3G, "start": 4}]},
        {"uuid": UUIDS[2], "mig_enabled": False}])
    os.environ["FAKENVML_STATE"] = STATE_FILE
    AGENT.start()


def registered():
    n = len(SRV.registrations)
    start_agent()
    got = wait_until(lambda: len(SRV.registrations) > n and SRV.last_heartbeat())
    ok(got, "the agent registers and sends heartbeats", AGENT.tail())
    reg = SRV.registrations[-1]
    gpus = {g["uuid"]: g for g in reg["gpus"]}
    st = probed()
    ok(gpus[UUIDS[1]]["mig_enabled"] and layout(gpus[UUIDS[1]].get("mig")) == st.get(UUIDS[1])
       and all(u and u.startswith("MIG-") for *_, u in st.get(UUIDS[1], [])) and
       len(st.get(UUIDS[1], [])) == 2,
       "the registration lists GPU 1's two 3g instances with the fake's MIG UUIDs",
       f"{gpus[UUIDS[1]]}\nprobed {st}")
    ok(gpus[UUIDS[0]]["mig_enabled"] and "mig" not in gpus[UUIDS[0]] and
       not gpus[UUIDS[2]]["mig_enabled"] and "mig_pending" not in gpus[UUIDS[2]],
       "an empty MIG GPU lists no instance, a GPU not in MIG mode says so", json.dumps(reg))
    hb = SRV.last_heartbeat()
    by = {g["uuid"]: g for g in hb["gpus"]}
    ok(by[UUIDS[1]].get("mig", {}).get("enabled") and
       layout(by[UUIDS[1]]["mig"].get("instances")) == st.get(UUIDS[1]) and
       by[UUIDS[0]]["mig"] == {"enabled": True} and by[UUIDS[2]]["mig"] == {"enabled": False},
       "every heartbeat carries each GPU's MIG mode and instances", json.dumps(hb))


def create_1g():
    plan = {"id": 1, "gpu_uuid": UUIDS[0], "create": [{"profile_id": P1G, "start": s}
                                                       for s in range(7)]}
    SRV.set(plans=[plan])
    got = wait_until(lambda: SRV.results_of(1))
    res = got[0] if got else {}
    st = state()
    made = st.get(UUIDS[0], [])
    ok(res.get("ok") is True and len(made) == 7 and all(p == P1G for p, *_ in made) and
       all(u and u.startswith("MIG-") for *_, u in made),
       "a plan of seven 1g instances on the empty GPU makes them (the fake's state)",
       f"result {res}\nstate {made}\n{AGENT.tail()}")
    ok(os.stat(STATE_FILE).st_uid == 0 and AGENT.proc and proc_uid(AGENT.proc.pid) != 0,
       "the privileged half made them (the fake's state is root's; the network half is not)",
       f"state owner {os.stat(STATE_FILE).st_uid}, agent uid {proc_uid(AGENT.proc.pid)}")
    ok(res.get("gpu_uuid") == UUIDS[0] and layout(res.get("mig")) == made,
       "its result is posted with the layout after it, MIG UUIDs included", json.dumps(res))
    beat = wait_until(lambda: layout(
        {g["uuid"]: g for g in SRV.last_heartbeat()["gpus"]}[UUIDS[0]]["mig"].get("instances"))
        == made)
    ok(beat, "the next heartbeats list the new instances")


def applied_once():
    # Listed again in later answers: not applied again, not reported again.
    SRV.set()
    SRV.polls_after(3)
    ok(len(SRV.results_of(1)) == 1 and AGENT.log().count("MIG plan 1 on") == 1,
       "a plan listed in later answers is applied and reported once",
       f"results {SRV.results_of(1)}\n{AGENT.tail()}")
    records = os.path.join(AGENT.state, "net", "mig")
    ok(os.listdir(records) == ["1.done"],
       "its record says the controller has the result (STATE/net/mig/1.done)",
       str(os.listdir(records)))
    # Across a restart, with the instances gone behind the agent's back.
    ok(AGENT.stop() == 0, "the agent stops on SIGTERM", AGENT.tail())
    with open(STATE_FILE) as f:
        s = json.load(f)
    s["gpus"][UUIDS[0]]["gpu_instances"] = []
    with open(STATE_FILE + ".tmp", "w") as f:
        json.dump(s, f)
    os.replace(STATE_FILE + ".tmp", STATE_FILE)
    n = len(SRV.registrations)
    AGENT.start()
    wait_until(lambda: len(SRV.registrations) > n)
    SRV.polls_after(3)
    ok(state().get(UUIDS[0]) == [] and len(SRV.results_of(1)) == 1 and
       AGENT.log().count("MIG plan 1 on") == 1,
       "a restarted agent does not apply a plan id it applied before",
       f"state {state().get(UUIDS[0])}\n{AGENT.tail()}")
    SRV.set(plans=[])
    ok(wait_until(lambda: os.listdir(records) == []),
       "a done record goes once the answers stop listing its plan", str(os.listdir(records)))


def env_of(path):
    try:
        with open(path) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None


def job_on_instance():
    mig0 = [u for p, s, gi, u in probed()[UUIDS[1]] if s == 0][0]
    out = os.path.join(SHARED, "env1")
    run = {"job": 1, "attempt": 1, "action": "run",
           "gpus": [{"uuid": UUIDS[1], "milli": 428, "mem_mib": 40960, "mig_uuid": mig0}],
           "user": "alice", "unix_user": JOB_USER,
           "spec": {"command": ["/bin/sh", "-c", f"env > {out}.tmp; mv {out}.tmp {out}; "
                                "exec sleep 60"]},
           "gang": {"nodes": [NODE], "rank": 0, "master_addr": "127.0.0.1",
                    "master_port": 29500}}
    SRV.set(attempts=[run])
    env = wait_until(lambda: env_of(out))
    ok(env and env.get("CUDA_VISIBLE_DEVICES") == mig0 and
       env.get("NVIDIA_VISIBLE_DEVICES") == mig0 and env.get("GPUORCH_GPUS") == UUIDS[1] and
       env.get("GPUORCH_MIG_DEVICES") == mig0 and env.get("GPUORCH_JOB_ID") == "1",
       "a job on a share with mig_uuid sees its MIG device alone",
       f"{env}\n{AGENT.tail()}")

    def on_gpu():
        g = {x["uuid"]: x for x in SRV.last_heartbeat()["gpus"]}[UUIDS[1]]
        return [p for p in g.get("processes") or [] if p.get("job") == 1 and
                p.get("attempt") == 1]
    ok(wait_until(on_gpu), "its process on the instance is reported as the attempt's, on its GPU",
       json.dumps(SRV.last_heartbeat()))
    return mig0


def busy_plan(mig0):
    before = probed()[UUIDS[1]]
    plan = {"id": 2, "gpu_uuid": UUIDS[1],
            "destroy": [{"profile_id": P3G, "start": 4}, {"profile_id": P3G, "start": 0}],
            "create": [{"profile_id": P1G, "start": s} for s in (0, 1, 4, 5)]}
    SRV.set(plans=[plan])
    got = wait_until(lambda: SRV.results_of(2))
    res = got[0] if got else {}
    err = res.get("error") or ""
    ok(res.get("ok") is False and "at slot 0" in err and "not destroyed" in err and mig0 in err,
       "a plan that would destroy a busy instance fails, naming it", json.dumps(res))
    after = probed()[UUIDS[1]]
    ok(after == before and layout(res.get("mig")) == before,
       "nothing was destroyed, not the idle instance either, and the result says so",
       f"before {before}\nafter {after}\nresult {res}")
    plan = {"id": 3, "gpu_uuid": UUIDS[2], "create": [{"profile_id": P1G, "start": 0}]}
    SRV.set(plans=[plan])
    got = wait_until(lambda: SRV.results_of(3))
    res = got[0] if got else {}
    ok(res.get("ok") is False and "MIG mode is off" in (res.get("error") or "") and
       res.get("mig") == [], "a plan on a GPU not in MIG mode fails and says so", json.dumps(res))
    hb = {g["uuid"]: g for g in SRV.last_heartbeat()["gpus"]}
    ok(hb[UUIDS[2]]["mig"] == {"enabled": False},
       "and MIG mode stays off: the agent never changes it", json.dumps(hb[UUIDS[2]]))
    kill = {"job": 1, "attempt": 1, "action": "kill", "as": "CANCELLED", "grace_s": 1}
    SRV.set(attempts=[kill], plans=[])
    final = wait_until(lambda: [r for j, a, r in SRV.reports
                                if (j, a) == (1, 1) and r.get("state") == "CANCELLED"])
    ok(final, "the job is cancelled and reported", AGENT.tail())
    SRV.set(attempts=[])


def main():
    registered()
    create_1g()
    applied_once()
    busy_plan(job_on_instance())
    ok(AGENT.stop() == 0, "the agent stops on SIGTERM at the end", AGENT.tail())


def on_exit():
    if AGENT:
        AGENT.kill()
    remove_tmp(TMP)


diag(f"stand-in controller on 127.0.0.1:{SRV.port}, state in {TMP}")
run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""top_test.py GPUORCH - `gpuorch top` against a real `gpuorch server` and a
real node agent (`gpuorch agent`, node n1 with 4 GPUs) on the fake NVML
($GPUORCH_FAKENVML, else BUILD/tests/libnvidia-ml.so.1), with one job running
as the test user gpuorch-test1 and one that cannot start. Prints TAP.

What it checks: `top --once` (and `top` with stdout not a terminal) prints a
plain snapshot with the GPUs, the scripted utilization on the job's GPU (its
bar and figure), the job in the GPU's row and in the jobs table, the pending
count, and no escape byte; `--json` parses and holds the same; bad flags exit
2 naming them, an unreachable server exits 1. A job of 0.25 GPU shows as 0.25
GPU and counts a quarter of a GPU in the summary's GPUs used. Then on a pseudo-terminal of
120x40: it enters the alternate screen, redraws in place (ESC[H per frame),
fits its lines to the width, redraws when the terminal is resized (SIGWINCH),
changes the jobs' order on "s", exits 0 on "q", and gives the terminal back
(ESC[?1049l, the cursor shown, echo and canonical mode on again), also when
ended by SIGTERM (which it raises again once the terminal is back).

Needs root (the agent switches to the job's user) and the user gpuorch-test1
(scripts/setup.sh). The agent, the server and every `gpuorch top` are child
processes stopped by PID; conditions are polled with deadlines."""

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, free_port, remove_tmp, run_as_root  # noqa: E402
from harness import (DEADLINE_S, Server, agent_cgroups, diag, ok,  # noqa: E402
                     remove_cgroups, wait_until)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
JOB_USER = "gpuorch-test1"
BASE_UTIL = 5  # every fake GPU's utilization but the job's
JOB_UTIL = 73  # the job's GPU, once it runs
NGPUS = 4
ESC = b"\x1b"

SRV = Server(BIN, "gpuorch-top-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-top-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)
ADMIN = MEMBER = None
AGENT = None
CGROUP_BASE = None
CHILDREN = []  # `gpuorch top` processes: killed by PID at the end if still there


class AgentProc(FakeAgent):
    """A test agent (harness.FakeAgent) n1 with NGPUS fake GPUs."""

    def __init__(self):
        super().__init__(BIN, SRV, TMP, FAKENVML, "n1",
                         [fake_gpu_uuid(0xa1, i) for i in range(NGPUS)])
        self.write_gpus()

    def write_gpus(self, util=None):
        self.write_gpu_list([{"uuid": u, "utilization": (util or {}).get(u, BASE_UTIL),
                              "memory_utilization": 10, "process_memory_mib": 512,
                              "power_mw": 250000, "temperature_c": 41} for u in self.uuids])


def put(path, body):
    SRV.api.expect("PUT", path, body, token=ADMIN)


def submit(spec):
    spec = dict({"pool": "main", "workdir": SHARED, "team": "research"}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=MEMBER)["id"]


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def node_samples():
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    for n in (body or {}).get("nodes") or [] if st == 200 else []:
        if n.get("name") == "n1":
            return n.get("gpu_samples") or []
    return []


def top_env():
    """The environment of `gpuorch top`: no configuration file or GPUORCH_*
    settings of the machine's own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUORCH_") and k != "XDG_CONFIG_HOME"}
    env["HOME"] = TMP
    return env


def top_args(*extra):
    return [BIN, "top", "--server", f"http://127.0.0.1:{SRV.port}", "--token-file",
            SRV.token_file("admin")] + list(extra)


def top_run(*extra, args=None):
    """Runs `gpuorch top` with stdout a pipe: (exit status, stdout, stderr)."""
    p = subprocess.run(args or top_args(*extra), stdin=subprocess.DEVNULL, capture_output=True,
                       env=top_env(), timeout=60)
    return p.returncode, p.stdout, p.stderr


# -- The setup: a server, an agent, a running job, a pending one. ---------------------------

JOB = None  # the running job: id and GPU
JOB_GPU = None


def setup():
    global ADMIN, MEMBER, AGENT, CGROUP_BASE, JOB, JOB_GPU
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    put("/v1/pools/main", {"description": "4-GPU node"})
    put("/v1/priority-classes/normal", {"order": 0})
    put("/v1/teams/research", {"quotas": [{"pool": "main", "guaranteed": NGPUS,
                                           "borrow_limit": -1}]})
    put("/v1/users/alice", {"unix_user": JOB_USER, "team": "research", "role": "member"})
    MEMBER = SRV.api.expect("POST", "/v1/users/alice/tokens?label=test", want=(201,),
                            token=ADMIN)["token"]
    AGENT = AgentProc()
    CGROUP_BASE, roots = agent_cgroups("gpuorch-top-test", ["n1"])
    AGENT.cgroup = roots.get("n1")
    AGENT.start()
    good = wait_until(lambda: len(node_samples()) == NGPUS, timeout=30, step=0.1)
    if not good:
        raise RuntimeError(f"the agent did not register with samples\n{AGENT.tail()}")

    JOB = submit({"name": "busy", "gpus": 1, "command": ["sleep", "600"]})
    submit({"name": "too-big", "gpus": 64, "command": ["true"]})  # waits: no node has 64 GPUs

    def launched():
        j = get_job(JOB)
        cur = (j or {}).get("current_attempt") or {}
        return j if j and j["state"] == "RUNNING" and cur.get("state") == "RUNNING" else None

    j = wait_until(launched, timeout=30, step=0.1)
    if not j:
        raise RuntimeError(f"the job did not start: {get_job(JOB)}\n{AGENT.tail()}")
    JOB_GPU = j["current_attempt"]["gpus"][0]
    AGENT.write_gpus({JOB_GPU: JOB_UTIL})

    def sampled():
        g = next((g for g in node_samples() if g.get("uuid") == JOB_GPU), {})
        return (g.get("utilization_pct") == JOB_UTIL
                and any(p.get("job") == JOB for p in g.get("processes") or []))

    if not wait_until(sampled, timeout=30, step=0.1):
        raise RuntimeError(f"the job's GPU never showed {JOB_UTIL}%: {node_samples()}")
    diag(f"job {JOB} runs on {JOB_GPU}, which the fake NVML says is {JOB_UTIL}% busy")


# -- Plain and JSON snapshots. --------------------------------------------------------------


def job_index():
    return AGENT.uuids.index(JOB_GPU)


def plain_snapshot():
    rc, out, err = top_run("--once")
    text = out.decode(errors="replace")
    ok(rc == 0 and ESC not in out and not err,
       "`top --once` exits 0 and prints plain text: no escape byte, nothing on stderr",
       f"{rc} {err!r}\n{text}")
    fill = round(JOB_UTIL * 20 / 100)  # a plain snapshot's bar is 20 wide
    bar = "[" + "|" * fill + " " * (20 - fill) + "]"
    row = next((line for line in text.splitlines()
                if re.match(rf"\s+{job_index()} \[", line)), "")
    ok(bar in row and f"{JOB_UTIL}%" in row and f"{JOB} alice/research" in row,
       f"the job's GPU row shows the scripted {JOB_UTIL}% as a bar and a figure, and the job "
       "with its user and team", f"row: {row!r}\n{text}")
    others = [line for line in text.splitlines()
              if re.match(r"\s+\d \[", line) and line != row]
    ok(len(others) == NGPUS - 1 and all(f"{BASE_UTIL}%" in line and line.rstrip().endswith("-")
                                        for line in others),
       f"the other {NGPUS - 1} GPUs show {BASE_UTIL}% and no job", text)
    node = next((line for line in text.splitlines() if line.startswith("n1 ")), "")
    summary = next((line for line in text.splitlines() if line.startswith("nodes ")), "")
    ok("main  up" in node and f"{NGPUS}x" in node
       and f"GPUs 1/{NGPUS} used" in summary and "1 running, 1 pending" in summary,
       "the node line and the summary: n1 up with its GPUs, 1 GPU used, 1 running and 1 "
       "pending job", f"{node!r}\n{summary!r}")
    jobs = re.search(rf"^{JOB}\s+alice\s+research\s+1\s+{JOB_UTIL}%", text, re.M)
    ok("JOB  USER" in text and jobs,
       "the jobs table lists the job: JOB USER TEAM GPUS UTIL%", text)
    rc2, out2, _ = top_run()
    ok(rc2 == 0 and ESC not in out2 and f"{JOB} alice/research".encode() in out2,
       "`top` with stdout not a terminal prints the same plain snapshot and exits 0",
       f"{rc2} {out2[:1500]!r}")


def json_snapshot():
    rc, out, err = top_run("--json")
    try:
        view = json.loads(out)
    except ValueError as e:
        view = None
        err += repr(e).encode()
    gpu = next((g for g in (view or {}).get("gpus") or [] if g.get("uuid") == JOB_GPU), {})
    job = next((j for j in (view or {}).get("jobs") or [] if j.get("id") == JOB), {})
    ok(rc == 0 and view is not None and "cost_rate" in view
       and gpu.get("utilization_pct") == JOB_UTIL and gpu.get("node") == "n1"
       and [x.get("id") for x in gpu.get("jobs") or []] == [JOB]
       and job.get("user") == "alice" and job.get("utilization_pct") == JOB_UTIL
       and (view.get("summary") or {}).get("pending_jobs") == 1,
       "`top --json` parses: nodes, gpus (the job's GPU at its utilization, with the job), "
       "jobs, summary and cost_rate", f"{rc} {err!r}\n{out[:2000]!r}")
    diag(f"cost_rate: {(view or {}).get('cost_rate')!r} (null when the server keeps no prices)")


def quarter_gpu():
    """A job of 0.25 GPU counts as a quarter of a GPU: in the jobs table, the
    summary's GPUs used (1 + 0.25) and --json, as the controller counts it."""
    frac = submit({"name": "frac", "gpus": 0.25, "command": ["sleep", "600"]})
    running = wait_until(lambda: (get_job(frac) or {}).get("state") == "RUNNING",
                         timeout=30, step=0.1)
    rc, out, _ = top_run("--once")
    text = out.decode(errors="replace")
    summary = next((line for line in text.splitlines() if line.startswith("nodes ")), "")
    row = re.search(rf"^{frac}\s+alice\s+research\s+(\S+)\s", text, re.M)
    ok(running and rc == 0 and f"GPUs 1.25/{NGPUS} used" in summary
       and row and row.group(1) == "0.25",
       "with a 0.25 GPU job beside the 1-GPU one, `top` shows it as 0.25 GPU and the summary "
       f"1.25/{NGPUS} GPUs used", f"{summary!r}\n{text}")
    rc, out, _ = top_run("--json")
    view = json.loads(out) if rc == 0 else {}
    job = next((j for j in view.get("jobs") or [] if j.get("id") == frac), {})
    st, nodes, _ = call("GET", "/v1/nodes", token=ADMIN)
    in_use = sum(n.get("gpus_in_use") or 0 for n in (nodes or {}).get("nodes") or [])
    ok(job.get("gpus") == 0.25 and (view.get("summary") or {}).get("gpus_used") == 1.25
       and in_use == 1.25,
       "`top --json`: the job's gpus 0.25, the summary's gpus_used 1.25, as the nodes' "
       "gpus_in_use sum", f"{job!r} {view.get('summary')!r} nodes: {in_use}")
    call("POST", f"/v1/jobs/{frac}/cancel", token=ADMIN)
    wait_until(lambda: (get_job(frac) or {}).get("state") not in ("RUNNING", None))


def bad_input():
    rc, out, err = top_run("--bogus")
    ok(rc == 2 and b"--bogus" in err, "an unknown flag exits 2 naming it", f"{rc} {err!r}")
    rc, out, err = top_run("--interval", "0")
    ok(rc == 2 and b"--interval" in err, "--interval 0 exits 2 naming --interval",
       f"{rc} {err!r}")
    rc, out, err = top_run("--sort", "memory")
    ok(rc == 2 and b"--sort" in err, "--sort with an unknown key exits 2 naming --sort",
       f"{rc} {err!r}")
    rc, out, err = top_run("--help")
    ok(rc == 0 and b"usage: gpuorch top" in out and b"--interval" in out,
       "--help prints the usage and exits 0", f"{rc} {out[:300]!r}")
    port = free_port()  # nobody listens on it
    rc, out, err = top_run(args=[BIN, "top", "--once", "--server", f"http://127.0.0.1:{port}",
                                 "--token", "x"])
    ok(rc == 1 and err.startswith(b"gpuorch top: ") and not out,
       "an unreachable server exits 1 with one line on stderr", f"{rc} {err!r} {out!r}")


# -- On a pseudo-terminal. ------------------------------------------------------------------


class PtyTop:
    """`gpuorch top ARGS` on a pseudo-terminal of COLS x ROWS, its controlling
    terminal (so that a resize sends it SIGWINCH); `out` collects what it
    wrote."""

    def __init__(self, *args, cols=120, rows=40):
        self.master, self.slave = pty.openpty()
        self.resize(cols, rows)
        self.saved = termios.tcgetattr(self.slave)
        slave = self.slave

        def controlling_tty():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(top_args(*args), stdin=slave, stdout=slave, stderr=slave,
                                     env=dict(top_env(), TERM="xterm"),
                                     preexec_fn=controlling_tty)
        CHILDREN.append(self.proc)
        self.out = b""

    def resize(self, cols, rows):
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def pump(self, timeout=0.1):
        """Reads what is there (waiting up to TIMEOUT)."""
        r, _, _ = select.select([self.master], [], [], timeout)
        if r:
            try:
                self.out += os.read(self.master, 65536)
            except OSError:  # EIO: the child closed its side
                pass

    def until(self, cond, timeout=DEADLINE_S):
        """Reads until cond(out) holds or the deadline passes; returns cond(out)."""
        return wait_until(lambda: (self.pump(), cond(self.out))[1], timeout=timeout, step=0)

    def frames(self):
        return self.out.count(b"\x1b[H")

    def send(self, data):
        os.write(self.master, data)

    def wait(self):
        """Waits for the exit, reading all the while; the exit status or None."""
        self.until(lambda _: self.proc.poll() is not None)
        self.pump(0)
        return self.proc.poll()

    def restored(self):
        """The slave's settings are back as they were before top ran."""
        now = termios.tcgetattr(self.slave)
        return now[3] & (termios.ECHO | termios.ICANON) == self.saved[3] & (
            termios.ECHO | termios.ICANON)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def strip_escapes(data):
    """The text of a frame: escape sequences out, and the carriage returns
    the terminal adds before each newline (ONLCR)."""
    return re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", data).replace(b"\r", b"")


def last_frame(data):
    return data[data.rfind(b"\x1b[H"):]


def on_a_terminal():
    t = PtyTop("--interval", "0.3")
    try:
        two = t.until(lambda out: out.count(b"\x1b[H") >= 2 and f"{JOB} alice".encode() in out)
        ok(two and b"\x1b[?1049h" in t.out and b"\x1b[?25l" in t.out,
           "on a 120x40 terminal it enters the alternate screen, hides the cursor and redraws "
           "in place (ESC[H at least twice), showing the job", f"{t.out[-3000:]!r}")
        lines = strip_escapes(last_frame(t.out)).split(b"\n")
        widest = max(len(line.decode(errors="replace")) for line in lines)
        ok(len(lines) <= 40 and widest <= 120 and any(b"n1  main  up" in x for x in lines),
           "each frame fits the terminal: at most 40 lines of at most 120 characters",
           f"{len(lines)} lines, widest {widest}\n{lines!r}")
        t.send(b"s")
        ok(t.until(lambda out: b"sorted by util" in out),
           "'s' changes the jobs' order (sorted by util)", f"{t.out[-1500:]!r}")
        t.send(b"q")
        rc = t.wait()
        tail = t.out[t.out.rfind(b"\x1b[H"):]
        ok(rc == 0 and b"\x1b[?1049l" in tail and b"\x1b[?25h" in tail and t.restored(),
           "'q' exits 0, leaves the alternate screen, shows the cursor and restores the "
           "terminal's echo and canonical mode", f"{rc} {tail[-400:]!r}")
    finally:
        t.close()


def resize_and_sigterm():
    # An hour's interval: any redraw after the first comes from the resize.
    t = PtyTop("--interval", "3600")
    try:
        first = t.until(lambda out: out.count(b"\x1b[H") >= 1 and b"\x1b[J" in out)
        t.resize(80, 12)
        redrawn = first and t.until(lambda out: out.count(b"\x1b[H") >= 2
                                    and out.endswith(b"\x1b[J"))
        lines = strip_escapes(last_frame(t.out)).split(b"\n")
        widest = max(len(line.decode(errors="replace")) for line in lines)
        ok(redrawn and len(lines) <= 12 and widest <= 80
           and any(b"more lines" in line for line in lines)
           and any(line.startswith(f"{JOB} ".encode()) for line in lines),
           "resized to 80x12 it redraws at once (SIGWINCH) within 12 lines of 80 characters: "
           "GPU rows cut (saying how many were left out), the job still shown",
           f"{len(lines)} lines, widest {widest}\n{lines!r}")
        t.proc.send_signal(signal.SIGTERM)
        rc = t.wait()
        ok(rc == -signal.SIGTERM and b"\x1b[?1049l" in t.out[-200:] and t.restored(),
           "SIGTERM gives the terminal back (alternate screen left, settings restored), then "
           "ends it by that signal", f"{rc} {t.out[-300:]!r}")
    finally:
        t.close()


def main():
    print("TAP version 13")
    setup()
    for step in (plain_snapshot, json_snapshot, quarter_gpu, bad_input, on_a_terminal, resize_and_sigterm):
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
    st, body, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1000", token=ADMIN)
    for j in (body or {}).get("jobs") or []:
        call("POST", f"/v1/jobs/{j['id']}/cancel", token=ADMIN)
    wait_until(lambda: (get_job(JOB) or {}).get("state") not in ("RUNNING", None))
    rc = AGENT.stop()
    ok(rc == 0, "the agent stops with status 0", f"{rc}\n{AGENT.tail()}")
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    for p in CHILDREN:
        if p.poll() is None:
            p.kill()
            p.wait()
    if AGENT and AGENT.proc and AGENT.proc.poll() is None:
        AGENT.proc.kill()
        AGENT.proc.wait()
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

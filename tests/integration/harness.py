"""What the integration tests share: TAP output, the one HTTP client of the
API (Client), a `gpuorch server` child process on 127.0.0.1 with an ephemeral
port and a temporary data directory (stopped by PID), polling with a deadline,
cgroups and agents on the fake NVML, and the checker of "one GPU, one holder"
(GpuWatch) that samples assignments and the fake GPUs' processes.

A test makes one Server, binds `call = srv.call` (or makes a Client with a
token of its own: srv.client(TOKEN)), and ends with run(main, srv), which
prints the TAP plan and exits with the verdict."""

import atexit
import collections
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

DEADLINE_S = 20  # how long any polled condition may take to come true

_count = 0
_failed = False


def ok(cond, name, detail=""):
    """One TAP check; a failure prints DETAIL as diagnostics."""
    global _count, _failed
    _count += 1
    if cond:
        print(f"ok {_count} - {name}")
    else:
        _failed = True
        print(f"not ok {_count} - {name}")
        for line in str(detail).splitlines():
            print(f"#   {line}")
    sys.stdout.flush()


def diag(text):
    print(f"# {text}")
    sys.stdout.flush()


# -- HTTP: the one client of the API. -------------------------------------------------------


class TransportError(OSError):
    """The connection broke inside an answer (a short body, a bad status line):
    to a caller, the same as a refused or reset connection."""


class Answer(collections.namedtuple("Answer", "status json raw")):
    """An HTTP answer. It unpacks as (status, parsed JSON or None, raw body
    bytes); .headers maps the header names, in lower case, to their values."""

    headers = {}

    @property
    def text(self):
        """The body as text (bytes that are not UTF-8 replaced)."""
        return self.raw.decode(errors="replace")

    @property
    def content_type(self):
        return self.headers.get("content-type")


class APIError(RuntimeError):
    """An answer with a status the caller did not expect (Client.expect)."""

    def __init__(self, method, path, body, answer):
        sent = f" {json.dumps(body)[:300]}" if body is not None else ""
        super().__init__(f"{method} {path}{sent}: {answer.status} {answer.raw[:300]!r}")
        self.answer = answer


def _parse_json(payload):
    try:
        return json.loads(payload) if payload else None
    except ValueError:
        return None


def _headers(response):
    return {k.lower(): v for k, v in response.getheaders()}


class Client:
    """HTTP/1.1 requests to one server, one connection each ("Connection:
    close"). BASE is "http://HOST:PORT", or a function that returns it (a
    Server's, whose port changes at each start). TOKEN, when given, goes as
    "Authorization: Bearer TOKEN" in every request unless the request names
    another (token="" sends none). A refused, reset or broken connection and
    a timeout raise OSError; an HTTP status is never an exception, but in
    expect()."""

    def __init__(self, base, token=None, timeout=30):
        self._base = base
        self.token = token
        self.timeout = timeout

    @property
    def base(self):
        return self._base() if callable(self._base) else self._base

    def _connect(self, timeout):
        u = urllib.parse.urlsplit(self.base)
        return http.client.HTTPConnection(u.hostname, u.port or 80,
                                          timeout=self.timeout if timeout is None else timeout)

    def _head(self, token, headers, has_body):
        token = self.token if token is None else token
        out = {"Connection": "close"}
        if token:
            out["Authorization"] = f"Bearer {token}"
        if has_body:
            out["Content-Type"] = "application/json"
        out.update(headers or {})
        return out

    @staticmethod
    def _target(path, query):
        if not query:
            return path
        return path + ("&" if "?" in path else "?") + urllib.parse.urlencode(query)

    def call(self, method, path, body=None, token=None, headers=None, raw=None, query=None,
             timeout=None):
        """METHOD PATH (QUERY, a dict, appended urlencoded) with BODY as JSON,
        or RAW bytes as they are (both as application/json; HEADERS added or
        replacing). Returns an Answer: (status, parsed JSON or None, raw bytes)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn = self._connect(timeout)
        try:
            conn.request(method, self._target(path, query), body=data,
                         headers=self._head(token, headers, data is not None))
            r = conn.getresponse()
            payload = r.read()
            answer = Answer(r.status, _parse_json(payload), payload)
            answer.headers = _headers(r)
            return answer
        except http.client.HTTPException as e:
            raise TransportError(f"{method} {path}: {e!r}") from e
        finally:
            conn.close()

    def expect(self, method, path, body=None, want=(200, 201), **kwargs):
        """call(), for a request that must succeed: its parsed JSON when the
        status is one of WANT, else APIError naming the request and the answer."""
        answer = self.call(method, path, body, **kwargs)
        if answer.status not in want:
            raise APIError(method, path, body, answer)
        return answer.json

    def follow(self, path, token=None, headers=None, query=None, timeout=None):
        """GET PATH, reading the answer as it comes until it ends (a `logs -f`
        stream): (status, body bytes, how it ended: "end" when the answer ended
        cleanly, else what broke it and after how long). The body keeps what
        came before a break."""
        conn = self._connect(timeout)
        t0 = time.monotonic()
        try:
            conn.request("GET", self._target(path, query),
                         headers=self._head(token, headers, False))
            r = conn.getresponse()
            body = b""
            try:
                while True:  # read1: what has come, so that a broken stream keeps its part
                    chunk = r.read1(65536)
                    if not chunk:
                        return r.status, body, "end"
                    body += chunk
            except (OSError, http.client.HTTPException) as e:
                return r.status, body, f"{e!r} after {time.monotonic() - t0:.1f} s"
        except http.client.HTTPException as e:
            raise TransportError(f"GET {path}: {e!r}") from e
        finally:
            conn.close()

    def scrape(self, token=None, path="/metrics"):
        """GET /metrics, the Prometheus text format: an Answer whose .text is
        the exposition (parse it with prom_samples) and .content_type its type."""
        return self.call("GET", path, token=token)

    def status_before_body(self, method, path, length, token=None, headers=None, timeout=None):
        """Sends only the head of METHOD PATH, announcing a body of LENGTH bytes
        that never comes, and returns the status of the answer the server gives
        before it (None when it closes without one): how a server refuses a body
        over its limit before reading it."""
        u = urllib.parse.urlsplit(self.base)
        head = self._head(token, headers, True)
        head.update({"Host": u.netloc, "Content-Length": str(length)})
        lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in head.items()]
        with socket.create_connection((u.hostname, u.port or 80),
                                      timeout=self.timeout if timeout is None else timeout) as s:
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        parts = data.split(b" ")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


_PROM_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def prom_samples(text):
    """[(name, {label: value}, float)] of every sample line of a Prometheus
    text exposition; ValueError on a line that is neither a sample nor a
    comment."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM_SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        labels = dict(_PROM_LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def free_port():
    """A loopback port nobody listens on (for a child to bind, or to be refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`gpuorch server` BIN as a child process, listening on 127.0.0.1 with an
    ephemeral port (read from --port-file), its data under a temporary directory
    named with PREFIX; EXTRA_ARGS are added to its command line."""

    def __init__(self, binary, prefix, extra_args=()):
        self.binary = binary
        self.extra_args = [str(a) for a in extra_args]
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.data = os.path.join(self.tmp, "data")
        self.log_path = os.path.join(self.tmp, "server.log")
        self.proc = None
        self.port = None
        self.listen_port = 0  # the port --listen asks for (0: a free one, read from --port-file)
        self.api = Client(lambda: self.url)
        self.call = self.api.call

    @property
    def url(self):
        """http://127.0.0.1:PORT of the running server (the port changes at each start)."""
        return f"http://127.0.0.1:{self.port}"

    def client(self, token=None):
        """A Client of this server that follows it across restarts and sends
        TOKEN unless a call names another."""
        return Client(lambda: self.url, token)

    def start(self):
        port_file = os.path.join(self.tmp, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "server", "--data", self.data, "--listen",
             f"127.0.0.1:{self.listen_port}", "--port-file", port_file] + self.extra_args,
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.port = int(text)
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.02)
        raise RuntimeError("server did not start")

    def stop(self, sig=signal.SIGTERM):
        """Signals the server and waits for it; returns its exit status."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        return rc

    def kill9(self):
        """kill -9, as a crash would; the caller starts it again."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def log_tail(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def token_file(self, name):
        """The path of the NAME.token file in the data directory."""
        return os.path.join(self.data, f"{name}.token")

    def cleanup(self):
        """Kills the server if it still runs and removes the temporary
        directory (kept, and named, when KEEP_TMP is set)."""
        if self.proc:
            self.stop(signal.SIGKILL)
        if os.environ.get("KEEP_TMP"):
            print(f"# kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def message(body, raw=b""):
    """The error message of an answer, or the raw body."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message"))
    return repr(raw)


def wait_until(fn, timeout=DEADLINE_S, step=0.05):
    """Polls fn until it returns something true or the deadline passes; returns
    its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


def job_of(api, jid, token):
    """GET /v1/jobs/JID through the Client API, or None."""
    st, body, _ = api.call("GET", f"/v1/jobs/{jid}", token=token)
    return body if st == 200 else None


def wait_job_until(api, jid, pred, token, timeout=DEADLINE_S):
    """Polls job JID until pred(job) holds; returns (held, the last job read)."""
    last = [None]

    def check():
        last[0] = job_of(api, jid, token)
        try:
            return last[0] is not None and bool(pred(last[0]))
        except (KeyError, TypeError, IndexError):
            return False

    return bool(wait_until(check, timeout, 0.1)), last[0]


def run(main, srv, on_exit=None):
    """Runs MAIN (a crash is a failed check, with the reason), then ON_EXIT and
    srv.cleanup(); prints the TAP plan and exits 1 if any check failed."""
    try:
        main()
    except Exception as e:  # a crash is a failure, with the reason
        ok(False, "the test ran to its end", repr(e))
    finally:
        if on_exit:
            on_exit()
        srv.cleanup()
    print(f"1..{_count}")
    sys.exit(1 if _failed else 0)


def run_steps(steps):
    """Runs each of STEPS; one that raises is a failed check with the reason,
    and the others still run."""
    for step in steps:
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {getattr(step, '__name__', 'step')} ran to its end", repr(e))


def end_checks(agents, srv):
    """The checks at a test's end: no sanitizer report in the agents' logs,
    every agent (a {name: FakeAgent}) and the server stop with status 0."""
    reports = [n for n, ag in agents.items()
               if "Sanitizer" in ag.log() or "runtime error:" in ag.log()]
    ok(not reports, "the agents' logs hold no sanitizer report",
       "\n".join(agents[n].tail(6000) for n in reports))
    codes = {n: ag.stop() for n, ag in agents.items()}
    ok(all(c == 0 for c in codes.values()), "every agent stops with status 0 on SIGTERM", codes)
    rc = srv.stop()
    ok(rc == 0, "the server stops cleanly at the end", f"{rc}\n{srv.log_tail()}")


def pid_alive(pid):
    """Whether process PID exists and is not a zombie (a zombie has ended; only
    its parent's wait is missing)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            stat = f.read()
    except (OSError, ValueError):
        return False
    # The state follows the command name, which is in parentheses and may hold any byte.
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X", "")


def stop_process(proc, timeout=20):
    """SIGTERM to PROC (a Popen, or None) and wait; its exit status, None if it
    had to be killed after TIMEOUT seconds (or there was none)."""
    if not proc or proc.poll() is not None:
        return proc.returncode if proc else None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def env_file(path):
    """A file of NAME=VALUE lines (the output of env) as a dict; {} when it
    cannot be read."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, eq, v = line.rstrip("\n").partition("=")
                if eq:
                    out[k] = v
    except OSError:
        pass
    return out


def write_atomic(path, text):
    """Writes TEXT to PATH through a temporary file and a rename, so that a
    reader sees the old file or the whole new one."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def file_tail(path, size=2000):
    """The last SIZE characters of a file, or "" when it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-size:]
    except OSError:
        return ""


# -- cgroups for agents that share this machine. --------------------------------------------


def agent_cgroups(prefix, names):
    """Agents posing as several nodes on one machine must not share a cgroup
    root: both would make ROOT/job-J.A for the ranks of one gang, and one
    rank's end would kill the other. Where a cgroup filesystem is writable
    (the cgroup2 mount, else a v1 hierarchy, as the agent's auto root),
    makes MOUNT/PREFIX-PID/NAME for each of NAMES and returns (base, {name:
    root}); elsewhere says why and returns (None, {}): the agents fall back
    to process groups. The agents make the roots' directories in the v1
    hierarchies themselves; remove_cgroups(base) removes those too."""
    mounts = cgroup_mounts()
    mount = next((m[0] for m in mounts if m[1] == "cgroup2"), None)
    for ctrl in ("freezer", "memory", "cpu"):
        mount = mount or next((m[0] for m in mounts if m[1] == "cgroup" and ctrl in m[2]), None)
    if not mount:
        diag("no cgroup filesystem mounted: the agents fall back to process groups")
        return None, {}
    base = os.path.join(mount, f"{prefix}-{os.getpid()}")
    roots = {}
    try:
        os.mkdir(base)
        delegate_controllers(base)
        for name in names:
            roots[name] = os.path.join(base, name)
            os.mkdir(roots[name])
    except OSError as e:
        diag(f"the cgroup filesystem at {mount} is not writable ({e}): the agents fall back")
        remove_cgroups(base)
        return None, {}
    return base, roots


def delegate_controllers(base):
    """On cgroup v2, passes cpu and memory on to BASE's children where BASE
    has them, so that each agent's root can enable them for its attempts (a
    cgroup has only what its parent's cgroup.subtree_control enables)."""
    try:
        with open(os.path.join(base, "cgroup.controllers")) as f:
            offered = f.read().split()
    except OSError:
        return  # a v1 hierarchy: nothing to delegate
    for ctrl in ("cpu", "memory"):
        if ctrl in offered:
            try:
                with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                    f.write(f"+{ctrl}")
            except OSError as e:
                diag(f"cannot enable {ctrl} in {base}/cgroup.subtree_control: {e}")


def cgroup_mounts():
    """The cgroup filesystems here: [(mount point, "cgroup2" or "cgroup",
    super options)] from /proc/self/mountinfo."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            words = right.split()
            if words[:1] in (["cgroup2"], ["cgroup"]):
                point = left.split(" ")[4].encode().decode("unicode_escape")
                mounts.append((point, words[0], words[2].split(",") if len(words) > 2 else []))
    return mounts


def cgroup_v1_twins(base):
    """BASE's directories in the v1 hierarchies (the agent puts limits the
    cgroup2 mount lacks there, at the same path below each mount point)."""
    mounts = cgroup_mounts()
    holder = max((m for m in mounts if base == m[0] or base.startswith(m[0].rstrip("/") + "/")),
                 key=lambda m: len(m[0]), default=None)
    if not holder:
        return []
    rel = base[len(holder[0].rstrip("/")):]
    return [m[0].rstrip("/") + rel for m in mounts
            if m[1] == "cgroup" and m[0] != holder[0] and os.path.isdir(m[0].rstrip("/") + rel)]


def remove_cgroups(base):
    """Removes BASE and the cgroups under it, deepest first, after killing by
    pid whatever jobs of this test are still in them; the same for BASE's
    directories in the v1 hierarchies."""
    if not base:
        return
    for twin in cgroup_v1_twins(base):
        remove_cgroup_tree(twin)
    remove_cgroup_tree(base)


def remove_cgroup_tree(base):
    if not os.path.isdir(base):
        return
    walk = sorted(os.walk(base), key=lambda w: -w[0].count("/"))
    for d, _, _ in walk:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                for pid in f.read().split():  # only this test's jobs are in there
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    for d, _, _ in walk:
        wait_until(lambda: try_rmdir(d), timeout=5)


def try_rmdir(d):
    try:
        os.rmdir(d)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def remove_tmp(tmp):
    """Removes a test's temporary tree, unless KEEP_TMP asks to keep it."""
    if os.environ.get("KEEP_TMP"):
        print(f"# kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def run_as_root(main, srv, tmp, on_exit=None):
    """run(), or one TAP skip line when not root: agents switch to the job's user."""
    if os.geteuid() != 0:
        print("1..0 # SKIP the agent switches to the job's user: run as root")
        srv.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(0)
    run(main, srv, on_exit=on_exit)


# -- Agents on the fake NVML. ---------------------------------------------------------------

# The flags every test agent gets unless it says otherwise (None leaves one out):
# short waits for tests, and what a GPU node offers rather than this machine's few
# CPUs (each job takes one).
AGENT_FLAGS = {"kill-grace": 2, "sample-interval": 200, "poll-wait": 5, "dirty-wait": 2,
               "cpus": 32, "mem-mib": 65536}


def fake_gpu_uuid(node_no, index, tag="4000"):
    """Unique per node, and per run: the fake NVML finds a GPU's processes by
    the UUIDs in their environment, so a test running beside another must not
    name the same GPUs."""
    return f"GPU-{node_no:08x}-{os.getpid() & 0xffff:04x}-{tag}-8000-{index:012x}"


_PRIVATE_CGROUPS = []  # FakeAgent's own cgroup roots' bases, removed at exit


@atexit.register
def _remove_private_cgroups():
    for base in _PRIVATE_CGROUPS:
        remove_cgroups(base)


class FakeAgent:
    """`gpuorch agent` NAME as a child process on the fake NVML: its GPUs in
    TMP/NAME-gpus.json (FAKENVML_CONFIG), its state in TMP/NAME, its output in
    TMP/NAME.log. FLAGS (kill_grace=1, dirty_wait=None, exit_poll=True, ...)
    change AGENT_FLAGS (True: a flag without a value);
    set .cgroup before start() for --cgroup-root. Left unset, the agent gets a
    cgroup root of its own under the cgroup mount (where one is writable),
    removed when the test exits: the automatic root is MOUNT/gpuorch/NAME, and
    two tests running at once with a node of the same name and jobs of the
    same ids would kill each other's jobs there."""

    def __init__(self, binary, srv, tmp, nvml, name, uuids, pool="main", gpu_file=None,
                 **flags):
        self.binary, self.srv, self.nvml = binary, srv, nvml
        self.name, self.pool, self.uuids = name, pool, list(uuids)
        self.gpu_file = gpu_file or os.path.join(tmp, f"{name}-gpus.json")
        self.state = os.path.join(tmp, name)
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.flags = dict(AGENT_FLAGS, **{k.replace("_", "-"): v for k, v in flags.items()})
        self.cgroup = None
        self.private_cgroup = None  # made by start() when .cgroup is unset
        self.tmp = tmp
        self.proc = None
        self.server = None  # --server: the server's URL unless set (a list, say)
        # Where it runs; a test of hosts in network namespaces (netns.py) sets
        # them: its host's address, the words that start it in its host
        # (nsenter ...), the join token's file.
        self.addr = "127.0.0.1"
        self.prefix = []
        self.join_file = None  # default srv's DATA/join.token

    def write_gpu_list(self, gpus):
        """Writes the GPU file (renamed over the old one)."""
        write_atomic(self.gpu_file, json.dumps({"gpus": gpus}))

    def start(self):
        server = self.server or f"http://127.0.0.1:{self.srv.port}"
        args = list(self.prefix) + [
            self.binary, "agent", "--server", server,
            "--join-token", self.join_file or self.srv.token_file("join"), "--name", self.name,
            "--pool", self.pool, "--state-dir", self.state, "--nvml", self.nvml,
            "--addr", self.addr, "--log-listen", f"{self.addr}:0"]
        for flag, value in self.flags.items():
            if value is True:
                args += [f"--{flag}"]
            elif value is not None and value is not False:
                args += [f"--{flag}", str(value)]
        if not self.cgroup and not self.private_cgroup:
            base, roots = agent_cgroups(f"gpuorch-{os.path.basename(self.tmp)}-{self.name}",
                                        [self.name])
            if base:
                self.private_cgroup = roots[self.name]
                _PRIVATE_CGROUPS.append(base)
        if self.cgroup or self.private_cgroup:
            args += ["--cgroup-root", self.cgroup or self.private_cgroup]
        # FAKENVML_DRIVER: the fake keeps a root process that lists GPU processes,
        # as the kernel driver does, once the agent's network half drops root.
        env = dict(os.environ, FAKENVML_CONFIG=self.gpu_file, FAKENVML_DRIVER="1")
        with open(self.log_path, "a") as log:
            log.write(f"---- test: starting {' '.join(args)}\n")
            log.flush()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        """SIGTERM and wait; the exit status (None if it had to be killed)."""
        return stop_process(self.proc)

    def kill(self):
        """SIGKILL if still running (a test's last cleanup)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self):
        return file_tail(self.log_path, 10 ** 7)

    def tail(self, size=1500):
        return f"-- {self.name}'s log:\n{file_tail(self.log_path, size)}"


# -- The invariant "one GPU, one holder", sampled while a test runs. ------------------------

GPU_ENV = ("CUDA_VISIBLE_DEVICES", "GPUORCH_JOB_ID", "SLURM_JOB_ID", "GPUORCH_GPU_MILLI")


def gpu_envs(uuids, names=GPU_ENV):
    """(pid, {name: value} of its environment's NAMES, [its GPUs]) of every live
    process on the fake GPUs UUIDS: the fake NVML's rule, a process whose
    CUDA_VISIBLE_DEVICES names the GPU."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        env = {}
        for item in raw.split(b"\0"):
            k, eq, v = item.partition(b"=")
            if eq and k.decode(errors="replace") in names:
                env[k.decode()] = v.decode(errors="replace")
        gpus = [u for u in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if u in uuids]
        if gpus and pid_alive(pid):
            yield int(pid), env, gpus


def gpu_processes(uuids):
    """{uuid: {job id: [pid, ...]}} of the processes on the fake GPUs UUIDS
    (gpu_envs); the job by GPUORCH_JOB_ID, else SLURM_JOB_ID ("?" without
    either). Also the set of jobs whose processes say they hold a fraction
    (GPUORCH_GPU_MILLI)."""
    found, fractions = {}, set()
    for pid, env, gpus in gpu_envs(uuids):
        job = env.get("GPUORCH_JOB_ID") or env.get("SLURM_JOB_ID") or "?"
        if "GPUORCH_GPU_MILLI" in env:
            fractions.add(job)
        for u in gpus:
            found.setdefault(u, {}).setdefault(job, []).append(pid)
    return found, fractions


class Periodic:
    """A sampler's thread: sample() every PERIOD seconds (from the start of one
    to the next) until stop(); a sample that raises goes to failed(error), and
    sampling goes on. A subclass keeps its GPUs' UUIDS in .uuids (add() takes
    more, under .lock)."""

    PERIOD = 0.1

    def __init__(self, uuids=()):
        self.uuids = set(uuids)
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def add(self, uuids):
        with self.lock:
            self.uuids |= set(uuids)

    def start(self):
        self.thread.start()
        return self

    def halt(self):
        self.stopped.set()
        self.thread.join(timeout=30)

    def loop(self):
        while not self.stopped.is_set():
            t0 = time.monotonic()
            try:
                self.sample()
            except Exception as e:  # a checker that breaks says so, and goes on
                self.failed(e)
            self.stopped.wait(max(0.0, self.PERIOD - (time.monotonic() - t0)))

    def sample(self):
        raise NotImplementedError

    def failed(self, error):
        raise NotImplementedError


class GpuWatch(Periodic):
    """Every 100 ms, on a thread of its own, samples what the controller assigns
    (GET /v1/jobs: each job's current attempt and its GPUs) and what runs on
    the fake GPUs UUIDS (gpu_processes), and notes a violation whenever a GPU
    is in two jobs' attempts, or runs two jobs' processes, at once, unless
    every one of those jobs holds a fraction of it. API is a Client with an
    admin's token; add() takes more GPUs. .seen[job] is (first, last)
    monotonic time its processes were seen on a GPU, .assigned[job] the first
    time the controller listed an attempt of it with GPUs."""

    def __init__(self, api, uuids=()):
        super().__init__(uuids)
        self.api = api
        self.violations = []
        self.seen = {}
        self.assigned = {}
        self.samples = 0

    def stop(self):
        """Stops the thread; returns the violations seen."""
        self.halt()
        return list(self.violations)

    def note(self, what):
        with self.lock:
            if len(self.violations) < 50:
                self.violations.append(what)

    def failed(self, error):
        self.note(f"the checker failed: {error!r}")

    def sample(self):
        with self.lock:
            uuids = set(self.uuids)
        now = time.monotonic()
        self.check_assignments(uuids, now)
        procs, fractions = gpu_processes(uuids)
        for u, jobs in procs.items():
            for job in jobs:
                first, _ = self.seen.get(job, (now, now))
                self.seen[job] = (first, now)
            if len(jobs) > 1 and not all(j in fractions for j in jobs):
                self.note(f"GPU {u} runs processes of jobs {sorted(jobs)} at once: {jobs}")
        self.samples += 1

    def check_assignments(self, uuids, now):
        try:
            st, body, _ = self.api.call("GET", "/v1/jobs", query={"limit": 1000}, timeout=10)
        except OSError:  # the controller is down (a test's kill -9): nothing to compare
            return
        if st != 200:
            return
        holders = {}
        for j in (body or {}).get("jobs") or []:
            cur = j.get("current_attempt") or {}
            gpus = cur.get("gpus") or []
            if gpus and str(j.get("id")) not in self.assigned:
                self.assigned[str(j.get("id"))] = now
            want = (j.get("spec") or {}).get("gpus")
            frac = isinstance(want, (int, float)) and want < 1
            for u in gpus:
                if u in uuids or not uuids:
                    holders.setdefault(u, []).append((j.get("id"), cur.get("attempt"), frac))
        for u, hs in holders.items():
            if len(hs) > 1 and not all(f for _, _, f in hs):
                self.note(f"GPU {u} is in the attempts of {[(a, b) for a, b, _ in hs]} at once")

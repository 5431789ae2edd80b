#!/usr/bin/env python3
"""framing_test.py GPUORCH - HTTP message framing (RFC 9112 sections 5 and 6)
over raw sockets, against both servers that src/http serves: `gpuorch server`
(the controller's API) and an agent's log server (`gpuorch agent
--log-listen`, on the fake NVML: $GPUORCH_FAKENVML, else
BUILD/tests/libnvidia-ml.so.1). Prints TAP.

Each case sends raw bytes on a new connection, reads until the server closes
it or a deadline passes, and checks that exactly one answer came (one status
line: no head sent twice), its status, and that the connection closed. On the
controller the refused requests are job submissions (POST /v1/jobs, with the
admin's token and a body that is a valid job), and the job count must not
move: a refused request reaches no handler. A control submission with sound
framing shows that the same body is stored. On the log server the refusals
come before its token check too (400, not 401); sound requests carry the
node's log token (the controller's HMAC of the node name under logs.key) and
reach the handler, which finds no such attempt (404).

No sleeps: every wait is a deadline. KEEP_TMP=1 keeps the directories."""

import hashlib
import hmac
import json
import os
import re
import socket
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, diag, fake_gpu_uuid, ok, remove_tmp, run, wait_until  # noqa: E402
from harness import Server  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
READ_DEADLINE_S = 10  # how long a case waits for the server to close

SRV = Server(BIN, "gpuorch-framing-test-srv-")
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-framing-test-")
os.chmod(TMP, 0o755)  # the agents' account must reach their state directories
AGENT = None
ADMIN = None
JOB = json.dumps({"command": ["/bin/true"], "gpus": 1, "team": "research",
                  "time_limit_s": 60}).encode()

_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*")


def parse_answers(data):
    """The answers in DATA, in order: [(status, headers, body)], and the bytes
    left over that are no whole answer (a second head would show here)."""
    out = []
    while data:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        lines = data[:end].split(b"\r\n")
        m = _STATUS.fullmatch(lines[0])
        if not m:
            break
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode()] = v.strip().decode(errors="replace")
        rest = data[end + 4:]
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                nl = rest.find(b"\r\n")
                size = int(rest[:nl].split(b";")[0], 16) if nl > 0 else -1
                if size < 0 or len(rest) < nl + 2 + size + 2:
                    return out, data
                body += rest[nl + 2:nl + 2 + size]
                rest = rest[nl + 2 + size + 2:]
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            if len(rest) < n:
                break
            body, rest = rest[:n], rest[n:]
        out.append((int(m.group(1)), headers, body))
        data = rest
    return out, data


def exchange(port, data, deadline=READ_DEADLINE_S):
    """Sends DATA on a new connection and reads until the server closes it or
    the deadline passes: (bytes read, whether it closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=deadline) as s:
        s.sendall(data)
        return read_to_close(s, deadline)


def read_to_close(s, deadline):
    got, end = b"", time.monotonic() + deadline
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


def read_answers(s, count, deadline=READ_DEADLINE_S):
    """Reads from S (kept open) until COUNT whole answers are in, the server
    closes or the deadline passes: ([(status, headers, body)], left over)."""
    got, end = b"", time.monotonic() + deadline
    while time.monotonic() < end:
        answers, rest = parse_answers(got)
        if len(answers) >= count:
            return answers, rest
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
    return parse_answers(got)


def read_answer(s):
    """One whole answer from S (kept open): (status, body) or None."""
    answers, _ = read_answers(s, 1)
    return (answers[0][0], answers[0][2]) if answers else None


def job_count():
    st, body, _ = call("GET", "/v1/health")
    return body["jobs"] if st == 200 else None


class Target:
    """One of the two servers: its port, a request to frame, and whether a
    stored job can be counted."""

    def __init__(self, name, port, method, path, auth, counts):
        self.name, self.port, self.method, self.path = name, port, method, path
        self.auth, self.counts = auth, counts

    def head(self, fields, version="HTTP/1.1", line=None):
        lines = [line or f"{self.method} {self.path} {version}", "Host: t"]
        if self.auth:
            lines.append(f"Authorization: Bearer {self.auth}")
        return ("\r\n".join(lines + list(fields)) + "\r\n\r\n").encode()

    def refused(self, label, data, status, code=None):
        """DATA gets exactly one answer STATUS, the connection closes, and no
        job is stored."""
        before = job_count() if self.counts else None
        got, closed = exchange(self.port, data)
        answers, rest = parse_answers(got)
        code_ok = True
        if code and len(answers) == 1:
            try:
                code_ok = json.loads(answers[0][2])["error"]["code"] == code
            except (ValueError, KeyError, TypeError):
                code_ok = False
        after = job_count() if self.counts else None
        ok(len(answers) == 1 and not rest and answers[0][0] == status and closed and code_ok
           and before == after,
           f"{self.name}: {label}: one answer {status}, the connection closed"
           + (", no job stored" if self.counts else ""),
           f"answers {[(a[0], a[2][:120]) for a in answers]}, left over {rest[:300]!r}, "
           f"closed {closed}, jobs {before} -> {after}")


def cases(t, body, body_status):
    """The framing cases against target T; BODY is a request body that T's
    handler answers with BODY_STATUS when it is framed soundly."""
    n = len(body)
    chunked = (b"%x\r\n" % n + body + b"\r\n" if n else b"") + b"0\r\n\r\n"
    t.refused("Content-Length abc", t.head(["Content-Length: abc"]) + body, 400,
              "invalid_framing")
    t.refused("Content-Length -1", t.head(["Content-Length: -1"]) + body, 400)
    t.refused("Content-Length +5", t.head([f"Content-Length: +{n}"]) + body, 400)
    t.refused("Content-Length with whitespace after the digits",
              t.head([f"Content-Length: {n} "]) + body, 400)
    t.refused("an empty Content-Length", t.head(["Content-Length:"]) + body, 400)
    t.refused("Content-Length 2^70", t.head([f"Content-Length: {2 ** 70}"]) + body, 413)
    t.refused("two different Content-Lengths",
              t.head(["Content-Length: 5", f"Content-Length: {n}"]) + body, 400)
    t.refused("two equal Content-Lengths",
              t.head([f"Content-Length: {n}", f"Content-Length: {n}"]) + body, 400)
    t.refused("Content-Length beside Transfer-Encoding: chunked",
              t.head(["Content-Length: 3", "Transfer-Encoding: chunked"]) + chunked, 400)
    t.refused("Transfer-Encoding: gzip", t.head(["Transfer-Encoding: gzip"]) + body, 400)
    t.refused("Transfer-Encoding: gzip, chunked (a coding we do not decode)",
              t.head(["Transfer-Encoding: gzip, chunked"]) + chunked, 501)
    t.refused("Transfer-Encoding in HTTP/1.0",
              t.head(["Transfer-Encoding: chunked"], "HTTP/1.0") + chunked, 400)
    t.refused("a chunk size that is not hex",
              t.head(["Transfer-Encoding: chunked"]) + b"zz\r\n" + body + b"\r\n0\r\n\r\n",
              400)
    t.refused("a chunk size over 64 bits",
              t.head(["Transfer-Encoding: chunked"]) + b"1" * 20 + b"\r\n" + body
              + b"\r\n0\r\n\r\n", 413)
    t.refused("whitespace before the colon",
              t.head([f"Content-Length : {n}"]) + body, 400)
    t.refused("a folded header line (obs-fold)",
              t.head([f"Content-Length: {n}", " 7"]) + body, 400)
    t.refused("a head of 70,000 bytes", t.head(["X-Big: " + "a" * 70000]), 431)
    t.refused("a request line without a version",
              f"{t.method} {t.path}\r\nHost: t\r\n\r\n".encode(), 400)
    # request lines libmicrohttpd reads leniently: their fields are checked all the same
    t.refused("two spaces after the method, Content-Length abc",
              t.head(["Content-Length: abc"], line=f"{t.method}  {t.path} HTTP/1.1") + body,
              400)
    t.refused("HTTP/1.2, Content-Length abc", t.head(["Content-Length: abc"], "HTTP/1.2") + body,
              400)
    # what libmicrohttpd would not decode as chunked (it would wait for the close)
    t.refused("Transfer-Encoding: chunked with a space after it",
              t.head(["Transfer-Encoding: chunked "]) + chunked, 400)
    t.refused("Transfer-Encoding: , chunked", t.head(["Transfer-Encoding: , chunked"]) + chunked,
              400)
    t.refused("two Transfer-Encoding fields",
              t.head(["Transfer-Encoding:", "Transfer-Encoding: chunked"]) + chunked, 400)
    t.refused("a sound request pipelined after a bad one (not processed)",
              t.head(["Content-Length: abc"]) + t.head([f"Content-Length: {n}"]) + body, 400)

    # sound framing, for contrast: the same body is taken
    before = job_count() if t.counts else None
    got, closed = exchange(t.port, t.head([f"Content-Length:   {n}"], "HTTP/1.0") + body)
    answers, rest = parse_answers(got)
    after = job_count() if t.counts else None
    ok(len(answers) == 1 and not rest and answers[0][0] == body_status and closed
       and (not t.counts or after == before + 1),
       f"{t.name}: HTTP/1.0 with a Content-Length body (whitespace before the digits): "
       f"answered {body_status} once, then closed" + (", one job stored" if t.counts else ""),
       f"{[(a[0], a[2][:200]) for a in answers]} {rest[:200]!r} closed {closed} "
       f"jobs {before} -> {after}")

    with socket.create_connection(("127.0.0.1", t.port), timeout=READ_DEADLINE_S) as s:
        s.sendall(t.head([f"Content-Length: {n}"]) + body)
        first = read_answer(s)
        s.sendall(t.head(["Transfer-Encoding: chunked"]) + chunked)
        second = read_answer(s)
    ok(first and first[0] == body_status and second and second[0] == body_status,
       f"{t.name}: a keep-alive pair (Content-Length, then chunked): both answered "
       f"{body_status}", f"{first} {second}")

    with socket.create_connection(("127.0.0.1", t.port), timeout=READ_DEADLINE_S) as s:
        s.sendall(t.head([f"Content-Length: {n}"]) + body + b"\r\n")
        first = read_answer(s)
    ok(first and first[0] == body_status,
       f"{t.name}: a stray CRLF after a sound body (RFC 9112 2.2): answered {body_status} "
       f"at once", f"{first}")

    with socket.create_connection(("127.0.0.1", t.port), timeout=READ_DEADLINE_S) as s:
        s.sendall(t.head([f"Content-Length: {n}"]) + body + t.head([f"Content-Length: {n}"])
                  + body)
        answers, rest = read_answers(s, 2)
    ok([a[0] for a in answers] == [body_status, body_status] and not rest,
       f"{t.name}: two sound requests pipelined: both answered",
       f"{[(a[0], a[2][:200]) for a in answers]} {rest[:200]!r}")

    # the second line: a later request on a kept-alive connection is read by
    # libmicrohttpd alone and checked in the access handler
    before = job_count() if t.counts else None
    with socket.create_connection(("127.0.0.1", t.port), timeout=READ_DEADLINE_S) as s:
        s.sendall(t.head([f"Content-Length: {n}"]) + body)
        first = read_answer(s)
        s.sendall(t.head([f"Content-Length: {n}", "Transfer-Encoding: chunked"]) + chunked)
        got, closed = read_to_close(s, READ_DEADLINE_S)
    answers, rest = parse_answers(got)
    after = job_count() if t.counts else None
    ok(first and first[0] == body_status and len(answers) == 1 and answers[0][0] == 400
       and not rest and closed and (not t.counts or after == before + 1),
       f"{t.name}: Content-Length beside chunked on a kept-alive connection: one 400, closed"
       + (", only the first job stored" if t.counts else ""),
       f"{first} {[(a[0], a[2][:200]) for a in answers]} {rest[:200]!r} closed {closed} "
       f"jobs {before} -> {after}")


def setup():
    global ADMIN, AGENT
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    for path, body in (("/v1/pools/main", {}),
                       ("/v1/teams/research",
                        {"quotas": [{"pool": "main", "guaranteed": 8}]})):
        st, got, raw = call("PUT", path, body, token=ADMIN)
        if st not in (200, 201):
            raise RuntimeError(f"PUT {path}: {st} {raw[:300]!r}")
    AGENT = FakeAgent(BIN, SRV, TMP, FAKENVML, "fr1", [fake_gpu_uuid(21, 0)])
    AGENT.write_gpu_list([{"uuid": AGENT.uuids[0], "utilization": 0}])
    AGENT.start()

    def log_port():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = (body or {}).get("nodes") or [] if st == 200 else []
        return next((n.get("log_port") for n in nodes if n.get("name") == "fr1"
                     and isinstance(n.get("log_port"), int) and n["log_port"] > 0), None)

    port = wait_until(log_port, timeout=30, step=0.1)
    if not port:
        raise RuntimeError(f"the agent did not register: {AGENT.tail()}")
    return port


def main():
    print("TAP version 13")
    log_port = setup()
    ctl = Target("controller", SRV.port, "POST", "/v1/jobs", ADMIN, True)
    cases(ctl, JOB, 201)
    diag(f"the agent's log server on port {log_port}")
    with open(os.path.join(SRV.data, "logs.key"), "rb") as f:
        token = hmac.new(f.read(), b"fr1", hashlib.sha256).hexdigest()
    logs = Target("log server", log_port, "GET", "/v1/attempts/1/1/logs", token, False)
    cases(logs, b"", 404)
    Target("log server without a token", log_port, "GET", "/v1/attempts/1/1/logs", None,
           False).refused("Content-Length abc", b"GET /v1/attempts/1/1/logs HTTP/1.1\r\n"
                          b"Host: t\r\nContent-Length: abc\r\n\r\n", 400, "invalid_framing")
    ok(AGENT.proc.poll() is None and SRV.proc.poll() is None,
       "the controller and the agent still run", AGENT.tail())


def on_exit():
    if AGENT:
        AGENT.stop()
    remove_tmp(TMP)


if __name__ == "__main__":
    run(main, SRV, on_exit=on_exit)

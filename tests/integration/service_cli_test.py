#!/usr/bin/env python3
"""service_cli_test.py GPUORCH - `gpuorch service ...` over HTTP against a
stand-in controller in this file (the routes of /v1/services as the serving
contract gives them, GET /v1/jobs/ID and GET /v1/jobs/ID/logs). Prints TAP.

What it checks: apply -f of a YAML list PUTs each service whole (the token
sent, the server-set keys of `show --json` output left out), prints
"created" then "configured", and a refused service gets one line with the
file's line and the API's message, exit 1, the others still applied; a
JSON file applies; list's table and --json; show's replica table and last
decision, --json's replicas; a missing service exits 1 with the API's
message; logs reads the first ready replica's job, --replica N another's,
--stderr and -f reach the logs API; delete sends DELETE; an unreachable
server exits 1; no token exits 2.

The stand-in runs in a thread of this process; the CLI runs as child
processes with a deadline."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import DEADLINE_S, free_port, ok  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TOKEN = "tok-service-cli"
STORE = {}
SEEN = []  # (method, path, body) of every request


def replicas_of(name):
    return [{"replica": 1, "job": 41, "attempt": 1, "generation": 1, "state": "starting",
             "node": None, "gpus": [], "inflight": 0, "reason": "team 'ml' at its quota"},
            {"replica": 2, "job": 42, "attempt": 1, "generation": 1, "state": "ready",
             "node": "n1", "gpus": ["GPU-00000000-aaaa-bbbb-cccc-000000000001"], "inflight": 3,
             "reason": None}]


class Controller(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, code, body=None, ctype="application/json"):
        data = b"" if body is None else body if isinstance(body, bytes) else \
            json.dumps(body).encode()
        self.send_response(code)
        if code != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if code != 204:
            self.wfile.write(data)

    def error(self, code, kind, message):
        self.answer(code, {"error": {"code": kind, "message": message}})

    def handle_one(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        SEEN.append((method, self.path, body))
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            return self.error(401, "unauthorized", "a token is needed")
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split("/")
        if method == "GET" and url.path == "/v1/services":
            return self.answer(200, {"services": [STORE[k] for k in sorted(STORE)]})
        if url.path.startswith("/v1/jobs/") and url.path.endswith("/logs"):
            q = urllib.parse.parse_qs(url.query)
            return self.answer(200, f"log of job {parts[3]} {q['stream'][0]}"
                               f"{' follow' if 'follow' in q else ''}\n".encode(), "text/plain")
        if method == "GET" and len(parts) == 4 and parts[2] == "jobs":  # logs -f looks first
            return self.answer(200, {"id": int(parts[3]), "state": "RUNNING",
                                     "attempts": [{"attempt": 1}]})
        if len(parts) != 4 or parts[2] != "services":
            return self.error(404, "not_found", "no route")
        name = urllib.parse.unquote(parts[3])
        if method == "PUT":
            if body.get("min", 0) > body.get("max", 0):
                return self.error(400, "invalid_field",
                                  f"field 'min': {body['min']} is more than 'max' {body['max']}")
            if any(k in body for k in ("status", "generation", "user")):
                return self.error(400, "invalid_field", "a server-set field was sent")
            new = name not in STORE
            STORE[name] = dict(body, generation=1, user="ann", status={
                "desired": 2, "ready": 1, "replicas": replicas_of(name),
                "decision": {"at_ms": 0, "from": 1, "to": 2, "panic": True,
                             "reason": "1 -> 2: concurrency 3.8 over target 2 for 6 s (panic)"},
                "observed": {"concurrency": 3.8, "rps": 5.0, "metric": None, "queued": 0},
                "backoff": None, "cost": {"gpu_hours": 0.5, "cost": 1.25}})
            return self.answer(201 if new else 200, STORE[name])
        if name not in STORE:
            return self.error(404, "not_found", f"no service '{name}'")
        if method == "GET":
            return self.answer(200, STORE[name])
        if method == "DELETE":
            del STORE[name]
            return self.answer(204)
        return self.error(405, "method_not_allowed", method)

    def do_GET(self):
        self.handle_one("GET")

    def do_PUT(self):
        self.handle_one("PUT")

    def do_DELETE(self):
        self.handle_one("DELETE")


class StandIn:
    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Controller)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def cleanup(self):
        self.httpd.shutdown()


SRV = StandIn()
TMP = tempfile.mkdtemp(prefix="gpuorch-service-cli-test-")


def cli(*args, token=TOKEN, server=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env["GPUORCH_CONFIG"] = os.path.join(TMP, "no-config")
    open(env["GPUORCH_CONFIG"], "w").close()
    env["GPUORCH_SERVER"] = server or SRV.url
    if token:
        env["GPUORCH_TOKEN"] = token
    p = subprocess.run([BIN, "service", *args], capture_output=True, text=True, env=env,
                       timeout=DEADLINE_S)
    return p.returncode, p.stdout, p.stderr


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


SPECS = """services:
  - name: chat
    team: ml
    model: example-8b
    command: [python3, server.py]
    min: 0
    max: 4
    autoscaling:
      target: 2
  - name: bad
    team: ml
    command: [python3, server.py]
    min: 3
    max: 2
  - name: rag
    team: ml
    command: [python3, server.py]
    max: 1
"""


def check_apply():
    path = write("services.yaml", SPECS)
    rc, out, err = cli("apply", "-f", path)
    ok(rc == 1 and out == "service/chat created\nservice/rag created\n",
       "apply -f: each good service created, in the file's order", f"{rc} {out!r} {err!r}")
    ok(err == f"gpuorch service: {path}:10: service/bad: 400 invalid_field: field 'min': 3 is "
       "more than 'max' 2\n", "a refused service: one line with its line and the API's message",
       repr(err))
    puts = [b for m, p, b in SEEN if m == "PUT" and p == "/v1/services/chat"]
    ok(puts and puts[0] == {"name": "chat", "team": "ml", "model": "example-8b",
                            "command": ["python3", "server.py"], "min": 0, "max": 4,
                            "autoscaling": {"target": 2}},
       "the PUT body is the file's service, whole", f"{puts}")
    rc, out, err = cli("apply", "-f", write("chat.yaml", SPECS.split("  - name: bad")[0]))
    ok(rc == 0 and out == "service/chat unchanged\n",
       "the same service again says 'unchanged'", f"{rc} {out!r} {err!r}")
    rc, out, err = cli("apply", "-f", write("chat5.yaml", SPECS.split("  - name: bad")[0]
                                             .replace("max: 4", "max: 5")))
    ok(rc == 0 and out == "service/chat configured\n", "a changed service says 'configured'",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("apply", "-f", write("chat.yaml", SPECS.split("  - name: bad")[0]))
    ok(rc == 0 and out == "service/chat configured\n", "and changed back, 'configured' again",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("show", "chat", "--json")
    rc2, out2, err2 = cli("apply", "-f", write("shown.json", out))
    ok(rc == 0 and rc2 == 0 and out2 == "service/chat unchanged\n",
       "show --json output applies again (server-set keys left out)", f"{rc2} {out2!r} {err2!r}")
    rc, out, err = cli("apply", "--json", "-f", write("one.json", '{"name": "solo", "max": 1}'))
    ok(rc == 0 and json.loads(out)[0]["generation"] == 1,
       "apply --json of a JSON file prints the stored services", f"{rc} {out!r} {err!r}")


def check_reads():
    rc, out, err = cli("list")
    lines = out.splitlines()
    ok(rc == 0 and lines[0].split() == ["NAME", "TEAM", "MODEL", "READY/DESIRED", "MIN-MAX",
                                        "METRIC", "TARGET"] and
       lines[1].split() == ["chat", "ml", "example-8b", "1/2", "0-4", "concurrency", "2"],
       "list: one row per service with ready/desired and the target", out)
    rc, out, err = cli("list", "--json")
    ok(rc == 0 and [s["name"] for s in json.loads(out)["services"]] == ["chat", "rag", "solo"],
       "list --json: the API's services", out)
    rc, out, err = cli("show", "chat")
    ok(rc == 0 and "REPLICA  JOB  NODE  GPUS          STATE     INFLIGHT  REASON" in out and
       "team 'ml' at its quota" in out and
       "Last decision: 1 -> 2: concurrency 3.8 over target 2 for 6 s (panic) (" in out and
       "Cost:          0.50 GPU-hours, 1.25" in out,
       "show: the replicas, why one waits, the last decision, the cost", out)
    rc, out, err = cli("show", "chat", "--json")
    states = [r["state"] for r in json.loads(out)["status"]["replicas"]] if rc == 0 else []
    ok(states == ["starting", "ready"], "show --json lists the replicas' states", out)
    rc, out, err = cli("show", "nope")
    ok(rc == 1 and err == "gpuorch service: 404 not_found: no service 'nope'\n",
       "a missing service exits 1 with the API's message", f"{rc} {err!r}")


def check_logs_and_delete():
    rc, out, err = cli("logs", "chat")
    ok(rc == 0 and out == "log of job 42 stdout\n", "logs: the first ready replica's job",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("logs", "chat", "--replica", "1", "--stderr", "-f")
    ok(rc == 0 and out == "log of job 41 stderr follow\n",
       "logs --replica 1 --stderr -f: that replica's job, stderr, followed",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("logs", "chat", "--replica", "9")
    ok(rc == 1 and "no replica 9" in err, "logs of a replica that is not there exits 1",
       f"{rc} {err!r}")
    rc, out, err = cli("delete", "rag")
    ok(rc == 0 and out == "service/rag deleted\n" and "rag" not in STORE and
       ("DELETE", "/v1/services/rag", None) in SEEN, "delete sends DELETE /v1/services/NAME",
       f"{rc} {out!r} {err!r}")
    rc, out, err = cli("delete", "rag", "--json")
    ok(rc == 1 and "404" in err, "deleting it again exits 1", f"{rc} {err!r}")


def check_failures():
    rc, out, err = cli("list", server=f"http://127.0.0.1:{free_port()}")
    ok(rc == 1 and err.startswith("gpuorch service: "), "an unreachable server exits 1",
       f"{rc} {err!r}")
    rc, out, err = cli("list", token=None)
    ok(rc == 2, "no token exits 2", f"{rc} {err!r}")
    rc, out, err = cli("apply", "-f", os.path.join(TMP, "missing.yaml"))
    ok(rc == 1 and "missing.yaml" in err, "an unreadable file exits 1 naming it", f"{rc} {err!r}")
    rc, out, err = cli("apply", "-f", write("dup.yaml", "- name: a\n- name: a\n"))
    ok(rc == 1 and "dup.yaml:2: [1]: service 'a' is given twice" in err and
       not any(p == "/v1/services/a" for _, p, _ in SEEN),
       "a file with a name twice is refused before anything is sent", f"{rc} {err!r}")
    rc, out, err = cli("show", "chat", "--bogus")
    ok(rc == 2 and "--bogus" in err, "a bad flag exits 2 naming it", f"{rc} {err!r}")


def main():
    check_apply()
    check_reads()
    check_logs_and_delete()
    check_failures()


def cleanup():
    import shutil
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    harness.run(main, SRV, cleanup)

#!/usr/bin/env python3
"""router_standin.py PORTFILE SERVICE=HOST:PORT[,HOST:PORT...] ...

A stand-in controller for `gpuorch router` in the benchmarks (bench/router.sh):
it answers GET /v1/router/routes with a fixed route table (the contract's
proto_routes JSON: each SERVICE, model = its name, with its endpoints ready)
and takes POST /v1/router/report with 204, counting the reports. A poll whose
since= is the current rev is held for its wait_ms (capped at 60 s), as the
controller's long-poll is, then answered with the same table. Any bearer token
is accepted. Listens on 127.0.0.1, an ephemeral port written to PORTFILE.
GET /standin/reports gives {"reports": N, "last": {...}} for a script to check.
"""
import http.server
import os
import json
import sys
import threading
import time
import urllib.parse

state = {"reports": 0, "last": None}


def table(specs):
    services = []
    for spec in specs:
        name, _, eps = spec.partition("=")
        endpoints = []
        for i, ep in enumerate(e for e in eps.split(",") if e):
            host, _, port = ep.rpartition(":")
            endpoints.append({"replica": i + 1, "job": i + 1, "attempt": 1, "addr": host,
                              "port": int(port), "state": "ready"})
        services.append({"name": name, "model": name, "hosts": [], "key_hashes": [],
                         "concurrency_limit": 0, "queue_limit": 1000,
                         "queue_timeout_ms": 60000, "endpoints": endpoints})
    return {"rev": 1, "services": services}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    routes = {}

    def log_message(self, *args):
        pass

    def reply(self, code, obj=None):
        body = json.dumps(obj).encode() if obj is not None else b""
        self.send_response(code)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path == "/v1/router/routes":
            since = int(q.get("since", ["-1"])[0])
            if since == self.routes["rev"]:
                time.sleep(min(int(q.get("wait_ms", ["30000"])[0]), 60000) / 1000)
            self.reply(200, self.routes)
        elif u.path == "/standin/reports":
            self.reply(200, state)
        else:
            self.reply(404, {"error": {"code": "not_found", "message": u.path}})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/router/report":
            self.reply(404, {"error": {"code": "not_found", "message": self.path}})
            return
        try:
            state["last"] = json.loads(body)
        except ValueError:
            self.reply(400, {"error": {"code": "bad_json", "message": "not JSON"}})
            return
        state["reports"] += 1
        self.reply(204)


def main():
    Handler.routes = table(sys.argv[2:])
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))

    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()

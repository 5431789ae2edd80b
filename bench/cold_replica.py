#!/usr/bin/env python3
"""cold_replica.py STAMP_DIR [LOAD_S] - the replica of bench/serve_cold.sh.

The smallest model server that still tells its own side of a cold start: its
command line first writes the exec time (`date +%s.%N` in the shell that execs
it, STAMP_DIR/$GPUORCH_SERVICE.exec); this process then "loads" for LOAD_S
seconds (default 0), listens on $PORT, and writes the moment it can answer
(STAMP_DIR/$GPUORCH_SERVICE.ready, time.time() after listen). Every path
answers 200 "ok" (so /health is ready at once); the first answered request
other than the probe is stamped too (.first).
"""
import http.server
import os
import sys
import time

stamp_dir, load_s = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
name = os.environ.get("GPUORCH_SERVICE", "replica")
probe = "/health"


def stamp(kind):
    path = os.path.join(stamp_dir, f"{name}.{kind}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{time.time():.6f}\n")
    os.rename(path + ".tmp", path)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    first = False

    def log_message(self, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
        if not self.path.startswith(probe) and not Handler.first:
            Handler.first = True
            stamp("first")

    do_GET = do_POST = answer


time.sleep(load_s)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
srv.daemon_threads = True
stamp("ready")
srv.serve_forever()

#!/usr/bin/env python3
"""with_pg.py PROGRAM [ARGS...] - runs PROGRAM against a PostgreSQL of its own.

Starts a throwaway PostgreSQL (tests/tools/pgserver.py) in a temporary
directory, runs PROGRAM with GPUORCH_TEST_PG_URL set to its URL (and, for the
tests that stop and restart the server, GPUORCH_TEST_PG_DIR, GPUORCH_TEST_PG_PORT
and GPUORCH_TEST_PGSERVER: the directory, the port and pgserver.py itself),
passes its output through, stops the server by PID and exits with PROGRAM's
status. How tests/meson.build runs the store's tests on PostgreSQL."""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pgserver  # noqa: E402


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="gpuorch-pg.")
    pg = pgserver.PgServer(os.path.join(tmp, "pg"))
    try:
        try:
            url = pg.start()
        except RuntimeError as e:
            print(f"Bail out! {e}".replace("\n", " "))
            return 1
        env = dict(os.environ, GPUORCH_TEST_PG_URL=url, GPUORCH_TEST_PG_DIR=pg.dir,
                   GPUORCH_TEST_PG_PORT=str(pg.port),
                   GPUORCH_TEST_PGSERVER=os.path.join(HERE, "pgserver.py"))
        sys.stdout.flush()
        return subprocess.call(argv, env=env)
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

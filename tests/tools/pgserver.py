#!/usr/bin/env python3
"""A throwaway PostgreSQL for tests and benchmarks, from Debian's packages.

    pg = PgServer(tmpdir, host="127.0.0.1", port=0)
    url = pg.start()        # postgres://postgres@127.0.0.1:PORT/gpuorch
    ...
    pg.stop()               # SIGINT (fast shutdown) to the postmaster's PID, then wait

or, from a shell script (the server outlives the command; stop it by its directory):

    url=$(python3 tests/tools/pgserver.py start --dir D [--host H] [--port P])
    python3 tests/tools/pgserver.py stop --dir D

start runs initdb into DIR/data (trust authentication: a test cluster on a
loopback or test-made address, nothing else reaches it), starts the postmaster
listening on HOST:PORT (port 0: a free one) with its unix socket in DIR/sock,
waits until it accepts connections (a deadline, no fixed sleeps), creates the
database `gpuorch` and returns its URL. fsync stays on, as in production: the
durability figures measured on it are real. As root it runs initdb and the
postmaster as the `postgres` OS user (the postmaster refuses root), owning DIR
(and adds search permission, o+x, to DIR's parents that lack it, such as a
0700 directory from mkdtemp, so that user can reach DIR).
With a HOST other than loopback (a host in a network namespace: run the command
inside it), clients on the host's own subnets are trusted too (pg_hba `samenet`).
"""

import argparse
import glob
import os
import pwd
import signal
import socket
import subprocess
import sys
import time

READY_S = 60  # initdb is not timed; the postmaster must accept within this
STOP_S = 60  # how long a fast shutdown may take before SIGQUIT
DBNAME = "gpuorch"
SUPERUSER = "postgres"


def bindir():
    """Debian's PostgreSQL binaries (the newest major version), or $GPUORCH_PG_BIN."""
    env = os.environ.get("GPUORCH_PG_BIN")
    if env:
        return env
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not found:
        raise RuntimeError("PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/postgres "
                           "(the Debian package postgresql; scripts/setup.sh installs it)")
    return os.path.dirname(found[-1])


def free_port(host):
    """A TCP port on HOST that nobody listens on."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _is_loopback(host):
    return host in ("localhost", "::1") or host.startswith("127.")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class PgServer:
    """One PostgreSQL cluster in DIR (created if missing)."""

    def __init__(self, tmpdir, host="127.0.0.1", port=0):
        self.dir = os.path.abspath(tmpdir)
        self.host = host
        self.port = port
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "postgres.log")
        self.proc = None
        self.pid = None
        self.url = None
        self.bin = bindir()
        self._as_postgres = os.geteuid() == 0
        self._popen_user = {}
        if self._as_postgres:
            pw = pwd.getpwnam(SUPERUSER)
            self._popen_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    # -- helpers ------------------------------------------------------------------------

    def _prepare_dir(self):
        os.makedirs(self.sock, exist_ok=True)
        # The socket path (DIR/sock/.s.PGSQL.PORT) must fit sun_path (107 bytes).
        if len(self.sock) + len("/.s.PGSQL.65535") > 107:
            raise RuntimeError(f"pgserver: directory {self.dir} is too long for a unix socket path "
                               "(at most about 90 characters)")
        if not self._as_postgres:
            return
        pw = pwd.getpwnam(SUPERUSER)
        for root, dirs, files in os.walk(self.dir):
            os.chown(root, pw.pw_uid, pw.pw_gid)
            for name in dirs + files:
                os.lchown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)
        # The postgres user must be able to reach DIR: temporary directories are 0700.
        d = os.path.dirname(self.dir)
        while d != "/":
            st = os.stat(d)
            if not st.st_mode & 0o001:
                os.chmod(d, st.st_mode | 0o001)
            d = os.path.dirname(d)

    def _run(self, argv):
        """Run a PostgreSQL tool to completion (as postgres when root); raise with its output."""
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=self.dir, **self._popen_user)
        if r.returncode != 0:
            raise RuntimeError(f"pgserver: {' '.join(argv)} failed ({r.returncode}):\n{r.stdout}")
        return r.stdout

    def _log_tail(self):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def _read_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    # -- start / stop -------------------------------------------------------------------

    def start(self, detach=False):
        """initdb (once), start the postmaster, wait, create the database; returns the URL.
        DETACH: the postmaster gets a session of its own and outlives this process."""
        self._prepare_dir()
        if not os.path.exists(os.path.join(self.data, "PG_VERSION")):
            self._run([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", SUPERUSER,
                       "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"])
            if not _is_loopback(self.host):
                with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                    f.write("# pgserver.py: clients on this test host's own subnets\n"
                            "host all all samenet trust\n")
        if self.port == 0:
            self.port = free_port(self.host)
        argv = [os.path.join(self.bin, "postgres"), "-D", self.data,
                "-c", f"listen_addresses={self.host}", "-p", str(self.port),
                "-c", f"unix_socket_directories={self.sock}",
                "-c", "fsync=on", "-c", "synchronous_commit=on",
                "-c", "max_connections=200",
                # A client cut off (a partitioned controller) loses its session,
                # and the locks it held, within seconds, not the kernel's 2 hours.
                "-c", "tcp_keepalives_idle=2", "-c", "tcp_keepalives_interval=1",
                "-c", "tcp_keepalives_count=2", "-c", "tcp_user_timeout=3000",
                "-c", "client_connection_check_interval=1000"]
        logf = open(self.log, "a")
        if self._as_postgres:
            os.chown(self.log, self._popen_user["user"], self._popen_user["group"])
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=subprocess.STDOUT, cwd=self.dir,
                                         start_new_session=detach, **self._popen_user)
        finally:
            logf.close()
        self.pid = self.proc.pid
        self._wait_ready()
        self._create_db()
        self.url = f"postgres://{SUPERUSER}@{self._url_host()}:{self.port}/{DBNAME}"
        with open(os.path.join(self.dir, "url"), "w") as f:
            f.write(self.url + "\n")
        return self.url

    def _url_host(self):
        return f"[{self.host}]" if ":" in self.host else self.host

    def _wait_ready(self):
        isready = os.path.join(self.bin, "pg_isready")
        deadline = time.monotonic() + READY_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgserver: postgres exited ({self.proc.returncode}) before "
                                   f"accepting connections; its log:\n{self._log_tail()}")
            r = subprocess.run([isready, "-q", "-h", self.host, "-p", str(self.port),
                                "-U", SUPERUSER, "-d", "postgres", "-t", "1"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgserver: postgres did not accept connections on "
                                   f"{self.host}:{self.port} within {READY_S} s; its log:\n"
                                   f"{self._log_tail()}")
            time.sleep(0.05)

    def _create_db(self):
        psql = os.path.join(self.bin, "psql")
        exists = self._run([psql, "-h", self.sock, "-p", str(self.port), "-U", SUPERUSER,
                            "-d", "postgres", "-tAc",
                            f"SELECT 1 FROM pg_database WHERE datname = '{DBNAME}'"])
        if exists.strip() != "1":
            self._run([psql, "-h", self.sock, "-p", str(self.port), "-U", SUPERUSER,
                       "-d", "postgres", "-qc", f"CREATE DATABASE {DBNAME}"])

    def stop(self, sig=signal.SIGINT):
        """Stop the postmaster by its PID (SIGINT: fast shutdown; SIGTERM: smart) and wait.
        The PID is postmaster.pid's while it exists: the server may have been
        restarted by another process (the CLI) since this object started it."""
        if self.proc is not None and self.proc.poll() is not None:
            self.proc = None
        pid = self._read_pid() or self.pid
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_S
        escalated = False
        while _alive(pid):
            if self.proc is not None and self.proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                # Not down in time: immediate shutdown (SIGQUIT), then SIGKILL.
                try:
                    os.kill(pid, signal.SIGKILL if escalated else signal.SIGQUIT)
                except ProcessLookupError:
                    break
                escalated = True
                deadline = time.monotonic() + 10
            time.sleep(0.05)
        if self.proc is not None:
            self.proc.wait()
        self.proc = None
        self.pid = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def main(argv):
    cmd = "start"
    if argv and argv[0] in ("start", "stop"):
        cmd, argv = argv[0], argv[1:]
    ap = argparse.ArgumentParser(prog="pgserver.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the cluster's directory (created if missing)")
    ap.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    ap.add_argument("--port", type=int, default=0, help="the TCP port (0: a free one)")
    a = ap.parse_args(argv)
    pg = PgServer(a.dir, host=a.host, port=a.port)
    try:
        if cmd == "start":
            print(pg.start(detach=True))
        else:
            pg.stop()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

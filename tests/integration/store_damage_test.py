#!/usr/bin/env python3
"""store_damage_test.py GPUORCH - a damaged store stops `gpuorch server`,
loudly, and `--recover` starts it anyway without reusing a job id. For each
damage (the WAL's last 64 bytes overwritten, the WAL cut short, one bit
flipped near its end, the WAL's header overwritten, a page of the
checkpointed database file overwritten): the server refuses to start,
naming the damaged file; `--recover` starts, names the job ids whose rows are
gone (exactly the acknowledged jobs that are no longer there), keeps the
damaged files, keeps the admin token; the next job's id is above every id
given before and the leader epoch goes on; a plain restart afterwards is
clean. Then a missing database beside the admin token of an earlier start is
refused too, and --idempotency-ttl expires a key. Prints TAP."""

import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, diag, ok, run, wait_until  # noqa: E402

BIN = sys.argv[1]
SERVERS = []
PAGE = 4096


def start_refused(srv):
    """Starts the server on srv's data and expects exit 1: (rc, stderr)."""
    p = subprocess.run([BIN, "server", "--data", srv.data, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stderr


def submit(srv, token, n, tag):
    ids = []
    for k in range(n):
        job = {"command": ["/bin/true"], "gpus": 1, "team": "t", "name": f"{tag}-{k + 1}",
               "env": {"PAD": f"{tag}-{k + 1}-" + "x" * 400}}
        ids.append(srv.api.expect("POST", "/v1/jobs", job, token=token)["id"])
    return ids


def overwrite(path, off, data):
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)


def damage_last_64(srv):
    wal = os.path.join(srv.data, "gpuorch.db-wal")
    overwrite(wal, os.path.getsize(wal) - 64, b"\xaa" * 64)
    return wal


def damage_cut_short(srv):
    wal = os.path.join(srv.data, "gpuorch.db-wal")
    os.truncate(wal, os.path.getsize(wal) - 3 * PAGE - 1000)
    return wal


def damage_bit_flip(srv):
    wal = os.path.join(srv.data, "gpuorch.db-wal")
    off = os.path.getsize(wal) - 100
    with open(wal, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x10]))
    return wal


def damage_header(srv):
    wal = os.path.join(srv.data, "gpuorch.db-wal")
    overwrite(wal, 0, b"\x13" * 32)
    return wal


def damage_db_page(srv):
    db = os.path.join(srv.data, "gpuorch.db")
    with open(db, "rb") as f:
        data = f.read()
    at = data.find(b"page-20-")
    assert at >= 0, "the victim's row is not in the database file"
    overwrite(db, at // PAGE * PAGE, b"\x55" * PAGE)
    return db


CASES = [
    ("the WAL's last 64 bytes overwritten", damage_last_64, "gpuorch.db-wal", 6),
    ("the WAL cut short", damage_cut_short, "gpuorch.db-wal", 6),
    ("one bit flipped near the WAL's end", damage_bit_flip, "gpuorch.db-wal", 6),
    ("the WAL's header overwritten", damage_header, "gpuorch.db-wal", 6),
    ("a page of the database file overwritten", damage_db_page, "gpuorch.db", 40),
]


def epochs(log):
    """The leader epochs of the starts a server log shows, in order."""
    return [int(e) for e in re.findall(r"listening on \S+ \(epoch (\d+),", log)]


def lost_ids(log):
    """The ids of the --recover line naming the lost jobs (None: no such line)."""
    if "--recover: no job was lost" in log:
        return set()
    m = re.search(r"--recover: lost jobs \(their rows are gone\): ([0-9, -]+)", log)
    if not m:
        return None
    ids = set()
    for part in m.group(1).split(","):
        a, _, b = part.strip().partition("-")
        ids.update(range(int(a), int(b or a) + 1))
    return ids


def one_case(name, damage, file_name, njobs):
    srv = Server(BIN, "gpuorch-store-damage-")
    SERVERS.append(srv)
    srv.start()
    token_path = srv.token_file("admin")
    admin = open(token_path).read().strip()
    srv.api.expect("PUT", "/v1/teams/t", {}, token=admin, want=(200, 201))
    epoch0 = epochs(open(srv.log_path).read())[-1]
    tag = "page" if file_name == "gpuorch.db" else "job"
    ids = submit(srv, admin, njobs, tag)
    if file_name == "gpuorch.db":
        ok(srv.stop() == 0, f"{name}: the server stops cleanly first (a checkpointed database)")
    else:
        srv.kill9()  # the WAL stays, as after a crash
    path = damage(srv)

    rc, err = start_refused(srv)
    ok(rc == 1 and path in err and "damaged" in err and "--recover" in err,
       f"{name}: the server refuses to start, naming {file_name} and --recover", f"{rc} {err}")
    rc2, err2 = start_refused(srv)
    ok(rc2 == 1 and err2 == err, f"{name}: and again: the refusal changed nothing", err2)

    before = open(srv.log_path).read() if os.path.exists(srv.log_path) else ""
    srv.extra_args = ["--recover"]
    srv.start()
    srv.extra_args = []
    log = open(srv.log_path).read()[len(before):]
    lost = lost_ids(log)
    m = re.search(r"--recover: the damaged files are kept in (\S+)", log)
    kept = m.group(1) if m else ""
    ok(kept and os.path.exists(os.path.join(kept, file_name)),
       f"{name}: --recover starts and keeps the damaged {file_name}", log)
    ok(open(token_path).read().strip() == admin
       and srv.api.call("GET", "/v1/whoami", token=admin).status == 200,
       f"{name}: the admin token is unchanged and still works", log)
    srv.api.expect("PUT", "/v1/teams/t", {}, token=admin, want=(200, 201))
    present = {i for i in ids if srv.api.call("GET", f"/v1/jobs/{i}", token=admin).status == 200}
    gone = set(ids) - present
    diag(f"{name}: lost {sorted(gone)} of {len(ids)}")
    ok(lost is not None and lost == gone and (gone or "header" not in name),
       f"{name}: --recover names exactly the lost job ids", f"named {lost}, gone {gone}\n{log}")
    got = epochs(log)
    ok(got and got[-1] > epoch0, f"{name}: the leader epoch goes on above {epoch0}", got)
    new = submit(srv, admin, 1, "after")[0]
    ok(new > max(ids), f"{name}: the next job's id ({new}) is above every id given before",
       max(ids))
    ok(srv.stop() == 0, f"{name}: the recovered server stops cleanly")
    srv.start()
    ok(srv.api.call("GET", f"/v1/jobs/{new}", token=admin).status == 200,
       f"{name}: a plain restart afterwards serves the recovered store")
    srv.stop()


def missing_database():
    srv = Server(BIN, "gpuorch-store-damage-")
    SERVERS.append(srv)
    srv.start()
    srv.stop()
    for suffix in ("", ".mark"):
        os.remove(os.path.join(srv.data, "gpuorch.db" + suffix))
    rc, err = start_refused(srv)
    ok(rc == 1 and "gpuorch.db is missing" in err and "admin.token" in err,
       "a missing database beside an earlier start's admin token is refused", err)
    ok(not os.path.exists(os.path.join(srv.data, "gpuorch.db")), "and no empty store is made")
    admin = open(srv.token_file("admin")).read().strip()
    srv.extra_args = ["--recover"]
    srv.start()
    srv.extra_args = []
    ok("is missing: starting an empty store" in open(srv.log_path).read()
       and srv.api.call("GET", "/v1/whoami", token=admin).status == 200,
       "--recover starts an empty store that says so and keeps the admin token",
       srv.log_tail())
    srv.stop()


def key_expiry():
    """--idempotency-ttl: a retry inside the time answers the first job; once
    the key is older, the same key makes a new job."""
    srv = Server(BIN, "gpuorch-store-damage-", ["--idempotency-ttl", "3"])
    SERVERS.append(srv)
    srv.start()
    admin = open(srv.token_file("admin")).read().strip()
    srv.api.expect("PUT", "/v1/teams/t", {}, token=admin, want=(200, 201))
    job = {"command": ["/bin/true"], "gpus": 1, "team": "t"}
    key = {"Idempotency-Key": "expiring"}
    st1, b1, _ = srv.call("POST", "/v1/jobs", job, token=admin, headers=key)
    st2, b2, _ = srv.call("POST", "/v1/jobs", job, token=admin, headers=key)
    ok(st1 == 201 and st2 == 200 and b1["id"] == b2["id"],
       "inside --idempotency-ttl a retry answers with the first job", f"{b1} {b2}")

    def fresh():
        st, body, _ = srv.call("POST", "/v1/jobs", job, token=admin, headers=key)
        return body["id"] if st == 201 else None
    new = wait_until(fresh, step=0.2)
    ok(new and new != b1["id"], "after it, the same key makes a new job", new)
    srv.stop()


def main():
    print("TAP version 13")
    for name, damage, file_name, njobs in CASES:
        one_case(name, damage, file_name, njobs)
    missing_database()
    key_expiry()


class _All:
    def cleanup(self):
        for s in SERVERS:
            s.cleanup()


if __name__ == "__main__":
    run(main, _All())

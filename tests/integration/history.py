"""A recorded history of a cluster under test, and the checker of its
invariants (tests/integration/partition_test.py).

Sampler, every 100 ms on a thread of its own, records a Sample:
- the leader's view of the work: GET /v1/jobs?state=RUNNING from the
  controller that says it leads (GET /v1/health's role; a controller
  without roles, one alone, leads), each job's current attempt with its
  nodes, GPUs and state;
- the processes actually alive for each job: every process of the machine
  (the agents' jobs share the root PID namespace) whose environment names
  GPUORCH_JOB_ID and GPUORCH_ATTEMPT and one of the test's GPUs in
  CUDA_VISIBLE_DEVICES (the agent sets them, src/agent/launch.c), with its
  host (the network namespace it runs in, /proc/PID/ns/net) and its GPUs.

check(samples) then asserts, over the whole history:
- no job with two attempts' processes alive at once: for each job, the
  samples in which an attempt's processes were seen must not interleave
  with another attempt's (a later attempt first seen while an earlier one
  was still seen, in the same sample or before its last);
- no GPU with two jobs' processes at once (in one sample, or interleaved as
  above), unless every such job holds a fraction of it (GPUORCH_GPU_MILLI);
- no GPU in two jobs' current attempts at once in the leader's view.
check_submits(acked, jobs) asserts that every acknowledged submission is
present exactly once at the end."""

import json
import os
import time

from harness import Periodic, gpu_envs

ENV = ("CUDA_VISIBLE_DEVICES", "GPUORCH_JOB_ID", "GPUORCH_ATTEMPT", "GPUORCH_GPU_MILLI")

SAMPLE_S = 0.1


class Sample:
    """One look at the cluster at monotonic time T: LEADER (its URL, or None
    when no controller said it leads), VIEW {job id: {"attempt", "nodes",
    "gpus", "state"}} of the leader's running jobs (None without a leader),
    PROCS {(job, attempt): {"pids", "hosts", "gpus"}}, FRACTIONS the jobs
    whose processes hold a fraction."""

    __slots__ = ("t", "leader", "epoch", "view", "procs", "fractions")

    def __init__(self, t, leader, epoch, view, procs, fractions=()):
        self.t, self.leader, self.epoch = t, leader, epoch
        self.view, self.procs, self.fractions = view, procs, set(fractions)


def scan_processes(uuids, host_of_inode):
    """PROCS of a Sample: the live processes on the GPUs UUIDS, by (job,
    attempt) (both ints), with their PIDs, hosts (host_of_inode(the inode of
    their network namespace), or "?") and GPUs; and the set of jobs whose
    processes say they hold a fraction."""
    found, fractions = {}, set()
    for pid, env, gpus in gpu_envs(uuids, ENV):
        if "GPUORCH_JOB_ID" not in env:
            continue
        try:
            key = (int(env["GPUORCH_JOB_ID"]), int(env.get("GPUORCH_ATTEMPT", "0")))
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        except (ValueError, OSError):  # not a number, or gone meanwhile
            continue
        if "GPUORCH_GPU_MILLI" in env:
            fractions.add(key[0])
        entry = found.setdefault(key, {"pids": [], "hosts": set(), "gpus": set()})
        entry["pids"].append(pid)
        entry["hosts"].add(host_of_inode(inode) or "?")
        entry["gpus"].update(gpus)
    return found, fractions


class Sampler(Periodic):
    """Samples every SAMPLE_S seconds until stop(). CONTROLLERS: a function
    returning the controllers' base URLs; CALL(base, method, path, query,
    timeout) -> (status, JSON) or raises OSError; UUIDS the test's GPUs
    (add() takes more); HOST_OF_INODE as scan_processes'. The HTTP requests
    go from the namespace of the thread that calls start()."""

    PERIOD = SAMPLE_S

    def __init__(self, controllers, call, uuids, host_of_inode):
        super().__init__(uuids)
        self.controllers, self.call = controllers, call
        self.host_of_inode = host_of_inode
        self.samples = []
        self.errors = []
        self.leader = None

    def stop(self):
        """Stops the thread; returns the samples."""
        self.halt()
        return self.snapshot()

    def snapshot(self):
        with self.lock:
            return list(self.samples)

    def failed(self, error):
        if len(self.errors) < 20:
            self.errors.append(repr(error))

    def find_leader(self):
        """(URL, epoch) of the controller whose health says it leads, else (None, None)."""
        for base in self.controllers():
            try:
                st, body = self.call(base, "GET", "/v1/health", None, 0.5)
            except OSError:
                continue
            if st == 200 and isinstance(body, dict) and body.get("role", "leader") == "leader":
                return base, body.get("epoch")
        return None, None

    def running_view(self, base):
        """The running jobs as BASE sees them, or None when it does not answer 200."""
        view, after = {}, None
        while True:
            query = {"state": "RUNNING", "limit": 1000}
            if after is not None:
                query["after"] = after
            st, body = self.call(base, "GET", "/v1/jobs", query, 2)
            if st != 200 or not isinstance(body, dict):
                return None
            for j in body.get("jobs") or []:
                cur = j.get("current_attempt") or {}
                view[int(j["id"])] = {"attempt": cur.get("attempt"), "nodes": cur.get("nodes"),
                                      "gpus": cur.get("gpus") or [], "state": cur.get("state"),
                                      "fraction": _fraction(j)}
            after = body.get("next_after")
            if after is None:
                return view

    def sample(self):
        s = self.look()
        with self.lock:
            self.samples.append(s)

    def look(self):
        """One Sample, now."""
        t = time.monotonic()
        view, epoch = None, None
        if self.leader:
            try:
                view = self.running_view(self.leader)
            except OSError:
                view = None
        if view is None:
            self.leader, epoch = self.find_leader()
            if self.leader:
                try:
                    view = self.running_view(self.leader)
                except OSError:
                    view = None
        with self.lock:
            uuids = set(self.uuids)
        procs, fractions = scan_processes(uuids, self.host_of_inode)
        return Sample(t, self.leader if view is not None else None, epoch, view, procs, fractions)


def _fraction(job):
    want = (job.get("spec") or {}).get("gpus")
    return isinstance(want, (int, float)) and 0 < want < 1


def _spans(samples, key_of):
    """{key: [first sample index, last sample index, first t, last t]} for every
    KEY key_of(sample) yields."""
    spans = {}
    for i, s in enumerate(samples):
        for key in key_of(s):
            sp = spans.get(key)
            if sp is None:
                spans[key] = [i, i, s.t, s.t]
            else:
                sp[1], sp[3] = i, s.t
    return spans


def double_runs(samples):
    """{job: [(attempt a, attempt b, seconds b was seen while a was still seen)]}
    for every pair of attempts of one job whose sightings interleave."""
    spans = _spans(samples, lambda s: s.procs.keys())
    by_job = {}
    for (job, attempt), sp in spans.items():
        by_job.setdefault(job, []).append((attempt, sp))
    out = {}
    for job, atts in by_job.items():
        atts.sort(key=lambda a: a[1][0])
        for x in range(len(atts)):
            for y in range(x + 1, len(atts)):
                (a, sa), (b, sb) = atts[x], atts[y]
                if sb[0] <= sa[1]:  # b first seen no later than a's last sighting
                    out.setdefault(job, []).append((a, b, round(max(0.0, sa[3] - sb[2]), 2)))
    return out


def check(samples):
    """The invariants over SAMPLES: a list of violations (strings), empty when
    they held."""
    bad = []
    for job, pairs in sorted(double_runs(samples).items()):
        for a, b, secs in pairs:
            first = next(s for s in samples if (job, b) in s.procs)
            bad.append(f"job {job}: attempt {b}'s processes ran while attempt {a}'s still "
                       f"did, for {secs} s (first at once: {_where(first, job)})")
    # One GPU, one job's processes: per (GPU, job, attempt), then interleaving of two jobs.
    def gpu_keys(s):
        for (job, attempt), p in s.procs.items():
            for u in p["gpus"]:
                yield (u, job, attempt)
    spans = _spans(samples, lambda s: list(gpu_keys(s)))
    fractions = set().union(*(s.fractions for s in samples)) if samples else set()
    by_gpu = {}
    for (u, job, attempt), sp in spans.items():
        by_gpu.setdefault(u, []).append((job, attempt, sp))
    for u, holders in sorted(by_gpu.items()):
        holders.sort(key=lambda h: h[2][0])
        for x in range(len(holders)):
            for y in range(x + 1, len(holders)):
                (ja, aa, sa), (jb, ab, sb) = holders[x], holders[y]
                if ja == jb or (ja in fractions and jb in fractions):
                    continue
                if sb[0] <= sa[1]:
                    bad.append(f"GPU {u}: job {jb} (attempt {ab})'s processes ran while job "
                               f"{ja} (attempt {aa})'s still did, for "
                               f"{round(max(0.0, sa[3] - sb[2]), 2)} s")
    # The leader's view: a GPU in two jobs' current attempts.
    seen = set()
    for s in samples:
        if not s.view:
            continue
        holders = {}
        for job, v in s.view.items():
            for g in v["gpus"]:
                holders.setdefault(g.get("uuid") if isinstance(g, dict) else g, []).append(
                    (job, v["attempt"], v["fraction"]))
        for u, hs in holders.items():
            if len(hs) > 1 and not all(f for _, _, f in hs):
                what = (u, tuple(sorted((j, a) for j, a, _ in hs)))
                if what not in seen:
                    seen.add(what)
                    bad.append(f"the leader {s.leader} gives GPU {u} to {list(what[1])} at once")
    return bad


def _where(sample, job):
    return json.dumps({f"{j}.{a}": sorted(p["hosts"]) for (j, a), p in sample.procs.items()
                       if j == job}, sort_keys=True)


def check_submits(acked, jobs):
    """ACKED {key: job id} of every submission acknowledged (201, or 200 for a
    retry of its key); JOBS the jobs at the end, each named by its key. A list
    of violations: an acknowledged id missing or not named by its key, a key
    with two jobs, a job id twice."""
    bad = []
    by_id, by_name = {}, {}
    for j in jobs:
        by_id.setdefault(int(j["id"]), []).append(j)
        name = (j.get("spec") or {}).get("name")
        by_name.setdefault(name, []).append(int(j["id"]))
    for jid, js in by_id.items():
        if len(js) > 1:
            bad.append(f"job {jid} is listed {len(js)} times")
    for key, jid in sorted(acked.items()):
        if jid not in by_id:
            bad.append(f"submission {key}: acknowledged as job {jid}, which is not there")
        ids = by_name.get(key, [])
        if ids != [jid]:
            bad.append(f"submission {key}: acknowledged as job {jid}, jobs named so: {ids}")
    return bad

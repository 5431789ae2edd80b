#!/usr/bin/env python3
"""history_test.py - the checker of partition_test.py (history.py) on
histories made by hand: each invariant's violation is found, and named,
and the histories that keep them pass (a handover, a GPU passed from one
job to the next, two fractions of one GPU, a retried submission). Needs
nothing but Python. Prints TAP."""

import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ok  # noqa: E402
from history import Sample, check, check_submits, double_runs  # noqa: E402

G1, G2 = "GPU-1", "GPU-2"


def procs(*entries):
    """{(job, attempt): {...}} from (job, attempt, host, gpu) tuples."""
    out = {}
    for job, attempt, host, gpu in entries:
        e = out.setdefault((job, attempt), {"pids": [100 + job], "hosts": set(), "gpus": set()})
        e["hosts"].add(host)
        e["gpus"].add(gpu)
    return out


def view(*entries):
    return {job: {"attempt": a, "nodes": [n], "gpus": [g], "state": "RUNNING",
                  "fraction": False} for job, a, n, g in entries}


def history(*steps):
    """Samples 0.1 s apart from (procs, view) pairs."""
    return [Sample(i * 0.1, "http://c1", 1, v, p) for i, (p, v) in enumerate(steps)]


def main():
    print("TAP version 13")
    # A clean handover: attempt 1 on a1 ends, then attempt 2 starts on a2.
    clean = history((procs((1, 1, "a1", G1)), view((1, 1, "a1", G1))),
                    (procs(), view()),
                    (procs((1, 2, "a2", G2)), view((1, 2, "a2", G2))))
    ok(check(clean) == [] and double_runs(clean) == {},
       "a job whose attempt ends before the next starts passes", check(clean))
    # Today's bug: the old copy runs on while the new one has started.
    twice = history((procs((1, 1, "a1", G1)), view((1, 1, "a1", G1))),
                    (procs((1, 1, "a1", G1), (1, 2, "a2", G2)), view((1, 2, "a2", G2))),
                    (procs((1, 1, "a1", G1), (1, 2, "a2", G2)), view((1, 2, "a2", G2))),
                    (procs((1, 2, "a2", G2)), view((1, 2, "a2", G2))))
    bad = check(twice)
    ok(len(bad) == 1 and "job 1: attempt 2" in bad[0] and "attempt 1" in bad[0]
       and "0.1 s" in bad[0] and '"1.1": ["a1"]' in bad[0],
       "two attempts of one job alive at once are found, with how long and where", bad)
    ok(double_runs(twice) == {1: [(1, 2, 0.1)]}, "double_runs names the pair and the overlap",
       double_runs(twice))
    # Interleaved sightings (the old one missed by one sample, seen again later).
    interleaved = history((procs((1, 1, "a1", G1)), None),
                          (procs((1, 2, "a2", G2)), None),
                          (procs((1, 1, "a1", G1)), None))
    ok(any("job 1" in b for b in check(interleaved)),
       "an old attempt seen again after the new one appeared is found", check(interleaved))
    # One GPU, two jobs' processes.
    shared = history((procs((1, 1, "a1", G1), (2, 1, "a1", G1)), None))
    bad = check(shared)
    ok(len(bad) == 1 and f"GPU {G1}" in bad[0] and "job 2" in bad[0] and "job 1" in bad[0],
       "two jobs' processes on one GPU are found", bad)
    passed = history((procs((1, 1, "a1", G1)), None), (procs(), None),
                     (procs((2, 1, "a1", G1)), None))
    ok(check(passed) == [], "a GPU passed from one job to the next passes", check(passed))
    fractions = [Sample(0, None, None, None, procs((1, 1, "a1", G1), (2, 1, "a1", G1)),
                        fractions={1, 2})]
    ok(check(fractions) == [], "two fractional jobs on one GPU pass", check(fractions))
    # The leader's view: one GPU in two jobs' attempts.
    given = history((procs(), view((1, 1, "a1", G1), (2, 1, "a1", G1))))
    bad = check(given)
    ok(len(bad) == 1 and "gives GPU" in bad[0] and "http://c1" in bad[0],
       "a GPU in two jobs' attempts in the leader's view is found", bad)
    # Submissions.
    jobs = [{"id": 1, "spec": {"name": "k1"}}, {"id": 2, "spec": {"name": "k2"}}]
    ok(check_submits({"k1": 1, "k2": 2}, jobs) == [],
       "every acknowledged submission there once passes")
    bad = check_submits({"k1": 1, "k2": 2, "k3": 3}, jobs)
    ok(len(bad) == 2 and all("k3" in b for b in bad), "a missing acknowledged job is found", bad)
    bad = check_submits({"k1": 1}, jobs + [{"id": 3, "spec": {"name": "k1"}}])
    ok(len(bad) == 1 and "[1, 3]" in bad[0], "a key with two jobs is found", bad)
    bad = check_submits({"k1": 1}, jobs + [{"id": 1, "spec": {"name": "k1"}}])
    ok(any("listed 2 times" in b for b in bad), "a job listed twice is found", bad)
    print(f"1..{harness._count}")
    sys.exit(1 if harness._failed else 0)


if __name__ == "__main__":
    main()

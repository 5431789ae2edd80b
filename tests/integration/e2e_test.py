#!/usr/bin/env python3
"""e2e_test.py GPUORCH - the whole system as a user meets it: a real
`gpuorch server`, two real `gpuorch agent`s on the fake NVML ($GPUORCH_FAKENVML,
else BUILD/tests/libnvidia-ml.so.1) posing as nodes n1 and n2 of 4 GPUs each
in pool main, jobs that really run (as gpuorch-test1 and gpuorch-test2), and
the `gpuorch` CLI. Prints TAP.

The configuration (applied with `gpuorch apply -f`): team-a guaranteed 4 GPUs
of main and may borrow 4 more; team-b guaranteed 4 and may not borrow; classes
low (0), normal (10) and high (20, may preempt). alice is in team-a, bob in
team-b.

Every scenario starts on an empty cluster and is built so that the default
policy (docs/scheduling.md: fair share between teams, LAS within a team,
guarantee first, EASY backfill, reclaim and priority preemption) has exactly
one outcome:

1. borrow and reclaim: team-a runs 6 jobs, 2 on team-b's idle share
   (borrowed); team-b submits 4, which take the 2 free GPUs and reclaim the
   2 borrowed ones: those 2 (only) get SIGTERM, are requeued and finish later.
2. reasons: array_limit, dependency, quota and resources at once, from the
   API's wait_reason and from `gpuorch queue` and `gpuorch show`.
3. priority: a `high` job of team-a evicts the newest `low` job (least work
   lost), never team-b's older `normal` ones.
4. backfill: a 4-GPU job reserved behind a job with a 60 s limit; a `low`
   job with a 20 s limit starts in the hole, the reserved job's estimated
   start does not move, one with a long limit waits `reservation`.
5. an array with %2 never runs more than 2 tasks at once; afterok waits.
6. a #SBATCH script submitted with `gpuorch submit script.sh`.

Jobs are shell loops that wait for a file the test writes (SHARED/go-ID), log
their start, SIGTERM and end with timestamps (SHARED/log-ID), and exit 143 on
SIGTERM, so the test decides when each job ends; conditions are polled with
deadlines, never timed. Needs root (the agents switch to the job's user; else
SKIP) and the users gpuorch-test1 and gpuorch-test2 (scripts/setup.sh; a
missing one fails the test).
Children are stopped by PID; KEEP_TMP=1 keeps the directories."""

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeAgent, fake_gpu_uuid, remove_tmp, run_as_root  # noqa: E402
from harness import (DEADLINE_S, Server, agent_cgroups, diag, file_tail, ok, wait_until,  # noqa: E402
                     remove_cgroups, write_atomic)

BIN = os.path.abspath(sys.argv[1])
FAKENVML = os.environ.get("GPUORCH_FAKENVML") or os.path.join(
    os.path.dirname(BIN), "tests", "libnvidia-ml.so.1")
USERS = {"alice": ("gpuorch-test1", "team-a"), "bob": ("gpuorch-test2", "team-b")}
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL")
NODE_GPUS = 4

# A pass at least every second: a reason that settles without an event (a
# requeued job's 'priority' in the pass that gave its GPUs away becomes
# 'resources' in the next) shows within a second, not the default 5.
SRV = Server(BIN, "gpuorch-e2e-test-srv-", ["--pass-interval", "1"])
call = SRV.call
TMP = tempfile.mkdtemp(prefix="gpuorch-e2e-test-")
os.chmod(TMP, 0o755)
SHARED = os.path.join(TMP, "shared")
os.mkdir(SHARED)
os.chmod(SHARED, 0o777)  # mkdir's mode is cut by the umask
ADMIN = None
TOKENS = {}  # user name -> token
AGENTS = {}
CGROUP_BASE = None


# -- The agents (as tests/integration/agent_test.py runs them). ----------------------------


def gpu_uuid(node_no, index):
    return fake_gpu_uuid(node_no, index, tag="4e2e")


class AgentProc(FakeAgent):
    """A test agent (harness.FakeAgent) with NGPUS GPUs at 30 %."""

    def __init__(self, name, node_no, ngpus):
        super().__init__(BIN, SRV, TMP, FAKENVML, name,
                         [gpu_uuid(node_no, g) for g in range(ngpus)], sample_interval=500)
        self.write_gpu_list([{"uuid": u, "utilization": 30, "process_memory_mib": 512}
                             for u in self.uuids])


def setup_cgroups():
    """A cgroup root of its own for each agent (harness.agent_cgroups)."""
    global CGROUP_BASE
    CGROUP_BASE, roots = agent_cgroups("gpuorch-e2e-test", list(AGENTS))
    for name, ag in AGENTS.items():
        ag.cgroup = roots.get(name)


# -- Jobs and the API. ---------------------------------------------------------------------


def shared(name):
    return os.path.join(SHARED, name)


def sh(script):
    return ["/bin/sh", "-c", script]


def held():
    """A job that runs until the test writes SHARED/go-ID (at most 3 minutes),
    logging 'start A T', 'term A T' and 'end A T' (attempt, epoch seconds) to
    SHARED/log-ID; on SIGTERM it logs and exits 143, which a preemption or a
    cancel turns into PREEMPTED or CANCELLED (an exit 0 would read COMPLETED)."""
    log, go = shared("log-$GPUORCH_JOB_ID"), shared("go-$GPUORCH_JOB_ID")
    return sh(f'trap \'echo "term $GPUORCH_ATTEMPT $(date +%s.%N)" >> {log}; exit 143\' TERM; '
              f'echo "start $GPUORCH_ATTEMPT $(date +%s.%N)" >> {log}; i=0; '
              f'while [ ! -e {go} ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done; '
              f'echo "end $GPUORCH_ATTEMPT $(date +%s.%N)" >> {log}')


def release(*ids):
    for jid in ids:
        write_atomic(shared(f"go-{jid}"), "go\n")


def job_log(jid):
    """The job's own log: [(event, attempt, epoch seconds)]."""
    out = []
    try:
        with open(shared(f"log-{jid}")) as f:
            for line in f:
                p = line.split()
                if len(p) == 3:
                    out.append((p[0], int(p[1]), float(p[2])))
    except (OSError, ValueError):
        pass
    return out


def submit(spec, user="alice"):
    """Submits SPEC as USER for the user's team, in pool main and the shared
    directory, a held() job of 1 GPU unless SPEC says otherwise; the answer."""
    spec = dict({"pool": "main", "workdir": SHARED, "gpus": 1, "command": held()}, **spec)
    return SRV.api.expect("POST", "/v1/jobs", spec, want=(201,), token=TOKENS[user])


def sub(spec=None, user="alice"):
    return submit(spec or {}, user)["id"]


def submit_as(spec, flags, user="alice"):
    """Submits with `gpuorch submit --json FLAGS` (the job's own command unless
    FLAGS give one after '--'); SPEC is what the flags say, for diagnostics. The
    answer (an array's first task, with "array_jobs")."""
    if "--" not in flags:
        flags = flags + ["--"] + held()
    rc, out, err = cli("submit", "--json", "--pool", "main", *flags, user=user)
    try:
        return json.loads(out)
    except ValueError:
        raise RuntimeError(f"gpuorch submit {flags}: {rc} {out!r} {err!r}")


def get_job(jid):
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    return body if st == 200 else None


def get_jobs(ids):
    return {jid: get_job(jid) for jid in ids}


def wait_all(ids, pred, timeout=DEADLINE_S):
    """Polls until pred(job) holds for every job of IDS; (held, {id: last job})."""
    last = {}

    def check():
        last.update(get_jobs(ids))
        try:
            return all(j is not None and pred(j) for j in last.values())
        except (KeyError, TypeError, IndexError):
            return False

    return bool(wait_until(check, timeout, 0.05)), last


def wait_job(jid, pred, timeout=DEADLINE_S):
    good, jobs = wait_all([jid], pred, timeout)
    return good, jobs.get(jid)


def state_is(*states):
    return lambda j: j["state"] in states


def launched(j):
    """The agent reported the attempt RUNNING (a job is RUNNING from its
    assignment on)."""
    return j["state"] == "RUNNING" and (j.get("current_attempt") or {}).get("state") == "RUNNING"


def code_of(j):
    """The stable code of a pending job's wait_reason ('quota: ...' -> 'quota')."""
    return str((j or {}).get("wait_reason") or "").split(":")[0]


def waits_for(code):
    return lambda j: j["state"] == "PENDING" and code_of(j) == code


def attempts_of(j):
    return (j or {}).get("attempts") or []


def borrowed(j):
    return bool(((j or {}).get("current_attempt") or {}).get("borrowed"))


def when(text):
    """RFC 3339 (the API's times) to epoch seconds; None stays None."""
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def finish(ids, timeout=DEADLINE_S):
    """Ends every job of IDS: pending ones cancelled, running ones released;
    waits until all have ended. The scenario after starts on an empty cluster."""
    for jid in ids:
        j = get_job(jid)
        if j and j["state"] == "PENDING":
            call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    release(*ids)
    good, _ = wait_all(ids, state_is(*FINAL), timeout)
    if not good:
        raise RuntimeError(f"jobs {ids} did not end")


def dump(jobs, *extra):
    """A failed check's diagnostics: the jobs (state, reason, attempts) and the
    agents' log tails."""
    lines = []
    for jid, j in sorted(jobs.items()):
        j = j or {}
        atts = [(a.get("attempt"), a.get("state"), a.get("reason")) for a in attempts_of(j)]
        lines.append(f"job {jid} {j.get('spec', {}).get('name')}: {j.get('state')} "
                     f"wait={j.get('wait_reason')!r} est={j.get('estimated_start')} "
                     f"cur={json.dumps(j.get('current_attempt'))} attempts={atts} "
                     f"log={job_log(jid)}")
    lines += [str(e) for e in extra]
    for ag in AGENTS.values():
        lines.append(f"-- {ag.name}'s log:\n{file_tail(ag.log_path, 1200)}")
    return "\n".join(lines)


def new_token(user):
    return SRV.api.expect("POST", f"/v1/users/{user}/tokens?label=e2e", want=(201,),
                          token=ADMIN)["token"]


# -- The CLI. ------------------------------------------------------------------------------


def cli(*args, user="alice", timeout=30):
    """Runs `gpuorch ARGS` as USER (server and token from the environment);
    (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUORCH_")}
    env.update(GPUORCH_SERVER=f"http://127.0.0.1:{SRV.port}",
               GPUORCH_TOKEN=ADMIN if user == "admin" else TOKENS[user])
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout,
                       cwd=SHARED, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def cli_jobs(out):
    """`gpuorch queue --json`'s jobs: a list, or an object with "jobs"."""
    try:
        v = json.loads(out)
    except ValueError:
        return None
    v = v.get("jobs") if isinstance(v, dict) else v
    return {j.get("id"): j for j in v if isinstance(j, dict)} if isinstance(v, list) else None


# -- Setup. --------------------------------------------------------------------------------

CONFIG_YAML = """\
# The e2e cluster: two teams of 4 guaranteed GPUs; team-a may borrow 4 more.
pools:
  - name: main
    description: two fake nodes of 4 H100-80GB
priority_classes:
  - {name: low, order: 0, may_preempt: false}
  - {name: normal, order: 10, may_preempt: false}
  - {name: high, order: 20, may_preempt: true}
teams:
  - name: team-a
    quotas: [{pool: main, guaranteed: 4, borrow_limit: 4}]
  - name: team-b
    quotas: [{pool: main, guaranteed: 4, borrow_limit: 0}]
users:
  - {name: alice, unix_user: gpuorch-test1, team: team-a, role: member}
  - {name: bob, unix_user: gpuorch-test2, team: team-b, role: member}
"""
def apply_config():
    """Through `gpuorch apply -f`, twice: the second run changes nothing."""
    path = os.path.join(TMP, "cluster.yaml")
    with open(path, "w") as f:
        f.write(CONFIG_YAML)
    rc, out, err = cli("apply", "-f", path, user="admin")
    lines = out.splitlines()
    ok(rc == 0 and len(lines) == 8 and "team/team-a created" in lines
       and "priority-class/high created" in lines and "user/bob created" in lines,
       "gpuorch apply -f cluster.yaml creates the pool, 3 classes, 2 teams and 2 users, "
       "one line each", f"{rc}\n{out}\n{err}")
    rc, out, err = cli("apply", "-f", path, user="admin")
    lines = out.splitlines()
    ok(rc == 0 and len(lines) == 8 and all(x.endswith(" unchanged") for x in lines),
       "applying the same file again changes nothing (8 lines 'unchanged')",
       f"{rc}\n{out}\n{err}")
    st, body, raw = call("GET", "/v1/teams", token=ADMIN)
    quotas = {t.get("name"): t.get("quotas") for t in (body or {}).get("teams") or []}
    ok(st == 200 and [(q[0].get("guaranteed"), q[0].get("borrow_limit"))
                      for q in (quotas.get("team-a"), quotas.get("team-b")) if q]
       == [(4, 4), (4, 0)],
       "the configuration is in: team-a guaranteed 4 borrowing 4, team-b guaranteed 4 "
       "borrowing 0", raw[:800])


def setup():
    global ADMIN
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    apply_config()
    for u in USERS:
        TOKENS[u] = new_token(u)
    for name, no in (("n1", 1), ("n2", 2)):
        AGENTS[name] = AgentProc(name, no, NODE_GPUS)
    setup_cgroups()
    for ag in AGENTS.values():
        ag.start()

    def registered():
        st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
        nodes = {n["name"]: n for n in (body or {}).get("nodes") or []} if st == 200 else {}
        return all(n in nodes and nodes[n].get("state") == "up"
                   and len(nodes[n].get("gpus") or []) == NODE_GPUS for n in AGENTS)

    good = wait_until(registered, timeout=30, step=0.1)
    ok(good, "two agents register: n1 and n2, 4 GPUs each, up, in pool main",
       dump({}))
    if not good:
        raise RuntimeError("the agents did not register; every other check needs them")


# -- 1. Borrowing and reclaim. -------------------------------------------------------------


def borrow_and_reclaim():
    a = [sub({"name": f"a-{k}", "checkpointable": True}) for k in range(6)]
    good, jobs = wait_all(a, launched)
    lent = sorted(jid for jid, j in jobs.items() if borrowed(j))
    ok(good and len(lent) == 2,
       "team-a (guaranteed 4, may borrow 4) runs 6 one-GPU jobs on the idle cluster: 4 within "
       "its guarantee and 2 borrowed from team-b's idle share", dump(jobs))
    if not good:
        finish(a)
        return
    b = [sub({"name": f"b-{k}"}, user="bob") for k in range(4)]
    good, bjobs = wait_all(b, launched, timeout=60)
    jobs = get_jobs(a)
    termed = sorted(jid for jid in a if any(e[0] == "term" for e in job_log(jid)))
    ok(good and termed == lent,
       "team-b's 4 guaranteed jobs all run: 2 on the free GPUs, 2 on GPUs reclaimed from "
       "team-a's borrowed jobs, which (only they) got SIGTERM (their trap logged it)",
       dump({**jobs, **bjobs}, f"borrowed {lent}, got SIGTERM {termed}"))
    good, jobs = wait_all(lent, lambda j: j["state"] == "PENDING"
                          and [x.get("state") for x in attempts_of(j)] == ["PREEMPTED"])
    ok(good and lent, "the 2 reclaimed jobs are requeued: PENDING, attempt 1 PREEMPTED",
       dump(jobs))
    good, jobs = wait_all(lent, waits_for("resources"))
    ok(good, "and wait with reason resources (the cluster is full; team-a may still borrow)",
       dump(jobs))
    kept = [jid for jid in a if jid not in lent]
    ok(all(get_job(jid)["state"] == "RUNNING" for jid in kept),
       "team-a's 4 jobs within its guarantee were not touched", dump(get_jobs(kept)))
    release(*b)
    good, jobs = wait_all(lent, lambda j: launched(j) and j["current_attempt"]["attempt"] == 2)
    ok(good, "once team-b's jobs end, the 2 requeued jobs start again as attempt 2", dump(jobs))
    release(*a)
    good, jobs = wait_all(a + b, state_is(*FINAL))
    ok(good and all(j["state"] == "COMPLETED" for j in jobs.values())
       and all(len(attempts_of(jobs[jid])) == 2 for jid in lent)
       and [e[:2] for e in job_log(lent[0])] == [("start", 1), ("term", 1), ("start", 2),
                                                 ("end", 2)],
       "all 10 jobs end COMPLETED; the reclaimed ones in 2 attempts (start, SIGTERM, start, end)",
       dump(jobs))
    finish(a + b)


# -- 2. Why each job waits: API, `gpuorch queue`, `gpuorch show`. --------------------------


def reasons():
    b = [sub({"name": f"rb-{k}"}, user="bob") for k in range(4)]
    good, jobs = wait_all(b, launched)
    if not good:
        ok(False, "team-b's 4 jobs start (setup of the reasons scenario)", dump(jobs))
        finish(b)
        return
    # As a user types them, where the build has the CLI.
    arr = submit_as({"name": "arr", "array": "0-3%2"}, ["-J", "arr", "-G", "1", "--array", "0-3%2"])
    tasks = arr.get("array_jobs") or [arr["id"]]
    good, jobs = wait_all(tasks[:2], launched)
    dep = submit_as({"name": "after-task0", "command": ["true"],
                     "dependencies": [{"type": "afterok", "job": tasks[0]}]},
                    ["-J", "after-task0", "-G", "1", f"--dependency=afterok:{tasks[0]}", "--",
                     "true"])["id"]
    over = submit_as({"name": "b-over-quota", "command": ["true"]},
                     ["-J", "b-over-quota", "-G", "1", "--", "true"], user="bob")["id"]
    big = submit_as({"name": "big-4", "gpus": 4, "command": ["true"]},
                    ["-J", "big-4", "-G", "4", "--", "true"])["id"]
    specs = {jid: (get_job(jid) or {}).get("spec") or {} for jid in (tasks[2], dep, big)}
    ok(len(tasks) == 4 and specs[tasks[2]].get("array") == "0-3%2"
       and specs[dep].get("dependencies") == [{"type": "afterok", "job": tasks[0]}]
       and all(specs[jid].get("gpus") == 1 for jid in (tasks[2], dep))
       and specs[big].get("gpus") == 4,
       "the waiting jobs are submitted with gpuorch submit: "
       "an array of 4 one-GPU jobs at most 2 running, an afterok job, a 4-GPU job",
       json.dumps(specs))
    want = {tasks[2]: "array_limit", tasks[3]: "array_limit", dep: "dependency",
            over: "quota", big: "resources"}
    good, jobs = wait_all(list(want), lambda j: j["state"] == "PENDING" and code_of(j))
    got = {jid: code_of(j) for jid, j in jobs.items()}
    ok(good and got == want,
       "with team-b at its limit on n1 and 2 array tasks on n2, the API's wait_reason says "
       "array_limit for tasks 2-3 (%2), dependency for the afterok job, quota for team-b's "
       "5th job, resources for a 4-GPU job (2 GPUs free)", dump(jobs, f"want {want}"))
    cli_reasons(want, jobs)
    finish(tasks + b + list(want))


def cli_reasons(want, jobs):
    rc, out, err = cli("queue", "--json", user="admin")
    listed = cli_jobs(out) or {}
    same = {jid: (listed.get(jid) or {}).get("wait_reason") == jobs[jid].get("wait_reason")
            for jid in want}
    ok(rc == 0 and all(same.values()),
       "gpuorch queue --json gives each waiting job the API's wait_reason",
       f"{rc} {err}\n{out[:3000]}\n{same}")
    # -r: an array's pending tasks each on a row of their own, named ARRAY_INDEX.
    rc, out, err = cli("queue", "-r", user="admin")
    diag("gpuorch queue -r:\n# " + "\n# ".join(out.splitlines()))

    def label(jid):
        j = jobs[jid]
        return f"{j['array_id']}_{j['array_index']}" if j.get("array_id") else str(jid)
    rows = {}
    for line in out.splitlines():
        tok = line.split()
        for jid in want:
            if tok and tok[0] == label(jid):
                rows[jid] = line
    ok(rc == 0 and all(want[jid] in rows.get(jid, "") for jid in want),
       "gpuorch queue -r shows each waiting job on a line with its reason's code",
       f"{rc} {err}\n{out}\n{rows}")
    bad = {}
    for jid, code in want.items():
        rc, out, err = cli("show", str(jid), user="admin")
        text = jobs[jid].get("wait_reason") or ""
        if rc != 0 or text not in out:
            bad[jid] = (rc, out[-600:], err)
    ok(not bad, "gpuorch show ID prints the API's whole wait_reason for each waiting job",
       json.dumps(bad, indent=1))
    rc, out, err = cli("show", str(want and max(want)), "--json", user="admin")
    try:
        shown = json.loads(out)
    except ValueError:
        shown = None
    ok(rc == 0 and isinstance(shown, dict) and shown.get("wait_reason")
       == jobs[max(want)].get("wait_reason") and "estimated_start" in shown,
       "gpuorch show --json has wait_reason and estimated_start", f"{rc} {err}\n{out[:1500]}")


# -- 3. Priority. --------------------------------------------------------------------------


def priority():
    b = [sub({"name": f"pb-{k}"}, user="bob") for k in range(4)]
    good, bjobs = wait_all(b, launched)
    low = [sub({"name": f"low-{k}", "priority": "low", "checkpointable": True})
           for k in range(4)]
    good2, ljobs = wait_all(low, launched)
    if not (good and good2):
        ok(False, "team-b's 4 normal jobs, then team-a's 4 low jobs, fill the cluster",
           dump({**bjobs, **ljobs}))
        finish(b + low)
        return
    high = sub({"name": "urgent", "priority": "high"})
    good, j = wait_job(high, launched, timeout=60)
    termed = [jid for jid in low + b if any(e[0] == "term" for e in job_log(jid))]
    jobs = get_jobs(low + b + [high])
    ok(good and len(termed) == 1 and termed[0] in low,
       "on the full cluster a `high` job (may preempt) of team-a starts by evicting one `low` "
       "job (the newest: least work lost), not team-b's older `normal` ones",
       dump(jobs, f"SIGTERM to {termed}"))
    victim = termed[0] if termed else None
    if victim:
        good, v = wait_job(victim, waits_for("resources"))
        ok(good and [x.get("state") for x in attempts_of(v)] == ["PREEMPTED"],
           "the evicted low job is requeued (attempt 1 PREEMPTED) and waits: resources",
           dump({victim: v}))
    ok(all(get_job(jid)["state"] == "RUNNING" for jid in b),
       "team-b's normal jobs keep running", dump(get_jobs(b)))
    release(high)
    good, v = wait_job(victim, lambda j: launched(j) and j["current_attempt"]["attempt"] == 2) \
        if victim else (False, None)
    ok(good, "when the high job ends, the evicted low job runs again (attempt 2)",
       dump({victim: v}))
    finish(b + low + [high])
    jobs = get_jobs(b + low + [high])
    ok(all(j["state"] == "COMPLETED" for j in jobs.values()),
       "all 9 jobs end COMPLETED", dump(jobs))


# -- 4. Backfill. --------------------------------------------------------------------------


def backfill():
    long_b = sub({"name": "long-b", "gpus": 4}, user="bob")
    good, lj = wait_job(long_b, launched)
    lim = sub({"name": "limited-2", "gpus": 2, "time_limit_s": 60})
    good2, mj = wait_job(lim, launched)
    if not (good and good2):
        ok(False, "setup: team-b's 4-GPU job fills one node, a 2-GPU 60 s job half the other",
           dump({long_b: lj, lim: mj}))
        finish([long_b, lim])
        return
    big = sub({"name": "big-4", "gpus": 4, "time_limit_s": 60})
    good, bj = wait_job(big, lambda j: waits_for("resources")(j) and j.get("estimated_start"))
    est1 = when((bj or {}).get("estimated_start"))
    lim_start = when(attempts_of(get_job(lim))[0].get("started_at"))
    ok(good and est1 and abs(est1 - (lim_start + 60)) < 1.5,
       "a 4-GPU job waits (resources) holding the reservation: its estimated start is the "
       "60 s job's start + its time limit", dump({big: bj}, f"est {est1} lim start {lim_start}"))
    small = sub({"name": "small-20s", "priority": "low", "time_limit_s": 20})
    good, sj = wait_job(small, launched)
    bj = get_job(big)
    est2 = when(bj.get("estimated_start"))
    ok(good and bj["state"] == "PENDING" and sj["current_attempt"]["nodes"]
       == mj["current_attempt"]["nodes"] and est2 is not None and est2 <= est1,
       "a low 1-GPU job with a 20 s limit, ranked behind it, starts in the hole on the reserved "
       "node, and the reserved job's estimated start does not move",
       dump({big: bj, small: sj, lim: mj}, f"est before {est1}, after {est2}"))
    late = sub({"name": "small-1h", "priority": "low", "time_limit_s": 3600})
    good, tj = wait_job(late, waits_for("reservation"))
    ok(good, "a low 1-GPU job with a 1 h limit (it would delay the reservation) waits: "
       "reservation", dump({late: tj}))
    release(small, lim)
    good, bj = wait_job(big, launched)
    jobs = get_jobs([big, small, lim, late])
    started = when(attempts_of(bj)[-1].get("started_at")) if bj else None
    small_start = when(attempts_of(jobs[small])[0].get("started_at"))
    ok(good and started is not None and small_start < started <= est1,
       "the reserved job starts once both have ended: after the backfilled job, not later "
       "than its estimated start", dump(jobs, f"est {est1} started {started}"))
    release(long_b)
    good, tj = wait_job(late, launched)
    ok(good, "the 1 h job runs once team-b's node is free", dump({late: tj}))
    finish([long_b, lim, big, small, late])
    jobs = get_jobs([long_b, lim, big, small, late])
    ok(all(j["state"] == "COMPLETED" for j in jobs.values()), "all 5 end COMPLETED", dump(jobs))


# -- 5. Arrays and dependencies. -----------------------------------------------------------


def array_cap():
    log = shared("log-$GPUORCH_JOB_ID")
    arr = submit({"name": "capped", "array": "0-7%2", "command": sh(
        f'echo "start $GPUORCH_ATTEMPT $(date +%s.%N)" >> {log}; sleep 1; '
        f'echo "end $GPUORCH_ATTEMPT $(date +%s.%N)" >> {log}')})
    tasks = arr.get("array_jobs") or [arr["id"]]
    most, samples, reasons_seen = 0, 0, set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        st, body, _ = call("GET", f"/v1/jobs?after={min(tasks) - 1}&limit={len(tasks)}",
                           token=ADMIN)
        jobs = [j for j in (body or {}).get("jobs") or [] if j["id"] in tasks]
        most = max(most, sum(j["state"] == "RUNNING" for j in jobs))
        reasons_seen |= {code_of(j) for j in jobs if j["state"] == "PENDING"}
        samples += 1
        if len(jobs) == len(tasks) and all(j["state"] in FINAL for j in jobs):
            break
        time.sleep(0.02)
    jobs = get_jobs(tasks)
    diag(f"{samples} samples of the array's {len(tasks)} tasks; at most {most} RUNNING")
    ok(len(tasks) == 8 and most == 2,
       "an array 0-7%2 never has more than 2 tasks RUNNING (sampled every 20 ms), and has 2",
       dump(jobs, f"most {most}"))
    ok("array_limit" in reasons_seen,
       "tasks beyond the cap wait with reason array_limit", f"seen {reasons_seen}")
    events = sorted((t, +1 if e == "start" else -1) for jid in tasks for e, _, t in job_log(jid))
    depth = peak = 0
    for _, d in sorted(events, key=lambda x: (x[0], x[1])):
        depth += d
        peak = max(peak, depth)
    ok(len(events) == 16 and peak <= 2,
       "the tasks' own start and end stamps never overlap more than 2 deep", f"{events}")
    ok(all(j["state"] == "COMPLETED" for j in jobs.values()), "all 8 tasks end COMPLETED",
       dump(jobs))


def afterok():
    d = sub({"name": "first"})
    log = shared("log-$GPUORCH_JOB_ID")
    j = sub({"name": "then", "command": sh(f'echo "start $GPUORCH_ATTEMPT $(date +%s.%N)" '
                                           f'>> {log}'),
             "dependencies": [{"type": "afterok", "job": d}]})
    good, jobs = wait_all([d, j], lambda x: launched(x) if x["id"] == d
                          else waits_for("dependency")(x))
    ok(good, "a job afterok:D waits (dependency) while D runs", dump(jobs))
    release(d)
    good, jobs = wait_all([d, j], state_is(*FINAL))
    d_end = when(attempts_of(jobs[d])[-1].get("ended_at")) if good else None
    j_start = when(attempts_of(jobs[j])[0].get("started_at")) if good else None
    proc_d = [t for e, _, t in job_log(d) if e == "end"]
    proc_j = [t for e, _, t in job_log(j) if e == "start"]
    ok(good and jobs[d]["state"] == jobs[j]["state"] == "COMPLETED" and d_end <= j_start
       and proc_d and proc_j and proc_d[0] < proc_j[0],
       "it starts only after D COMPLETED (attempt times, and the processes' own stamps)",
       dump(jobs, f"D ended {d_end} J started {j_start}"))
    bad = sub({"name": "fails", "command": ["false"]})
    k = sub({"name": "after-fails", "command": ["true"],
             "dependencies": [{"type": "afterok", "job": bad}]})
    good, kj = wait_job(k, state_is(*FINAL))
    ok(good and kj["state"] == "FAILED" and not attempts_of(kj) and str(bad) in str(
        kj.get("reason")), "afterok on a job that FAILED: the job fails without running, its "
       "reason names the dependency", dump({k: kj, bad: get_job(bad)}))


# -- 6. #SBATCH scripts. -------------------------------------------------------------------


def sbatch_script():
    script = os.path.join(SHARED, "train.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n"
                "#SBATCH --job-name=sbatch-e2e\n"
                "#SBATCH --gpus=2\n"
                "#SBATCH --time=00:07:00\n"
                f"#SBATCH --output={shared('sbatch-%j.out')}\n"
                "#SBATCH --qos=low\n"
                "#SBATCH --mail-type=END\n"
                "echo \"CUDA=$CUDA_VISIBLE_DEVICES\"\n"
                "echo \"JOB=$GPUORCH_JOB_ID\"\n")
    os.chmod(script, 0o755)
    rc, out, err = cli("submit", "--parsable", script)
    jid = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    ok(jid is not None, "gpuorch submit --parsable train.sh prints the job id",
       f"{rc}\n{out}\n{err}")
    if jid is None:
        return
    ok("mail-type" in err and "7" in err,
       "the directive it does not know (#SBATCH --mail-type, line 7) is a warning on stderr",
       repr(err))
    good, j = wait_job(jid, state_is(*FINAL))
    spec = (j or {}).get("spec") or {}
    ok(good and j["state"] == "COMPLETED" and spec.get("name") == "sbatch-e2e"
       and spec.get("gpus") == 2 and spec.get("time_limit_s") == 420
       and spec.get("priority") == "low" and "script" in spec,
       "its directives are applied: name sbatch-e2e, 2 GPUs, time limit 420 s, class low "
       "(--qos); it runs as a script and ends COMPLETED", dump({jid: j}, f"spec {spec}"))
    out_path = shared(f"sbatch-{jid}.out")
    text = ""
    try:
        with open(out_path) as f:
            text = f.read()
    except OSError:
        pass
    cuda = [u for u in text.partition("CUDA=")[2].splitlines()[0:1] for u in u.split(",") if u]
    gpus = [g.get("uuid") if isinstance(g, dict) else g
            for g in (attempts_of(j)[-1].get("gpus") or [])] if attempts_of(j) else []
    ok(len(cuda) == 2 and sorted(cuda) == sorted(gpus) and f"JOB={jid}" in text,
       "its output goes to --output with %j filled in (sbatch-ID.out): 2 visible GPUs, "
       "its attempt's UUIDs", f"{text!r}\n{gpus}\n{os.listdir(SHARED)}")


# -- The run. ------------------------------------------------------------------------------


def cleanup_jobs():
    """Cancels what a failed check left behind, so that no shim outlives the test."""
    st, body, _ = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1000", token=ADMIN)
    live = [j["id"] for j in (body or {}).get("jobs") or []] if st == 200 else []
    release(*live)
    for jid in live:
        call("POST", f"/v1/jobs/{jid}/cancel", token=ADMIN)
    wait_all(live, state_is(*FINAL), timeout=15)


def main():
    print("TAP version 13")
    why = missing()
    if why:
        raise RuntimeError(why)
    setup()
    for step in (borrow_and_reclaim, reasons, priority, backfill, array_cap, afterok,
                 sbatch_script):
        t0 = time.monotonic()
        try:
            step()
        except Exception as e:  # one broken step should not hide the others' results
            ok(False, f"step {step.__name__} ran to its end", repr(e))
            cleanup_jobs()
        diag(f"{step.__name__}: {time.monotonic() - t0:.1f} s")
    cleanup_jobs()
    logs = {n: ag.log() for n, ag in AGENTS.items()}
    logs["server"] = file_tail(SRV.log_path, 10 ** 7)
    bad = [n for n, text in logs.items() if "Sanitizer" in text or "runtime error:" in text]
    ok(not bad, "no sanitizer report in the agents' and the server's logs",
       "\n".join(logs[n][-6000:] for n in bad))
    codes = {n: ag.stop() for n, ag in AGENTS.items()}
    ok(all(c == 0 for c in codes.values()), "both agents stop with status 0 on SIGTERM", codes)
    rc = SRV.stop()
    ok(rc == 0, "the server stops cleanly", f"{rc}\n{SRV.log_tail()}")


def on_exit():
    for ag in AGENTS.values():
        if ag.proc and ag.proc.poll() is None:
            ag.proc.kill()
            ag.proc.wait()
    remove_cgroups(CGROUP_BASE)
    remove_tmp(TMP)


def missing():
    """What the test needs and this machine lacks, or None."""
    for unix, _ in USERS.values():
        if subprocess.run(["id", unix], capture_output=True).returncode != 0:
            return f"no user {unix} (scripts/setup.sh makes it)"
    if not os.path.exists(FAKENVML):
        return f"no fake NVML at {FAKENVML} (the build makes it)"
    return None


if __name__ == "__main__":
    run_as_root(main, SRV, TMP, on_exit=on_exit)

#!/usr/bin/env python3
"""mig_config_test.py GPUORCH - the user-facing input side of MIG (issue 25,
docs/mig.md) against a real `gpuorch server` on loopback: pools' "mig" through
`gpuorch apply -f` (static by name and by counts, dynamic with its damping
settings; a second apply all unchanged; shown by the API; kept across a
restart), bad layouts refused with the field named and nothing stored
changed, a layout checked against the pool's registered GPU types, a node's
own setting (apply's nodes section, kept across the agent's registration),
and jobs asking for a profile: `submit --gpus 1g.10gb`, the API's 400s, and
a profile no GPU type of the cluster has waiting with its reason. Prints TAP."""

import os
import subprocess
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, ok, run, wait_until  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRV = Server(BIN, "gpuorch-mig-config-test-")
call = SRV.call
WORK = os.path.join(SRV.tmp, "work")
HOME = os.path.join(SRV.tmp, "home")
ADMIN = None


def cli(*args, stdin=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUORCH_") and k != "XDG_CONFIG_HOME"}
    env.update({"HOME": HOME, "GPUORCH_SERVER": f"http://127.0.0.1:{SRV.port}",
                "GPUORCH_TOKEN_FILE": SRV.token_file("admin")})
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, cwd=WORK,
                       input=stdin, timeout=60)
    return r.returncode, r.stdout, r.stderr


def apply(text):
    return cli("apply", "-f", "-", stdin=text)


def pool(name):
    st, body, _ = call("GET", f"/v1/pools/{name}", token=ADMIN)
    return body if st == 200 else None


def node(name):
    st, body, _ = call("GET", "/v1/nodes", token=ADMIN)
    return next((n for n in body.get("nodes", []) if n["name"] == name), None) if st == 200 \
        else None


def register(name, pool_name, gpu_type, join):
    """PUT /v1/nodes/NAME as an agent does: one GPU (MIG-capable unless L40S)."""
    uuid = "GPU-00000000-0000-4000-8000-00000000000" + ("2" if gpu_type == "L40S" else "1")
    gpu = {"index": 0, "uuid": uuid, "gpu_type": gpu_type, "mem_mib": 81559,
           "mig_slices": 0 if gpu_type == "L40S" else 7}
    body = {"pool": pool_name, "cpus": 16, "mem_mib": 65536, "addr": "127.0.0.1", "gpus": [gpu]}
    return call("PUT", f"/v1/nodes/{name}", body, token=join)


POOLS = """\
pools:
  - name: main
    mig: {dynamic: true, hold: 10m, min_interval: 600, keep_free: 1}
  - name: fixed
    mig:
      layout: {1g.10gb: 2, MIG 2g.20gb: 1, 3g.40gb: 1}
  - name: named
    mig: {layout: all-1g.10gb}
  - name: plain
    mig: off
teams:
  - name: research
"""


def pools_through_apply():
    rc, out, err = apply(POOLS)
    ok(rc == 0 and out.splitlines() == ["pool/main created", "pool/fixed created",
                                        "pool/named created", "pool/plain created",
                                        "team/research created"],
       "apply -f: pools with a dynamic, a counted, a named and no MIG setting", f"{out}{err}")
    rc, out, err = apply(POOLS)
    ok(rc == 0 and all(ln.endswith(" unchanged") for ln in out.splitlines()),
       "apply -f again: every pool unchanged (durations compare by value)", f"{out}{err}")
    ok(pool("main")["mig"] == {"dynamic": True, "settle": "30s", "hold": "10m",
                               "min_interval": "10m", "keep_free": 1, "max_repartitions": 0},
       "the API shows the planner's settings, defaults filled", pool("main"))
    ok(pool("fixed")["mig"] == {"layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
       "a counted layout is shown in the catalogue's spelling", pool("fixed"))
    ok("mig" not in pool("plain"), "mig: off is a pool without a setting", pool("plain"))


def bad_layouts_change_nothing():
    before = {p: pool(p) for p in ("main", "fixed")}
    cases = [
        ("pools:\n  - name: fixed\n    mig: {layout: {4g.40gb: 2}}\n",
         "field 'mig.layout': valid on no MIG GPU type of the catalogue"),
        ("pools:\n  - name: fixed\n    mig: {layout: {1g.10gb: 2}, hold: 5m}\n",
         "fields 'mig.layout' and 'mig.hold': a static layout and the dynamic planner's"),
        ("pools:\n  - name: fixed\n    mig: {layout: {1g.11gb: 1}}\n",
         "field 'mig.layout': no GPU type has MIG profile '1g.11gb'"),
        ("pools:\n  - name: main\n    mig: {dynamic: true, settle: soon}\n",
         "field 'mig.settle': 'soon' is not a duration"),
        ("pools:\n  - name: main\n    mig: {dynamic: true, colour: red}\n",
         "unknown field 'mig.colour'"),
    ]
    for text, needle in cases:
        rc, out, err = apply(text)
        ok(rc == 1 and needle in err and "stdin:2: pool/" in err,
           f"apply refuses, naming the field and the line: {needle}", f"{rc}\n{out}{err}")
    ok({p: pool(p) for p in ("main", "fixed")} == before,
       "after the refused applies, nothing stored has changed", pool("fixed"))


def layouts_meet_registered_types():
    join = open(SRV.token_file("join")).read().strip()
    st, body, _ = register("node-h", "fixed", "H100-80GB", join)
    ok(st == 201, "an H100 node registers in pool fixed", body)
    st, body, _ = register("node-l", "plain", "L40S", join)
    ok(st == 201, "an L40S node registers in pool plain", body)
    before = pool("fixed")
    rc, out, err = apply("pools:\n  - name: fixed\n    mig: {layout: {1g.5gb: 7}}\n")
    ok(rc == 1 and "field 'mig.layout': H100-80GB has no 1g.5gb" in err,
       "a layout for another GPU type than the pool's nodes have is refused", err)
    ok(pool("fixed") == before, "and the pool keeps its layout", pool("fixed"))

    rc, out, err = apply("nodes:\n  - name: node-h\n    mig: {layout: all-3g.40gb}\n")
    ok(rc == 0 and out == "node/node-h configured\n", "apply -f nodes: a node's own layout",
       f"{out}{err}")
    ok((node("node-h") or {}).get("mig") == {"layout": "all-3g.40gb"},
       "the node listing shows it", node("node-h"))
    rc, out, err = apply("nodes:\n  - name: node-h\n    mig: {layout: all-3g.40gb}\n")
    ok(rc == 0 and out == "node/node-h unchanged\n", "the same node setting again: unchanged", out)
    st, body, _ = register("node-h", "fixed", "H100-80GB", join)
    ok(st == 200 and (node("node-h") or {}).get("mig") == {"layout": "all-3g.40gb"},
       "the agent registering again keeps the node's own setting", node("node-h"))
    rc, out, err = apply("nodes:\n  - name: node-l\n    mig: {layout: all-balanced}\n")
    ok(rc == 1 and "node 'node-l' has no MIG GPU (its GPUs: L40S" in err,
       "a layout on a node without MIG is refused", err)
    ok("mig" not in (node("node-l") or {"mig": 1}), "and the node has none", node("node-l"))
    rc, out, err = apply("nodes:\n  - name: node-x\n    mig: 'off'\n")
    ok(rc == 1 and "node/node-x: no such node" in err, "a node that never registered", err)
    rc, out, err = apply("nodes:\n  - name: node-h\n    mig: null\n")
    ok(rc == 0 and "mig" not in (node("node-h") or {"mig": 1}),
       "mig: null gives the node back its pool's setting", f"{out}{err}{node('node-h')}")


def jobs_ask_for_profiles():
    rc, out, err = cli("submit", "--team", "research", "--gpus", "MIG 1g.10gb", "--parsable",
                       "--", "/bin/true")
    jid = int(out) if rc == 0 and out.strip().isdigit() else 0
    st, body, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
    ok(st == 200 and body["spec"].get("mig_profile") == "1g.10gb"
       and body["spec"]["gpus"] == 0,
       "submit --gpus 'MIG 1g.10gb': one instance, in the catalogue's spelling",
       f"{rc} {out} {err} {body}")
    rc, out, err = cli("submit", "--team", "research", "--gres=gpu:1g.10gb:2", "--", "/bin/true")
    ok(rc == 2 and "asks for 2 MIG instances; a job gets one" in err,
       "--gres=gpu:1g.10gb:2 is a usage error", err)
    script = "#!/bin/sh\n#SBATCH --gres=gpu:3g.40gb:1\n#SBATCH -A research\ntrue\n"
    with open(os.path.join(WORK, "job.sh"), "w") as f:
        f.write(script)
    rc, out, err = cli("submit", "--parsable", "job.sh")
    st, body, _ = call("GET", f"/v1/jobs/{int(out) if rc == 0 else 0}", token=ADMIN)
    ok(st == 200 and body["spec"].get("mig_profile") == "3g.40gb",
       "#SBATCH --gres=gpu:3g.40gb:1 asks for one 3g.40gb instance", f"{rc} {out} {err}")
    for extra, needle in [({"gpus": 1}, "fields 'mig_profile' and 'gpus' are exclusive"),
                          ({"nodes": 2}, "fields 'mig_profile' and 'nodes'"),
                          ({"gpu_type": "L40S"},
                           "fields 'mig_profile' and 'gpu_type': GPU type \"L40S\" has no MIG"),
                          ({"mig_profile": "9g.1gb"},
                           "field 'mig_profile': no GPU type has MIG profile '9g.1gb'")]:
        spec = {"team": "research", "command": ["/bin/true"], "mig_profile": "1g.10gb", **extra}
        st, body, _ = call("POST", "/v1/jobs", spec, token=ADMIN)
        ok(st == 400 and needle in body["error"]["message"], f"POST /v1/jobs 400: {needle}", body)
    spec = {"team": "research", "command": ["/bin/true"], "mig_profile": "1g.18gb"}
    st, body, _ = call("POST", "/v1/jobs", spec, token=ADMIN)
    jid = body.get("id", 0) if st == 201 else 0

    def reason():
        st, j, _ = call("GET", f"/v1/jobs/{jid}", token=ADMIN)
        return j.get("wait_reason") if st == 200 and j.get("state") == "PENDING" else None
    got = wait_until(lambda: "1g.18gb" in (reason() or "") and reason())
    ok(got and "MIG profile '1g.18gb': no GPU type of the cluster has it" in got,
       "a profile only an absent GPU type has waits with a reason naming it", reason())


def restart_keeps_it():
    before = {p: pool(p) for p in ("main", "fixed", "named")}
    SRV.stop()
    SRV.start()
    ok({p: pool(p) for p in ("main", "fixed", "named")} == before,
       "a restart loads every pool's MIG setting as it was", before)


def main():
    global ADMIN
    print("TAP version 13")
    os.makedirs(WORK)
    os.makedirs(HOME)
    SRV.start()
    ADMIN = open(SRV.token_file("admin")).read().strip()
    pools_through_apply()
    bad_layouts_change_nothing()
    layouts_meet_registered_types()
    jobs_ask_for_profiles()
    restart_keeps_it()


run(main, SRV)

#!/usr/bin/env bash
# sim_shared_cli_test.sh GPUORCH DATA_DIR - `gpuorch sim --serve ... --trace`
# as a user runs it: serving and training on one cluster, or split (--split):
# both figures in --json, the split's GPUs kept from training and never
# exceeded by serving, the rounds line, byte-identical reruns, --from placing
# serving's time 0 in the job trace, a split the cluster cannot give.
# Prints TAP.
set -uo pipefail
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; [ $# -gt 1 ] && echo "$2" | sed 's/^/#   /'; }
check() { # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}
echo "TAP version 13"
req=$data/serve_requests.csv
svc=$data/serve_chat.yaml
cluster=$data/two_nodes.yaml # 8 GPUs, one team for the empty queue

# Training: 24 jobs of 1 to 4 GPUs for 120 to 690 s, one every 30 s, from t=0;
# and the same a day later.
jobs() { # jobs OFFSET_S
  echo "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
  for k in $(seq 0 23); do
    echo "j$k,$(($1 + 30 * k)),$((120 + (k * 97) % 571)),$((1 + k % 4)),,,,"
  done
}
jobs 0 >"$tmp/jobs.csv"
jobs 86400 >"$tmp/jobs_later.csv"
run() { "$bin" sim --serve "$req" --service "$svc" --cluster "$cluster" "$@"; }

# Serving alone: its peak is the split.
"$bin" sim --serve "$req" --service "$svc" --json >"$tmp/alone.json"
peak=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["replicas_max"])' \
  "$tmp/alone.json")
check "serving alone has a peak of 1 to 4 replicas" [ "${peak:-0}" -ge 1 -a "${peak:-0}" -le 4 ]

run --trace "$tmp/jobs.csv" --json >"$tmp/shared.json" 2>"$tmp/e"
check "shared --json exits 0" [ $? -eq 0 ]
run --trace "$tmp/jobs.csv" --json --split "$peak" >"$tmp/split.json" 2>"$tmp/e"
check "split --json exits 0" [ $? -eq 0 ]
python3 - "$tmp/alone.json" "$tmp/shared.json" "$tmp/split.json" "$peak" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
alone, shared, split = (json.load(open(f)) for f in sys.argv[1:4])
peak = int(sys.argv[4])
for name, d in (("shared", shared), ("split", split)):
    assert set(d) == {"serving", "training"}, f"{name}: {sorted(d)}"
    s, t = d["serving"][0], d["training"][0]
    assert s["requests"] == 377, f"{name}: {s['requests']} requests"
    assert 0 <= s["slo_attainment"] <= 1, name
    assert t["jobs"] == 24 and t["unschedulable"] == 0, f"{name}: {t['jobs']} jobs"
    assert t["jct_avg_s"] > 0, name
# The split's cap is serving's own peak: serving replays as alone.
assert split["serving"][0] == alone, "split at the peak: serving as alone"
assert split["serving"][0]["replicas_max"] <= peak
# Shared, serving waits for GPUs (the evictions' grace) where alone it never
# does: its attainment is at most its own alone.
assert shared["serving"][0]["slo_attainment"] <= alone["slo_attainment"] + 1e-9
EOF
check "shared and split: both figures, serving within the split" [ $? -eq 0 ]
[ -s "$tmp/py" ] && sed 's/^/#   /' "$tmp/py"

run --trace "$tmp/jobs.csv" >"$tmp/shared.txt" 2>"$tmp/e"
check "shared: the table says the rounds" grep -qE "^default: [1-3] job replay\(s\), (converged|not converged)" "$tmp/shared.txt"
check "shared: training on the 8 GPUs" grep -qE "^cluster GPUs +8$" "$tmp/shared.txt"
run --trace "$tmp/jobs.csv" --split "$peak" >"$tmp/split.txt" 2>"$tmp/e"
check "split: training on 8 less the split" grep -qE "^cluster GPUs +$((8 - peak))$" "$tmp/split.txt"
check "split: the table says the split" grep -q "^default: serving split off $peak GPUs" "$tmp/split.txt"

run --trace "$tmp/jobs.csv" --json >"$tmp/again.json" 2>"$tmp/e"
check "shared --json is byte-identical on a rerun" cmp -s "$tmp/shared.json" "$tmp/again.json"

# A day later in the job trace, --from there: serving's time 0 is at --from,
# and both replays are the same as from 0 (JCTs are relative, serving's clock its own).
run --trace "$tmp/jobs_later.csv" --from 86400 --json >"$tmp/later.json" 2>"$tmp/e"
check "--from aligns serving with a later window: the same figures" \
  cmp -s "$tmp/shared.json" "$tmp/later.json"

run --trace "$tmp/jobs.csv" --split 8 >"$tmp/o" 2>"$tmp/e"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--split 8: the cluster has 8 GPUs, and training needs some" "$tmp/e"; then
  ok "a split of the whole cluster exits 2 and says why"
else
  not_ok "a split of the whole cluster exits 2 and says why" "rc=$rc $(cat "$tmp/e")"
fi
echo "1..$n"

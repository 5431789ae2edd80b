#!/usr/bin/env bash
# sim_serve_cli_test.sh GPUORCH DATA_DIR - `gpuorch sim --serve` as a user
# runs it: the --json fields and their consistency for every policy,
# byte-identical reruns, the table, several services, the exit codes and
# messages for bad flags, specs and request rows, the report, --help.
# Prints TAP.
# shellcheck source=tests/tools/sim_tap.sh
. "$(dirname "$0")/sim_tap.sh"
req=$data/serve_requests.csv
svc=$data/serve_chat.yaml
all=default,knative,rayserve,static-peak,static-mean

# 1. Every policy's --json object: the fields, and what must hold between them.
"$bin" sim --serve "$req" --service "$svc" --policy $all --json >"$tmp/a.json" 2>"$tmp/err"
check "--serve --json with every policy exits 0" [ $? -eq 0 ]
python3 - "$tmp/a.json" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))
assert isinstance(runs, list), "several policies: an array"
assert [r["policy"] for r in runs] == ["default", "knative", "rayserve", "static-peak",
                                       "static-mean"], "in the order given"
keys = ["policy", "service", "requests", "completed", "slo_attainment", "ttft_p50_s",
        "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "dropped", "timed_out", "failed",
        "cold_starts", "gpu_hours", "replicas_mean", "replicas_max"]
for r in runs:
    p = r["policy"]
    for k in keys:
        assert k in r, f"{p}: no {k}"
    assert r["service"] == "chat", p
    assert r["requests"] == 377, f"{p}: {r['requests']} requests (the file has 377)"
    assert r["completed"] + r["dropped"] + r["timed_out"] + r["failed"] == r["requests"], p
    assert 0 <= r["slo_attainment"] <= 1, p
    assert r["slo_attainment"] <= r["completed"] / r["requests"] + 1e-9, p
    assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"], p
    assert r["ttft_p50_s"] <= r["e2e_p50_s"] <= r["e2e_p99_s"], p
    assert r["ttft_p99_s"] <= r["e2e_p99_s"], p
    assert r["gpu_hours"] > 0, p
    assert 0 < r["replicas_mean"] <= r["replicas_max"] <= 4, f"{p}: spec max 4"
    # GPU-hours: one GPU per replica, over the replay: mean replicas x hours
    assert r["gpu_hours"] <= r["replicas_max"] * 780 / 3600 + 0.5, p
s = {r["policy"]: r for r in runs}
assert s["static-peak"]["cold_starts"] == 0 and s["static-mean"]["cold_starts"] == 0
assert s["static-peak"]["replicas_max"] >= s["static-mean"]["replicas_max"]
assert s["static-peak"]["replicas_mean"] == s["static-peak"]["replicas_max"], "a fixed fleet"
# scaling from zero: the autoscaled policies start cold at least once
for p in ("default", "knative", "rayserve"):
    assert s[p]["cold_starts"] >= 1, p
print("fine")
EOF
check "every object has the fields, consistent (0 <= SLO <= 1, p50 <= p99, max >= mean, ...)" \
  grep -q '^fine$' "$tmp/py"
[ "$(cat "$tmp/py")" = fine ] || sed 's/^/#   /' "$tmp/py"
"$bin" sim --serve "$req" --service "$svc" --policy $all --json >"$tmp/b.json"
check "two runs give byte-identical --json" cmp -s "$tmp/a.json" "$tmp/b.json"
"$bin" sim --serve "$req" --service "$svc" --json >"$tmp/one.json"
check "one policy (default by default) is one object" \
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["policy"]=="default"' \
  "$tmp/one.json"

# 2. The table: a header with the units, a row per service and policy.
"$bin" sim --serve "$req" --service "$svc" --policy default,static-peak >"$tmp/t" 2>&1
check "the table has its header" grep -q 'service  policy  *requests  *SLO %  *TTFT p50' "$tmp/t"
check "the table has a row per policy" \
  [ "$(grep -Ec '^chat +(default|static-peak) +377 ' "$tmp/t")" -eq 2 ]

# 2b. static:N: a fixed fleet of N, ready at 0, whatever the spec's min and max
# (serve_chat.yaml's max is 4). The size static-peak picks replays as it does.
"$bin" sim --serve "$req" --service "$svc" --policy static-peak,static:1,static:6 --json \
  >"$tmp/fixed.json" 2>"$tmp/err"
check "static:N replays, exit 0" [ $? -eq 0 ]
python3 - "$tmp/fixed.json" >"$tmp/py" 2>&1 <<'EOF'
import json, sys
peak, one, six = json.load(open(sys.argv[1]))
assert [r["policy"] for r in (peak, one, six)] == ["static-peak", "static:1", "static:6"]
for r, n in ((one, 1), (six, 6)):
    assert r["replicas_mean"] == n and r["replicas_max"] == n, f"{r['policy']}: {r}"
    assert r["cold_starts"] == 0, r["policy"]
assert one["slo_attainment"] <= six["slo_attainment"], "more replicas, no fewer within the SLO"
assert abs(one["gpu_hours"] * 6 - six["gpu_hours"]) < 0.01, (one["gpu_hours"], six["gpu_hours"])
print("fine")
EOF
check "static:1 and static:6 hold 1 and 6 replicas, 6x the GPU-hours, past the spec's max" \
  grep -q '^fine$' "$tmp/py"
[ "$(cat "$tmp/py")" = fine ] || sed 's/^/#   /' "$tmp/py"
peak_n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["replicas_max"])' \
  "$tmp/fixed.json")
"$bin" sim --serve "$req" --service "$svc" --policy static-peak --json >"$tmp/p.json"
"$bin" sim --serve "$req" --service "$svc" --policy "static:$peak_n" --json >"$tmp/n.json"
check "static:$peak_n (static-peak's own size) gives static-peak's figures" \
  python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]);
a.pop("policy"); b.pop("policy"); assert a == b, (a, b)' "$tmp/p.json" "$tmp/n.json"
for bad in static:0 static:1001 static:-1 static:+2 static:02 static:2x static: static:1.5; do
  expect "--policy $bad exits 2 naming static:N's range" 2 \
    "--policy: $bad: expected static:N with N a whole number from 1 to 1000" --serve "$req" \
    --service "$svc" --policy "default,$bad"
done
expect "static:N given twice exits 2" 2 "'static:3' is given twice" --serve "$req" \
  --service "$svc" --policy static:3,static:3

# 3. Two services, each its own trace and spec.
sed 's/^name: chat$/name: code/' "$svc" >"$tmp/code.yaml"
head -100 "$req" >"$tmp/code.csv"
"$bin" sim --serve "$req,$tmp/code.csv" --service "$svc,$tmp/code.yaml" \
  --policy default,knative --json >"$tmp/two.json"
check "two services under two policies give four objects, by policy then service" \
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1]));
assert [(r["policy"], r["service"], r["requests"]) for r in o] == [("default","chat",377),
  ("default","code",99), ("knative","chat",377), ("knative","code",99)], o' "$tmp/two.json"

# 4. Bad inputs exit 2 (usage) or 1 (a file that cannot be read) and name the problem.
sed '/^simulate:/,$d' "$svc" >"$tmp/nosim.yaml"
expect "a spec without simulate exits 2 and says what to add" 2 \
  "nosim.yaml:.*no 'simulate' section: add the replica model" --serve "$req" \
  --service "$tmp/nosim.yaml"
sed 's/^  max_batch: 8$/  max_batch: 0/' "$svc" >"$tmp/bad.yaml"
line=$(grep -n 'max_batch: 0' "$tmp/bad.yaml" | cut -d: -f1)
expect "a bad simulate field exits 2 naming file:line: field" 2 \
  "bad.yaml:$line: simulate.max_batch: expected an integer from 1 to 4096, got 0" \
  --serve "$req" --service "$tmp/bad.yaml"
sed 's/^  limit: 50$/  limit: -3/' "$svc" >"$tmp/badq.yaml"
line=$(grep -n 'limit: -3' "$tmp/badq.yaml" | cut -d: -f1)
expect "a bad service field exits 2 naming file:line and the controller's message" 2 \
  "badq.yaml:$line: field 'queue.limit'" --serve "$req" --service "$tmp/badq.yaml"
expect "a bad request row exits 1 naming file:line: field" 1 \
  "serve_bad_row.csv:3: input_tokens" --serve "$data/serve_bad_row.csv" --service "$svc"
expect "a missing request trace exits 1 naming it" 1 "nope.csv" --serve "$tmp/nope.csv" \
  --service "$svc"
expect "a missing spec exits 2 naming it" 2 "--service: .*nope.yaml" --serve "$req" \
  --service "$tmp/nope.yaml"
expect "an unknown policy exits 2 and lists the serving policies" 2 \
  "--policy: expected a serving policy (default, knative, .*got 'fifo'" --serve "$req" \
  --service "$svc" --policy default,fifo
expect "a policy given twice exits 2" 2 "'knative' is given twice" --serve "$req" \
  --service "$svc" --policy knative,knative
expect "--serve without --service exits 2" 2 "--serve needs --service" --serve "$req"
expect "one spec for two traces exits 2" 2 "expected one spec per --serve file (2), got 1" \
  --serve "$req,$req" --service "$svc"
expect "two services of one name exit 2" 2 "a second service named 'chat'" \
  --serve "$req,$req" --service "$svc,$svc"
expect "--split without --trace exits 2" 2 "--split: only with --trace" --serve "$req" \
  --service "$svc" --split 4
expect "--restart-penalty without --trace exits 2" 2 "--restart-penalty: only with --trace" \
  --serve "$req" --service "$svc" --restart-penalty 5
expect "a bad --split exits 2" 2 "--split: expected a number of GPUs > 0" --serve "$req" \
  --service "$svc" --trace "$data/three_jobs.csv" --split 0
expect "an unknown flag exits 2" 2 "unknown argument '--frobnicate'" --serve "$req" \
  --service "$svc" --frobnicate
# With a job trace: serving and training on one cluster, or, where that part
# is not built, a usage error that says so (never a replay that pretends).
"$bin" sim --serve "$req" --service "$svc" --trace "$data/three_jobs.csv" >"$tmp/o" 2>"$tmp/e"
rc=$?
if { [ $rc -eq 2 ] && grep -q -- "--trace with --serve: .*not built" "$tmp/e"; } ||
   { [ $rc -eq 0 ] && grep -q '^training' "$tmp/o"; }; then
  ok "--trace with --serve replays both, or says it is not built"
else
  not_ok "--trace with --serve replays both, or says it is not built" "rc=$rc $(cat "$tmp/e")"
fi

# 5. The report: one page, every policy, charts per service, nothing from the network.
"$bin" sim --serve "$req" --service "$svc" --policy $all --report "$tmp/r.html" >/dev/null
check "--report exits 0 and writes the page" [ -s "$tmp/r.html" ]
for p in default knative rayserve static-peak static-mean; do
  check "the report has $p's row" grep -q "<td class=\"name\">$p</td>" "$tmp/r.html"
done
check "the report charts replicas, rate and both CDFs" \
  bash -c "grep -q 'id=\"svc-0-replicas\"' '$tmp/r.html' && grep -q 'id=\"svc-0-rate\"' \
'$tmp/r.html' && grep -q 'id=\"svc-0-ttft\"' '$tmp/r.html' && grep -q 'id=\"svc-0-e2e\"' \
'$tmp/r.html'"
check "the report states the replica model and the SLO" \
  grep -q 'prefill 5000 tokens/s.*startup 20.0 s' "$tmp/r.html"
check "the report concludes each comparison" grep -q '<li>default used .*x the GPU-hours of knative' \
  "$tmp/r.html"
check "the report's data holds every run" python3 -c '
import json, re, sys
page = open(sys.argv[1]).read()
d = json.loads(re.search(r"<script id=\"gpo-data\" type=\"application/json\">\n(.*?)\n</script>",
                         page, re.S).group(1))
runs = d["services"][0]["runs"]
assert [r["policy"] for r in runs] == ["default","knative","rayserve","static-peak","static-mean"]
for r in runs:
    assert len(r["t"]) == len(r["replicas"]) > 0 and r["ttft_cdf"][-1] == 1, r["policy"]
    assert all(a <= b for a, b in zip(r["e2e"], r["e2e"][1:])), "a CDF is sorted"
' "$tmp/r.html"
check "the report loads nothing from the network" \
  bash -c "! grep -Eq '<script[^>]* src=|<link ' '$tmp/r.html'"
expect "--report to a missing directory exits 1 naming it" 1 "$tmp/no/such/r.html" \
  --serve "$req" --service "$svc" --report "$tmp/no/such/r.html"

# 6. The shipped Azure hour and its spec (the README's tour): the report thins
#    the 3,500 ticks to 2,000 points keeping each policy's peak, and the CDFs
#    to 1,000 points.
conv=$data/../../sim/traces/azure_llm2023_conv.csv.gz
"$bin" sim --serve "$conv" --service "$data/../../sim/azure_conv.yaml" --policy default,rayserve \
  --json --report "$tmp/conv.html" >"$tmp/conv.json" 2>"$tmp/err"
check "the shipped conv trace and spec replay" [ $? -eq 0 ]
check "the report thins to 2000 points, keeping the peak replicas of --json" python3 -c '
import json, re, sys
page = open(sys.argv[1]).read()
d = json.loads(re.search(r"<script id=\"gpo-data\" type=\"application/json\">\n(.*?)\n</script>",
                         page, re.S).group(1))
runs = json.load(open(sys.argv[2]))
assert runs[0]["requests"] == 19366, runs[0]["requests"]
for r, j in zip(d["services"][0]["runs"], runs):
    assert len(r["t"]) == 2000 and len(r["ttft"]) == 1000, (len(r["t"]), len(r["ttft"]))
    assert max(r["replicas"]) == j["replicas_max"], (r["policy"], max(r["replicas"]))
' "$tmp/conv.html" "$tmp/conv.json"

# 7. --help tells about serving.
"$bin" sim --help >"$tmp/h"
check "--help exits 0 and shows --serve" grep -q 'usage: gpuorch sim --serve REQUESTS.csv' "$tmp/h"
check "--help lists the serving policies" \
  grep -q 'default, knative, rayserve, static-peak, static-mean' "$tmp/h"
"$bin" sim --serve "$req" --help >"$tmp/h2"
check "--help after --serve is the same help" cmp -s "$tmp/h" "$tmp/h2"

echo "1..$n"
exit $failed

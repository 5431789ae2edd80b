#!/usr/bin/env bash
# sim_cli_test.sh GPUORCH DATA_DIR - `gpuorch sim` as a user runs it: golden
# output worked out by hand, byte-identical --json, the exit codes and
# messages for bad flags, specs and trace rows, and the files it writes.
# Prints TAP.
# shellcheck source=tests/tools/sim_tap.sh
. "$(dirname "$0")/sim_tap.sh"

# 1. Golden: three jobs on one GPU, FIFO against SJF (tests/sim/three_jobs.*:
#    FIFO JCTs 100, 109, 109; SJF 100, 110, 99; worked out in the file's test).
"$bin" sim --trace "$data/three_jobs.csv" --cluster "$data/one_gpu.yaml" --policy fifo,sjf \
  --json >"$tmp/out.json" 2>"$tmp/err"
rc=$?
check "golden fifo/sjf --json exits 0" [ $rc -eq 0 ]
if diff -u "$data/three_jobs.expected.json" "$tmp/out.json" >"$tmp/diff"; then
  ok "golden fifo/sjf --json matches three_jobs.expected.json"
else
  not_ok "golden fifo/sjf --json matches three_jobs.expected.json" "$(cat "$tmp/diff")"
fi

# 2. The same inputs give byte-identical --json, for every policy.
all=default,fifo,fifo-backfill,priority,fairshare,las,spread,sjf,srtf
"$bin" sim --trace "$data/three_jobs.csv" --policy $all --json --restart-penalty 30 >"$tmp/a.json"
"$bin" sim --trace "$data/three_jobs.csv" --policy $all --json --restart-penalty 30 >"$tmp/b.json"
check "two runs give byte-identical --json" cmp -s "$tmp/a.json" "$tmp/b.json"
check "--json with several policies is an array in the order given" \
  grep -q '"policy": "srtf"' "$tmp/a.json"

# 3. Bad flags and specs exit 2 and name what is wrong.
expect "unknown flag exits 2" 2 "unknown argument '--frobnicate'" \
  --trace "$data/three_jobs.csv" --frobnicate
expect "missing --trace exits 2" 2 "--trace FILE is required" --json
expect "unknown policy exits 2 and names it" 2 "--policy: expected .*got 'fastest'" \
  --trace "$data/three_jobs.csv" --policy fifo,fastest
expect "bad --load exits 2" 2 "--load: expected a number" --trace "$data/three_jobs.csv" --load 0
expect "bad --restart-penalty exits 2" 2 "--restart-penalty: expected" \
  --trace "$data/three_jobs.csv" --restart-penalty -5
expect "an empty window exits 2" 2 "--until: expected a time after --from" \
  --trace "$data/three_jobs.csv" --from 5 --until 5
printf 'pools:\n  - name: p\n    nodes: 0\nteams:\n  - name: t\n' >"$tmp/bad.yaml"
expect "bad cluster spec exits 2 and names the field" 2 "bad.yaml.*pools\[0\]\.nodes" \
  --trace "$data/three_jobs.csv" --cluster "$tmp/bad.yaml"
expect "missing cluster spec exits 2 and names the file" 2 "nope.yaml" \
  --trace "$data/three_jobs.csv" --cluster "$tmp/nope.yaml"

# 4. A malformed trace row names the file, line and field; --skip-bad counts it.
expect "a bad trace row exits 1 naming file:line: field" 1 "bad_row.csv:3: duration_s" \
  --trace "$data/bad_row.csv"
expect "--skip-bad skips and counts it" 0 "skipped 1 bad row" --trace "$data/bad_row.csv" --skip-bad
expect "a missing trace exits 1 naming it" 1 "missing.csv" --trace "$tmp/missing.csv"

# 5. --jobs-out and --report write their files.
"$bin" sim --trace "$data/three_jobs.csv" --cluster "$data/one_gpu.yaml" --policy fifo \
  --jobs-out "$tmp/jobs.csv" --report "$tmp/r.html" >/dev/null 2>&1
check "--jobs-out writes one row per job" [ "$(wc -l <"$tmp/jobs.csv")" -eq 4 ]
check "--jobs-out gives start, end and wait (b: 100, 110, 99)" \
  grep -q '^b,everyone,1,100,110,99,1,p-0:1,0,completed$' "$tmp/jobs.csv"
check "--report writes a self-contained page" grep -q 'uPlot' "$tmp/r.html"
check "the report loads nothing from the network" \
  bash -c "! grep -Eq '<script[^>]* src=|<link ' '$tmp/r.html'"
expect "--report to a missing directory exits 1 naming it" 1 "$tmp/no/such/r.html" \
  --trace "$data/three_jobs.csv" --report "$tmp/no/such/r.html"

# 6. --load and the window. three_jobs offers (100 + 10 + 1) GPU-seconds over
#    its 2 s of submits, 55.5 GPUs: at --load 0.5 one_gpu.yaml's 1-GPU node
#    becomes 111 nodes. --from 1 --until 2 keeps job b alone.
"$bin" sim --trace "$data/three_jobs.csv" --cluster "$data/one_gpu.yaml" --load 0.5 >"$tmp/l" 2>&1
check "--load 0.5 scales the cluster to 111 GPUs" grep -Eq '^cluster GPUs +111$' "$tmp/l"
"$bin" sim --trace "$data/three_jobs.csv" --from 1 --until 2 --json >"$tmp/w" 2>&1
check "--from 1 --until 2 replays one job" grep -q '"jobs": 1,' "$tmp/w"

# 7. --help.
"$bin" sim --help >"$tmp/h" 2>&1
check "--help exits 0 and lists the policies" grep -q 'sjf and srtf are oracles' "$tmp/h"

# 8. Migration (tests/sim/fragmented.csv on two_nodes.yaml): at t=10 each
#    node holds one long 1-GPU job (y on node 0, w on node 1) and 3 free GPUs;
#    the 4-GPU job j arrives at 20. The default policy moves y to node 1 (30 s
#    of grace) and starts j on node 0 at 50; with --no-migrate j waits for y's
#    end at 1000.
"$bin" sim --trace "$data/fragmented.csv" --cluster "$data/two_nodes.yaml" \
  --jobs-out "$tmp/m.csv" >/dev/null 2>&1
check "migration: y moves to node 1 once" grep -q '^y,everyone,0,0,1000,0,1,p-1:1,1,' "$tmp/m.csv"
check "migration: j starts on node 0 after the grace" \
  grep -q '^j,everyone,20,50,150,30,4,p-0:4,0,' "$tmp/m.csv"
"$bin" sim --trace "$data/fragmented.csv" --cluster "$data/two_nodes.yaml" --no-migrate \
  --jobs-out "$tmp/n.csv" >/dev/null 2>&1
check "--no-migrate: j waits for y's end" grep -q '^j,everyone,20,1000,1100,980,4,' "$tmp/n.csv"

# 9. Policy files. What `gpuorch policy` prints is one; renamed, las's file
#    replays exactly as las. With a 1 GPU-second threshold and no grace, the
#    file's LAS evicts a (served 1 GPU-second: past it) for b at t=1, then b for
#    c at t=2, where the preset's 4 GPU-hours evict nothing.
"$bin" policy las | sed 's/^name: las$/name: las-copy/' >"$tmp/las-copy.yaml"
"$bin" sim --trace "$data/three_jobs.csv" --cluster "$data/one_gpu.yaml" \
  --policy las,"$tmp/las-copy.yaml" --json >"$tmp/p.json" 2>"$tmp/e"
check "a policy file replays as the preset it copies" \
  bash -c "python3 -c 'import json,sys; a,b=json.load(open(sys.argv[1])); \
a.pop(\"policy\"); n=b.pop(\"policy\"); sys.exit(not (a==b and n==\"las-copy\"))' '$tmp/p.json'"
printf 'base: las\nlas_thresholds_gpu_s: [1]\npreempt_grace_s: 0\n' >"$tmp/las-1s.yaml"
"$bin" sim --trace "$data/three_jobs.csv" --cluster "$data/one_gpu.yaml" \
  --policy las,"$tmp/las-1s.yaml" --jobs-out "$tmp/pj.csv" --json >"$tmp/p.json" 2>"$tmp/e"
check "a policy file's settings reach the scheduler (its LAS evicts twice)" \
  bash -c "python3 -c 'import json,sys; a,b=json.load(open(sys.argv[1])); \
sys.exit(not (a[\"preemptions\"]==0 and b[\"preemptions\"]==2))' '$tmp/p.json' && \
grep -q '^c,everyone,2,2,3,0,1,p-0:1,0,completed$' '$tmp/pj.las-1s.csv'"
printf 'base: las\nlas_thresholds_gpu_s: [100, 50]\n' >"$tmp/bad-policy.yaml"
expect "a bad policy file exits 2 naming file:line: field" 2 \
  "bad-policy.yaml:2: las_thresholds_gpu_s\[1\]: expected more than" \
  --trace "$data/three_jobs.csv" --policy "$tmp/bad-policy.yaml"
expect "a policy named twice exits 2" 2 "'las' is given twice" \
  --trace "$data/three_jobs.csv" --policy las,"$tmp/las-copy.yaml",las
"$bin" policy "$tmp/bad-policy.yaml" >/dev/null 2>"$tmp/e"
rc=$?
check "gpuorch policy FILE checks it (exit 2, the line)" \
  bash -c "[ $rc -eq 2 ] && grep -q 'bad-policy.yaml:2:' '$tmp/e'"
"$bin" policy srtf >/dev/null 2>&1
check "gpuorch policy refuses an oracle" [ $? -eq 2 ]

# 10. sim/philly_helios_trace.py on two tiny traces of its format: a job
#     philly_vc also has (its submit 1,767,821 s earlier there) takes that
#     VC; eight 512-GPU jobs are drawn among the three 512-GPU VCs only (were
#     all 11 VCs allowed, all eight would land there by chance 0.8 % of the
#     time); jobs outside Oct 1 - Nov 30 are left out; the same inputs give
#     the same bytes.
script=$(dirname "$data")/../sim/philly_helios_trace.py
mkdir -p "$tmp/tr"
{
  echo 'job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status'
  echo 'philly-1,100,50,1,,,,'
  echo 'philly-2,4062790,600,8,,,,'
  for k in 3 4 5 6 7 8 9 10; do echo "philly-$k,$((4062800 + k)),900,512,,,,"; done
  echo 'philly-11,9333180,10,1,,,,'
} | gzip -n >"$tmp/tr/philly.csv.gz"
printf 'job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status\n%s\n' \
  'phillyvc-1,2294969,600,8,,2869ce,,' | gzip -n >"$tmp/tr/philly_vc.csv.gz"
python3 "$script" --traces "$tmp/tr" "$tmp/h1.csv.gz" 2>/dev/null
python3 "$script" --traces "$tmp/tr" "$tmp/h2.csv.gz" 2>/dev/null
check "philly_helios_trace.py: a known job keeps its VC" \
  bash -c "zcat '$tmp/h1.csv.gz' | grep -qx 'philly-2,4062790,600,8,,2869ce,,'"
check "philly_helios_trace.py: 512-GPU jobs go to VCs of 512 GPUs" \
  bash -c "[ \$(zcat '$tmp/h1.csv.gz' | grep -Ec ',512,,(6214e9|b436b2|ee9e8c),,$') -eq 8 ]"
check "philly_helios_trace.py: only Oct 1 - Nov 30, byte-identical twice" \
  bash -c "[ \$(zcat '$tmp/h1.csv.gz' | wc -l) -eq 10 ] && cmp -s '$tmp/h1.csv.gz' '$tmp/h2.csv.gz'"

echo "1..$n"
exit $failed

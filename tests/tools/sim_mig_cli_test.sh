#!/usr/bin/env bash
# sim_mig_cli_test.sh GPUORCH DATA_DIR - `gpuorch sim --mig` (sim/mig_replay.h):
# every mode's figures worked out by hand on tests/sim/mig_small.csv, the
# planner turning an idle 7g GPU into 1g instances, a busy instance kept,
# no flapping under an alternating queue, and bad flags. Prints TAP.
# shellcheck source=tests/tools/sim_tap.sh
. "$(dirname "$0")/sim_tap.sh"

# field FILE ROW KEY: rows[ROW].KEY of a --json output, rounded to 0.01.
field() {
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["rows"][int(sys.argv[2])][sys.argv[3]]
print(round(v, 2) if isinstance(v, float) else v)' "$1" "$2" "$3"
}
is() { # is NAME FILE ROW KEY WANT
  local got
  got=$(field "$2" "$3" "$4")
  if [ "$got" = "$5" ]; then ok "$1"; else not_ok "$1" "$4: got $got, want $5"; fi
}

# 1. tests/sim/mig_small.csv on one node of two H100-80GB:
#      a: t=0, 100 s, 1 GPU      b, c: t=0, 100 s, 0.46 (4 slots: 3g.40gb)
#      d, e, f: t=10, 50 s, 0.1 (1 slot: 1g.10gb)
#    exclusive: a, b start at 0; at 100 c and d start, e at 150 (d's end),
#      f at 200. JCT 100, 100, 200, 140, 190, 240: 970 / 6 = 161.67; waits
#      0, 0, 100, 90, 140, 190: 86.67, p99 190.
#    shared: a on GPU 0, b and c on GPU 1 (0.92); d does not fit (1.02) and
#      waits for 100, then d, e, f share a GPU. JCT 100 x 3, 140 x 3: 120;
#      waits 0 x 3, 90 x 3: 45, p99 90.
#    static all-7g.80gb@1,all-balanced: a on the full GPU, b on GPU 1's 3g,
#      d and e on its two 1g.10gb, f on its 2g.20gb (the smallest larger),
#      c waits for the 3g until 100. JCT 100, 100, 200, 50, 50, 50: 91.67;
#      waits 100 / 6 = 16.67, p99 100.
#    static all-balanced: no full GPU, so a is unschedulable; the rest start
#      at once: JCT (100 + 100 + 3 x 50) / 5 = 70.
#    dynamic (settle 30, hold 60, interval 60, delay 5, from no instance):
#      at 30 the 7g and 3g demand has settled: GPU 0 gets a 7g, GPU 1 two
#      3g (2 repartitions), ready at 35, where a, b, c start (to 135). The
#      1g demand settles at 40 but every slot is busy. At 135 the instances
#      are idle, held until 195: then GPU 1 loses a 3g for 1g instances
#      (the fewest slots destroyed; 3 repartitions), ready at 200: d, e, f
#      run 200-250. JCT 135 x 3, 240 x 3: 187.5; waits 35 x 3, 190 x 3:
#      112.5, p99 190.
"$bin" sim --trace "$data/mig_small.csv" --nodes 1 --gpus-per-node 2 --mig none \
  --mig static:all-7g.80gb@1,all-balanced --mig static:all-balanced --mig dynamic \
  --settle 30 --hold 60 --min-interval 60 --repartition-delay 5 --json >"$tmp/s.json" 2>"$tmp/err"
check "mig_small --json exits 0" [ $? -eq 0 ]
is "exclusive: JCT average 161.67" "$tmp/s.json" 0 jct_avg_s 161.67
is "exclusive: wait average 86.67" "$tmp/s.json" 0 wait_avg_s 86.67
is "exclusive: wait p99 190" "$tmp/s.json" 0 wait_p99_s 190.0
is "shared: JCT average 120" "$tmp/s.json" 1 jct_avg_s 120.0
is "shared: wait average 45" "$tmp/s.json" 1 wait_avg_s 45.0
is "shared: wait p99 90" "$tmp/s.json" 1 wait_p99_s 90.0
is "static mix: JCT average 91.67" "$tmp/s.json" 2 jct_avg_s 91.67
is "static mix: wait average 16.67" "$tmp/s.json" 2 wait_avg_s 16.67
is "static mix: no pod unschedulable" "$tmp/s.json" 2 unschedulable 0
is "static all-balanced: the whole-GPU pod is unschedulable" "$tmp/s.json" 3 unschedulable 1
is "static all-balanced: JCT average 70 over the others" "$tmp/s.json" 3 jct_avg_s 70.0
is "dynamic: JCT average 187.5" "$tmp/s.json" 4 jct_avg_s 187.5
is "dynamic: wait average 112.5" "$tmp/s.json" 4 wait_avg_s 112.5
is "dynamic: wait p99 190" "$tmp/s.json" 4 wait_p99_s 190.0
is "dynamic: 3 repartitions" "$tmp/s.json" 4 repartitions 3
is "dynamic: nothing stuck" "$tmp/s.json" 4 stuck 0
"$bin" sim --trace "$data/mig_small.csv" --nodes 1 --gpus-per-node 2 --mig none --mig dynamic \
  --json >"$tmp/s2.json"
"$bin" sim --trace "$data/mig_small.csv" --nodes 1 --gpus-per-node 2 --mig none --mig dynamic \
  --json >"$tmp/s3.json"
check "two runs give byte-identical --json" cmp -s "$tmp/s2.json" "$tmp/s3.json"
"$bin" sim --trace "$data/mig_small.csv" --nodes 1 --gpus-per-node 2 --mig none >"$tmp/t.txt"
check "the table has a row per mode" grep -q '^none/shared  *6  *0  *120  *45  *90 ' "$tmp/t.txt"

# The workload flags, exclusive on the same two GPUs:
#    --compress 2: d, e, f arrive at 5: c and d start at 100, e at 150, f at
#      200: JCT 100, 100, 200, 145, 195, 245: 985 / 6 = 164.17.
#    --max-duration 60: a, b, c run 60 s: a, b 0-60, then c and d at 60
#      (c to 120, d to 110), e at 110, f at 120: JCT 60, 60, 120, 100, 150,
#      160: 650 / 6 = 108.33.
#    --from 10: d, e, f alone, times from their submit: d, e at once, f after
#      them: JCT 50, 50, 100: 66.67.
for w in "compress 2 164.17" "max-duration 60 108.33" "from 10 66.67"; do
  read -r flag value want <<<"$w"
  "$bin" sim --trace "$data/mig_small.csv" --nodes 1 --gpus-per-node 2 --mig none \
    --"$flag" "$value" --json >"$tmp/w.json"
  is "--$flag $value: exclusive JCT average $want" "$tmp/w.json" 0 jct_avg_s "$want"
done

# 2. An idle 7g GPU becomes 1g instances under a 1g queue: seven 0.1 pods at
#    0 on one GPU that starts as one 7g. At 30 (settled; the initial 7g has
#    been idle long) the plan destroys it and creates seven 1g.10gb, ready at
#    35: every pod runs 35-135, JCT 135.
{
  echo "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
  for i in 0 1 2 3 4 5 6; do echo "s$i,0,100,0.1,,BE,,Succeeded"; done
} >"$tmp/seven.csv"
"$bin" sim --trace "$tmp/seven.csv" --nodes 1 --gpus-per-node 1 --mig dynamic \
  --initial all-7g.80gb --json >"$tmp/seven.json"
is "idle 7g -> 1g: one repartition" "$tmp/seven.json" 0 repartitions 1
is "idle 7g -> 1g: the 7g destroyed" "$tmp/seven.json" 0 instances_destroyed 1
is "idle 7g -> 1g: seven 1g created" "$tmp/seven.json" 0 instances_created 7
is "idle 7g -> 1g: every JCT 135" "$tmp/seven.json" 0 jct_avg_s 135.0

# 3. A busy instance is never destroyed (the replay fails if a plan names
#    one): a 0.46 pod holds one 3g of "3g.40gb=2" for 1000 s while eight 1g
#    pods queue. Only the idle 3g goes (slots 4-7 or 0-3: three or four 1g),
#    so the 3g pod ends at 1000 and the 1g pods run in two rounds.
{
  echo "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
  echo "big,0,1000,0.46,,LS,,Succeeded"
  for i in 0 1 2 3 4 5 6 7; do echo "q$i,1,100,0.1,,BE,,Succeeded"; done
} >"$tmp/busy.csv"
"$bin" sim --trace "$tmp/busy.csv" --nodes 1 --gpus-per-node 1 --mig dynamic \
  --initial 3g.40gb=2 --hold 0 --min-interval 0 --json >"$tmp/busy.json" 2>"$tmp/busy.err"
check "busy 3g: the replay keeps its invariants (exit 0)" [ $? -eq 0 ]
is "busy 3g: one 3g destroyed, in one repartition" "$tmp/busy.json" 0 instances_destroyed 1
is "busy 3g: nothing stuck" "$tmp/busy.json" 0 stuck 0

# 4. No flapping: one GPU, a 0.1 pod (1g) and a 0.8 pod (7g: the whole GPU)
#    alternating every 20 s for
#    2,000 s (100 pods of 10 s). Damped (hold = interval = 300 s) the GPU
#    loses instances at most once per 300 s after its first layout: at most
#    1 + 2000 / 300 < 8 repartitions. Undamped (0, 0, 0) it follows the
#    queue.
{
  echo "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
  for i in $(seq 0 99); do
    if [ $((i % 2)) -eq 0 ]; then f=0.1; else f=0.8; fi
    echo "alt$i,$((i * 20)),10,$f,,BE,,Succeeded"
  done
} >"$tmp/alt.csv"
"$bin" sim --trace "$tmp/alt.csv" --nodes 1 --gpus-per-node 1 --mig dynamic --settle 0 \
  --json >"$tmp/damped.json"
"$bin" sim --trace "$tmp/alt.csv" --nodes 1 --gpus-per-node 1 --mig dynamic --settle 0 --hold 0 \
  --min-interval 0 --json >"$tmp/undamped.json"
d=$(field "$tmp/damped.json" 0 repartitions)
u=$(field "$tmp/undamped.json" 0 repartitions)
check "alternating queue, damped: at most 8 repartitions (got $d)" [ "$d" -le 8 ]
check "alternating queue, undamped: more ($u) than damped ($d)" [ "$u" -gt "$d" ]
is "alternating queue, damped: nothing stuck" "$tmp/damped.json" 0 stuck 0

# 5. Bad flags exit 2 and name the flag.
m="$data/mig_small.csv"
expect "unknown mode" 2 "--mig: expected none, static:LAYOUT or dynamic, got 'fast'" \
  --trace "$m" --mig fast
expect "unknown layout names the layouts" 2 "--mig static:all-9g.90gb: .*all-balanced" \
  --trace "$m" --mig static:all-9g.90gb
expect "a profile the type lacks" 2 "--mig static:1g.5gb=2: " --trace "$m" --mig static:1g.5gb=2
expect "counts that do not fit" 2 "--mig static:3g.40gb=3: " --trace "$m" --mig static:3g.40gb=3
expect "a bad count" 2 "--mig static:3g.40gb=x: .*expected a count" \
  --trace "$m" --mig static:3g.40gb=x
expect "layouts short of the cluster" 2 "cover 3 of the cluster's 32 GPUs" \
  --trace "$m" --mig static:all-balanced@3
expect "layouts beyond the cluster" 2 "more than the cluster's 32 GPUs" \
  --trace "$m" --mig static:all-balanced@20,all-7g.80gb@20
expect "a GPU type without MIG" 2 "--gpu-type: .*T4" --trace "$m" --mig none --gpu-type T4
expect "bad --fit" 2 "--fit: expected own or larger, got 'any'" --trace "$m" --mig dynamic --fit any
expect "bad --nodes" 2 "--nodes: expected" --trace "$m" --mig none --nodes 0
expect "bad --compress" 2 "--compress: expected a number in (0, 1000000\]" \
  --trace "$m" --mig none --compress 0
expect "bad --repartition-delay" 2 "--repartition-delay: expected" \
  --trace "$m" --mig dynamic --repartition-delay -1
expect "bad --initial" 2 "--initial: .*all-bogus" --trace "$m" --mig dynamic --initial all-bogus
expect "--mig without --trace" 2 "--trace FILE is required with --mig" --mig none
expect "a bad trace row exits 1 naming file:line: field" 1 "bad_row.csv:3: duration_s" \
  --trace "$data/bad_row.csv" --mig none
expect "--skip-bad skips and counts it" 0 "skipped 1 bad row" --trace "$data/bad_row.csv" \
  --mig none --skip-bad
expect "a missing trace exits 1 naming it" 1 "nope.csv" --trace "$tmp/nope.csv" --mig none
"$bin" sim --help >"$tmp/help"
check "--help describes --mig" grep -q -- '--mig MODE' "$tmp/help"

echo "1..$n"
exit $failed

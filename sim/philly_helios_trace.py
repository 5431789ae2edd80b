#!/usr/bin/env python3
"""philly_helios_trace.py - rebuild the job population of Helios' Philly replay.

Helios (SC'21) replayed Philly's jobs submitted Oct 1 - Nov 30 2017 with each
job's virtual cluster (VC). Its figures imply a mean duration of about
29,500 s; philly_vc.csv.gz (the Pollux/Sia subset) averages 11,480 s there,
while philly.csv.gz (the fullest job list) averages 29,525 s over the same
window. philly.csv.gz has no VC column, so this script gives it one:

  - a job that philly_vc.csv.gz also has (same submit time, GPUs and
    duration, the two files' clocks aligned) takes that VC;
  - every other job (26,281 of 90,954, 84 % of the GPU-hours) gets one of
    Helios' 11 VCs drawn from a hash of its id, among the VCs with at least
    as many GPUs as it asks for, weighted by --weights:
      capacity  the VC's GPUs in Helios' table;
      usage     the VC's GPU-hours in philly_vc.csv.gz over the window;
      size      the VC's share of philly_vc's jobs of the same GPU count over
                the window (the VC's GPU-hours where philly_vc has none).
    (by capacity where none of the VCs that fit has any weight). They differ
    in how unevenly the unknown jobs load the VCs.

Output: the normalized trace CSV (../shared/traces/README.md), gzip without
a timestamp, so the same inputs give the same bytes. docs/simulator.md,
"Validation against Helios", replays it on sim/helios_philly_vc.yaml.

usage: sim/philly_helios_trace.py [--traces DIR] [--weights capacity|usage|size] OUT.csv.gz
"""
import argparse
import collections
import csv
import gzip
import hashlib
import io
import os
import sys

# Helios' VCs and their nodes (8 GPUs each): sim/helios_philly_vc.yaml.
NODES = {'6214e9': 64, '7f04ca': 32, '11cb48': 16, 'b436b2': 64, 'ee9e8c': 64, 'e13805': 16,
         '6c71a0': 32, '2869ce': 16, 'ed69ec': 8, '103959': 8, '0e4a51': 32}
# Oct 1 - Nov 30 2017 in each file's seconds, and the offset between the two
# (traces README: philly t=0 is 2017-08-14 23:27:00, philly_vc's 2017-09-04 10:30:41).
PHILLY_WINDOW = (4062780, 9333180)
VC_WINDOW = (2294959, 7565359)
OFFSET = PHILLY_WINDOW[0] - VC_WINDOW[0]


def rows(path):
    with gzip.open(path, 'rt', newline='') as f:
        r = csv.reader(f)
        header = next(r)
        for row in r:
            yield header, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    here = os.path.dirname(os.path.abspath(__file__))  # sim/, beside ../shared
    ap.add_argument('--traces', default=os.path.join(here, '..', '..', 'shared', 'traces'))
    ap.add_argument('--weights', choices=('capacity', 'usage', 'size'), default='usage')
    ap.add_argument('out')
    a = ap.parse_args()

    vc_of = collections.defaultdict(list)  # (submit, gpus, duration) -> VCs, in file order
    usage = collections.Counter()
    by_size = collections.defaultdict(collections.Counter)  # GPUs -> VC -> jobs
    for _, r in rows(os.path.join(a.traces, 'philly_vc.csv.gz')):
        t = int(r[1])
        vc_of[(t + OFFSET, r[3], r[2])].append(r[5])
        if VC_WINDOW[0] <= t < VC_WINDOW[1] and r[5] in NODES:
            usage[r[5]] += int(r[2]) * int(r[3])
            by_size[int(r[3])][r[5]] += 1
    weight = {v: (n if a.weights == 'capacity' else usage[v]) for v, n in NODES.items()}

    out = io.StringIO()
    w = csv.writer(out, lineterminator='\n')
    matched = drawn = 0
    for header, r in rows(os.path.join(a.traces, 'philly.csv.gz')):
        if out.tell() == 0:
            w.writerow(header)
        t = int(r[1])
        if not PHILLY_WINDOW[0] <= t < PHILLY_WINDOW[1]:
            continue
        known = vc_of.get((t, r[3], r[2]))
        if known:
            r[5] = known.pop(0)
            matched += 1
        else:
            gpus = int(r[3])
            fit = [v for v in sorted(NODES) if NODES[v] * 8 >= gpus] or sorted(NODES)
            same = by_size.get(gpus, {})
            choices = [(v, same.get(v, 0)) for v in fit] if a.weights == 'size' else []
            if not sum(c for _, c in choices):
                choices = [(v, weight[v]) for v in fit]
            if not sum(c for _, c in choices):  # no usage known: by capacity
                choices = [(v, NODES[v]) for v in fit]
            x = int(hashlib.sha256(r[0].encode()).hexdigest()[:12], 16) % sum(c for _, c in choices)
            for v, c in choices:
                if x < c:
                    r[5] = v
                    break
                x -= c
            drawn += 1
        w.writerow(r)
    with open(a.out, 'wb') as f:
        with gzip.GzipFile(fileobj=f, mode='wb', mtime=0, filename='') as g:
            g.write(out.getvalue().encode())
    print(f'{a.out}: {matched + drawn} jobs, {matched} with their philly_vc VC, '
          f'{drawn} drawn by {a.weights}', file=sys.stderr)


if __name__ == '__main__':
    main()

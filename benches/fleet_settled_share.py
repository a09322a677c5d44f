#!/usr/bin/env python3
"""Share of a synthetic fleet's member-steps at which the benchmark
candidate's terms (`leader`, `qget_ms < 300`) and the signals' knownness
have the same outcome as at the member's step before: the steps a
simulation could step over if the evaluator said it was settled
(docs/BENCHMARKS.md, "Replay of a fleet").

Usage: fleet-history promtext MEMBERS START STEP STEPS | benches/fleet_settled_share.py
e.g.   target/release/fleet-history promtext 30 1796346000 15 5760 | python3 benches/fleet_settled_share.py
"""
import collections
import re
import sys

LINE = re.compile(r'(\w+)\{([^}]*)\} (\S+) (\d+)')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def main():
    series = collections.defaultdict(dict)
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        name, labels, value, t = m.groups()
        lab = dict(LABEL.findall(labels))
        member = (lab.get('namespace'), lab.get('pod'))
        series[member][(name, lab.get('signal', ''), int(t))] = float(value)
    total = same = 0
    for d in series.values():
        previous = None
        for t in sorted({k[2] for k in d}):
            qget = d.get(('etcd_readiness_signal_value', 'qget_ms', t))
            outcome = (
                d.get(('etcd_readiness_signal_value', 'leader', t)),
                None if qget is None else qget < 300,
                d.get(('etcd_readiness_signal_known', 'qget_ms', t)),
                d.get(('etcd_readiness_signal_known', 'leader', t)),
            )
            total += 1
            same += outcome == previous
            previous = outcome
    if total == 0:
        sys.exit("no samples on standard input")
    print(f"{same} of {total} member-steps ({same / total:.2%}) as the step before")


if __name__ == '__main__':
    main()

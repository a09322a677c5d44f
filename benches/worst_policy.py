#!/usr/bin/env python3
"""The costliest policy the limits accept: the fixture of the policy cost
benchmark (benches/policy_cost.sh) and of the worst-policy tests.

It reads the limits from crates/policy/src/policy/limits.rs, so it stays the
worst case when they change, and writes a policy with the most `let` lines
and the most checks the limits allow, every check with a hold-down and a
recovery hold, and then as many terms as fit under the size, node and
operator-chain limits. Every term reads an etcd signal that changes at every
sample (the latencies), so no evaluation can be skipped for unchanged
inputs; every check fails, so every evaluation explains every check through
the whole `let` chain. With --check BINARY it asks the exporter's own
`check` and grows the checks' terms to the largest count it accepts.

Usage: benches/worst_policy.py [--check BINARY] > worst.policy
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = os.path.join(ROOT, "crates/policy/src/policy/limits.rs")


def limits():
    text = open(LIMITS).read()

    def const(name):
        m = re.search(rf"pub const {name}: usize = ([^;]+);", text)
        return int(eval(m.group(1).replace("_", "")))  # e.g. `64 * 1024`

    return {n: const(n) for n in ("MAX_POLICY_BYTES", "MAX_CHECKS", "MAX_LETS", "MAX_NODES", "MAX_TREE_DEPTH")}


# A term true on a healthy member, of a few nodes, on signals that change
# at every sample.
TERMS = [
    "qget_ms + sget_ms < 2000",
    "max(qget_ms, sget_ms) < 1000",
    "qget_ms * 2 < sget_ms + 2000",
    "min(qget_ms, sget_ms) >= 0",
    "age(qget_ms) < 5s",
]


def policy(lim, terms_per_check):
    lines = ["# The costliest policy the limits accept (benches/worst_policy.py)."]
    # The chain's root fails, so every check that uses the chain fails and
    # is explained through it.
    lines.append("let l0 = qget_ms > 1000000 || sget_ms > 1000000")
    for i in range(1, lim["MAX_LETS"]):
        lines.append(f"let l{i} = l{i - 1} && {TERMS[i % len(TERMS)]}")
    last = lim["MAX_LETS"] - 1
    for c in range(lim["MAX_CHECKS"]):
        terms = [f"l{last}"] + [TERMS[(c + k) % len(TERMS)] for k in range(terms_per_check)]
        lines.append(f"check c{c}: " + " && ".join(terms) + " for 1h recover 1h")
    return "\n".join(lines) + "\n"


def accepted(binary, text):
    with tempfile.NamedTemporaryFile("w", suffix=".policy", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run([binary, "check", f.name], capture_output=True, text=True)
        return r.returncode == 0, r.stdout + r.stderr
    finally:
        os.unlink(f.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", metavar="BINARY", help="grow to the largest policy this exporter's `check` accepts")
    ap.add_argument("--terms", type=int, default=None, help="terms per check (default: the most that fit)")
    a = ap.parse_args()
    lim = limits()
    if a.terms is not None:
        sys.stdout.write(policy(lim, a.terms))
        return
    # Most terms per check within the size limit; then, with --check, the
    # most the compiler accepts (nodes, chain length).
    lo, hi = 0, 1
    while len(policy(lim, hi).encode()) <= lim["MAX_POLICY_BYTES"]:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(policy(lim, mid).encode()) <= lim["MAX_POLICY_BYTES"]:
            lo = mid
        else:
            hi = mid
    if a.check:
        while lo > 0 and not accepted(a.check, policy(lim, lo))[0]:
            lo -= 1
        ok, out = accepted(a.check, policy(lim, lo))
        if not ok:
            sys.exit(f"no policy of this shape is accepted:\n{out}")
        print(f"worst_policy: {lo} terms per check; {out.splitlines()[0]}", file=sys.stderr)
    sys.stdout.write(policy(lim, lo))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The costliest policy the limits accept: the fixture of the policy cost
benchmark (benches/policy_cost.sh) and of the worst-policy tests.

It reads the limits from crates/policy/src/policy/limits.rs (and the
explanation cap from eval/explain.rs), so it stays the worst case when they change,
and writes a policy with the most `let` lines and the most checks the limits
allow, every check with a hold-down and a recovery hold, every check failing
through a shared `let` of enough false terms that each check's explanation
reaches the cap, a `let` chain of the rest that every check evaluates, and
then as many distinct false terms per check as fit under the size and node
limits. Every term reads an etcd signal that changes at every sample (the
latencies), so no evaluation could be skipped for unchanged inputs. With
--check BINARY it asks the exporter's own `check` and grows the checks'
terms to the largest count it accepts.

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
EVAL = os.path.join(ROOT, "crates/policy/src/policy/eval/explain.rs")


def limits():
    text = open(LIMITS).read() + open(EVAL).read()

    def const(name):
        m = re.search(rf"pub const {name}: usize = ([^;]+);", text)
        return int(eval(m.group(1).replace("_", "")))  # e.g. `64 * 1024`

    names = (
        "MAX_POLICY_BYTES",
        "MAX_CHECKS",
        "MAX_LETS",
        "MAX_NODES",
        "MAX_EXPLANATION_BYTES",
        "MAX_REPORT_EXPLANATION_BYTES",
    )
    return {n: const(n) for n in names}


# True on a healthy member, a few nodes each, on signals that change at
# every sample: the `let` chain every check evaluates.
TRUE_TERMS = [
    "qget_ms + sget_ms < 2000",
    "max(qget_ms, sget_ms) < 1000",
    "qget_ms * 2 < sget_ms + 2000",
    "min(qget_ms, sget_ms) >= 0",
    "age(qget_ms) < 5s",
]


def false_term(j):
    sig = ("qget_ms", "sget_ms")[j % 2]
    return f"{sig} > {1000000 + j}"


def policy(lim, extra_terms):
    lines = ["# The costliest policy the limits accept (benches/worst_policy.py)."]
    # `bad` fails through every one of its terms: enough of them that the
    # explanation of every check that uses it reaches the explanation cap
    # (of one check, or of the whole report if that is smaller)
    # (each rendered term is about 40 bytes: `qget_ms > 1000007 is false
    # (qget_ms = 1.234)`).
    cap = min(lim["MAX_EXPLANATION_BYTES"], lim["MAX_REPORT_EXPLANATION_BYTES"])
    bad = cap // 40 + 1
    lines.append("let bad = " + " && ".join(false_term(j) for j in range(bad)))
    lines.append("let l0 = qget_ms < 1000000")
    for i in range(1, lim["MAX_LETS"] - 1):
        lines.append(f"let l{i} = l{i - 1} && {TRUE_TERMS[i % len(TRUE_TERMS)]}")
    last = lim["MAX_LETS"] - 2
    for c in range(lim["MAX_CHECKS"]):
        terms = ["bad", f"l{last}"] + [false_term(c * 7 + k) for k in range(extra_terms)]
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
    ap.add_argument("--terms", type=int, default=None, help="extra terms per check (default: the most that fit)")
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
        print(f"worst_policy: {lo} extra terms per check; {out.splitlines()[0]}", file=sys.stderr)
    sys.stdout.write(policy(lim, lo))


if __name__ == "__main__":
    main()

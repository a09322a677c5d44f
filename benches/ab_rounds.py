#!/usr/bin/env python3
"""Paired A/B rounds of wrk against one URL: does a second, light client
("the page", one GET every --page-every seconds) change the first URL's
throughput, p99 latency or the server's CPU per request?

On a shared 2-core machine single wrk runs of 10 s vary by 15-25 %, mostly
through slow drift (other tenants, frequency, cache state). This driver
therefore runs many *short* rounds in adjacent pairs, one round without the
page and one with it, in alternating order (off/on, on/off, ...) so that a
linear drift cancels, and compares each round with its own partner: the
figure is the geometric mean of the per-pair ratios with a 95 % bootstrap
confidence interval over the pairs. With --control both rounds of a pair run
without the page (an A/A run): its interval is the method's own resolution.

The page client starts fetching at the start of each "on" round and stops at
its end; every fetch is checked (200) and counted. The server's CPU time
(utime + stime of --server-pid, from /proc) is read before and after every
round, so the cost per request is measured too, not only the throughput.

Used by benches/http_page.sh; prints one line per round and a summary.
"""

import argparse
import math
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CLK_TCK = 100  # os.sysconf("SC_CLK_TCK") on Linux; checked in main()


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


class Pager(threading.Thread):
    """Fetches the page every `every` seconds while enabled."""

    def __init__(self, url, every):
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.enabled = threading.Event()
        self.lock = threading.Lock()
        self.ok = self.failed = 0
        self.slowest = 0.0

    def take(self):
        with self.lock:
            r = (self.ok, self.failed, self.slowest)
            self.ok = self.failed = 0
            self.slowest = 0.0
        return r

    def run(self):
        while True:
            self.enabled.wait()
            next_at = time.monotonic()
            while self.enabled.is_set():
                t = time.monotonic()
                try:
                    with urllib.request.urlopen(self.url, timeout=5) as r:
                        r.read()
                        good = r.status == 200
                except Exception:
                    good = False
                took = time.monotonic() - t
                with self.lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failed += 1
                    self.slowest = max(self.slowest, took)
                next_at += self.every
                # Sleep until the next fetch, waking early if disabled.
                while self.enabled.is_set() and time.monotonic() < next_at:
                    time.sleep(min(0.01, max(0.0, next_at - time.monotonic())))


def to_ms(v):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", v)
    if not m:
        raise ValueError(f"wrk latency {v!r}")
    x, unit = float(m.group(1)), m.group(2)
    return x * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk_start(args, url, threads, conns):
    cmd = args.client_prefix.split() + [
        "wrk", f"-t{threads}", f"-c{conns}", f"-d{args.duration}s", "--latency", url]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def wrk_result(proc, args):
    out, _ = proc.communicate(timeout=args.duration + 60)
    if proc.returncode:
        sys.exit(f"wrk failed ({proc.returncode})")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return rps, p99, requests, int(non2xx.group(1)) if non2xx else 0, errors.group(1) if errors else ""


def summarize(b, pairs, bound):
    """Print the change of 'b' rounds against their partners, with 95 % CIs."""
    rng = random.Random(1)
    for name, j in (("req/s", 0), ("p99", 1), ("server CPU per request", 2)):
        off = [p[0][j] for p in pairs]
        on = [p[1][j] for p in pairs]
        m, lo, hi = geo_ci([a / o for a, o in zip(on, off)], rng)
        print(f"{name}: '{b}' vs 'off' {m:+.1f} % (95 % CI {lo:+.1f} … {hi:+.1f} %); "
              f"medians {statistics.median(off):.4g} vs {statistics.median(on):.4g}")
        if j < 2:
            inside = -bound <= lo and hi <= bound
            print(f"  within ±{bound:g} %: {'shown' if inside else 'NOT shown'} (the whole interval "
                  f"{'lies' if inside else 'does not lie'} inside)")


def simultaneous(args):
    """Both exporters loaded at once; the page fetched from one of them,
    alternately A and B. Whatever slows the machine down during a round
    slows both, so the ratio of the two is free of it."""
    side = {"A": (args.url, args.page_url, args.server_pid),
            "B": (args.url_b, args.page_url_b, args.server_pid_b)}
    pagers = {k: Pager(v[1], args.page_every) for k, v in side.items()}
    for p in pagers.values():
        p.start()
    b = "off'" if args.control else "on"
    print(f"simultaneous: wrk -t{args.threads} -c{args.conns} -d{args.duration}s --latency on A "
          f"{args.url} and on B {args.url_b} at once; {args.pairs} rounds; page every "
          f"{args.page_every} s from A in odd rounds, from B in even ones"
          + (" (control run: the page is never fetched)" if args.control else ""), flush=True)
    pairs = []
    ab = []
    page_ok = page_failed = 0
    slowest = 0.0
    for i in range(args.pairs):
        paged = "A" if i % 2 == 0 else "B"
        other = "B" if paged == "A" else "A"
        if not args.control:
            pagers[paged].enabled.set()
        c0 = {k: cpu_ticks(v[2]) for k, v in side.items()}
        procs = {k: wrk_start(args, v[0], args.threads, args.conns) for k, v in side.items()}
        res = {k: wrk_result(p, args) for k, p in procs.items()}
        c1 = {k: cpu_ticks(v[2]) for k, v in side.items()}
        for p in pagers.values():
            p.enabled.clear()
        ok, failed, slow = pagers[paged].take()
        page_ok += ok
        page_failed += failed
        slowest = max(slowest, slow)
        row = {}
        for k in side:
            rps, p99, reqs, non2xx, errors = res[k]
            if non2xx or errors:
                sys.exit(f"a /readyz request to {k} failed ({non2xx} non-2xx, [{errors}]): the comparison is void")
            row[k] = (rps, p99, (c1[k] - c0[k]) / CLK_TCK * 1e6 / max(reqs, 1))
        pairs.append((row[other], row[paged]))
        ab.append(tuple(row["A"][j] / row["B"][j] for j in range(3)))
        print(f"round {i + 1:2} page on {paged if not args.control else '-'}: "
              + "  ".join(f"{k}: req/s={row[k][0]:7.0f} p99_ms={row[k][1]:6.3f} cpu_us/req={row[k][2]:6.2f}"
                          for k in side)
              + (f"  pages={ok} page_failed={failed}" if not args.control else ""), flush=True)
    print()
    summarize(b, pairs, args.bound)
    m, lo, hi = geo_ci([r[0] for r in ab], random.Random(2))
    print(f"(A vs B whatever the page, req/s: {m:+.1f} %, 95 % CI {lo:+.1f} … {hi:+.1f} %: "
          "a difference between the two set-ups, cancelled by the alternation)")
    if args.control:
        # A control run of two set-ups that differ on purpose (e.g. A with a
        # candidate policy, B without, benches/candidate_cost.sh): A vs B is
        # the figure, for every measure.
        for name, j in (("p99", 1), ("server CPU per request", 2)):
            m, lo, hi = geo_ci([r[j] for r in ab], random.Random(3 + j))
            print(f"(A vs B whatever the page, {name}: {m:+.1f} %, 95 % CI {lo:+.1f} … {hi:+.1f} %)")
    if not args.control:
        print(f"page fetches: {page_ok} answered 200, {page_failed} failed, slowest {slowest * 1000:.1f} ms")
        if page_failed:
            sys.exit("a page fetch failed")


def geo_ci(ratios, rng, n=10000):
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    boots = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(n))
    lo, hi = boots[int(0.025 * n)], boots[int(0.975 * n) - 1]
    return [100 * (math.exp(x) - 1) for x in (mean, lo, hi)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--page-url", required=True)
    ap.add_argument("--page-every", type=float, default=1.0)
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--duration", type=int, default=3, help="seconds per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--client-prefix", default="", help="e.g. 'taskset -c 1'")
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--control", action="store_true", help="A/A: never enable the page")
    ap.add_argument("--url-b", help="a second, identical exporter: load both at once (see simultaneous())")
    ap.add_argument("--page-url-b")
    ap.add_argument("--server-pid-b", type=int)
    ap.add_argument("--bound", type=float, default=5.0, help="the claim to test, in %%")
    args = ap.parse_args()
    if os.sysconf("SC_CLK_TCK") != CLK_TCK:
        sys.exit("unexpected SC_CLK_TCK")

    if args.client_prefix:
        # The page client runs on the client CPU too (threads started later
        # inherit this).
        subprocess.run(["taskset", "-p", "-c", args.client_prefix.split()[-1], str(os.getpid())],
                       check=True, capture_output=True)
    if args.url_b:
        if not (args.page_url_b and args.server_pid_b):
            sys.exit("--url-b needs --page-url-b and --server-pid-b")
        simultaneous(args)
        return
    pager = Pager(args.page_url, args.page_every)
    pager.start()
    b = "off'" if args.control else "on"
    print(f"wrk -t{args.threads} -c{args.conns} -d{args.duration}s --latency {args.url}; "
          f"{args.pairs} pairs, alternating order; page every {args.page_every} s in '{b}' rounds"
          + (" (control run: the page is never fetched)" if args.control else ""), flush=True)
    rows = {"off": [], "on": []}
    page_ok = page_failed = 0
    slowest = 0.0
    for i in range(args.pairs):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for mode in order:
            if mode == "on" and not args.control:
                pager.enabled.set()
            c0 = cpu_ticks(args.server_pid)
            rps, p99, reqs, non2xx, errors = wrk_result(
                wrk_start(args, args.url, args.threads, args.conns), args)
            c1 = cpu_ticks(args.server_pid)
            pager.enabled.clear()
            ok, failed, slow = pager.take()
            page_ok += ok
            page_failed += failed
            slowest = max(slowest, slow)
            cpu_us = (c1 - c0) / CLK_TCK * 1e6 / max(reqs, 1)
            rows[mode].append((rps, p99, cpu_us))
            label = b if mode == "on" else "off"
            print(f"pair {i + 1:2} {label:4}: req/s={rps:9.0f} p99_ms={p99:7.3f} server_cpu_us/req={cpu_us:6.2f}"
                  f" non2xx={non2xx}" + (f" socket_errors=[{errors}]" if errors else "")
                  + (f" pages={ok} page_failed={failed}" if mode == "on" and not args.control else ""),
                  flush=True)
            if non2xx or errors:
                sys.exit("a /readyz request failed: the comparison is void")
    print()
    summarize(b, list(zip(rows["off"], rows["on"])), args.bound)
    if not args.control:
        print(f"page fetches: {page_ok} answered 200, {page_failed} failed, slowest {slowest * 1000:.1f} ms")
        if page_failed:
            sys.exit("a page fetch failed")


if __name__ == "__main__":
    main()

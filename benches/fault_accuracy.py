#!/usr/bin/env python3
"""Decision accuracy under faults: the exporter's /readyz and etcd's own
/health, side by side, against the truth, on a real 3-member etcd 3.4
cluster under continuous writes.

Topology (created here, removed on exit, whatever happens): one network
namespace per member plus a hub namespace with a bridge; each member's veth
is a port of the bridge, and one veth pair joins the host to it. Members
listen on their namespace's own address (10.213.N.k:2379/2380); the
exporters (one per member, DEFAULT flags and the default policy, release
binary) and the probers run on the host and reach the members through the
host veth. No traffic leaves the host's own namespaces.

Fault script (seconds after the start of the script, 72 s in all):
   0 steady
   5 the leader is SIGKILLed            13 it is restarted
  21 two members SIGKILLed (quorum lost) 29 both restarted
  37 one follower SIGSTOPped            47 SIGCONT
  53 one follower cut off from its peers (iptables DROP to/from the peers'
     addresses inside its namespace; its clients still reach it)
  63 partition healed                   72 end
Each fault lands half a probe tick (50 ms, --fault-offset) after its
instant, when no probe of that tick is still in flight: injected right after
a tick, a fault raced the probes just sent, and a truth read sent before the
fault that the fault then killed counted the tick as "cannot serve", while
the exporter had (correctly) answered before the fault.
(tc netem is what a partition would use elsewhere; this kernel has neither
the netem qdisc nor tc classifiers, see docs/BENCHMARKS.md.)

Every 100 ms, for each member, three independent probes are issued in
parallel and their result is attributed to the instant they were issued:
  truth    a linearizable Range through that member (etcd's JSON gateway,
           POST /v3/kv/range) answered within 1 s
  exporter GET /readyz of that member's exporter answered 200 within 1 s
  health   GET /health of that member answered 200 {"health":"true"} within 1 s
False-ready: a probe said ready while the truth said it cannot serve;
false-unready: the reverse (each tick counts 0.1 s). Mean decision lag =
(false-ready + false-unready) / number of truth transitions.

Cost, measured in the same run: raft index growth caused by the exporters
(the leader's raft index over 10 s with the three exporters running minus
over 10 s without them, both with no writer and no probe), the exporters'
requests to etcd per second (their etcd_readiness_source_requests_total
counter, when the binary has it) and their CPU seconds per second
(/proc/PID/stat) over the fault script.

Usage (root: it creates network namespaces):
  benches/fault_accuracy.py [--exporter PATH] [--json OUT]
"""

import argparse
import base64
import concurrent.futures as cf
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

TICK = 0.1
SCRIPT_LEN = 72.0
PHASES = [
    (0, "steady"),
    (5, "leader SIGKILL"),
    (13, "leader restart"),
    (21, "quorum lost (2 SIGKILL)"),
    (29, "quorum back (2 restarts)"),
    (37, "follower SIGSTOP"),
    (47, "follower SIGCONT"),
    (53, "follower partitioned"),
    (63, "partition healed"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def http(method, url, body=None, timeout=1.0):
    """(status, body) or (None, error) — never raises."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(65536).decode(errors="replace")
    except urllib.error.HTTPError as e:
        try:
            return e.code, e.read(65536).decode(errors="replace")
        except Exception:
            return e.code, ""
    except Exception as e:  # timeouts, refused, reset
        return None, str(e)


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Net:
    """The namespaces, bridge and veths; `close` removes them all."""

    def __init__(self):
        tag = f"era{os.getpid() % 100000}"
        self.tag = tag
        self.hub = f"{tag}h"
        self.ns = [f"{tag}m{k}" for k in (1, 2, 3)]
        self.host_if = f"{tag}x"
        octet = 1 + os.getpid() % 250
        self.net = f"10.213.{octet}"
        self.host_ip = f"{self.net}.100"
        self.ips = [f"{self.net}.{k}" for k in (1, 2, 3)]
        self.created = []

    def up(self):
        sh("ip", "netns", "add", self.hub)
        self.created.append(self.hub)
        sh("ip", "-n", self.hub, "link", "set", "lo", "up")
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        for k, (ns, ip) in enumerate(zip(self.ns, self.ips), start=1):
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.hub, "link", "add", f"v{k}", "type", "veth",
               "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.hub, "link", "set", f"v{k}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "vh",
           "netns", self.hub)
        sh("ip", "-n", self.hub, "link", "set", "vh", "master", "br0", "up")
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
        sh("ip", "link", "set", self.host_if, "up")

    def partition(self, k):
        """Cut member k (0-based) off from its peers, both directions."""
        ns = self.ns[k]
        for j, ip in enumerate(self.ips):
            if j == k:
                continue
            sh("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
            sh("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP")

    def heal(self, k):
        sh("ip", "netns", "exec", self.ns[k], "iptables", "-F", check=False)

    def close(self):
        sh("ip", "link", "del", self.host_if, check=False)
        for ns in reversed(self.created):
            sh("ip", "netns", "del", ns, check=False)
        self.created = []


class Cluster:
    def __init__(self, net, workdir):
        self.net = net
        self.dir = workdir
        self.procs = [None, None, None]
        self.stopped = [False, False, False]
        self.initial = ",".join(
            f"m{k + 1}=http://{ip}:2380" for k, ip in enumerate(net.ips))

    def url(self, k):
        return f"http://{self.net.ips[k]}:2379"

    def start(self, k):
        ip = self.net.ips[k]
        log = open(os.path.join(self.dir, f"m{k + 1}.log"), "ab")
        self.procs[k] = subprocess.Popen(
            ["ip", "netns", "exec", self.net.ns[k], "etcd",
             "--name", f"m{k + 1}", "--data-dir", os.path.join(self.dir, f"m{k + 1}"),
             "--listen-client-urls", f"http://{ip}:2379",
             "--advertise-client-urls", f"http://{ip}:2379",
             "--listen-peer-urls", f"http://{ip}:2380",
             "--initial-advertise-peer-urls", f"http://{ip}:2380",
             "--initial-cluster", self.initial, "--initial-cluster-state", "new"],
            stdout=log, stderr=log)
        self.stopped[k] = False

    def kill(self, k):
        p = self.procs[k]
        if p is not None:
            if self.stopped[k]:
                os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
        self.procs[k] = None
        self.stopped[k] = False

    def stop(self, k):
        os.kill(self.procs[k].pid, signal.SIGSTOP)
        self.stopped[k] = True

    def cont(self, k):
        os.kill(self.procs[k].pid, signal.SIGCONT)
        self.stopped[k] = False

    def status(self, k, timeout=1.0):
        code, body = http("POST", self.url(k) + "/v3/maintenance/status", {}, timeout)
        if code != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def leader(self):
        for k in range(3):
            st = self.status(k)
            if st and st.get("leader") and st.get("leader") == st["header"].get("member_id"):
                return k
        return None

    def raft_index(self, k):
        st = self.status(k)
        return int(st.get("raftIndex", 0)) if st else None

    def close(self):
        for k in range(3):
            try:
                self.kill(k)
            except Exception:
                pass


def wait(cond, deadline, what):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests_total(port):
    code, body = http("GET", f"http://127.0.0.1:{port}/metrics", timeout=2.0)
    if code != 200:
        return None
    total, seen = 0.0, False
    for line in body.splitlines():
        if line.startswith("etcd_readiness_source_requests_total{") and 'source="etcd"' in line:
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def phase_of(t):
    name = PHASES[0][1]
    for start, n in PHASES:
        if t >= start:
            name = n
    return name


def run(args):
    if os.geteuid() != 0:
        sys.exit("needs root (it creates network namespaces)")
    exporter = args.exporter
    workdir = tempfile.mkdtemp(prefix="fault_accuracy.")
    net = Net()
    cluster = Cluster(net, workdir)
    exporters = []
    stop_writer = threading.Event()

    def cleanup(*_):
        stop_writer.set()
        for p in exporters:
            try:
                p.kill()
                p.wait()
            except Exception:
                pass
        cluster.close()
        for k in range(3):
            net.heal(k)
        net.close()
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            for name in os.listdir(workdir):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(workdir, name), args.keep_logs)
        subprocess.run(["rm", "-rf", workdir])

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        net.up()
        for k in range(3):
            cluster.start(k)
        wait(lambda: all(http("GET", cluster.url(k) + "/health")[0] == 200 for k in range(3)),
             60, "a healthy cluster")
        wait(lambda: cluster.leader() is not None, 30, "a leader")
        time.sleep(2)

        # Raft index growth caused by the exporters: idle vs exporters only.
        def growth(seconds):
            k = cluster.leader()
            a = cluster.raft_index(k)
            time.sleep(seconds)
            b = cluster.raft_index(k)
            return b - a
        idle = growth(10)
        ports = [free_port() for _ in range(3)]
        for k in range(3):
            log = open(os.path.join(workdir, f"exporter{k + 1}.log"), "ab")
            exporters.append(subprocess.Popen(
                [exporter, "--etcd.endpoint", cluster.url(k),
                 "--web.listen-address", f"127.0.0.1:{ports[k]}"] + args.exporter_arg,
                stdout=log, stderr=log))
        wait(lambda: all(http("GET", f"http://127.0.0.1:{p}/readyz")[0] == 200 for p in ports),
             60, "every exporter ready")
        with_exporters = growth(10)

        # Continuous writes, round robin, 20 per second.
        def writer():
            i = 0
            while not stop_writer.is_set():
                k = i % 3
                http("POST", cluster.url(k) + "/v3/kv/put",
                     {"key": b64("bench/w"), "value": b64(str(i))}, timeout=0.5)
                i += 1
                stop_writer.wait(0.05)
        threading.Thread(target=writer, daemon=True).start()
        time.sleep(3)

        n_ticks = int(SCRIPT_LEN / TICK)
        res = {kind: [[None] * n_ticks for _ in range(3)]
               for kind in ("truth", "exporter", "health")}
        latency = [[None] * n_ticks for _ in range(3)]

        def probe(kind, k, i):
            if kind == "truth":
                sent = time.monotonic()
                code, _ = http("POST", cluster.url(k) + "/v3/kv/range",
                               {"key": b64("bench/probe")}, timeout=1.0)
                ok = code == 200
                latency[k][i] = time.monotonic() - sent
            elif kind == "exporter":
                code, _ = http("GET", f"http://127.0.0.1:{ports[k]}/readyz", timeout=1.0)
                ok = code == 200
            else:
                code, body = http("GET", cluster.url(k) + "/health", timeout=1.0)
                ok = code == 200 and '"true"' in body
            res[kind][k][i] = ok

        events = []
        roles = {}

        def faults(t0):
            def at(t, offset=args.fault_offset):
                d = t0 + t + offset - time.monotonic()
                if d > 0:
                    time.sleep(d)

            def before(t):
                # Roles are chosen half a second ahead, so that the fault
                # itself lands at its instant.
                at(t, -0.5)

            def note(what):
                events.append((round(time.monotonic() - t0, 2), what))

            def follower_at(t):
                # A follower, chosen half a second before t.
                before(t)
                lead = cluster.leader()
                return next(j for j in range(3) if j != lead)
            before(5)
            lead = cluster.leader()
            lead = 0 if lead is None else lead
            roles["killed_leader"] = lead + 1
            at(5)
            cluster.kill(lead)
            note(f"SIGKILL leader m{lead + 1}")
            at(13)
            cluster.start(lead)
            note(f"restart m{lead + 1}")
            before(21)
            lead = cluster.leader()
            # Kill the leader and one follower; the other follower survives.
            victims = [lead if lead is not None else 0]
            victims.append(next(j for j in range(3) if j not in victims))
            at(21)
            for j in victims:
                cluster.kill(j)
            roles["quorum_victims"] = [j + 1 for j in victims]
            note(f"SIGKILL m{victims[0] + 1} and m{victims[1] + 1}")
            at(29)
            for j in victims:
                cluster.start(j)
            note("restart both")
            f = follower_at(37)
            roles["stopped"] = f + 1
            at(37)
            cluster.stop(f)
            note(f"SIGSTOP follower m{f + 1}")
            at(47)
            cluster.cont(f)
            note(f"SIGCONT m{f + 1}")
            f = follower_at(53)
            roles["partitioned"] = f + 1
            at(53)
            net.partition(f)
            note(f"partition follower m{f + 1}")
            at(63)
            net.heal(f)
            note(f"heal m{f + 1}")

        pids = [p.pid for p in exporters]
        cpu0 = [cpu_seconds(p) for p in pids]
        req0 = [requests_total(p) for p in ports]
        load0 = os.getloadavg()
        pool = cf.ThreadPoolExecutor(max_workers=128)
        t0 = time.monotonic()
        t0_wall = time.time()
        ft = threading.Thread(target=faults, args=(t0,), daemon=True)
        ft.start()
        for i in range(n_ticks):
            d = t0 + i * TICK - time.monotonic()
            if d > 0:
                time.sleep(d)
            for k in range(3):
                for kind in ("truth", "exporter", "health"):
                    pool.submit(probe, kind, k, i)
        time.sleep(max(0.0, t0 + SCRIPT_LEN - time.monotonic()))
        elapsed = time.monotonic() - t0
        cpu1 = [cpu_seconds(p) for p in pids]
        req1 = [requests_total(p) for p in ports]
        load1 = os.getloadavg()
        pool.shutdown(wait=True)
        ft.join(timeout=5)
        stop_writer.set()
    finally:
        cleanup()

    # Scoring.
    out = {"ticks": n_ticks, "events": events, "roles": roles, "t0_unix": t0_wall,
           "raft_index_growth": {"idle_10s": idle, "exporters_10s": with_exporters,
                                 "caused_by_exporters": with_exporters - idle},
           "exporter_cpu_s_per_s": sum(b - a for a, b in zip(cpu0, cpu1)) / elapsed / 3,
           "loadavg_start": load0, "loadavg_end": load1}
    if all(r is not None for r in req0 + req1):
        out["exporter_requests_per_s"] = sum(b - a for a, b in zip(req0, req1)) / elapsed / 3
    transitions = 0
    for k in range(3):
        tr = res["truth"][k]
        for i in range(1, n_ticks):
            if tr[i] != tr[i - 1]:
                transitions += 1
    out["truth_transitions"] = transitions
    # Foresight: the truth at t is whether a read sent at t answers within
    # 1 s, so after an outage it turns true when the first read that will be
    # answered is *sent*; nobody can see that before its answer arrives. A
    # probe's false-unready ticks between that send and that answer are time
    # no probe without foresight avoids ("unavoidable" below).
    rises = []  # (member, tick of the first answered read, ticks until its answer)
    for k in range(3):
        tr = res["truth"][k]
        for i in range(1, n_ticks):
            if tr[i] and not tr[i - 1] and latency[k][i] is not None:
                rises.append((k, i, int(min(latency[k][i], 1.0) / TICK + 0.999)))
    out["truth_latency_ms"] = [[None if v is None else round(v * 1000) for v in latency[k]]
                               for k in range(3)]
    # The raw series, one character per tick: 1 ready, 0 not, ? no answer recorded.
    out["series"] = {kind: ["".join("?" if v is None else "1" if v else "0" for v in res[kind][k])
                            for k in range(3)] for kind in res}
    for kind in ("exporter", "health"):
        fr = fu = 0
        per_phase = {name: [0, 0] for _, name in PHASES}
        for k in range(3):
            for i in range(n_ticks):
                truth, said = res["truth"][k][i], res[kind][k][i]
                ph = phase_of(i * TICK)
                if said and not truth:
                    fr += 1
                    per_phase[ph][0] += 1
                elif truth and not said:
                    fu += 1
                    per_phase[ph][1] += 1
        unavoidable = sum(
            1 for k, i, n in rises for j in range(i, min(i + n, n_ticks))
            if res["truth"][k][j] and not res[kind][k][j])
        out[kind] = {
            "unavoidable_unready_s": round(unavoidable * TICK, 1),
            "lag_beyond_foresight_s": round((fr + fu - unavoidable) * TICK / max(transitions, 1), 3),
            "false_ready_s": round(fr * TICK, 1),
            "false_unready_s": round(fu * TICK, 1),
            "mean_lag_s": round((fr + fu) * TICK / max(transitions, 1), 3),
            "per_phase": {n: [round(a * TICK, 1), round(b * TICK, 1)] for n, (a, b) in per_phase.items()},
        }
    return out


def report(out):
    print(f"fault script {SCRIPT_LEN:.0f} s, 3 members, probes every {TICK * 1000:.0f} ms; "
          f"{out['truth_transitions']} truth transitions")
    print("events: " + "; ".join(f"{t:.1f}s {w}" for t, w in out["events"]))
    print()
    print("| probe | false-ready | false-unready | mean lag per truth transition |")
    print("|---|---|---|---|")
    for kind, name in (("health", "etcd 3.4 `/health`"), ("exporter", "exporter `/readyz`, defaults")):
        r = out[kind]
        print(f"| {name} | {r['false_ready_s']:.1f} s | {r['false_unready_s']:.1f} s | {r['mean_lag_s']:.2f} s |")
    print()
    print("| phase | exporter false-ready | exporter false-unready | /health false-ready | /health false-unready |")
    print("|---|---|---|---|---|")
    for _, n in PHASES:
        e, h = out["exporter"]["per_phase"][n], out["health"]["per_phase"][n]
        print(f"| {n} | {e[0]:.1f} s | {e[1]:.1f} s | {h[0]:.1f} s | {h[1]:.1f} s |")
    print()
    r = out["exporter"]
    print(f"exporter false-unready no probe without foresight can avoid (between the send and the answer")
    print(f"of the first answered truth read after each outage): {r['unavoidable_unready_s']:.1f} s; "
          f"lag beyond it: {r['lag_beyond_foresight_s']:.2f} s per transition")
    print("(/health is synchronous: it waits for the same future as the truth read, so it needs no foresight)")
    g = out["raft_index_growth"]
    print(f"raft index growth over 10 s: idle {g['idle_10s']}, with the 3 exporters {g['exporters_10s']} "
          f"-> caused by the exporters: {g['caused_by_exporters']}")
    rps = out.get("exporter_requests_per_s")
    print("exporter requests to etcd: " + (f"{rps:.1f}/s per exporter" if rps is not None
                                           else "n/a (binary has no etcd_readiness_source_requests_total)"))
    print(f"exporter CPU: {out['exporter_cpu_s_per_s']:.4f} s/s per exporter")
    print(f"load average: start {out['loadavg_start'][0]:.2f}, end {out['loadavg_end'][0]:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exporter", default=os.path.join(ROOT, "target/release/etcd-readiness-exporter"))
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--fault-offset", type=float, default=TICK / 2, metavar="SECONDS",
                    help="inject each fault this long after its probe tick (default: half a "
                         "tick, so no probe is in flight when it lands; 0 reproduces the runs "
                         "before this option)")
    ap.add_argument("--keep-logs", metavar="DIR",
                    help="copy the exporters' and members' logs here before cleaning up")
    ap.add_argument("--exporter-arg", action="append", default=[],
                    help="extra exporter flag (for experiments; the recorded runs use none)")
    args = ap.parse_args()
    out = run(args)
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

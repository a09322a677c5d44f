#!/usr/bin/env python3
"""Decision accuracy under faults: the exporter's /readyz beside etcd's own
probes (/readyz from 3.5.11, /health), against the truth, on a real
3-member etcd cluster under continuous writes.

Topology (created here, removed on exit, whatever happens): one network
namespace per member plus a hub namespace with a bridge; each member's veth
is a port of the bridge, and one veth pair joins the host to it. Members
listen on their namespace's own address (10.213.N.k:2379/2380); the
exporters (one per member, DEFAULT flags and the default policy, release
binary) and the probers run on the host and reach the members through the
host veth. No traffic leaves the host's own namespaces. `--etcd PATH` picks
the etcd binary (default: `etcd` on PATH, bookworm's 3.4.23).

Fault script (seconds after the start of the script, 88 s in all):
   0 steady
   5 the leader is SIGKILLed            13 it is restarted
  23 two members SIGKILLed (quorum lost) 31 both restarted
  41 one follower SIGSTOPped (10 s)     51 SIGCONT
  59 the leader cut off from its peers (iptables DROP to/from the peers'
     addresses inside its namespace; its clients still reach it)
  71 partition healed                   88 end
Each fault lands half a probe tick (50 ms, --fault-offset) after its
instant. (tc netem is what a partition would use elsewhere; this kernel has
neither the netem qdisc nor tc classifiers, see docs/BENCHMARKS.md.)

Every 100 ms, for each member, independent probes are issued in parallel:
  truth    a linearizable Range through that member (etcd's JSON gateway,
           POST /v3/kv/range) answered within 1 s; it is attributed to the
           instant it was SENT: can a request sent now be served?
  exporter GET /readyz of that member's exporter answered 200 within 1 s
  readyz   GET /readyz of the member itself (etcd >= 3.5.11) answered 200
  health   GET /health of the member answered 200 {"health":"true"}
The probes' answers count from the instant they ARRIVED (a probe that gets
no answer within 1 s arrives as "not ready" 1 s after it was sent), and hold
until the next answer arrives: that is when a kubelet acts on them. At each
tick the state of every probe is compared with the truth of that tick.
False-ready: a probe's state said ready while the truth said it cannot
serve; false-unready: the reverse (each tick counts 0.1 s). Mean decision
lag = (false-ready + false-unready) / number of truth transitions.

Cost, measured in the same run: raft index growth caused by the exporters
(the leader's raft index over 10 s with the three exporters running minus
over 10 s without them, both with no writer and no probe), the exporters'
requests to etcd per second (their etcd_readiness_source_requests_total
counter) and their CPU seconds per second (/proc/PID/stat) over the fault
script.

Usage (root: it creates network namespaces):
  benches/fault_accuracy.py [--etcd PATH] [--exporter PATH] [--json OUT]
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
SCRIPT_LEN = 88.0
PHASES = [
    (0, "steady"),
    (5, "leader SIGKILL"),
    (13, "leader restart"),
    (23, "quorum lost (2 SIGKILL)"),
    (31, "quorum back (2 restarts)"),
    (41, "follower SIGSTOP"),
    (51, "follower SIGCONT"),
    (59, "leader partitioned"),
    (71, "partition healed"),
]
PROBES = ("exporter", "readyz", "health")

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
    def __init__(self, net, workdir, etcd):
        self.etcd = etcd
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
            ["ip", "netns", "exec", self.net.ns[k], self.etcd,
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
        # The member's own gRPC calls and, with --member-metrics, the GETs of
        # its metrics endpoint (one per etcd_metrics round): both load it.
        if (line.startswith("etcd_readiness_source_requests_total{") and 'source="etcd"' in line) or (
                line.startswith("etcd_readiness_sample_duration_seconds_count{")
                and 'source="etcd_metrics"' in line):
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
    cluster = Cluster(net, workdir, args.etcd)
    version = sh(args.etcd, "--version").stdout.split("\n")[0].strip()
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
        # etcd's own /readyz exists from 3.5.11; older members answer 404.
        has_readyz = http("GET", cluster.url(0) + "/readyz")[0] == 200
        kinds = ["truth"] + [k for k in PROBES if k != "readyz" or has_readyz]

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
            member_metrics = (["--etcd.metrics-url", cluster.url(k) + "/metrics"]
                              if args.member_metrics else [])
            exporters.append(subprocess.Popen(
                [exporter, "--etcd.endpoint", cluster.url(k),
                 "--web.listen-address", f"127.0.0.1:{ports[k]}"] + member_metrics
                + args.exporter_arg,
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
        # truth: per tick, by send time. Probes: (arrived, ok) per member.
        truth = [[None] * n_ticks for _ in range(3)]
        arrivals = {kind: [[] for _ in range(3)] for kind in kinds if kind != "truth"}
        latency = [[None] * n_ticks for _ in range(3)]
        lock = threading.Lock()

        def probe(kind, k, i):
            sent = time.monotonic()
            if kind == "truth":
                code, _ = http("POST", cluster.url(k) + "/v3/kv/range",
                               {"key": b64("bench/probe")}, timeout=1.0)
                ok = code == 200
                took = time.monotonic() - sent
                latency[k][i] = took
                truth[k][i] = ok and took <= 1.0
                return
            why = ""
            if kind == "exporter":
                # ?verbose: the same verdict, and the checks that failed.
                code, body = http("GET", f"http://127.0.0.1:{ports[k]}/readyz?verbose", timeout=1.0)
                ok = code == 200
                if code == 503:
                    why = ",".join(line[3:].split(" ")[0] for line in body.splitlines()
                                   if line.startswith("[-]"))
            elif kind == "readyz":
                code, _ = http("GET", cluster.url(k) + "/readyz", timeout=1.0)
                ok = code == 200
            else:
                code, body = http("GET", cluster.url(k) + "/health", timeout=1.0)
                ok = code == 200 and '"true"' in body
            arrived = time.monotonic()
            if arrived - sent > 1.0:
                # No answer within 1 s: the kubelet's timeout fired at 1 s.
                ok, arrived, why = False, sent + 1.0, "no answer"
            with lock:
                arrivals[kind][k].append((arrived - t0, ok, why))

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

            def leader_at(t):
                # The leader (m1 if none is known), chosen half a second before t.
                before(t)
                lead = cluster.leader()
                return 0 if lead is None else lead
            lead = leader_at(5)
            roles["killed_leader"] = lead + 1
            at(5)
            cluster.kill(lead)
            note(f"SIGKILL leader m{lead + 1}")
            at(13)
            cluster.start(lead)
            note(f"restart m{lead + 1}")
            # Kill the leader and one follower; the other follower survives.
            victims = [leader_at(23)]
            victims.append(next(j for j in range(3) if j not in victims))
            at(23)
            for j in victims:
                cluster.kill(j)
            roles["quorum_victims"] = [j + 1 for j in victims]
            note(f"SIGKILL m{victims[0] + 1} and m{victims[1] + 1}")
            at(31)
            for j in victims:
                cluster.start(j)
            note("restart both")
            f = follower_at(41)
            roles["stopped"] = f + 1
            at(41)
            cluster.stop(f)
            note(f"SIGSTOP follower m{f + 1}")
            at(51)
            cluster.cont(f)
            note(f"SIGCONT m{f + 1}")
            lead = leader_at(59)
            roles["partitioned_leader"] = lead + 1
            at(59)
            net.partition(lead)
            note(f"partition leader m{lead + 1}")
            at(71)
            net.heal(lead)
            note(f"heal m{lead + 1}")

        pids = [p.pid for p in exporters]
        cpu0 = [cpu_seconds(p) for p in pids]
        req0 = [requests_total(p) for p in ports]
        load0 = os.getloadavg()
        pool = cf.ThreadPoolExecutor(max_workers=192)
        t0 = time.monotonic()
        t0_wall = time.time()
        ft = threading.Thread(target=faults, args=(t0,), daemon=True)
        ft.start()
        for i in range(n_ticks):
            d = t0 + i * TICK - time.monotonic()
            if d > 0:
                time.sleep(d)
            for k in range(3):
                for kind in kinds:
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
    out = {"etcd": version, "member_metrics": args.member_metrics, "ticks": n_ticks, "events": events, "roles": roles, "t0_unix": t0_wall,
           "probes": [k for k in kinds if k != "truth"],
           "raft_index_growth": {"idle_10s": idle, "exporters_10s": with_exporters,
                                 "caused_by_exporters": with_exporters - idle},
           "exporter_cpu_s_per_s": sum(b - a for a, b in zip(cpu0, cpu1)) / elapsed / 3,
           "loadavg_start": load0, "loadavg_end": load1}
    if all(r is not None for r in req0 + req1):
        out["exporter_requests_per_s"] = sum(b - a for a, b in zip(req0, req1)) / elapsed / 3
    transitions = 0
    for k in range(3):
        tr = truth[k]
        for i in range(1, n_ticks):
            if tr[i] != tr[i - 1]:
                transitions += 1
    out["truth_transitions"] = transitions
    out["truth_latency_ms"] = [[None if v is None else round(v * 1000) for v in latency[k]]
                               for k in range(3)]

    def state(kind, k):
        """The probe's state at each tick: its latest answer arrived by then
        (None before the first answer)."""
        seq = sorted(arrivals[kind][k])
        states, whys, j, cur, why = [], [], 0, None, ""
        for i in range(n_ticks):
            t = i * TICK
            while j < len(seq) and seq[j][0] <= t:
                cur, why = seq[j][1], seq[j][2]
                j += 1
            states.append(cur)
            whys.append(why)
        return states, whys
    said, whys = {}, {}
    for kind in arrivals:
        pairs = [state(kind, k) for k in range(3)]
        said[kind] = [p[0] for p in pairs]
        whys[kind] = [p[1] for p in pairs]
    # The raw series, one character per tick: 1 ready, 0 not, ? unknown.
    series = {"truth": truth, **said}
    out["series"] = {kind: ["".join("?" if v is None else "1" if v else "0" for v in series[kind][k])
                            for k in range(3)] for kind in series}
    for kind in said:
        fr = fu = 0
        per_phase = {name: [0, 0] for _, name in PHASES}
        # What the probe said in its false-unready ticks (the exporter: the
        # failing checks), in seconds.
        fu_why = {}
        for k in range(3):
            for i in range(n_ticks):
                t, s_ = truth[k][i], said[kind][k][i]
                if t is None or s_ is None:
                    continue
                ph = phase_of(i * TICK)
                if s_ and not t:
                    fr += 1
                    per_phase[ph][0] += 1
                elif t and not s_:
                    fu += 1
                    per_phase[ph][1] += 1
                    w = whys[kind][k][i] or "?"
                    fu_why[w] = round(fu_why.get(w, 0) + TICK, 1)
        out[kind] = {
            "false_unready_by_reason_s": fu_why,
            "false_ready_s": round(fr * TICK, 1),
            "false_unready_s": round(fu * TICK, 1),
            "mean_lag_s": round((fr + fu) * TICK / max(transitions, 1), 3),
            "per_phase": {n: [round(a * TICK, 1), round(b * TICK, 1)] for n, (a, b) in per_phase.items()},
        }
    return out


NAMES = {"exporter": "exporter `/readyz`, defaults", "readyz": "etcd `/readyz`",
         "health": "etcd `/health`"}


def report(out):
    print(f"{out['etcd']}: fault script {SCRIPT_LEN:.0f} s, 3 members, probes every "
          f"{TICK * 1000:.0f} ms, scored by answer arrival; {out['truth_transitions']} truth transitions")
    print("events: " + "; ".join(f"{t:.1f}s {w}" for t, w in out["events"]))
    print()
    print("| probe | false-ready | false-unready | mean lag per truth transition |")
    print("|---|---|---|---|")
    for kind in out["probes"]:
        r = out[kind]
        print(f"| {NAMES[kind]} | {r['false_ready_s']:.1f} s | {r['false_unready_s']:.1f} s | {r['mean_lag_s']:.2f} s |")
    print()
    print("| phase | " + " | ".join(f"{k} FR / FU" for k in out["probes"]) + " |")
    print("|---|" + "---|" * len(out["probes"]))
    for _, n in PHASES:
        cells = [f"{out[k]['per_phase'][n][0]:.1f} / {out[k]['per_phase'][n][1]:.1f} s" for k in out["probes"]]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()
    print("exporter false-unready by failing checks: " + ", ".join(
        f"{w} {v:.1f} s" for w, v in sorted(out["exporter"]["false_unready_by_reason_s"].items(),
                                             key=lambda x: -x[1])))
    print()
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
    ap.add_argument("--etcd", default=shutil.which("etcd") or "etcd",
                    help="the etcd binary the members run (default: etcd on PATH)")
    ap.add_argument("--exporter", default=os.path.join(ROOT, "target/release/etcd-readiness-exporter"))
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--fault-offset", type=float, default=TICK / 2, metavar="SECONDS",
                    help="inject each fault this long after its probe tick (default: half a "
                         "tick, so no probe is in flight when it lands; 0 reproduces the runs "
                         "before this option)")
    ap.add_argument("--keep-logs", metavar="DIR",
                    help="copy the exporters' and members' logs here before cleaning up")
    ap.add_argument("--member-metrics", action="store_true",
                    help="give each exporter its member's own metrics (--etcd.metrics-url on "
                         "the client port, where etcd serves them too): active_peers for the "
                         "election credit")
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

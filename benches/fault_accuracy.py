#!/usr/bin/env python3
"""Decision accuracy under faults as the kubelet sees it: the Ready
condition a faithful simulation of the kubelet's prober derives from the
exporter's /readyz and from etcd's own probes, against the truth, on a real
3-member etcd cluster under continuous writes.

Topology (created here, removed on exit, whatever happens): one network
namespace per member plus a hub namespace with a bridge; each member's veth
is a port of the bridge, and one veth pair joins the host to it. Members
listen on their namespace's own address (10.213.N.k:2379/2380); the
exporters (one per member, DEFAULT flags and the default policy; the main
listener and the plain probe listener, `--web.probe-listen-address`, on
loopback) and the probers run on the host and reach the members through the
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
Each fault lands half a truth tick (50 ms, --fault-offset) after its
instant. (tc netem is what a partition would use elsewhere; this kernel has
neither the netem qdisc nor tc classifiers, see docs/BENCHMARKS.md.)

The truth, every 100 ms for each member: a linearizable Range through that
member (etcd's JSON gateway, POST /v3/kv/range) answered within 1 s,
attributed to the instant it was SENT: can a request sent now be served?

The kubelet's view (the main figures): one simulated kubelet readiness
worker per (stanza, member), kubelet_prober.Prober (its docstring cites the
kubelet's source for each rule: one probe at a time, the Go ticker of
periodSeconds with its dropped ticks, timeoutSeconds as the whole request's
deadline, a new connection per probe, 200-399 = success, the thresholds,
the initial Failure). Each worker sends real HTTP GETs when it is due, from
a random phase of its period (--seed) before the script; its Ready
condition changes at the instant an answer arrives (or at sent + timeout).
Stanzas:
  shipped         the exporter's probe listener, with the readinessProbe READ
                  FROM THE DEPLOY FILES (deploy/kustomize/components/sidecar/
                  etcd-probe.yaml, or --shipped-probe FILE: path and query,
                  period, timeout, thresholds), so it measures what adopters
                  get, a long-poll `?wait=` included
  exporter-tight  the exporter's probe listener, /readyz, period 1 / timeout 1
                  / thresholds 1
  etcd-kubeadm    etcd's /readyz (3.4: /health) with kubeadm's stanza: period
                  1, timeout 15, failure 3 (cmd/kubeadm/app/util/staticpod/
                  utils.go ReadinessProbe, used for etcd in
                  cmd/kubeadm/app/phases/etcd/local.go)
  etcd-tight      etcd's /readyz (3.4: /health), period 1 / timeout 1 /
                  thresholds 1
  druid           an etcd-druid-like wrapper (CachedGet: a linearizable Get
                  every 2 s, cached, served at once) with period 5 / failure 5
At each 100 ms tick the Ready condition is compared with the truth of that
tick. False-ready: Ready while the truth said the member cannot serve;
false-unready: the reverse (each tick counts 0.1 s); mean decision lag =
(false-ready + false-unready) / number of truth transitions; in all and per
phase. Per fault kind, for the member it is about (the killed leader, the
quorum's survivor, the frozen follower, the partitioned leader): seconds
from the fault until Ready is false, and from the recovery until it is true
again (negative: back before the recovery), beside the truth's own.

Secondary view (the figures before the kubelet view existed): every 100 ms,
independent probes in parallel, each answer held from its ARRIVAL until the
next (no answer within 1 s: not ready at 1 s):
  exporter GET /readyz?verbose of the exporter's main listener, 200
  readyz   GET /readyz of the member itself (etcd >= 3.5.11), 200
  health   GET /health of the member, 200 {"health":"true"}

Cost, measured in the same run: raft index growth caused by the exporters
(the leader's raft index over 10 s with the three exporters running minus
over 10 s without them, both with no writer and no probe), the exporters'
requests to etcd per second (their etcd_readiness_source_requests_total
counter) and their CPU seconds per second (/proc/PID/stat) over the fault
script (the kubelet's and the 100 ms probes both included).

Usage (root: it creates network namespaces; a run takes about 2.5 minutes):
  benches/fault_accuracy.py [--etcd PATH] [--exporter PATH] [--runs N] [--json OUT]
  benches/fault_accuracy.py --self-test     (no etcd, no root: the simulated
                                             prober on virtual time)
"""

import argparse
import base64
import concurrent.futures as cf
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import itertools
import json
import os
import random
import re
import socket
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the work tree
import kubelet_prober as kp  # noqa: E402  (the pure prober, beside this file)

SIDECAR = os.path.join(ROOT, "deploy/kustomize/components/sidecar")
SHIPPED_PROBE = os.path.join(SIDECAR, "etcd-probe.yaml")
# The kubelet's probers start this long before the script (plus a random
# phase within their period), so that each is past its first answer at 0.
WARMUP = 6.0
# What the kubelet reads of a probe's body (pkg/probe/http: maxRespBodyLength).
MAX_BODY = 10 * 1024
# The fault kinds, for the time to out-of-service and back: (name, fault
# instant, recovery instant, the member it is about: a key of `roles`).
FAULTS = [
    ("leader SIGKILL", 5, 13, "killed_leader"),
    ("quorum loss, survivor", 23, 31, "quorum_survivor"),
    ("follower SIGSTOP", 41, 51, "stopped"),
    ("leader partition", 59, 71, "partitioned_leader"),
]


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


def probe_get(host, port, path, timeout):
    """One kubelet HTTP probe: a new connection, `GET path` with the
    kubelet's headers and `Connection: close`, the whole exchange (connect,
    request, status line, headers, at most MAX_BODY of body) bounded by
    `timeout`, like Go's http.Client.Timeout. Returns the status (int) or
    None (refused, reset, timed out, not HTTP)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                       "User-Agent: kube-probe/1.35\r\nAccept: */*\r\n"
                       "Connection: close\r\n\r\n").encode())
            buf = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                s.settimeout(left)
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
                head, sep, body = buf.partition(b"\r\n\r\n")
                if sep and len(body) >= _content_length(head, MAX_BODY):
                    break
                if len(buf) > 64 * 1024 + MAX_BODY:
                    break
        m = re.match(rb"HTTP/1\.[01] ([0-9]{3})", buf)
        return int(m.group(1)) if m else None
    except OSError:  # refused, reset, timeout
        return None


def _content_length(head, cap):
    m = re.search(rb"(?im)^content-length:\s*([0-9]{1,12})\s*$", head)
    return min(int(m.group(1)), cap) if m else cap


class CachedGet:
    """An etcd-druid-like readiness endpoint (gardener/etcd-wrapper,
    internal/app/readiness.go): a loop does a linearizable Get of one key
    through the member (timeout etcdGetTimeout = 5 s), caches "no error" as
    ready, and waits for its 2 s ticker (etcdQueryInterval; the same
    Go-ticker loop as the kubelet's); GET /readyz answers the cached value at
    once (200 or 503). SIMPLIFIED: the Get goes through etcd's JSON gateway,
    not gRPC, so a refused connection is an error at once (clientv3 could
    wait for the endpoint until the timeout)."""

    INTERVAL = 2.0
    GET_TIMEOUT = 5.0

    def __init__(self, member_url):
        self.url = member_url
        self.ready = False
        self.history = []  # (monotonic time the query ended, ready)
        self.stop = threading.Event()
        cache = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if cache.ready else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        ticker = kp.GoTicker(time.monotonic(), self.INTERVAL)
        while not self.stop.is_set():
            code, _ = http("POST", self.url + "/v3/kv/range", {"key": b64("foo")},
                           timeout=self.GET_TIMEOUT)
            done = time.monotonic()
            self.ready = code == 200
            self.history.append((done, self.ready))
            self.stop.wait(max(0.0, ticker.after(done) - time.monotonic()))

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def shipped_stanza(path):
    """The readinessProbe the kustomize component gives the etcd container,
    read from the deploy files, and checked to ask the sidecar's probe
    listener (the port of `--web.probe-listen-address` in exporter.yaml)."""
    with open(path) as f:
        stanza = kp.parse_readiness_probe(f.read(), "shipped", path)
    exporter_yaml = os.path.join(os.path.dirname(path), "exporter.yaml")
    if os.path.exists(exporter_yaml):
        with open(exporter_yaml) as f:
            m = re.search(r"--web\.probe-listen-address[= ]\S*?:([0-9]+)", f.read())
        if m and str(stanza.port) != m.group(1):
            raise kp.StanzaError(f"{path}: the readinessProbe asks port {stanza.port}, but the "
                                 f"sidecar's probe listener is :{m.group(1)} ({exporter_yaml})")
    return stanza


def kubelet_stanzas(shipped, etcd_path):
    """(name, stanza, target, label): target "exporter" is the exporter's
    probe listener, "etcd" the member's client port, "druid" the CachedGet."""
    return [
        ("shipped", shipped, "exporter",
         f"exporter, the shipped stanza ({shipped.describe()})"),
        ("exporter-tight", kp.Stanza("exporter-tight", "/readyz", 1, 1, 1), "exporter",
         "exporter `/readyz`, period 1 / timeout 1 / thresholds 1"),
        # kubeadm: staticpodutil.ReadinessProbe(probeHostname, "/readyz", ...)
        # in cmd/kubeadm/app/phases/etcd/local.go = createHTTPProbe(host,
        # path, port, scheme, 0, 15, 3, 1): initialDelay 0, timeout 15,
        # failure 3, period 1 (cmd/kubeadm/app/util/staticpod/utils.go). It
        # asks the metrics listener (:2381); the client port serves the same
        # handler.
        ("etcd-kubeadm", kp.Stanza("etcd-kubeadm", etcd_path, 1, 15, 3), "etcd",
         f"etcd `{etcd_path}`, kubeadm's stanza (period 1, timeout 15, failure 3)"),
        ("etcd-tight", kp.Stanza("etcd-tight", etcd_path, 1, 1, 1), "etcd",
         f"etcd `{etcd_path}`, period 1 / timeout 1 / thresholds 1"),
        # etcd-druid's readinessProbe of etcd-wrapper's :9095/readyz: period 5,
        # failure 5; timeout left to the API default (1 s).
        ("druid", kp.Stanza("druid", "/readyz", 5, 1, 5), "druid",
         "cached linearizable Get every 2 s, druid's stanza (period 5, failure 5)"),
    ]


def drive_prober(prober, host, port, path, t0, stop_at, lock):
    """Run one simulated kubelet worker in real time: send each probe when
    the prober says it is due (times relative to t0), report its answer."""
    while True:
        due = prober.due()
        if due >= stop_at:
            return
        d = t0 + due - time.monotonic()
        if d > 0:
            time.sleep(d)
        with lock:
            prober.sent()
        sent = time.monotonic() - t0
        status = probe_get(host, port, path, prober.stanza.timeout)
        arrived = time.monotonic() - t0
        with lock:
            prober.answered(sent, arrived, status)


def ticks_to_transitions(series):
    """[(t, state)] at each change of a per-tick series (None skipped)."""
    out, cur = [], None
    for i, v in enumerate(series):
        if v is not None and v != cur:
            out.append((i * TICK, v))
            cur = v
    return out


def out_and_back(transitions, fault, recover, horizon):
    """Seconds from `fault` until the state is false (0 if it already was;
    None: it stayed true until `recover`), and from `recover` until it is true
    again after that (negative: back before the recovery; None: not back by
    `horizon`)."""
    def state_at(t):
        s = None
        for when, v in transitions:
            if when <= t + 1e-9:
                s = v
        return s
    if state_at(fault) is False:
        out_t = fault
    else:
        out_t = next((w for w, v in transitions if v is False and fault < w <= recover), None)
        if out_t is None:
            return None, None
    back_t = next((w for w, v in transitions if v is True and out_t < w <= horizon), None)
    return round(out_t - fault, 2), (None if back_t is None else round(back_t - recover, 2))


def score(said, truth, n_ticks, transitions, whys=None):
    """False-ready / false-unready (seconds, in all and per phase) and mean
    lag of one probe's per-tick states against the truth, over 3 members."""
    fr = fu = 0
    per_phase = {name: [0, 0] for _, name in PHASES}
    fu_why = {}
    for k in range(3):
        for i in range(n_ticks):
            t, s_ = truth[k][i], said[k][i]
            if t is None or s_ is None:
                continue
            ph = phase_of(i * TICK)
            if s_ and not t:
                fr += 1
                per_phase[ph][0] += 1
            elif t and not s_:
                fu += 1
                per_phase[ph][1] += 1
                if whys is not None:
                    w = whys[k][i] or "?"
                    fu_why[w] = round(fu_why.get(w, 0) + TICK, 1)
    r = {
        "false_ready_s": round(fr * TICK, 1),
        "false_unready_s": round(fu * TICK, 1),
        "mean_lag_s": round((fr + fu) * TICK / max(transitions, 1), 3),
        "per_phase": {n: [round(a * TICK, 1), round(b * TICK, 1)] for n, (a, b) in per_phase.items()},
    }
    if whys is not None:
        r["false_unready_by_reason_s"] = fu_why
    return r


def look_ahead_floor(truth, latency, n_ticks):
    """What the truth's look-ahead costs every prober that is not told the
    future. The truth at a tick is whether a read sent then is answered
    within 1 s, so after an outage it turns true up to 1 s before any
    answer can show the member serving again. Per member and outage (a run
    of D false ticks after a true one, ended at the tick t whose read took
    L s): a prober that stays ready through it is false-ready for D ticks;
    one that waits for an answer is false-unready on the true ticks of
    [t, t + L) (A ticks). The cheaper of the two, summed: false-ready where
    D < A (an election a credit bridges), false-unready where A <= D (a
    freeze, a partition, a quorum's return). Only a prober that guesses the
    instant an outage ends does better."""
    per_phase = {name: [0, 0] for _, name in PHASES}
    for k in range(3):
        tr, lat = truth[k], latency[k]
        seen_true, down = False, []
        for i in range(n_ticks):
            if tr[i] is None:
                continue
            if not tr[i]:
                down += [i] if seen_true else []
                continue
            if down and lat[i] is not None:
                end = i * TICK + lat[i]
                ahead = [j for j in itertools.takewhile(lambda j: j * TICK < end - 1e-9,
                                                        range(i, n_ticks)) if tr[j]]
                cheaper, side = (down, 0) if len(down) < len(ahead) else (ahead, 1)
                for j in cheaper:
                    per_phase[phase_of(j * TICK)][side] += 1
            seen_true, down = True, []
    return {"false_ready_s": round(sum(a for a, _ in per_phase.values()) * TICK, 1),
            "false_unready_s": round(sum(b for _, b in per_phase.values()) * TICK, 1),
            "per_phase": {n: [round(a * TICK, 1), round(b * TICK, 1)] for n, (a, b) in per_phase.items()}}


def per_fault(timelines, roles, horizon_of, offset):
    """Per fault kind: (to not-ready, back to ready) of the member it is
    about, for each timeline ({name: [transitions per member]}), from the
    instants the fault and its recovery landed (`offset` after the nominal)."""
    out = {}
    for name, fault, recover, role in FAULTS:
        m = roles.get(role)
        if m is None:
            continue
        fault, recover = fault + offset, recover + offset
        out[name] = {"member": m, **{
            view: out_and_back(tl[m - 1], fault, recover, horizon_of(recover))
            for view, tl in timelines.items()}}
    return out


def score_kubelet(stanzas, probers, truth, n_ticks, transitions, roles, offset):
    """The Ready condition of every simulated worker against the truth, per
    stanza: totals, per phase, per fault kind, and the raw record."""
    def horizon_of(recover):
        return next((f for _, f, _, _ in FAULTS if f > recover), SCRIPT_LEN)
    views = {"truth": [ticks_to_transitions(truth[k]) for k in range(3)]}
    res = {}
    for name, stanza, target, label in stanzas:
        ps = probers[name]
        said = [[p.ready_at(i * TICK) for i in range(n_ticks)] for p in ps]
        views[name] = [p.transitions for p in ps]
        res[name] = {"label": label, "target": target, "stanza": stanza.as_dict(),
                     **score(said, truth, n_ticks, transitions),
                     "start": [round(p.start, 3) for p in ps],
                     "transitions": [[(round(t, 3), r) for t, r in p.transitions] for p in ps],
                     "probes": [[(round(a, 3), round(b, 3), ok, st) for a, b, ok, st in p.probes]
                                for p in ps],
                     "series": ["".join("?" if v is None else "1" if v else "0" for v in row)
                                for row in said]}
    res["per_fault"] = per_fault(views, roles, horizon_of, offset)
    return res


def run(args):
    if os.geteuid() != 0:
        sys.exit("needs root (it creates network namespaces)")
    # Checked before anything is created: a fault that cannot be made would
    # leave its phase measuring nothing.
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            sys.exit(f"needs {tool} (apt-get install {package}): the fault script uses it")
    exporter = args.exporter
    workdir = tempfile.mkdtemp(prefix="fault_accuracy.")
    net = Net()
    cluster = Cluster(net, workdir, args.etcd)
    version = sh(args.etcd, "--version").stdout.split("\n")[0].strip()
    exporters = []
    caches = []
    stop_writer = threading.Event()

    def cleanup(*_):
        stop_writer.set()
        for c in caches:
            try:
                c.close()
            except Exception:
                pass
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
        # etcd's own probe as the kubelet would ask it: /readyz where it
        # exists (3.5.11+), /health before (3.4 answers 503 when unhealthy).
        stanzas = kubelet_stanzas(args.shipped, "/readyz" if has_readyz else "/health")
        for k in range(3):
            caches.append(CachedGet(cluster.url(k)))
            caches[-1].start()

        # Raft index growth caused by the exporters: idle vs exporters only.
        def growth(seconds):
            k = cluster.leader()
            a = cluster.raft_index(k)
            time.sleep(seconds)
            b = cluster.raft_index(k)
            return b - a
        idle = growth(10)
        ports = [free_port() for _ in range(3)]
        probe_ports = [free_port() for _ in range(3)]
        for k in range(3):
            log = open(os.path.join(workdir, f"exporter{k + 1}.log"), "ab")
            member_metrics = (["--etcd.metrics-url", cluster.url(k) + "/metrics"]
                              if args.member_metrics else [])
            exporters.append(subprocess.Popen(
                [exporter, "--etcd.endpoint", cluster.url(k),
                 "--web.listen-address", f"127.0.0.1:{ports[k]}",
                 "--web.probe-listen-address", f"127.0.0.1:{probe_ports[k]}"] + member_metrics
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
            roles["quorum_survivor"] = next(j for j in range(3) if j not in victims) + 1
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
        # The cost window: from here (the kubelet's warm-up included) to the
        # end of the script.
        measured_from = time.monotonic()
        pool = cf.ThreadPoolExecutor(max_workers=192)
        # The simulated kubelet: one worker per (stanza, member), started
        # before the script at a random phase of its period.
        t0 = time.monotonic() + WARMUP
        t0_wall = time.time() + WARMUP
        rng = random.Random(args.seed)
        probers, prober_threads, prober_lock = {}, [], threading.Lock()
        for name, stanza, target, _ in stanzas:
            probers[name] = []
            for k in range(3):
                p = kp.Prober(stanza, -WARMUP + rng.uniform(0, min(stanza.period, WARMUP - 1)))
                probers[name].append(p)
                host, port = {"exporter": ("127.0.0.1", probe_ports[k]),
                              "etcd": (net.ips[k], 2379),
                              "druid": ("127.0.0.1", caches[k].port)}[target]
                th = threading.Thread(target=drive_prober, daemon=True,
                                      args=(p, host, port, stanza.path, t0, SCRIPT_LEN, prober_lock))
                th.start()
                prober_threads.append(th)
        time.sleep(max(0.0, t0 - time.monotonic()))
        fault_error = []

        def faults_or_record(t0):
            try:
                faults(t0)
            except Exception as e:  # noqa: BLE001  (reported after cleanup)
                fault_error.append(e)
        ft = threading.Thread(target=faults_or_record, args=(t0,), daemon=True)
        ft.start()
        for i in range(n_ticks):
            d = t0 + i * TICK - time.monotonic()
            if d > 0:
                time.sleep(d)
            for k in range(3):
                for kind in kinds:
                    pool.submit(probe, kind, k, i)
        time.sleep(max(0.0, t0 + SCRIPT_LEN - time.monotonic()))
        elapsed = time.monotonic() - measured_from
        cpu1 = [cpu_seconds(p) for p in pids]
        req1 = [requests_total(p) for p in ports]
        load1 = os.getloadavg()
        pool.shutdown(wait=True)
        # In-flight probes end within their timeout (kubeadm's: 15 s).
        for th in prober_threads:
            th.join(timeout=max(st.timeout for _, st, _, _ in stanzas) + 5)
        ft.join(timeout=5)
        stop_writer.set()
    finally:
        cleanup()
    if fault_error:
        raise RuntimeError(f"the fault script failed, so the run measures nothing: {fault_error[0]}")

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
        out[kind] = score(said[kind], truth, n_ticks, transitions, whys[kind])
    out["kubelet"] = score_kubelet(stanzas, probers, truth, n_ticks, transitions, roles,
                                   args.fault_offset)
    out["look_ahead_floor"] = look_ahead_floor(truth, latency, n_ticks)
    out["druid_cache"] = [[(round(t - t0, 3), ok) for t, ok in c.history] for c in caches]
    return out


NAMES = {"exporter": "exporter `/readyz`, defaults", "readyz": "etcd `/readyz`",
         "health": "etcd `/health`"}


def _s(v):
    return "stays ready" if v is None else f"{v:+.1f} s" if v < 0 else f"{v:.1f} s"


def report_kubelet(out):
    kub = out["kubelet"]
    names = [n for n in kub if n != "per_fault"]
    print("As the kubelet sees it (simulated prober, Ready condition vs the truth):")
    print()
    print("| Ready condition, seconds over the script | false-ready | false-unready | mean lag per truth transition |")
    print("|---|---|---|---|")
    for n in names:
        r = kub[n]
        print(f"| {r['label']} | {r['false_ready_s']:.1f} | {r['false_unready_s']:.1f} | {r['mean_lag_s']:.2f} |")
    print()
    fl = out.get("look_ahead_floor")
    if fl:
        floor = fl["false_ready_s"] + fl["false_unready_s"]
        print(f"The truth's look-ahead (look_ahead_floor): the cheaper of staying ready through each "
              f"outage and waiting for its answer costs {fl['false_ready_s']:.1f} s false-ready and "
              f"{fl['false_unready_s']:.1f} s false-unready. False-ready plus false-unready above "
              "that: " + ", ".join(
                  f"{n} {kub[n]['false_ready_s'] + kub[n]['false_unready_s'] - floor:.1f} s"
                  for n in names) + ".")
        print()
    cols = [(n, kub[n]["per_phase"]) for n in names]
    if fl and "per_phase" in fl:
        cols.append(("look-ahead floor", fl["per_phase"]))
    print("| phase | " + " | ".join(f"{n} FR / FU" for n, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for _, ph in PHASES:
        print(f"| {ph} | " + " | ".join(f"{pp[ph][0]:.1f} / {pp[ph][1]:.1f}" for _, pp in cols) + " |")
    print()
    print("Per fault kind, the member it is about: seconds from the fault to Ready false, "
          "and from the recovery to Ready true again (truth: the linearizable read's own).")
    print()
    print("| fault (member) | truth | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for fault, row in kub["per_fault"].items():
        def cell(v):
            out_s, back = v
            if out_s is None:
                return "stays ready"
            return f"{out_s:.1f} → " + ("not back" if back is None else _s(back))
        print(f"| {fault} (m{row['member']}) | {cell(row['truth'])} | "
              + " | ".join(cell(row[n]) for n in names) + " |")
    print()


def report(out):
    print(f"{out['etcd']}: fault script {SCRIPT_LEN:.0f} s, 3 members, "
          f"{out['truth_transitions']} truth transitions; exporter {out.get('exporter_binary', '?')}")
    print("events: " + "; ".join(f"{t:.1f}s {w}" for t, w in out["events"]))
    print()
    report_kubelet(out)
    print(f"Secondary view: independent probes every {TICK * 1000:.0f} ms, each answer held "
          "from its arrival (timeout 1 s):")
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
    ap.add_argument("--exporter", default=None,
                    help="the exporter binary (default: target/release's, else target/debug's)")
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
    ap.add_argument("--runs", type=int, default=1, help="fault scripts to run, each on a fresh "
                    "cluster (default 1)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the simulated kubelet workers' phases (default: random; "
                         "recorded in the JSON)")
    ap.add_argument("--shipped-probe", default=SHIPPED_PROBE, metavar="FILE",
                    help="the manifest whose readinessProbe is 'the shipped stanza' (default: "
                         "the kustomize sidecar component's etcd-probe.yaml)")
    ap.add_argument("--self-test", action="store_true",
                    help="test the simulated prober on virtual time and the stanza parser on "
                         "the deploy files, then exit (no etcd, no root)")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(self_test(args.shipped_probe))
    try:
        args.shipped = shipped_stanza(args.shipped_probe)
    except (OSError, kp.StanzaError) as e:
        sys.exit(f"the shipped readinessProbe: {e}")
    if args.exporter is None:
        args.exporter = next((p for p in (os.path.join(ROOT, f"target/{b}/etcd-readiness-exporter")
                                          for b in ("release", "debug")) if os.path.exists(p)), None)
        if args.exporter is None:
            sys.exit("no exporter binary: cargo build --release (or pass --exporter)")
    if args.runs < 1 or args.runs > 100:
        sys.exit(f"--runs {args.runs}: between 1 and 100")
    outs = []
    for n in range(args.runs):
        if args.runs > 1:
            print(f"## run {n + 1} of {args.runs}")
        seed = args.seed if args.seed is not None else random.randrange(1 << 30)
        out = run(argparse.Namespace(**{**vars(args), "seed": seed + n}))
        out["seed"], out["exporter_binary"] = seed + n, args.exporter
        out["shipped_probe_file"] = os.path.relpath(args.shipped_probe, ROOT)
        outs.append(out)
        report(out)
        if args.json:  # after every run: a later failure keeps the earlier ones
            with open(args.json, "w") as f:
                json.dump({"runs": outs}, f, indent=1)
    if args.runs > 1:
        report_runs(outs)


def report_runs(outs):
    print(f"## {len(outs)} runs: min – median – max")
    print()
    print("| Ready condition | false-ready | false-unready | mean lag |")
    print("|---|---|---|---|")
    for n, r in outs[0]["kubelet"].items():
        if n == "per_fault":
            continue

        def span(key):
            v = sorted(o["kubelet"][n][key] for o in outs)
            return f"{v[0]:.2f} – {v[len(v) // 2]:.2f} – {v[-1]:.2f}"
        print(f"| {r['label']} | {span('false_ready_s')} | {span('false_unready_s')} | {span('mean_lag_s')} |")
    fl = [o["look_ahead_floor"] for o in outs if "look_ahead_floor" in o]

    def mid(v):
        return sorted(v)[len(v) // 2]
    print()
    print("Per phase, the median over the runs (false-ready / false-unready, seconds):")
    print()
    cols = [("shipped", [o["kubelet"]["shipped"]["per_phase"] for o in outs]),
            ("etcd 1/1/1", [o["kubelet"]["etcd-tight"]["per_phase"] for o in outs])]
    if len(fl) == len(outs):
        cols.append(("look-ahead floor", [f["per_phase"] for f in fl]))
    print("| phase | " + " | ".join(n for n, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for _, ph in PHASES:
        print(f"| {ph} | " + " | ".join(
            f"{mid([pp[ph][0] for pp in v]):.1f} / {mid([pp[ph][1] for pp in v]):.1f}" for _, v in cols) + " |")
    if fl:
        print()
        print(f"The truth's look-ahead (look_ahead_floor), median: false-ready "
              f"{mid([f['false_ready_s'] for f in fl]):.1f} s, false-unready "
              f"{mid([f['false_unready_s'] for f in fl]):.1f} s, both "
              f"{mid([f['false_ready_s'] + f['false_unready_s'] for f in fl]):.1f} s.")
    print()
    for line in targets(outs):
        print(line)


NATIVE = ("etcd-kubeadm", "etcd-tight", "druid")


def targets(outs):
    """The shipped stanza against etcd's own probe, as the issue's targets
    put it: medians over the runs (false-ready at most half of etcd 1/1/1's,
    false-unready and mean lag at most its), and in every run a false-ready
    below every native stanza's."""
    def med(name, key):
        v = sorted(o["kubelet"][name][key] for o in outs)
        return v[len(v) // 2]
    ours, etcd = "shipped", "etcd-tight"
    lines = []
    for key, factor in (("false_ready_s", 0.5), ("false_unready_s", 1), ("mean_lag_s", 1)):
        a, b = med(ours, key), med(etcd, key)
        lines.append(f"{'PASS' if a <= factor * b else 'FAIL'}: median {key} shipped {a} "
                     f"<= {factor} x etcd 1/1/1 {b}")
    # Issue 47's: at the median at most 1/4, 1/2 and 1/3 of etcd's, in every
    # run at most 1/3, 3/4 and 1/2 (on a busy node: the every-run factors
    # for the medians). For false-unready and lag, also what fraction of
    # etcd's the look-ahead floor alone is in each run: a target below it
    # no prober that waits for answers meets (mean lag is false-ready plus
    # false-unready over the same transitions, so its floor is the sum's).
    fl = [o for o in outs if "look_ahead_floor" in o]

    def floor_share(o, key):
        f, e = o["look_ahead_floor"], o["kubelet"][etcd]
        if key == "false_unready_s":
            return round(f[key] / max(e[key], 1e-9), 2)
        both = ("false_ready_s", "false_unready_s")
        return round(sum(f[k] for k in both) / max(sum(e[k] for k in both), 1e-9), 2)
    for key, fmed, fall in (("false_ready_s", 1 / 4, 1 / 3), ("false_unready_s", 1 / 2, 3 / 4),
                            ("mean_lag_s", 1 / 3, 1 / 2)):
        a, b = med(ours, key), med(etcd, key)
        ratios = [round(o["kubelet"][ours][key] / max(o["kubelet"][etcd][key], 1e-9), 2) for o in outs]
        lines.append(f"{'PASS' if a <= fmed * b else 'FAIL'}: median {key} shipped {a} <= {fmed:.2f} x "
                     f"etcd 1/1/1 {b} (ratio {a / max(b, 1e-9):.2f}; busy: <= {fall:.2f})")
        lines.append(f"{'PASS' if all(r <= fall for r in ratios) else 'FAIL'}: every run's {key} "
                     f"<= {fall:.2f} x etcd's (ratios {ratios})")
        if fl and key != "false_ready_s":
            lines.append(f"  the look-ahead floor alone is {[floor_share(o, key) for o in fl]} of etcd's"
                         + (" (false-ready plus false-unready)" if key == "mean_lag_s" else ""))
    if fl and len(fl) == len(outs):
        # What a design can change: the seconds above the look-ahead floor
        # (false-ready plus false-unready), which every prober pays and the
        # issue's false-unready and lag targets lie below. Held to the
        # factors the issue sets that sum's mean (the lag): at the median at
        # most 1/3 of etcd's, in every run (and a busy node's median) 1/2.
        def above(o, name):
            both = ("false_ready_s", "false_unready_s")
            return sum(o["kubelet"][name][k] - o["look_ahead_floor"][k] for k in both)
        a = sorted(above(o, ours) for o in outs)[len(outs) // 2]
        b = sorted(above(o, etcd) for o in outs)[len(outs) // 2]
        ratios = [round(above(o, ours) / max(above(o, etcd), 1e-9), 2) for o in outs]
        lines.append(f"{'PASS' if a <= b / 3 else 'FAIL'}: median seconds above the look-ahead floor "
                     f"shipped {a:.1f} <= 0.33 x etcd 1/1/1 {b:.1f} (ratio {a / max(b, 1e-9):.2f}; "
                     f"busy: <= 0.50)")
        lines.append(f"{'PASS' if all(r <= 1 / 2 for r in ratios) else 'FAIL'}: every run's seconds "
                     f"above the floor <= 0.50 x etcd's (ratios {ratios})")
    worst = [(o["kubelet"][ours]["false_ready_s"],
              min(o["kubelet"][n]["false_ready_s"] for n in NATIVE)) for o in outs]
    ok = all(a < b for a, b in worst)
    lines.append(f"{'PASS' if ok else 'FAIL'}: every run's shipped false-ready below every native "
                 f"stanza's (shipped, lowest native per run: {worst})")
    return lines


def self_test(shipped_probe):
    text = None
    if os.path.exists(shipped_probe):
        with open(shipped_probe) as f:
            text = f.read()
    failures = kp.self_test(text)
    # The fault-kind timing on a scripted timeline.
    got = [out_and_back([(0, True), (5.4, False), (14.0, True)], 5.05, 13.05, 23.0),
           out_and_back([(0, True)], 5.05, 13.05, 23.0),
           out_and_back([(0, True), (4.0, False), (12.0, True)], 5.05, 13.05, 23.0)]
    if got != [(0.35, 0.95), (None, None), (0.0, -1.05)]:
        failures.append(f"out_and_back: got {got}")
    # The look-ahead floor: member 0 is down 3 ticks then true at a read
    # that took 0.25 s (3 ticks ahead: waiting is cheaper); member 1 blips
    # down 1 tick then true at a read that took 0.5 s (5 ahead: staying
    # ready is); member 2 starts down (no outage before its first true tick).
    T, F = True, False
    tr = [[T, T, F, F, F, T, T, T, T, T], [T, F, T, T, T, T, T, T, T, T],
          [F, F, T, T, T, T, T, T, T, T]]
    lat = [[0.01] * 5 + [0.25] + [0.01] * 4, [0.01, 1.0, 0.5] + [0.01] * 7, [1.0, 1.0] + [0.01] * 8]
    got = look_ahead_floor(tr, lat, 10)
    got.pop("per_phase")
    if got != {"false_ready_s": 0.1, "false_unready_s": 0.3}:
        failures.append(f"look_ahead_floor: got {got}")
    for f in failures:
        print("FAIL " + f)
    print(f"self-test: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How soon after a frozen follower resumes does the exporter say ready?

A 3-member etcd cluster on free loopback ports (data on /dev/shm), 20
writes/s to the other members, one exporter (`--log.level debug`, log in
DIR/exporter.log) on a follower. The follower is frozen with SIGSTOP for
FREEZE seconds, then resumed; from the SIGCONT on, `/readyz?verbose` is
polled every 5 ms for 3 s and every change is printed with its time since
the SIGCONT, beside one linearizable read sent to the follower at the
SIGCONT (when it was answered). An experiment for docs/BENCHMARKS.md
("With the member's peer count"), not a pass/fail test.

  python3 benches/sigcont_recovery.py ETCD EXPORTER [FREEZE] [DIR]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_accuracy import b64, free_port, http  # noqa: E402  (the one HTTP helper of the benches)


def get(url, timeout=1.0):
    return http("GET", url, timeout=timeout)


def post(url, body, timeout):
    code, text = http("POST", url, body, timeout)
    if code != 200:
        raise RuntimeError(f"POST {url}: {code} {text}")
    return json.loads(text)


def main():
    etcd, exporter = sys.argv[1], sys.argv[2]
    freeze = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    out = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
    data = tempfile.mkdtemp(dir="/dev/shm")
    cp = [free_port() for _ in range(3)]
    pp = [free_port() for _ in range(3)]
    ep = free_port()
    initial = ",".join(f"m{k}=http://127.0.0.1:{pp[k]}" for k in range(3))
    members, ex, stop = [], None, threading.Event()
    try:
        for k in range(3):
            members.append(subprocess.Popen(
                [etcd, "--name", f"m{k}", "--data-dir", f"{data}/m{k}",
                 "--listen-client-urls", f"http://127.0.0.1:{cp[k]}",
                 "--advertise-client-urls", f"http://127.0.0.1:{cp[k]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{pp[k]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp[k]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new"],
                stdout=open(f"{out}/m{k}.log", "w"), stderr=subprocess.STDOUT))
        status = lambda k: post(f"http://127.0.0.1:{cp[k]}/v3/maintenance/status", {}, 1)
        deadline = time.time() + 30
        while True:
            try:
                lead = int(status(0)["leader"])
                if lead:
                    break
            except Exception:
                pass
            if time.time() > deadline:
                sys.exit("no leader within 30 s")
            time.sleep(0.2)
        f = next(k for k in range(3) if int(status(k)["header"]["member_id"]) != lead)
        ex = subprocess.Popen(
            [exporter, "--etcd.endpoint", f"http://127.0.0.1:{cp[f]}",
             "--web.listen-address", f"127.0.0.1:{ep}", "--log.level", "debug"],
            stdout=open(f"{out}/exporter.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while get(f"http://127.0.0.1:{ep}/readyz")[0] != 200:
            if time.time() > deadline:
                sys.exit("the exporter was not ready within 30 s")
            time.sleep(0.1)

        def writer():
            i = 0
            while not stop.is_set():
                k = [x for x in range(3) if x != f][i % 2]
                try:
                    post(f"http://127.0.0.1:{cp[k]}/v3/kv/put", {"key": b64("w"), "value": b64(str(i))}, 0.5)
                except Exception:
                    pass
                i += 1
                time.sleep(0.05)

        threading.Thread(target=writer, daemon=True).start()
        os.kill(members[f].pid, signal.SIGSTOP)
        time.sleep(freeze)
        os.kill(members[f].pid, signal.SIGCONT)
        t0 = time.time()
        print(f"{os.path.basename(etcd)}: follower m{f} frozen {freeze:.0f} s, SIGCONT at {t0:.3f}")

        def read():
            sent = time.time()
            try:
                post(f"http://127.0.0.1:{cp[f]}/v3/kv/range", {"key": b64("w")}, 2)
                print(f"  linearizable read sent +{(sent - t0) * 1000:.0f} ms, answered +{(time.time() - t0) * 1000:.0f} ms")
            except Exception as e:
                print(f"  linearizable read sent +{(sent - t0) * 1000:.0f} ms: {e}")

        threading.Thread(target=read, daemon=True).start()
        last = None
        while time.time() < t0 + 3:
            code, body = get(f"http://127.0.0.1:{ep}/readyz?verbose")
            if code != last:
                failing = [l[3:].split(" ")[0] for l in (body or "").splitlines() if l.startswith("[-]")]
                print(f"  /readyz {code} at +{(time.time() - t0) * 1000:.1f} ms {','.join(failing)}")
                last = code
            time.sleep(0.005)
        print(f"logs: {out}")
    finally:
        stop.set()
        if ex:
            ex.terminate()
            ex.wait()
        for p in members:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()

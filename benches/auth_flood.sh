#!/usr/bin/env bash
# Basic auth under a wrong-password flood, on the release binary:
#
# 1. flood: an exporter with TLS and one bcrypt cost-10 user; CONNS
#    keep-alive TLS connections (half from 127.0.0.1, half from 127.0.0.2)
#    send GET /metrics with a new wrong password each time for DURATION,
#    while a scraper (127.0.0.1, like Prometheus: one keep-alive connection,
#    one GET every second, a 1 s timeout) asks with the right password.
#    Prints the scraper's successes and latencies and what the flood got.
# 2. timing: an exporter with users of bcrypt cost 5, 10 and 12; ROUNDS
#    wrong passwords (each new) for each user and for an unknown one, one
#    at a time, the users interleaved: a wrong password's time must not
#    tell whether the user exists.
#
# Usage: benches/auth_flood.sh [DURATION=30] [CONNS=200] [ROUNDS=10]
# Needs: etcd (etcd-server), openssl, python3 (crypt for bcrypt hashes,
# ssl), curl, and a release build (cargo build --release).
duration=${1:-30}; conns=${2:-200}; rounds=${3:-10}
. "$(dirname "$0")/lib.sh"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=bench-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj /CN=127.0.0.1 -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 2 -extfile "$dir/ext" -out "$dir/server.pem" 2>/dev/null
bhash() { # PASSWORD COST
  python3 -W ignore -c 'import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2**int(sys.argv[2]))))' "$1" "$2"
}
password=bench-password
tls='tls_server_config:
  cert_file: server.pem
  key_file: server.key'
printf '%s\nbasic_auth_users:\n  prometheus: %s\n' "$tls" "'$(bhash "$password" 10)'" >"$dir/flood.yml"
printf '%s\nbasic_auth_users:\n  cost5: %s\n  cost10: %s\n  cost12: %s\n' "$tls" \
  "'$(bhash x 5)'" "'$(bhash x 10)'" "'$(bhash x 12)'" >"$dir/timing.yml"

start_etcd 1
flood_port=$(free_port); timing_port=$(free_port)
start_exporter "$flood_port" "http://127.0.0.1:${C[1]}" --web.config.file "$dir/flood.yml"
start_exporter "$timing_port" "http://127.0.0.1:${C[1]}" --web.config.file "$dir/timing.yml"
for port in "$flood_port" "$timing_port"; do
  ok=
  for _ in $(seq 150); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.pem" "https://127.0.0.1:$port/metrics" || true)
    [ "$code" = 401 ] && { ok=1; break; }
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "exporter on $port not answering" >&2; tail "$dir"/*.log >&2; exit 1; }
done

echo "nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) duration=${duration}s conns=$conns rounds=$rounds"
"${cli[@]}" python3 - "$dir/ca.pem" "$flood_port" "$timing_port" "$password" "$duration" "$conns" "$rounds" <<'EOF'
import base64, socket, ssl, statistics, sys, threading, time

ca, flood_port, timing_port, password, duration, conns, rounds = sys.argv[1:]
flood_port, timing_port, duration, conns, rounds = int(flood_port), int(timing_port), float(duration), int(conns), int(rounds)
ctx = ssl.create_default_context(cafile=ca)

def connect(port, source, timeout):
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

def request(s, port, user, pw):
    cred = base64.b64encode(f"{user}:{pw}".encode()).decode()
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Basic {cred}\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return int(head[9:12])

# 1. The flood.
stop = threading.Event()
counts = {"401": 0, "429": 0, "other": 0, "errors": 0}
lock = threading.Lock()
def flooder(n):
    source = "127.0.0.1" if n % 2 == 0 else "127.0.0.2"
    i = 0
    while not stop.is_set():
        try:
            s = connect(flood_port, source, 30)
            while not stop.is_set():
                i += 1
                code = request(s, flood_port, "prometheus", f"wrong-{n}-{i}")
                key = str(code) if code in (401, 429) else "other"
                with lock:
                    counts[key] += 1
        except Exception:
            with lock:
                counts["errors"] += 1
            time.sleep(0.05)
threads = [threading.Thread(target=flooder, args=(n,), daemon=True) for n in range(conns)]
# The scraper's credential is verified once before the flood, as a running
# Prometheus's is.
s = connect(flood_port, "127.0.0.1", 5)
assert request(s, flood_port, "prometheus", password) == 200
for t in threads:
    t.start()
time.sleep(2)
latencies, failures = [], []
end = time.monotonic() + duration
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        s.settimeout(1.0)
        code = request(s, flood_port, "prometheus", password)
        took = time.monotonic() - t0
        (latencies.append(took) if code == 200 else failures.append(f"HTTP {code}"))
    except Exception as e:
        failures.append(repr(e))
        try:
            s = connect(flood_port, "127.0.0.1", 5)
        except Exception as e2:
            failures.append(repr(e2))
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
stop.set()
with lock:
    c = dict(counts)
span = duration + 2
lat = sorted(latencies)
def ms(x): return f"{x * 1000:.1f} ms"
print(f"flood: {conns} keep-alive connections for {span:.0f} s: {c['401'] / span:.1f} 401/s "
      f"(bcrypts that ran), {c['429'] / span:.0f} 429/s (no place in the queue), other {c['other']}, "
      f"connection errors {c['errors']}")
print(f"scraper: {len(lat)}/{len(lat) + len(failures)} scrapes answered 200 within 1 s; "
      + (f"p50 {ms(lat[len(lat) // 2])}, max {ms(lat[-1])}" if lat else "none")
      + (f"; failures: {failures[:5]}" if failures else ""))

# 2. Timing of a wrong password, by user.
# Users interleaved, so that a change of load touches all of them alike.
users = ["cost5", "cost10", "cost12", "nosuchuser"]
results = {u: [] for u in users}
for i in range(rounds):
    for user in users:
        s = connect(timing_port, "127.0.0.1", 30)
        t0 = time.monotonic()
        code = request(s, timing_port, user, f"wrong-{i}-{time.monotonic_ns()}")
        results[user].append(time.monotonic() - t0)
        assert code == 401, code
        s.close()
for user, times in results.items():
    print(f"wrong password, {user:>10}: median {ms(statistics.median(times))}, "
          f"min {ms(min(times))}, max {ms(max(times))} ({len(times)} requests)")
EOF

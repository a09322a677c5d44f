"""A simulation of the kubelet's HTTP readiness prober, on time passed in.

Pure: no clock read, no IO. `fault_accuracy.py` drives one `Prober` per
(stanza, member) with real HTTP requests in real time; `--self-test` drives
it with scripted answers on virtual time.

What is implemented, read in kubernetes/kubernetes (and golang/go):

* One probe at a time per container. `worker.run` (pkg/kubelet/prober/
  worker.go; the same loop in worker_legacy.go `runLegacy` and
  container_bound_worker.go `run`) is `for w.doProbe() { select { case
  <-probeTicker.C: } }`: `doProbe` calls `prober.probe` synchronously, so the
  next probe cannot start before the previous one has its result.
* The ticker: `time.NewTicker(time.Duration(w.spec.PeriodSeconds) *
  time.Second)`, created once the worker starts, and the first probe runs at
  once (the loop calls `doProbe` before its first `select`). Ticks stay on the
  grid start + k * period: the runtime moves a periodic timer's next firing
  to `t.when + t.period*(1+delay/t.period)` (runtime/time.go,
  `unlockAndRun`; `t.when += t.period * (1 + -delta/t.period)` before Go
  1.14). The tick channel has a one-element buffer (time/tick.go, NewTicker:
  "Give the channel a 1-element time buffer. If the client falls behind
  while reading, we drop ticks on the floor until the client catches up"): a
  probe that overruns one or more ticks is followed AT ONCE by one more
  probe, and the other ticks it overran are dropped. Go 1.23's synchronous
  timer channels keep this: a receive from a ticker whose `when` has passed
  runs it at once (runtime/time.go `maybeRunChan`: it returns early only if
  `t.when > now`).
  periodSeconds is at least 1 (API validation; default 10).
* Initial delay and jitter: a worker that starts while the kubelet itself
  has just started (legacy worker) or for an adopted container (container-
  bound worker, `firstProbeDelay`) sleeps `rand.Float64() * period` before
  its first probe; `doProbe` returns without probing while the container has
  run less than `initialDelaySeconds`. SIMPLIFIED: the simulated worker starts
  at a time the caller picks (fault_accuracy.py: a uniform random phase in
  [0, period) before the script, which is what the jitter and an arbitrary
  container start amount to relative to the faults); initialDelaySeconds is
  applied from that start (every stanza measured has 0).
* The timeout: `timeout := time.Duration(p.TimeoutSeconds) * time.Second`
  is the `http.Client{Timeout: timeout}` of the request (pkg/probe/http/
  http.go, `httpProber.Probe`): the whole exchange, connect to body. An error
  from `client.Do`, a timeout included, is a Failure ("Convert errors into
  failures to catch timeouts"). So an answer arriving after sent + timeout is
  a Failure at sent + timeout; a held (long-poll) answer that arrives within
  the timeout counts at its arrival. prober.go's `runProbeWithRetries` retries
  only on a non-nil error, which an HTTP probe never returns for a failed or
  timed-out request, so there is no retry.
* A new connection per probe: the transport is built with
  `DisableKeepAlives: true` (http.go `New`/`NewWithTLSConfig`); the driver
  opens one connection per request and sends `Connection: close`.
* Success = status 200-399 (`res.StatusCode >= http.StatusOK &&
  res.StatusCode < http.StatusBadRequest`; a 3xx left unfollowed is a
  Warning, which prober.go counts as Success). The path is parsed as a URL
  (pkg/probe/http/request.go `formatURL`: `url.Parse(path)`), so a query such
  as `?wait=10s` is sent as written.
* The Ready condition: the worker starts from `initialValue =
  results.Failure` for readiness (`resultsManager.Set(containerID,
  w.initialValue, ...)` on a new container), counts `resultRun`, the run of
  equal results (`if w.lastResult == result { w.resultRun++ } else {
  w.lastResult = result; w.resultRun = 1 }`), and sets the result only when
  the run reaches failureThreshold (Failure) or successThreshold (Success).

Not modelled (the same for every stanza): a container that exits is marked
not ready and its restart gets a fresh worker (fault_accuracy.py restarts a
process, not a container, so the old worker keeps probing it); the delay
from the kubelet's result to the pod's Ready condition in the API and to the
endpoints.
"""

import math
import re

# The API's defaults for a probe field left out (core/v1 SetDefaults_Probe).
DEFAULTS = {"periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1,
            "failureThreshold": 3, "initialDelaySeconds": 0}


class StanzaError(ValueError):
    """A readinessProbe stanza that is missing or not one the simulation runs."""


class Stanza:
    """The readinessProbe fields the simulation needs, validated."""

    def __init__(self, name, path, period, timeout, failure, success=1, initial_delay=0,
                 port=None):
        for field, v, low in (("periodSeconds", period, 1), ("timeoutSeconds", timeout, 1),
                              ("failureThreshold", failure, 1), ("successThreshold", success, 1),
                              ("initialDelaySeconds", initial_delay, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low or v > 86400:
                raise StanzaError(f"{name}: {field} {v!r} is not an integer in [{low}, 86400]")
        if not isinstance(path, str) or not path.startswith("/"):
            raise StanzaError(f"{name}: httpGet.path {path!r} does not start with /")
        self.name, self.path, self.port = name, path, port
        self.period, self.timeout = period, timeout
        self.failure, self.success, self.initial_delay = failure, success, initial_delay

    def describe(self):
        return (f"{self.path}, period {self.period} s, timeout {self.timeout} s, "
                f"failure {self.failure}, success {self.success}")

    def as_dict(self):
        return {"path": self.path, "port": self.port, "periodSeconds": self.period,
                "timeoutSeconds": self.timeout, "failureThreshold": self.failure,
                "successThreshold": self.success, "initialDelaySeconds": self.initial_delay}


def _scalar(text):
    text = text.split(" #", 1)[0].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def parse_readiness_probe(text, name="readinessProbe", source="<text>"):
    """The first `readinessProbe:` block of a manifest (YAML of the plain
    block-mapping kind the deploy files use: `key: value`, nested by
    indentation; no flow style, anchors or multi-line scalars), as a Stanza.
    Fields left out take the API's defaults; an exec/tcpSocket/grpc probe, a
    scheme other than HTTP or a value that is not an integer is an error."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if re.match(r"^\s*readinessProbe:\s*$", l)), None)
    if start is None:
        raise StanzaError(f"{source}: no `readinessProbe:` block")
    base = len(lines[start]) - len(lines[start].lstrip())
    fields, stack = {}, []  # stack: (indent, key) of the open mappings below the probe
    for raw in lines[start + 1:]:
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        if indent <= base:
            break
        m = re.match(r"^\s*([A-Za-z$][A-Za-z0-9_$-]*):(.*)$", raw)
        if not m:
            raise StanzaError(f"{source}: cannot read {raw.strip()!r} in the readinessProbe")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([k for _, k in stack] + [m.group(1)])
        value = _scalar(m.group(2))
        if value == "":
            stack.append((indent, m.group(1)))
        else:
            fields[key] = value
    for handler in ("exec", "tcpSocket", "grpc"):
        if any(k == handler or k.startswith(handler + ".") for k in fields) or \
                any(k == handler for _, k in stack):
            raise StanzaError(f"{source}: a {handler} readinessProbe; the simulation runs httpGet only")
    if "httpGet.path" not in fields:
        raise StanzaError(f"{source}: the readinessProbe has no httpGet.path")
    if fields.get("httpGet.scheme", "HTTP").upper() != "HTTP":
        raise StanzaError(f"{source}: httpGet.scheme {fields['httpGet.scheme']!r}; the simulation speaks HTTP")
    ints = {}
    for f, default in DEFAULTS.items():
        v = fields.get(f, str(default))
        if not re.fullmatch(r"[0-9]{1,6}", v):
            raise StanzaError(f"{source}: {f} {v!r} is not a whole number")
        ints[f] = int(v)
    port = fields.get("httpGet.port")
    return Stanza(name, fields["httpGet.path"], ints["periodSeconds"], ints["timeoutSeconds"],
                  ints["failureThreshold"], ints["successThreshold"], ints["initialDelaySeconds"],
                  port=port)


def succeeded(status):
    """The kubelet's verdict on one answer: an HTTP status (int) or None (no
    answer: refused, reset, timed out)."""
    return status is not None and 200 <= status < 400


class GoTicker:
    """`time.NewTicker(period)` created at `start`, read by a loop that does
    its work first and then receives from the ticker (the kubelet's worker,
    etcd-wrapper's query loop). `after(done)` is when that receive returns if
    the work finished at `done`: at once if a tick fired meanwhile (it waited
    in the one-element buffer; any others were dropped), else at the next
    tick of the grid start + k * period."""

    def __init__(self, start, period):
        self.start, self.period = start, period
        self.seen = start  # the last tick delivered or dropped

    def after(self, done):
        k = max(math.floor((done - self.start) / self.period + 1e-9), 0)
        latest = self.start + k * self.period
        if latest > self.seen + 1e-9:
            self.seen = latest
            return done
        self.seen += self.period
        return self.seen


class Prober:
    """One kubelet readiness worker on a caller-supplied clock.

    Protocol: `due()` is when the next probe is sent; the caller sends it at
    that time (or a little later, as a loaded machine does) and reports
    `answered(sent, arrived, status)`; `arrived` is None when no answer came.
    The Ready condition's changes are in `transitions` as (time, ready),
    starting with (start, False): readiness starts as Failure.
    """

    def __init__(self, stanza, start):
        self.stanza = stanza
        self.start = start
        self.ready = False
        self.transitions = [(start, False)]
        self.last = None
        self.run = 0
        self.ticker = GoTicker(start, stanza.period)
        self._due = start
        self.in_flight = False
        self.probes = []  # (sent, result_at, ok, status): the raw record

    def due(self):
        return self._due

    def sent(self):
        if self.in_flight:
            raise RuntimeError("the kubelet runs one probe at a time per container")
        self.in_flight = True

    def answered(self, sent, arrived, status):
        """Record the result of the probe sent at `sent`. Returns the time the
        result counts (its arrival, or sent + timeout when it came later or
        never), which is also the earliest time the next probe may be due."""
        if not self.in_flight:
            raise RuntimeError("an answer to a probe that was not sent")
        self.in_flight = False
        deadline = sent + self.stanza.timeout
        if arrived is None or arrived > deadline:
            at, ok = deadline, False
        else:
            at, ok = max(arrived, sent), succeeded(status)
        self.probes.append((sent, at, ok, status))
        # doProbe returns before probing while the container has run less
        # than initialDelaySeconds: such a probe would not have been sent.
        if sent - self.start >= self.stanza.initial_delay - 1e-9:
            self._count(at, ok)
        self._due = self.ticker.after(at)
        return at

    def _count(self, at, ok):
        if self.last == ok:
            self.run += 1
        else:
            self.last, self.run = ok, 1
        threshold = self.stanza.success if ok else self.stanza.failure
        if self.run >= threshold and self.ready != ok:
            self.ready = ok
            self.transitions.append((at, ok))

    def ready_at(self, t):
        """The Ready condition at time t (the last transition at or before t)."""
        state = None
        for when, ready in self.transitions:
            if when <= t + 1e-9:
                state = ready
            else:
                break
        return state


def simulate(stanza, start, end, server):
    """Drive a Prober on virtual time: `server(sent)` -> (arrived or None,
    status or None) answers each probe. Returns the Prober."""
    p = Prober(stanza, start)
    for _ in range(1_000_000):
        t = p.due()
        if t >= end:
            return p
        p.sent()
        arrived, status = server(t)
        p.answered(t, arrived, status)
    raise RuntimeError("simulate: more than a million probes")


# --- self-test ------------------------------------------------------------

def _check(name, got, want, failures):
    if got != want:
        failures.append(f"{name}:\n    got  {got}\n    want {want}")


def _rounded(seq):
    return [tuple(round(x, 3) if isinstance(x, float) else x for x in item) for item in seq]


def self_test(deploy_probe_text=None):
    """Scripted answers on virtual time -> expected sends and Ready transitions.
    Returns a list of failure descriptions (empty: all passed)."""
    f = []

    # Thresholds 1/1, period 1: Ready follows each answer at its arrival.
    st = Stanza("t", "/readyz", period=1, timeout=1, failure=1)
    answers = {0: 200, 1: 200, 2: 503, 3: 503, 4: 200}
    p = simulate(st, 0.0, 5.0, lambda s: (s + 0.01, answers[round(s)]))
    _check("1/1 follows answers", _rounded(p.transitions),
           [(0.0, False), (0.01, True), (2.01, False), (4.01, True)], f)
    _check("1/1 sends on the grid", [round(s, 3) for s, *_ in p.probes], [0.0, 1.0, 2.0, 3.0, 4.0], f)

    # failureThreshold 3: a success in between resets the run.
    st = Stanza("t", "/readyz", period=1, timeout=1, failure=3, success=1)
    seq = [200, 503, 503, 200, 503, 503, 503, 503, 200]
    p = simulate(st, 0.0, 9.0, lambda s: (s + 0.1, seq[round(s)]))
    _check("failure 3 needs three in a row", _rounded(p.transitions),
           [(0.0, False), (0.1, True), (6.1, False), (8.1, True)], f)

    # successThreshold 2 and the initial state: not ready until two successes.
    st = Stanza("t", "/readyz", period=1, timeout=1, failure=1, success=2)
    p = simulate(st, 10.0, 14.0, lambda s: (s + 0.2, 200))
    _check("success 2 from the initial Failure", _rounded(p.transitions), [(10.0, False), (11.2, True)], f)
    _check("ready_at before the first transition", (p.ready_at(11.1), p.ready_at(11.2)), (False, True), f)

    # An overrun: the probe sent at 0 is answered at 2.5 (timeout 5); the
    # tick at 1 waited in the buffer, the one at 2 was dropped: the next
    # probe goes at once at 2.5, the one after on the grid at 3.
    st = Stanza("t", "/readyz", period=1, timeout=5, failure=1)
    p = simulate(st, 0.0, 4.0, lambda s: (2.5 if s == 0.0 else s + 0.1, 200))
    _check("overrun: one probe at once, other ticks dropped",
           [round(s, 3) for s, *_ in p.probes], [0.0, 2.5, 3.0], f)

    # No answer at all: each probe fails at sent + timeout; with timeout =
    # period the tick at that instant is already due, so probes go back to back.
    st = Stanza("t", "/readyz", period=1, timeout=1, failure=2)
    p = simulate(st, 0.0, 4.0, lambda s: (None, None))
    _check("timeouts: failures at sent + timeout",
           [(round(s, 3), round(a, 3), ok) for s, a, ok, _ in p.probes],
           [(0.0, 1.0, False), (1.0, 2.0, False), (2.0, 3.0, False), (3.0, 4.0, False)], f)
    _check("timeouts: stays not ready", _rounded(p.transitions), [(0.0, False)], f)

    # An answer that arrives after the timeout is a failure at the timeout,
    # whatever its status.
    st = Stanza("t", "/readyz", period=2, timeout=1, failure=1)
    p = simulate(st, 0.0, 4.0, lambda s: (s + 0.5, 200) if s < 1 else (s + 1.5, 200))
    _check("late answer = failure at sent + timeout", _rounded(p.transitions),
           [(0.0, False), (0.5, True), (3.0, False)], f)
    _check("late answer: the next probe on the grid",
           [round(s, 3) for s, *_ in p.probes], [0.0, 2.0], f)

    # A long-poll /readyz?wait=10s with timeout 15: the probe sent at 1 is
    # held until the verdict changes at 4.2 and answered 503 then: Ready is
    # false at 4.2, and the next probe goes at once (ticks 2, 3, 4 overrun).
    st = Stanza("t", "/readyz?wait=10s", period=1, timeout=15, failure=1)

    def held(s):
        if s < 1:
            return s + 0.001, 200
        if s < 4.2:
            return 4.2, 503
        if s < 7.5:
            return 7.5, 200  # held until the verdict is back
        return s + 10, 200  # held for the whole wait, answered unchanged
    p = simulate(st, 0.0, 20.0, held)
    _check("long poll: held answers count at arrival", _rounded(p.transitions),
           [(0.0, False), (0.001, True), (4.2, False), (7.5, True)], f)
    _check("long poll: sends", [round(s, 3) for s, *_ in p.probes], [0.0, 1.0, 4.2, 7.5, 17.5], f)

    # Refused (arrives at once with no status): a failure at its arrival.
    st = Stanza("t", "/readyz", period=5, timeout=1, failure=3)
    p = simulate(st, 0.0, 30.0, lambda s: (s + 0.001, 200) if s < 5 else (s + 0.001, None))
    _check("period 5 failure 3: false at the third failure", _rounded(p.transitions),
           [(0.0, False), (0.001, True), (15.001, False)], f)

    # initialDelaySeconds: results before it do not count.
    st = Stanza("t", "/readyz", period=1, timeout=1, failure=1, initial_delay=2)
    p = simulate(st, 0.0, 4.0, lambda s: (s + 0.1, 200))
    _check("initial delay", _rounded(p.transitions), [(0.0, False), (2.1, True)], f)

    # The ticker alone: work that ends before the next tick waits for it;
    # work that overruns two ticks gets one at once and loses the other.
    t = GoTicker(0.0, 2.0)
    _check("ticker", [t.after(0.5), t.after(2.1), t.after(7.0), t.after(7.2)], [2.0, 4.0, 7.0, 8.0], f)

    # One probe at a time.
    p = Prober(Stanza("t", "/readyz", period=1, timeout=1, failure=1), 0.0)
    p.sent()
    try:
        p.sent()
        f.append("two probes in flight were accepted")
    except RuntimeError:
        pass

    _self_test_parser(f, deploy_probe_text)
    return f


def _self_test_parser(f, deploy_probe_text):
    text = """
spec:
  containers:
    - name: etcd
      readinessProbe:
        $patch: replace
        httpGet:
          # the long poll
          path: "/readyz?wait=10s"   # quoted, with a comment
          port: 9380
        periodSeconds: 1
        timeoutSeconds: 15
        failureThreshold: 1
      livenessProbe:
        periodSeconds: 99
"""
    s = parse_readiness_probe(text, "shipped")
    _check("parser: path with query and fields",
           (s.path, s.port, s.period, s.timeout, s.failure, s.success),
           ("/readyz?wait=10s", "9380", 1, 15, 1, 1), f)
    s = parse_readiness_probe("readinessProbe:\n  httpGet:\n    path: /readyz\n")
    _check("parser: API defaults", (s.period, s.timeout, s.failure, s.success), (10, 1, 3, 1), f)
    for bad, what in (("readinessProbe:\n  exec:\n    command: [x]\n", "exec"),
                      ("readinessProbe:\n  httpGet:\n    path: /r\n  periodSeconds: 0\n", "period 0"),
                      ("readinessProbe:\n  httpGet:\n    path: /r\n  periodSeconds: 1s\n", "period 1s"),
                      ("livenessProbe:\n  httpGet:\n    path: /r\n", "no readinessProbe"),
                      ("readinessProbe:\n  httpGet:\n    path: /r\n    scheme: HTTPS\n", "https")):
        try:
            parse_readiness_probe(bad)
            f.append(f"parser accepted a bad stanza ({what})")
        except StanzaError:
            pass
    if deploy_probe_text is not None:
        try:
            parse_readiness_probe(deploy_probe_text, "shipped")
        except StanzaError as e:
            f.append(f"the shipped stanza does not parse: {e}")

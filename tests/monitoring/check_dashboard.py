#!/usr/bin/env python3
"""Check the Grafana dashboard and the alert rules against our conventions.

Python 3 standard library only. Usage (from the repository root):

    tests/monitoring/check_dashboard.py                # check, exit 1 on problems
    tests/monitoring/check_dashboard.py --self-test    # prove the checks catch breakage
    tests/monitoring/check_dashboard.py --emit-queries dashboards/etcd-readiness.json \
        dashboards/alerts.yaml [--rate-interval 1m]    # all PromQL, variables substituted

Conventions checked (see /work/shared/REFERENCE.md, "Prometheus conventions"):
- the dashboard is valid JSON with the fixed uid `etcd-readiness`;
- a template variable `datasource` of type datasource over prometheus, and the
  `namespace` / `pod` query variables are multi-value with All = `.*` (so series
  without those labels still match);
- every panel has a gridPos inside the 24-column grid, panels do not overlap,
  every non-row panel has a description and uses the `${datasource}` variable
  (panel and each target);
- every rate()/irate()/increase() in the dashboard uses `[$__rate_interval]`;
- every metric name in any expression (dashboard and alerts.yaml) is listed in
  tests/monitoring/known_metrics.txt;
- every alert has a `severity` label and `summary`, `description` and
  `runbook_url` annotations (.ci/mixin checks the runbook anchors);
- query variables take label values of etcd_readiness_ready (`cluster_id`,
  `pod`, `instance`: of etcd_readiness_member_info); `pod` and `instance` are
  chained to $cluster_id, and every panel query and annotation selects by
  cluster_id (member panels follow the etcd cluster selector); a repeated row
  repeats over a multi-value variable with All, names it in its title, and
  each of its queries selects by it;
- the annotations "Readiness transitions" and "Policy reloads" exist, use
  ${datasource}, [$__rate_interval] and known metrics.

The dashboard and rules are rendered from the mixin (mixin/, .ci/mixin); this
checks the rendered files (and .ci/mixin --check a single-cluster rendering).

alerts.yaml is read with a small YAML-subset reader (`load_yaml`, also used by
check_manifests.py): block mappings and sequences, plain and quoted scalars,
`|`/`>` block scalars and comments. It rejects what it does not understand
rather than guess.
"""

import argparse
import copy
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_DASHBOARD = os.path.join(ROOT, "dashboards", "etcd-readiness.json")
DEFAULT_ALERTS = os.path.join(ROOT, "dashboards", "alerts.yaml")
DEFAULT_KNOWN = os.path.join(HERE, "known_metrics.txt")

DATASOURCE_REF = "${datasource}"
RATE_FUNCS = ("rate", "irate", "increase")


# --------------------------------------------------------------------------
# A YAML-subset reader (the stdlib has none).
# --------------------------------------------------------------------------
class YamlError(Exception):
    pass


_KEY_RE = re.compile(r"""^(?P<key>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\-\[\]{}][^#]*?|-[^\s][^#]*?)\s*:(?:\s+|$)(?P<rest>.*)$""")


def _strip_comment(text):
    """Remove a trailing ` # comment` outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " \t[{,:"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text, lineno):
    text = _strip_comment(text).strip()
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise YamlError(f"line {lineno}: unterminated double-quoted scalar")
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise YamlError(f"line {lineno}: unterminated single-quoted scalar")
        return text[1:-1].replace("''", "'")
    if text == "[]":
        return []
    if text == "{}":
        return {}
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(part, lineno) for part in text[1:-1].split(",") if part.strip()]
    if text.startswith(("{", "[", "&", "*", "!", "%", "@", "`")):
        raise YamlError(f"line {lineno}: unsupported YAML construct: {text[:30]!r}")
    if text in ("null", "~", ""):
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


class _Reader:
    def __init__(self, text):
        self.lines = text.split("\n")
        self.i = 0

    def _significant(self):
        """Index of the next line that is neither blank nor a comment."""
        j = self.i
        while j < len(self.lines):
            s = self.lines[j].strip()
            if s and not s.startswith("#"):
                return j
            j += 1
        return None

    @staticmethod
    def _indent(line):
        return len(line) - len(line.lstrip(" "))

    def node(self, indent):
        j = self._significant()
        if j is None:
            return None
        line = self.lines[j]
        ind = self._indent(line)
        if "\t" in line[: ind + 1]:
            raise YamlError(f"line {j + 1}: tab in indentation")
        if ind < indent:
            return None
        self.i = j
        body = line[ind:]
        if body == "-" or body.startswith("- "):
            return self.seq(ind)
        if _KEY_RE.match(body):
            return self.mapping(ind)
        raise YamlError(f"line {j + 1}: expected a mapping or a sequence, got {body[:40]!r}")

    def seq(self, ind):
        items = []
        while True:
            j = self._significant()
            if j is None:
                break
            line = self.lines[j]
            if self._indent(line) != ind or not (line[ind:] == "-" or line[ind:].startswith("- ")):
                if self._indent(line) > ind:
                    raise YamlError(f"line {j + 1}: unexpected indentation")
                break
            rest = line[ind + 1:]
            stripped = rest.lstrip(" ")
            if not stripped or stripped.startswith("#"):
                self.i = j + 1
                items.append(self.node(ind + 1))
                continue
            inner = ind + 1 + (len(rest) - len(stripped))
            if _KEY_RE.match(stripped) or stripped == "-" or stripped.startswith("- "):
                # "- key: value": the item is a mapping (or sequence) at the column of its text.
                self.lines[j] = " " * inner + stripped
                self.i = j
                items.append(self.node(inner))
            else:
                self.i = j + 1
                items.append(self._value(stripped, ind, j))
        return items

    def mapping(self, ind):
        out = {}
        while True:
            j = self._significant()
            if j is None:
                break
            line = self.lines[j]
            cur = self._indent(line)
            if cur != ind or line[ind:] == "-" or line[ind:].startswith("- "):
                if cur > ind:
                    raise YamlError(f"line {j + 1}: unexpected indentation (multi-line plain scalars are not supported)")
                break
            m = _KEY_RE.match(line[ind:])
            if not m:
                raise YamlError(f"line {j + 1}: expected `key: value`, got {line[ind:][:40]!r}")
            key = _scalar(m.group("key"), j + 1)
            if key in out:
                raise YamlError(f"line {j + 1}: duplicate key {key!r}")
            rest = _strip_comment(m.group("rest"))
            self.i = j + 1
            if rest == "":
                k = self._significant()
                if k is None:
                    out[key] = None
                elif self._indent(self.lines[k]) > ind:
                    out[key] = self.node(ind + 1)
                elif self._indent(self.lines[k]) == ind and self.lines[k][ind:].startswith("-"):
                    out[key] = self.seq(ind)
                else:
                    out[key] = None
            else:
                out[key] = self._value(m.group("rest"), ind, j)
        return out

    def _value(self, rest, parent_indent, lineno):
        head = _strip_comment(rest).strip()
        if head and head[0] in "|>":
            return self._block(head, parent_indent, lineno)
        return _scalar(rest, lineno + 1)

    def _block(self, header, parent_indent, lineno):
        m = re.fullmatch(r"([|>])([-+]?)", header)
        if not m:
            raise YamlError(f"line {lineno + 1}: unsupported block scalar header {header!r}")
        style, chomp = m.groups()
        raw = []
        block_indent = None
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip() == "":
                raw.append("")
                self.i += 1
                continue
            ind = self._indent(line)
            if ind <= parent_indent:
                break
            if block_indent is None:
                block_indent = ind
            if ind < block_indent:
                break
            raw.append(line[block_indent:])
            self.i += 1
        while raw and raw[-1] == "":
            raw.pop()
            # Trailing blank lines belong to the block only with keep-chomping.
        if style == "|":
            text = "\n".join(raw)
        else:
            parts = []
            for line in raw:
                if line == "":
                    parts.append("\n")
                elif parts and parts[-1] not in ("\n",) and not line.startswith(" "):
                    parts.append(" " + line)
                else:
                    parts.append(line)
            text = "".join(parts)
        if chomp != "-" and raw:
            text += "\n"
        return text


def load_yaml(text):
    """Parse a YAML-subset text into a list of documents (split on `---`)."""
    docs = []
    for chunk in re.split(r"(?m)^---[ \t]*$", text):
        reader = _Reader(chunk)
        doc = reader.node(0)
        rest = reader._significant()
        if rest is not None:
            raise YamlError(f"line {rest + 1}: unexpected content after the document: {reader.lines[rest][:40]!r}")
        if doc is not None:
            docs.append(doc)
    return docs


# --------------------------------------------------------------------------
# PromQL helpers
# --------------------------------------------------------------------------
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "bool", "offset", "inf", "nan", "atan2", "start", "end",
}


def metric_names(expr):
    """The metric names an expression selects (a lexical scan, enough for our queries)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"`[^`]*`", "``", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    s = re.sub(r"\{[^}]*\}", "", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?\w+", " ", s)
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", s)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        name = m.group(0)
        if re.match(r"\s*\(", s[m.end():]):
            continue  # a function call
        if name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def _call_argument(expr, open_paren):
    """The text between the parenthesis at open_paren and its match."""
    depth = 0
    for i in range(open_paren, len(expr)):
        if expr[i] == "(":
            depth += 1
        elif expr[i] == ")":
            depth -= 1
            if depth == 0:
                return expr[open_paren + 1:i]
    return None


def rate_interval_problems(expr):
    problems = []
    for m in re.finditer(r"\b(%s)\s*\(" % "|".join(RATE_FUNCS), expr):
        arg = _call_argument(expr, m.end() - 1)
        if arg is None:
            problems.append(f"unbalanced parentheses after {m.group(1)}(")
            continue
        ranges = re.findall(r"\[([^\]]*)\]", arg)
        if not ranges or any(r.strip() != "$__rate_interval" for r in ranges):
            problems.append(f"{m.group(1)}() must use [$__rate_interval], found {['[%s]' % r for r in ranges]}")
    return problems


def substitute(expr, variables, rate_interval):
    """Replace Grafana variables as Grafana would with every multi-value variable at All."""
    builtins = {
        "__rate_interval": rate_interval,
        "__interval": rate_interval,
        "__range": "1h",
    }

    def value(name):
        if name in builtins:
            return builtins[name]
        if name in variables:
            return variables[name]
        raise KeyError(name)

    out = re.sub(r"\$\{(\w+)(?::\w+)?\}", lambda m: value(m.group(1)), expr)
    out = re.sub(r"\[\[(\w+)\]\]", lambda m: value(m.group(1)), out)
    out = re.sub(r"\$(\w+)", lambda m: value(m.group(1)), out)
    return out


# --------------------------------------------------------------------------
# The dashboard
# --------------------------------------------------------------------------
def all_panels(dash):
    for p in dash.get("panels", []):
        yield p
        for inner in p.get("panels", []) or []:
            yield inner


def _ds_ok(ds):
    if isinstance(ds, str):
        return ds == DATASOURCE_REF
    return isinstance(ds, dict) and ds.get("uid") == DATASOURCE_REF


def variable_values(dash):
    """Each query variable's All value (what an expression sees with All selected)."""
    values = {}
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            values[v["name"]] = v.get("allValue") or ".*"
    return values


def variable_queries(dash):
    """(name, selector) for each label_values() variable: the selector is PromQL."""
    out = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q or "", re.S)
        if m:
            out.append((v["name"], m.group(1).strip(), m.group(2)))
        else:
            out.append((v["name"], None, q))
    return out


# Query variables whose values come from another metric than etcd_readiness_ready:
# cluster_id, and pod and instance chained to it (from the member_info series
# of the selected clusters).
VARIABLE_METRICS = {"cluster_id": "etcd_readiness_member_info", "pod": "etcd_readiness_member_info",
                    "instance": "etcd_readiness_member_info"}
CLUSTER_FILTER = 'cluster_id=~"$cluster_id"'


def annotations(dash):
    """The dashboard's query annotations (not Grafana's built-in one)."""
    return [a for a in dash.get("annotations", {}).get("list", []) if not a.get("builtIn")]


def rows_with_members(dash):
    """(row, [panels]) for each row: a collapsed row holds its panels, an
    expanded one owns the panels that follow it up to the next row."""
    out = []
    for p in dash.get("panels", []):
        if p.get("type") == "row":
            out.append((p, list(p.get("panels") or [])))
        elif out:
            out[-1][1].append(p)
    return out


def repeat_problems(dash, variables):
    """A repeated row repeats over a multi-value variable with All, and every
    query in it selects by that variable (or each copy would show the same)."""
    problems = []
    for row, members in rows_with_members(dash):
        var = row.get("repeat")
        if not var:
            continue
        where = f"row {row.get('title')!r}"
        v = variables.get(var)
        if not v or v.get("type") != "query" or not v.get("multi") or not v.get("includeAll"):
            problems.append(f"{where}: repeats over `{var}`, which is not a multi-value query variable with All")
        if f"${var}" not in str(row.get("title", "")):
            problems.append(f"{where}: the title of a repeated row should name ${var}")
        if not members:
            problems.append(f"{where}: a repeated row without panels")
        for p in members:
            for t in p.get("targets") or []:
                if f"${var}" not in t.get("expr", "") and f"${{{var}}}" not in t.get("expr", ""):
                    problems.append(f"panel {p.get('title')!r} {t.get('refId')}: in a row repeated over "
                                    f"`{var}`, the query must select by ${var}")
    return problems


def check_dashboard(dash, known):
    problems = []
    if dash.get("uid") != "etcd-readiness":
        problems.append(f"dashboard uid must be 'etcd-readiness', is {dash.get('uid')!r}")
    if dash.get("title") != "etcd readiness":
        problems.append(f"dashboard title must be 'etcd readiness', is {dash.get('title')!r}")
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 36:
        problems.append(f"schemaVersion should be 36 or newer (39 intended), is {dash.get('schemaVersion')!r}")

    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("a template variable `datasource` of type datasource with query prometheus is required")
    for name in ("namespace", "pod"):
        v = variables.get(name)
        if not v:
            problems.append(f"template variable `{name}` is missing")
            continue
        if v.get("type") != "query" or not v.get("multi") or not v.get("includeAll") or v.get("allValue") != ".*":
            problems.append(f"variable `{name}` must be a multi-value query variable with includeAll and allValue '.*'")
        if not _ds_ok(v.get("datasource")):
            problems.append(f"variable `{name}` must use the ${{datasource}} variable")
    for name, selector, _ in variable_queries(dash):
        if selector is None:
            problems.append(f"variable `{name}`: only label_values(<selector>, <label>) queries are supported")
            continue
        wanted = VARIABLE_METRICS.get(name, "etcd_readiness_ready")
        if wanted not in metric_names(selector):
            problems.append(f"variable `{name}` should take label values of {wanted}")
    problems += repeat_problems(dash, variables)
    # Every variable after the cluster_id one and every panel query follows it.
    for name in ("pod", "instance"):
        q = (variables.get(name) or {}).get("definition", "")
        if CLUSTER_FILTER not in q:
            problems.append(f"variable `{name}` must be chained to $cluster_id")
    for p in all_panels(dash):
        for t in p.get("targets") or []:
            if t.get("expr") and CLUSTER_FILTER not in t["expr"]:
                problems.append(f"panel {p.get('title')!r} {t.get('refId')}: does not follow the cluster_id variable")
    names = set()
    for a in annotations(dash):
        where = f"annotation {a.get('name')!r}"
        names.add(a.get("name"))
        if not _ds_ok(a.get("datasource")):
            problems.append(f"{where}: datasource must be ${{datasource}}")
        expr = a.get("expr", "")
        if not expr.strip():
            problems.append(f"{where}: empty expr")
            continue
        for prob in rate_interval_problems(expr):
            problems.append(f"{where}: {prob}")
        for name in sorted(metric_names(expr) - known):
            problems.append(f"{where}: metric {name!r} is not in known_metrics.txt")
        if CLUSTER_FILTER not in expr:
            problems.append(f"{where}: does not follow the cluster_id variable")
    for wanted in ("Readiness transitions", "Policy reloads"):
        if wanted not in names:
            problems.append(f"the annotation {wanted!r} is missing")

    ids = set()
    boxes = []
    for p in all_panels(dash):
        title = p.get("title", "<untitled>")
        where = f"panel {title!r}"
        if p.get("id") in ids:
            problems.append(f"{where}: duplicate panel id {p.get('id')}")
        ids.add(p.get("id"))
        g = p.get("gridPos")
        if not isinstance(g, dict) or not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")):
            problems.append(f"{where}: gridPos with integer h, w, x, y is required")
        else:
            if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > 24 or g["h"] <= 0 or g["y"] < 0:
                problems.append(f"{where}: gridPos {g} is outside the 24-column grid")
            for other_title, o in boxes:
                if (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"]
                        and g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"]):
                    problems.append(f"{where}: gridPos overlaps panel {other_title!r}")
            boxes.append((title, g))
        if p.get("type") == "row":
            continue
        if not str(p.get("description", "")).strip():
            problems.append(f"{where}: a description is required")
        if not _ds_ok(p.get("datasource")):
            problems.append(f"{where}: datasource must be ${{datasource}}, is {p.get('datasource')!r}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"{where}: no queries")
        for t in targets:
            ref = t.get("refId", "?")
            if "datasource" in t and not _ds_ok(t["datasource"]):
                problems.append(f"{where} {ref}: target datasource must be ${{datasource}}")
            expr = t.get("expr", "")
            if not expr.strip():
                problems.append(f"{where} {ref}: empty expr")
                continue
            for prob in rate_interval_problems(expr):
                problems.append(f"{where} {ref}: {prob}")
            for name in sorted(metric_names(expr) - known):
                problems.append(f"{where} {ref}: metric {name!r} is not in known_metrics.txt")
    return problems


def alert_rules(doc):
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise YamlError("a rule file needs a top-level `groups:` list")
    for group in doc["groups"]:
        for rule in group.get("rules") or []:
            yield group.get("name", "?"), rule


def check_alerts(doc, known):
    problems = []
    names = set()
    for group, rule in alert_rules(doc):
        name = rule.get("alert") or rule.get("record")
        where = f"{group}/{name}"
        expr = rule.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            problems.append(f"{where}: empty expr")
            continue
        for metric in sorted(metric_names(expr) - known):
            problems.append(f"{where}: metric {metric!r} is not in known_metrics.txt")
        if "alert" in rule:
            names.add(name)
            if not (rule.get("labels") or {}).get("severity"):
                problems.append(f"{where}: a severity label is required")
            ann = rule.get("annotations") or {}
            for key in ("summary", "description", "runbook_url"):
                if not str(ann.get(key, "")).strip():
                    problems.append(f"{where}: annotation {key} is required")
    if not names:
        problems.append("alerts.yaml has no alerting rules")
    return problems


def read_known(path):
    with open(path) as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}


def emit_queries(dash, alerts_doc, rate_interval):
    """Every PromQL expression, variables at All, as dicts for the integration test."""
    values = variable_values(dash)
    out = []
    for name, selector, _ in variable_queries(dash):
        if selector:
            out.append({"id": f"variable:{name}", "source": "dashboard", "kind": "variable",
                        "expr": substitute(selector, values, rate_interval)})
    for p in all_panels(dash):
        for t in p.get("targets") or []:
            if t.get("expr"):
                out.append({"id": f"panel:{p.get('title')}:{t.get('refId')}", "source": "dashboard",
                            "kind": "panel", "instant": bool(t.get("instant")),
                            "expr": substitute(t["expr"], values, rate_interval)})
    for a in annotations(dash):
        out.append({"id": f"annotation:{a.get('name')}", "source": "annotation", "kind": "annotation",
                    "expr": substitute(a["expr"], values, rate_interval)})
    for group, rule in alert_rules(alerts_doc):
        name = rule.get("alert") or rule.get("record")
        out.append({"id": f"rule:{group}/{name}", "source": "alerts", "kind": "rule",
                    "expr": rule["expr"].strip()})
    return out


def run_checks(dash, alerts_doc, known):
    return check_dashboard(dash, known) + [f"alerts.yaml: {p}" for p in check_alerts(alerts_doc, known)]


def self_test(dash, alerts_doc, known):
    """Break the dashboard and rules in known ways; each breakage must be reported."""
    def broken(mutate, doc="dash"):
        d, a = copy.deepcopy(dash), copy.deepcopy(alerts_doc)
        mutate(d if doc == "dash" else a)
        return run_checks(d, a, known)

    def first_target(d):
        return next(p for p in all_panels(d) if p.get("targets"))["targets"][0]

    def repeated_targets(d):
        return [t for row, ps in rows_with_members(d) if row.get("repeat") for p in ps for t in p.get("targets") or []]

    def first_rate_target(d):
        return next(t for p in all_panels(d) for t in p.get("targets") or [] if "$__rate_interval" in t["expr"])

    cases = {
        "wrong uid": lambda d: d.update(uid="other"),
        "no datasource variable": lambda d: d["templating"].update(
            list=[v for v in d["templating"]["list"] if v["name"] != "datasource"]),
        "fixed rate window": lambda d: first_rate_target(d).update(
            expr=first_rate_target(d)["expr"].replace("$__rate_interval", "5m")),
        "unknown metric": lambda d: first_target(d).update(expr="etcd_readiness_no_such_metric"),
        "missing description": lambda d: next(p for p in all_panels(d) if p.get("targets")).pop("description"),
        "hard-coded datasource": lambda d: next(p for p in all_panels(d) if p.get("targets")).update(
            datasource={"type": "prometheus", "uid": "abc"}),
        "missing gridPos": lambda d: next(p for p in all_panels(d) if p.get("targets")).pop("gridPos"),
        "overlapping panels": lambda d: [p for p in all_panels(d) if p.get("targets")][1].update(
            gridPos=dict(next(p for p in all_panels(d) if p.get("targets"))["gridPos"])),
        "repeat over an unknown variable": lambda d: next(
            p for p in d["panels"] if p.get("repeat")).update(repeat="no_such_variable"),
        "repeated panel not selecting by its variable": lambda d: repeated_targets(d)[0].update(
            expr=repeated_targets(d)[0]["expr"].replace('cluster_id=~"$cluster_id"', "")),
        "member panel not following cluster_id": lambda d: next(
            p for p in all_panels(d) if p.get("title") == "Readiness per member")["targets"][0].update(
            expr='etcd_readiness_ready{pod=~"$pod"}'),
        "pod variable not chained to cluster_id": lambda d: next(
            v for v in d["templating"]["list"] if v["name"] == "pod").update(
            definition="label_values(etcd_readiness_member_info, pod)"),
        "annotation with a fixed rate window": lambda d: annotations(d)[0].update(
            expr=annotations(d)[0]["expr"].replace("$__rate_interval", "5m")),
        "no policy reload annotation": lambda d: d["annotations"].update(
            list=[a for a in d["annotations"]["list"] if a.get("name") != "Policy reloads"]),
        "cluster variable from the wrong metric": lambda d: next(
            v for v in d["templating"]["list"] if v["name"] == "cluster_id")["query"].update(
            query="label_values(etcd_readiness_ready, cluster_id)"),
    }
    alert_cases = {
        "alert without severity": lambda a: a["groups"][0]["rules"][0]["labels"].pop("severity"),
        "alert with unknown metric": lambda a: a["groups"][0]["rules"][0].update(expr="etcd_member_gone == 1"),
        "alert without summary": lambda a: a["groups"][0]["rules"][0]["annotations"].pop("summary"),
        "alert without runbook_url": lambda a: a["groups"][0]["rules"][0]["annotations"].pop("runbook_url"),
    }
    failures = []
    baseline = run_checks(dash, alerts_doc, known)
    if baseline:
        failures.append(f"the unmodified files already have problems: {baseline}")
    for name, mutate in cases.items():
        if not broken(mutate):
            failures.append(f"not detected: {name}")
    for name, mutate in alert_cases.items():
        if not broken(mutate, doc="alerts"):
            failures.append(f"not detected: {name}")
    expected = {"etcd_readiness_ready", "up", "process_resident_memory_bytes"}
    got = metric_names('sum by (pod) (rate(etcd_readiness_ready{a="b"}[5m])) and on (job) up or '
                       'process_resident_memory_bytes offset 5m > 1e3')
    if got != expected:
        failures.append(f"metric_names: expected {sorted(expected)}, got {sorted(got)}")
    return failures, len(cases) + len(alert_cases) + 1


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dashboard", default=DEFAULT_DASHBOARD)
    ap.add_argument("--alerts", default=DEFAULT_ALERTS)
    ap.add_argument("--known-metrics", default=DEFAULT_KNOWN)
    ap.add_argument("--emit-queries", nargs=2, metavar=("DASHBOARD_JSON", "ALERTS_YAML"),
                    help="print every PromQL expression (variables substituted) as one JSON list")
    ap.add_argument("--rate-interval", default="1m",
                    help="what $__rate_interval becomes in --emit-queries (default 1m)")
    ap.add_argument("--self-test", action="store_true",
                    help="mutate the files in memory and check that each breakage is reported")
    args = ap.parse_args(argv)

    dash_path, alerts_path = args.emit_queries or (args.dashboard, args.alerts)
    try:
        with open(dash_path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{dash_path}: not valid JSON: {e}", file=sys.stderr)
        return 1
    try:
        with open(alerts_path) as f:
            docs = load_yaml(f.read())
        if len(docs) != 1:
            raise YamlError(f"expected one YAML document, found {len(docs)}")
        alerts_doc = docs[0]
    except (OSError, YamlError) as e:
        print(f"{alerts_path}: {e}", file=sys.stderr)
        return 1

    if args.emit_queries:
        try:
            print(json.dumps(emit_queries(dash, alerts_doc, args.rate_interval), indent=1))
        except KeyError as e:
            print(f"unknown template variable ${e.args[0]}", file=sys.stderr)
            return 1
        return 0

    known = read_known(args.known_metrics)
    if args.self_test:
        failures, n = self_test(dash, alerts_doc, known)
        for f in failures:
            print(f"SELF-TEST FAILED: {f}", file=sys.stderr)
        if failures:
            return 1
        print(f"self-test: all {n} deliberate breakages detected")
        return 0

    problems = run_checks(dash, alerts_doc, known)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    n_panels = sum(1 for p in all_panels(dash) if p.get("type") != "row")
    n_rules = sum(1 for _ in alert_rules(alerts_doc))
    print(f"OK: {n_panels} panels, {n_rules} rules follow the conventions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

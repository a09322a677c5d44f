#!/usr/bin/env python3
"""Render the mixin (mixin/render.jsonnet) with the official jsonnet binding.

Usage (with a Python that has the `jsonnet` package, see .ci/mixin):

    render.py OUTDIR [--config JSONNET_OBJECT_OR_@FILE]   # write every file under OUTDIR
    render.py --check ROOT                                # exit 1 when ROOT's files differ
    render.py --runbooks ROOT RULES...                    # every runbook_url anchor exists

--config is jsonnet code (an object) merged into _config, or @FILE to read
it from FILE. The file names are render.jsonnet's keys (paths from the
repository root).
"""

import difflib
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def render(config="{}"):
    import _jsonnet  # the official binding (PyPI `jsonnet`)

    if config.startswith("@"):
        with open(config[1:]) as f:
            config = f.read()
    out = json.loads(_jsonnet.evaluate_file(os.path.join(HERE, "render.jsonnet"), ext_codes={"config": config}))
    files = {name: f["header"] + to_yaml(f["doc"]) for name, f in out["yaml"].items()}
    for name, doc in out["json"].items():
        files[name] = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    for name, cm in out["configmaps"].items():
        files[name] = configmap_yaml(cm, files)
    return files


def to_yaml(doc):
    """Block-style YAML of JSON data: mappings in the order given (jsonnet
    sorts fields), sequences indented under their key, strings JSON-quoted,
    or as `|` block scalars when they span lines (PromQL, templates)."""
    out = []

    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, (int, float)):
            return json.dumps(v)
        return yaml_string(v)

    def block_ok(s):
        return "\n" in s and s.endswith("\n") and not s.startswith((" ", "\n")) and all(
            line == line.rstrip() and "\t" not in line for line in s.split("\n"))

    def emit(v, indent, key_prefix):
        pad = " " * indent
        if isinstance(v, dict) and v:
            first = True
            for k, x in v.items():
                lead = key_prefix if first else pad
                first = False
                head = f"{lead}{yaml_string(k) if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_.-]*', k) or k in ('y', 'n', 'yes', 'no', 'on', 'off', 'true', 'false', 'null') else k}:"
                if isinstance(x, (dict, list)) and x:
                    out.append(head)
                    emit(x, indent + 2, " " * (indent + 2))
                elif isinstance(x, str) and block_ok(x):
                    out.append(head + " |")
                    out.extend((" " * (indent + 2) + line) if line else "" for line in x[:-1].split("\n"))
                else:
                    out.append(f"{head} {scalar(x) if not isinstance(x, (dict, list)) else json.dumps(x)}")
        elif isinstance(v, list) and v:
            for x in v:
                if isinstance(x, (dict, list)) and x:
                    emit(x, indent + 2, pad + "- ")
                else:
                    out.append(f"{pad}- {scalar(x) if not isinstance(x, (dict, list)) else json.dumps(x)}")
        else:
            out.append(key_prefix + (json.dumps(v) if isinstance(v, (dict, list)) else scalar(v)))

    emit(doc, 0, "")
    return "\n".join(out) + "\n"


def yaml_string(s):
    """A YAML double-quoted scalar (JSON's escaping is valid YAML)."""
    return json.dumps(s, ensure_ascii=False)


def configmap_yaml(cm, files):
    """A ConfigMap whose data values are rendered files, as `|` block scalars."""
    lines = [cm["header"].rstrip("\n"), "apiVersion: v1", "kind: ConfigMap", "metadata:",
             f"  name: {yaml_string(cm['name'])}", "  labels:"]
    lines += [f"    {yaml_string(k)}: {yaml_string(v)}" for k, v in sorted(cm["labels"].items())]
    lines.append("data:")
    for key, source in sorted(cm["data"].items()):
        text = files[source]
        if any(line != line.rstrip() or "\t" in line for line in text.splitlines()):
            raise ValueError(f"{source}: trailing blanks or tabs cannot go into a YAML block scalar as is")
        lines.append(f"  {yaml_string(key)}: |")
        lines += ["    " + line if line else "" for line in text.rstrip("\n").split("\n")]
    return "\n".join(lines) + "\n"


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading: lowercase, punctuation
    other than `-` and `_` dropped, spaces to `-` (duplicates get -1, -2...)."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(markdown):
    seen = {}
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = github_anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def runbook_problems(root, rule_files):
    """Every alert of every rule file has a runbook_url whose anchor is a
    heading of docs/runbooks.md."""
    with open(os.path.join(root, "docs", "runbooks.md")) as f:
        have = anchors(f.read())
    problems, n = [], 0
    for path in rule_files:
        text = open(path).read()
        alerts = re.findall(r"^\s*- alert: \"?(\w+)\"?\s*$", text, re.M)
        urls = re.findall(r"^\s*runbook_url: \"?([^\"\s]+)\"?\s*$", text, re.M)
        if len(urls) != len(alerts):
            problems.append(f"{path}: {len(alerts)} alerts but {len(urls)} runbook_url annotations")
        for url in urls:
            n += 1
            anchor = url.partition("#")[2]
            if not anchor:
                problems.append(f"{path}: runbook_url {url} has no #anchor")
            elif anchor not in have:
                problems.append(f"{path}: runbook_url {url}: no heading with anchor #{anchor} in docs/runbooks.md")
    return problems, n


def main(argv):
    if len(argv) >= 2 and argv[0] == "--check":
        root, problems = argv[1], []
        for name, text in render().items():
            path = os.path.join(root, name)
            try:
                with open(path) as f:
                    have = f.read()
            except FileNotFoundError:
                problems.append(f"{name}: missing (run `bash .ci/mixin`)")
                continue
            if have != text:
                diff = list(difflib.unified_diff(have.splitlines(), text.splitlines(), f"{name} (committed)", f"{name} (mixin)", lineterm="", n=1))
                problems.append(f"{name}: differs from the mixin's output (run `bash .ci/mixin`):\n  " + "\n  ".join(diff[:40]))
        for p in problems:
            print(f"FAIL: {p}", file=sys.stderr)
        return 1 if problems else 0
    if len(argv) >= 3 and argv[0] == "--runbooks":
        problems, n = runbook_problems(argv[1], argv[2:])
        for p in problems:
            print(f"FAIL: {p}", file=sys.stderr)
        if not problems:
            print(f"ok:   {n} runbook_url anchors exist in docs/runbooks.md")
        return 1 if problems else 0
    if len(argv) in (1, 3) and not argv[0].startswith("-") and (len(argv) == 1 or argv[1] == "--config"):
        outdir = argv[0]
        for name, text in render(argv[2] if len(argv) == 3 else "{}").items():
            path = os.path.join(outdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

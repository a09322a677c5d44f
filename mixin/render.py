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
    return json.loads(_jsonnet.evaluate_file(os.path.join(HERE, "render.jsonnet"), ext_codes={"config": config}))


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

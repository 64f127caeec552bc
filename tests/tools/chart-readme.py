#!/usr/bin/env python3
"""The chart's README.md, generated from its values.yaml: every value with its default and the description its
`# --` comment gives (the helm-docs convention), under a fixed introduction. `--check` exits non-zero when README.md
differs from what this generates (a test runs it, so the README cannot drift from the values).

  tests/tools/chart-readme.py [--check] [CHART_DIR]

A small line parser rather than a YAML library: comments, which carry the descriptions, are what YAML loaders drop.
It reads the subset of YAML values.yaml uses (maps by indentation, scalars, `[]`/`{}`, block lists of scalars or maps).
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

INTRO = """# capi-ipam-in-cluster

The Cluster API IPAM provider for in-cluster pools (`InClusterIPPool`, `GlobalInClusterIPPool`, `InClusterPrefixPool`,
`GlobalInClusterPrefixPool`): a drop-in replacement for `cluster-api-ipam-provider-in-cluster`, with the same API,
finalizers, webhooks and leader-election Lease.

```sh
helm install capi-ipam charts/capi-ipam-in-cluster --namespace capi-ipam-in-cluster-system --create-namespace
```

Needs cert-manager for the webhook certificate unless `webhook.certManager.enabled=false` (then give
`webhook.certificateSecretName` and `webhook.caBundle`). `values.schema.json` checks every value: a wrong one is
refused by `helm install` with the value's path. Migrating from the Go provider, installing with clusterctl or
kustomize, and the Cluster API Operator: docs/install.md and docs/migration.md of the repository.

This file is generated from values.yaml by `tests/tools/chart-readme.py` (`make generate`); edit the comments there.

## Values

| Key | Default | Description |
|-----|---------|-------------|
"""


def parse(lines):
    """(dotted key, default as written, description) for every value, in file order."""
    rows = []
    stack = []  # (indent, key) of the maps we are in
    comment, collecting = [], False
    i = 0
    while i < len(lines):
        raw = lines[i].rstrip("\n")
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        i += 1
        if not stripped:
            comment, collecting = [], False
            continue
        if stripped.startswith("#"):
            text = stripped[1:].strip()
            if text.startswith("-- "):
                comment, collecting = [text[3:]], True
            elif collecting:
                comment.append(text)
            continue
        key, _, value = stripped.partition(":")
        value = value.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        description = " ".join(comment)
        comment, collecting = [], False
        if value:
            rows.append((dotted, value, description))
            continue
        # What the key holds: the lines indented deeper (or list items at its own indent, as YAML allows).
        block = []
        j = i
        while j < len(lines):
            nxt = lines[j].rstrip("\n")
            nxt_indent = len(nxt) - len(nxt.lstrip(" "))
            if nxt.strip() and nxt_indent < indent or (nxt.strip() and nxt_indent == indent
                                                       and not nxt.strip().startswith("- ")):
                break
            block.append(nxt)
            j += 1
        body = [b for b in block if b.strip() and not b.strip().startswith("#")]
        is_list = bool(body) and body[0].strip().startswith("- ")
        if is_list or description:
            # A list, or a map documented as a whole: one value.
            rows.append((dotted, flow(body), description))
            i = j
        else:
            # A map of values: its members are rows of their own.
            stack.append((indent, key))
    return rows


def flow(body):
    """A block as one line of YAML flow style (for the table)."""
    if not body:
        return "{}"
    base = min(len(b) - len(b.lstrip(" ")) for b in body)
    items = [b[base:] for b in body]
    return "<br>".join(f"`{item}`" for item in items)


def cell(text):
    return text.replace("|", "\\|")


def render(chart):
    with open(os.path.join(chart, "values.yaml")) as f:
        rows = parse(f.readlines())
    out = [INTRO]
    for key, default, description in rows:
        shown = default if default.startswith("`") else f"`{default}`"
        out.append(f"| `{key}` | {cell(shown)} | {cell(description)} |\n")
    return "".join(out)


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    chart = args[0] if args else os.path.join(REPO, "charts", "capi-ipam-in-cluster")
    readme = os.path.join(chart, "README.md")
    text = render(chart)
    if check:
        current = open(readme).read() if os.path.exists(readme) else ""
        if current != text:
            print(f"{readme} is not what tests/tools/chart-readme.py generates from values.yaml: run make generate",
                  file=sys.stderr)
            sys.exit(1)
        return
    with open(readme, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()

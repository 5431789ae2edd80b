#!/usr/bin/env python3
"""check_includes.py ROOT [--extra FROM:TO ...] - the include graph between
the folders of src/ against the allowed edges written once, in the
```include-graph block of docs/architecture.md.

A file's folder is its directory under src/ ("server/jobs"; src/main.c and
src/version.h are "main"), except src/server/srv.h, the server object, which
is a node of its own ("server/srv"). An include of "X/Y/h.h" is an edge from
the file's folder to X/Y's. Every edge must be allowed, and every folder that
holds C files must be in the block. --extra adds an edge as if a file made
it (the self-test's way to prove a wrong edge is caught). Prints the
problems, one a line; exits 1 if there are any, 2 if the block is missing."""

import os
import re
import subprocess
import sys


def node(path):
    """The graph node of a path relative to src/."""
    if path == "server/srv.h":
        return "server/srv"
    d = os.path.dirname(path)
    return d if d else "main"


def allowed_edges(root):
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    m = re.search(r"^```include-graph\n(.*?)^```", text, re.M | re.S)
    if not m:
        return None
    allowed = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, targets = line.partition(":")
        allowed[name.strip()] = set(targets.split())
    return allowed


def actual_edges(root):
    files = subprocess.run(["git", "ls-files", "src"], cwd=root, capture_output=True, text=True,
                           check=False).stdout.split()
    if not files:  # not a git checkout
        files = [os.path.relpath(os.path.join(d, f), root)
                 for d, _, fs in os.walk(os.path.join(root, "src")) for f in fs]
    edges, folders = {}, set()
    for f in files:
        if not f.endswith((".c", ".h")):
            continue
        rel = f[len("src/"):]
        src = node(rel)
        folders.add(src)
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', open(os.path.join(root, f),
                             encoding="utf-8", errors="replace").read(), re.M):
            target = m.group(1)
            if "/" not in target:
                continue  # the file's own folder
            dst = node(target)
            if dst != src:
                edges.setdefault((src, dst), []).append(f"{f}: #include \"{target}\"")
    return edges, folders


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    root = args[0]
    extra = [a.split(":", 1) for a in args[2::2]] if len(args) > 2 and args[1] == "--extra" else []
    allowed = allowed_edges(root)
    if allowed is None:
        print("docs/architecture.md has no ```include-graph block")
        return 2
    edges, folders = actual_edges(root)
    for src, dst in extra:
        edges.setdefault((src, dst), []).append(f"(--extra {src}:{dst})")
    problems = []
    for f in sorted(folders - set(allowed)):
        problems.append(f"folder {f} is not in the include graph of docs/architecture.md")
    for (src, dst), where in sorted(edges.items()):
        if dst not in allowed.get(src, set()):
            problems.append(f"{src} may not include {dst}: {where[0]}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The layering of the engine and the UI, checked against the build and the documentation.

Fails (exit 1, one line per problem) when
  - the dependency list in docs/ARCHITECTURE.md differs from the engine's CMake targets,
  - the targets' dependencies form a cycle,
  - an engine file includes a header of a subsystem outside its target's dependencies,
  - the UI folders include each other in a cycle, or anything but mainwindow/ includes mainwindow/,
  - stagecraft-worker is linked against libssh, SQLite or Qt (checked with ldd; the CLI must show
    libssh, so that the check is known to see such libraries at all).

Usage: check_layers.py SOURCE_DIR LAYERS_FILE WORKER CLI
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_cmake_layers(path):
    deps, sources = {}, {}
    with open(path) as f:
        for line in f:
            kind, _, rest = line.rstrip("\n").partition(" ")
            name, _, items = rest.partition(" ")
            values = [v for v in items.split(";") if v]
            (deps if kind == "deps" else sources)[name] = values
    return deps, sources


def read_doc_layers(path):
    text = open(path).read()
    m = re.search(r"```text\n(core\s+->.*?)```", text, re.S)
    if not m:
        return None
    deps = {}
    for line in m.group(1).splitlines():
        name, _, rest = line.partition("->")
        deps[name.strip()] = rest.split()
    return deps


def find_cycle(graph):
    """A list of nodes forming a cycle, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in graph.get(n, []):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                c = visit(d)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def closure(graph, n):
    seen, todo = set(), list(graph.get(n, []))
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(graph.get(d, []))
    return seen


def includes(path):
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def check_engine(root, deps, sources, problems):
    engine = os.path.join(root, "engine")
    # A header belongs to the target that compiles the .cpp of the same stem; otherwise to the
    # target named after its folder.
    owner_by_stem = {}
    for target, files in sources.items():
        for f in files:
            rel = os.path.relpath(f, os.path.join(engine, "src"))
            folder = rel.split(os.sep)[0]
            owner_by_stem[(folder, os.path.splitext(os.path.basename(f))[0])] = target

    def owner(folder, filename):
        return owner_by_stem.get((folder, os.path.splitext(filename)[0]), folder)

    files = []
    for top in (os.path.join(engine, "src"), os.path.join(engine, "include", "stagecraft")):
        for dirpath, _, names in os.walk(top):
            for name in names:
                if name.endswith((".h", ".cpp", ".cu", ".cuh")):
                    path = os.path.join(dirpath, name)
                    folder = os.path.relpath(path, top).split(os.sep)[0]
                    files.append((path, owner(folder, name)))
    if not files:
        problems.append("no engine sources found under " + engine)
    for path, target in files:
        if target not in deps:
            problems.append(f"{os.path.relpath(path, root)}: in folder '{target}', which is no engine target")
            continue
        allowed = closure(deps, target) | {target}
        for number, inc in includes(path):
            m = re.match(r"stagecraft/([a-z_]+)/(.+)$", inc)
            if not m:
                continue
            used = owner(m.group(1), os.path.basename(m.group(2)))
            if used not in allowed:
                problems.append(f"{os.path.relpath(path, root)}:{number}: includes {inc}, but target "
                                f"'{target}' does not depend on '{used}' (docs/ARCHITECTURE.md §1)")


def check_ui(root, problems):
    ui = os.path.join(root, "ui")
    if not os.path.isdir(ui):
        return
    folders = sorted(d for d in os.listdir(ui) if os.path.isdir(os.path.join(ui, d)))
    graph = {f: set() for f in folders}
    for folder in folders:
        for dirpath, _, names in os.walk(os.path.join(ui, folder)):
            for name in names:
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                for number, inc in includes(path):
                    used = inc.split("/")[0]
                    if "/" not in inc or used not in graph or used == folder:
                        continue
                    graph[folder].add(used)
                    if used == "mainwindow":
                        problems.append(f"{os.path.relpath(path, root)}:{number}: includes {inc}; only "
                                        "the application includes mainwindow/")
    cycle = find_cycle({k: sorted(v) for k, v in graph.items()})
    if cycle:
        problems.append("ui folders include each other in a cycle: " + " -> ".join(cycle))


def check_worker(worker, cli, problems):
    def libs(path):
        r = subprocess.run(["ldd", path], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"ldd {path} failed: {r.stderr.strip()}")
            return None
        return r.stdout

    forbidden = re.compile(r"libssh|libsqlite3|libQt6")
    w, c = libs(worker), libs(cli)
    if w is not None:
        for line in w.splitlines():
            if forbidden.search(line):
                problems.append(f"stagecraft-worker links {line.strip().split()[0]}; it must link no libssh, SQLite or Qt")
    if c is not None and "libssh" not in c:
        problems.append("stagecraft-cli shows no libssh under ldd: the worker check cannot see linked libraries")


def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, layers, worker, cli = sys.argv[1:]
    problems = []
    deps, sources = read_cmake_layers(layers)
    doc = read_doc_layers(os.path.join(root, "docs", "ARCHITECTURE.md"))
    if doc is None:
        problems.append("docs/ARCHITECTURE.md: no dependency block (```text starting with 'core ->')")
    else:
        for name in sorted(set(doc) | set(deps)):
            if name not in deps:
                problems.append(f"docs/ARCHITECTURE.md names '{name}', which is no engine target")
            elif name not in doc:
                problems.append(f"docs/ARCHITECTURE.md does not list target '{name}'")
            elif sorted(doc[name]) != sorted(deps[name]):
                problems.append(f"docs/ARCHITECTURE.md: {name} -> {' '.join(doc[name])}, but CMake says "
                                f"{name} -> {' '.join(deps[name])}")
    cycle = find_cycle(deps)
    if cycle:
        problems.append("engine targets depend on each other in a cycle: " + " -> ".join(cycle))
    check_engine(root, deps, sources, problems)
    check_ui(root, problems)
    check_worker(worker, cli, problems)
    for p in problems:
        print(p)
    print(f"{len(deps)} engine targets checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The package's import graph, read from its source: every ``import`` and
``from ... import`` statement (at module level or inside functions), plus
string literals naming one of the package's modules (``importlib``
targets). Importing ``a.b.c`` also runs the ``__init__`` of ``a.b``, so
it counts as an import of that package too, unless the importer is inside it.

The package is layered (``docs/design.md``, "Layers"): each module may
import only modules of its own layer or of the layers below it
(:data:`LAYERS`, bottom first). Run as a script (the lint env does:
``python test/import_graph.py``), it prints every upward import and every
cycle, and fails if there is one; it imports nothing of the package, so it
needs neither funsor nor an installed package.
"""

import ast
import pathlib
import sys

PACKAGE = "funsor_lowering"
PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent / PACKAGE


def module_names():
    """Dotted names of every module of the package (packages by their name)."""
    names = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = (PACKAGE,) + path.relative_to(PACKAGE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _resolve(module, is_package, level, target):
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module, path, known):
    """Modules of the package that ``module`` imports, directly or through
    the packages above them."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve(module, is_package, node.level, node.module)
                if node.level
                else node.module
            )
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in known:
                targets.add(node.value)
    found = set()
    own_packages = {module.rsplit(".", k)[0] for k in range(module.count(".") + 1)}
    for target in targets:
        parts = target.split(".")
        for k in range(1, len(parts) + 1):
            name = ".".join(parts[:k])
            if name in known and name not in own_packages and name != module:
                found.add(name)
    return found


def import_graph():
    known = module_names()
    return {m: imports_of(m, p, known) for m, p in known.items()}


# Layers, bottom first; a module's layer is its first name below the package
# (``funsor_lowering.passes.simplify`` -> ``passes``); the package's own
# ``__init__`` is the top.
LAYERS = [
    {"errors"},
    {"ops"},
    {"ir"},
    {"passes"},
    {"runtime"},
    {"backends"},
    {"lowering", "tracing"},
    {"funsor_hooks"},
    {"api"},
    {"pyro"},
    {"cli", "conformance"},
    {"__main__"},
]


def layer_of(module):
    """The index in :data:`LAYERS` of a module's layer (the top for the
    package itself)."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    for index, names in enumerate(LAYERS):
        if parts[1] in names:
            return index
    raise ValueError(f"{module} is in no layer of LAYERS: add its package there")


def upward_imports(graph):
    """``(importer, imported)`` pairs, without the package prefix, where the
    imported module's layer is above the importer's."""
    found = set()
    for module, targets in graph.items():
        for target in targets:
            if layer_of(target) > layer_of(module):
                found.add((_short(module), _short(target)))
    return found


def _short(module):
    return module.partition(".")[2] or module


def find_cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def main():
    graph = import_graph()
    upward = sorted(upward_imports(graph))
    for importer, imported in upward:
        print(f"upward import: {importer} -> {imported}")
    cycles = find_cycles(graph)
    for cycle in cycles:
        print("cycle:", cycle)
        for m in cycle:
            print("   ", m, "->", sorted(graph[m] & set(cycle)))
    print(
        f"{len(graph)} modules of {PACKAGE} in {len(LAYERS)} layers: "
        f"{len(upward)} upward imports, {len(cycles)} import cycles"
    )
    return 1 if upward or cycles else 0


if __name__ == "__main__":
    sys.exit(main())

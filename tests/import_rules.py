"""What a module imports, read from its source: the checker behind the layering tests of every
package (``tests/ipu/test_layering.py``, ``tests/launch/test_layering.py``,
``tests/models/test_import_rules.py``). Imports inside functions count, relative ones are resolved,
and with ``names=True`` so does a string naming a module of the project (``importlib.import_module``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("poprun_py", "launch", "ipu", "models", "data", "jit")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = ROOT, names: bool = False) -> set[str]:
    """Every module ``path`` imports, and ``module.name`` for each name of a ``from`` import."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] if node.level else [])
            module = ".".join(x for x in (base, node.module) if x)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # ``from models import conv``
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif names and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.split(".")[0] in PROJECT and "." in node.value and " " not in node.value:
            found.add(node.value)
    return found


def under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def offenders_in(paths, forbidden, root: Path = ROOT, names: bool = False) -> dict[str, list[str]]:
    """``{file: [forbidden modules it imports]}`` for the files of ``paths`` that import any."""
    found = {}
    for path in sorted(paths):
        bad = sorted(m for m in imported_modules(path, root, names) if forbidden(m))
        if bad:
            found[str(path.relative_to(root))] = bad
    return found


def offenders(package: str, forbidden, root: Path = ROOT) -> dict[str, list[str]]:
    """:func:`offenders_in` every module of ``package`` (a folder under ``root``), subpackages included."""
    return offenders_in((root / package).rglob("*.py"), forbidden, root)


def module_path(module: str, root: Path = ROOT) -> Path | None:
    """The file of a module of the project (``a.b`` -> ``a/b.py`` or ``a/b/__init__.py``), ``None`` outside it."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def reachable(modules, root: Path = ROOT) -> set[Path]:
    """The files of the project that ``modules`` import, directly or through others, themselves included
    (imports inside functions and modules named in strings count: an over-estimate of what can run)."""
    seen, todo = set(), list(modules)
    while todo:
        name = todo.pop()
        while name and module_path(name, root) is None:  # ``from a import b``: ``a.b`` is a name in ``a``
            name = name.rpartition(".")[0]
        if not name or name.split(".")[0] not in PROJECT:
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing ``a.b.c`` runs ``a`` and ``a.b`` first
            path = module_path(".".join(parts[:i]), root)
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(imported_modules(path, root, names=True))
    return seen


def calls_of(path: Path, name: str) -> int:
    """How many calls ``path`` makes to a function or class called ``name`` (``f(...)`` or ``m.f(...)``)."""
    return sum(1 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
               and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name))


def entry_modules(target: str, root: Path = ROOT) -> set[str]:
    """What a console script ``module:function`` runs: the modules its function imports or names, else its module."""
    module, _, function = target.partition(":")
    tree = ast.parse(module_path(module, root).read_text())
    body = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    named = {n.value for n in ast.walk(body) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.split(".")[0] in PROJECT and module_path(n.value, root) is not None} if body else set()
    return named or {module}


def import_cycles(package: str, root: Path = ROOT) -> list[list[str]]:
    """The import circles among the modules of ``package`` (a folder under ``root``), each as the list of
    its modules; imports inside functions count (a deferred import hides a circle, it does not break it)."""
    paths = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
    edges = {}
    for name, path in paths.items():
        targets = set()
        for m in imported_modules(path, root):
            while m and m not in paths:
                m = m.rpartition(".")[0]
            if m and m != name and paths[m].name != "__init__.py":  # a package's __init__ re-exports
                targets.add(m)
        edges[name] = targets
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


MUTATORS = ("append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove",
            "discard", "__setitem__")


def module_containers(path: Path) -> dict[str, bool]:
    """The module-level names of ``path`` bound to a dict, list or set: ``{name: starts empty}``."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
                found[target.id] = isinstance(value, (ast.Dict, ast.List, ast.Set)) and not (
                    getattr(value, "keys", None) or getattr(value, "elts", None))
            elif isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("dict", "list", "set"):
                found[target.id] = not (value.args or value.keywords)
    return found


def writes_to(path: Path, names: set[str]) -> list[str]:
    """Where ``path`` changes a container called one of ``names`` (``X[k] = v``, ``del X[k]``, ``X.update(...)``,
    also as ``module.X``): ``["line: X"]``."""
    def name_of(node) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        return None

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            targets = [t.value for t in targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        found += [f"{node.lineno}: {n}" for n in map(name_of, targets) if n in names]
    return found

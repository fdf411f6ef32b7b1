"""The product packages' imports, read from their source (ast), follow the layer order written in
docs/DESIGN.md ("Layers") and form no cycle; no module is longer than ``MAX_LINES``.

Every import counts, also one inside a function: a lazy import still ties the layers together."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "db", "autotuner", "service")
MAX_LINES = 450

# importer prefix -> the product modules it may import (prefixes); the most specific importer prefix applies
# kernels.settings reads the environment for every layer and imports nothing of the product: the one
# module of ``kernels`` that ``db`` may import (its docstring says why it lives there)
ALLOWED: dict[str, tuple[str, ...]] = {
    "kernels": ("kernels",),
    "kernels.settings": (),
    "db": ("db", "kernels.settings"),
    "autotuner": ("autotuner", "kernels", "db"),
    "autotuner.lookup": ("autotuner.lookup", "autotuner.domain", "kernels.dtypes"),  # the embedded path: no db, no tuning code
    "autotuner.cli": ("autotuner", "kernels", "db", "service"),  # on top of everything
    "autotuner.__main__": ("autotuner.cli",),  # ``python -m autotuner``: the CLI's entry point
    "service": ("service", "autotuner", "db", "kernels.dtypes", "kernels.settings"),
}
NOT_BELOW_CLI = "autotuner.cli"  # only the CLI itself (and its entry point) imports the CLI
CLI_ENTRY = ("autotuner.cli", "autotuner.__main__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules ``name`` imports anywhere in its source (``from a import b`` counts as
    ``a.b`` where that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] in PACKAGES)
    return found


def graph() -> dict[str, set[str]]:
    modules = product_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def rule_for(name: str) -> tuple[str, ...]:
    owner = max((prefix for prefix in ALLOWED if name == prefix or name.startswith(prefix + ".")), key=len)
    return ALLOWED[owner]


def within(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if not within(target, rule_for(source)):
                bad.append(f"{source} imports {target}")
            elif within(target, (NOT_BELOW_CLI,)) and not within(source, CLI_ENTRY):
                bad.append(f"{source} imports the CLI ({target})")
    return bad


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_imports_follow_the_layer_order():
    assert layer_violations(graph()) == []


def test_product_imports_have_no_cycle():
    assert find_cycle(graph()) is None


def test_lookup_imports_no_db_and_no_gpu_library():
    lookup = {n: p for n, p in product_modules().items() if within(n, ("autotuner.lookup",))}
    assert "autotuner.lookup.select" in lookup
    for name, path in lookup.items():
        tree = ast.parse(path.read_text())
        top = {a.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for a in node.names}
        top |= {(node.module or "").split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert not top & {"db", "torch", "cupy", "triton", "sqlalchemy"}, (name, top)


def test_checks_catch_a_cycle_and_a_layer_breach():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer_violations({"autotuner.lookup.select": {"db.engine"}}) == ["autotuner.lookup.select imports db.engine"]
    assert layer_violations({"kernels.base": {"autotuner.lookup.table"}}) != []
    assert layer_violations({"autotuner.tune.sweep": {"autotuner.cli.app"}}) == ["autotuner.tune.sweep imports the CLI (autotuner.cli.app)"]
    assert layer_violations({"autotuner.cli.commands": {"service.main"}}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_under_the_line_limit(package):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"

"""The package's layers import one way, and no module imports itself back through others.

Every import counts: top-level, inside functions and under TYPE_CHECKING, since each ties the design."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import otel_budget

ROOT = Path(otel_budget.__file__).parent
#: Each layer and the layers it may import (besides itself). The package root (public faces, the CLI) is above all.
MAY_IMPORT: dict[str, set[str]] = {
    "model": {"_version"},
    "telemetry": {"model", "_version"},
    "core": {"model", "telemetry", "_version"},
    "fleet": {"core", "model", "telemetry"},
    "instrumentation": {"core", "model", "telemetry", "fleet"},
    "analysis": {"model", "telemetry"},
    "testing": set(),
    "_version": set(),
    "demo": {"", "testing", "core", "model", "telemetry"},  # an app of the public API (""), as a user writes one
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the otel_budget modules it imports (a name imported from a package counts as its submodule
    when one of that name exists)."""
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("otel_budget"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("otel_budget"):
                    continue
                subs = {f"{target}.{a.name}" for a in node.names} & modules.keys()
                found.update(subs or {target})
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _layer(module: str) -> str:
    """The layer a module belongs to: its folder under otel_budget/; "" for the package root."""
    parts = module.split(".")
    if module == "otel_budget._version":
        return "_version"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in MAY_IMPORT) else ""


def test_no_module_imports_itself_back_through_others() -> None:
    graph = _imports()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                pytest.fail("import circle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in sorted(_imports().items()):
        layer = _layer(module)
        if not layer:
            continue  # the package root: the public faces, the CLI
        for target in sorted(targets):
            other = _layer(target)
            if other != layer and other not in MAY_IMPORT[layer]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers (see docs/architecture.md):\n" + "\n".join(wrong)


def test_the_package_root_holds_only_the_public_faces() -> None:
    root = sorted(p.stem for p in ROOT.glob("*.py"))
    assert len(root) <= 12, root

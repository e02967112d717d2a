"""The kernel's modules, and the core's, import one another without cycles, and the engine knows
nothing of the agent testbed: a replay plugs in through the world interface
(`World.needs_provider`), not through the engine asking the testbed."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "simreport"
KERNEL = "simreport.kernel"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (never executed)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def imports_of(module: str) -> set[str]:
    """The simreport modules `module` imports when it runs (at the top or inside a function);
    `from pkg import sub` counts as importing the submodule, and a module's import of its own
    package's registry (`from . import WORLDS` in a world, `from .. import WORLDS` in the
    `__init__` of a world that is a package) is left out: the package imports its members to
    register them, which is a registration, not a dependency."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(target)
    resolved = {_resolve(name) for name in found if name.startswith("simreport")}
    own_package = module.rsplit(".", 1)[0]  # for a package's __init__, the package above it
    return {r for r in resolved if r is not None and r not in (module, own_package)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def kernel_graph() -> dict[str, set[str]]:
    return {
        m: {t for t in imports_of(m) if t.startswith(KERNEL)}
        for m in MODULES
        if m == KERNEL or m.startswith(KERNEL + ".")
    }


def test_the_engine_imports_nothing_of_the_testbed() -> None:
    testbed = [m for m in imports_of(f"{KERNEL}.engine") if m.startswith(f"{KERNEL}.testbed")]
    assert testbed == []


def test_the_testbed_imports_neither_the_engine_nor_the_worlds_nor_the_replay_runner() -> None:
    above = (f"{KERNEL}.engine", f"{KERNEL}.worlds", f"{KERNEL}.replay_runner")
    problems = [
        f"{m} imports {t}"
        for m in sorted(MODULES)
        if m.startswith(f"{KERNEL}.testbed")
        for t in sorted(imports_of(m))
        if t.startswith(above)
    ]
    assert problems == []


def test_the_kernel_has_no_import_cycle() -> None:
    assert _cycles(kernel_graph()) == []


def test_the_core_has_no_import_cycle() -> None:
    # The scenario's schema imports the testbed's groups; both build on the document model and
    # the model access below them, so neither waits for the other to finish importing.
    core = "simreport.core"
    graph = {
        m: {t for t in imports_of(m) if t.startswith(core + ".")}
        for m in MODULES
        if m.startswith(core + ".")
    }
    assert _cycles(graph) == []
    assert f"{core}.testbed_schema" in graph[f"{core}.schema"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_count() -> None:
    # The replay runner imports the engine at the top; the engine never imports it back, not
    # even inside a function.
    assert f"{KERNEL}.engine" in imports_of(f"{KERNEL}.replay_runner")
    assert f"{KERNEL}.replay_runner" not in imports_of(f"{KERNEL}.engine")

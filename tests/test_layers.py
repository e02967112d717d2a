"""Dependencies point downward only: core ← kernel ← harness ← analysis ← report ← entry points;
a room (a subpackage, or a module at the top) uses only the public names of another; and every
exception the package defines descends from core.errors.SimreportError."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parent.parent / "simreport"
RANK = {
    "core": 0,
    "kernel": 1,
    "harness": 2,
    "ledger": 2,
    "analysis": 3,
    # Evaluation reads run outputs; the kernel (whose runs judge nothing) never imports it.
    "evaluation": 3,
    "report": 4,
}
TOP = 5  # api, cli and other entry points
# Beyond rank: the ledger reads run results through core alone (never the kernel or the
# harness, which will hand it runs), and analysis and report never touch it.
ONLY = {"ledger": {"core", "ledger"}}
NEVER = {"analysis": {"ledger"}, "report": {"ledger"}, "evaluation": {"ledger"}}
REEXPORTED_FROM_THE_CLI: set[tuple[str, str]] = set()
"""(module, the simreport/cli/ module it may import): none; every command is in the CLI."""


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "simreport":
        return -1
    return RANK.get(parts[1], TOP)


def _room(module: str) -> str:
    """`ledger` for simreport.ledger and simreport.ledger.db, `api` for simreport.api."""
    return module.split(".")[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _target(node: ast.ImportFrom, package: str) -> str:
    """The module a `from … import` in `package` imports from, its dots resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _target(node, package)
            found.append(target)
            if not node.module:
                found.extend(f"{target}.{alias.name}" for alias in node.names)
    return [f for f in found if f.startswith("simreport")]


def test_imports_point_downward() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == "simreport":
            continue
        own = _layer(module)
        for imported in _imports(path):
            if imported == "simreport":
                continue  # the version string
            if (module, imported) in REEXPORTED_FROM_THE_CLI:
                continue
            if _layer(imported) > own:
                problems.append(f"{module} imports {imported}")
            room, other = _room(module), _room(imported)
            if room in ONLY and other not in ONLY[room]:
                problems.append(f"{module} imports {imported}")
            if other in NEVER.get(room, set()):
                problems.append(f"{module} imports {imported}")
    assert not problems, "upward imports:\n" + "\n".join(problems)


PRIVATE_ACROSS_ROOMS: dict[str, str] = {}
"""`module:name` → why that module may use another room's private name. Empty: every room
reaches the others through their public names."""


def _private(name: str) -> bool:
    """`_name`, not `__name__`."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(text: str, package: str) -> list[tuple[str, int]]:
    """Every private simreport name the source `text` (of a module in `package`) uses, as
    (`simreport.x._name`, line): imported (`from simreport.x import _name`) or reached through
    what an import bound (`x._name`, `simreport.x._name`)."""
    tree = ast.parse(text)
    bound: dict[str, str] = {}
    used: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("simreport"):
                    # `import a.b` binds `a`; `import a.b as c` binds `c` to a.b.
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            target = _target(node, package)
            if not target.startswith("simreport"):
                continue
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{target}.{alias.name}"
                if _private(alias.name):
                    used.append((f"{target}.{alias.name}", node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = []
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                owner = ".".join([bound[value.id], *reversed(chain)])
                used.append((f"{owner}.{node.attr}", node.lineno))
    return sorted(used, key=lambda pair: (pair[1], pair[0]))


def _across_rooms(module: str, used: list[tuple[str, int]]) -> list[str]:
    return [
        f"{module}:{line} uses {name}"
        for name, line in used
        if name.count(".") >= 2
        and _room(name) != _room(module)
        and f"{module}:{name.rsplit('.', 1)[1]}" not in PRIVATE_ACROSS_ROOMS
    ]


def test_no_room_uses_another_rooms_private_names() -> None:
    """`from simreport.ledger.ingest import _x` or `ingest._x` outside the ledger fails; inside
    one room (simreport.ledger.*, or one module at the top) its private names are its own."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == "simreport":
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        used = _private_uses(path.read_text(encoding="utf-8"), package)
        problems += _across_rooms(module, used)
    assert not problems, "private names used across rooms:\n" + "\n".join(problems)


def test_the_private_name_check_sees_each_spelling() -> None:
    """The check finds a private name imported from another room, one reached through a module
    imported from it, and one reached through a dotted import; it passes a public name, a
    dunder, and a private name of the module's own room."""
    source = (
        "import simreport.ledger.ingest as ingest\n"
        "import simreport.service.queue\n"
        "from ..ledger import db\n"
        "from ..ledger.cli import _table, print_table\n"
        "from ._own import _helper\n"
        "ingest._write_rows\n"
        "db.ledger_url, db.__name__\n"
        "simreport.service.queue._iso\n"
    )
    module = "simreport.report.probe"
    used = _private_uses(source, "simreport.report")
    assert _across_rooms(module, used) == [
        f"{module}:4 uses simreport.ledger.cli._table",
        f"{module}:6 uses simreport.ledger.ingest._write_rows",
        f"{module}:8 uses simreport.service.queue._iso",
    ]


NOT_IMPORTED = {
    # Alembic's environment script runs the migrations when imported; it defines no exception.
    "simreport.ledger.migrations.env": "runs the migrations on import",
}
"""Modules the exception check does not import, each with why."""
OUTSIDE_THE_ERROR_ROOT: dict[str, str] = {}
"""`module.Class` → why that exception may descend from something other than SimreportError.
Empty: every exception simreport defines is one of its errors."""


def _package_modules() -> list[ModuleType]:
    import simreport

    modules = []
    for info in pkgutil.walk_packages(simreport.__path__, "simreport."):
        if info.name.endswith(".__main__") or info.name in NOT_IMPORTED:
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def test_every_exception_descends_from_the_one_error_root() -> None:
    """Every exception class defined in simreport is a core.errors.SimreportError, so a caller
    catching simreport's errors catches them all and each can say where it happened."""
    from simreport.core.errors import SimreportError

    outside = set()
    for module in _package_modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not issubclass(value, SimreportError)
            ):
                outside.add(f"{value.__module__}.{value.__qualname__}")
    assert sorted(outside - set(OUTSIDE_THE_ERROR_ROOT)) == []
    assert not set(OUTSIDE_THE_ERROR_ROOT) - outside, "allowed but gone: remove from the list"

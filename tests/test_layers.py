"""Dependencies point downward only: core ← kernel ← harness ← analysis ← report ← entry points."""

from __future__ import annotations

import ast
from pathlib import Path

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


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
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
            if _layer(imported) > own:
                problems.append(f"{module} imports {imported}")
            room, other = _room(module), _room(imported)
            if room in ONLY and other not in ONLY[room]:
                problems.append(f"{module} imports {imported}")
            if other in NEVER.get(room, set()):
                problems.append(f"{module} imports {imported}")
    assert not problems, "upward imports:\n" + "\n".join(problems)

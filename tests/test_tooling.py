"""The code stays clean: ruff (lint and format), strict mypy on the package, module docstrings
that state a contract in a few lines (the design lives in docs/), and the Python API's verbs
documented with `Args:` and `Returns:`."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return str(path)


@pytest.mark.parametrize(
    "args",
    [
        ["check", "simreport", "tests", "bench"],
        ["format", "--check", "simreport", "tests", "bench"],
    ],
    ids=["lint", "format"],
)
def test_ruff(args: list[str]) -> None:
    proc = subprocess.run([_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_on_the_package() -> None:
    proc = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


MAX_DOCSTRING_LINES = 10
"""A module docstring says what the module does, guarantees and needs; why it is shaped so
belongs in docs/."""


def _docstring_lines() -> dict[str, int]:
    """Module path (relative to the repository) → lines of its module docstring."""
    found = {}
    for path in sorted((ROOT / "simreport").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        found[path.relative_to(ROOT).as_posix()] = len(doc.splitlines()) if doc else 0
    return found


def test_module_docstrings_state_a_contract_in_a_few_lines() -> None:
    long = {path: n for path, n in _docstring_lines().items() if n > MAX_DOCSTRING_LINES}
    assert not long, (
        f"module docstrings over {MAX_DOCSTRING_LINES} lines (move the design to docs/): {long}"
    )


def _api_verbs() -> list[str]:
    """The functions `simreport.api` exports: the verbs, and those `simreport` re-exports."""
    from simreport import api

    return [name for name in api.__all__ if inspect.isfunction(getattr(api, name))]


def _section(doc: str, title: str) -> list[str] | None:
    """The lines of a Google-style section (`Args:`, `Returns:` …) of a docstring, or None."""
    lines = doc.splitlines()
    if f"{title}:" not in lines:
        return None
    body = lines[lines.index(f"{title}:") + 1 :]
    end = next((i for i, line in enumerate(body) if line and not line.startswith(" ")), len(body))
    return body[:end]


_ARG = re.compile(r" {4}\*{0,2}(\w+)(?: \([^)]*\))?:")
"""An entry of an `Args:` section: `name:` or `name (type):`, indented once."""


@pytest.mark.parametrize("name", _api_verbs())
def test_every_api_verb_documents_its_arguments_and_result(name: str) -> None:
    from simreport import api

    verb = getattr(api, name)
    doc = inspect.getdoc(verb) or ""
    signature = inspect.signature(verb)
    params = list(signature.parameters)
    args = _section(doc, "Args")
    if params:
        assert args is not None, f"simreport.{name} takes {params}: its docstring needs `Args:`"
        listed = {match[1] for line in args if (match := _ARG.match(line))}
        unlisted = [p for p in params if p not in listed]
        assert not unlisted, f"simreport.{name}'s `Args:` does not name {unlisted}"
    returned = signature.return_annotation
    assert returned is not inspect.Signature.empty, f"simreport.{name} has no return annotation"
    if returned not in (None, "None"):
        assert _section(doc, "Returns") is not None, (
            f"simreport.{name} returns {returned}: its docstring needs `Returns:`"
        )


def test_no_top_level_verb_is_shadowed_by_a_module() -> None:
    # Importing `simreport.x.y` binds the module `x` on the package, replacing a verb `x` there.
    import simreport

    package = Path(simreport.__file__).parent
    shadowed = [
        name
        for name in simreport.__all__
        if (package / name).is_dir() or (package / f"{name}.py").is_file()
    ]
    assert not shadowed, f"simreport.{shadowed} would become modules once imported"
    import simreport.report.html

    for name in simreport.__all__:
        if name != "__version__":
            assert inspect.isfunction(getattr(simreport, name)), name

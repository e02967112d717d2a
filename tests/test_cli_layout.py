"""The command line lives in simreport/cli/: no other module parses arguments or registers a
command, and the two modules that still re-export its parts for the commands outside it hold
nothing else and serve nothing else; a command's parser registers its own group only."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from simreport.cli.main import COMMAND_GROUPS, build_parser, register_group

PACKAGE = Path(__file__).resolve().parent.parent / "simreport"
CLI = PACKAGE / "cli"

COMMANDS_OUTSIDE_CLI: set[str] = set()
"""Modules outside simreport/cli/ that may register a command: none."""

REEXPORTS: dict[str, str] = {}
"""Modules outside simreport/cli/ that re-export its parts: none."""


def _modules(*, outside_cli: bool) -> list[tuple[str, ast.Module]]:
    """The package's modules (only those outside simreport/cli/, if told): each one's path under
    simreport/, parsed."""
    return [
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (outside_cli and CLI in path.parents)
    ]


def _imported(node: ast.ImportFrom, name: str) -> str:
    """The module a `from … import` in simreport/`name` imports from, its dots resolved."""
    if not node.level:
        return node.module or ""
    package = ["simreport", *name.removesuffix(".py").split("/")[:-1]]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _command_line_uses(tree: ast.AST) -> list[str]:
    """`import argparse`, `from argparse import …` and calls of `.add_parser(…)` or
    `.add_subparsers(…)`, each after its line number."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name == "argparse"]
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse" and not node.level:
            found.append(f"{node.lineno}: from argparse import …")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("add_parser", "add_subparsers")
        ):
            found.append(f"{node.lineno}: {node.func.attr}(…)")
    return sorted(found)


def test_only_the_command_line_parses_arguments() -> None:
    problems = []
    for name, tree in _modules(outside_cli=True):
        uses = _command_line_uses(tree)
        if name in COMMANDS_OUTSIDE_CLI:
            assert uses, f"{name} registers no command now: take it off COMMANDS_OUTSIDE_CLI"
        else:
            problems += [f"simreport/{name}:{use}" for use in uses]
    assert not problems, "argument parsing outside simreport/cli/:\n" + "\n".join(problems)


def test_the_check_sees_each_spelling() -> None:
    source = (
        "import argparse\n"
        "from argparse import ArgumentParser\n"
        "sub.add_parser('x')\n"
        "parser.add_subparsers(dest='c')\n"
        "from .argparse import thing\n"
        "add_parser('a function of its own')\n"
    )
    assert _command_line_uses(ast.parse(source)) == [
        "1: import argparse",
        "2: from argparse import …",
        "3: add_parser(…)",
        "4: add_subparsers(…)",
    ]


def test_the_reexports_hold_nothing_else() -> None:
    for name, origin in REEXPORTS.items():
        for node in ast.parse((PACKAGE / name).read_text(encoding="utf-8")).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            names = isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
            imports = isinstance(node, ast.ImportFrom) and _imported(node, name) in (
                "__future__",
                origin,
            )
            assert docstring or names or imports, f"simreport/{name}:{node.lineno} re-exports not"


def _imports(tree: ast.Module, name: str) -> list[tuple[int, str]]:
    """(line, module) of every import in simreport/`name`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _imported(node, name)))
    return found


def test_only_the_commands_outside_cli_use_the_reexports() -> None:
    old = {"simreport." + name.removesuffix(".py").replace("/", ".") for name in REEXPORTS}
    users = [
        f"simreport/{name}:{line} imports {module}"
        for name, tree in _modules(outside_cli=False)
        if name not in COMMANDS_OUTSIDE_CLI
        for line, module in _imports(tree, name)
        if module in old
    ]
    assert not users, "import these from simreport/cli/:\n" + "\n".join(users)


def test_each_command_group_registers_the_commands_its_row_names() -> None:
    """`simreport <command>` registers only the group its row names: a row that forgot a
    command would leave that command unknown."""
    every = []
    for function, commands in COMMAND_GROUPS:
        sub = argparse.ArgumentParser().add_subparsers()
        register_group(function, sub)
        assert list(sub.choices) == commands.split(), function
        every += commands.split()
    assert len(every) == len(set(every))


@pytest.mark.parametrize(
    ("argv", "registered"),
    [
        (["api", "--help"], ["api"]),
        (["--debug", "ledger", "runs"], ["ledger"]),
        (["cache", "stats"], ["doctor", "cache"]),
        (["--help", "api"], None),
        (["no-such-command"], None),
        ([], None),
    ],
)
def test_a_command_s_parser_holds_its_group_and_help_holds_every_group(
    argv: list[str], registered: list[str] | None
) -> None:
    parser = build_parser(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    every = [name for _, commands in COMMAND_GROUPS for name in commands.split()]
    assert list(sub.choices) == (registered or every)


def test_a_command_imports_no_other_group() -> None:
    """The service's processes start often: `simreport api` and `simreport worker` build their
    parsers without importing the modules of the audit, ledger or review commands."""
    code = (
        "import sys\n"
        "from simreport.cli.main import build_parser\n"
        "build_parser(['worker', '--help'])\n"
        "loaded = [m for m in ('simreport.cli.audit', 'simreport.cli.ledger',"
        " 'simreport.cli.review', 'simreport.cli.new', 'simreport.harness') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""The reference pages of the documentation site, made from the code when the site is built:
every command and option of the `simreport` parser, and the documents' JSON Schemas as tables.
Deterministic: the same code gives the same pages."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from ..core.schema_markdown import schema_markdown, table_cell

DOCUMENTS: dict[str, tuple[str, str]] = {
    "scenario": (
        "Scenario schema",
        "A scenario describes one simulated world: the kernel's input. Plan axes target dotted "
        "paths into it.",
    ),
    "plan": (
        "Audit plan schema",
        "An audit plan names a base scenario and what to vary around it. A plan's `base` is a "
        "whole scenario, so the scenario's types appear here too.",
    ),
    "result": (
        "result.json schema",
        "What one run reports: its statuses, metrics, distributions, integrity and cost.",
    ),
    "audit": (
        "audit.json schema",
        "What an audit concludes, and from what: every field of `audit.json` with its meaning. "
        "Every audit is checked against this contract before it is written, and the pages read "
        "it through the same model.",
    ),
}
"""Document kind (as `simreport schema KIND` names it) → the page's title and opening line."""

CLI_PAGE = "reference/cli.md"


def document_markdown(which: str) -> str:
    """The JSON Schema of one document kind as Markdown tables (`simreport schema KIND --format
    markdown`)."""
    from .audit import document_schema

    title, intro = DOCUMENTS[which]
    intro += (
        f" Made from `simreport schema {which}`: one table for the document, then one per "
        "type it uses; a path ending in `[]` is a list's items, `{}` a map's values."
    )
    return schema_markdown(document_schema(which), title=title, intro=intro)


def reference_pages() -> dict[str, str]:
    """Path under the site's docs folder → Markdown: the command line's page and one page per
    document kind (`reference/plan.md`, …)."""
    from .main import build_parser

    pages = {CLI_PAGE: cli_markdown(build_parser()), "reference/trails.md": trails_markdown()}
    for which in DOCUMENTS:
        pages[f"reference/{which}.md"] = document_markdown(which)
    return pages


def trails_markdown() -> str:
    """The TRAILS axis catalogue as a table: code, template id, level, kind, dimension, default
    target and what varies."""
    from ..harness.axes import AXIS_CATALOG

    lines = [
        "# TRAILS catalogue",
        "",
        "The thirteen axis templates a plan can name (`{template: ID}` or `{template: CODE}`): "
        "the template fills in the axis's level, kind, dimension and default target; the plan "
        "gives the levels and may point `target` elsewhere. What TRAILS is: "
        "[Concepts](../concepts.md#axes-and-trails).",
        "",
        "| code | template | level | kind | dimension | default target | what varies |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in AXIS_CATALOG.values():
        cells = (t.code, f"`{t.id}`", t.level, t.kind, t.dimension, f"`{t.target}`", t.description)
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[argparse.ArgumentParser, str | None]]:
    """Every command's parser below `parser` (`simreport ledger`, `simreport ledger runs`, …)
    with the help line its parent gives it, depth first in the order `--help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield sub, helps.get(name)
                yield from commands(sub)


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """Every command with its usage and a table of its arguments and options."""
    lines = [
        "# Command line",
        "",
        f"Every command of `{parser.prog}` with its arguments and options, as `{parser.prog} "
        "COMMAND --help` prints them. Exit codes are in [Exit codes](command-line.md#exit-codes).",
        "",
    ]
    lines += _command_lines(parser, heading="##", summary=None)
    for sub, summary in commands(parser):
        depth = sub.prog.count(" ")
        lines += _command_lines(sub, heading="#" * min(depth + 1, 4), summary=summary)
    return "\n".join(lines).rstrip("\n") + "\n"


def _command_lines(
    parser: argparse.ArgumentParser, *, heading: str, summary: str | None
) -> list[str]:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "")
    usage = formatter.format_help().strip()
    lines = [f"{heading} {parser.prog}", ""]
    for text in (summary, parser.description):
        if text:
            lines += [" ".join(text.split()), ""]
    lines += ["```text", usage, "```", ""]
    rows = [_argument_row(parser, a) for a in parser._actions if _documented(a)]
    if rows:
        lines += ["| argument | value | default | meaning |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(table_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    subcommands = [
        f"`{choice.dest}`"
        for a in parser._actions
        if isinstance(a, argparse._SubParsersAction)
        for choice in a._choices_actions
    ]
    if subcommands:
        lines += ["Commands: " + ", ".join(subcommands) + ".", ""]
    return lines


def _documented(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction | argparse._SubParsersAction) and (
        action.help != argparse.SUPPRESS
    )


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, ...]:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    if action.option_strings:
        name = ", ".join(f"`{o}`" for o in action.option_strings)
    else:
        name = f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        if action.choices is not None:
            value = " or ".join(f"`{c}`" for c in action.choices)
        elif action.option_strings:
            value = f"`{formatter._metavar_formatter(action, action.dest.upper())(1)[0]}`"
        if action.nargs in ("+", "*"):
            value += " …" if value else "…"
    default = ""
    if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        default = f"`{action.default}`"
    meaning = " ".join(formatter._expand_help(action).split()) if action.help else ""
    if action.required or (not action.option_strings and action.nargs not in ("?", "*")):
        meaning = f"required. {meaning}".strip() if action.option_strings else meaning
    return name, value, default, meaning

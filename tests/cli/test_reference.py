"""The reference pages made from the code: every command of the parser with its options, and
`simreport schema KIND --format markdown`, the documents' schemas as tables."""

from __future__ import annotations

import json
import re

import pytest

from simreport.cli import main
from simreport.cli.main import build_parser
from simreport.cli.reference import DOCUMENTS, cli_markdown, commands, reference_pages
from simreport.core.errors import EXIT_INPUT
from simreport.core.schema_markdown import COLUMNS
from simreport.harness.axes import AXIS_CATALOG


def _section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of any level."""
    start = re.search(rf"^#+ {re.escape(heading)}$", text, re.M)
    assert start is not None, heading
    rest = text[start.end() :]
    end = re.search(r"^#+ ", rest, re.M)
    return rest[: end.start()] if end else rest


def _first_cells(section: str) -> list[str]:
    return [
        line.split(" | ")[0].removeprefix("| ")
        for line in section.splitlines()
        if line.startswith("| ")
    ]


def test_every_command_and_subcommand_has_a_section() -> None:
    parser = build_parser()
    text = cli_markdown(parser)
    progs = [sub.prog for sub, _ in commands(parser)]
    assert {"simreport audit", "simreport ledger runs", "simreport remote cancel"} <= set(progs)
    headings = set(re.findall(r"^#+ (simreport.*)$", text, re.M))
    assert set(progs) <= headings


def test_a_command_lists_each_of_its_options_with_value_and_default() -> None:
    parser = build_parser()
    text = cli_markdown(parser)
    (audit,) = [sub for sub, _ in commands(parser) if sub.prog == "simreport audit"]
    section = _section(text, "simreport audit")
    names = _first_cells(section)
    assert names[0] == "argument"
    for action in audit._actions:
        if action.option_strings and "-h" not in action.option_strings:
            assert ", ".join(f"`{o}`" for o in action.option_strings) in names
    (purpose,) = [line for line in section.splitlines() if line.startswith("| `--purpose`")]
    assert "`exploration` or `regression`" in purpose
    assert "```text\nsimreport audit " in section


def test_a_group_lists_its_subcommands() -> None:
    section = _section(cli_markdown(build_parser()), "simreport ledger")
    (listed,) = [line for line in section.splitlines() if line.startswith("Commands: ")]
    assert "`runs`" in listed and "`show`" in listed


def test_the_reference_pages_are_the_cli_the_catalogue_and_each_document() -> None:
    pages = reference_pages()
    assert set(pages) == {"reference/cli.md", "reference/trails.md"} | {
        f"reference/{which}.md" for which in DOCUMENTS
    }
    trails = [line for line in pages["reference/trails.md"].splitlines() if line.startswith("| ")]
    codes = [line.split(" | ")[0].removeprefix("| ") for line in trails[1:]]
    assert codes == [t.code for t in AXIS_CATALOG.values()]
    assert len(codes) == 13


@pytest.mark.parametrize("which", sorted(DOCUMENTS))
def test_schema_as_markdown_has_a_table_per_type(
    which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", which, "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    header = "| " + " | ".join(COLUMNS) + " |"
    sections = re.findall(r"^## (\w+)$", text, re.M)
    assert sections
    assert text.count(header) == len(sections)


def _row(text: str, section: str, field: str) -> list[str]:
    for line in _section(text, section).splitlines():
        if line.startswith(f"| `{field}` |"):
            return [cell.strip() for cell in line.split(" | ")]
    raise AssertionError(f"no row {field} under {section}")


def test_schema_plan_as_markdown_names_known_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "plan", "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Audit plan schema\n")
    replications = _row(text, "AuditPlan", "replications")
    assert replications[1:4] == ["integer (> 0)", "no", "`1`"]
    assert _row(text, "AuditPlan", "base")[1] == "[Scenario](#scenario) or null"
    assert _row(text, "PerturbationAxis", "levels")[2] == "yes"
    assert _row(text, "PerturbationAxis", "level")[1] == 'one of `"micro"`, `"meso"`, `"macro"`'
    assert "Appears at `axes[]`." in _section(text, "PerturbationAxis")


def test_schema_scenario_as_markdown_gives_params_per_world(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "scenario", "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert 'When `world` is `"prisoners_dilemma"`, `params` is ' in text
    assert _row(text, "PrisonersDilemmaParams", "memoryWindow")[2] == "no"
    assert _row(text, "Scenario", "world")[0] == "| `world`"


def test_schema_audit_as_markdown_gives_audit_json_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "audit", "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    root = re.search(r"^## (\w+)$", text, re.M)
    assert root is not None
    for field in ("schemaVersion", "tests", "verdict", "grade", "provenance"):
        assert _row(text, root.group(1), field)[4], field  # described


def test_schema_without_format_is_still_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "plan"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "AuditPlan"


def test_an_unknown_format_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["schema", "plan", "--format", "html"])
    assert stopped.value.code == EXIT_INPUT
    assert "--format" in capsys.readouterr().err

"""A JSON Schema read as tables: one section per object type, a row per field with its path,
type, required, default and description; links between sections; cells that stay cells."""

from __future__ import annotations

from typing import Any

from simreport.core.schema_markdown import COLUMNS, SchemaRow, schema_markdown, schema_sections

SCHEMA: dict[str, Any] = {
    "title": "Plan",
    "description": "What to vary.",
    "type": "object",
    "required": ["axes"],
    "properties": {
        "axes": {"type": "array", "items": {"$ref": "#/$defs/Axis"}, "description": "Axes."},
        "design": {
            "enum": ["one", "all"],
            "default": "one",
            "description": "How axes | combine.",
        },
        "hypothesis": {
            "anyOf": [{"$ref": "#/$defs/Hypothesis"}, {"type": "null"}],
            "default": None,
            "description": "Expected directions.",
        },
        "limits": {
            "type": "object",
            "description": "Inline limits.",
            "properties": {
                "runs": {
                    "type": "integer",
                    "exclusiveMinimum": 0,
                    "maximum": 2**63 - 1,
                    "minimum": -(2**63),
                }
            },
        },
        "labels": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Display text.",
        },
        "mode": {"$ref": "#/$defs/Mode"},
        "world": {"type": "string"},
        "params": {"type": "object", "additionalProperties": True},
    },
    "allOf": [
        {
            "if": {"properties": {"world": {"const": "pd"}}, "required": ["world"]},
            "then": {"properties": {"params": {"$ref": "#/$defs/PdParams"}}},
        }
    ],
    "$defs": {
        "Axis": {
            "type": "object",
            "description": "One axis.",
            "required": ["levels"],
            "properties": {
                "id": {"type": "string", "pattern": "^[^|=@]+$"},
                "levels": {"type": "array", "minItems": 1, "items": {}},
                "next": {"anyOf": [{"$ref": "#/$defs/Axis"}, {"type": "null"}]},
            },
        },
        "Hypothesis": {
            "type": "object",
            "properties": {
                "outcomes": {
                    "type": "object",
                    "additionalProperties": {"enum": ["increase", "decrease"]},
                }
            },
        },
        "Mode": {"enum": ["fast", "slow"], "type": "string"},
        "PdParams": {"type": "object", "properties": {"rounds": {"type": "integer"}}},
    },
}


def _rows() -> dict[str, dict[str, SchemaRow]]:
    return {s.name: {r.path: r for r in rows} for s, rows, _ in schema_sections(SCHEMA)}


def test_one_section_per_object_type_the_document_first() -> None:
    names = [section.name for section, _, _ in schema_sections(SCHEMA)]
    assert names == ["Plan", "Axis", "Hypothesis", "PdParams"]  # Mode is an enum: inline


def test_rows_give_path_type_required_default_and_description() -> None:
    plan = _rows()["Plan"]
    assert plan["axes"] == SchemaRow("axes", "list of [Axis](#axis)", True, "", "Axes.")
    assert plan["design"].type == 'one of `"one"`, `"all"`'
    assert (plan["design"].required, plan["design"].default) == (False, '"one"')
    assert plan["hypothesis"].type == "[Hypothesis](#hypothesis) or null"
    assert plan["hypothesis"].default == "null"
    assert plan["mode"].type == 'one of `"fast"`, `"slow"`'
    assert plan["labels"].type == "map of names to string"


def test_inline_objects_are_rows_under_their_path_and_int64_bounds_are_left_out() -> None:
    plan = _rows()["Plan"]
    assert plan["limits"].type == "object"
    assert plan["limits.runs"].type == "integer (> 0)"


def test_a_type_records_where_it_appears_and_a_self_reference_ends() -> None:
    sections = {s.name: s for s, _, _ in schema_sections(SCHEMA)}
    assert sections["Axis"].paths == ["axes[]"]
    assert sections["PdParams"].paths == ["params"]
    axis = _rows()["Axis"]
    assert axis["next"].type == "[Axis](#axis) or null"
    assert axis["levels"] == SchemaRow("levels", "list (at least 1)", True, "", "")


def test_conditional_types_become_notes() -> None:
    notes = {s.name: n for s, _, n in schema_sections(SCHEMA)}
    assert notes["Plan"] == ['When `world` is `"pd"`, `params` is [PdParams](#pdparams).']


def _table_rows(text: str, section: str) -> list[list[str]]:
    """The cells of the table under `## section`, split at unescaped pipes."""
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    return [_cells(line) for line in lines]


def _cells(line: str) -> list[str]:
    """A table line's cells, as the site's Markdown splits it: at pipes neither escaped nor
    inside a code span."""
    cells, cell, code = [], "", False
    for i, char in enumerate(line):
        if char == "`":
            code = not code
        if char == "|" and not code and line[i - 1 : i] != "\\":
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return cells[1:]


def test_the_markdown_has_a_table_per_section_with_one_line_per_row() -> None:
    text = schema_markdown(SCHEMA, title="The plan", intro="Intro line.")
    assert text.startswith("# The plan\n\nIntro line.\n\n## Plan\n")
    assert text.endswith("\n") and not text.endswith("\n\n")
    rows = _table_rows(text, "Plan")
    assert rows[0] == list(COLUMNS)
    by_field = {r[0]: r for r in rows[1:]}
    assert set(by_field) == {
        "`axes`",
        "`design`",
        "`hypothesis`",
        "`limits`",
        "`limits.runs`",
        "`labels`",
        "`mode`",
        "`world`",
        "`params`",
    }
    assert all(len(r) == len(COLUMNS) for r in rows)
    assert by_field["`axes`"][2] == "yes"
    assert by_field["`design`"][4] == "How axes \\| combine."  # a pipe outside code is escaped
    assert "Appears at `axes[]`." in text


def test_a_pipe_inside_a_code_span_stays_as_it_is() -> None:
    text = schema_markdown(SCHEMA, title="t")
    (row,) = [r for r in _table_rows(text, "Axis")[1:] if r[0] == "`id`"]
    assert row[1] == "string (matching `^[^|=@]+$`)"


def test_the_same_schema_gives_the_same_text() -> None:
    assert schema_markdown(SCHEMA, title="t") == schema_markdown(SCHEMA, title="t")


def test_a_schema_without_fields_or_title_still_renders() -> None:
    text = schema_markdown({"type": "object"}, title="Empty")
    assert "## Document" in text
    assert "No fields." in text

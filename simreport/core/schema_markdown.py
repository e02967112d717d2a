"""A JSON Schema as Markdown tables: one table for the document and one per object type it refers
to, each row a field with its path, type, whether it is required, its default and description.
Pure: a schema in, text out; the same schema always gives the same text."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Schema = Mapping[str, Any]

COLUMNS = ("field", "type", "required", "default", "description")
"""The columns of every table, in order."""

_INT64 = (-(2**63), 2**63 - 1)
"""Bounds every integer carries (the ledger's range): shown nowhere, they would be noise."""

_MAX_PATHS = 4
"""How many of the paths a type appears at its section names."""


@dataclass
class _Section:
    name: str
    schema: Schema
    paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SchemaRow:
    """One field of an object type: `path` relative to the type (`llm.model`, `axes[]`,
    `fields{}`), its type in words, whether it is required, its default (JSON) and description."""

    path: str
    type: str
    required: bool
    default: str
    description: str


def schema_markdown(schema: Schema, *, title: str, intro: str = "") -> str:
    """The schema as Markdown: a title, `intro` when given, then one section per object type.

    Args:
        schema: a JSON Schema (draft 2020-12, as pydantic writes it: `$defs`, `$ref`, `anyOf`).
        title: the first heading's text.
        intro: a paragraph under the title.

    Returns:
        The page, ending with a newline. Sections are `##` headings named after the type (the
        document's own first), linked from the type column of the rows that use them.
    """
    lines = [f"# {title}", ""]
    if intro:
        lines += [intro, ""]
    for section, rows, notes in schema_sections(schema):
        lines += [f"## {section.name}", ""]
        if section.paths:
            shown = ", ".join(f"`{p}`" for p in section.paths[:_MAX_PATHS])
            more = " and elsewhere" if len(section.paths) > _MAX_PATHS else ""
            lines += [f"Appears at {shown}{more}.", ""]
        description = _one_line(section.schema.get("description", ""))
        if description:
            lines += [description, ""]
        lines += _table(rows)
        lines += [""] + [f"- {note}" for note in notes] + ([""] if notes else [])
    return "\n".join(lines).rstrip("\n") + "\n"


def schema_sections(schema: Schema) -> list[tuple[_Section, list[SchemaRow], list[str]]]:
    """The document's object types in the order they are first reached (the document first),
    each with its rows and its notes (conditional parts such as `params` per `world`)."""
    defs: Mapping[str, Schema] = schema.get("$defs", {})
    root = _Section(str(schema.get("title", "Document")), schema)
    sections: dict[str, _Section] = {root.name: root}
    queue = [root]
    out = []
    while queue:
        section = queue.pop(0)
        walker = _Walker(defs, section.name)
        rows = walker.rows(section.schema, "")
        notes = walker.conditionals(section.schema)
        for name, relative in walker.referenced:
            target = sections.get(name)
            if target is None:
                target = sections[name] = _Section(name, defs[name])
                queue.append(target)
            bases = section.paths or [""]
            for base in bases[:_MAX_PATHS]:
                path = f"{base}.{relative}" if base else relative
                if path not in target.paths and target is not section:
                    target.paths.append(path)
        out.append((section, rows, notes))
    return out


class _Walker:
    """Rows of one object type; collects the types (`$defs`) its rows refer to."""

    def __init__(self, defs: Mapping[str, Schema], own: str) -> None:
        self.defs = defs
        self.own = own
        self.referenced: list[tuple[str, str]] = []

    def rows(self, obj: Schema, prefix: str) -> list[SchemaRow]:
        required = set(obj.get("required", ()))
        found = []
        for name, prop in obj.get("properties", {}).items():
            path = f"{prefix}{name}"
            found.append(
                SchemaRow(
                    path=path,
                    type=self.type_of(prop, path),
                    required=name in required,
                    default=_default(prop),
                    description=_one_line(prop.get("description", "")),
                )
            )
            found += self._nested(prop, path)
        return found

    def _nested(self, prop: Schema, path: str) -> list[SchemaRow]:
        """Rows of an object written inline (no `$ref`): its fields under `path.`."""
        if prop.get("properties"):
            return self.rows(prop, f"{path}.")
        items = prop.get("items")
        if isinstance(items, Mapping) and items.get("properties"):
            return self.rows(items, f"{path}[].")
        extra = prop.get("additionalProperties")
        if isinstance(extra, Mapping) and extra.get("properties"):
            return self.rows(extra, f"{path}{{}}.")
        return []

    def type_of(self, s: Schema, path: str) -> str:
        """The type in words, with links to the sections of the object types it names."""
        if "$ref" in s:
            return self._ref(str(s["$ref"]), path)
        if "const" in s:
            return f"`{_json(s['const'])}`"
        if "enum" in s:
            return "one of " + ", ".join(f"`{_json(v)}`" for v in s["enum"])
        for key in ("anyOf", "oneOf"):
            if key in s:
                return self._alternatives(s[key], path)
        if "allOf" in s and len(s["allOf"]) == 1:
            return self.type_of(s["allOf"][0], path)
        if "then" in s or "else" in s:
            return self._alternatives([s[k] for k in ("then", "else") if k in s], path)
        kind = s.get("type")
        if isinstance(kind, list):
            return " or ".join(str(k) for k in kind)
        if kind == "array":
            items = s.get("items")
            if isinstance(items, Mapping) and items:
                inner = "object" if items.get("properties") else self.type_of(items, f"{path}[]")
                return f"list of {inner}" + _bounds(s)
            return "list" + _bounds(s)
        if kind == "object":
            extra = s.get("additionalProperties")
            if isinstance(extra, Mapping) and extra and not s.get("properties"):
                inner = "object" if extra.get("properties") else self.type_of(extra, f"{path}{{}}")
                return f"map of names to {inner}"
            return "object"
        if kind is None:
            return "any"
        return str(kind) + _bounds(s)

    def _ref(self, ref: str, path: str) -> str:
        name = ref.rsplit("/", 1)[-1]
        target = self.defs.get(name)
        if target is None:
            return name
        if not target.get("properties"):
            return self.type_of(target, path)  # an enum or an alias: inline
        if name != self.own:
            self.referenced.append((name, path))
        return f"[{name}](#{name.lower()})"

    def _alternatives(self, options: Sequence[Schema], path: str) -> str:
        nullable = any(o.get("type") == "null" for o in options)
        words = []
        for option in options:
            if option.get("type") == "null":
                continue
            word = self.type_of(option, path)
            if word not in words:
                words.append(word)
        text = " or ".join(words) if words else "null"
        return f"{text} or null" if nullable and words else text

    def conditionals(self, obj: Schema) -> list[str]:
        """`allOf` entries of the form *if field X is V then field Y is of type T*, in words."""
        notes = []
        for entry in obj.get("allOf", ()):
            when = entry.get("if", {}).get("properties", {})
            then = entry.get("then", {}).get("properties", {})
            if len(when) != 1 or not then:
                continue
            ((key, condition),) = when.items()
            if "const" not in condition:
                continue
            for name, prop in then.items():
                notes.append(
                    f"When `{key}` is `{_json(condition['const'])}`, `{name}` is "
                    f"{self.type_of(prop, name)}."
                )
        return notes


def _table(rows: Sequence[SchemaRow]) -> list[str]:
    if not rows:
        return ["No fields."]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = (
            f"`{row.path}`",
            row.type,
            "yes" if row.required else "no",
            f"`{row.default}`" if row.default else "",
            row.description,
        )
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    return lines


def _default(prop: Schema) -> str:
    return _json(prop["default"]) if "default" in prop else ""


def _bounds(s: Schema) -> str:
    """Limits worth reading: `≥ 1`, `> 0`, `≤ 100`, `at least 1 item`."""
    parts = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">")):
        if key in s and s[key] not in _INT64:
            parts.append(f"{sign} {s[key]}")
    for key, sign in (("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in s and s[key] not in _INT64:
            parts.append(f"{sign} {s[key]}")
    if s.get("minItems"):
        parts.append(f"at least {s['minItems']}")
    if s.get("uniqueItems"):
        parts.append("unique")
    if "pattern" in s:
        parts.append(f"matching `{s['pattern']}`")
    return f" ({', '.join(parts)})" if parts else ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def table_cell(text: str) -> str:
    """Text as one Markdown table cell: on one line, `|` escaped outside code spans (inside them
    the site's Markdown keeps a pipe as it is, and would show the backslash)."""
    parts = " ".join(text.split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))

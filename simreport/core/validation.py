"""Turn pydantic validation errors into located, readable issues."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import SchemaError, ValidationIssue, join_path
from .files import Document

M = TypeVar("M", bound=BaseModel)

_EXPECTED = {
    "extra_forbidden": "no such key here",
    "missing": "this key to be present",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "literal_error": None,
    "too_short": None,
    "greater_than": None,
    "greater_than_equal": None,
    "less_than_equal": None,
}


def issues_from(error: ValidationError) -> list[ValidationIssue]:
    issues = []
    for item in error.errors(include_url=False):
        loc = [str(p) for p in item["loc"]]
        # Discriminated and smart unions add the member's tag to the location; drop it.
        loc = [p for p in loc if not _is_union_tag(p)]
        kind = item["type"]
        message = item["msg"]
        if kind == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}" if loc else "unknown key"
        elif kind == "missing":
            message = f"missing required key {loc[-1]!r}" if loc else "missing required key"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        expected = _EXPECTED.get(kind)
        if kind == "literal_error":
            expected = item.get("ctx", {}).get("expected")
        issues.append(ValidationIssue(join_path(*loc), message, expected))
    return issues


def _is_union_tag(part: str) -> bool:
    return part in {
        "categorical",
        "uniform",
        "normal",
        "constant",
        "str",
        "int",
        "float",
        "bool",
        "list[int]",
        "literal['all','rest']",
        "literal['all', 'rest']",
    } or part.startswith(("function-", "union["))


def validate_model(
    model: type[M],
    data: Any,
    *,
    file: str | Path | None = None,
    document: Document | None = None,
    prefix: str = "",
) -> M:
    """Validate `data` as `model`, raising SchemaError located in `file` (and its line)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issues = issues_from(exc)
        first = join_path(prefix, issues[0].path) if prefix else issues[0].path
        line = document.line_of(first) if document is not None else None
        raise SchemaError(
            issues, file=file or (document.path if document else None), line=line, prefix=prefix
        ) from None

"""Turn pydantic validation errors into located, readable issues."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import SchemaError, ValidationIssue, join_path
from .files import Document
from .values import NAME_EXPECTED, TEXT_EXPECTED

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
    "finite_number": "a finite number",
    "name_character": NAME_EXPECTED,
    "text_character": TEXT_EXPECTED,
    "http_url": "a URL such as http://127.0.0.1:8000/v1",
}


def expectation(kind: str) -> str | None:
    """What a value should have been, for a pydantic error of type `kind` (None when its message
    says it)."""
    return _EXPECTED.get(kind)


def issues_from(
    error: ValidationError, model: type[BaseModel] | None = None
) -> list[ValidationIssue]:
    """The located issues of a validation error. `model` is the model that was validated (found
    from the error's title when not given); with it, an unknown key's issue lists the keys the
    model has there and the nearest one."""
    root = model if model is not None else _model_named(error.title)
    issues = []
    for item in error.errors(include_url=False):
        raw = list(item["loc"])
        loc = [str(p) for p in raw]
        # Discriminated and smart unions add the member's tag to the location; drop it.
        loc = [p for p in loc if not _is_union_tag(p)]
        kind = item["type"]
        message = item["msg"]
        expected: str | None = _EXPECTED.get(kind)
        if kind == "extra_forbidden" and loc:
            message, expected = _unknown_key(root, raw, loc)
        elif kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "missing":
            message = f"missing required key {loc[-1]!r}" if loc else "missing required key"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if kind == "literal_error":
            expected = item.get("ctx", {}).get("expected")
        issues.append(ValidationIssue(join_path(*loc), message, expected, kind))
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
        "list[constrained-int]",
        "literal['all','rest']",
        "literal['all', 'rest']",
    } or part.startswith(("function-", "union["))


def _unknown_key(
    root: type[BaseModel] | None, raw: Sequence[Any], loc: Sequence[str]
) -> tuple[str, str]:
    """The message and expectation for an unknown key: the keys allowed there and, when one is
    close, which was meant."""
    key = loc[-1]
    container = _model_at(root, raw[:-1]) if root is not None else None
    noun = getattr(root, "key_noun", "key") if len(loc) == 1 else "key"
    message = f"unknown {noun} {key!r}"
    if container is None:
        return message, "no such key here"
    known = sorted(field.alias or name for name, field in container.model_fields.items())
    if not known:
        return message, f"no {noun}s here"
    expected = "one of " + ", ".join(known)
    meant = nearest(key, known)
    if meant is not None:
        expected += f"; did you mean {meant}?"
    return message, expected


def nearest(word: str, choices: Sequence[str]) -> str | None:
    """The choice `word` most likely misspells: the same name in another case or spelling
    convention (memory_window → memoryWindow), else the closest by edit similarity."""
    squash = {c.replace("_", "").replace("-", "").lower(): c for c in choices}
    same = squash.get(word.replace("_", "").replace("-", "").lower())
    if same is not None:
        return same
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def _model_named(title: str) -> type[BaseModel] | None:
    """The document model a validation error's title names, when exactly one has that name."""
    from .schema import Model

    found: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [Model]
    while pending:
        cls = pending.pop()
        if cls.__name__ == title:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found[0] if len(found) == 1 else None


def _model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model whose keys sit at `loc` (a raw pydantic location) inside `root`, or None when
    the path leads somewhere that is not a model."""
    current: Any = root
    parts = [p for p in loc if not (isinstance(p, str) and p.startswith("function-"))]
    i = 0
    while True:
        current = _unwrap(current)
        members = _union_members(current)
        if members is not None:
            tag = parts[i] if i < len(parts) else None
            chosen = [m for m in members if tag is not None and _is_tag_of(m, tag)]
            if chosen:
                current, i = chosen[0], i + 1
                continue
            models = [m for m in members if _is_model(m)]
            if len(models) != 1:
                return None
            current = models[0]
            continue
        if i >= len(parts):
            return current if _is_model(current) else None
        part = parts[i]
        i += 1
        if _is_model(current):
            fields = {f.alias or name: f for name, f in current.model_fields.items()}
            field = fields.get(str(part)) or current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
            current = args[1]
        elif isinstance(origin, type) and issubclass(origin, (list, tuple)) and args:
            current = args[0]
        else:
            return None


def _unwrap(annotation: Any) -> Any:
    """The annotation without Annotated metadata and without None in a union."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    members = _union_members(annotation)
    if members is not None:
        rest = [m for m in members if m is not type(None)]
        if len(rest) == 1:
            return _unwrap(rest[0])
    return annotation


def _union_members(annotation: Any) -> list[Any] | None:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_unwrap(m) if m is not type(None) else m for m in typing.get_args(annotation)]
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_tag_of(member: Any, tag: Any) -> bool:
    """Whether a union location tag names this member: its class name or its discriminator."""
    if not _is_model(member):
        return False
    if member.__name__ == tag:
        return True
    for field in member.model_fields.values():
        if typing.get_origin(field.annotation) is typing.Literal and tag in typing.get_args(
            field.annotation
        ):
            return True
    return False


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
        issues = issues_from(exc, model)
        first = join_path(prefix, issues[0].path) if prefix else issues[0].path
        line = document.line_of(first) if document is not None else None
        raise SchemaError(
            issues, file=file or (document.path if document else None), line=line, prefix=prefix
        ) from None

"""Dotted-path access into scenario documents: `population.n`, `executors.0.options.components`.

Only paths that exist can be overridden; re-validation of the result is the caller's job, since
only the kernel knows every world's parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .errors import UnknownOverride


def lookup(doc: Any, dotted: str) -> tuple[bool, Any]:
    """`(True, value)` at a dotted path of a document (list items by index), or `(False, None)`
    when the path does not exist there. Never raises: for readers of documents already valid."""
    node = doc
    for part in dotted.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def split_path(path: str) -> list[str]:
    if not path or any(part == "" for part in path.split(".")):
        raise UnknownOverride(
            f"malformed path {path!r}", path=path, expected="dot-separated keys like params.framing"
        )
    return path.split(".")


def _step(node: Any, part: str, path: str, walked: list[str]) -> Any:
    here = ".".join(walked) or "the scenario"
    if isinstance(node, dict):
        if part not in node:
            keys = ", ".join(sorted(node)) or "none"
            raise UnknownOverride(
                f"target {path!r} does not exist: {here} has no key {part!r}",
                path=path,
                expected=f"one of the keys at {here}: {keys}",
            )
        return node[part]
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise UnknownOverride(
                f"target {path!r} does not exist: {here} is a list of {len(node)}",
                path=path,
                expected=f"an index below {len(node)}",
            )
        return node[int(part)]
    raise UnknownOverride(
        f"target {path!r} does not exist: {here} is a {type(node).__name__}, not a mapping or list",
        path=path,
        expected="a path that stops at or before a plain value",
    )


def get_path(document: Any, path: str) -> Any:
    """The value at `path`; UnknownOverride when any step is missing."""
    node = document
    walked: list[str] = []
    for part in split_path(path):
        node = _step(node, part, path, walked)
        walked.append(part)
    return node


def set_path(document: Any, path: str, value: Any) -> Any:
    """A deep copy of `document` with `path` set to `value`; the path must already exist."""
    parts = split_path(path)
    result = copy.deepcopy(document)
    node = result
    walked: list[str] = []
    for part in parts[:-1]:
        node = _step(node, part, path, walked)
        walked.append(part)
    last = parts[-1]
    _step(node, last, path, walked)  # raises if missing
    if isinstance(node, list):
        node[int(last)] = copy.deepcopy(value)
    else:
        node[last] = copy.deepcopy(value)
    return result


def apply_overrides(document: Any, overrides: dict[str, Any] | list[tuple[str, Any]]) -> Any:
    items = overrides.items() if isinstance(overrides, dict) else overrides
    for path, value in items:
        document = set_path(document, path, value)
    return document

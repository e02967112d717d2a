"""Canonical JSON (sorted keys, strict RFC 8259) and the sha256 hashes built on it.

Non-finite floats are written as the strings "inf", "-inf" and "nan" so every file we write parses
with any JSON reader; hashes and output files go through the same encoder.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _plain(value: Any) -> Any:
    # The exact types of parsed JSON and YAML first: every scenario is walked at each start of
    # the workflow, and at thousands of conditions the isinstance chain below was a tenth of it.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    # numpy scalars and the like
    if hasattr(value, "item"):
        return _plain(value.item())
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def to_plain(value: Any) -> Any:
    """The JSON-safe form of `value`: non-finite floats become strings, tuples become lists."""
    return _plain(value)


def sorted_mappings(value: Any) -> Any:
    """`value` with the keys of every mapping in it in sorted order, at every depth; lists keep
    their order. Code that iterates a document's mappings then sees the order its canonical JSON
    (and so its hash) has, whatever order the document was written in."""
    if isinstance(value, Mapping):
        return {str(k): sorted_mappings(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [sorted_mappings(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Compact, sorted-key JSON used for hashing."""
    return json.dumps(
        _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


_DOCUMENT_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def document_json(document: Mapping[str, Any]) -> str:
    """`canonical_json` of a document whose mappings all have text keys, such as a pydantic
    JSON-mode dump (`to_doc()`), in one pass of json's C encoder. Anything that encoder refuses
    (a non-finite float, a type JSON has no form for) goes the general way. Not for documents that
    may have other keys: json writes `1` or `True` as a key by its own rules, not by `str()`."""
    try:
        return _DOCUMENT_ENCODER.encode(document)
    except (TypeError, ValueError):
        return canonical_json(document)


def pretty_json(value: Any) -> str:
    """Sorted-key, indented JSON with a trailing newline, used for files people read."""
    return (
        json.dumps(_plain(value), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        + "\n"
    )


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """sha256 of the canonical JSON of `value`."""
    return sha256_text(canonical_json(value))


def parse_number(value: Any) -> Any:
    """Read back a number written by this module ("inf", "-inf", "nan" → floats)."""
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    return value

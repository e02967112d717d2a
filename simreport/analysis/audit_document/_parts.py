"""What the parts of audit.json are made of: the strict document base, and the numbers,
counts, intervals and words its sections share."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from ...core.canonical import NON_FINITE, parse_number, to_plain
from ...core.schema import Model
from ...core.values import Int64

AUDIT_SCHEMA_VERSION = 3
"""The version `AuditDoc.schemaVersion` states; a change a reader must know of raises it."""


def _written(value: float) -> float | str:
    """A float as audit.json writes it: itself, or "inf", "-inf", "nan"."""
    return value if math.isfinite(value) else str(to_plain(value))


Real = Annotated[
    float,
    BeforeValidator(parse_number),
    PlainSerializer(_written, return_type=float | str, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"enum": sorted(NON_FINITE)}]}),
]
"""A statistic that may be infinite or undefined (Cohen's d of two constant samples, a run's
metric): a number, or one of the strings "inf", "-inf", "nan"."""

Count = Annotated[Int64, Field(ge=0)]
"""How many of something: a non-negative integer."""

Interval = Annotated[list[Real], Field(min_length=2, max_length=2)]
"""A 95 % interval of a mean difference, [lower, upper]."""

Direction = Literal["increase", "decrease"]
Family = Literal["primary", "secondary"]
Conclusion = Literal["moved", "unchanged", "inconclusive", "untested"]
Purpose = Literal["regression", "exploration"]
JsonObject = dict[str, Any]
"""A JSON object whose keys the audit does not fix (model settings, a condition's levels)."""


class AuditModel(Model):
    """Base of the audit's parts: the project's document rules (camelCase keys, no unknown key)
    and strict types, so `"3"` is no count and `1` no boolean."""

    model_config = ConfigDict(strict=True)

"""What a value must be wherever it enters, defined once for documents, requests and options.

Integers fit a signed 64-bit column (the ledger's BigInteger: PostgreSQL's bigint, SQLite's
INTEGER) and are never a boolean, a float or text; numbers are finite and never a boolean or text;
names and identifiers carry no control or bidirectional-control character; free text carries no
control character but tab, newline and carriage return (PostgreSQL cannot store NUL); a model
endpoint is an http(s) URL with a host.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Annotated, Any, cast
from urllib.parse import SplitResult, urlsplit

from pydantic import AfterValidator, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema, PydanticCustomError

from .errors import join_path
from .files import CONTROL_CHARACTERS, json_values

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""The integers every entry accepts: what a signed 64-bit database column holds."""
SEED_EXPECTED = f"an integer from 0 to {INT64_MAX}"


class _Signed64:
    """Bounds an integer schema to INT64_MIN..INT64_MAX, keeping a field's own tighter bounds
    (`Field(ge=1, le=100)`), whichever order pydantic applies them in. The bounds are checked by
    pydantic's core, not by a Python function: validation is on hot paths."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema = handler(source)
        if schema.get("type") == "int":
            bounds = cast("dict[str, Any]", schema)  # an int schema: its bounds are optional
            bounds["ge"] = max(bounds.get("ge", INT64_MIN), INT64_MIN)
            bounds["le"] = min(bounds.get("le", INT64_MAX), INT64_MAX)
        return schema


Int64 = Annotated[int, Field(strict=True), _Signed64()]
"""An integer of a document or a request body: within the signed 64-bit range, and never `true`,
`3.0` or `"3"` (each a mistake to report, not a number to guess)."""

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A number of a document or a request body: finite (JSON has no NaN or Infinity, and the
ledger's JSON columns refuse them), an integer or a float, never `true` or `"1.5"`."""


# --------------------------------------------------------------------------- text

BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidirectional controls: the Arabic letter mark, the left-to-right and right-to-left marks,
embeddings, overrides and isolates. In a name they make it read as another (U+202E shows
`txt.exe` as `exe.txt`)."""

NAME_REFUSED = re.compile(f"[\x00-\x1f\x7f-\x9f{BIDI_CONTROLS}]")
"""What a name or an identifier must not hold: any control character, any bidirectional control."""

NAME_EXPECTED = "text without control characters or bidirectional controls"
RESOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""How a model endpoint or an external simulator the operator declared is named."""
TEXT_EXPECTED = "text without control characters other than tab, newline and carriage return"


def _described(character: str) -> str:
    code = f"U+{ord(character):04X}"
    name = unicodedata.name(character, "")
    return f"{code} ({name.lower()})" if name else code


def check_name(value: str) -> str:
    """A name or identifier (scenario name, namespace, owner, run id…), or PydanticCustomError
    `name_character` naming the character it must not hold."""
    return _refuse(NAME_REFUSED, value, "name_character", "{character} is not allowed in a name")


def check_regex(value: str, where: str = "") -> str:
    """`value` when it is a regular expression (Python's `re`); ValueError naming `where`."""
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{where}not a regular expression: {exc}") from None
    return value


def check_text(value: str) -> str:
    """Free text (a note, a reason), or PydanticCustomError `text_character` naming the control
    character it must not hold."""
    message = "control character {character} is not allowed in text"
    return _refuse(CONTROL_CHARACTERS, value, "text_character", message)


def _refuse(refused: re.Pattern[str], value: str, kind: str, message: str) -> str:
    found = refused.search(value)
    if found is not None:
        raise PydanticCustomError(kind, message, {"character": _described(found.group())})
    return value


Name = Annotated[str, AfterValidator(check_name)]
"""A name or an identifier: no control character, no bidirectional control."""

Text = Annotated[str, AfterValidator(check_text)]
"""Free text: no control character but tab, newline and carriage return."""


def refused_in_json(data: Any) -> tuple[str, str, str] | None:
    """The first value of a JSON document (a request's scenario, its budget) that no entry
    accepts, as (dotted path, message, expected): a key or string with a control character other
    than tab, newline and carriage return (NUL among them), or a number that is not finite. None
    when there is none."""
    for dotted, value in json_values(data):
        if isinstance(value, str):
            found = CONTROL_CHARACTERS.search(value)
            if found is not None:
                return dotted, f"control character {_described(found.group())}", TEXT_EXPECTED
        elif isinstance(value, float) and not math.isfinite(value):
            return dotted, f"{value} is not a finite number", "a finite number"
        elif isinstance(value, dict):
            for key in value:
                found = CONTROL_CHARACTERS.search(str(key))
                if found is not None:
                    where = join_path(dotted, str(key))
                    message = f"control character {_described(found.group())} in a key"
                    return where, message, TEXT_EXPECTED
    return None


# --------------------------------------------------------------------------- URLs


def http_url(text: str) -> SplitResult | None:
    """`text` split as an http(s) URL with a host, or None when it is not one (file://, ftp://,
    a bare path, an unclosed IPv6 bracket)."""
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts


def check_http_url(value: str) -> str:
    """An endpoint's base URL, or PydanticCustomError `http_url` (the value itself is not
    repeated: it may carry credentials)."""
    if http_url(value) is None:
        raise PydanticCustomError("http_url", "not an http(s) URL with a host")
    return value


HttpUrl = Annotated[str, AfterValidator(check_http_url)]
"""An endpoint of an HTTP provider or agent: http:// or https:// with a host."""

"""Expressions in domain assets: the Common Expression Language (CEL), through the `cel` package.

A domain states preconditions, effects, answers, invariants, observations and metrics as CEL
expressions over named variables (`args`, `state`, `now`, …). They are compiled once, when the
asset is read, so a syntax error names the asset and the path of the expression before any run.
The package's extended standard library (`sum`, `max`, `sort`, `math.*`, …) is available too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ....core.errors import SimreportError

_BOUND = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")


# A list built by iterating a map (`state`, `state.<entity>` or `state["<entity>"]`, the same
# of `initial`, or a variable that is a map) comes out in a different order each evaluation.
_MAP_ORDER = re.compile(
    r"(?<![\w.])(?:(?:state|initial)\s*(?:\.\s*\w+|\[\s*(?:\"[^\"]*\"|'[^']*')\s*\])?"
    r"|args|user|conversation|obs)\s*\.\s*(?:map|filter)\s*\("
)


class ExpressionError(SimreportError):
    """An expression that does not compile, or fails while it is evaluated."""

    def __init__(self, message: str, *, path: str, kind: str = "expression_failed") -> None:
        super().__init__(message, path=path)
        self.kind = kind


class MissingValue(ExpressionError):
    """An expression read a key its input does not have (a missing observation, an absent
    field): the caller decides what a missing value means (NaN, undecidable, a failed check)."""


@dataclass(frozen=True)
class Expression:
    """One compiled CEL expression and where it was written (`path`, for messages)."""

    source: str
    path: str
    variables: frozenset[str] = field(default_factory=frozenset)
    _program: Any = field(default=None, compare=False, repr=False)
    _extended: bool = field(default=False, compare=False, repr=False)
    """Whether it calls a function of the extended standard library (evaluated in a context
    that holds them; plain CEL is evaluated without one, which costs less)."""

    @classmethod
    def compile(cls, source: str, path: str, allowed: frozenset[str]) -> Expression:
        """Compile `source`; refuse a syntax error or a variable outside `allowed`."""
        try:
            program = _cel_compile(source)
        except (ValueError, RuntimeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ExpressionError(
                f"not a CEL expression: {first}", path=path, kind="expression_invalid"
            ) from None
        if _MAP_ORDER.search(source):
            raise ExpressionError(
                "builds a list by iterating a map of instances, whose order is not fixed; "
                "iterate `items.<entity>` (instances in key order) instead",
                path=path,
                kind="expression_invalid",
            )
        # The names a macro binds (`list.map(x, …)`) are the program's variables too.
        bound = set(_BOUND.findall(source))
        used = frozenset(str(v) for v in program.variables()) - bound
        unknown = sorted(used - allowed)
        if unknown:
            raise ExpressionError(
                f"reads {', '.join(unknown)}, which is not available here; expected only "
                + ", ".join(sorted(allowed)),
                path=path,
                kind="expression_invalid",
            )
        return cls(source, path, used, program, _calls_extension(source))

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """The expression's value over `variables` (plain JSON-like values)."""
        # Only what it reads is handed over: each value is converted to CEL at every call.
        given = {name: variables[name] for name in self.variables if name in variables}
        try:
            return _plain(self._program.execute(_context(given) if self._extended else given))
        except LookupError as exc:
            what = exc.args[0] if exc.args else type(exc).__name__
            raise MissingValue(
                f"{self.source!r} reads {what!r}, which is absent",
                path=self.path,
                kind="missing_value",
            ) from None
        except (TypeError, ValueError, RuntimeError, ArithmeticError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ExpressionError(f"{self.source!r} failed: {first}", path=self.path) from None

    def truth(self, variables: Mapping[str, Any]) -> bool:
        """The value of a condition; anything but a boolean is an error."""
        value = self.evaluate(variables)
        if not isinstance(value, bool):
            raise ExpressionError(
                f"{self.source!r} gave {type(value).__name__} {value!r}, expected true or false",
                path=self.path,
            )
        return value


def _plain(value: Any) -> Any:
    """CEL values back as JSON-like Python: maps with text keys in sorted order (CEL's own map
    order changes from one evaluation to the next), lists, numbers, text, null."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"  # CEL's own form of a duration
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _calls_extension(source: str) -> bool:
    from cel.stdlib import STDLIB_FUNCTIONS

    names = "|".join(re.escape(name) for name in sorted(STDLIB_FUNCTIONS, key=len, reverse=True))
    return re.search(rf"(?<![\w])(?:{names})\s*\(", source) is not None


def _context(variables: Mapping[str, Any]) -> Any:
    """An evaluation context with the extended standard library and `variables`."""
    import cel
    from cel.stdlib import add_stdlib_to_context

    context = cel.Context()
    add_stdlib_to_context(context)
    context.update(dict(variables))
    return context


def _cel_compile(source: str) -> Any:
    """`cel.compile`, imported at the first expression: the package's import brings its command
    line (rich, prompt_toolkit, typer) along, which no run of another world should pay for."""
    import cel

    return cel.compile(source)

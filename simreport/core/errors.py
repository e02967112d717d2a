"""One error hierarchy for simreport; every error can say where it happened.

The CLI turns these into one line on stderr and the exit code the class carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130


class SimreportError(Exception):
    """Base class: a message plus, where known, the file, the dotted path, the line and what was
    expected there."""

    exit_code = EXIT_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        path: str | None = None,
        line: int | None = None,
        expected: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.path = path
        self.line = line
        self.expected = expected

    def located(self, *, file: str | Path | None = None, line: int | None = None) -> SimreportError:
        """Fill in the file (and line) when the raiser did not know them."""
        if self.file is None and file is not None:
            self.file = str(file)
        if self.line is None and line is not None:
            self.line = line
        return self

    def one_line(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        parts = [p for p in (where, self.path) if p]
        head = ": ".join(parts)
        text = self.message
        if self.expected:
            text += f" (expected {self.expected})"
        return f"{head}: {text}" if head else text

    def __str__(self) -> str:
        return self.one_line()


class InputError(SimreportError):
    """The user's input is wrong; nothing has been run."""

    exit_code = EXIT_INPUT


class DocumentError(InputError):
    """A file could not be read or parsed (missing, YAML/JSON syntax)."""


class ValidationIssue:
    """One problem found while validating a document."""

    __slots__ = ("expected", "message", "path")

    def __init__(self, path: str, message: str, expected: str | None = None) -> None:
        self.path = path
        self.message = message
        self.expected = expected

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "expected": self.expected}

    def __repr__(self) -> str:
        return f"ValidationIssue({self.path!r}, {self.message!r})"


class SchemaError(InputError):
    """A document does not match its schema. Carries every issue; the message names the first."""

    def __init__(
        self,
        issues: Sequence[ValidationIssue],
        *,
        file: str | Path | None = None,
        line: int | None = None,
        prefix: str = "",
    ) -> None:
        if not issues:
            raise ValueError("SchemaError needs at least one issue")
        self.issues = list(issues)
        first = self.issues[0]
        message = first.message
        if len(self.issues) > 1:
            message += (
                f" (and {len(self.issues) - 1} more issue{'s' if len(self.issues) > 2 else ''})"
            )
        path = join_path(prefix, first.path) if prefix else first.path
        super().__init__(message, file=file, path=path or None, line=line, expected=first.expected)


class UnknownOverride(InputError):
    """An axis target (or override) names a path that does not exist in the scenario."""


class InvalidOverride(InputError):
    """An override produced a scenario that fails validation."""

    def __init__(
        self,
        message: str,
        issues: Sequence[ValidationIssue] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.issues = list(issues)


class PlanError(InputError):
    """An audit plan is inconsistent in a way the schema alone cannot say."""


class RunError(SimreportError):
    """Raised inside the kernel; the engine turns it into a run's `failure`, never into a crash."""

    def __init__(self, message: str, *, stage: str = "running", kind: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.kind = kind or type(self).__name__


def join_path(*parts: str | int) -> str:
    return ".".join(str(p) for p in parts if str(p) != "")


EXIT_RUN_FAILED = 3
"""`simreport run` only: the scenario was valid but its run failed (see result.json)."""

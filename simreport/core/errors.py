"""One error hierarchy for simreport; every error can say where it happened.

The CLI turns these into one line on stderr and the exit code the class carries.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
"""Invalid input or usage, or an environment that refused a file operation (EnvironmentProblem)."""
EXIT_INTERRUPTED = 130
EXIT_OUTPUT_CLOSED = 141
"""The reader of the command's output went away (`simreport … | head`): 128 + SIGPIPE, as a
shell reports a writer that a closed pipe stopped."""


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
        line = f"{head}: {text}" if head else text
        # One line whatever a key or value quoted in it holds.
        return line.replace("\r", "\\r").replace("\n", "\\n")

    def __str__(self) -> str:
        return self.one_line()


class InputError(SimreportError):
    """The user's input is wrong; nothing has been run."""

    exit_code = EXIT_INPUT


class DocumentError(InputError):
    """A file could not be read or parsed (missing, YAML/JSON syntax). `kind` names the problem
    where the reader knows it: file_missing, yaml_syntax, duplicate_key, control_character…"""

    def __init__(self, message: str, *, kind: str | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.kind = kind


class DuplicateKey(DocumentError):
    """A mapping names one key twice; `first_line` is where it first stood, when known."""

    def __init__(self, message: str, *, key: str, first_line: int | None, **where: Any) -> None:
        super().__init__(message, kind="duplicate_key", **where)
        self.key = key
        self.first_line = first_line


class ValidationIssue:
    """One problem found while validating a document. `kind` names the problem for code that
    tells problems apart (pydantic's error type, such as `extra_forbidden`), where known."""

    __slots__ = ("expected", "kind", "message", "path")

    def __init__(
        self, path: str, message: str, expected: str | None = None, kind: str | None = None
    ) -> None:
        self.path = path
        self.message = message
        self.expected = expected
        self.kind = kind

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


class TooManyRuns(PlanError):
    """A plan asks for more runs (conditions × replications) than the limit allows."""

    def __init__(
        self, message: str, *, conditions: int, replications: int, limit: int, **where: Any
    ) -> None:
        super().__init__(message, **where)
        self.conditions = conditions
        self.replications = replications
        self.runs = conditions * replications
        self.limit = limit


class UnknownChoice(InputError):
    """A name that is none of the allowed ones (a world, an axis template): `name` is what was
    given, `allowed` every name that would do."""

    def __init__(self, message: str, *, name: str, allowed: Sequence[str], **where: Any) -> None:
        super().__init__(message, expected="one of " + ", ".join(allowed), **where)
        self.name = name
        self.allowed = tuple(allowed)


class WouldOverwrite(InputError):
    """A command would replace files that already exist: `existing` lists them (nothing was
    written)."""

    def __init__(self, message: str, *, existing: Sequence[str | Path], **where: Any) -> None:
        super().__init__(message, **where)
        self.existing = tuple(str(p) for p in existing)


class ConflictingExpectations(PlanError):
    """Two entries of a plan's `hypothesis.levels` apply to one condition and expect opposite
    directions of one metric. `entries` holds both: each entry's `path`, `line` and
    `direction`."""

    def __init__(
        self,
        message: str,
        *,
        condition: str,
        metric: str,
        entries: Sequence[dict[str, Any]],
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.condition = condition
        self.metric = metric
        self.entries = list(entries)


class EnvironmentProblem(SimreportError):
    """The machine refused a file operation: the disk is full, the folder is read-only or not
    ours, a file stands where a folder should be. Not a bug and not bad input: the message names
    the path and what to do about it."""

    exit_code = EXIT_INPUT
    errno: int | None = None
    """The OSError's error number, when the problem came from one."""

    @classmethod
    def from_os_error(
        cls, exc: OSError, *, near: str | Path | None = None
    ) -> EnvironmentProblem | None:
        """The problem an OSError reports, or None when its errno is not about the environment
        (then it is treated as a bug). `near` names the place being written when the error
        itself carries no file name (a full disk fails a write, not an open)."""
        known = _ENVIRONMENT_ERRNOS.get(exc.errno) if exc.errno is not None else None
        if known is None:
            return None
        what, todo = known
        file = exc.filename if exc.filename not in (None, "") else None
        if file is None and near is not None and str(near) != "":
            what += f" while writing under {near}"
        problem = cls(f"{what}: {todo}", file=file)
        problem.errno = exc.errno
        return problem


def _errnos(*names: str) -> tuple[int, ...]:
    return tuple(getattr(errno, name) for name in names if hasattr(errno, name))


_ENVIRONMENT_ERRNOS: dict[int, tuple[str, str]] = {
    code: text
    for codes, text in (
        (_errnos("ENOSPC"), ("no space left on the device", "free some space or write elsewhere")),
        (_errnos("EDQUOT"), ("disk quota exceeded", "free some space or write elsewhere")),
        (_errnos("EFBIG"), ("file too large for this filesystem", "write elsewhere")),
        (
            _errnos("EROFS"),
            ("read-only filesystem", "choose an output folder on a writable filesystem"),
        ),
        (
            _errnos("EACCES", "EPERM"),
            ("permission denied", "choose a folder you may write to, or get permission"),
        ),
        (
            _errnos("ENOTDIR"),
            ("a part of this path is a file, not a folder", "choose a path under a folder"),
        ),
        (_errnos("EISDIR"), ("a folder stands where a file belongs", "move that folder away")),
        (_errnos("EEXIST"), ("already exists", "remove it or choose another path")),
        (_errnos("ENAMETOOLONG"), ("name too long", "choose a shorter path")),
        (_errnos("ELOOP"), ("too many symbolic links", "remove the symbolic link loop")),
        (
            _errnos("EMFILE", "ENFILE"),
            (
                "too many open files",
                "raise the open-file limit (ulimit -n) or lower the concurrency",
            ),
        ),
        (_errnos("EIO"), ("input/output error", "check the disk, then try again")),
    )
    for code in codes
}


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

"""A command's refusal read as data: `refused(capsys, argv)` runs `simreport argv`, checks that it
printed one line on stderr and exited with the code of the error that line reports, and returns
that error, so a test asserts its class, `file`, `line`, `path` and `expected` rather than its
wording."""

from __future__ import annotations

from dataclasses import dataclass
from unittest import mock

import pytest

from simreport.cli import main
from simreport.core.errors import SimreportError
from simreport.core.files import visible_control_characters
from simreport.core.redaction import redact_text


@dataclass(frozen=True)
class Refusal:
    error: SimreportError
    """The error whose line the command printed."""
    code: int
    line: str
    """The one line on stderr, as printed."""


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Refusal:
    """Run the command, which must refuse with one line on stderr; the error it reported."""
    said: list[SimreportError] = []
    one_line = SimreportError.one_line

    def heard(error: SimreportError) -> str:
        said.append(error)
        return one_line(error)

    with mock.patch.object(SimreportError, "one_line", heard):
        code = main(argv)
    line = capsys.readouterr().err.strip()
    assert said, f"no SimreportError was reported: exit code {code}, stderr {line!r}"
    error = said[-1]  # the CLI formats the error it reports last
    assert code == error.exit_code != 0, line
    assert line == f"simreport: {visible_control_characters(redact_text(one_line(error)))}", line
    return Refusal(error, code, line)

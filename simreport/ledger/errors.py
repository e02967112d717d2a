"""What can go wrong between simreport and its ledger, each error naming what to do about it."""

from __future__ import annotations

from typing import Any

from ..core.errors import InputError


class LedgerUnavailable(InputError):
    """The ledger URL is not one simreport can use, or its database cannot be reached."""


class LedgerOutdated(InputError):
    """The ledger's schema is older than this simreport's (run `simreport ledger upgrade`) or
    newer (written by a newer simreport). Carries the ledger's `revision` (None when it holds
    no ledger tables) and whether it is `newer` than this simreport knows."""

    def __init__(
        self, message: str, *, revision: str | None, newer: bool = False, **where: Any
    ) -> None:
        super().__init__(message, **where)
        self.revision = revision
        self.newer = newer


class RunConflict(InputError):
    """A run id is already recorded with other content. Nothing was written."""


class VersionChanged(InputError):
    """A version arrives with another sha256 than the one the ledger pinned for it. Carries
    both hashes when the raiser knows them: `recorded` (the pin) and `found` (the content)."""

    kind = "version_changed"

    def __init__(
        self,
        message: str,
        *,
        recorded: str | None = None,
        found: str | None = None,
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.recorded = recorded
        self.found = found


class AssetVersionChanged(VersionChanged):
    """An asset version arrives with another sha256 than the one the ledger pinned for it."""

    kind = "asset_version_changed"


class ScenarioVersionChanged(VersionChanged):
    """A scenario version arrives with another design sha256 than the one the ledger pinned."""

    kind = "scenario_version_changed"


class ReviewRefused(InputError):
    """A review action the ledger does not allow: an unknown version, a version not in the
    status the action starts from, no reviewer, a version approved or published by its own
    author, or a high-risk scenario going online without its risk sign-off. Nothing was
    changed. `code` names the refusal for programs."""

    code = "review_refused"


class UnknownVersion(ReviewRefused):
    """A review action on a version the ledger does not hold."""

    code = "unknown_version"


class WrongStatus(ReviewRefused):
    """A review action that does not start from the version's status (another reviewer may
    have moved it first)."""

    code = "review_status"


class SelfApproval(ReviewRefused):
    """A version's author (who created or submitted it) approving or publishing it where the
    review policy wants another reviewer. Carries the version's `authors`."""

    code = "self_approval"

    def __init__(self, message: str, *, authors: tuple[str, ...], **where: Any) -> None:
        super().__init__(message, **where)
        self.authors = authors


class RiskSignoffMissing(ReviewRefused):
    """A high-risk scenario published without its risk sign-off."""

    code = "risk_signoff_missing"


class RiskSignoffMismatch(ReviewRefused):
    """A risk sign-off naming a sha256 that is not the version's: the signer did not sign off
    what would go online. Carries both: `recorded` (the version's) and `found` (the sign-off's)."""

    code = "risk_signoff_mismatch"

    def __init__(self, message: str, *, recorded: str, found: str, **where: Any) -> None:
        super().__init__(message, **where)
        self.recorded = recorded
        self.found = found


class NotRecorded(InputError):
    """A run, plan or build the ledger does not hold."""

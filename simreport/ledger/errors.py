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
    status the action starts from, no reviewer, or a high-risk scenario going online without a
    risk sign-off. Nothing was changed."""


class UnknownVersion(ReviewRefused):
    """A review action on a version the ledger does not hold."""


class WrongStatus(ReviewRefused):
    """A review action that does not start from the version's status (another reviewer may
    have moved it first)."""


class NotRecorded(InputError):
    """A run, plan or build the ledger does not hold."""

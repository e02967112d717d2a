"""What can go wrong between simreport and its ledger, each error naming what to do about it."""

from __future__ import annotations

from ..core.errors import InputError


class LedgerUnavailable(InputError):
    """The ledger URL is not one simreport can use, or its database cannot be reached."""


class LedgerOutdated(InputError):
    """The ledger's schema is older than this simreport's (run `simreport ledger upgrade`) or
    newer (written by a newer simreport)."""


class RunConflict(InputError):
    """A run id is already recorded with other content. Nothing was written."""


class AssetVersionChanged(InputError):
    """An asset version arrives with another sha256 than the one the ledger pinned for it."""

    kind = "asset_version_changed"


class NotRecorded(InputError):
    """A run, plan or build the ledger does not hold."""

"""Versions of record: what a scenario's design is (`design_sha256`), which version a run ran, and
what the harness asks a run to check before any agent call (`RunChecks`).

A condition that changes the design records a derived version, `<version>+d.<the first twelve hex
digits of its design digest>`, never the base version with another digest. The design:
docs/core.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import Field

from .canonical import content_hash, document_json, sorted_mappings
from .schema import Model

Purpose = Literal["regression", "exploration"]
PURPOSES: Final[tuple[Purpose, ...]] = ("regression", "exploration")
DEFAULT_PURPOSE: Final[Purpose] = "exploration"
"""Local runs and audits explore unless told otherwise: the examples' libraries hold versions
still under review, and a regression run needs every version it resolves online."""

ReviewStatus = Literal["draft", "reviewing", "reviewed", "online", "offline"]
REVIEW_STATUSES: Final[tuple[ReviewStatus, ...]] = (
    "draft",
    "reviewing",
    "reviewed",
    "online",
    "offline",
)

PLACEMENT_FIELDS: Final = ("seedPath", "replicationId")
"""Scenario keys that place one run in an audit rather than describe the design."""

DERIVED_MARK: Final = "+d."


REVIEW_FIELDS: Final = ("status", "riskSignoff")
"""Identity keys that say where a version starts in review, not what it is: the ledger holds its
status from then on, so editing them changes no design."""


PRESENTATION_FIELDS: Final = ("name", "description", "hypothesis")
"""Scenario keys no run reads: its name and description are for people, its hypothesis for the
analysis. A run gets them as null, so editing them reruns nothing; a versioned scenario (one
with `identity`) keeps them, because its runs record the digest of the whole reviewed version
(`design_sha256`, checked against the ledger's pin) and so do depend on them."""


def run_document(scenario_doc: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario document as its run reads it, and as run keys hash it: every mapping's keys
    in sorted order at every depth (lists keep theirs), so that the order a file lists persona
    fields, user facts or parameters in (which a YAML round trip may change, and which the
    canonical hash does not see) never decides which draw or which prompt line goes where; and
    the PRESENTATION_FIELDS null unless the scenario is versioned."""
    doc: dict[str, Any] = sorted_mappings(scenario_doc)
    if doc.get("identity") is None:
        for key in PRESENTATION_FIELDS:
            if key in doc:
                doc[key] = None
    return doc


def run_document_json(scenario_doc: Mapping[str, Any]) -> str:
    """The canonical JSON of `run_document(scenario_doc)` for a scenario's document form
    (`to_doc()`): canonical JSON sorts every mapping itself, so only the presentation fields
    need setting, on a shallow copy."""
    doc = dict(scenario_doc)
    if doc.get("identity") is None:
        for key in PRESENTATION_FIELDS:
            if key in doc:
                doc[key] = None
    return document_json(doc)


def design_document(scenario_doc: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario document (as written to scenario.json: credentials redacted) without the
    fields that place one run in an audit and the identity's review fields."""
    design = {k: v for k, v in scenario_doc.items() if k not in PLACEMENT_FIELDS}
    identity = design.get("identity")
    if isinstance(identity, Mapping):
        design["identity"] = {k: v for k, v in identity.items() if k not in REVIEW_FIELDS}
    return design


def design_sha256(scenario_doc: Mapping[str, Any]) -> str:
    return content_hash(design_document(scenario_doc))


def derived_version(version: str, design: str) -> str:
    """The version of a design derived from `version`: `<version>+d.<design[:12]>`."""
    return f"{version}{DERIVED_MARK}{design[:12]}"


def recorded_version(declared: str, own: str, reference: str) -> tuple[str, str | None]:
    """The version a run of design `own` records, and the version it derives from: the declared
    version when its design is the `reference` one, else a derived version (`derived_version`)."""
    if own == reference:
        return declared, None
    return derived_version(declared, own), declared


def version_key(name: str, version: str) -> str:
    """How checks and manifests name one version: `name@version`."""
    return f"{name}@{version}"


class VersionState(Model):
    """What the ledger holds for one version."""

    sha256: str = Field(description="The digest pinned when the ledger first saw this version.")
    status: ReviewStatus = Field(description="Its review status in the ledger.")


class RunChecks(Model):
    """What a run must check while loading, from the harness (see docs/core.md)."""

    purpose: Purpose = Field(DEFAULT_PURPOSE, description="regression or exploration.")
    spec_sha256: str | None = Field(
        None,
        description=(
            "Design digest of the scenario file the run comes from: the declared version's "
            "spec, compared with the ledger's pin for it."
        ),
    )
    version: str | None = Field(
        None,
        description=(
            "The scenario version this run records: the declared one, or a derived one when the "
            "run's condition changes the design. None: the declared one."
        ),
    )
    derived_from: str | None = Field(None, description="The declared version a derived one is of.")
    scenarios: dict[str, VersionState] = Field(
        default_factory=dict, description="`id@version` → the ledger's pin and status."
    )
    assets: dict[str, VersionState] = Field(
        default_factory=dict, description="`name@version` → the ledger's pin and status."
    )
    ledger: str | None = Field(
        None, description="The ledger these come from, credentials redacted (for messages)."
    )
    pins: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Asset name → the exact version a frozen manifest resolved it to: labels resolve to "
            "these, never to what a label says now."
        ),
    )
    trace_id: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{32}$",
        description=(
            "The W3C trace id this execution records and sends (the service's run row's own), so "
            "two runs of one version and seed are two traces. None: made from the scenario, as a "
            "batch run's is (its run key is the scenario's)."
        ),
    )

    def for_condition(
        self, version: str | None, derived_from: str | None, asset_names: Iterable[str]
    ) -> RunChecks:
        """These checks for the runs of one condition: the version they record, and only the
        asset versions of the names its scenario refers to (so that nothing else the ledger
        learns changes what the runs check, or their store keys)."""
        names = set(asset_names)
        return self.model_copy(
            update={
                "version": version,
                "derived_from": derived_from,
                "assets": {
                    key: state
                    for key, state in self.assets.items()
                    if key.rpartition("@")[0] in names
                },
            }
        )


__all__ = [
    "DEFAULT_PURPOSE",
    "PLACEMENT_FIELDS",
    "PRESENTATION_FIELDS",
    "PURPOSES",
    "REVIEW_STATUSES",
    "Purpose",
    "ReviewStatus",
    "RunChecks",
    "VersionState",
    "derived_version",
    "design_document",
    "design_sha256",
    "recorded_version",
    "run_document",
    "run_document_json",
    "version_key",
]

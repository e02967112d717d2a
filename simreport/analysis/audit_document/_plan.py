"""audit.json's `plan`: the normalised plan the audit ran (plan.json without what places it on
one machine), its base scenario validated as the runs read it, and its meaning hash."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ...core.canonical import sorted_mappings
from ...core.schema import AuditPlan, PerturbationAxis, PlanHypothesis, Scenario
from ...core.values import Int64
from ._parts import AuditModel, Purpose


def _as_in_plan(name: str) -> Any:
    """The field `name` of a plan file (`AuditPlan`): the normalised plan keeps its default, its
    constraints and its description."""
    return AuditPlan.model_fields[name]


class PlanIdentity(AuditModel):
    """Which plan this is, left out of its meaning hash."""

    id: str = Field(description="The plan's id.")
    title: str | None = Field(description="Its title, or null.")
    file: str = Field(description="Its file as given, credentials in URLs redacted.")


class PlanSection(AuditModel):
    """The normalised plan (`simreport schema plan` documents the keys it shares with a plan
    file): every field with its default, `id` filled in, the effective hypothesis, the base
    scenario in full, its identity and its meaning hash, and no `concurrency` (a setting of the
    machine, not of the study). Audits built from a plan mapping of their own may leave keys
    out; a key left out reads as its default."""

    id: str | None = _as_in_plan("id")
    title: str | None = _as_in_plan("title")
    base_scenario: str | None = _as_in_plan("base_scenario")
    base: Scenario | None = Field(
        None,
        description=(
            "The base scenario, fully validated, every field with its default "
            "(`simreport schema scenario` documents its keys); credentials in URLs redacted."
        ),
    )
    hypothesis: PlanHypothesis | None = Field(
        None,
        description=(
            "The effective hypothesis: the plan's, else its base scenario's (with empty `axes` "
            "and `levels`); null without one."
        ),
    )
    axes: list[PerturbationAxis] = _as_in_plan("axes")
    design: Literal["one_at_a_time", "full_factorial"] = _as_in_plan("design")
    replications: Int64 = _as_in_plan("replications")
    models: list[str] = _as_in_plan("models")
    metrics: list[str] = _as_in_plan("metrics")
    primary_metrics: list[str] | None = _as_in_plan("primary_metrics")
    claim_type: Literal["exploratory", "mechanism", "policy"] = _as_in_plan("claim_type")
    purpose: Purpose = _as_in_plan("purpose")
    include_incomplete: bool = _as_in_plan("include_incomplete")
    identity: PlanIdentity | None = Field(
        None, description="Its id, title and file: what names it, not what it does."
    )
    identity_hash: str | None = Field(None, description="sha256 of the canonical JSON of identity.")
    hash: str = Field(
        description=(
            "The meaning hash: sha256 of the canonical JSON of what the plan asks for; every "
            "bootstrap seed and build comparison of the audit derives from it."
        )
    )

    @model_validator(mode="before")
    @classmethod
    def _has_its_hash(cls, data: Any) -> Any:
        # Said in the plan's own words: a plan without it is not one the harness wrote.
        if isinstance(data, dict) and not isinstance(data.get("hash"), str):
            raise ValueError("the plan has no meaning hash (a string under `hash`)")
        return data

    def base_document(self) -> dict[str, Any]:
        """The base scenario as audit.json holds it, its keys sorted at every depth (empty
        without one): for reading a setting by its dotted path, in the file's order."""
        if self.base is None:
            return {}
        written = self.base.model_dump(mode="json", by_alias=True, exclude_unset=True)
        ordered: dict[str, Any] = sorted_mappings(written)
        return ordered

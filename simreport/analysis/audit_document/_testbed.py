"""The agent-testbed sections of audit.json: verdicts per condition and criterion (`testbed`),
the user simulator's quality control (`userQuality`) and the coverage matrix (`coverage`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.values import Number
from ._parts import AuditModel, Count


class VerdictCounts(AuditModel):
    """Verdicts on one criterion."""

    pass_: Count = Field(alias="pass", description="Runs that passed.")
    fail: Count = Field(description="Runs that failed.")
    undecidable: Count = Field(description="Runs the evaluator could not decide.")
    not_applicable: Count = Field(description="Runs the criterion did not apply to.")
    decided: Count = Field(description="pass + fail.")


class CriterionRow(VerdictCounts):
    """One condition's verdicts on one criterion, with its rate and bound."""

    violation_rate: Number | None = Field(description="fail / decided; null when none decided.")
    zero_violation_upper_bound: Number | None = Field(
        description="1 − 0.05^(1/decided) when no run failed, else null."
    )


class TestbedCondition(AuditModel):
    """One condition's evaluated runs."""

    condition: str = Field(description="Condition id.")
    runs: Count = Field(description="Runs.")
    evaluated: Count = Field(description="Runs whose verdicts count.")
    validity_excluded: Count = Field(description="Runs whose conditions did not hold.")
    evidence_excluded: Count = Field(description="Runs with incomplete evidence.")
    not_evaluated: Count = Field(description="Runs without a current evaluation.")
    criteria: dict[str, CriterionRow] = Field(description="Criterion → verdicts.")


class EvaluationSpecRef(AuditModel):
    """An evaluation spec, by name, version and content."""

    name: str = Field(description="Spec name.")
    version: str = Field(description="Spec version.")
    sha256: str = Field(description="sha256 of its content.")


class EvaluatorUse(AuditModel):
    """An evaluator and spec pair, with the runs it judged."""

    name: str = Field(description="Evaluator name.")
    version: str = Field(description="Evaluator version.")
    sha256: str = Field(description="sha256 of the evaluator.")
    spec: EvaluationSpecRef = Field(description="The spec it applied.")
    runs: Count = Field(description="Runs it evaluated.")


class TestbedSection(AuditModel):
    """Agent-testbed verdicts per condition and criterion (present when a run was evaluated)."""

    criteria: list[str] = Field(description="Every criterion judged, sorted.")
    evaluators: list[EvaluatorUse] = Field(description="Who judged the runs.")
    conditions: list[TestbedCondition] = Field(description="One row per condition.")
    totals: dict[str, VerdictCounts] = Field(description="Criterion → counts over conditions.")
    totals_note: str = Field(description="Why totals carry no rate or bound.")
    validity_excluded: Count = Field(description="Validity exclusions, all conditions.")
    evidence_excluded: Count = Field(description="Evidence exclusions, all conditions.")
    undecidable: Count = Field(description="Undecidable verdicts, all criteria.")
    note: str = Field(description="What the zero-violation bound assumes.")


class PersonaConsistency(AuditModel):
    """Persona consistency per message."""

    messages: Count = Field(description="Messages checked.")
    consistent: Count = Field(description="Messages consistent with the persona.")
    rate: Number | None = Field(description="consistent / messages.")
    runs_for_review: Count = Field(description="Runs marked for review.")


class ReactionCompliance(AuditModel):
    """Reaction-rule compliance per trigger."""

    triggers: Count = Field(description="Triggers fired.")
    compliant: Count = Field(description="Triggers answered by the rule.")
    rate: Number | None = Field(description="compliant / triggers.")
    runs_violated: Count = Field(description="Runs below the threshold.")


class Visibility(AuditModel):
    """Disclosures against the rules."""

    disclosures: Count = Field(description="Facts disclosed.")
    violations: Count = Field(description="Disclosures against the rules.")
    runs_violated: Count = Field(description="Runs with a violation.")


class Termination(AuditModel):
    """Whether the user stopped for the rules' reason."""

    compliant: Count = Field(description="Runs that stopped for the rules' reason.")
    not_compliant: Count = Field(description="Runs that stopped without it.")
    not_applicable: Count = Field(description="Runs the check did not apply to.")


class Diversity(AuditModel):
    """Diversity across a condition's replications."""

    distinct_openings: Count = Field(description="Distinct opening messages.")
    distinct_paths: Count = Field(description="Distinct intent paths.")
    opening_share: Number | None = Field(description="Distinct openings per assessed run.")
    path_share: Number | None = Field(description="Distinct paths per assessed run.")


class UserQualityCondition(AuditModel):
    """The user simulator's quality control over one condition's runs."""

    condition: str = Field(description="Condition id.")
    runs: Count = Field(description="Runs.")
    assessed: Count = Field(description="Runs with a quality-control document.")
    modes: list[str] = Field(description="User modes the runs ran in.")
    persona_consistency: PersonaConsistency = Field(description="Per message.")
    reaction_compliance: ReactionCompliance = Field(description="Per trigger.")
    visibility: Visibility = Field(description="Per disclosure.")
    termination: Termination = Field(description="Per run.")
    diversity: Diversity = Field(description="Across replications.")
    flags: list[str] = Field(description="Where diversity falls short of its thresholds.")
    failed_runs: Count = Field(description="Runs whose quality control failed.")


class UserQualitySection(AuditModel):
    """The user simulator's quality per condition (present when a run has one)."""

    conditions: list[UserQualityCondition] = Field(description="One row per condition.")
    note: str = Field(description="What is measured, and on what.")


class CoverageAxes(AuditModel):
    """The values of each coverage axis."""

    stage: list[str] = Field(description="Business stages.")
    behaviour: list[str] = Field(description="User behaviours.")
    permission: list[str] = Field(description="Permission states.")
    fault: list[str] = Field(description="Dependency faults.")


class CoverageCell(AuditModel):
    """One cell of the coverage matrix."""

    stage: str = Field(description="Business stage.")
    behaviour: str = Field(description="User behaviour.")
    permission: str = Field(description="Permission state.")
    fault: str = Field(description="Dependency fault.")
    status: Literal["covered", "empty", "not_applicable"] = Field(description="Its status.")
    conditions: list[str] = Field(description="Conditions that test it.")


class UnreadCondition(AuditModel):
    """A condition whose tool contracts could not be read."""

    condition: str = Field(description="Condition id.")
    reason: str = Field(description="Why.")


class CoverageSection(AuditModel):
    """Stage × behaviour × permission × fault over the conditions (agent-testbed audits)."""

    axes: CoverageAxes = Field(description="The axes' values.")
    cells: list[CoverageCell] = Field(description="Every cell.")
    covered: Count = Field(description="Covered cells.")
    empty_count: Count = Field(description="Applicable cells no condition tests.")
    not_applicable: Count = Field(description="Cells the permission does not offer.")
    empty: list[str] = Field(description="The empty cells, named.")
    unread: list[UnreadCondition] = Field(description="Conditions left out, with why.")
    note: str = Field(description="How to read the matrix.")

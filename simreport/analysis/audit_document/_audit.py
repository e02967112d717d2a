"""audit.json's sections, the whole document (`AuditDoc`), and the checks that read and write it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ...core.canonical import to_plain
from ...core.errors import DocumentError, SchemaError, SimreportError
from ...core.schema import FailureInfo
from ...core.validation import validate_model
from ...core.values import Int64, Number
from ._parts import (
    AuditModel,
    Conclusion,
    Count,
    Direction,
    Family,
    Interval,
    JsonObject,
    Purpose,
    Real,
)
from ._plan import PlanSection
from ._testbed import CoverageSection, TestbedSection, UserQualitySection

# --------------------------------------------------------------------------- header


class Software(AuditModel):
    """Which software wrote the audit."""

    simreport: str = Field(description="simreport's version.")


class Options(AuditModel):
    """How the analysis was asked to run, beside the plan."""

    include_incomplete: bool = Field(
        description="Whether incomplete runs (and failed runs with metrics) entered the statistics."
    )
    provider_override: str | None = Field(
        description="The provider every run was forced to use, or null."
    )
    llm_override: JsonObject | None = Field(
        description="Model settings every run was forced to use, or null."
    )


class GradeSection(AuditModel):
    """The evidence grade of the design and the grade its usable runs achieved."""

    grade: Literal["weak", "moderate", "strong"] = Field(
        description="The design's grade, decided before any statistics ran."
    )
    reasons: list[str] = Field(
        description="Why the design has its grade and what the next grade would need."
    )
    rule: str = Field(description="The grading rule in words.")
    achieved: Literal["weak", "moderate", "strong", "insufficient"] = Field(
        description=(
            "The design's rule applied to the usable runs of the thinnest condition; "
            "insufficient when a base, or every perturbed condition, kept no usable run."
        )
    )
    achieved_reasons: list[str] = Field(
        description="Why the runs achieved that grade, naming the conditions that lost runs."
    )
    usable_min: Count = Field(
        description="Usable runs of the thinnest condition that kept any (0 when insufficient)."
    )


class LargestMove(AuditModel):
    """The row of a metric that moved furthest."""

    condition: str = Field(description="Condition id.")
    diff: Real | None = Field(description="Its mean difference, condition − base.")


class MetricVerdict(AuditModel):
    """What one metric concluded across its rows: the table under the headline."""

    metric: str = Field(description="Metric name.")
    family: Family | None = Field(description="The metric's Holm family; null without rows.")
    tested: Count = Field(description="Rows that are a test.")
    moved: list[str] = Field(description="Conditions whose row concluded moved.")
    unchanged: list[str] = Field(description="Conditions whose row concluded unchanged.")
    inconclusive: list[str] = Field(description="Conditions whose row concluded inconclusive.")
    untested: list[str] = Field(description="Conditions whose row is no test.")
    largest: LargestMove | None = Field(description="The largest move, null when none moved.")
    detectable: Real | None = Field(
        description=(
            "The smallest change (metric units) an inconclusive row could have detected; null "
            "when no row is inconclusive or none states it."
        )
    )
    margin: Real | None = Field(
        None, description="The metric's equivalence margin (hypothesis.margins); null without."
    )
    suggested_margin: Real | None = Field(
        None,
        description=(
            "Without a margin: the largest change (metric units) a tested row of the metric "
            "could detect, the smallest margin every row could test; null otherwise."
        ),
    )


class Verdict(AuditModel):
    """The headline a reviewer signs, and the per-metric details behind it."""

    headline: str = Field(
        description=(
            "At most two sentences: the base value of every metric, then what moved, stayed "
            "within its margin or was inconclusive, and the conditions lost to failures."
        )
    )
    details: list[MetricVerdict] = Field(description="One entry per metric, in metric order.")


class FamilySection(AuditModel):
    """The decision families: Holm over every tested row of the primary metrics (the headline's
    claim) and, apart, of the secondary metrics."""

    alpha: Number = Field(description="Family-wise α.")
    method: str = Field(description="The adjustment in words.")
    primary_metrics: list[str] = Field(description="Metrics of the headline's family.")
    secondary_metrics: list[str] = Field(description="Metrics of the secondary family.")
    primary_rows: Count = Field(description="Tested rows in the primary family.")
    secondary_rows: Count = Field(description="Tested rows in the secondary family.")


class VersionNotOnline(AuditModel):
    """A scenario or asset version a run recorded that was not online."""

    kind: str = Field(description="What was versioned (scenario, asset).")
    name: str = Field(description="Its name.")
    version: str = Field(description="Its version.")
    status: str = Field(description="Its review status when the run recorded it.")


class PurposeSection(AuditModel):
    """Why the audit ran and which of its runs may enter a regression conclusion."""

    purpose: Purpose = Field(description="The plan's purpose.")
    exploration_runs: Count = Field(
        description="Runs made for exploration (never in a regression audit's statistics)."
    )
    not_online: list[VersionNotOnline] = Field(
        description="Every version the runs recorded that was not online, sorted."
    )


class Summary(AuditModel):
    """Counts of conditions and runs."""

    conditions: Count = Field(description="Conditions, the base(s) included.")
    runs: Count = Field(description="Expected runs.")
    failed: Count = Field(description="Runs with a failure (a missing result included).")
    incomplete: Count = Field(description="Runs that finished without their full evidence.")
    violated: Count = Field(
        description="Complete runs out of the statistics: validity violated or evidence partial."
    )
    excluded: Count = Field(description="Runs kept out of the statistics.")
    used: Count = Field(description="Runs in the statistics.")


# --------------------------------------------------------------------------- conditions and runs


class ConditionRow(AuditModel):
    """One condition, in plan order, base first."""

    id: str = Field(description="Condition id.")
    dir: str | None = Field(description="Its folder under runs/.")
    axis: str | None = Field(description="The axis it moves (one-at-a-time designs), or null.")
    level: Any = Field(description="The level it sets on that axis, or null.")
    levels: JsonObject = Field(description="Axis id → level, for every axis it sets.")
    model: str | None = Field(description="The model it runs with, when the plan names models.")
    base_id: str | None = Field(description="The id of the base it is compared with.")
    is_base: bool = Field(description="Whether it is a base.")
    label: str = Field(description="Display name in reports.")
    identical_to_base: bool = Field(
        description="Its scenario equals its base's: it ran, but it is no test."
    )
    runs: Count = Field(description="Expected runs.")
    succeeded: Count = Field(description="Runs that finished without a failure.")
    complete: Count = Field(description="Runs that succeeded with complete integrity.")
    excluded: Count = Field(description="Runs kept out of the statistics.")
    means: dict[str, Real | None] = Field(
        description="Metric → mean over usable finite values; null without one."
    )


class RunStatusRow(AuditModel):
    """A run's three statuses, and the evaluation that judged it."""

    execution: Literal["completed", "crashed", "cancelled", "missing"] = Field(
        description="completed, crashed or cancelled; missing when it wrote no result."
    )
    validity: Literal["valid", "violated", "unchecked"] = Field(
        description="valid, violated or unchecked."
    )
    evidence: Literal["complete", "partial", "unchecked"] = Field(
        description="complete, partial or unchecked."
    )
    quality: str | None = Field(
        None,
        description=(
            "The qualityRef of the run's current evaluation, or null; absent for a run without "
            "a result."
        ),
    )


class RunRow(AuditModel):
    """One expected run, in condition then replication order."""

    condition: str = Field(description="Condition id.")
    replication: Count = Field(description="Replication index.")
    seed_path: list[Int64] | None = Field(description="Its seed lineage; null without a result.")
    status: RunStatusRow = Field(description="Execution, validity, evidence, quality.")
    complete: bool = Field(description="Whether its integrity is complete.")
    used: bool = Field(description="Whether it entered the statistics.")
    excluded_because: str | None = Field(description="Why it stayed out; null when used.")
    purpose: Purpose | None = Field(description="Why it was made; null without a result.")
    metrics: dict[str, Real] = Field(description="Metric values it reported.")
    failure: FailureInfo | None = Field(
        description="Why it failed (a missing result: stage harness, type MissingResult)."
    )


# --------------------------------------------------------------------------- tests


class ComparisonRow(AuditModel):
    """One condition against its base on one metric: the reference's columns (SPEC §6) and the
    conclusion with the statistics that decide it (SPEC §6a). Every key is always present."""

    condition: str = Field(description="Condition id.")
    base_id: str | None = Field(description="The base it is compared with.")
    n_base: Count = Field(description="Usable finite values of the base.")
    n_cond: Count = Field(description="Usable finite values of the condition.")
    mean_base: Real | None = Field(description="Mean of the base; null without values.")
    mean_cond: Real | None = Field(description="Mean of the condition; null without values.")
    diff: Real | None = Field(description="Mean difference, condition − base.")
    ci95: Interval | None = Field(
        description="Percentile bootstrap interval of the difference (the reference's)."
    )
    cohen_d: Real | None = Field(description="Cohen's d with the pooled SD; ±inf at zero spread.")
    mwu_p: Real | None = Field(description="Mann–Whitney U p, two-sided (the reference's).")
    holm_p: Real | None = Field(description="Holm-adjusted mwuP within this metric.")
    w1: Real | None = Field(description="Wasserstein-1 distance of the two samples.")
    cliff_delta: Real | None = Field(description="Cliff's delta, condition over base.")
    direction_flip: bool | None = Field(
        description="Whether the difference goes against the expected direction."
    )
    note: str | None = Field(description="Why a statistic is missing, or a caveat.")
    tested: bool = Field(description="Whether the row is a test.")
    expected: Direction | None = Field(description="The direction the hypothesis expects.")
    small_spread: bool = Field(description="Whether a spread too small to trust inflates d.")
    paired: bool = Field(description="Whether base and condition replications share seeds.")
    n_pairs: Count | None = Field(description="Pairs tested, when paired.")
    effect_scale: Real | None = Field(
        description="The SD effects are measured in: of the paired differences, or pooled."
    )
    mde_in_units: Real | None = Field(description="The MDE in the metric's units.")
    pairing: str | None = Field(description="Why the row is paired or not.")
    test: str | None = Field(description="The test that decides.")
    p: Real | None = Field(description="The p value of that test.")
    interval95: Interval | None = Field(
        description="The interval of the difference that fits the design."
    )
    interval_method: str | None = Field(description="How that interval was made.")
    interval_note: str | None = Field(description="A caveat on its coverage.")
    margin: Number | None = Field(description="The metric's equivalence margin, or null.")
    equivalence_p: Real | None = Field(description="TOST p against the margin.")
    equivalence_test: str | None = Field(description="The equivalence test.")
    family: Family = Field(description="The Holm family of the row's metric.")
    family_p: Real | None = Field(description="Holm-adjusted p within the family.")
    mde: Real | None = Field(description="Minimum detectable effect in SDs (power 0.8).")
    conclusion: Conclusion = Field(description="moved, unchanged, inconclusive or untested.")
    reason: str = Field(description="Why the row concluded so.")


class Flag(AuditModel):
    """Something a reader should look at before trusting a row."""

    kind: str = Field(description="What kind of flag (smallSpread).")
    metric: str = Field(description="Metric name.")
    condition: str = Field(description="Condition id.")
    note: str | None = Field(description="What it means.")


class PowerRow(AuditModel):
    """The MDE of one row, for the test it ran."""

    condition: str = Field(description="Condition id.")
    n_base: Count = Field(description="Base values (pairs when paired).")
    n_cond: Count = Field(description="Condition values (pairs when paired).")
    paired: bool = Field(description="Whether the row is paired.")
    test: str | None = Field(description="The test the MDE is for.")
    alpha: Number | None = Field(description="Holm threshold of the row's rank in its family.")
    mde: Real | None = Field(description="MDE in SDs; null where the test cannot reach alpha.")
    note: str | None = Field(description="Why there is no MDE.")


class PowerSection(AuditModel):
    """What the design could have detected."""

    power: Number = Field(description="The power an MDE reaches.")
    alpha_family: Number = Field(description="The family-wise α.")
    method: str = Field(description="How the MDEs were found.")
    family_size: Count = Field(description="Rows in the primary family.")
    draws: Count = Field(description="Simulated data sets per power estimate.")
    metrics: dict[str, list[PowerRow]] = Field(description="Metric → one entry per test row.")


class NoiseFloorRow(AuditModel):
    """How often the rank-sum test calls two groups of one condition different."""

    base: str = Field(description="Base condition id.")
    n: Count = Field(description="Usable finite values of the base.")
    scope: Literal["audit", "halves"] = Field(
        description="`audit`: the base pooled with the conditions that change only its seeds, "
        "split into groups of the audit's sizes; `halves`: the base's own values split in two "
        "halves, below the audit's n."
    )
    companions: list[str] = Field(
        description="Conditions pooled with the base (scope `audit`): they differ from it only "
        "in their seeds."
    )
    sizes: list[Count] | None = Field(
        description="The two group sizes each split compares; null when nothing was split."
    )
    splits: Count = Field(description="Splits tested.")
    flip_rate: Number | None = Field(description="Share of splits with p < alpha.")
    alpha: Number = Field(description="The level each split is tested at.")
    note: str | None = Field(description="Why there is no rate.")


# --------------------------------------------------------------------------- sensitivity


class AxisMeasure(AuditModel):
    """The largest |d| of an axis over every metric, and where it was found."""

    max_abs_d: Real = Field(description="Largest |Cohen's d|.")
    metric: str = Field(description="The metric it was found in.")
    condition: str = Field(description="The condition it was found in.")
    small_spread: bool = Field(description="Whether a small spread inflates it.")


class MainEffectMeasure(AuditModel):
    """The largest |standardized main effect| of an axis over every metric (and model)."""

    max_abs_d: Real = Field(description="Largest |standardized main effect|.")
    metric: str = Field(description="The metric it was found in.")
    level: Any = Field(description="The level it was found at.")
    reference: Any = Field(description="The axis's reference level.")
    model: str | None = Field(description="The model whose grid it was found in.")
    diff: Real | None = Field(description="Its difference of marginal means.")


class SensitivityEntry(AuditModel):
    """One axis, ranked by how much it moves the metrics."""

    axis: str = Field(description="Axis id.")
    code: str | None = Field(description="TRAILS code.")
    rank: Count | None = Field(description="1 for the most sensitive; null when unranked.")
    ranked_by: Literal["isolated", "anyCell", "mainEffect"] | None = Field(
        description="Which measure ranks it; null when unranked."
    )
    isolated: AxisMeasure | None = Field(description="Over cells that move this axis alone.")
    any_cell: AxisMeasure | None = Field(description="Over every cell that moves it.")
    main_effect: MainEffectMeasure | None = Field(
        None,
        description=(
            "Full factorials: the axis's largest standardized main effect, which ranks it; "
            "absent for other designs."
        ),
    )


class AxisConsistency(AuditModel):
    """Moved rows of one axis that went the expected way."""

    consistent: Count = Field(description="Rows that moved as expected.")
    total: Count = Field(description="Rows that moved with an expectation.")


class DirectionConsistency(AuditModel):
    """Of the rows that moved with an expectation, how many moved as expected."""

    expected: Literal["increase", "decrease", "mixed"] | None = Field(
        description="The direction those rows share, mixed when they differ."
    )
    consistent: Count = Field(description="Rows that moved as expected.")
    total: Count = Field(description="Rows that moved with an expectation.")
    share: Number | None = Field(description="consistent / total; null without rows.")
    by_axis: dict[str, AxisConsistency] = Field(description="Axis id → the same, per axis.")


class DistributionRow(AuditModel):
    """One condition's pooled categories against a target distribution."""

    condition: str = Field(description="Condition id.")
    counts: dict[str, Count] = Field(description="Category → pooled count over usable runs.")
    tvd: Real | None = Field(description="Score 100 · (1 − TV / TV of uniform); null: see note.")
    tvd_base: Real | None = Field(description="The same score of its base.")
    note: str | None = Field(description="Why a score is missing.")


# --------------------------------------------------------------------------- full factorials


class FactorialEstimate(AuditModel):
    """A contrast of cell means over a full-factorial grid, with its interval."""

    diff: Real | None = Field(description="The contrast; null when a cell has no usable value.")
    ci95: Interval | None = Field(description="Bootstrap 95 % interval of the contrast.")
    standardized: Real | None = Field(description="The contrast in pooled within-cell SDs.")
    n_cells: Count = Field(description="Cells the contrast weighs.")
    note: str | None = Field(description="Why an estimate is missing, or a caveat.")


class MainEffectRow(FactorialEstimate):
    """One level of one axis against the axis's reference level, over the grid."""

    axis: str = Field(description="Axis id.")
    level: Any = Field(description="The level.")
    reference: Any = Field(description="The reference level (the base's).")
    model: str | None = Field(description="The model whose grid this is, when models vary.")
    mean_level: Real | None = Field(description="Mean of the cell means at the level.")
    mean_reference: Real | None = Field(description="Mean of the cell means at the reference.")


class InteractionRow(FactorialEstimate):
    """A two-way interaction: one level of each of two axes, against their references."""

    axes: list[str] = Field(description="The two axis ids.")
    levels: list[Any] = Field(description="The level of each.")
    references: list[Any] = Field(description="The reference level of each.")
    model: str | None = Field(description="The model whose grid this is, when models vary.")


# --------------------------------------------------------------------------- cost, provenance


class CallTotals(AuditModel):
    """Model calls and tokens, summed."""

    llm_calls: Count = Field(description="Model calls (cache hits and replays excluded).")
    prompt_tokens: Count = Field(description="Prompt tokens of those calls.")
    completion_tokens: Count = Field(description="Completion tokens of those calls.")


class SideTotals(CallTotals):
    """What one side (system under test, simulation) spent, summed over its segments."""

    operations: Count = Field(description="Operations its segments counted.")
    logical_ms: Count = Field(description="Logical milliseconds of the testbed's clock.")


class SegmentTotals(SideTotals):
    """What one segment spent, summed."""

    side: str = Field(description="Whose cost: sut, simulation or unattributed.")


class CostTotals(CallTotals):
    """What a set of runs spent."""

    runs: Count = Field(description="Runs with a result.")
    record_bytes: Count = Field(description="Bytes of the records they stored.")
    unattributed_runs: Count = Field(description="Runs whose cost has no segments.")
    segments: dict[str, SegmentTotals] = Field(description="Segment → its totals.")
    sides: dict[str, SideTotals] = Field(description="Side → its totals.")


class ConditionCost(CostTotals):
    """What one condition's runs spent."""

    condition: str = Field(description="Condition id.")


class CostSection(CostTotals):
    """What the audit's runs spent, and per condition."""

    conditions: list[ConditionCost] = Field(description="One row per condition, plan order.")


class ConditionProvenance(AuditModel):
    """The inputs of one condition's runs."""

    scenario_hash: str | None = Field(description="The condition's scenario hash.")
    inputs: dict[str, str | list[str]] = Field(
        description="Input file (or name@version) → sha256; the sorted list when runs disagree."
    )


class BuildProvenance(AuditModel):
    """The facts a build rests on, so two builds can say why they differ."""

    plan_hash: str | None = Field(description="The plan's meaning hash.")
    kernel_fingerprints: list[str] = Field(description="Kernel fingerprints the runs name.")
    models: list[str] = Field(description="Models the runs name.")
    providers: list[str] = Field(description="Providers the runs name.")
    decisions: list[str] = Field(description="Who made the runs' decisions, as pages name them.")
    conditions: dict[str, ConditionProvenance] = Field(description="Condition id → its inputs.")


# --------------------------------------------------------------------------- the document


class AuditDoc(AuditModel):
    """audit.json: a pure function of the plan and the run results (SPEC §6, §6a)."""

    schema_version: Literal[3] = Field(description="audit.json schema version.")
    software: Software = Field(description="The software that wrote it.")
    plan: PlanSection = Field(description="The normalised plan, with its meaning hash `hash`.")
    options: Options = Field(description="Analysis options beside the plan.")
    grade: GradeSection = Field(description="Evidence grade of the design and of the runs.")
    verdict: Verdict = Field(description="The headline and its details.")
    family: FamilySection = Field(description="The decision families.")
    purpose: PurposeSection = Field(description="Why the audit ran; versions not online.")
    metrics: list[str] = Field(description="The metrics compared, in order.")
    summary: Summary = Field(description="How many conditions and runs, and how they ended.")
    conditions: list[ConditionRow] = Field(description="Conditions in plan order, base first.")
    runs: list[RunRow] = Field(description="One row per expected run.")
    tests: dict[str, list[ComparisonRow]] = Field(
        description="Metric → one row per non-base condition, against its base."
    )
    notes: dict[str, str] = Field(description="Metric → why it has no test at all.")
    flags: list[Flag] = Field(description="Rows to look at before trusting them.")
    power: PowerSection = Field(description="Each row's MDE for the test it ran.")
    noise_floor: dict[str, list[NoiseFloorRow]] = Field(
        description="Metric → the A/A flip rate per base."
    )
    sensitivity: list[SensitivityEntry] = Field(description="Axes, ranked first.")
    direction_consistency: dict[str, DirectionConsistency] = Field(
        description="Metric with an expectation → moved rows that went the expected way."
    )
    distribution: dict[str, list[DistributionRow]] = Field(
        description="Target distribution → one row per condition."
    )
    distribution_categories: dict[str, list[str]] = Field(
        description="Target distribution → its categories in the plan's order."
    )
    cross_model: dict[str, dict[str, Real | None]] = Field(
        description="Model → metric → mean over every run of that model."
    )
    integrity: dict[str, Int64] = Field(description="Integrity counters summed over runs.")
    cost: CostSection = Field(description="What the runs spent.")
    provenance: BuildProvenance = Field(description="The facts the build rests on.")
    testbed: TestbedSection | None = Field(
        None, description="Agent-testbed verdicts; absent when no run was evaluated."
    )
    user_quality: UserQualitySection | None = Field(
        None, description="User-simulator quality; absent when no run has it."
    )
    coverage: CoverageSection | None = Field(
        None, description="Agent-testbed coverage matrix; absent for other audits."
    )
    main_effects: dict[str, list[MainEffectRow]] | None = Field(
        None,
        description=(
            "Full factorials: metric → one row per axis and non-reference level (and model); "
            "empty for other designs, absent in audits written before it existed."
        ),
    )
    interactions: dict[str, list[InteractionRow]] | None = Field(
        None,
        description=(
            "Full factorials: metric → one row per pair of axes and non-reference levels (and "
            "model); empty for other designs, absent in audits written before it existed."
        ),
    )
    factorial_method: str | None = Field(
        None,
        description=(
            "How main effects and interactions were estimated; null without them, absent in "
            "audits written before they existed."
        ),
    )

    def to_doc(self) -> dict[str, Any]:
        """The document as it was read: keys it lacked stay absent, non-finite numbers are the
        strings "inf", "-inf" and "nan" again."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def validate_audit(audit: Any, *, file: str | Path | None = None) -> AuditDoc:
    """Check an audit (as `analyse` builds it, or as read from audit.json) against the contract;
    SchemaError names the first key that breaks it and where."""
    return validate_model(AuditDoc, to_plain(audit), file=file)


def check_contract(audit: Any, *, file: str | Path | None = None) -> AuditDoc:
    """Check an audit about to be written. A break is the analysis's own fault, not its input's:
    it is an internal error (exit code 1) naming the key and what the contract expects there."""
    try:
        return validate_audit(audit, file=file)
    except SchemaError as exc:
        raise SimreportError(
            f"the audit breaks its contract (AuditDoc): {exc.message}",
            file=file,
            path=exc.path,
            expected=exc.expected,
        ) from exc


def read_audit(path: str | Path) -> AuditDoc:
    """Read and check an audit.json file."""
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"cannot read the audit: {exc}", file=path) from None
    return validate_audit(data, file=path)


def audit_json_schema() -> dict[str, Any]:
    """The JSON Schema of audit.json (`simreport schema audit`).

    Returns:
        The schema of `AuditDoc`, with audit.json's key names.
    """
    return AuditDoc.model_json_schema(by_alias=True)

"""Full-factorial audits: main effects and two-way interactions over the grid, and the
sensitivity ranking they give (SPEC §6a)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from simreport.analysis.audit import RunRecord, analyse
from simreport.analysis.factorial import (
    FACTORIAL_METHOD,
    empty_cells_note,
    factorial_effects,
    short_cells_note,
)
from simreport.core.schema import RunResult

NOISE = [-1.2, -0.4, 0.0, 0.5, 1.1]
"""Centred replication noise (mean 0): every cell's mean is its shift exactly."""

FEED = {
    "id": "feed",
    "target": "params.recommender",
    "levels": ["engagement", "random"],
    "level": "meso",
    "kind": "design",
    "dimension": "feed ranking",
}
HOMOPHILY = {
    "id": "homophily",
    "target": "params.homophily",
    "levels": [0.5, 0.95],
    "level": "macro",
    "kind": "design",
    "dimension": "network structure",
}
BASE = {
    "world": "echo_chamber",
    "params": {"recommender": "engagement", "homophily": 0.8, "framing": "neutral"},
}


def _plan(axes: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "hash": "f" * 64,
        "design": "full_factorial",
        "replications": len(NOISE),
        "metrics": ["polarization"],
        "base": BASE,
        "axes": [dict(a) for a in axes],
        **extra,
    }


def _cell_id(levels: Mapping[str, Any], model: str | None) -> str:
    core = "|".join(f"{a}={v}" for a, v in levels.items()) or "base"
    return core if model is None else f"{core}@{model}"


def _grid(
    axes: Sequence[Mapping[str, Any]], models: Sequence[str | None] = (None,)
) -> list[dict[str, Any]]:
    """Condition rows as analyse receives them: the base of each model, then every cell."""
    rows = [
        {
            "id": _cell_id({}, m),
            "isBase": True,
            "baseId": _cell_id({}, m),
            "levels": {},
            "model": m,
        }
        for m in models
    ]
    for combo in itertools.product(*(a["levels"] for a in axes)):
        levels = {str(a["id"]): v for a, v in zip(axes, combo, strict=True)}
        for m in models:
            rows.append(
                {
                    "id": _cell_id(levels, m),
                    "isBase": False,
                    "baseId": _cell_id({}, m),
                    "levels": levels,
                    "axis": "|".join(str(a["id"]) for a in axes),
                    "level": levels,
                    "model": m,
                }
            )
    return rows


def _records(values: Mapping[str, Sequence[float]], metric: str = "polarization") -> list[Any]:
    records = []
    for cid, sample in values.items():
        for r, value in enumerate(sample):
            result = RunResult.model_validate(
                {
                    "condition": cid,
                    "replication": r,
                    "seedPath": [r],
                    "status": {
                        "execution": "completed",
                        "validity": "unchecked",
                        "evidence": "complete",
                    },
                    "metrics": {metric: value},
                    "integrity": {"complete": True, "counters": {}},
                }
            )
            records.append(RunRecord(cid, r, result))
    return records


def _shifted(mean: float, scale: float = 0.01) -> list[float]:
    return [mean + scale * e for e in NOISE]


def _rows(audit: Mapping[str, Any], key: str, metric: str = "polarization") -> list[Any]:
    rows: list[Any] = audit[key][metric]
    return rows


# --------------------------------------------------------------------------- the confounded 2×2


CONFOUNDED = {
    # Homophily moves polarisation by half a unit; the feed barely moves it (0.814 vs 0.812).
    # The base (homophily 0.8) lies outside the grid: every cell moves homophily.
    "feed=engagement|homophily=0.5": 0.310,
    "feed=random|homophily=0.5": 0.300,
    "feed=engagement|homophily=0.95": 0.814,
    "feed=random|homophily=0.95": 0.812,
}


def _confounded_audit() -> dict[str, Any]:
    values = {"base": _shifted(0.70), **{c: _shifted(m) for c, m in CONFOUNDED.items()}}
    return analyse(_plan([FEED, HOMOPHILY]), _grid([FEED, HOMOPHILY]), _records(values))


def test_confounded_two_by_two_main_effects_separate_the_axes() -> None:
    audit = _confounded_audit()
    main = {r["axis"]: r for r in _rows(audit, "mainEffects")}
    # Averaged over homophily, the feed changes almost nothing; averaged over the feed,
    # homophily changes polarisation by about half a unit.
    assert main["feed"]["reference"] == "engagement"  # the base value, a level of the axis
    assert main["feed"]["level"] == "random"
    assert main["feed"]["diff"] == pytest.approx(((0.300 + 0.812) - (0.310 + 0.814)) / 2)
    assert main["homophily"]["reference"] == 0.5  # base 0.8 is no level: the first one
    assert main["homophily"]["diff"] == pytest.approx(((0.814 + 0.812) - (0.310 + 0.300)) / 2)
    assert abs(main["feed"]["standardized"]) < 1 < 40 < main["homophily"]["standardized"]
    for row in main.values():
        assert row["nCells"] == 4 and row["note"] is None
        assert row["ci95"][0] <= row["diff"] <= row["ci95"][1]
    (inter,) = _rows(audit, "interactions")
    assert inter["axes"] == ["feed", "homophily"]
    assert inter["diff"] == pytest.approx((0.812 - 0.300) - (0.814 - 0.310))
    assert audit["factorialMethod"] == FACTORIAL_METHOD


def test_confounded_two_by_two_ranks_homophily_first() -> None:
    audit = _confounded_audit()
    entries = audit["sensitivity"]
    assert [(e["axis"], e["rank"], e["rankedBy"]) for e in entries] == [
        ("homophily", 1, "mainEffect"),
        ("feed", 2, "mainEffect"),
    ]
    by_axis = {e["axis"]: e for e in entries}
    # The cell measures stay for reference. The feed is never the only axis away from the base,
    # so its measure is the cell that moves homophily too, and that |d| beats homophily's own
    # isolated one: what used to rank the feed first.
    feed, homophily = by_axis["feed"], by_axis["homophily"]
    assert feed["isolated"] is None
    assert feed["anyCell"]["condition"] == "feed=random|homophily=0.5"
    assert homophily["isolated"]["condition"] == "feed=engagement|homophily=0.5"
    assert feed["anyCell"]["maxAbsD"] > homophily["isolated"]["maxAbsD"] > 15
    assert by_axis["homophily"]["mainEffect"]["maxAbsD"] == pytest.approx(
        abs(_rows(audit, "mainEffects")[1]["standardized"])
    )


def test_one_at_a_time_has_no_main_effects_and_keeps_its_ranking() -> None:
    plan = _plan([FEED], design="one_at_a_time")
    conditions = _grid([FEED])
    values = {"base": _shifted(0.7), "feed=engagement": _shifted(0.7), "feed=random": _shifted(1)}
    audit = analyse(plan, conditions, _records(values))
    assert audit["mainEffects"] == {} and audit["interactions"] == {}
    assert audit["factorialMethod"] is None
    assert audit["sensitivity"][0]["rankedBy"] == "isolated"
    assert "mainEffect" not in audit["sensitivity"][0]


# --------------------------------------------------------------------------- against OLS


def _axis(axis_id: str, levels: Sequence[str]) -> dict[str, Any]:
    return {**FEED, "id": axis_id, "target": f"params.{axis_id}", "levels": list(levels)}


@pytest.mark.parametrize("sizes", [(2, 2), (3, 2), (3, 3)])
def test_marginal_contrasts_equal_the_ols_treatment_contrasts(sizes: tuple[int, int]) -> None:
    """In a balanced design the marginal differences are OLS contrasts of the cell-means model
    `y ~ C(a) * C(b)`, fitted with treatment coding (patsy's default, reference = the first
    level in sorted order, here also the plan's first level and so the reference, the base
    leaving both axes unset). With that coding the interaction contrast (a_k b_l − a_k b_0) −
    (a_0 b_l − a_0 b_0) is the coefficient of `C(a)[T.a_k]:C(b)[T.b_l]` itself, and the main
    effect of a_k averaged over b's levels is β(a_k) + Σ_l β(a_k:b_l) / |B|. The pooled
    within-cell SD is the model's residual SD."""
    rng = np.random.default_rng(sum(sizes))
    a = _axis("a", [f"a{i}" for i in range(sizes[0])])
    b = _axis("b", [f"b{j}" for j in range(sizes[1])])
    plan = {**_plan([a, b]), "base": {"world": "echo_chamber", "params": {}}}
    conditions = _grid([a, b])
    samples: dict[str, dict[str, list[float]]] = {}
    frame = []
    for cond in conditions[1:]:
        lv = cond["levels"]
        ys = rng.normal(rng.normal(0, 2), 1.0, size=4).tolist()
        samples[cond["id"]] = {"y": ys}
        frame += [{"a": lv["a"], "b": lv["b"], "y": y} for y in ys]
    fit = smf.ols("y ~ C(a) * C(b)", data=pd.DataFrame(frame)).fit()
    beta = fit.params
    effects = factorial_effects(plan, conditions, samples, ["y"])
    sd = math.sqrt(fit.mse_resid)
    for row in effects["mainEffects"]["y"]:
        k, axis = row["level"], row["axis"]
        if axis == "a":
            want = beta[f"C(a)[T.{k}]"] + sum(
                beta[f"C(a)[T.{k}]:C(b)[T.{lb}]"] for lb in b["levels"][1:]
            ) / len(b["levels"])
        else:
            want = beta[f"C(b)[T.{k}]"] + sum(
                beta[f"C(a)[T.{la}]:C(b)[T.{k}]"] for la in a["levels"][1:]
            ) / len(a["levels"])
        assert row["diff"] == pytest.approx(want, abs=1e-10), row
        assert row["standardized"] == pytest.approx(want / sd, abs=1e-10)
    rows = effects["interactions"]["y"]
    assert len(rows) == (sizes[0] - 1) * (sizes[1] - 1)
    for row in rows:
        la, lb = row["levels"]
        assert row["diff"] == pytest.approx(beta[f"C(a)[T.{la}]:C(b)[T.{lb}]"], abs=1e-10)


# --------------------------------------------------------------------------- levels and cells


def test_three_level_axis_takes_its_base_value_as_reference() -> None:
    """The base's framing (neutral) is the middle level: the rows compare the other two with
    it, and a 3×2 grid has one interaction per pair of non-reference levels."""
    framing = _axis("framing", ["moral", "neutral", "risk"])
    window = _axis("window", ["w3", "w1"])
    means = {"moral": 0.4, "neutral": 0.0, "risk": -0.2}
    values = {"base": _shifted(0.0)}
    for f, w in itertools.product(framing["levels"], window["levels"]):
        bump = 1.0 if w == "w1" else 0.0
        inter = 0.5 if (f, w) == ("risk", "w1") else 0.0
        values[f"framing={f}|window={w}"] = _shifted(means[f] + bump + inter)
    audit = analyse(_plan([framing, window]), _grid([framing, window]), _records(values))
    main = [(r["axis"], r["level"], r["reference"]) for r in _rows(audit, "mainEffects")]
    assert main == [
        ("framing", "moral", "neutral"),
        ("framing", "risk", "neutral"),
        ("window", "w1", "w3"),
    ]
    diffs = [r["diff"] for r in _rows(audit, "mainEffects")]
    assert diffs == pytest.approx([0.4, -0.2 + 0.25, 1.0 + 0.5 / 3])
    assert [r["nCells"] for r in _rows(audit, "mainEffects")] == [4, 4, 6]
    inter = _rows(audit, "interactions")
    assert [r["levels"] for r in inter] == [["moral", "w1"], ["risk", "w1"]]
    assert [r["references"] for r in inter] == [["neutral", "w3"]] * 2
    assert [r["diff"] for r in inter] == pytest.approx([0.0, 0.5])


def test_cells_without_values_null_every_contrast_that_needs_them() -> None:
    """A cell with no usable value is never dropped from the average (that would weigh the
    other axes' levels unequally again): each contrast that needs it is null, with a note
    naming it; a cell with one value gives a difference but no interval or size."""
    framing = _axis("framing", ["moral", "neutral", "risk"])
    window = _axis("window", ["w3", "w1"])
    values = {"base": _shifted(0.0)}
    for f, w in itertools.product(framing["levels"], window["levels"]):
        values[f"framing={f}|window={w}"] = _shifted(0.1)
    values["framing=risk|window=w1"] = []  # every run of this cell failed
    values["framing=moral|window=w3"] = [0.3]  # one usable replication
    audit = analyse(_plan([framing, window]), _grid([framing, window]), _records(values))
    main = {(r["axis"], r["level"]): r for r in _rows(audit, "mainEffects")}
    risk, window_row = main[("framing", "risk")], main[("window", "w1")]
    for row in (risk, window_row):
        assert row["diff"] is None and row["ci95"] is None and row["standardized"] is None
        assert row["note"] == empty_cells_note(["framing=risk|window=w1"], row["nCells"])
    moral = main[("framing", "moral")]
    assert moral["diff"] == pytest.approx(0.1)
    assert moral["ci95"] is None and moral["standardized"] is None
    assert moral["note"] == short_cells_note(["framing=moral|window=w3"])
    inter = {tuple(r["levels"]): r for r in _rows(audit, "interactions")}
    assert inter[("risk", "w1")]["diff"] is None
    assert inter[("moral", "w1")]["diff"] == pytest.approx(-0.2)
    # No main effect with a size: no axis is ranked.
    assert all(e["rank"] is None for e in audit["sensitivity"])


def test_each_model_has_its_own_grid() -> None:
    """Models never mix: each model's rows come from its own cells only, and the second model's
    offset leaves its effects unchanged."""
    plan = _plan([FEED, HOMOPHILY], models=["m1", "m2"])
    conditions = _grid([FEED, HOMOPHILY], models=["m1", "m2"])
    values = {}
    for cond in conditions:
        offset = 5.0 if cond["model"] == "m2" else 0.0
        slope = 2.0 if cond["model"] == "m2" else 1.0
        lv = cond["levels"]
        effect = slope * (0.5 if lv.get("homophily") == 0.95 else 0.0)
        values[cond["id"]] = _shifted(offset + effect)
    audit = analyse(plan, conditions, _records(values))
    rows = _rows(audit, "mainEffects")
    got = [(r["model"], r["axis"], r["diff"]) for r in rows]
    assert got == [
        ("m1", "feed", pytest.approx(0.0)),
        ("m1", "homophily", pytest.approx(0.5)),
        ("m2", "feed", pytest.approx(0.0)),
        ("m2", "homophily", pytest.approx(1.0)),
    ]
    # The ranking takes the largest size over models: m2's homophily.
    top = audit["sensitivity"][0]
    assert (top["axis"], top["mainEffect"]["model"]) == ("homophily", "m2")
    assert [r["model"] for r in _rows(audit, "interactions")] == ["m1", "m2"]


def test_intervals_are_seeded_from_the_plan() -> None:
    """The same plan gives the same intervals; another plan hash other draws."""
    values = {"base": _shifted(0.70), **{c: _shifted(m, 0.1) for c, m in CONFOUNDED.items()}}
    conditions = _grid([FEED, HOMOPHILY])
    first = factorial_effects(_plan([FEED, HOMOPHILY]), conditions, _samples(values), ["p"])
    again = factorial_effects(_plan([FEED, HOMOPHILY]), conditions, _samples(values), ["p"])
    other = factorial_effects(
        {**_plan([FEED, HOMOPHILY]), "hash": "0" * 64}, conditions, _samples(values), ["p"]
    )
    assert first == again
    assert [r["diff"] for r in first["mainEffects"]["p"]] == [
        r["diff"] for r in other["mainEffects"]["p"]
    ]
    assert [r["ci95"] for r in first["mainEffects"]["p"]] != [
        r["ci95"] for r in other["mainEffects"]["p"]
    ]


def _samples(values: Mapping[str, Sequence[float]]) -> dict[str, dict[str, list[float]]]:
    return {cid: {"p": list(v)} for cid, v in values.items()}


# --------------------------------------------------------------------------- the example


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "echo_chamber" / "factorial-audit.yaml"


def test_the_workflow_declares_the_main_effects_figures() -> None:
    """The workflow names every figure before the analysis runs: a full factorial has one
    main-effects figure per metric, a one_at_a_time plan none."""
    from simreport.workflow import load_workflow

    one_at_a_time = EXAMPLE.with_name("audit.yaml")
    workflow = load_workflow({"plans": [str(EXAMPLE), str(one_at_a_time)]}, root=EXAMPLE.parents[2])
    factorial, other = workflow.plans
    assert [f for f in factorial.figures if f.startswith("main-effects-")] == [
        "main-effects-polarization.svg",
        "main-effects-sameGroupExposure.svg",
    ]
    assert not [f for f in other.figures if f.startswith("main-effects-")]


@pytest.mark.slow
def test_the_factorial_example_reports_main_effects(tmp_path: Path) -> None:
    """The shipped full-factorial example, audited with two replications: audit.json has main
    effects and interactions for both metrics, homophily ranks first by its main effect, and the
    report shows the section with its tables and figures."""
    import json

    import simreport

    out = tmp_path / "echo_chamber_factorial"
    simreport.audit(EXAMPLE, out=out, replications=2, ledger=False)
    audit = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    assert audit["plan"]["design"] == "full_factorial"
    for metric in ("polarization", "sameGroupExposure"):
        rows = audit["mainEffects"][metric]
        assert [(r["axis"], r["level"], r["reference"]) for r in rows] == [
            ("homophily", 0.3, 0.8),
            ("feed_ranking", "random", "engagement"),
        ]
        assert all(r["nCells"] == 4 and r["ci95"] is not None for r in rows)
        (inter,) = audit["interactions"][metric]
        assert inter["axes"] == ["homophily", "feed_ranking"]
    top = audit["sensitivity"][0]
    assert (top["axis"], top["rankedBy"]) == ("homophily", "mainEffect")
    html = (out / "report.html").read_text(encoding="utf-8")
    section = html[html.index('id="main-effects"') : html.index('id="h-direction"')]
    assert "polarization: main effects" in section and "two-way interactions" in section
    assert "homophily: 0.3 vs 0.8" in section and "<svg" in section
    assert (out / "figures" / "main-effects-polarization.svg").is_file()

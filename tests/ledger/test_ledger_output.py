"""How `simreport ledger runs` and `ledger show` print: a shortened column never makes two
different ids read alike, and a run shows what it ran with only as far as it recorded it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simreport.cli import main
from simreport.cli.output import distinct_shortened
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.ledger import connect, ingest_run
from tests.support.studies import scenario_text

HALF = "feed=engagement|environment_structure=0.5"
NINETY_FIVE = "feed=engagement|environment_structure=0.95"


def test_ids_cut_to_the_same_text_keep_the_tail_that_tells_them_apart() -> None:
    shown = distinct_shortened([HALF, NINETY_FIVE, "base", None, HALF], 40)
    assert shown[0] != shown[1]
    assert shown[0].endswith("…0.5") and shown[1].endswith("…0.95")
    assert all(len(text) <= 40 for text in shown)
    assert shown[2:] == ["base", "-", shown[0]]  # short ones as they are, equal ones alike


def test_a_cut_alone_in_its_column_ends_with_an_ellipsis() -> None:
    assert distinct_shortened([HALF], 20) == [HALF[:19] + "…"]
    assert distinct_shortened([HALF, HALF], 20) == [HALF[:19] + "…"] * 2


@pytest.mark.parametrize("width", [3, 8, 20, 40])
def test_ids_that_differ_only_in_the_middle_stay_distinct(width: int) -> None:
    ids = [f"{'x' * 30}{i}{'y' * 30}" for i in range(3)] + ["x" * 61]
    shown = distinct_shortened(ids, width)
    assert len(set(shown)) == len(ids)
    assert all(text == whole or len(text) == width for text, whole in zip(shown, ids, strict=True))
    if width < 30:  # the cut hides where the first three differ: they print whole
        assert shown[:3] == ids[:3] and shown[3] != ids[3]


def test_cut_text_never_equals_a_short_text_that_reads_like_it() -> None:
    long = "abcdefghij" * 3
    lookalike = long[:9] + "…"
    shown = distinct_shortened([long, lookalike], 10)
    assert shown[1] == lookalike and shown[0] != lookalike


def test_ledger_runs_prints_two_conditions_cut_at_the_same_place_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = validate_scenario(yaml.safe_load(scenario_text(steps=1, n=2)))
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    engine = connect(url)
    try:
        for i, condition in enumerate((HALF, NINETY_FIVE)):
            run_scenario(scenario, tmp_path / f"run{i}", condition=condition, replication=0)
            ingest_run(engine, tmp_path / f"run{i}")
    finally:
        engine.dispose()
    capsys.readouterr()
    assert main(["ledger", "runs", "--ledger", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = lines[0], lines[1:3]
    start = header.index("condition")
    cells = {row[start:].split("  ")[0] for row in rows}
    assert len(cells) == 2, rows
    assert all(cell.startswith("feed=engagement") for cell in cells)

"""The pages read in headless Chromium at 1280 and 400 px: no label of a table, list or heading
is clipped, no line breaks inside a word, and no two cells of a column that say different
things look alike. Checked on the example report, a refund-desk (testbed) report and the site
index that lists both; and, so the measure itself is trusted, on a page built to fail it."""

from __future__ import annotations

from pathlib import Path

import pytest

import simreport
from simreport.report.site import write_site
from tests.support.browser import needs_chromium, text_fit

pytestmark = [pytest.mark.slow, needs_chromium]

REFUND_PLAN = Path(__file__).resolve().parents[2] / "examples" / "refund_desk" / "audit.yaml"
WIDTHS = (1280, 400)


@pytest.fixture(scope="module")
def site(audit_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site of the example audit and a refund-desk audit of one replication per condition."""
    root = tmp_path_factory.mktemp("fit")
    refund = root / "refund_desk"
    simreport.audit(REFUND_PLAN, out=refund, replications=1)
    site = root / "site"
    write_site(site, [("prisoners_dilemma", audit_dir), ("refund_desk", refund)])
    return site


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "page", ["index.html", "prisoners_dilemma/report.html", "refund_desk/report.html"]
)
def test_no_label_is_clipped_cut_mid_word_or_mistaken_for_another(
    site: Path, page: str, width: int, tmp_path: Path
) -> None:
    fit = text_fit(site / page, tmp_path / "chromium", width=width)
    assert fit.viewport == width
    assert fit.labels > (10 if page == "index.html" else 100)
    assert fit.clipped == []
    assert fit.cut_words == []
    assert fit.clashes == []


_FAILING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fails</title>
<style>
td.cut { max-width: 8em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td.anywhere { max-width: 6em; overflow-wrap: anywhere; }
</style></head><body>
<table>
<tr><td class="cut">feed=engagement|environment_structure=0.5</td>
<td class="anywhere">order_number_disclosure</td></tr>
<tr><td class="cut">feed=engagement|environment_structure=0.95</td><td>b</td></tr>
</table>
</body></html>
"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_measure_finds_clipped_cut_and_lookalike_labels(width: int, tmp_path: Path) -> None:
    page = tmp_path / "fails.html"
    page.write_text(_FAILING, encoding="utf-8")
    fit = text_fit(page, tmp_path / "chromium", width=width)
    assert len(fit.clipped) == 2
    assert len(fit.clashes) == 1 and fit.clashes[0].startswith("table 0 column 0: feed=")
    assert fit.cut_words and all("‸" in cut for cut in fit.cut_words)

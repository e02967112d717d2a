"""Headless Chromium for the page tests: render a page offline, keep its screenshot, its DOM and
every request it made, so a test can check what the page looks like, what it says, and that it
reached for nothing outside itself.

Test modules import this as `from tests.support.browser import ...`."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium")

needs_chromium = pytest.mark.requires(
    CHROMIUM is not None, "chromium (apt-get install -y chromium)"
)

# Requests Chromium makes for itself (extension updates, account checks, network time) carry no
# initiator; anything the page asks for carries the page's origin ("null" for a file:// page).
BROWSER_INITIATED = "not an origin"
OFFLINE_SCHEMES = ("file:", "data:", "about:", "chrome:", "chrome-extension:", "blob:")


def chromium_command(
    url: str, profile: Path, *actions: str, window: str = "1280,2000"
) -> list[str]:
    """A headless Chromium command line that cannot reach the network: every host name resolves
    to nothing, QUIC and background services are off, and the profile is a throwaway folder.
    `actions` are what to do with the page (`--screenshot=…`, `--dump-dom`, `--log-net-log=…`)."""
    assert CHROMIUM is not None
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        f"--window-size={window}",
        *actions,
        url,
    ]


def run_chromium(command: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def page_requests(net_log: Path) -> list[str]:
    """Every URL the page itself asked the network stack for, from a Chromium net log."""
    log = json.loads(net_log.read_text(encoding="utf-8"))
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        initiated_by_page = params.get("initiator") != BROWSER_INITIATED
        if event["type"] == start_job and "url" in params and initiated_by_page:
            urls.append(str(params["url"]))
    return urls


def network_requests(urls: list[str]) -> list[str]:
    """The URLs that would leave the machine: all but file:, data:, about: and the like."""
    return [u for u in urls if not u.startswith(OFFLINE_SCHEMES)]


@dataclass(frozen=True)
class RenderedPage:
    screenshot: Path
    dom: str
    requests: list[str]  # every URL the page asked for while the screenshot was taken

    @property
    def network_requests(self) -> list[str]:
        return network_requests(self.requests)

    def check_screenshot(self, *, min_bytes: int, size: tuple[int, int]) -> None:
        """The screenshot exists, is `size` pixels, is bigger than `min_bytes` and not blank."""
        assert self.screenshot.is_file() and self.screenshot.stat().st_size > min_bytes
        with Image.open(self.screenshot) as image:
            assert image.size == size
            lo, hi = image.convert("L").getextrema()
            assert isinstance(lo, int) and isinstance(hi, int), "not a greyscale image"
            assert hi - lo > 100, "blank screenshot"


def render(url: str, folder: Path, *, window: str = "1280,2000") -> RenderedPage:
    """Open `url` twice in a fresh offline Chromium below `folder`: once for a screenshot with a
    net log of everything requested, once for the DOM after scripts (if any) have run."""
    folder.mkdir(parents=True, exist_ok=True)
    shot = folder / "shot.png"
    net_log = folder / "net.json"
    run_chromium(
        chromium_command(
            url,
            folder / "profile-shot",
            f"--screenshot={shot}",
            f"--log-net-log={net_log}",
            "--net-log-capture-mode=Everything",
            window=window,
        )
    )
    assert net_log.is_file()
    dom = run_chromium(chromium_command(url, folder / "profile-dom", "--dump-dom", window=window))
    return RenderedPage(screenshot=shot, dom=dom.stdout, requests=page_requests(net_log))


# A measuring script added to a test's copy of a page (the pages themselves have no script): it
# records the viewport width, the document's scroll width, and every element that sticks out of
# the viewport without being inside a container that scrolls or clips it, and writes them into
# the frame around the page (headless Chromium's windows are at least 500 px wide, so a narrower
# viewport is an iframe).
_MEASURE = """<script>
(function () {
  var width = window.innerWidth;
  var outside = [];
  document.querySelectorAll("body *").forEach(function (element) {
    if (element.getBoundingClientRect().right <= width + 0.5) return;
    for (var p = element.parentElement; p; p = p.parentElement) {
      var overflow = getComputedStyle(p).overflowX;
      if (overflow === "auto" || overflow === "scroll" || overflow === "hidden") return;
    }
    var name = element.tagName.toLowerCase();
    var cls = element.getAttribute("class");
    outside.push(cls ? name + "." + cls : name);
  });
  var out = parent.document.createElement("pre");
  out.id = "page-width";
  out.textContent = JSON.stringify({
    viewport: width,
    clientWidth: document.documentElement.clientWidth,
    scrollWidth: document.documentElement.scrollWidth,
    outside: outside.slice(0, 20)
  });
  parent.document.body.appendChild(out);
})();
</script>
"""
_FRAME = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>frame</title></head>
<body style="margin:0"><iframe src="{src}" title="page"
style="width:{width}px;height:{height}px;border:0"></iframe></body></html>
"""


@dataclass(frozen=True)
class PageWidth:
    viewport: int  # the window's width
    client_width: int  # what of it the page can use (less a vertical scroll bar)
    scroll_width: int  # how wide the document is: wider than client_width scrolls sideways
    outside: list[str]  # elements wider than the viewport outside any scrolling container

    @property
    def scrolls_sideways(self) -> bool:
        return self.scroll_width > self.client_width


def page_width(page: Path, folder: Path, *, width: int = 400, height: int = 900) -> PageWidth:
    """Open a copy of `page` (next to it, so its relative links still resolve) with a measuring
    script added, in a viewport `width` px wide, and read back how wide the document is."""
    measured = _measured(page, folder / "profile-width", _MEASURE, "page-width", width, height)
    return PageWidth(
        measured["viewport"], measured["clientWidth"], measured["scrollWidth"], measured["outside"]
    )


def _measured(
    page: Path, profile: Path, script: str, out_id: str, width: int, height: int
) -> dict[str, Any]:
    """Open a copy of `page` with `script` added, framed in a viewport `width` px wide, and
    read back the JSON the script writes into the frame's element `out_id`."""
    profile.parent.mkdir(parents=True, exist_ok=True)
    probe = page.with_name(f".measure-{page.name}")
    frame = page.with_name(f".frame-{page.name}")
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", script + "</body>", 1), encoding="utf-8")
    frame.write_text(_FRAME.format(src=probe.name, width=width, height=height), encoding="utf-8")
    try:
        done = run_chromium(
            chromium_command(
                frame.resolve().as_uri(),
                profile,
                "--allow-file-access-from-files",  # the page may write into its frame
                "--dump-dom",
                window=f"{max(width, 500) + 100},{height + 100}",
            )
        )
    finally:
        probe.unlink()
        frame.unlink()
    found = re.search(rf'<pre id="{out_id}">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured


# A script that reads every label of a page as it is laid out: table cells, captions, headings,
# list items and summaries. Clipped: text an element cuts off (overflow hidden or an ellipsis)
# rather than wrapping or scrolling. Cut words: a line that breaks between two letters of one
# text run where no break point is (after _ | = @ / . , ; : a dash or a bracket, or at a <wbr>,
# which ends a text run; a `.hash` has no words). Clashes: two cells of one table column whose
# texts differ but whose visible parts read the same. Visually hidden elements (clipped to a
# pixel for screen readers) are left out.
_TEXT_FIT = r"""<script>
(function () {
  var LABELS = "td, th, caption, li, summary, h1, h2, h3, figcaption";
  var BREAK_AFTER = "_|=@/.,;:-\u2013\u2014)]}\u2026\u00b7";
  function hidden(el) {
    for (var p = el; p; p = p.parentElement) {
      var cs = getComputedStyle(p);
      if (cs.clipPath !== "none" || cs.display === "none") return true;
      if (cs.visibility === "hidden") return true;
      var folded = p.tagName === "DETAILS" && !p.open && el !== p;
      if (folded && !el.closest("summary")) return true;
    }
    return false;
  }
  function clips(el) {
    var cs = getComputedStyle(el);
    var hides = cs.overflowX === "hidden" || cs.overflowX === "clip";
    hides = hides || cs.textOverflow === "ellipsis";
    return hides && el.scrollWidth > el.clientWidth + 1;
  }
  function visibleText(el) {
    if (!clips(el)) return el.textContent;
    var box = el.getBoundingClientRect(), shown = "";
    var walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      for (var i = 0; i < node.length; i++) {
        var range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        var r = range.getBoundingClientRect();
        if (r.right <= box.right + 0.5 && r.left >= box.left - 0.5) shown += node.data[i];
      }
    }
    return shown;
  }
  function cutWords(el, found) {
    var walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest(".hash")) continue;  // a hash has no words to cut
      var before = null, top = null;
      for (var i = 0; i < node.length; i++) {
        var c = node.data[i];
        if (/\s/.test(c)) { before = null; continue; }
        var range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        var r = range.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) { before = null; continue; }
        var wrapped = before !== null && r.top > top + r.height / 2;
        if (wrapped && BREAK_AFTER.indexOf(before) < 0 && "([{".indexOf(c) < 0) {
          var text = node.data;
          found.push(text.slice(Math.max(0, i - 20), i) + "\u2038" + text.slice(i, i + 20));
        }
        before = c; top = r.top;
      }
    }
  }
  var out = {viewport: window.innerWidth, labels: 0, clipped: [], cutWords: [], clashes: []};
  var seen = new Set();
  document.querySelectorAll(LABELS).forEach(function (el) {
    if (hidden(el)) return;
    out.labels += 1;
    if (clips(el)) out.clipped.push(el.tagName.toLowerCase() + ": " + el.textContent.slice(0, 80));
    // Text nested in another label (a cell's list item) is measured once, with its own node.
    if (el.parentElement && el.parentElement.closest(LABELS)) return;
    cutWords(el, out.cutWords);
  });
  document.querySelectorAll("table").forEach(function (table, t) {
    var columns = {};
    table.querySelectorAll("tr").forEach(function (tr) {
      Array.prototype.forEach.call(tr.cells, function (cell) {
        if (hidden(cell)) return;
        var key = cell.cellIndex, shown = visibleText(cell).trim();
        var whole = cell.textContent.trim();
        if (!shown) return;
        columns[key] = columns[key] || {};
        (columns[key][shown] = columns[key][shown] || new Set()).add(whole);
      });
    });
    Object.keys(columns).forEach(function (key) {
      Object.keys(columns[key]).forEach(function (shown) {
        if (columns[key][shown].size < 2) return;
        out.clashes.push("table " + t + " column " + key + ": " + shown);
      });
    });
  });
  var pre = parent.document.createElement("pre");
  pre.id = "text-fit";
  pre.textContent = JSON.stringify(out);
  parent.document.body.appendChild(pre);
})();
</script>
"""


@dataclass(frozen=True)
class TextFit:
    viewport: int
    labels: int  # how many visible labels were measured
    clipped: list[str]  # labels whose text is cut off
    cut_words: list[str]  # where a line broke inside a word (‸ marks the break)
    clashes: list[str]  # visible cell texts that stand for two different texts in one column


def text_fit(page: Path, folder: Path, *, width: int, height: int = 900) -> TextFit:
    """How the labels of `page` fit in a viewport `width` px wide (see `_TEXT_FIT`)."""
    profile = folder / f"profile-fit-{width}"
    measured = _measured(page, profile, _TEXT_FIT, "text-fit", width, height)
    return TextFit(
        measured["viewport"],
        measured["labels"],
        measured["clipped"],
        measured["cutWords"],
        measured["clashes"],
    )

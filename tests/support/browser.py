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
    folder.mkdir(parents=True, exist_ok=True)
    probe = page.with_name(f".measure-{page.name}")
    frame = page.with_name(f".frame-{page.name}")
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", _MEASURE + "</body>", 1), encoding="utf-8")
    frame.write_text(_FRAME.format(src=probe.name, width=width, height=height), encoding="utf-8")
    try:
        done = run_chromium(
            chromium_command(
                frame.resolve().as_uri(),
                folder / "profile-width",
                "--allow-file-access-from-files",  # the page may write into its frame
                "--dump-dom",
                window=f"{max(width, 500) + 100},{height + 100}",
            )
        )
    finally:
        probe.unlink()
        frame.unlink()
    found = re.search(r'<pre id="page-width">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    measured = json.loads(html.unescape(found.group(1)))
    return PageWidth(
        measured["viewport"], measured["clientWidth"], measured["scrollWidth"], measured["outside"]
    )

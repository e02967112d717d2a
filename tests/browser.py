"""Headless Chromium for the page tests: render a page offline, keep its screenshot, its DOM and
every request it made, so a test can check what the page looks like, what it says, and that it
reached for nothing outside itself.

Test modules import this as `from browser import ...` (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import json
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

"""The report in a real headless Chromium (Debian's package): every image loads, nothing errs.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages
separated by NUL bytes on file descriptors 3 and 4), so the test needs no websocket library, no
driver binary and no browser download. It records every request the page makes (only file: and
data: URLs may appear: the report is self-contained), console errors, uncaught exceptions and
failed loads, then reads each <img>'s `complete` and `naturalWidth`.

Skips only when Chromium is absent and LABPROBE_REQUIRE_BROWSER is unset (CI installs Chromium
and sets it). LABPROBE_REPORT_SCREENSHOT=PATH also saves a screenshot of the report there
(docs/report.png for the README).
"""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_report import LAST_RUN, build_lab_store

from runner.analysis.report import write_report
from runner.lab.cluster import load_cluster

REPO = Path(__file__).resolve().parents[3]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and not os.environ.get("LABPROBE_REQUIRE_BROWSER"):
    pytest.skip(
        "no chromium here (apt-get install chromium; CI sets LABPROBE_REQUIRE_BROWSER)", allow_module_level=True
    )

# The flags that work on a machine with a closed network, as root, without a screen.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 60.0


class Browser:
    """A headless Chromium and one page, spoken to over the DevTools pipe."""

    def __init__(self, user_data_dir: Path, width: int = 1200, height: int = 900) -> None:
        assert CHROMIUM, "chromium is required (LABPROBE_REQUIRE_BROWSER is set)"
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads fd 3 and writes fd 4. bash moves the pipe ends there before exec'ing it
        # (no preexec_fn: not safe in a process with threads, such as a Ray driver), by way of fds
        # above both: a pipe end may itself be fd 3 or 4 (a process with few files open).
        high = max(to_chrome_r, from_chrome_w) + 1
        move = (
            f"exec {high}<&{to_chrome_r} {high + 1}>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-; "
            f'exec 3<&{high} 4>&{high + 1} {high}<&- {high + 1}>&-; exec "$@"'
        )
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                move,
                "bash",
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={user_data_dir}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(to_chrome_r, from_chrome_w),
        )
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)
        self._next_id = 0
        self.seen: list[dict] = []
        self._replies: dict[int, dict] = {}
        self.events: queue.Queue[dict] = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _read(self) -> None:
        buffer = b""
        with open(self._from_chrome, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        with self._cond:
                            self._replies[message["id"]] = message
                            self._cond.notify_all()
                    else:
                        self.events.put(message)

    def call(self, method: str, *, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: self._next_id in self._replies, timeout=TIMEOUT_S):
                raise TimeoutError(f"chromium gave no answer to {method} in {TIMEOUT_S:.0f} s")
            reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=self.session, **params)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        seen = []
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(event)
            if event.get("method") == method:
                for other in seen:  # keep everything for the error checks
                    self.seen.append(other)
                return event
        self.seen.extend(seen)
        raise TimeoutError(f"no {method} within {TIMEOUT_S:.0f} s")

    def load(self, url: str) -> dict:
        """Open `url`; return what the page did: requests, errors, images."""
        self.seen = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.page(f"{domain}.enable")
        self.page("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        time.sleep(0.2)  # late console messages
        while not self.events.empty():
            self.seen.append(self.events.get_nowait())
        images = self.page(
            "Runtime.evaluate",
            returnByValue=True,
            expression=(
                "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,"
                " width: i.naturalWidth, height: i.naturalHeight}))"
            ),
        )["result"]["value"]
        return {
            "images": images,
            "errors": page_errors(self.seen),
            "requests": [
                e["params"]["request"]["url"] for e in self.seen if e.get("method") == "Network.requestWillBeSent"
            ],
        }

    def screenshot(self, width: int = 1200) -> bytes:
        import base64

        size = self.page("Page.getLayoutMetrics")["cssContentSize"]
        self.page(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=int(size["height"]),
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(shot["data"])

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)


def page_errors(events: list[dict]) -> list[str]:
    """Uncaught exceptions, console errors, failed loads, in one line each."""
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            errors.append("exception: " + details.get("exception", {}).get("description", details.get("text", "")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            errors.append(f"load failed: {params.get('errorText')}")
    return errors


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    store = build_lab_store(tmp_path_factory.mktemp("lab") / "results")
    cluster = load_cluster(REPO / "cluster.yaml", configs=False)  # its budget: the verdict the report leads with
    return write_report(store, LAST_RUN, cluster=cluster)[0]


def test_report_loads_with_every_image_and_no_errors(browser, report):
    seen = browser.load(report.as_uri())
    assert seen["errors"] == []
    assert len(seen["images"]) >= 4  # carriers, scaling, kernels
    for image in seen["images"]:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
    # Self-contained: the page itself is the only file fetched; images are data: URIs.
    assert [u for u in seen["requests"] if not u.startswith("data:")] == [report.as_uri()]


def test_the_findings_come_first_then_the_plots_and_the_raw_tables_are_collapsed(browser, report):
    """As a reader sees it: the first heading under the title is the lab's question (the verdict for its
    budget), then the findings; the first table is the verdict's figures, every plot is shown below the
    findings, and the raw tables sit in a closed <details>."""
    browser.load(report.as_uri())
    layout = browser.page(
        "Runtime.evaluate",
        returnByValue=True,
        expression=(
            "({h2: Array.from(document.querySelectorAll('h2')).filter(h => h.checkVisibility())"
            "    .map(h => [h.textContent, h.getBoundingClientRect().top]),"
            "  details: Array.from(document.querySelectorAll('details')).map(d => d.open),"
            "  visibleImages: Array.from(document.images).filter(i => i.checkVisibility()).length,"
            "  images: document.images.length,"
            "  firstImageTop: Array.from(document.images).map(i => i.getBoundingClientRect().top)"
            "    .reduce((a, b) => Math.min(a, b), 1e9),"
            "  firstTable: document.querySelector('table').closest('details') === null})"
        ),
    )["result"]["value"]
    titles = [t for t, _ in layout["h2"]]
    assert titles[0].startswith("The lab's question: hours for the budget"), titles  # the verdict first
    assert titles[1] == "What this run found", titles
    assert titles[2].startswith("What changed since the last run") and titles[3].startswith("Failed and skipped")
    assert [top for _, top in layout["h2"]] == sorted(top for _, top in layout["h2"])
    assert titles[4] == "Host comparison", titles
    assert layout["details"] == [False] and layout["firstTable"]
    assert layout["visibleImages"] == layout["images"] >= 6
    assert layout["firstImageTop"] > layout["h2"][4][1]  # below the findings, under the plots' heading


def test_report_screenshot_shows_a_rendered_page(browser, report, tmp_path):
    from PIL import Image

    browser.load(report.as_uri())
    png = browser.screenshot()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    # the whole page, not one screen; no horizontal overflow (a table wider than the page)
    assert image.width == 1200 and image.height > 900
    # A rendered page has many colours (text, tables); a blank or error page has a handful.
    assert len(image.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 200
    target = os.environ.get("LABPROBE_REPORT_SCREENSHOT")
    if target:
        small = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
        small.save(target, optimize=True)


def test_the_check_sees_a_broken_image_and_a_script_error(browser, tmp_path):
    """The harness must be able to fail: a page with a bad image and a throwing script."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img alt=x src="data:image/png;base64,AAAA">'
        "<img alt=y src=\"missing.png\"><script>console.error('boom'); undefined_fn();</script>"
        "</body></html>",
        encoding="utf-8",
    )
    seen = browser.load(page.as_uri())
    assert [i["width"] for i in seen["images"]] == [0, 0]
    text = " ".join(seen["errors"])
    assert "undefined_fn" in text and "boom" in text and "missing.png" in text

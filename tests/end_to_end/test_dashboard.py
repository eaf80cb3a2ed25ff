"""``pwevent dashboard`` and ``pwevent demo --dashboard``, rendered by a real headless Chromium.

The browser is driven with chromedriver's W3C WebDriver protocol (plain HTTP): the tests wait
until the page shows the released slots, then check the screenshot it renders, pixel by pixel.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jobkit import config, in_process, produce, requirement_records, setup_topics, slot_reports
from PIL import Image

from local_kafka.embedded import EmbeddedBroker, broker_binary
from streams.releases.dashboard import BAND_RGB, STATUS_RGB

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path(shutil.which("chromedriver") or "/usr/bin/chromedriver")
WIDTH, HEIGHT = 1280, 900
ROOT = Path(__file__).resolve().parents[2]


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"the dashboard tests need Debian's headless Chromium and its driver, and "
                    f"{', '.join(missing)} is missing: install them with `./setup.sh test` or "
                    "`sudo apt-get install -y --no-install-recommends chromium chromium-driver`",
                    pytrace=False)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


class Browser:
    """One headless Chromium session through chromedriver, with a 1280x900 viewport."""

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([str(CHROMEDRIVER), f"--port={self.port}"],
                                     stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.session: str | None = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except OSError:
                time.sleep(0.1)
        args = ["--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars",
                "--force-color-profile=srgb"]
        caps = {"goog:chromeOptions": {"binary": str(CHROMIUM), "args": args}}
        self.session = self._call("POST", "/session",
                                  {"capabilities": {"alwaysMatch": caps}})["sessionId"]
        self.cdp("Emulation.setDeviceMetricsOverride",
                 {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())["value"]

    def _session(self, method: str, path: str, body: dict | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def cdp(self, cmd: str, params: dict) -> Any:
        """A DevTools protocol command."""
        return self._session("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params})

    def open(self, url: str) -> None:
        """Navigate to ``url``."""
        self._session("POST", "/url", {"url": url})

    def js(self, script: str) -> Any:
        """The value of a JavaScript function body run in the page."""
        return self._session("POST", "/execute/sync", {"script": script, "args": []})

    def wait(self, script: str, ok: Callable[[Any], bool], timeout: float) -> Any:
        """Run ``script`` until ``ok`` holds for its value; its last value."""
        deadline = time.monotonic() + timeout
        value = self.js(script)
        while not ok(value) and time.monotonic() < deadline:
            time.sleep(0.25)
            value = self.js(script)
        return value

    def screenshot(self) -> bytes:
        """The viewport as PNG."""
        return base64.b64decode(self._session("GET", "/screenshot"))

    def close(self) -> None:
        """End the session and chromedriver."""
        try:
            if self.session is not None:
                self._call("DELETE", f"/session/{self.session}")
        except OSError:
            pass
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    _require_browser()
    b = Browser(tmp_path / "chromedriver.log")
    try:
        yield b
    finally:
        b.close()


PAGE_STATE = """
const c = document.getElementById("slots-count");
const op = document.getElementById("operator-body");
const last = document.getElementById("op-last-slot");
const box = r => { const b = r.getBoundingClientRect();
                   return [Math.round(b.left), Math.round(b.top), Math.round(b.right),
                           Math.round(b.bottom)]; };
return {count: +c.textContent, last: c.dataset.lastSlot,
        marks: [...document.querySelectorAll("#strip .mark")].map(m => m.classList[1]),
        bands: document.querySelectorAll("#timeline .band rect").length,
        operator: op.dataset.configured || "", up: op.dataset.up || "",
        operatorText: op.textContent, opLast: last ? last.textContent : null,
        timeline: box(document.getElementById("timeline")),
        strip: box(document.getElementById("strip"))};
"""


def _colour_count(image: Image.Image, box: list[int], rgb: tuple[int, int, int]) -> int:
    region = image.crop(tuple(box))
    return sum(n for n, c in region.getcolors(region.width * region.height) if c == rgb)


def _check_render(png: bytes, state: dict, out: Path) -> Image.Image:
    """The screenshot is a real render: 1280 wide, many colours, bands and marks drawn."""
    out.write_bytes(png)
    if os.environ.get("PWEVENT_DASHBOARD_SCREENSHOT"):
        shutil.copyfile(out, os.environ["PWEVENT_DASHBOARD_SCREENSHOT"])
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colours = image.getcolors(WIDTH * HEIGHT)
    assert colours is not None and len(colours) > 300, f"{len(colours or [])} colours"
    assert _colour_count(image, state["timeline"], BAND_RGB) > 400  # the confidence bands
    strip = _colour_count(image, state["strip"], STATUS_RGB["published"])
    assert strip > 50  # the published slots' marks
    return image


def _children(parent: int) -> dict[int, str]:
    """The processes ``parent`` started that still run: pid to full command line.

    Read from ``/proc`` rather than ``ps``, which cuts command lines to the terminal's width.
    """
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent:
            found[int(entry.name)] = args
    return found


def _wait_for_line(path: Path, prefix: str, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for line in path.read_text().splitlines():
            if line.startswith(prefix):
                return line
        time.sleep(0.1)
    raise AssertionError(f"no line {prefix!r} (exit {proc.poll()}): {path.read_text()}")


def _sigint_as_in_a_terminal() -> None:
    """In the child: SIGINT back to its default, whatever the test run inherited (a run started
    in the background ignores it, and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(proc: subprocess.Popen, timeout: float = 30) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def _stop_demo(demo: subprocess.Popen) -> None:
    """Stop a demo still running (a failed test): Ctrl-C, on which it stops its broker and
    worker itself; whichever of those still runs after that is killed, by its pid."""
    if demo.poll() is not None:
        return
    left = _children(demo.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        _interrupt(demo)
    for pid, args in left.items():
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if cmdline.decode().strip() == args:  # the same process, not a reused pid
                os.kill(pid, signal.SIGKILL)


SLOTS = 12
USERS = 1500
#: reports per second of the demo's replay: its slots are released over about four seconds,
#: so the page shows them arriving (the page asks for new releases every second)
RATE = USERS * SLOTS / 4


def test_demo_dashboard_renders_the_releases_and_the_workers_metrics(browser: Browser,
                                                                    tmp_path: Path) -> None:
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    demo = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "demo", "--users", str(USERS), "--slots",
         str(SLOTS), "--rate", str(RATE), "--mechanism", "pbd", "--epsilon", "4", "--window", "6",
         "--dashboard",
         "--dashboard-port", "0", "--dashboard-seconds", "120", "--json-summary"],
        stdout=out.open("w"), stderr=err.open("w"), cwd=ROOT,
        preexec_fn=_sigint_as_in_a_terminal)
    try:
        url = _wait_for_line(out, "dashboard: ", demo, 60).split(": ", 1)[1]
        started = _children(demo.pid)
        assert [a for a in started.values() if str(broker_binary()) in a], started
        assert [a for a in started.values() if "streams.cli worker" in a], started
        browser.open(url)
        counts: list[int] = []  # the slots the page shows, each time it is looked at

        def complete(s: dict) -> bool:
            counts.append(s["count"])
            return s["count"] >= SLOTS and s["opLast"] == str(SLOTS - 1)

        state = browser.wait(PAGE_STATE, complete, 60)
        assert state["count"] == SLOTS and state["last"] == str(SLOTS - 1), state
        # a live page: it showed fewer slots first, then saw them arrive, never fewer again
        assert counts == sorted(counts), counts
        assert counts[0] < SLOTS and any(0 < c < SLOTS for c in counts), counts
        assert len(state["marks"]) == SLOTS and "published" in state["marks"]
        assert set(state["marks"]) <= {"published", "approximated", "nullified"}
        assert state["bands"] > 0 and state["operator"] == "yes" and state["up"] == "1"
        assert "Dead letters: 0" in state["operatorText"]
        assert "Budget left per level" in state["operatorText"]

        feed = _get_json(url + "api/releases?after=5")
        assert [r["slot"] for r in feed["releases"]] == list(range(6, SLOTS))
        assert feed["stream"] == "demo" and feed["mechanism"] == "pbd" and feed["count"] == SLOTS
        published = [r for r in feed["releases"] if r["status"] == "published"]
        assert all(lo <= h <= hi for r in published
                   for lo, h, hi in zip(r["lower"], r["histogram"], r["upper"], strict=True))
        operator = _get_json(url + "api/operator")
        assert operator["last_released_slot"] == SLOTS - 1 and operator["targets"][0]["up"]
        assert {(lag["topic"], lag["partition"]) for lag in operator["lag"]} == \
            {("pwevent.reports", "0"), ("pwevent.reports", "1")} and operator["budget_left"]
        assert set(operator["dead_letters"]) >= {"late", "unregistered_user"}

        _check_render(browser.screenshot(), state, tmp_path / "dashboard.png")
        assert _interrupt(demo) == 0, err.read_text()[-3000:]
    finally:
        _stop_demo(demo)
    summary = json.loads(out.read_text().strip().splitlines()[-1])
    assert summary["slots_released"] == summary["slots_expected"] == SLOTS
    gone = subprocess.run(["ps", "-o", "pid=", "-p", ",".join(map(str, started))],
                          capture_output=True, text=True).stdout.split()
    assert not gone, f"still running: {gone}"  # the demo stopped its broker and its worker


def test_dashboard_command_without_metrics(browser: Browser, tmp_path: Path) -> None:
    cfg = config("dash")
    users = [f"u{i}" for i in range(60)]
    reqs = requirement_records(users, [4] * len(users), [2.0] * len(users))
    batches = [slot_reports(users, t, cfg.d) for t in range(5)]
    releases = in_process(cfg, reqs, batches, 5 * cfg.slot_ms)
    with EmbeddedBroker() as broker:
        topics = setup_topics(broker.bootstrap, cfg)
        produce(broker.bootstrap, topics.releases, 1,
                [(f"s/{json.loads(v)['slot']}".encode(), v) for v in releases])
        log = tmp_path / "dashboard.out"
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "dashboard", "--broker", broker.bootstrap,
             "--prefix", cfg.prefix, "--stream", "s", "--port", "0"],
            stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
            preexec_fn=_sigint_as_in_a_terminal)
        try:
            line = _wait_for_line(log, "pwevent dashboard: serving", proc, 30)
            url = line.split(" at ", 1)[1].split()[0]
            browser.open(url)
            state = browser.wait(PAGE_STATE, lambda s: s["count"] >= 5 and s["operator"], 30)
            assert state["count"] == 5 and state["last"] == "4", state
            assert state["operator"] == "no"
            assert "Metrics are not configured" in state["operatorText"]
            assert _get_json(url + "api/operator")["configured"] is False
            assert _interrupt(proc) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

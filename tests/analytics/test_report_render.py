"""The report page in a real browser: headless Chromium loads it and every image.

tests/analytics/test_report.py checks the figures' axes; this checks what a reader gets:
the page parses, each ``<img>`` loads as a picture of the size drawn, and the
screenshot shows the plots. Chromium is Debian's ``chromium`` package
(``/usr/bin/chromium`` or on PATH); .ci/run installs it and sets
TIERSTORE_REQUIRE_CHROMIUM=1, so in CI a missing browser fails instead of
skipping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import DIM
from test_lifecycle_metrics import D0, POLICY, script

from tierstore import ManualClock, TierStore
from tierstore.analytics.report import DPI, PLOTS, WIDTH_IN, write_report

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

# Runs at the load event (every image loaded or failed) and writes what each
# <img> became into the DOM, which --dump-dom then prints.
PROBE = """<script>
window.addEventListener("load", function () {
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(Array.from(document.images).map(function (img) {
    return {src: img.getAttribute("src"), ok: img.complete && img.naturalWidth > 0,
            width: img.naturalWidth, height: img.naturalHeight};
  }));
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found is None:
        message = "chromium not found (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("TIERSTORE_REQUIRE_CHROMIUM"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def run_chromium(*args: str) -> str:
    profile = tempfile.mkdtemp(prefix="tierstore-chromium-")
    try:
        done = subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=90
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    # stderr always holds dbus noise in a container; it matters only on failure
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    """The report of the scripted lifecycle (every plot has data)."""
    root = tmp_path_factory.mktemp("render")
    clock = ManualClock(D0)
    with TierStore.open(root / "store", dim=DIM, policy=POLICY, clock=clock) as store:
        script(store, clock, np.random.default_rng(5))
        return write_report(store, root / "report").parent


def test_every_image_loads_in_chromium(report_dir):
    page = (report_dir / "index.html").read_text()
    assert "</body>" in page
    # The probe goes into a copy beside the page (same folder, so the same relative image
    # paths); one broken image is added to show that the probe does report failures.
    probe = report_dir / "probe.html"
    probe.write_text(page.replace("</body>", '<img src="missing.png" alt="control">' + PROBE + "</body>"))
    dom = run_chromium("--dump-dom", probe.as_uri())
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    images = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert [i["src"] for i in images] == [f"{name}.png" for name in PLOTS] + ["missing.png"]
    control = images.pop()
    assert not control["ok"]
    for img in images:
        assert img["ok"], img
        assert img["width"] == WIDTH_IN * DPI and img["height"] > 200, img
    assert "<h2>Memories now</h2>" in dom and "tierstore lifecycle report" in dom


def test_the_screenshot_shows_the_plots(report_dir, tmp_path):
    from matplotlib.image import imread

    shot = tmp_path / "page.png"
    run_chromium(f"--screenshot={shot}", "--window-size=1400,3000", (report_dir / "index.html").as_uri())
    pixels = imread(shot)[:, :, :3]  # floats in [0, 1]
    assert pixels.shape[:2] == (3000, 1400)
    assert (pixels.min(axis=2) < 0.9).mean() > 0.02, "the page is (almost) blank"
    # Coloured pixels come only from the plots (the page's text and tables are grey on white):
    # the hot tier's red (#d62728) and the cold tier's blue (#1f77b4) both show.
    for colour in ((0xD6, 0x27, 0x28), (0x1F, 0x77, 0xB4)):
        near = np.abs(pixels - np.array(colour) / 255).max(axis=2) < 0.06
        assert near.sum() > 200, colour

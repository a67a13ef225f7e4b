"""`otel-budget report --html`: a self-contained page with three plots, rendered by a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
from matplotlib import image

import otel_budget
from otel_budget import cli

from ._runs import record_runs

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium is needed for this test: `make services` installs it"
    return found


def _screenshot(page: Path, out: Path, profile: Path) -> np.ndarray:
    subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={out}", "--window-size=1100,2600",
         page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    return np.asarray(image.imread(out))


def test_html_report_is_self_contained_and_renders_its_plots_in_chromium(tmp_path, capsys):
    spans = tmp_path / "runs.jsonl"
    roomy = otel_budget.Budget(max_steps=25, max_usd=0.80)
    record_runs(spans, [(False, roomy), (True, roomy), (False, roomy),
                        (True, otel_budget.Budget(max_steps=25, max_usd=0.80, max_repeats=None, max_stalls=None))])
    page = tmp_path / "report.html"
    assert cli.main(["report", str(spans), "--html", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    # Self-contained: no scripts, no external styles or images; the three plots are inline PNGs.
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)
    assert html.count('src="data:image/png;base64,') == 3
    for title in ("Context growth", "Steps", "Cost"):
        assert f'alt="{title}"' in html
    assert "repeat" in html and "steps" in html and "done" in html  # the stop reasons in the table

    shot = _screenshot(page, tmp_path / "shot.png", tmp_path / "profile")
    height, width = shot.shape[:2]
    assert (height, width) == (2600, 1100)
    rgb = shot[..., :3]
    # Not blank: many distinct colours (plot lines, bars, text), and plenty of non-white pixels.
    colours = np.unique((rgb * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 200, len(colours)
    non_white = (rgb < 0.95).any(axis=-1).mean()
    assert non_white > 0.05, non_white
    # The three plots stack down the page: each third of the top 2000 px holds drawing.
    for band in range(3):
        rows = rgb[band * 650 + 150 : band * 650 + 600]
        assert (rows < 0.95).any(axis=-1).mean() > 0.02, band


def test_report_html_without_runs_still_writes_a_page(tmp_path, capsys):
    spans = tmp_path / "no-runs.jsonl"
    spans.write_text('{"resourceSpans": []}\n')  # a readable export that holds no run
    page = tmp_path / "report.html"
    assert cli.main(["report", str(spans), "--html", str(page)]) == 0
    assert "0 finished runs" in page.read_text()
    assert "No finished runs found" in capsys.readouterr().out

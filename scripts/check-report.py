#!/usr/bin/env python3
"""Opens a sweep's report.html in headless Chromium and checks what the
browser built: every chart (a `figure.chart`, a Vega-Lite spec) rendered
and drew data marks (`data-marks` > 0, counted by the page's own script
from Vega's scenegraph), nothing logged as a warning or an error by the
page (`#report-errors`, which the page fills) or thrown uncaught (the
browser's console on stderr), the named figures present; then a
screenshot that is not blank.

    python3 scripts/check-report.py REPORT.html [IDS] [SHOT.png]

IDS: figure or table ids that must be present, comma-separated ("-": none).
"""
import html
import os
import re
import subprocess
import sys
import tempfile

MAX_SHOT = int(os.environ.get("MAX_SHOT", "2600"))
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=60000"]


def main() -> None:
    path = os.path.abspath(sys.argv[1])
    ids = [i for i in (sys.argv[2] if len(sys.argv) > 2 else "-").split(",") if i and i != "-"]
    shot = sys.argv[3] if len(sys.argv) > 3 else os.path.join(tempfile.mkdtemp(), "report.png")
    url = "file://" + path
    fail = lambda why: sys.exit(f"{path}: {why}")
    # Headless Chromium dumps the DOM when its virtual time budget is spent;
    # once in a few dozen loads on a busy 2-core machine it dumped before the
    # page's script had run at all (no `data-rendered`, nothing logged):
    # that load is tried again, at most twice, and said so.
    for attempt in range(3):
        run = subprocess.run(CHROMIUM + ["--enable-logging=stderr", "--v=0", "--dump-dom", url],
                             capture_output=True, text=True, timeout=300)
        dom = run.stdout
        if re.search(r'<body[^>]*data-rendered=', dom):
            break
        print(f"note: {path}: the DOM was dumped before the renderer finished (attempt {attempt + 1})", file=sys.stderr)
    uncaught = [l for l in run.stderr.splitlines() if "CONSOLE" in l and "Uncaught" in l]
    if uncaught:
        fail(f"uncaught error in the browser: {uncaught[0]}")
    rendered = re.search(r'<body[^>]*data-rendered="(\d+)"', dom)
    if not rendered:
        fail("the page's renderer did not finish (no body[data-rendered])")
    errors = re.search(r'<pre id="report-errors"[^>]*>(.*?)</pre>', dom, re.S)
    if errors is None:
        fail("no #report-errors element")
    if errors.group(1).strip():
        fail("the page logged: " + html.unescape(errors.group(1).strip()).replace("\n", " | ")[:2000])
    charts = re.findall(r'<figure class="chart" id="([^"]+)"([^>]*)>', dom)
    if len(charts) != int(rendered.group(1)):
        fail(f"{rendered.group(1)} charts rendered, {len(charts)} in the DOM")
    marks = {}
    for chart_id, attrs in charts:
        m = re.search(r'data-marks="(\d+)"', attrs)
        if not m or int(m.group(1)) == 0:
            fail(f"chart {chart_id} drew no marks")
        marks[chart_id] = int(m.group(1))
    missing = [i for i in ids if f'id="{i}"' not in dom]
    if missing:
        fail(f"the browser's DOM lacks {missing}")
    if not charts and not ids:
        fail("no chart and nothing asked for")
    # The window: the page's height (the renderer writes it), at most
    # MAX_SHOT px: the top of a long page.
    page = re.search(r'<body[^>]*data-height="(\d+)"', dom)
    height = max(800, min(MAX_SHOT, int(page.group(1)) if page else MAX_SHOT))
    subprocess.run(CHROMIUM + [f"--window-size=1280,{height}", f"--screenshot={shot}", url],
                   capture_output=True, timeout=300)
    size = os.path.getsize(shot) if os.path.exists(shot) else 0
    if size < 10_000:
        fail(f"the screenshot is missing or blank ({size} bytes)")
    drawn = ", ".join(f"{k} {v}" for k, v in marks.items())
    print(f"ok  {path}: {len(charts)} charts drew marks ({drawn}); screenshot {size} bytes")


if __name__ == "__main__":
    main()

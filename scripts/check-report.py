#!/usr/bin/env python3
"""Opens a sweep's report.html in headless Chromium and checks what the
browser built: the named figures present, each chart an SVG with drawn
series, and a screenshot that is not blank.

    python3 scripts/check-report.py OUTPUT_DIR/report.html ttft,itl,e2e,throughput,runs [SHOT.png]
"""
import os
import subprocess
import sys
import tempfile

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def main() -> None:
    path, ids = os.path.abspath(sys.argv[1]), sys.argv[2].split(",")
    shot = sys.argv[3] if len(sys.argv) > 3 else os.path.join(tempfile.mkdtemp(), "report.png")
    url = "file://" + path
    dom = subprocess.run(CHROMIUM + ["--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    missing = [i for i in ids if f'id="{i}"' not in dom]
    if missing:
        sys.exit(f"{path}: the browser's DOM lacks {missing}")
    charts = dom.count("<svg")
    lines = dom.count("<polyline") + dom.count('class="bar"') + dom.count("<td")
    if charts == 0 and "calibration" not in ids:
        sys.exit(f"{path}: no SVG chart in the DOM")
    if lines == 0:
        sys.exit(f"{path}: nothing drawn")
    subprocess.run(CHROMIUM + ["--window-size=1100,1400", f"--screenshot={shot}", url], capture_output=True, timeout=180)
    size = os.path.getsize(shot) if os.path.exists(shot) else 0
    if size < 10_000:
        sys.exit(f"{path}: the screenshot is missing or blank ({size} bytes)")
    print(f"ok  {path}: {len(ids)} figures, {charts} SVG charts, {lines} drawn elements; screenshot {size} bytes")


if __name__ == "__main__":
    main()

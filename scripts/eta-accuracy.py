#!/usr/bin/env python3
"""Measures the sweep's ETA against the time it actually took (README, Performance, Progress):

    python3 scripts/eta-accuracy.py target/release/blis-sweep sweeps/eta-mixed.yaml

Runs the plan with `--force` and stderr piped (so the sweep prints a plain progress line every
5 s: `progress: P % of the work, elapsed E s, ETA ... (S s)`), stamps each line as it arrives, and
takes the sweep's end as the moment its last run is reported. At 25, 50 and 75 % of the runs'
elapsed time it prints the ETA shown by the nearest progress line against the time actually left
then, and the error; beside it, the ETA a count of runs gives (runs left at the rate of runs
done, as the bar showed before). Exit status 1 when one of them is off by more than 30 %.
"""
import re
import subprocess
import sys
import time

blis, plan = sys.argv[1], sys.argv[2]
jobs = sys.argv[3] if len(sys.argv) > 3 else "2"
start = time.monotonic()
proc = subprocess.Popen([blis, plan, "--force", "--no-report", "-j", jobs], stderr=subprocess.PIPE, text=True)
lines = []  # (seconds since start, line)
for line in proc.stderr:
    lines.append((time.monotonic() - start, line.rstrip("\n")))
proc.wait()
if proc.returncode != 0:
    sys.exit(f"the sweep failed ({proc.returncode}): {lines[-1][1] if lines else ''}")
runs = [t for t, l in lines if re.match(r"\[\d+/\d+\] ", l)]
first = next(t for t, l in lines if " to run: " in l)
end = runs[-1]
progress = []
for t, l in lines:
    m = re.match(r"progress: ([\d.]+) % of the work, elapsed ([\d.]+) s, ETA .* \(([\d.]+) s\)$", l)
    if m:
        progress.append((t, float(m.group(1)), float(m.group(3))))
print(next(l for _, l in lines if " to run: " in l))
print(f"runs took {end - first:.1f} s ({len(runs)} runs, {len(progress)} progress lines)")
print("| elapsed | work done | ETA shown | actually left | error | runs done | ETA from run counts | its error |")
print("|---|---|---|---|---|---|---|---|")
worst = 0.0
for share in (0.25, 0.50, 0.75):
    at = first + share * (end - first)
    t, work, eta = min(progress, key=lambda p: abs(p[0] - at))
    left = end - t
    error = (eta - left) / left
    worst = max(worst, abs(error))
    # What indicatif's ETA (runs left at the rate of runs done) would have shown then.
    done = sum(1 for r in runs if r <= t)
    by_runs = (t - first) * (len(runs) - done) / done if done else float("nan")
    print(
        f"| {t - first:.1f} s ({share:.0%}) | {work:.1f} % | {eta:.1f} s | {left:.1f} s | {error:+.0%} "
        f"| {done}/{len(runs)} | {by_runs:.1f} s | {(by_runs - left) / left:+.0%} |"
    )
sys.exit(1 if worst > 0.30 else 0)

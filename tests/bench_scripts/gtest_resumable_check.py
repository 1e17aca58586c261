#!/usr/bin/env python3
"""bench/gtest_resumable.py on a real GoogleTest program (crash_probe_main.cc) whose tests pass,
fail, skip and crash: every test is accounted for once, the crashed ones as crashed, and the tests
after each crash still run.

Usage: gtest_resumable_check.py RESUMABLE_PY PROBE_PROGRAM"""
import json
import os
import subprocess
import sys
import tempfile

resumable, probe = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "probe")
    run = subprocess.run([sys.executable, resumable, "--prefix", prefix, "--seconds", "60", "--",
                          probe, "--gtest_filter=*-Unrelated.*"],
                         capture_output=True, text=True)
    print(run.stdout[-3000:])
    with open(prefix + ".outcomes.json") as f:
        got = json.load(f)
    parts = sorted(p for p in os.listdir(tmp) if ".part" in p)

expected = {
    "passed": {"Probe.PassesFirst", "Values/ProbeParam.CrashesForOne/0",
               "Values/ProbeParam.CrashesForOne/2", "ProbeLast.Passes"},
    "failed": {"Probe.FailsAfterTheCrash"},
    "skipped": {"Probe.SkipsAfterTheCrash"},
    "crashed": {"Probe.Crashes", "Values/ProbeParam.CrashesForOne/1"},
}
problems = []
for key, names in expected.items():
    if sorted(got.get(key, [])) != sorted(names):
        problems.append(f"{key}: got {sorted(got.get(key, []))}, expected {sorted(names)}")
if got.get("runs") != 3:
    problems.append(f"runs: got {got.get('runs')}, expected 3 (two crashes, then the rest)")
if run.returncode != 1:
    problems.append(f"exit status {run.returncode}, expected 1 (a test crashed)")
if parts != ["probe.part2.json"]:
    problems.append(f"GoogleTest JSON files {parts}: expected only the last, uncrashed run's")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)

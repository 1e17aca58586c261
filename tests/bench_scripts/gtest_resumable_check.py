#!/usr/bin/env python3
"""bench/gtest_resumable.py on a real GoogleTest program (crash_probe_main.cc) whose tests pass,
fail, skip and crash: every test is accounted for once, the crashed ones as crashed, and the tests
after each crash still run. Then the same run with its output read by a reader that stops after
the first line (as `| head -1` does): the outcomes must be the same.

Usage: gtest_resumable_check.py RESUMABLE_PY PROBE_PROGRAM"""
import json
import os
import subprocess
import sys
import tempfile

resumable, probe = sys.argv[1], sys.argv[2]
command = [sys.executable, resumable, "--prefix", "PREFIX", "--seconds", "60", "--", probe,
           "--gtest_filter=*-Unrelated.*"]
with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "probe")
    run = subprocess.run([prefix if a == "PREFIX" else a for a in command], capture_output=True,
                         text=True)
    print(run.stdout[-3000:])
    with open(prefix + ".outcomes.json") as f:
        got = json.load(f)
    parts = sorted(p for p in os.listdir(tmp) if ".part" in p)
with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "probe")
    # The reader takes one line and closes the pipe while the program still has most to print.
    proc = subprocess.Popen([prefix if a == "PREFIX" else a for a in command],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.readline()
    proc.stdout.close()
    early_reader_status = proc.wait()
    try:
        with open(prefix + ".outcomes.json") as f:
            got_early_reader = json.load(f)
    except FileNotFoundError:
        got_early_reader = None

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
if got_early_reader != got:
    problems.append(f"with a reader that stopped after one line: outcomes {got_early_reader}, "
                    f"expected those of the run read to the end")
if early_reader_status != run.returncode:
    problems.append(f"with a reader that stopped after one line: exit status "
                    f"{early_reader_status}, expected {run.returncode}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)

#!/usr/bin/env python3
"""Runs a GoogleTest program so that one crashing test cannot lose the others' results.

The device check has one call on a lent GPU. A test that kills its process (a segfault, an abort,
a CUDA error that ends the program) would otherwise take every later test of that program with
it, and GoogleTest writes its JSON only at the end. Here the program runs with --gtest_output;
when it dies by a signal, the test it was running is recorded as crashed and the program runs
again on the tests it had not finished (a fresh process, so a broken CUDA context does not carry
over), until every test has run or the time is spent.

Writes PREFIX.partN.json (GoogleTest's JSON of each run that finished, with the tests' recorded
properties) and PREFIX.outcomes.json: the names "passed", "failed", "skipped", "crashed" and
"timed_out" (running when the time ran out), from the output of every run, including those that
crashed before writing their JSON, and "runs". Prints the program's output, for as long as
something reads it: a reader that goes away early (`| head`) stops the printing, not the tests or
the outcomes. Exit status: 1 when a test crashed, 124 when the time ran out, else the last run's
(0: all passed).

Usage: gtest_resumable.py --prefix OUT/test_cuda --seconds 110 -- PROGRAM [--gtest_filter=F] ...
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

RUN = re.compile(r"^\[ RUN      \] (\S+)")
# "[  FAILED  ] Suite.Name (3 ms)", or for a parameterised test "[  FAILED  ] P/Suite.Name/0, where
# GetParam() = ... (3 ms)"; not the closing summary ("[  SKIPPED ] 7 tests, listed below:" and the
# bare names under it).
ENDED = re.compile(r"^\[ {7}(?P<passed>OK) \] (?P<a>\S+)|"
                   r"^\[  (?P<failed>FAILED)  \] (?P<b>[^\s,]+)(?:,| \()|"
                   r"^\[  (?P<skipped>SKIPPED) \] (?P<c>[^\s,]+)(?:,| \()")


class Echo:
    """Writes to stdout until its reader goes away; after that, nothing (stdout is pointed at
    /dev/null so that the interpreter's own flush at exit does not fail either)."""

    def __init__(self):
        self.reader_gone = False

    def __call__(self, text):
        if self.reader_gone:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            self.reader_gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def with_exclusions(gtest_filter, excluded):
    """The filter with `excluded` added to its negative patterns."""
    if not excluded:
        return gtest_filter
    positive, _, negative = gtest_filter.partition("-")
    negatives = [n for n in negative.split(":") if n] + sorted(excluded)
    return (positive or "*") + "-" + ":".join(negatives)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no program given")
    # The program may come behind a launcher (env VAR=... PROGRAM ...): GoogleTest's own flags go
    # last, where only the program reads them.
    base_filter = "*"
    rest = []
    for a in command:
        if a.startswith("--gtest_filter="):
            base_filter = a.split("=", 1)[1]
        elif not a.startswith("--gtest_output="):
            rest.append(a)

    echo = Echo()
    deadline = time.monotonic() + args.seconds
    ended, runs, status = set(), 0, 0
    outcomes = {"passed": [], "failed": [], "skipped": [], "crashed": [], "timed_out": []}
    crashed = outcomes["crashed"]
    while True:
        left = deadline - time.monotonic()
        if left <= 5:
            echo(f"gtest_resumable: time spent after {runs} run(s)\n")
            status = status or 124
            break
        json_path = f"{args.prefix}.part{runs}.json"
        argv = rest + [f"--gtest_filter={with_exclusions(base_filter, ended)}",
                       f"--gtest_output=json:{json_path}"]
        runs += 1
        running = None
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        timed_out = threading.Event()

        def stop(proc=proc, timed_out=timed_out):  # a test that hangs silently
            timed_out.set()
            proc.kill()

        timer = threading.Timer(left, stop)
        timer.start()
        try:
            for line in proc.stdout:
                echo(line)
                if m := RUN.match(line):
                    running = m.group(1)
                elif m := ENDED.match(line):
                    name = m.group("a") or m.group("b") or m.group("c")
                    outcome = next(k for k in ("passed", "failed", "skipped") if m.group(k))
                    if name not in ended:
                        outcomes[outcome].append(name)
                    ended.add(name)
                    running = None
            status = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if timed_out.is_set():
            echo(f"gtest_resumable: time spent during run {runs} ({running or 'between tests'})\n")
            if running is not None:
                outcomes["timed_out"].append(running)
            status = 124
            break
        if status < 0 or status >= 128:  # ended by a signal (or by a handler re-raising one)
            if running is None:
                echo(f"gtest_resumable: the program ended by signal (status {status}) outside "
                     "any test\n")
                break
            echo(f"gtest_resumable: {running} crashed the program (status {status}); running "
                 "the tests it had not reached in a new process\n")
            crashed.append(running)
            ended.add(running)
            continue
        break
    with open(f"{args.prefix}.outcomes.json", "w") as f:
        json.dump(dict(outcomes, runs=runs), f, indent=2)
    if crashed:
        echo(f"gtest_resumable: crashed: {', '.join(crashed)}\n")
        return 1
    return 0 if status == 0 else (status if 0 < status < 256 else 1)


if __name__ == "__main__":
    sys.exit(main())

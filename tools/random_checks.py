"""What the tools/check_*_random.py comparisons share: their command line, and how they start
the reference (torchrun) and tandem (mpirun) on several data-parallel ranks."""
import argparse
import socket
import subprocess
import sys


def argument_parser(doc, cases):
    """TANDEM_BINARY, --seed (draws the cases) and --cases, described by the tool's docstring."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("tandem", help="the tandem binary")
    ap.add_argument("--seed", type=int, default=1, help="draws the cases")
    ap.add_argument("--cases", type=int, default=cases)
    return ap


def mpirun(world):
    """The launcher of tandem on `world` ranks (none for one): OpenMPI, one thread per rank."""
    return [] if world == 1 else ["mpirun", "--oversubscribe", "--allow-run-as-root", "-x",
                                  "OMP_NUM_THREADS=1", "-np", str(world)]


def torchrun(world, script, args, timeout=None):
    """`script args` on `world` ranks under torchrun (a free port for its rendezvous): the
    finished process (output captured), or None when it ran past `timeout` seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run",
                               f"--nproc-per-node={world}", f"--master-port={port}", script,
                               *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def run_cases(tool, args, check_one, unit="cases"):
    """Runs check_one(index) -> (True | False | None for a case the reference refuses, a line)
    for every case, prints each and a summary; the exit status: 0 only when none differs and
    at least one was checked (a run the reference refused entirely checked nothing)."""
    failed = refused = 0
    for index in range(args.cases):
        ok, what = check_one(index)
        refused += ok is None
        failed += ok is False
        verdict = "refused by the reference" if ok is None else "agrees" if ok else "DIFFERS"
        print(f"case {index}: {verdict}: {what}", flush=True)
    none_checked = refused == args.cases
    summary = "none checked" if none_checked else f"{failed} differ" if failed else "all agree"
    print(f"{tool}: seed {args.seed}, {args.cases} {unit}"
          + (f" ({refused} refused by the reference)" if refused else "") + f", {summary}")
    return 1 if failed or none_checked else 0

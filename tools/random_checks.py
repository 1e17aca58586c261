"""What the tools/check_*_random.py comparisons share: their command line."""
import argparse


def argument_parser(doc, cases):
    """TANDEM_BINARY, --seed (draws the cases) and --cases, described by the tool's docstring."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("tandem", help="the tandem binary")
    ap.add_argument("--seed", type=int, default=1, help="draws the cases")
    ap.add_argument("--cases", type=int, default=cases)
    return ap


def run_cases(tool, args, check_one, unit="cases"):
    """Runs check_one(index) -> (True | False | None for a case the reference refuses, a line)
    for every case, prints each and a summary; the exit status: 0 only when none differs."""
    failed = refused = 0
    for index in range(args.cases):
        ok, what = check_one(index)
        refused += ok is None
        failed += ok is False
        verdict = "refused by the reference" if ok is None else "agrees" if ok else "DIFFERS"
        print(f"case {index}: {verdict}: {what}", flush=True)
    print(f"{tool}: seed {args.seed}, {args.cases} {unit}"
          + (f" ({refused} refused by the reference)" if refused else "")
          + f", {'all agree' if not failed else f'{failed} differ'}")
    return 1 if failed else 0

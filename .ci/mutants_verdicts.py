#!/usr/bin/env python3
"""The library's mutation score, summed over the slices run (`.ci/mutants.sh --sample K/N`).

A slice is dealt from the list of mutants as it stood at its run, and exclusions added since
move the rest from slice to slice, so the whole library's figure is summed by mutant, not by
slice: each slice's verdicts are kept by name in `.ci/mutants/slices/`, the latest verdict of
each mutant counts, and what no slice has run is listed, for a last pass.

    mutants_verdicts.py record OUT COMMIT   a `--sample` run's output directory (its groups'
                                            `first-*` and its `full` second pass) as one line
                                            a mutant: verdict, key, commit (tab-separated)
    mutants_verdicts.py tally LIST FILES... the current list (`cargo mutants --list --json`,
                                            the configuration applied) against the verdicts in
                                            FILES: the score of the mutants run, and the count
                                            of those no slice has run yet. Of two verdicts on
                                            one mutant, the one at the later commit counts
                                            (`by-hand.tsv` holds survivors judged again by
                                            hand once their test was written)

A mutant's key is its name without the line and column, which move with every edit above
it, and with its place in its function instead (line offset from the function's first line,
and column): `src/clock/mod.rs: replace + with * in Clock::div_ceil @7:11`. It holds while
the function's lines above the mutant stay; a function edited since a slice ran shows its
changed mutants as not run.

Verdicts: `caught` (a test failed: the first pass's targets, or every test in the second),
`hang` (the timeout: a test never finished, which CI would see as a failure), `unviable` (it
does not build), `survived` (every test passed), `unjudged` (the first pass's survivor that
the second pass did not reach: the run was stopped).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

SUMMARY = {"CaughtMutant": "caught", "Timeout": "hang", "Unviable": "unviable", "MissedMutant": "survived"}


def key(mutant):
    """A mutant's key (see the module docs), from `--list --json` or an outcome's scenario."""
    name = re.sub(r"^([^:]+):\d+:\d+:", r"\1:", mutant["name"])
    function = mutant.get("function") or {}
    first = ((function.get("span") or {}).get("start") or {}).get("line", 0)
    start = mutant["span"]["start"]
    return f"{name} @{start['line'] - first}:{start['column']}"


def outcomes(path):
    """(key, verdict) of each mutant a cargo-mutants output directory tested."""
    data = json.loads((path / "mutants.out" / "outcomes.json").read_text())
    for outcome in data["outcomes"]:
        scenario = outcome["scenario"]
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue  # the unmutated baseline
        yield key(scenario["Mutant"]), SUMMARY.get(outcome["summary"], outcome["summary"])


def record(out, commit):
    verdicts = {}
    for first in sorted(out.glob("first-*")):
        if (first / "mutants.out" / "outcomes.json").exists():
            verdicts.update(outcomes(first))
    # The second pass judges the first's survivors; it may test others besides (field
    # deletions that `--re` lets through, cargo-mutants#632), which are not counted here.
    judged = dict(outcomes(out / "full")) if (out / "full" / "mutants.out" / "outcomes.json").exists() else {}
    for k, v in verdicts.items():
        if v == "survived":
            verdicts[k] = judged.get(k, "unjudged")
    for k in sorted(verdicts):
        print(f"{verdicts[k]}\t{k}\t{commit}")


def is_ancestor(older, newer):
    """Whether commit `older` is `newer` or one of its ancestors."""
    return subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], check=False).returncode == 0


def tally(listing, files):
    current = {key(m) for m in json.loads(Path(listing).read_text())}
    latest = {}
    for f in files:
        for line in Path(f).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                verdict, k, commit = line.split("\t")
                # The verdict at the later tree wins (a survivor judged again once its test
                # is written); at one tree, the later file.
                if k not in latest or is_ancestor(latest[k][1], commit):
                    latest[k] = (verdict, commit)
    latest = {k: v for k, (v, _) in latest.items()}
    run = {k: v for k, v in latest.items() if k in current}
    count = {v: sum(1 for x in run.values() if x == v) for v in ("caught", "hang", "unviable", "survived", "unjudged")}
    viable = count["caught"] + count["hang"] + count["survived"]
    caught = count["caught"] + count["hang"]
    print(f"{len(current)} mutants in the library now; {len(run)} of them run by the slices kept here")
    print(
        f"  caught {count['caught']}, by a hang {count['hang']}, unviable {count['unviable']}, "
        f"survived {count['survived']}, unjudged {count['unjudged']}"
    )
    if viable:
        print(f"  score: {caught} of {viable} viable caught, {100 * caught / viable:.1f} %, each at its latest verdict")
    print(f"  not run yet: {len(current) - len(run)}; verdicts no longer in the list (code changed or excluded): {len(latest) - len(run)}")
    for k, v in sorted(run.items()):
        if v in ("survived", "unjudged"):
            print(f"  {v}: {k}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(Path(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "tally":
        tally(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)

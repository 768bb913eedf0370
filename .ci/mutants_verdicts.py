#!/usr/bin/env python3
"""The library's mutation score, summed over the slices run (`.ci/mutants.sh --sample K/N`).

A slice is dealt from the list of mutants as it stood at its run, and exclusions added since
move the rest from slice to slice, so the whole library's figure is summed by mutant, not by
slice: each slice's verdicts are kept by name in `.ci/mutants/slices/`, the latest verdict of
each mutant counts, and what no slice has run is listed, for a last pass.

    mutants_verdicts.py record OUT COMMIT   a `--sample` run's output directory (its groups'
                                            `first-*` and its `full` second pass) as one line
                                            a mutant: verdict, key, commit (tab-separated)
    mutants_verdicts.py rest LIST K N FILES...
                                            the names (as `--list` shows them) of the mutants
                                            of LIST that FILES hold no verdict for (or only
                                            `unjudged`), dealt round-robin into N slices in
                                            the list's order: slice K (`--rest K/N`, the last
                                            passes over what the `--sample` slices missed)
    mutants_verdicts.py tally LIST FILES... the current list (`cargo mutants --list --json`,
                                            the configuration applied) against the verdicts in
                                            FILES: the score of the mutants run, and the count
                                            of those no slice has run yet. Of two verdicts on
                                            one mutant, the one at the later commit counts
                                            (`by-hand.tsv` holds survivors judged again by
                                            hand once their test was written)

A mutant's key is its name without the line and column, which move with every edit above
it, and with its place in its function instead (line offset from the function's first line,
and column): `src/clock/mod.rs: replace + with * in Clock::div_ceil @7:11`. A mutant whose
line moved within its function shows as not run; an edit that leaves its place alone keeps
its verdict, whatever else changed (the verdict is of the tree at its commit: run the slice
again after a change to be sure of it). Two functions of one name in one file (a `cfg(loom)`
twin) can give two mutants one key: they are counted once, and the count says how many.

The mutants listed and the verdicts read are both taken less `.cargo/mutants.toml`'s
`exclude_re`, which cargo-mutants 27.1 does not apply to struct-field deletions (#632).

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


def outcomes(path, patterns):
    """(key, verdict) of each mutant a cargo-mutants output directory tested, less the
    excluded."""
    data = json.loads((path / "mutants.out" / "outcomes.json").read_text())
    for outcome in data["outcomes"]:
        scenario = outcome["scenario"]
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue  # the unmutated baseline
        if is_excluded(scenario["Mutant"]["name"], patterns):
            continue
        yield key(scenario["Mutant"]), SUMMARY.get(outcome["summary"], outcome["summary"])


def record(out, commit, patterns=None):
    patterns = excluded() if patterns is None else patterns
    verdicts = {}
    for first in sorted(out.glob("first-*")):
        if (first / "mutants.out" / "outcomes.json").exists():
            verdicts.update(outcomes(first, patterns))
    # The second pass judges the first's survivors; it may test others besides (field
    # deletions that `--re` lets through, cargo-mutants#632), which are not counted here.
    judged = dict(outcomes(out / "full", patterns)) if (out / "full" / "mutants.out" / "outcomes.json").exists() else {}
    for k, v in verdicts.items():
        if v == "survived":
            verdicts[k] = judged.get(k, "unjudged")
    for k in sorted(verdicts):
        print(f"{verdicts[k]}\t{k}\t{commit}")


def is_ancestor(older, newer):
    """Whether commit `older` is `newer` or one of its ancestors. A commit this clone does not
    have (a shallow clone, a rewritten history) is an error: the order of two verdicts would be
    a guess."""
    result = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], check=False)
    if result.returncode not in (0, 1):
        sys.exit(f"error: cannot order commits {older} and {newer} (git merge-base: {result.returncode})")
    return result.returncode == 0


def excluded():
    """`.cargo/mutants.toml`'s `exclude_re`, compiled."""
    import tomllib

    config = tomllib.loads(Path(".cargo/mutants.toml").read_text())
    return [re.compile(p) for p in config.get("exclude_re", [])]


def is_excluded(name, patterns):
    return any(p.search(name) for p in patterns)


def latest_verdicts(files):
    """Each key's verdict at the latest commit that judged it, over the verdict files."""
    latest = {}
    for f in files:
        for line in Path(f).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                verdict, k, commit = line.split("\t")
                # The verdict at the later tree wins (a survivor judged again once its test
                # is written); at one tree, the later file.
                if k not in latest or is_ancestor(latest[k][1], commit):
                    latest[k] = (verdict, commit)
    return {k: v for k, (v, _) in latest.items()}


def rest(listing, k, n, files, patterns=None):
    patterns = excluded() if patterns is None else patterns
    if not 1 <= k <= n:
        sys.exit(f"error: slice {k} of {n}")
    mutants = [m for m in json.loads(Path(listing).read_text()) if not is_excluded(m["name"], patterns)]
    latest = latest_verdicts(files)
    left = [m["name"] for m in mutants if latest.get(key(m), "unjudged") == "unjudged"]
    for name in left[k - 1 :: n]:
        print(name)


def tally(listing, files, patterns=None):
    patterns = excluded() if patterns is None else patterns
    mutants = [m for m in json.loads(Path(listing).read_text()) if not is_excluded(m["name"], patterns)]
    current = {key(m) for m in mutants}
    latest = latest_verdicts(files)
    run = {k: v for k, v in latest.items() if k in current}
    count = {v: sum(1 for x in run.values() if x == v) for v in ("caught", "hang", "unviable", "survived", "unjudged")}
    viable = count["caught"] + count["hang"] + count["survived"]
    caught = count["caught"] + count["hang"]
    shared = len(mutants) - len(current)
    print(
        f"{len(mutants)} mutants in the library now ({shared} sharing a key with another, counted once: "
        f"{len(current)} keys); {len(run)} of them run by the slices kept here"
    )
    print(
        f"  caught {count['caught']}, by a hang {count['hang']}, unviable {count['unviable']}, "
        f"survived {count['survived']}, unjudged {count['unjudged']}"
    )
    if viable:
        print(
            f"  score: {caught} of {viable} viable caught, {100 * caught / viable:.1f} %, each at its latest verdict "
            "(the unjudged not counted)"
        )
    print(f"  not run yet: {len(current) - len(run)}; verdicts no longer in the list (code changed or excluded): {len(latest) - len(run)}")
    for k, v in sorted(run.items()):
        if v in ("survived", "unjudged"):
            print(f"  {v}: {k}")


def self_test():
    """`record` and `tally` on a made-up run: each verdict, the second pass's, one it did not
    reach, one it tested beside them, a key that survives an edit above its function, and
    the later commit's verdict winning."""
    import contextlib
    import io
    import tempfile

    def mutant(line, name, first=10):
        return {"name": f"src/a.rs:{line}:5: {name}", "function": {"span": {"start": {"line": first}}},
                "span": {"start": {"line": line, "column": 5}}}

    def write(directory, results):
        (directory / "mutants.out").mkdir(parents=True)
        outs = [{"scenario": "Baseline", "summary": "Success"}]
        outs += [{"scenario": {"Mutant": m}, "summary": r} for m, r in results]
        (directory / "mutants.out" / "outcomes.json").write_text(json.dumps({"outcomes": outs}))

    a, b, c, d, e, f = (mutant(11 + i, f"replace f{i} with ()") for i in range(6))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        write(out / "first-1", [(a, "CaughtMutant"), (b, "Timeout"), (c, "Unviable"), (d, "MissedMutant")])
        write(out / "first-2", [(e, "MissedMutant"), (f, "MissedMutant"), (mutant(50, "replace f6 with ()"), "MissedMutant")])
        extra = mutant(30, "delete field x")
        write(out / "full", [(d, "CaughtMutant"), (e, "MissedMutant"), (extra, "CaughtMutant")])
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            record(out, "abc", patterns=[re.compile("replace f6 ")])
        got = [line.split("\t")[0] for line in text.getvalue().splitlines()]
        assert got == ["caught", "hang", "unviable", "caught", "survived", "unjudged"], got
        assert "delete field x" not in text.getvalue(), "a mutant the first pass did not ask about"
        assert "replace f6" not in text.getvalue(), "an excluded mutant"
        # The same mutants after five lines were added above their function: the same keys.
        moved = [mutant(m["span"]["start"]["line"] + 5, m["name"].split(": ", 1)[1], first=15) for m in (a, b, c, d, e, f)]
        assert [key(m) for m in moved] == [key(m) for m in (a, b, c, d, e, f)]
        listing = Path(tmp) / "list.json"
        excluded_one = mutant(50, "replace f6 with ()")
        listing.write_text(json.dumps(moved + [mutant(40, "replace g with ()"), excluded_one]))
        slice_file = Path(tmp) / "slice.tsv"
        slice_file.write_text(text.getvalue())
        hand = Path(tmp) / "by-hand.tsv"
        # HEAD is a descendant of HEAD~0: the by-hand verdict is at a commit as late or later.
        hand.write_text(f"# by hand\ncaught\t{key(e)}\tHEAD\n")
        for line in slice_file.read_text().splitlines():
            assert line.endswith("\tabc")
        slice_file.write_text(slice_file.read_text().replace("\tabc", "\tHEAD~1"))
        # The later commit wins, not the later file nor the earlier: both orders.
        for files in ([hand, slice_file], [slice_file, hand]):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                tally(listing, files, patterns=[re.compile("replace f6 ")])
            report = text.getvalue()
            assert "7 mutants in the library now (0 sharing a key" in report, report
            assert "6 of them run" in report, report
            assert "caught 3, by a hang 1, unviable 1, survived 0, unjudged 1" in report, report
            assert "4 of 4 viable caught, 100.0 %" in report, report
            assert "not run yet: 1;" in report, report
        # What is left: the unjudged one (f) and the one no slice ran (g), in the list's order,
        # dealt into slices that together hold each once.
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            rest(listing, 1, 1, [hand, slice_file], patterns=[re.compile("replace f6 ")])
        assert text.getvalue().splitlines() == [moved[5]["name"], "src/a.rs:40:5: replace g with ()"], text.getvalue()
        dealt = []
        for k in (1, 2):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                rest(listing, k, 2, [hand, slice_file], patterns=[re.compile("replace f6 ")])
            dealt.append(text.getvalue().splitlines())
        assert dealt == [[moved[5]["name"]], ["src/a.rs:40:5: replace g with ()"]], dealt
    print("mutants_verdicts.py: self-test passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 4 and sys.argv[1] == "record":
        record(Path(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) >= 5 and sys.argv[1] == "rest":
        rest(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "tally":
        tally(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)

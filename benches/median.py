#!/usr/bin/env python3
"""Runs a criterion bench N times and reports each row's median, its spread, and ratios.

One criterion run is one sample of a noisy machine: this repeats it and reports, per row,
the median of the N runs' estimates, their min–max and spread ((max - min) / median), and,
for rows named `<row>/<peer>`, each peer's median over the subject's median (the peer's
time ÷ the subject's: above 1×, the subject is faster), with the same ratio taken run by run
(min–max over the runs, each from one run's own pair of rows).

Each run's estimate of a row is criterion's: the slope of the linear fit when it has one,
else the mean (as criterion prints it), read from
`target/criterion/<group>/<id>/new/estimates.json` (the row's name from `benchmark.json`
beside it): the rows whose file a run wrote. For rows with an element throughput (`Throughput::Elements`), the time per
element is shown too.

The machine is shared: before and after each run it records the load average (as `uptime`
gives it) and, over the run, the cores that processes other than this run kept busy
(`/proc/stat` minus this run's own CPU time). `--max-load L` waits (up to `--wait` seconds)
for the 1-minute load to fall to L before each run; a run that starts above it anyway, or
during which others used more than `--max-others` cores, is marked, and `--reruns K` runs up
to K extra times to replace marked runs.

    python3 benches/median.py --runs 5 --bench local --subject LocalWheel -- 'arm\\+cancel'
    python3 benches/median.py --self-test      # fast, no cargo: a fake estimates tree

Everything after `--` goes to the bench binary (criterion's filter and options).
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def estimate(path):
    """(nanoseconds per iteration, elements per iteration or None) of one estimates.json."""
    with open(path) as f:
        est = json.load(f)
    pick = est.get("slope") or est["mean"]
    ns = float(pick["point_estimate"])
    elements = None
    # `benchmark.json` beside it names the row (the directory's name has `/` made `_`).
    bench = os.path.join(os.path.dirname(path), "benchmark.json")
    try:
        with open(bench) as f:
            meta = json.load(f)
        name = meta.get("full_id") or meta["title"]
        tp = meta.get("throughput") or {}
        if "Elements" in tp:
            elements = int(tp["Elements"])
    except (OSError, KeyError, ValueError):
        name = None
    return ns, elements, name


def snapshot(root):
    """{path: (mtime in ns, contents)} of every row's `new/estimates.json` under `root` (the
    contents too: two writes within one tick of a coarse file clock share an mtime)."""
    seen = {}
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) == "new" and "estimates.json" in files:
            path = os.path.join(dirpath, "estimates.json")
            with open(path, "rb") as f:
                seen[path] = (os.stat(path).st_mtime_ns, f.read())
    return seen


def collect(root, before):
    """Every row whose estimates were written since `before` (a `snapshot`): {name: (ns, elements)}."""
    rows = {}
    for path, seen in snapshot(root).items():
        if before.get(path) == seen:
            continue
        dirpath = os.path.dirname(path)
        ns, elements, name = estimate(path)
        if name is None:
            name = os.path.relpath(os.path.dirname(dirpath), root)
        rows[name] = (ns, elements)
    return rows


def split(name, part=-1):
    """(the row, the peer) of a row's name: the peer is its `/`-separated part number `part`
    (the last by default: `group/row/peer`; `arm_cancel` names `group/peer/producers`, part
    1), the row the rest. A name with too few parts is its own row, with no peer."""
    parts = name.split("/")
    if len(parts) < 2 or not -len(parts) <= part < len(parts):
        return (name, "")
    peer = parts.pop(part)
    return ("/".join(parts), peer)


def fmt_ns(ns):
    if ns >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.4g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns:.3g} ns"


def summarize(runs, subject=None, peers=None, part=-1):
    """Lines of the report for `runs`, a list of {name: (ns, elements)}, one per run."""
    names = sorted({n for r in runs for n in r})
    out = []
    medians = {}
    out.append(f"{'row':<64} {'median':>10} {'min–max':>21} {'spread':>7}  runs")
    for name in names:
        times = [r[name][0] for r in runs if name in r]
        elements = next((r[name][1] for r in runs if name in r), None)
        med = statistics.median(times)
        medians[name] = med
        spread = (max(times) - min(times)) / med if med else 0.0
        line = (
            f"{name:<64} {fmt_ns(med):>10} {fmt_ns(min(times)) + '–' + fmt_ns(max(times)):>21} "
            f"{spread * 100:>6.1f}%  {len(times)}"
        )
        if elements:
            line += f"  ({fmt_ns(med / elements)} per element, {fmt_ns(min(times) / elements)}–{fmt_ns(max(times) / elements)})"
        out.append(line)
    if subject:
        out.append("")
        out.append(f"ratios: the peer's median ÷ {subject}'s (above 1×: {subject} is faster); per run: min–max of that run's own ratio")
        for name in names:
            row, who = split(name, part)
            if who != subject:
                continue
            for other in names:
                orow, peer = split(other, part)
                if orow != row or peer == subject or (peers and peer not in peers):
                    continue
                ratio = medians[other] / medians[name]
                per_run = [r[other][0] / r[name][0] for r in runs if name in r and other in r]
                out.append(
                    f"  {row}: {peer} ÷ {subject} = {ratio:.2f}×  (per run {min(per_run):.2f}–{max(per_run):.2f}×, {len(per_run)} runs)"
                )
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return tuple(float(x) for x in f.read().split()[:3])


def busy_seconds():
    """CPU seconds every process on the machine has used (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is counted in user already)
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
    return busy / os.sysconf("SC_CLK_TCK")


def own_seconds():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wait_for_load(max_load, wait):
    deadline = time.time() + wait
    while loadavg()[0] > max_load and time.time() < deadline:
        time.sleep(5)
    return loadavg()[0] <= max_load


def cargo_bench(args):
    """`cargo bench --bench NAME`, with `--features F` if asked (a bench that requires one)."""
    features = ["--features", args.features] if args.features else []
    return ["cargo", "bench", *features, "--bench", args.bench]


def run_once(args, bench_args, index, log_dir):
    """One `cargo bench` run; returns (rows, a line about the machine, whether it is marked)."""
    calm = True
    if args.max_load is not None:
        calm = wait_for_load(args.max_load, args.wait)
    before = loadavg()
    busy0, own0, t0 = busy_seconds(), own_seconds(), time.time()
    before_rows = snapshot(args.criterion_dir)
    cmd = [*cargo_bench(args), "--", *bench_args]
    if args.nice is not None:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    log = os.path.join(log_dir, f"{args.bench}-run{index}.log")
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    others = max(0.0, (busy_seconds() - busy0) - (own_seconds() - own0)) / wall
    after = loadavg()
    if rc != 0:
        sys.exit(f"run {index}: `{' '.join(cmd)}` failed ({rc}); see {log}")
    rows = collect(args.criterion_dir, before_rows)
    marked = not calm or (args.max_others is not None and others > args.max_others)
    note = (
        f"run {index}: {wall:.0f} s, load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
        f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}; other processes used {others:.2f} cores"
        f"{'  [MARKED: busy machine]' if marked else ''}; {len(rows)} rows; log {log}"
    )
    return rows, note, marked


def self_test():
    """Checks collect/summarize on a fake estimates tree: no cargo, well under a second."""
    root = tempfile.mkdtemp(prefix="median-selftest-")
    try:

        def write(run, group, directory, full_id, slope, mean, elements=None):
            d = os.path.join(root, group, directory)
            os.makedirs(os.path.join(d, "new"), exist_ok=True)
            est = {"mean": {"point_estimate": mean}, "slope": None if slope is None else {"point_estimate": slope}}
            with open(os.path.join(d, "new", "estimates.json"), "w") as f:
                json.dump(est, f)
            meta = {"full_id": full_id, "throughput": {"Elements": elements} if elements else None}
            with open(os.path.join(d, "new", "benchmark.json"), "w") as f:
                json.dump(meta, f)

        subj = [20.0, 10.0, 12.0, 11.0, 30.0]  # median 12
        peer = [40.0, 44.0, 48.0, 50.0, 90.0]  # median 48: 4×
        runs = []
        # A row an earlier run wrote, and this session's runs do not: never collected.
        write(0, "g", "gone_S", "g/gone/S", 5.0, 5.0)
        for i in range(5):
            start = snapshot(root)
            write(i, "g", "pair_S", "g/pair/S", subj[i], 999.0)
            write(i, "g", "pair_P", "g/pair/P", peer[i], 999.0)
            # Flat sampling: no slope, the mean is the estimate; 1000 elements per iteration.
            write(i, "g", "flat_S", "g/flat/S", None, 1000.0 * (i + 1), elements=1000)
            runs.append(collect(root, start))
        assert all(set(r) == {"g/pair/S", "g/pair/P", "g/flat/S"} for r in runs), runs
        assert runs[2]["g/flat/S"] == (3000.0, 1000), runs[2]
        lines = summarize(runs, subject="S")
        text = "\n".join(lines)
        pair_s = next(line for line in lines if line.startswith("g/pair/S "))
        assert "12 ns" in pair_s and "10 ns–30 ns" in pair_s and "166.7%" in pair_s, pair_s
        flat = next(line for line in lines if line.startswith("g/flat/S "))
        assert "3 µs" in flat and "(3 ns per element, 1 ns–5 ns)" in flat, flat
        ratio = next(line for line in lines if "P ÷ S" in line)
        # medians 48 / 12 = 4×; per run 40/20 = 2 … 50/11 = 4.55
        assert "= 4.00×" in ratio and "per run 2.00–4.55×" in ratio, ratio
        assert "flat: " not in text, "no peer row for flat: no ratio"
        assert not summarize(runs, subject="S", peers={"Q"})[-1].startswith("  "), "peer filter"
        assert split("local/arm+cancel 1M pending/LocalWheel (arm by delay)") == (
            "local/arm+cancel 1M pending",
            "LocalWheel (arm by delay)",
        )
        assert split("arm_cancel_pending_1M/shardwheel/2p", 1) == ("arm_cancel_pending_1M/2p", "shardwheel")
        assert split("alone") == ("alone", "") and split("a/b", 5) == ("a/b", "")
        # arm_cancel's naming: the peer in the middle, the ratio per producer count.
        ac = [{"g/S/1p": (10.0, 1), "g/P/1p": (50.0, 1), "g/S/2p": (20.0, 2), "g/P/2p": (30.0, 2)}]
        ac_lines = summarize(ac, subject="S", part=1)
        assert any("g/1p: P ÷ S = 5.00×" in line for line in ac_lines), ac_lines
        assert any("g/2p: P ÷ S = 1.50×" in line for line in ac_lines), ac_lines
    finally:
        shutil.rmtree(root)
    print("median.py self-test: ok")


def main():
    argv = sys.argv[1:]
    bench_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, bench_args = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", help="the bench target (cargo bench --bench NAME)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--subject", help="the peer the ratios are taken against (the last `/` part of a row's name)")
    p.add_argument("--peer", action="append", help="only these peers in the ratios (repeatable)")
    p.add_argument("--peer-part", type=int, default=-1, help="which `/` part of a row's name is the peer (default -1, the last; 1 for arm_cancel)")
    p.add_argument("--max-load", type=float, help="wait for the 1-minute load average to fall to this before each run")
    p.add_argument("--wait", type=float, default=300, help="seconds to wait for --max-load at most")
    p.add_argument("--max-others", type=float, help="mark a run during which other processes used more cores")
    p.add_argument("--reruns", type=int, default=0, help="extra runs allowed to replace marked ones")
    p.add_argument("--nice", type=int, help="run cargo under `nice -n N`")
    p.add_argument("--features", help="cargo features the bench requires (cargo bench --features F)")
    p.add_argument("--criterion-dir", default=None, help="default: $CRITERION_HOME, else $CARGO_TARGET_DIR (or target) + /criterion")
    p.add_argument("--json", help="write every run's rows and notes here")
    p.add_argument("--from-json", help="no runs: summarize the runs a --json FILE kept")
    p.add_argument("--self-test", action="store_true", help="check the statistics on a fake tree and exit")
    args = p.parse_args(argv)
    if args.self_test:
        self_test()
        return
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        print("$ " + " ".join(saved["command"]))
        for note in saved["notes"]:
            print(note)
        print()
        runs = [{k: tuple(v) for k, v in r.items()} for r in saved["runs"]]
        for line in summarize(runs, args.subject, set(args.peer) if args.peer else None, args.peer_part):
            print(line)
        return
    if not args.bench:
        p.error("--bench is required")
    # From the repository root, wherever it is called from; criterion's home as it finds it.
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    if args.criterion_dir is None:
        args.criterion_dir = os.environ.get("CRITERION_HOME") or os.path.join(target, "criterion")
    log_dir = os.path.join(target, "median")
    os.makedirs(log_dir, exist_ok=True)
    # Build first, so that no run pays for (or is slowed by) the compile.
    build = [*cargo_bench(args), "--no-run"]
    if subprocess.call(build, stdout=subprocess.DEVNULL) != 0:
        sys.exit(f"`{' '.join(build)}` failed")
    print(f"$ {' '.join(cargo_bench(args))} -- {' '.join(bench_args)}   ({args.runs} runs)", flush=True)
    kept, notes, extra = [], [], args.reruns
    index = 0
    while len(kept) < args.runs:
        index += 1
        rows, note, marked = run_once(args, bench_args, index, log_dir)
        print(note, flush=True)
        notes.append(note)
        if marked and extra > 0:
            extra -= 1
            notes.append(f"run {index} dropped (marked), rerun")
            print(f"run {index} dropped (marked), rerun", flush=True)
            continue
        kept.append(rows)
    print()
    for line in summarize(kept, args.subject, set(args.peer) if args.peer else None, args.peer_part):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": [*cargo_bench(args), "--", *bench_args], "notes": notes, "runs": kept}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The table of a scale run: `proxy/scale.sh`'s (the proxy on each timer) or
`httpd/scale.sh`'s (shardwheel-httpd beside nginx).

    python3 httpd/scale_table.py FOLDER [--json]

FOLDER holds one `shardwheel-load --json` report a run, `NAME.RUN.json` (NAME a timer or a
server), and for httpd/scale.sh `NAME.RUN.kernel.json` (the kernel's socket memory) and
`NAME.RUN.server.log` (the local stack's event-loop turns and its own view of each timeout's closes, from each process's summary), and for
proxy/scale.sh `NAME.RUN.upstream.json` (the proxies' upstream connections). Prints,
a row a measure and a column a NAME, the median over the runs and, with more than one run,
the spread (lowest to highest); then the bars of issue 30 for shardwheel (or the local stack)
against each other one. `--json` prints the medians as one JSON object instead (for
`benches/many_cores.sh`).
"""

import json
import re
import statistics
import sys
from pathlib import Path


def dig(report, path):
    """report[a][b]... for the dotted path (a list of keys where a key has a dot), or None."""
    value = report
    for key in path if isinstance(path, list) else path.split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return value


def turns(log):
    """The local stack's event-loop turns over every process's summary: {"longest_ms",
    "over_5ms"} by the wall clock, and "cpu_longest_ms", "cpu_over_5ms" on the threads' CPU
    clock where `--turn-cpu` timed them; and each timeout's closes as the server saw them,
    "KIND_closes" summed and "KIND_late_p50_ms", "KIND_late_p99_ms", "KIND_late_max_ms" the
    worst process's (KIND header, idle or send: a process's percentiles cannot be merged
    from its summary, so the worst bounds them); None if no summary."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    found = {}
    for prefix, pattern in [
        ("", r"event-loop turns: longest ([0-9.]+) ms, (\d+) over"),
        ("cpu_", r"event-loop turns on the CPU clock: \d+ timed, longest ([0-9.]+) ms, (\d+) over"),
    ]:
        for m in re.finditer(pattern, text):
            found[prefix + "longest_ms"] = max(found.get(prefix + "longest_ms", 0.0), float(m.group(1)))
            found[prefix + "over_5ms"] = found.get(prefix + "over_5ms", 0) + int(m.group(2))
    pattern = r"summary: (\w+) timeout closes (\d+): late p50 ([0-9.]+) ms, p99 ([0-9.]+) ms, max ([0-9.]+) ms"
    for m in re.finditer(pattern, text):
        kind = m.group(1)
        found[f"{kind}_closes"] = found.get(f"{kind}_closes", 0) + int(m.group(2))
        for key, value in zip(("p50", "p99", "max"), m.group(3, 4, 5)):
            found[f"{kind}_late_{key}_ms"] = max(found.get(f"{kind}_late_{key}_ms", 0.0), float(value))
    return found or None


# (label, unit, how to read it off a run, lower is better)
CLASSES = ["idle", "silent", "slowloris", "quiet"]


def measures(classes):
    rows = [
        ("connections held", "", lambda r: held(r), False),
        ("connects failed", "", lambda r: failures(r), True),
        ("ramp", "s", lambda r: dig(r, "ramp.secs"), True),
        ("requests answered in the window", "", lambda r: dig(r, "requests.count"), False),
        ("request errors", "", lambda r: dig(r, "requests.error_count"), True),
        ("req/s held", "req/s", lambda r: dig(r, "requests.achieved_rps"), False),
        ("latency p50", "ms", lambda r: dig(r, "requests.latency_ms.p50"), True),
        ("latency p99", "ms", lambda r: dig(r, "requests.latency_ms.p99"), True),
        ("latency p99.9", "ms", lambda r: dig(r, ["requests", "latency_ms", "p99.9"]), True),
        ("latency max", "ms", lambda r: dig(r, "requests.latency_ms.max"), True),
        ("server CPU per request", "µs", lambda r: dig(r, "server.cpu_us_per_request"), True),
        ("server CPU in the window", "s", lambda r: dig(r, "server.cpu_secs"), True),
        ("server RSS per connection", "KiB", lambda r: dig(r, "server.rss_kib_per_conn"), True),
        ("server RSS at the window's end", "MiB", lambda r: mib(dig(r, "server.rss_end_kib")), True),
        ("proxy: upstream connections (its pools) at the window's end", "", lambda r: dig(r, "upstream.upstream_conns"), True),
    ]
    for c in classes:
        rows += [
            (f"{c} closes: closed / asked", "", lambda r, c=c: closed_of(r, c), False),
            (f"{c} closes: early", "", lambda r, c=c: dig(r, f"closes.{c}.early"), True),
            (f"{c} closes: late p50", "ms", lambda r, c=c: dig(r, f"closes.{c}.late_ms.p50"), True),
            (f"{c} closes: late p99", "ms", lambda r, c=c: dig(r, f"closes.{c}.late_ms.p99"), True),
            (f"{c} closes: late max", "ms", lambda r, c=c: dig(r, f"closes.{c}.late_ms.max"), True),
        ]
    rows += [
        ("kernel: TCP sockets in use (both ends)", "", lambda r: dig(r, "kernel.tcp_inuse"), False),
        ("kernel: slab growth per connection", "KiB", lambda r: per_conn(r, "kernel.slab_kib"), True),
        ("kernel: TCP buffer pages per connection", "KiB", lambda r: per_conn(r, "kernel.tcp_pages_kib"), True),
    ]
    # The local stack's own view of its timeout closes (its summary), beside the client's.
    for kind in ("header", "idle", "send"):
        rows += [
            (f"server-seen {kind} timeout closes", "", lambda r, k=kind: dig(r, f"turns.{k}_closes"), False),
            (f"server-seen {kind} closes: late p50, worst process", "ms", lambda r, k=kind: dig(r, f"turns.{k}_late_p50_ms"), True),
            (f"server-seen {kind} closes: late p99, worst process", "ms", lambda r, k=kind: dig(r, f"turns.{k}_late_p99_ms"), True),
            (f"server-seen {kind} closes: late max", "ms", lambda r, k=kind: dig(r, f"turns.{k}_late_max_ms"), True),
        ]
    rows += [
        ("event loop: longest turn", "ms", lambda r: dig(r, "turns.longest_ms"), True),
        ("event loop: turns over 5 ms", "", lambda r: dig(r, "turns.over_5ms"), True),
        ("event loop: longest turn's own CPU time", "ms", lambda r: dig(r, "turns.cpu_longest_ms"), True),
        ("event loop: turns over 5 ms of CPU time", "", lambda r: dig(r, "turns.cpu_over_5ms"), True),
        ("machine load at start / end", "", lambda r: load(r), True),
    ]
    return rows


def failures(r):
    """Connects that failed, by reason: the count, and the reasons."""
    reasons = dig(r, "ramp.connect_failures")
    if reasons is None:
        return None
    total = sum(reasons.values())
    # One type whatever the run: a text (runs' cells are compared as texts).
    return str(total) if not total else f"{total} ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})"


def mib(kib):
    return None if kib is None else kib / 1024


def held(r):
    c = dig(r, "config") or {}
    return sum(c.get(k) or 0 for k in ("active", "idle", "silent", "slowloris", "unread")) or None


def closed_of(r, c):
    closed, count = dig(r, f"closes.{c}.closed"), dig(r, f"closes.{c}.count")
    return None if closed is None else f"{closed} / {count}"


def per_conn(r, path):
    """A kernel figure over the connections held when it was read: half the TCP sockets in use
    then (both ends are on this machine), which the script reads once 95 % are up."""
    v, sockets = dig(r, path), dig(r, "kernel.tcp_inuse")
    return None if v is None or not sockets else v / (sockets / 2)


def load(r):
    a, b = dig(r, "machine.start.load"), dig(r, "machine.end.load")
    if a is None and b is None:
        return None
    first = lambda x: x[0] if isinstance(x, list) else x
    return f"{first(a)} / {first(b)}"


def read(folder):
    runs = {}
    for path in sorted(Path(folder).glob("*.json")):
        parts = path.name.split(".")
        if len(parts) != 3:
            continue  # NAME.RUN.kernel.json and the like
        name, run = parts[0], parts[1]
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            report = {"failed": True}
        for part in ("kernel", "upstream"):
            extra = Path(folder) / f"{name}.{run}.{part}.json"
            if extra.exists():
                report[part] = json.loads(extra.read_text())
        found = turns(Path(folder) / f"{name}.{run}.server.log")
        if found is not None:
            report["turns"] = found
        runs.setdefault(name, []).append(report)
    return runs


def fmt(x):
    if isinstance(x, str):
        return x
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def cell(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-", None
    if isinstance(values[0], str):
        return (values[0] if len(set(values)) == 1 else ", ".join(values)), None
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med), med
    return f"{fmt(med)} ({fmt(min(values))}–{fmt(max(values))})", med


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    runs = read(args[0])
    if not runs:
        sys.exit(f"no runs in {args[0]}")
    # The order the script ran them in: the first run's files, by time.
    names = sorted(runs, key=lambda n: min(p.stat().st_mtime for p in Path(args[0]).glob(f"{n}.*.json")))
    classes = [c for c in CLASSES if any(dig(r, f"closes.{c}") for rs in runs.values() for r in rs)]
    table = []
    medians = {n: {} for n in names}
    for label, unit, get, lower in measures(classes):
        cells = []
        for n in names:
            text, med = cell([get(r) for r in runs[n]])
            cells.append(text)
            medians[n][label] = med
        if all(c == "-" for c in cells):
            continue
        table.append((label, unit, cells, lower))
    if "--json" in sys.argv:
        print(json.dumps(medians))
        return
    count = max(len(v) for v in runs.values())
    print(f"{count} run(s) each; a cell is the median" + (" (lowest–highest)" if count > 1 else "") + ".")
    print()
    print("| measure | unit | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for label, unit, cells, _ in table:
        print(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    bars(names, runs, medians)


def bars(names, runs, medians):
    """Issue 30's bars for shardwheel (or the local stack) against each other, on the
    medians: better is ok; worse is level only where each median lies within the other's
    spread, else not met."""
    ours = next((n for n in ("shardwheel", "local") if n in names), names[0])
    others = [n for n in names if n != ours]
    if not others:
        return
    print()
    print(f"Bars ({ours} against each other, medians):")

    def spread(name, label):
        get = next(g for l, _, g, _ in measures(CLASSES) if l == label)
        vals = [v for v in (get(r) for r in runs[name]) if isinstance(v, (int, float))]
        return (min(vals), max(vals)) if vals else None

    def check(label, against, lower=True):
        a, b = medians[ours].get(label), medians[against].get(label)
        if a is None or b is None:
            return f"{label}: not measured"
        better = a <= b if lower else a >= b
        if better:
            return f"{label}: {fmt(a)} against {fmt(b)} ok"
        # Worse at the median: level only if each median lies within the other's spread
        # (with one run there is no spread, and worse is worse).
        s, o = spread(against, label), spread(ours, label)
        level = s is not None and o is not None and s[0] <= a <= s[1] and o[0] <= b <= o[1] and s != (b, b)
        return f"{label}: {fmt(a)} against {fmt(b)} {'level: worse at the median, within both spreads' if level else 'NOT MET'}"

    for other in others:
        print(f"- against {other}:")
        for label in ("server CPU per request", "latency p99"):
            print(f"  - {check(label, other)}")
        if other.startswith("tokio") or other == "nginx":
            for c in CLASSES:
                if medians[ours].get(f"{c} closes: late p99") is not None:
                    print(f"  - {check(f'{c} closes: late p99', other)}")
            print(f"  - {check('server RSS per connection', other)}")
    def early(n):
        counts = [medians[n].get(f"{c} closes: early") for c in CLASSES if medians[n].get(f"{c} closes: late p50") is not None or medians[n].get(f"{c} closes: early") is not None]
        return "not measured" if not counts or any(x is None for x in counts) else fmt(sum(counts))
    print("- early closes (medians summed over the classes): " + ", ".join(f"{n} {early(n)}" for n in names))


if __name__ == "__main__":
    main()

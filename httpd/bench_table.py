#!/usr/bin/env python3
"""httpd/bench.sh's tables: reads the results it wrote (one JSON object per server and run)
and prints, in markdown, each server's figures (the median over the runs, and the spread,
min-max, where there was more than one) and the issue's bars with met / missed computed
from them. Comparisons are made run by run (each run measured every server back to back)
and the ratios' median is what a bar is judged on.

  python3 httpd/bench_table.py RESULTS.jsonl --header-ms 2000 --idle-ms 5000 --send-ms 2000 --delay-ms 50
"""
import argparse
import json
import statistics

ORDER = ["local", "hyper-shardwheel", "hyper-tokio", "nginx"]
CLASSES = ["silent", "idle", "slowloris", "unread"]


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def cell(values, fmt="{:.1f}"):
    """The median, and min-max where there is more than one value."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    m = fmt.format(statistics.median(values))
    if len(values) > 1:
        return f"{m} ({fmt.format(min(values))}–{fmt.format(max(values))})"
    return m


def us_per_request(r):
    """The server's CPU time under wrk on `/`, per request answered."""
    return r["cpu"]["wrk"] * 1e6 / r["requests"] if r.get("requests") else None


def late(r, cls, q):
    c = (r.get("conns") or {}).get("classes", {}).get(cls)
    return None if c is None else c["late_ms"][q]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--header-ms", type=float, default=2000)
    ap.add_argument("--idle-ms", type=float, default=5000)
    ap.add_argument("--send-ms", type=float, default=2000)
    ap.add_argument("--delay-ms", type=float, default=50)
    args = ap.parse_args()

    results = [json.loads(line) for line in open(args.results) if line.strip()]
    by = {}
    for r in results:
        by.setdefault(r["key"], []).append(r)
    runs = sorted({r["run"] for r in results})
    # The sizing variants (hyper-shardwheel-<N>shard, -unpinned) after the default one.
    variants = sorted(k for k in by if k.startswith("hyper-shardwheel-"))
    keys = [k for k in ORDER if k in by]
    keys[keys.index("hyper-shardwheel") + 1 if "hyper-shardwheel" in keys else len(keys):0] = variants
    names = {k: by[k][0]["server"] for k in keys}

    def run_of(key, run):
        return next((r for r in by.get(key, []) if r["run"] == run), None)

    # --- each server's figures -------------------------------------------------------------
    print(f"Each cell: the median of {len(runs)} run(s)" + (", (min–max)" if len(runs) > 1 else "") + "; lateness in ms, client-seen.")
    print()
    head = ["server", "req/s", "CPU µs / request", f"/delay/{args.delay_ms:g}: min / p50 / p99 ms (-c conns req/s)"]
    for cls in CLASSES:
        head += [f"{cls} closed, early", f"{cls} late p50", f"{cls} late p99", f"{cls} late max"]
    head += ["RSS MiB before / with conns", "RSS B per conn", "CPU s wrk / conns", "server-seen p99 ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in keys:
        rs = by[k]
        row = [names[k], cell([r.get("rps") for r in rs], "{:.0f}"), cell([us_per_request(r) for r in rs], "{:.2f}")]
        d = [r["delay"] for r in rs if r.get("delay")]
        if d:
            row.append(
                f"{cell([x['min'] / 1000 for x in d], '{:.2f}')} / {cell([x['p50'] / 1000 for x in d], '{:.2f}')}"
                f" / {cell([x['p99'] / 1000 for x in d], '{:.2f}')} ({cell([x['rps'] for x in d], '{:.0f}')})"
            )
        else:
            row.append("- (no such route)" if k == "nginx" else "-")
        for cls in CLASSES:
            cs = [(r.get("conns") or {}).get("classes", {}).get(cls) for r in rs]
            cs = [c for c in cs if c]
            if cs:
                row.append(f"{sum(c['closed'] for c in cs)}/{sum(c['count'] for c in cs)}, {sum(c['early'] for c in cs)}")
            else:
                row.append("?")
            for q in ("p50", "p99", "max"):
                row.append(cell([late(r, cls, q) for r in rs]))
        row.append(f"{cell([r['rss']['before'] / 1024 for r in rs])} / {cell([r['rss']['peak'] / 1024 for r in rs])}")
        row.append(cell([r.get("per_conn") for r in rs], "{:.0f}"))
        row.append(f"{cell([r['cpu']['wrk'] for r in rs], '{:.2f}')} / {cell([r['cpu']['conns'] for r in rs], '{:.2f}')}")
        row.append(cell([r.get("seen_p99_ms") for r in rs], "{:.2f}"))
        print("| " + " | ".join(row) + " |")

    # --- the bars ------------------------------------------------------------------------
    def ratios(a, b, get):
        out = []
        for run in runs:
            x, y = run_of(a, run), run_of(b, run)
            if x and y and get(x) is not None and get(y):
                out.append(get(x) / get(y))
        return out

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    bars = []
    if "local" in by and "nginx" in by:
        rr = ratios("local", "nginx", lambda r: r.get("rps"))
        cr = ratios("local", "nginx", us_per_request)
        if rr:
            what = f"{cell(rr, '{:.2f}')}× nginx's (run by run)"
            if cr:
                what += f"; its CPU per request {cell(cr, '{:.2f}')}× nginx's (wrk shares the cores)"
            bars.append(("`--stack local` req/s ≥ nginx's", what, verdict(med(rr) >= 1.0)))
    for cls, bar_ms in (("silent", 2.0), ("idle", 2.0), ("slowloris", None)):
        for k in ("local", "hyper-shardwheel", "hyper-tokio"):
            if k not in by or (k != "local" and cls != "silent"):
                continue
            cs = [(r.get("conns") or {}).get("classes", {}).get(cls) for r in by[k]]
            cs = [c for c in cs if c]
            if not cs:
                continue
            count, closed, early = sum(c["count"] for c in cs), sum(c["closed"] for c in cs), sum(c["early"] for c in cs)
            p99 = med([c["late_ms"]["p99"] for c in cs])
            what = f"{closed}/{count} closed, {early} early"
            ok = closed == count and early == 0
            if bar_ms is not None and p99 is not None:
                what += f"; p99 {cell([late(r, cls, 'p99') for r in by[k]])} ms"
                within = p99 <= bar_ms
                if "nginx" in by:
                    rr = ratios(k, "nginx", lambda r: late(r, cls, "p99"))
                    what += f" vs nginx {cell([late(r, cls, 'p99') for r in by['nginx']])} ms"
                    if rr:
                        what += f" ({cell(rr, '{:.2f}')}× nginx's, run by run)"
                        within = within or med(rr) <= 1.0
                ok = ok and within
            label = {
                "silent": f"{names[k]}: silent closed at the header timeout, none early, p99 ≤ 2 ms late or ≤ nginx's",
                "idle": f"{names[k]}: idle closed at the idle timeout, none early, p99 ≤ 2 ms late or ≤ nginx's",
                "slowloris": f"{names[k]}: slowloris closed at the header timeout, none early",
            }[cls]
            bars.append((label, what, verdict(ok)))
    # The send timeout: every server (nginx's `send_timeout` at the same value).
    for k in keys:
        cs = [(r.get("conns") or {}).get("classes", {}).get("unread") for r in by[k]]
        cs = [c for c in cs if c and c["count"]]
        if not cs:
            continue
        count, closed, early = sum(c["count"] for c in cs), sum(c["closed"] for c in cs), sum(c["early"] for c in cs)
        what = (f"{closed}/{count} closed, {early} early; late p50 {cell([late(r, 'unread', 'p50') for r in by[k]])},"
                f" p99 {cell([late(r, 'unread', 'p99') for r in by[k]])} ms (from the last request write)")
        bars.append((f"{names[k]}: a client that never reads closed at the send timeout ({args.send_ms:g} ms), none early",
                     what, verdict(closed == count and early == 0)))
    if "local" in by and "nginx" in by:
        a, b = med([r.get("per_conn") for r in by["local"]]), med([r.get("per_conn") for r in by["nginx"]])
        bars.append(("RSS per idle connection beside nginx's; the timers' share ≤ 64 B",
                     f"{a:.0f} B vs nginx's {b:.0f} B" if a is not None and b is not None else "?",
                     "reported (the timers' share is not separable in RSS: see `cargo bench --bench memory`)"))
    if "hyper-shardwheel" in by and "hyper-tokio" in by:
        rr = ratios("hyper-shardwheel", "hyper-tokio", lambda r: r.get("rps"))
        cr = ratios("hyper-shardwheel", "hyper-tokio", us_per_request)
        if rr:
            what = f"{cell(rr, '{:.2f}')}×" + (f"; CPU per request {cell(cr, '{:.2f}')}×" if cr else "")
            bars.append(("hyper: `--timer shardwheel` req/s ≥ 1.0× `--timer tokio`", what, verdict(med(rr) >= 1.0)))
        pr = ratios("hyper-shardwheel", "hyper-tokio", lambda r: late(r, "silent", "p99"))
        if pr:
            bars.append(("hyper: `--timer shardwheel` silent close p99 no worse than `--timer tokio`'s",
                         f"{cell([late(r, 'silent', 'p99') for r in by['hyper-shardwheel']])} vs {cell([late(r, 'silent', 'p99') for r in by['hyper-tokio']])} ms ({cell(pr, '{:.2f}')}× tokio's, run by run)",
                         verdict(med(pr) <= 1.0)))
    for k in ("local", "hyper-shardwheel", "hyper-tokio"):
        d = [r["delay"] for r in by.get(k, []) if r.get("delay")]
        if not d:
            continue
        lo = min(x["min"] for x in d) / 1000
        extra = cell([x["p99"] / 1000 - args.delay_ms for x in d], "{:.2f}")
        what = f"min {lo:.2f} ms over {sum(x['requests'] for x in d)} responses; p99 extra {extra} ms"
        if k != "hyper-tokio" and "hyper-tokio" in by:
            t = [r["delay"] for r in by["hyper-tokio"] if r.get("delay")]
            if t:
                what += f" (`--timer tokio`: {cell([x['p99'] / 1000 - args.delay_ms for x in t], '{:.2f}')} ms)"
        errors = sum(x["errors"] for x in d)
        if errors:
            what += f"; {errors} wrk errors"
        bars.append((f"{names[k]}: `/delay/{args.delay_ms:g}` never answered before {args.delay_ms:g} ms", what, verdict(lo >= args.delay_ms)))
    if variants and "hyper-shardwheel" in by:
        # The service's sizing: each variant against the default (a pinned shard per
        # worker), run by run; below 1 the variant has less of it.
        print()
        print("Sizing: each variant against the default `hyper-shardwheel` (a pinned shard per worker), run by"
              " run: req/s and CPU per request as ratios (below 1.00× means less), lateness as the difference in ms"
              " (below 0 means closer to the deadline); the median and min–max over the runs.")
        print()
        print("| timer service | req/s | CPU / request | `/delay/` p50 | `/delay/` p99 | silent close p99 | slowloris close p99 |")
        print("|---|---|---|---|---|---|---|")

        def diffs(a, get):
            out = []
            for run in runs:
                x, y = run_of(a, run), run_of("hyper-shardwheel", run)
                if x and y and get(x) is not None and get(y) is not None:
                    out.append(get(x) - get(y))
            return out

        p50 = lambda r: r["delay"]["p50"] / 1000 if r.get("delay") else None
        p99 = lambda r: r["delay"]["p99"] / 1000 if r.get("delay") else None
        for k in (["hyper-tokio"] if "hyper-tokio" in by else []) + variants:
            row = [names[k]]
            for get in (lambda r: r.get("rps"), us_per_request):
                row.append(cell(ratios(k, "hyper-shardwheel", get), "{:.2f}") + "×")
            for get in (p50, p99, lambda r: late(r, "silent", "p99"), lambda r: late(r, "slowloris", "p99")):
                row.append(cell(diffs(k, get), "{:+.2f}") + " ms")
            print("| " + " | ".join(row) + " |")
    if any(k.startswith("hyper") for k in keys):
        print()
        print("hyper's idle connections close at the header timeout, not the idle one (its `header_read_timeout` also"
              " runs between keep-alive requests, under either timer), so they read as early by the difference; that is"
              " hyper's behaviour, not a timer firing early, and no bar is judged on it.")
    print()
    print("| bar | measured | met? |")
    print("|---|---|---|")
    for bar in bars:
        print("| " + " | ".join(bar) + " |")


if __name__ == "__main__":
    main()

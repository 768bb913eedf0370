#!/usr/bin/env python3
"""Joins `shardwheel-conns --trace CLIENT` with `shardwheel-httpd --trace SERVER`
(SERVER.0, SERVER.1, ...) by port, and splits each timeout close's client-seen lateness
into where it went, per class (ms, p50 / p99 / max):

  arm     the server's deadline minus the client's (connect + header timeout, or the
          response read + idle timeout): for a header timeout, the wait before the
          server accepted (and armed); for idle, the arm before the response's write.
  accept  the accept minus the client's connect call (silent, slowloris).
  call    how long the `accept` call itself took (a descriptor table growing blocks it).
  fire    when the loop woke to fire the timer, minus its deadline (the server's lateness
          before the close: tick rounding, epoll_wait's timeout, a busy turn).
  close   the close minus that wake-up (the turn's work before this close).
  deliver when the client saw the close, minus the server's close.
  total   arm + fire + close + deliver: the lateness the client reports.

  python3 httpd/trace_join.py CLIENT SERVER --header-ms 2000 --idle-ms 5000
"""
import argparse
import glob


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("client")
    ap.add_argument("server", help="the server's --trace FILE (FILE.<thread> are read)")
    ap.add_argument("--header-ms", type=float, default=2000)
    ap.add_argument("--idle-ms", type=float, default=5000)
    args = ap.parse_args()

    server = {}
    for path in sorted(glob.glob(args.server + ".*")):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 7:  # before the accept call was stamped
                    fields.insert(2, fields[2])
                port, woke, called, accepted, why, deadline, fired, closed = fields
                server[int(port)] = (int(woke), int(called), int(accepted), why, deadline, fired, int(closed))
    rows = {}
    unjoined = 0
    for line in open(args.client):
        port, cls, opened, responded, closed = line.split()
        port = int(port)
        if closed == "-" or port not in server:
            unjoined += 1
            continue
        woke, called, accepted, why, deadline, fired, s_closed = server[port]
        if deadline == "-":
            continue  # not a timeout close
        deadline, fired, closed, opened = int(deadline), int(fired), int(closed), int(opened)
        if cls == "idle":
            due = int(responded) + int(args.idle_ms * 1e6)
        else:
            due = opened + int(args.header_ms * 1e6)
        r = rows.setdefault(cls, {k: [] for k in ("arm", "accept", "call", "fire", "close", "deliver", "total")})
        r["arm"].append(deadline - due)
        r["accept"].append(accepted - opened)
        r["call"].append(accepted - called)
        r["fire"].append(fired - deadline)
        r["close"].append(s_closed - fired)
        r["deliver"].append(closed - s_closed)
        r["total"].append(closed - due)
    print(f"joined by port ({unjoined} client lines without a server close or a client close)")
    print("| class | n | " + " | ".join(f"{k} p50 / p99 / max" for k in ("arm", "accept", "call", "fire", "close", "deliver", "total")) + " |")
    print("|---|---:|" + "---|" * 7)
    for cls, r in sorted(rows.items()):
        cells = []
        for k in ("arm", "accept", "call", "fire", "close", "deliver", "total"):
            v = [x / 1e6 for x in r[k]]
            cells.append(f"{pct(v, .5):.2f} / {pct(v, .99):.2f} / {max(v):.2f}")
        print(f"| {cls} | {len(r['total'])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

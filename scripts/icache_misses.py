#!/usr/bin/env python3
"""Simulated L1 instruction-cache misses per request, from callgrind's
per-thread dumps with its cache simulation.

At saturation the bare axum server already runs more code per request
than the core's L1 instruction cache holds, so a layer's cost there
follows the instruction-cache misses it adds: its own code's, and those
of the server's code it evicts. Measured across controls in the same
harness, the simulated misses over bare ordered the layers as their
throughput at saturation did (see the README's "HTTP servers" section).

    icache_misses.py PREFIX BARE_REQUESTS LAYERED_REQUESTS [LAYER_REGEX]

PREFIX: the `--callgrind-out-file` of a run with `--cache-sim=yes
--branch-sim=yes --compress-strings=no --compress-pos=no
--separate-threads=yes` (one file per thread). The two server threads are the files that ran hyper's
server code; the layered one also ran a layer's own functions. Prints,
per request, each server's misses and the difference, the layer's own
functions' share (LAYER_REGEX, default `rategate|governor`), and the
other functions whose misses grew most (the server code the layer
evicted).
The simulation runs every thread on one cache, the load generator's
too, so its absolute figures are above a real core's; compare layers,
not against hardware.
"""

import collections
import glob
import re
import sys

OWN = re.compile(r"^<?(rategate|tower_governor|governor)::")
SERVER = "hyper::proto::h1::role::Server"


def load(path):
    """({function: [event totals]}, event names, thread totals)."""
    per_fn = collections.defaultdict(lambda: None)
    events = []
    totals = None
    function = None
    after_call = False
    with open(path, errors="replace") as dump:
        for text in dump:
            if text.startswith("events:"):
                events = text.split()[1:]
            elif text.startswith("fn="):
                function = text[3:].strip()
                after_call = False
            elif text.startswith("calls="):
                # The next cost line is the call's inclusive cost.
                after_call = True
            elif text.startswith(("summary:", "totals:")):
                totals = [int(v) for v in text.split()[1:]]
            elif text[:1].isdigit() or text[:1] in "+-*":
                # A cost line: its position (absolute, or relative with
                # `--compress-pos=yes`), then the events' counts.
                if after_call:
                    after_call = False
                    continue
                values = [int(v) for v in text.split()[1:]]
                sums = per_fn[function]
                if sums is None:
                    per_fn[function] = values + [0] * (len(events) - len(values))
                else:
                    for i, v in enumerate(values):
                        sums[i] += v
    return per_fn, events, totals


def main():
    prefix, bare_requests, layered_requests = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    layer = re.compile(sys.argv[4] if len(sys.argv) > 4 else r"rategate|governor")
    servers = []
    for path in sorted(glob.glob(prefix + "-*")):
        per_fn, events, totals = load(path)
        if any(SERVER in name for name in per_fn):
            layered = any(OWN.search(name) for name in per_fn)
            servers.append((layered, per_fn, events, totals))
    bare = [s for s in servers if not s[0]]
    layered = [s for s in servers if s[0]]
    if len(bare) != 1 or len(layered) != 1:
        sys.exit(f"expected one bare and one layered server thread, found {len(bare)} and {len(layered)}")
    _, bare_fns, events, bare_totals = bare[0]
    _, layered_fns, _, layered_totals = layered[0]
    i1 = events.index("I1mr")
    for fns, totals in ((bare_fns, bare_totals), (layered_fns, layered_totals)):
        counted = sum(values[i1] for values in fns.values() if values)
        if counted != totals[i1]:
            sys.exit(f"the functions' misses add up to {counted}, the thread's to {totals[i1]}: a dump this parser misreads")

    def per_request(fns, name, requests):
        values = fns.get(name)
        return values[i1] / requests if values else 0.0

    rows = []
    for name in set(bare_fns) | set(layered_fns):
        b = per_request(bare_fns, name, bare_requests)
        l = per_request(layered_fns, name, layered_requests)
        rows.append((l - b, b, l, name))
    own = sum(diff for diff, _, _, name in rows if layer.search(name))
    b_total = bare_totals[i1] / bare_requests
    l_total = layered_totals[i1] / layered_requests
    print(
        f"I1 misses per request: layered server {l_total:.0f}, bare server {b_total:.0f} "
        f"({l_total - b_total:+.0f}; the layer's own functions {own:+.0f}, "
        f"the rest {l_total - b_total - own:+.0f})"
    )
    for event in ("D1mr", "D1mw", "Bcm", "Bim"):
        if event in events:
            k = events.index(event)
            d = layered_totals[k] / layered_requests - bare_totals[k] / bare_requests
            print(f"  {event} per request over bare: {d:+.1f}")
    rows.sort(key=lambda r: -abs(r[0]))
    print("the layer's functions (per request):")
    for diff, b, l, name in [r for r in rows if layer.search(r[3])][:12]:
        print(f"  {diff:+6.1f}  {name[:110]}")
    print("other functions whose misses changed most (per request, bare -> layered):")
    for diff, b, l, name in [r for r in rows if not layer.search(r[3])][:15]:
        print(f"  {diff:+6.1f}  ({b:5.1f} -> {l:5.1f})  {name[:110]}")


if __name__ == "__main__":
    main()

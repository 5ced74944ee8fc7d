#!/usr/bin/env python3
"""Hot code lines per request, from callgrind's per-thread instruction dumps.

A 64-byte line of code is *hot* when its most-run instruction ran, on
average, at least once for every two requests: code on the request's
path, not code run once per batch of requests or on rare requests. At
saturation the bare axum server runs more hot lines per request than the
core's L1 instruction cache holds, so each line the layer adds is
fetched again for each request: the layer's cost there follows its hot
lines more than its instructions.

    hot_lines.py PREFIX BARE_REQUESTS LAYERED_REQUESTS [LAYER_REGEX]

PREFIX: the `--callgrind-out-file` of a run with `--dump-instr=yes
--compress-pos=no --compress-strings=no --separate-threads=yes` (one
file per thread, PREFIX-01, PREFIX-02, ...). The two server threads are
the files that ran hyper's server code; the layered one also ran a
layer's own functions (rategate's or tower_governor's: a control without
either, such as `bare` or `identity`, cannot be told apart). Prints the
functions whose names match LAYER_REGEX (default `rategate`: its own,
and those monomorphized over its types) with their hot lines and
instructions per request, then the hot lines of those functions
together and of each server thread (a line shared by two functions
counted once), and each server's instructions per request.
"""

import collections
import glob
import re
import sys

# Functions of the layer (default): rategate's own, and those
# monomorphized over its types (the futures and services around it);
# LAYER_REGEX `governor` for tower_governor's layer.
LAYER = re.compile(r"rategate")
# Only the layered server runs a layer's own code.
OWN = re.compile(r"^<?(rategate|tower_governor|governor)::")
SERVER = "hyper::proto::h1::role::Server"


def load(path):
    """{function: {instruction address: times run}} from one thread's dump."""
    per_fn = collections.defaultdict(lambda: collections.defaultdict(int))
    function = None
    after_call = False
    with open(path) as dump:
        for text in dump:
            if text.startswith("fn="):
                function = text[3:].strip()
            elif text.startswith("calls="):
                # The next cost line is the call's inclusive cost.
                after_call = True
            elif text.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                fields = text.split()
                # positions: instr line; events: Ir (an instruction's Ir is
                # the times it ran)
                if len(fields) >= 3:
                    per_fn[function][int(fields[0], 16)] += int(fields[2])
    return per_fn


def hot(functions, requests):
    """The hot lines of `functions` ({address: times run} each), a line
    shared by two of them counted once."""
    most = collections.defaultdict(int)
    for addresses in functions:
        for address, count in addresses.items():
            most[address // 64] = max(most[address // 64], count)
    return sum(1 for count in most.values() if 2 * count >= requests)


def main():
    prefix, bare_requests, layered_requests = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    layer = re.compile(sys.argv[4]) if len(sys.argv) > 4 else LAYER
    servers = []
    for path in sorted(glob.glob(prefix + "-*")):
        per_fn = load(path)
        if any(SERVER in name for name in per_fn):
            layered = any(OWN.search(name) and sum(l.values()) for name, l in per_fn.items())
            servers.append((layered, per_fn))
    bare = [f for layered, f in servers if not layered]
    layered = [f for is_layered, f in servers if is_layered]
    if len(bare) != 1 or len(layered) != 1:
        sys.exit(f"expected one bare and one layered server thread, found {len(bare)} and {len(layered)}")
    bare, layered = bare[0], layered[0]
    rows = []
    for name, addresses in layered.items():
        if layer.search(name):
            count = hot([addresses], layered_requests)
            if count:
                rows.append((count, sum(addresses.values()) / layered_requests, name))
    rows.sort(reverse=True)
    for count, instructions, name in rows:
        print(f"{count:4} lines {instructions:6.0f} instructions  {name[:110]}")
    in_layer = hot([a for name, a in layered.items() if layer.search(name)], layered_requests)
    whole_layered = hot(layered.values(), layered_requests)
    whole_bare = hot(bare.values(), bare_requests)
    print(
        f"hot lines per request: the layer's functions {in_layer}; "
        f"layered server {whole_layered}, bare server {whole_bare} "
        f"({whole_layered - whole_bare:+})"
    )
    instructions = [
        sum(sum(addresses.values()) for addresses in per_fn.values()) / requests
        for per_fn, requests in ((layered, layered_requests), (bare, bare_requests))
    ]
    print(
        f"instructions per request: layered server {instructions[0]:.0f}, "
        f"bare server {instructions[1]:.0f} ({instructions[0] - instructions[1]:+.0f}; "
        "under callgrind the client is slower, so a server wakes for fewer "
        "requests at a time than at saturation)"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Records access logs from a real nginx with `limit_req`, for the replay
agreement test (tests/sim_replay_nginx.rs).

Starts nginx (Debian package `nginx`) on a free loopback port with one
location per configuration below, sends seeded bursty traffic to each
from twelve loopback addresses (127.0.0.2 to 127.0.0.13), bounded in
count (about 250 requests per configuration) and time (about 25 s), and
writes one log per configuration to tests/data/nginx/NAME.log in the
format LOG_FORMAT (combined, then $msec and $request_time).

    python3 scripts/record-nginx.py [--seed N] [--out DIR]
"""

import argparse
import http.client
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time

# name -> (limit_req_zone rate, limit_req options): the policy the test
# replays each log with is "leaky:RATE OPTIONS".
CONFIGS = {
    "nodelay": ("10r/s", "burst=5 nodelay"),
    "delay": ("5r/s", "burst=10"),
    "delay3": ("5r/s", "burst=10 delay=3"),
    "per-minute": ("30r/m", "burst=5"),
    "no-burst": ("2r/s", ""),
}

LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status '
    '$body_bytes_sent "$http_referer" "$http_user_agent" $msec $request_time'
)

CLIENTS = [f"127.0.0.{i}" for i in range(2, 14)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(root, port):
    zones = "\n".join(
        f"    limit_req_zone $binary_remote_addr zone={name}:1m rate={rate};"
        for name, (rate, _) in CONFIGS.items()
    )
    # Static files: served in the content phase, after limit_req's
    # preaccess phase (a `return` would answer before limit_req runs).
    locations = "\n".join(
        f"""        location /{name}/ {{
            limit_req zone={name} {options};
            access_log {root}/{name}.log timed;
        }}"""
        for name, (_, options) in CONFIGS.items()
    )
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {root}/tmp;
    proxy_temp_path {root}/tmp;
    fastcgi_temp_path {root}/tmp;
    uwsgi_temp_path {root}/tmp;
    scgi_temp_path {root}/tmp;
    log_format timed '{LOG_FORMAT}';
    access_log off;
{zones}
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
{locations}
    }}
}}
"""


def schedule(rng, duration):
    """(send time in seconds from the start, client) for one configuration:
    each client sends bursts of 1 to 12 requests, 0 to 40 ms apart, at
    random times."""
    plan = []
    for client in CLIENTS:
        t = rng.uniform(0, 2)
        while t < duration:
            for _ in range(rng.randint(1, 12)):
                plan.append((t, client))
                t += rng.uniform(0, 0.04)
            t += rng.expovariate(1 / 4)
    return sorted(plan)


def send(port, path, client):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(client, 0))
        conn.request("GET", path, headers={"User-Agent": "record-nginx"})
        conn.getresponse().read()
        conn.close()
    except OSError as e:
        print(f"request from {client} failed: {e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "nginx"))
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    root = tempfile.mkdtemp(prefix="rategate-nginx-")
    os.makedirs(f"{root}/tmp")
    for name in CONFIGS:
        os.makedirs(f"{root}/www/{name}")
        with open(f"{root}/www/{name}/index.html", "w") as f:
            f.write("ok\n")
    port = free_port()
    with open(f"{root}/nginx.conf", "w") as f:
        f.write(config(root, port))
    server = subprocess.Popen([nginx, "-p", root, "-c", f"{root}/nginx.conf"])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        rng = random.Random(args.seed)
        plans = [(name, schedule(rng, args.duration)) for name in CONFIGS]
        events = sorted((t, name, client) for name, plan in plans for t, client in plan)
        start = time.monotonic()
        threads = []
        for t, name, client in events:
            wait = start + t - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            thread = threading.Thread(target=send, args=(port, f"/{name}/", client))
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        # nginx writes a line when a request ends: let the last delays end.
        time.sleep(0.5)
    finally:
        server.terminate()
        server.wait()
    os.makedirs(args.out, exist_ok=True)
    for name in CONFIGS:
        shutil.copy(f"{root}/{name}.log", os.path.join(args.out, f"{name}.log"))
        with open(f"{root}/{name}.log") as f:
            lines = f.readlines()
        denied = sum(1 for line in lines if '" 503 ' in line)
        print(f"{name}: {len(lines)} requests, {denied} denied")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()

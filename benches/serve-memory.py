#!/usr/bin/env python3
"""What `gepa-lab serve` keeps in memory once its executions have ended.

    benches/serve-memory.py [--executions N] [--budget B] [--bin PATH]

Starts `serve` on a fresh database with the stand-in model (`sim:seed=1`), then runs N
executions of budget B (default 6 of 100,000, serve's default --max-budget) one after the other
on a 20-row dataset, waiting for each to end. It prints the resident memory (VmRSS) of serve
at start, at the highest point seen while each execution ran (sampled every 0.5 s), and after
each ended. Run it on an otherwise idle machine, once on each build you compare. Linux only
(it reads /proc).
"""
import argparse
import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.request
from functools import partial

print = partial(print, flush=True)  # one line per execution as it ends, also into a file

KEY = "memory-bench-key"


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def call(url, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        headers={"content-type": "application/json", "x-api-key": KEY},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def start_body(budget):
    rows = [
        {"input": {"review": f"review number {i}"},
         "expectedOutput": "positive" if i % 2 else "negative"}
        for i in range(20)
    ]
    return {
        "strategy": "RPM",
        "model": "gpt-4o-mini",
        "evaluator": json.dumps({"model": "gpt-4o-mini", "metric": "exact_match"}),
        "datasetColumns": ["review"],
        "minibatchSize": 4,
        "paretoSize": 16,
        "budget": budget,
        "dataset": rows,
        "prompt": "Is this review positive or negative? {review}",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=6)
    parser.add_argument("--budget", type=int, default=100_000)
    root = pathlib.Path(__file__).resolve().parent.parent
    default_bin = root / "target/release/gepa-lab"
    if not default_bin.exists():
        default_bin = root / "target/debug/gepa-lab"
    parser.add_argument("--bin", default=str(default_bin))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        serve = subprocess.Popen(
            [args.bin, "serve", "--bind", f"127.0.0.1:{port}",
             "--db", os.path.join(folder, "serve.sqlite3"),
             "--upstream", "sim:seed=1", "--api-key", f"{KEY}:1000000"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = serve.stdout.readline().strip().removeprefix("listening on ")
            base = url + "/api/v0/gepa"
            print(f"serve at start: {rss_kib(serve.pid) / 1024:.0f} MiB")
            for n in range(1, args.executions + 1):
                began = time.monotonic()
                evolution_id = call(base, "/start_execution", start_body(args.budget))["evolutionId"]
                peak = 0
                while True:
                    peak = max(peak, rss_kib(serve.pid))
                    status = call(base, f"/get_single_execution/{evolution_id}")["status"]
                    if status in ("completed", "failed"):
                        break
                    time.sleep(0.5)
                time.sleep(1)
                after = rss_kib(serve.pid)
                print(f"execution {n} ({status}, {time.monotonic() - began:.0f} s): "
                      f"peak {peak / 1024:.0f} MiB, after it ended {after / 1024:.0f} MiB")
        finally:
            serve.terminate()
            serve.wait(timeout=30)


if __name__ == "__main__":
    main()

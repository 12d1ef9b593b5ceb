#!/usr/bin/env python3
"""How fast `gepa-lab view` shows a folder of many runs.

    benches/view.py [--runs 10,100,1000] [--bin PATH] [--out DIR]

It runs the test suite's two-variant experiment once against `gepa-lab serve --upstream sim`
(a real run directory, report rendered), then for each count N fills a folder with N copies of
it (`run.json`, `results.json`, `index.html`; each copy with its own run id and date, spread
over 10 experiment names), starts `gepa-lab view` on it and measures:

- first page: wall time of `GET /` when the viewer has read nothing yet (every run.json and
  results.json parsed), median of 3 fresh viewers;
- again: `GET /` once more on the same viewer (summaries kept; each run directory stat'ed),
  median of 5;
- filtered: `GET /?q=exp-3&sort=best` on the warm viewer, median of 5;
- page size of `GET /`;
- browser: headless Chromium (Debian's package) loading `GET /` to its load event and dumping
  the DOM, minus the same for an empty page (Chromium's own start-up), median of 3.

Run it on an otherwise idle machine with a release binary (default target/release/gepa-lab).
"""
import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from functools import partial

print = partial(print, flush=True)

ROOT = pathlib.Path(__file__).resolve().parent.parent
KEY = "view-bench-key"


def start(command):
    """Starts a gepa-lab server process; its address from the first line it prints."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = process.stdout.readline().strip()
    if not first.startswith("listening on "):
        process.kill()
        sys.exit(f"{command[1]} did not start: {first!r}")
    return process, first.removeprefix("listening on ").rstrip("/")


def one_run(binary, work):
    """One finished run directory of the two-variant experiment, against serve's stand-in."""
    serve, url = start([binary, "serve", "--bind", "127.0.0.1:0", "--db", str(work / "db"),
                        "--upstream", "sim:seed=4", "--api-key", f"{KEY}:6000"])
    try:
        text = (ROOT / "tests/fixtures/run_experiments/two_variants.toml").read_text()
        text = text.replace("../data/tiny.csv", str(ROOT / "tests/fixtures/data/tiny.csv"))
        experiment = work / "experiment.toml"
        experiment.write_text(text)
        subprocess.run([binary, "run", "--backend", url, "--yes", "--poll-interval", "0.1",
                        "--out", str(work / "source"), str(experiment)],
                       env={"GEPA_LAB_EVOLUTION_KEY": KEY, "GEPA_LAB_INFERENCE_KEY": KEY,
                            "PATH": "/usr/bin:/bin"},
                       check=True, capture_output=True)
    finally:
        serve.kill()
    return next((work / "source" / "two-variants").iterdir())


def fill(folder, source, count):
    """`count` copies of the run in `source`, each with its own run id and date."""
    manifest = json.loads((source / "run.json").read_text())
    for i in range(count):
        name = f"exp-{i % 10}"
        run_id = f"20261127-{i:06d}-bench"
        dir = folder / name / run_id
        dir.mkdir(parents=True)
        manifest["run_id"] = run_id
        manifest["plan"]["name"] = name
        manifest["created_at"] = f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"
        (dir / "run.json").write_text(json.dumps(manifest))
        for file in ["results.json", "index.html"]:
            shutil.copy(source / file, dir / file)


def timed_get(url):
    started = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        body = response.read()
    return time.perf_counter() - started, len(body)


def browser_seconds(url):
    """Chromium loading `url` to its load event, DOM dumped, minus an empty page's time."""
    def load(target):
        with tempfile.TemporaryDirectory() as profile:
            started = time.perf_counter()
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                            f"--user-data-dir={profile}", "--dump-dom", target],
                           check=True, capture_output=True)
            return time.perf_counter() - started
    empty = statistics.median(load("about:blank") for _ in range(3))
    return statistics.median(load(url) for _ in range(3)) - empty


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="10,100,1000")
    parser.add_argument("--bin", default=str(ROOT / "target/release/gepa-lab"))
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    work = args.out or pathlib.Path(tempfile.mkdtemp(prefix="view-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    source = one_run(args.bin, work)
    has_chromium = shutil.which("chromium") is not None
    print("| runs | first page | again | filtered | page size | browser load |")
    print("|--:|--:|--:|--:|--:|--:|")
    for count in [int(n) for n in args.runs.split(",")]:
        folder = work / f"runs-{count}"
        if folder.exists():
            shutil.rmtree(folder)
        fill(folder, source, count)
        firsts = []
        for _ in range(3):
            viewer, url = start([args.bin, "view", str(folder), "--bind", "127.0.0.1:0"])
            firsts.append(timed_get(url + "/"))
            if len(firsts) < 3:
                viewer.kill()
                viewer.wait()
        again = statistics.median(timed_get(url + "/")[0] for _ in range(5))
        filtered = statistics.median(timed_get(url + "/?q=exp-3&sort=best")[0] for _ in range(5))
        browser = f"{browser_seconds(url + '/'):.2f} s" if has_chromium else "no chromium"
        viewer.kill()
        first = statistics.median(t for t, _ in firsts)
        size = firsts[0][1]
        print(f"| {count:,} | {first * 1000:.0f} ms | {again * 1000:.0f} ms | "
              f"{filtered * 1000:.0f} ms | {size / 1024:.0f} KiB | {browser} |")


if __name__ == "__main__":
    main()

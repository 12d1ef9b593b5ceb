#!/usr/bin/env python3
"""Runs at scale against `gepa-lab serve`'s stand-in model: memory, sizes and times.

    benches/scale.py [--rows 10000,100000,1000000] [--variants 100] [--seed N] [--bin PATH]
                     [--out DIR]

For each holdout size it writes a sentiment dataset of that many distinct holdout rows (plus 12
for the minibatch and Pareto splits), runs one experiment (`holdout = "rest"`, seed + top 1
replayed, budget 60, run seed 1) against a fresh `gepa-lab serve --upstream sim:seed=4`, then
re-renders its report with `gepa-lab report`. With --variants N it also runs one experiment
whose matrix has N variants on a 200-row holdout. For each run it prints one table row:

- rows/s: replay rows written (versions x holdout rows) per second of the whole run;
- peak to replay end: the run process's resident memory sampled every 50 ms until it logs
  `run_finished` (evolution, history and replay; not the report);
- run peak: the run process's peak resident memory (ru_maxrss, from wait4), which includes
  rendering the report at its end;
- report: wall time and peak memory of `gepa-lab report RUN_DIR` alone;
- run dir, events.jsonl, cache.jsonl, index.html: sizes on disk;
- page load: headless Chromium (Debian's package) loading index.html to its `load` event and
  dumping the DOM, minus the same for an empty page (Chromium's own start-up), median of 3.

Run it on an otherwise idle machine with a release binary (default target/release/gepa-lab,
which `cargo build --release` makes). Linux only. The answers are the stand-in's, labelled
SIMULATED in every report; this measures gepa-lab, not a model.
"""
import argparse
import csv
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial

print = partial(print, flush=True)

KEY = "scale-bench-key"
# A run seed with which the stand-in's evolution accepts a proposal, so that the seed and an
# evolved version are both replayed (2 replay rows per holdout row).
SEED = 1
SOURCE = pathlib.Path(__file__).resolve().parent.parent / "datasets" / "sentiment.csv"


def write_dataset(path, holdout_rows):
    """The project's 110 sentiment reviews, cycled, each made distinct by its number: 12 rows for
    the minibatch and Pareto splits, then the holdout."""
    with open(SOURCE, newline="") as source:
        reviews = list(csv.DictReader(source))
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["review", "label"])
        for i in range(holdout_rows + 12):
            row = reviews[i % len(reviews)]
            writer.writerow([f"{row['review']} (#{i})", row["label"]])


def experiment(path, data, variants):
    matrix = "".join(
        f"\n[[variants]]\nname = \"v{n:03}\"\nevolution = {{ budget = {60 + n % 5} }}\n"
        for n in range(variants)
    )
    path.write_text(f"""name = "scale"

[prompt]
seed = \"\"\"Review: {{review}}
Answer with one of: positive, negative\"\"\"

[dataset]
file = "{data}"
inputs = ["review"]
expected = "label"
minibatch = 4
pareto = 8
holdout = "rest"

[evolution]
strategy = "RPM"
model = "gpt-4o-mini"
budget = 60

[evaluator]
model = "gpt-4o-mini"
metric = "exact_match"

[replay]
models = ["sim-text"]
top = 1
scorer = "exact_match_ci"
max_tokens = 8
concurrency = 16
{matrix}""")


def rss_mib(pid):
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measured(command, cwd=None, env=None, before=None):
    """(seconds, peak MiB, peak MiB before `before()` turned true, stdout, stderr, exit code) of
    `command`: the whole peak read by wait4, the earlier one sampled from /proc every 50 ms."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, cwd=cwd, env=env)
    # Drain the pipes in threads so that a chatty child never blocks on a full pipe.
    chunks = {"out": [], "err": []}
    def drain(stream, into):
        for line in iter(stream.readline, b""):
            into.append(line)
    early = {"peak": 0.0, "done": False}
    def sample():
        while process.poll() is None and not early["done"]:
            if before is not None and before():
                early["done"] = True
                break
            early["peak"] = max(early["peak"], rss_mib(process.pid))
            time.sleep(0.05)
    threads = [threading.Thread(target=drain, args=(process.stdout, chunks["out"])),
               threading.Thread(target=drain, args=(process.stderr, chunks["err"])),
               threading.Thread(target=sample)]
    for thread in threads:
        thread.start()
    _, status, usage = os.wait4(process.pid, 0)
    early["done"] = True
    for thread in threads:
        thread.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    return (seconds, usage.ru_maxrss / 1024, early["peak"], b"".join(chunks["out"]).decode(),
            b"".join(chunks["err"]).decode(), process.returncode)


def finished(out_dir):
    """Whether the run under `out_dir` has written its `run_finished` event."""
    def check():
        for events in out_dir.glob("scale/*/events.jsonl"):
            with open(events, "rb") as file:
                file.seek(max(0, events.stat().st_size - 4096))
                if b'"event":"run_finished"' in file.read():
                    return True
        return False
    return check


def start_serve(binary, work):
    log = open(work / "serve.log", "w")
    serve = subprocess.Popen(
        [binary, "serve", "--bind", "127.0.0.1:0", "--db", str(work / "serve.sqlite3"),
         "--upstream", "sim:seed=4", "--api-key", f"{KEY}:1000000000"],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
    first = serve.stdout.readline().decode().strip()
    if not first.startswith("listening on "):
        serve.kill()
        sys.exit(f"serve did not start: {first!r}; see {work / 'serve.log'}")
    return serve, first.removeprefix("listening on ")


def page_load_seconds(page, work):
    def load(url):
        profile = tempfile.mkdtemp(dir=work)
        started = time.monotonic()
        subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--dump-dom", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True)
        return time.monotonic() - started
    blank = work / "blank.html"
    blank.write_text("<!doctype html><title>blank</title>")
    try:
        empty = statistics.median(load(f"file://{blank}") for _ in range(3))
        full = statistics.median(load(f"file://{page}") for _ in range(3))
    except subprocess.TimeoutExpired:
        return "> 300 s"
    return f"{full - empty:.2f} s"


def size(path):
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def mib(n):
    return f"{n / 2**20:.1f} MiB"


def one_run(binary, work, label, holdout, variants, seed):
    data = work / f"{label}.csv"
    write_dataset(data, holdout)
    file = work / f"{label}.toml"
    experiment(file, data, variants)
    serve, url = start_serve(binary, work)
    env = dict(os.environ, GEPA_LAB_EVOLUTION_KEY=KEY, GEPA_LAB_INFERENCE_KEY=KEY)
    try:
        seconds, peak, replay_peak, out, err, code = measured(
            [binary, "run", "--backend", url, "--yes", "--poll-interval", "0.1", "--seed",
             str(seed), "--out", str(work / label), str(file)],
            env=env, before=finished(work / label))
    finally:
        serve.kill()
        serve.wait()
    if code != 0:
        print(f"{label}: run exited {code}\n{err[-3000:]}")
        return None
    run_dir = next((work / label / "scale").iterdir())
    replay_rows = sum(1 for _ in open(run_dir / "replay.csv", "rb")) - 1
    report_seconds, report_peak, _, _, report_err, report_code = measured(
        [binary, "report", str(run_dir)])
    if report_code not in (0, 4, 6):
        print(f"{label}: report exited {report_code}\n{report_err[-2000:]}")
    page = run_dir / "index.html"
    load = page_load_seconds(page, work) if shutil.which("chromium") else "(no chromium)"
    return [label, f"{replay_rows:,}", f"{replay_rows / seconds:,.0f}", f"{seconds:.1f} s",
            f"{replay_peak:.0f} MiB", f"{peak:.0f} MiB", f"{report_seconds:.1f} s", f"{report_peak:.0f} MiB",
            mib(size(run_dir)), mib(size(run_dir / "events.jsonl")),
            mib(size(run_dir / "cache.jsonl")), mib(size(page)), load]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,100000,1000000",
                        help="holdout sizes, comma-separated")
    parser.add_argument("--variants", type=int, default=100,
                        help="variants of the matrix run (0 for none)")
    parser.add_argument("--bin", default="target/release/gepa-lab")
    parser.add_argument("--seed", type=int, default=SEED,
                        help="the runs' --seed (the default evolves a g1 that is replayed)")
    parser.add_argument("--out", help="keep the run directories here (default: a temp folder)")
    args = parser.parse_args()
    binary = str(pathlib.Path(args.bin).resolve())
    work = pathlib.Path(args.out or tempfile.mkdtemp(prefix="gepa-lab-scale-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    header = ["run", "replay rows", "rows/s", "run time", "peak to replay end", "run peak",
              "report time",
              "report peak", "run dir", "events.jsonl", "cache.jsonl", "index.html",
              "page load"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    runs = [(f"holdout {int(n):,}", int(n), 0) for n in args.rows.split(",") if n]
    if args.variants:
        runs.append((f"{args.variants} variants x 200", 200, args.variants))
    for label, holdout, variants in runs:
        slug = label.replace(" ", "-").replace(",", "")
        row = one_run(binary, work, slug, holdout, variants, args.seed)
        if row:
            row[0] = label
            print("| " + " | ".join(row) + " |")
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The quality benchmark: does the offline default path make prompts better, and how often?

    scripts/quality-bench.py [--runs N] [--out DIR] [--bin PATH] [EXPERIMENT.toml ...]
    scripts/quality-bench.py --summarise DIR     # the table again from DIR's runs

Runs each example experiment (default: the three in experiments/ that replay on embedded
models) N times (default 3) with `gepa-lab run --backend local`, each time with a different
engine seed: a copy of the file with `custom_id = "<name>-q<seed>"`, since the local engine
seeds its random choices from the request, customId included. The copies live in a temporary
folder with their paths made absolute; nothing in the repository is changed.

Per run it records, from the run directory's results.json and run.json only (so every number
can be checked there): the seed's and the best version's holdout means on the same rows, their
paired difference with its 95% interval, the exact McNemar p and verdict, the evolved versions
accepted, the calls the evolution spent, the wall time and the peak memory (RSS) of the run.

It prints a Markdown table and a tally (significantly better / not significant / significantly
worse / nothing evolved) and writes both, with the raw rows as JSON lines, to DIR (default
reports/quality-bench/<timestamp>/). Run it on an otherwise idle machine: the wall times are
only meaningful then. Needs the embedded models (scripts/setup-model.sh qwen2.5-coder-0.5b
qwen2.5-coder-1.5b) and a built binary (default target/release/gepa-lab, else
target/debug/gepa-lab).
"""
import argparse
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_EXPERIMENTS = ["support_tickets.toml", "sentiment.toml", "extraction.toml"]


def binary(given):
    if given:
        return pathlib.Path(given)
    for profile in ("release", "debug"):
        path = ROOT / "target" / profile / "gepa-lab"
        if path.exists():
            return path
    sys.exit("quality-bench: no gepa-lab binary; run `cargo build --release` first")


def seeded_copy(experiment, seed, folder):
    """The experiment with absolute paths and its own customId, written to `folder`."""
    text = experiment.read_text()
    base = experiment.parent

    def absolute(match):
        return f'{match.group(1)}"{(base / match.group(2)).resolve()}"'

    text = re.sub(r'^(\s*(?:file|seed_file)\s*=\s*)"([^"]+)"', absolute, text, flags=re.M)
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, flags=re.M).group(1)
    custom_id = f"{name}-q{seed}"[:50]
    if re.search(r"^\s*custom_id\s*=", text, flags=re.M):
        text = re.sub(r'^(\s*custom_id\s*=\s*)"[^"]*"', rf'\1"{custom_id}"', text, flags=re.M)
    else:
        text = re.sub(r"^\[evolution\]\s*$", f'[evolution]\ncustom_id = "{custom_id}"', text,
                      count=1, flags=re.M)
    copy = folder / f"{experiment.stem}-q{seed}.toml"
    copy.write_text(text)
    return copy, name


def run_once(exe, copy, out):
    """Runs the experiment; returns (exit code, wall seconds, peak RSS in MiB, output)."""
    log = tempfile.TemporaryFile()
    started = time.monotonic()
    child = subprocess.Popen(
        [str(exe), "run", str(copy), "--backend", "local", "--out", str(out), "--yes", "--new"],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    log.seek(0)
    output = log.read().decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    return code, wall, usage.ru_maxrss / 1024, output


def newest_run_dir(out, name):
    runs = sorted((out / name).glob("*/results.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else None


def summarise(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    manifest = json.loads((run_dir / "run.json").read_text())
    execution = results["executions"][0]
    record = manifest["executions"][0]
    headline = results.get("headline")
    seed_version = next((v for v in results["versions"] if v.get("is_seed")), None)
    seed_scores = (seed_version or {}).get("scores") or [{}]
    custom_id = record.get("custom_id", "")
    row = {
        # The seed's holdout mean on its own rows; replaced below by the paired one.
        "seed_score": seed_scores[0].get("mean"),
        "best_version": execution.get("best_version"),
        "accepted": max(0, (execution.get("generations") or 1) - 1),
        "calls_spent": record.get("budget_used"),
        "budget": execution.get("budget"),
        "holdout_rows": execution.get("holdout_rows"),
        "status": execution.get("status"),
        "custom_id": custom_id,
    }
    if headline:
        row.update({
            "paired_rows": headline["rows"],
            "seed_score": headline["mean_a"],
            "best_score": headline["mean_b"],
            "difference": headline["difference"],
            "ci_low": headline.get("ci_low"),
            "ci_high": headline.get("ci_high"),
            "p_value": headline.get("p_value"),
            "verdict": headline["verdict"],
        })
    return row


def outcome(row):
    verdict = row.get("verdict")
    if row.get("best_version") in (None, "seed") or verdict is None:
        return "nothing evolved"
    if verdict == "better":
        return "better (significant)"
    if verdict == "worse":
        return "worse (significant)"
    return "not significant"


def fmt(value, digits=3, signed=False):
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiments", nargs="*", type=pathlib.Path)
    parser.add_argument("--runs", type=int, default=3, choices=range(1, 21), metavar="N")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--bin")
    parser.add_argument("--summarise", type=pathlib.Path, metavar="DIR",
                        help="rebuild the table from the runs of an earlier benchmark in DIR")
    args = parser.parse_args()
    if args.summarise:
        rows = []
        for line in (args.summarise / "quality.jsonl").read_text().splitlines():
            raw = json.loads(line)
            row = {"experiment": raw["experiment"], "engine_seed": raw.get("engine_seed"),
                   "exit": raw["exit"], "wall_s": raw["wall_s"],
                   "peak_rss_mib": raw["peak_rss_mib"]}
            if raw.get("run_dir"):
                row["run_dir"] = raw["run_dir"]
                row.update(summarise(pathlib.Path(raw["run_dir"])))
                # The engine seed is in the run's customId, `<name>-q<seed>`.
                tail = row["custom_id"].rsplit("-q", 1)[-1]
                row["engine_seed"] = int(tail) if tail.isdigit() else row["engine_seed"]
            row["outcome"] = outcome(row)
            rows.append(row)
        write_table(rows, args.summarise)
        return
    exe = binary(args.bin)
    experiments = args.experiments or [ROOT / "experiments" / f for f in DEFAULT_EXPERIMENTS]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = (args.out or ROOT / "reports" / "quality-bench" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for experiment in experiments:
            for seed in range(1, args.runs + 1):
                copy, name = seeded_copy(experiment.resolve(), seed, pathlib.Path(folder))
                print(f"quality-bench: {experiment.name} seed {seed} ...", flush=True)
                code, wall, rss, output = run_once(exe, copy, out / "runs")
                run_dir = newest_run_dir(out / "runs", name)
                row = {"experiment": experiment.name, "engine_seed": seed, "exit": code,
                       "wall_s": round(wall, 1), "peak_rss_mib": round(rss)}
                if run_dir is None:
                    row["error"] = output.strip().splitlines()[-1:] or ["no run directory"]
                else:
                    row["run_dir"] = str(run_dir)
                    row.update(summarise(run_dir))
                row["outcome"] = outcome(row)
                rows.append(row)
                with open(out / "quality.jsonl", "a") as raw:
                    raw.write(json.dumps(row) + "\n")
                print(f"  {row['outcome']}: seed {fmt(row.get('seed_score'))} best "
                      f"{fmt(row.get('best_score'))} ({row.get('best_version')}), "
                      f"{row['wall_s']} s, {row['peak_rss_mib']} MiB", flush=True)
    write_table(rows, out)


def write_table(rows, out):
    lines = [
        "| experiment | engine seed | holdout rows | seed score | best | best score | difference (95% CI)"
        " | p | outcome | accepted | calls spent | wall | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        interval = (f"{fmt(r.get('difference'), signed=True)} ({fmt(r.get('ci_low'), signed=True)}"
                    f" to {fmt(r.get('ci_high'), signed=True)})") if r.get("difference") is not None else "–"
        spent = f"{r['calls_spent']} of {r['budget']}" if r.get("calls_spent") is not None else "–"
        lines.append(
            f"| {r['experiment']} | {r['engine_seed']} | {r.get('paired_rows', r.get('holdout_rows', '–'))}"
            f" | {fmt(r.get('seed_score'))} | {r.get('best_version') or '–'} | {fmt(r.get('best_score'))}"
            f" | {interval}"
            f" | {fmt(r.get('p_value'))} | {r['outcome']} | {r.get('accepted', '–')} | {spent}"
            f" | {r['wall_s'] / 60:.1f} min | {r['peak_rss_mib']} MiB |")
    tally = {}
    for r in rows:
        tally.setdefault(r["experiment"], {}).setdefault(r["outcome"], 0)
        tally[r["experiment"]][r["outcome"]] += 1
    lines.append("")
    for experiment, counts in tally.items():
        parts = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
        lines.append(f"- {experiment}: {parts} (of {sum(counts.values())} runs)")
    table = "\n".join(lines)
    (out / "quality.md").write_text(table + "\n")
    print()
    print(table)
    print(f"\nquality-bench: {out}/quality.md")


if __name__ == "__main__":
    main()

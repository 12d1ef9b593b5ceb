#!/usr/bin/env python3
"""Re-renders existing run directories with a gepa-lab binary and says where the numbers moved.

    scripts/rerender-check.py [--bin PATH] [--max-replay-mb N] FOLDER...

For every run directory under the folders (one holding `run.json` and `results.json`), it copies
the directory to a temporary folder (without `cache.jsonl` and the rendered files), runs
`gepa-lab report` on the copy, and compares the new `results.json` and `summary.md` with the
old ones; the generator's version is left out of the comparison. It prints one line per run
whose numbers or summary differ, with the first differing fields, and a count at the end. The
run directories themselves are never written.

Use it after a change to the report's code: a report re-rendered from the same run directory
should say the same thing unless the change meant it to. Exit status 1 when any run differs or
fails to render.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def differences(old, new, path=""):
    """The paths (`.a.b[2]`) where two JSON values differ, with both values."""
    if type(old) is not type(new):
        return [f"{path} {old!r} != {new!r}"]
    if isinstance(old, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += differences(old.get(key), new.get(key), f"{path}.{key}")
        return out
    if isinstance(old, list):
        if len(old) != len(new):
            return [f"{path} has {len(old)} items, now {len(new)}"]
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if old == new else [f"{path} {old!r} != {new!r}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=pathlib.Path)
    parser.add_argument("--bin", default="target/release/gepa-lab")
    parser.add_argument("--max-replay-mb", type=int, default=50,
                        help="skip runs whose replay.csv is larger (default 50)")
    args = parser.parse_args()
    runs = sorted({p.parent for folder in args.folders for p in folder.rglob("results.json")
                   if (p.parent / "run.json").exists()})
    same = differ = failed = skipped = 0
    for run in runs:
        replay = run / "replay.csv"
        if replay.exists() and replay.stat().st_size > args.max_replay_mb * 1_000_000:
            skipped += 1
            continue
        with tempfile.TemporaryDirectory() as temp:
            copy = pathlib.Path(temp) / "run"
            shutil.copytree(run, copy, ignore=shutil.ignore_patterns(
                "cache.jsonl", "replay.parquet", "charts", "index.html", "results.json",
                "summary.md"))
            done = subprocess.run([args.bin, "report", str(copy)], capture_output=True, text=True)
            if done.returncode != 0:
                failed += 1
                print(f"FAILED {run}: {done.stderr.strip()[:300]}")
                continue
            old = json.loads((run / "results.json").read_text())
            new = json.loads((copy / "results.json").read_text())
            for results in (old, new):
                results.pop("generator", None)
            found = differences(old, new)
            summary = run / "summary.md"
            if summary.exists() and summary.read_text() != (copy / "summary.md").read_text():
                found.append("summary.md differs")
            if found:
                differ += 1
                print(f"DIFFERS {run}: {'; '.join(found[:4])}")
            else:
                same += 1
    print(f"{same} the same, {differ} different, {failed} failed, {skipped} skipped as too large")
    sys.exit(1 if differ or failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a stricter acceptance rule would cost: the evidence each kept child was accepted on,
read back from quality-benchmark runs, against what the holdout later said.

    scripts/acceptance-audit.py DIR...       # DIR: a quality-bench --out folder (quality.jsonl)
    scripts/acceptance-audit.py --self-test  # the counts on a made-up run

The local engine keeps a child judged on the Pareto rows (a glossary, a layout, a set of
demonstrations) when it scores higher there in sum and the one-sided sign test of the rows it
wins against the rows it loses gives p <= 0.25 (`PARETO_ACCEPT_P`); a child written by
reflection is kept on its minibatch of 4 to 6 rows, then scored on every Pareto row. Both are
judged on few rows, so both admit chance winners. A stricter rule refuses some of them, and
also some children that the holdout shows were real gains. This script counts both sides from
the runs' own records (`iterations.jsonl`, `history.csv`) and the benchmark's verdicts
(`quality.jsonl`):

- for each p threshold, the runs whose best version descends through a child judged on the
  Pareto rows and accepted at a p above it, split by the holdout's verdict: a run significantly
  better there is a gain the stricter rule would not have reached by that path;
- the children written by reflection that scored below their parent on the Pareto rows once
  kept, and the calls the iterations that chose one of them as parent spent.

It prints a Markdown report; nothing is changed.
"""
import argparse
import csv
import json
import math
import pathlib
import sys
import tempfile

THRESHOLDS = [0.25, 0.15, 0.10, 0.05, 0.01]
# Run records are small; a larger file is not a run directory's.
MAX_BYTES = 64 * 1024 * 1024
csv.field_size_limit(MAX_BYTES)


def sign_test(wins, losses):
    """The engine's one-sided sign test: the chance of at least `wins` heads in
    `wins + losses` fair flips (1 when nothing changed)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return min(1.0, sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n)


def wins_and_losses(parent, child):
    return (sum(c > p for p, c in zip(parent, child)),
            sum(c < p for p, c in zip(parent, child)))


def read_text(path):
    if path.stat().st_size > MAX_BYTES:
        raise SystemExit(f"{path}: larger than {MAX_BYTES} bytes; not a run record")
    return path.read_text(encoding="utf-8")


def pareto_scores(run_dir):
    """Each generation's scores on the Pareto rows, from history.csv."""
    rows = csv.DictReader(read_text(run_dir / "history.csv").splitlines(keepends=True))
    return {int(r["generation"]): [float(x) for x in r["pareto_scores"].split()]
            for r in rows if r.get("pareto_scores")}


def iteration_records(run_dir):
    """The run's iteration records, in order."""
    return [json.loads(line) for line in read_text(run_dir / "iterations.jsonl").splitlines()
            if line.strip()]


def accepted_children(iterations):
    """Every kept child among the iteration records: its generation, parent, kind and the p of
    its acceptance evidence (the sign test on the rows it was judged on)."""
    children = {}
    for record in iterations:
        outcome = record.get("outcome") or {}
        if record.get("kind") != "mutation" or outcome.get("status") != "accepted":
            continue
        wins, losses = wins_and_losses(record["parent_scores"], record["child_scores"])
        children[outcome["generation"]] = {
            "parent": record["parent"],
            "kind": record.get("written_from", "reflection"),
            "p": sign_test(wins, losses),
        }
    return children


def lineage(children, generation):
    """The generations of the kept children from the seed to `generation`, newest first."""
    line = []
    while generation in children:
        line.append(generation)
        generation = children[generation]["parent"]
    return line


def audit(folders):
    runs = []
    for folder in folders:
        for line in read_text(folder / "quality.jsonl").splitlines():
            row = json.loads(line)
            run_dir = pathlib.Path(row.get("run_dir") or "")
            if not (run_dir / "iterations.jsonl").exists() or not (run_dir / "history.csv").exists():
                continue
            iterations = iteration_records(run_dir)
            children = accepted_children(iterations)
            scores = pareto_scores(run_dir)
            best = row.get("best_version") or ""
            runs.append({
                "name": f"{row['experiment']} seed {row.get('engine_seed')} ({folder.name})",
                "better": row.get("verdict") == "better",
                "best": lineage(children, int(best[1:])) if best.startswith("g") else None,
                "children": children,
                "iterations": iterations,
                "scores": scores,
            })
    return runs


def reflection_children_below_parent(run):
    """Kept children written by reflection whose Pareto score sum is below their parent's."""
    scores = run["scores"]
    return {g for g, c in run["children"].items()
            if c["kind"] == "reflection" and g in scores and c["parent"] in scores
            and sum(scores[g]) < sum(scores[c["parent"]])}


def calls(record):
    cost = record.get("cost") or {}
    return cost.get("task_calls", 0) + cost.get("reflection_calls", 0)


def report(runs):
    out = []
    evolved = [r for r in runs if r["best"]]
    better = [r for r in evolved if r["better"]]
    out.append(f"{len(runs)} runs read; {len(evolved)} ended with an evolved best version, "
               f"{len(better)} of them significantly better on the holdout.\n")
    out.append("| Pareto acceptance at p <= | significant runs whose best descends through a "
               "child accepted above it | other runs with an evolved best, the same |")
    out.append("|---|---|---|")
    for threshold in THRESHOLDS:
        def above(run):
            return any(run["children"][g]["kind"] != "reflection"
                       and run["children"][g]["p"] > threshold for g in run["best"])
        hit = [r["name"] for r in better if above(r)]
        other = sum(1 for r in evolved if not r["better"] and above(r))
        out.append(f"| {threshold:.2f} | {len(hit)} of {len(better)}"
                   f"{': ' + '; '.join(hit) if hit else ''} | {other} |")
    kept = sum(1 for r in runs for c in r["children"].values() if c["kind"] == "reflection")
    below = [(r, reflection_children_below_parent(r)) for r in runs]
    n_below = sum(len(b) for _, b in below)
    in_best = sum(1 for r, b in below if r["best"] and b & set(r["best"]))
    total = sum(calls(i) for r in runs for i in r["iterations"])
    from_below = sum(calls(i) for r, b in below for i in r["iterations"] if i.get("parent") in b)
    out.append("")
    out.append(f"Children written by reflection and kept on their minibatch: {kept}; "
               f"{n_below} of them scored below their parent on the Pareto rows; "
               f"{in_best} best version(s) descend through one. Iterations that chose one as "
               f"parent spent {from_below} of the runs' {total} calls.")
    return "\n".join(out)


def self_test():
    """A made-up run: a layout kept at p = 0.25 on the best's lineage, a reflection child that
    scores below its parent on the Pareto rows and is then a parent once."""
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        run_dir = folder / "run"
        run_dir.mkdir()
        with open(run_dir / "history.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["variant", "evolution_id", "generation", "score", "prompt", "pareto_scores"])
            w.writerow(["", "e", 0, 0.5, "seed", "1 0 0 1"])
            w.writerow(["", "e", 1, 1.0, "layout", "1 1 1 1"])
            w.writerow(["", "e", 2, 0.25, "rule", "1 0 0 0"])
        iterations = [
            {"kind": "mutation", "iteration": 1, "parent": 0, "written_from": "layout",
             "parent_scores": [1, 0, 0, 1], "child_scores": [1, 1, 1, 1],
             "outcome": {"status": "accepted", "generation": 1},
             "cost": {"task_calls": 4, "reflection_calls": 0}},
            {"kind": "mutation", "iteration": 2, "parent": 0,
             "parent_scores": [0, 0], "child_scores": [1, 0],
             "outcome": {"status": "accepted", "generation": 2},
             "cost": {"task_calls": 8, "reflection_calls": 1}},
            {"kind": "mutation", "iteration": 3, "parent": 2,
             "parent_scores": [0, 0], "child_scores": [0, 0],
             "outcome": {"status": "rejected"},
             "cost": {"task_calls": 4, "reflection_calls": 1}},
        ]
        (run_dir / "iterations.jsonl").write_text(
            "\n".join(json.dumps(i) for i in iterations) + "\n")
        (folder / "quality.jsonl").write_text(json.dumps({
            "experiment": "made_up.csv", "engine_seed": 1, "run_dir": str(run_dir),
            "best_version": "g1", "verdict": "better"}) + "\n")
        text = report(audit([folder]))
        print(text)
        # The layout won 2 rows and lost none: p = 0.25, kept at 0.25, above 0.15.
        assert "| 0.25 | 0 of 1 | 0 |" in text, text
        assert "| 0.15 | 1 of 1: made_up.csv seed 1" in text, text
        assert "| 0.10 | 1 of 1" in text, text
        assert "1 of them scored below their parent" in text, text
        assert "0 best version(s)" in text, text
        assert "spent 5 of the runs' 18 calls" in text, text
        print("self-test: passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=pathlib.Path, metavar="DIR")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if not args.folders:
        parser.error("name at least one quality-bench output folder")
    for folder in args.folders:
        if not (folder / "quality.jsonl").exists():
            sys.exit(f"{folder}: no quality.jsonl; name a quality-bench --out folder")
    print(report(audit(args.folders)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The quality benchmark: does the offline default path make prompts better, and how often?

    scripts/quality-bench.py [--runs N] [--out DIR] [--bin PATH] [EXPERIMENT.toml ...]
    scripts/quality-bench.py --datasets CSV... [--runs N | --seeds SEED...] [--out DIR] [--bin PATH]
    scripts/quality-bench.py --summarise DIR     # the table again from DIR's runs
    scripts/quality-bench.py --self-test         # the quoted-pairs measure against the shared tool

Experiments. Runs each experiment file (default: the three in experiments/ that replay on
embedded models) N times (default 3) with `gepa-lab run --backend local --seed SEED`, SEED
1 to N (or each of `--seeds`): the run's seed, from which the engine's random choices and the
models' sampling seeds are derived, so that a row of the table can be run again. Each run uses a
copy of the file with `custom_id = "<name>-q<seed>"`, by which its run directory is found. The
copies live in a temporary folder with their paths made absolute; nothing in the repository is
changed.

Datasets (`--datasets`). For each CSV, `gepa-lab init --dataset CSV` writes the experiment
(splits, seed prompt, scorer and budget as init chooses them) into DIR/inits-<timestamp>/, with
what init printed (its probe of each model, the model chosen) beside it as <name>.init.txt, and
that experiment runs N times as above. The copy differs from what init wrote by its custom_id
line only: this measures what a user gets from `init` and `run` without editing anything. A
later round can run the same files again with `--inits DIR/inits-<timestamp>` (init's probe
takes minutes per dataset).

Per run it records, from that run's own directory only (found by its customId among the
directories the run created, so a run that fails never borrows an earlier run's numbers):
the dataset's kind (binary, N labels, extraction or free text, by init's rule on the CSV), the
holdout rows, the majority-label baseline of a classification on those rows, the seed's and the
best version's holdout means on the same rows, their paired difference with its 95% interval,
the exact McNemar p and verdict, whether the best version scores significantly above the
majority baseline (the report's test of it against always answering that label, row by row),
the evolved versions accepted, the quoted word pairs (below),
the calls the evolution spent, the wall time and the peak memory (RSS) of the run.

Each run has one outcome: better (significant), not significant, worse (significant), nothing
evolved (no evolved version accepted, or the seed kept as best), or failed (a non-zero exit, or
no results.json; the last error line is shown).

Quoted word pairs: word pairs that an evolved prompt of the run's history adds (absent from the
seed's words and stop words) and that occur in only 1 to 3 of the dataset's inputs: words tied
to a few examples rather than to the task. The same measure as /work/shared/tools/quotes_inputs.py,
implemented here (`quoted_pairs`) so the benchmark needs nothing outside the repository;
`--self-test` checks that both agree. The pairs themselves are in the raw JSON lines. In
brackets, how many of them are the engine's layout: no prompt holds them within one line the
engine did not write itself (the last word of a line and the first of the next, as the `Rules:`
heading above a rule that begins "When"; or a pair of the engine's own headings, as "is about"
of the glossary's `What each answer is about:`), which the measure counts and the engine's
guard, reading a line at a time without its own lines, does not.

Output: a Markdown table (one row per run), a tally per dataset and over all runs, and the
median difference, written to reports/quality-bench/<YYYY-MM-DD>.md (-2, -3... when that exists)
under a header with the command, the commit, the binary, the date and nproc; the raw rows as JSON
lines, the same table (quality.md) and the run directories go to DIR (default
reports/quality-bench/<timestamp>/). `--summarise DIR` rebuilds DIR/quality.md from DIR's raw
lines and run directories. Run it on an otherwise idle machine: the wall times are only
meaningful then. Needs the embedded models (scripts/setup-model.sh qwen2.5-coder-0.5b
qwen2.5-coder-1.5b) and a built binary (default target/release/gepa-lab, else
target/debug/gepa-lab).
"""
import argparse
import csv
import datetime
import json
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_EXPERIMENTS = ["support_tickets.toml", "sentiment.toml", "extraction.toml"]
SHARED_QUOTES_TOOL = pathlib.Path("/work/shared/tools/quotes_inputs.py")
# The engine's label set (crates/engine/src/labels.rs), which init applies to the CSV.
MAX_LABELS = 200
LABEL_CHARS = 64
OUTCOMES = ["better (significant)", "not significant", "worse (significant)",
            "nothing evolved", "failed"]


# --- The quoted-pairs measure (as /work/shared/tools/quotes_inputs.py) -------------------------

STOP_WORDS = set(
    "a an the is are was were be been of in on at to for from by with and or not no there it its"
    " this that these those when if then as any all some every each do does did has have had i"
    " you he she we they me my your our their his her them us".split())


def words(text):
    return re.findall(r"[a-z0-9@#']+", text.lower())


def pairs(word_list):
    return {(a, b) for a, b in zip(word_list, word_list[1:])}


# The block of worked examples the engine writes into a prompt (crates/engine/src/demonstrations.rs):
# rows shown by design, which the measure leaves out ("outside demonstrations").
DEMO_HEADING = "Examples of inputs with their correct answers:"
DEMO_END = "End of examples."
FRAME_WORDS = set("rules answer answers input inputs label labels example examples about".split())
# The commonest English words, which the engine's quote guard lets pass alone (the shared
# measure counts them as rare words when they are in 1 or 2 inputs of a small file).
COMMON_ENGLISH = {line.strip() for line in
                  (ROOT / "crates" / "engine" / "src" / "common_words.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#")}


def without_demonstrations(prompt):
    """The prompt without its block of demonstrations, and how many it shows."""
    lines = prompt.split("\n")
    heads = [i for i, line in enumerate(lines) if line.strip() == DEMO_HEADING]
    if not heads:
        return prompt, 0
    start = heads[0]
    ends = [i for i in range(start, len(lines)) if lines[i].strip() == DEMO_END]
    if not ends:
        return prompt, 0
    shown = sum(1 for line in lines[start:ends[0]] if line.startswith("Answer: "))
    return "\n".join(lines[:start] + lines[ends[0] + 1:]), shown


def rare_words(prompts, rows, columns):
    """The single words of 5+ letters the evolved prompts add (absent from the seed, not a stop
    or frame word) that occur in only 1 or 2 rows' inputs: the shared tool's second count."""
    seed_words = set(words(prompts[0])) if prompts else set()
    rows_with = {}
    for row in rows:
        for word in set(words(" ".join(row.get(c) or "" for c in columns))):
            rows_with[word] = rows_with.get(word, 0) + 1
    rare = set()
    for prompt in prompts[1:]:
        for word in set(words(prompt)):
            if (len(word) >= 5 and word not in seed_words and word not in STOP_WORDS
                    and word not in FRAME_WORDS and 1 <= rows_with.get(word, 0) <= 2):
                rare.add(word)
    return sorted(rare)


def quoted_pairs(prompts, rows, columns):
    """The pairs the evolved prompts (all but the first, the seed) add that occur in the inputs
    of 1 to 3 rows, as sorted "word word" strings. `rows` are dicts, `columns` the inputs."""
    seed_words = set(words(prompts[0])) if prompts else set()
    rows_with = {}
    for row in rows:
        for pair in pairs(words(" ".join(row.get(c) or "" for c in columns))):
            rows_with[pair] = rows_with.get(pair, 0) + 1
    known = seed_words | STOP_WORDS
    flagged = set()
    for prompt in prompts[1:]:
        for pair in pairs(words(prompt)):
            if pair[0] in known and pair[1] in known:
                continue
            if 1 <= rows_with.get(pair, 0) <= 3:
                flagged.add(" ".join(pair))
    return sorted(flagged)


# The lines the engine writes into prompts itself, whatever the dataset (the engine's
# `reflection::OWN_WORDING`; `--self-test` checks they are still there): its headings, fixed
# before any row is seen.
ENGINE_LINES = {"What each answer is about:", "Rules:", "Answer with the label only."}


def across_lines(prompts, flagged):
    """Of the `flagged` pairs ("word word"), those that are the engine's layout: no evolved
    prompt (all but the first) holds them within one line that the engine did not write
    itself. That is the last word of a line and the first of the next, such as the engine's
    `Rules:` heading and a rule that begins "When" (`rules when`), and the pairs of the
    engine's own headings ("is about" of `What each answer is about:`, which an input may
    hold). The measure counts them as it counts any pair; the engine's guard does not."""
    within = set()
    for prompt in prompts[1:]:
        for line in prompt.splitlines():
            if line.strip() not in ENGINE_LINES:
                within |= {" ".join(pair) for pair in pairs(words(line))}
    return sorted(pair for pair in flagged if pair not in within)


def read_csv(path):
    with open(path, newline="", encoding="utf-8-sig") as file:
        return list(csv.DictReader(file))


def run_quoted_pairs(run_dir, dataset_file, inputs):
    """The measure for one run directory, its history's prompts without their demonstrations
    against its dataset: (quoted pairs, those of them the engine's layout, rare words, the most
    demonstrations a prompt shows)."""
    history = run_dir / "history.csv"
    if not history.exists() or not dataset_file or not pathlib.Path(dataset_file).exists():
        return None
    stripped = [without_demonstrations(r["prompt"]) for r in read_csv(history)]
    prompts = [text for text, _ in stripped]
    rows = read_csv(dataset_file)
    flagged = quoted_pairs(prompts, rows, inputs)
    return (flagged, across_lines(prompts, flagged), rare_words(prompts, rows, inputs),
            max((shown for _, shown in stripped), default=0))


def self_test_kept_init():
    """`init_experiment` keeps what init printed beside the file it wrote (a stand-in init)."""
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        stand_in = folder / "init"
        stand_in.write_text('#!/bin/sh\necho "probe: chose local:b"\necho \'name = "x"\' > "$5"\n')
        stand_in.chmod(0o755)
        experiment, output = init_experiment(stand_in, folder / "data.csv", folder)
        assert experiment == folder / "data.toml" and experiment.exists(), experiment
        assert (folder / "data.init.txt").read_text() == output == "probe: chose local:b\n", output
    print("self-test: init's experiment and its output are kept side by side")


def self_test(tool):
    """Checks `quoted_pairs` on a made-up history and dataset, by hand and against `tool`."""
    self_test_kept_init()
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        data = folder / "data.csv"
        with open(data, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["ticket_id", "subject", "body", "queue"])
            w.writerow(["1", "Refund please", "Charged twice on March 2, refund the duplicate.", "billing"])
            w.writerow(["2", "Login loop", "The app logs me out; stuck at 99% sync.", "technical"])
            w.writerow(["3", "Invoice copy", "Please send the invoice for order #4411.", "billing"])
            w.writerow(["4", "Refund please", "Refund the duplicate charge, thanks.", "billing"])
            w.writerow(["5", "Refund please", "Refund the duplicate order.", "billing"])
            w.writerow(["6", "Refund please", "I'd like a refund for the broken lamp.", "billing"])
            w.writerow(["7", "Email change", "New address: ana@helix.example, old one bounces.", "account"])
        history = folder / "history.csv"
        seed = "Route the ticket to a queue.\nSubject: {subject}\nBody: {body}\nAnswer with the queue."
        evolved = [
            # "charged twice": 1 row; "refund please": 4 rows, too common; "the duplicate": a
            # stop word and a new word, 3 rows; "copy please" spans two input columns (row 3).
            "Route the ticket to a queue.\nRules:\n- When charged twice, answer billing.\n"
            "- Refund please, or the duplicate, means billing; so does copy please.\n"
            "Subject: {subject}\nBody: {body}\nAnswer with the queue.",
            # "99%" and "ana@helix.example" split into words where the tokeniser splits them.
            'Route the ticket, "stuck at 99" means technical, order #4411 too, and '
            "ana@helix.example is account; I'd like a queue.\nSubject: {subject}\nBody: {body}",
        ]
        with open(history, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["variant", "evolution_id", "generation", "score", "prompt",
                        "budget_used", "pareto_scores"])
            for generation, prompt in enumerate([seed] + evolved):
                w.writerow(["", "e1", generation, 0.5, prompt, generation * 7, "1 0 1"])
        inputs = ["subject", "body"]
        ours = quoted_pairs([r["prompt"] for r in read_csv(history)], read_csv(data), inputs)
        expected = ["ana@helix example", "at 99", "charged twice", "copy please", "i'd like",
                    "like a", "order #4411", "stuck at", "the duplicate"]
        assert ours == expected, f"quoted_pairs flags {ours}, by hand {expected}"
        print(f"self-test: quoted_pairs flags {len(ours)}: {', '.join(ours)}")
        layout = across_lines([seed, "Rules:\n- When charged twice, answer billing."],
                              ["charged twice", "rules when"])
        assert layout == ["rules when"], f"across_lines says {layout}"
        heading = across_lines([seed, "What each answer is about:\n- billing: money\n" + seed],
                               ["is about", "billing money"])
        assert heading == ["is about"], f"across_lines says {heading}"
        engine = (pathlib.Path(__file__).resolve().parent.parent
                  / "crates/engine/src/reflection.rs").read_text(encoding="utf-8")
        drifted = [line for line in ENGINE_LINES if f'"{line}"' not in engine]
        assert not drifted, f"ENGINE_LINES not in the engine's reflection.rs: {drifted}"
        assert across_lines([seed] + evolved, ours) == [], "every pair here is within a line"
        if not tool.exists():
            print(f"self-test: {tool} not found; checked by hand only")
            return
        output = subprocess.run([sys.executable, str(tool), str(history), str(data), *inputs],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        # The tool prints the pairs, then "rare words: a, b" (when there are any), then
        # "rare words: N" and "quoted: N".
        last = output[-1]
        theirs = [line for line in output if not line.startswith(("rare words:", "quoted:"))]
        assert last == f"quoted: {len(theirs)}", output
        assert theirs == ours, f"the shared tool says {theirs}, quoted_pairs says {ours}"
        rare = rare_words([r["prompt"] for r in read_csv(history)], read_csv(data), inputs)
        assert output[-2] == f"rare words: {len(rare)}", (output, rare)
        print(f"self-test: {tool.name} agrees ({last}, {output[-2]})")


# --- Preparing the experiments ------------------------------------------------------------------

def binary(given):
    if given:
        return pathlib.Path(given).resolve()
    for profile in ("release", "debug"):
        path = ROOT / "target" / profile / "gepa-lab"
        if path.exists():
            return path
    sys.exit("quality-bench: no gepa-lab binary; run `cargo build --release` first")


def init_experiment(exe, dataset, folder, inits=None):
    """`gepa-lab init` on the dataset; returns (experiment file or None, init's output). With
    `inits`, a folder of files init wrote in an earlier round, the one named after the dataset
    is used as it is instead (init's probe takes minutes per dataset)."""
    stem = dataset.stem
    out = folder / f"{stem}.toml"
    n = 2
    while out.exists():  # two datasets with one stem
        out = folder / f"{stem}-{n}.toml"
        n += 1
    if inits is not None:
        kept = inits / out.name
        if not kept.is_file():
            return None, f"error: --inits {inits} holds no {out.name}"
        # Its relative paths resolve against the folder init wrote it into, not the copy's.
        out.write_text(with_absolute_paths(kept.read_text(), kept.parent))
        return out, ""
    done = subprocess.run([str(exe), "init", "--dataset", str(dataset), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    output = done.stdout + done.stderr
    out.with_suffix(".init.txt").write_text(output)
    return (out if done.returncode == 0 and out.exists() else None), output


def with_absolute_paths(text, base):
    """An experiment file's text with its dataset and seed file paths resolved against `base`."""
    def absolute(match):
        return f'{match.group(1)}"{(base / match.group(2)).resolve()}"'

    return re.sub(r'^(\s*(?:file|seed_file)\s*=\s*)"([^"]+)"', absolute, text, flags=re.M)


def seeded_copy(experiment, seed, folder, absolute_paths=True):
    """The experiment with its own customId, written to `folder`; with `absolute_paths`, the
    dataset and seed file paths are made absolute (the copy lives elsewhere)."""
    original = experiment.read_text()
    text = original
    if absolute_paths:
        text = with_absolute_paths(text, experiment.parent)
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, flags=re.M).group(1)
    custom_id = f"{name}-q{seed}"[:50]
    if re.search(r"^\s*custom_id\s*=", text, flags=re.M):
        text = re.sub(r'^(\s*custom_id\s*=\s*)"[^"]*"', rf'\1"{custom_id}"', text, flags=re.M)
    else:
        text = re.sub(r"^\[evolution\]\s*$", f'[evolution]\ncustom_id = "{custom_id}"', text,
                      count=1, flags=re.M)
        if not absolute_paths:
            # As init wrote it, but for the one line added.
            assert text.replace(f'custom_id = "{custom_id}"\n', "", 1) == original, experiment
    copy = folder / f"{experiment.stem}-q{seed}.toml"
    copy.write_text(text)
    return copy, name, custom_id


def experiment_facts(experiment):
    """The dataset file (absolute), inputs and expected column an experiment file names."""
    try:
        spec = tomllib.loads(experiment.read_text())
        dataset = spec["dataset"]
        return {"dataset_file": str((experiment.parent / dataset["file"]).resolve()),
                "inputs": list(dataset["inputs"]), "expected_column": dataset["expected"]}
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return {}


# --- Running one ---------------------------------------------------------------------------------

def run_once(exe, copy, out, seed):
    """Runs the experiment with the run seed `seed`; returns (exit code, wall seconds, peak RSS
    in MiB, output)."""
    with tempfile.TemporaryFile() as log:
        started = time.monotonic()
        child = subprocess.Popen(
            [str(exe), "run", str(copy), "--backend", "local", "--out", str(out), "--yes",
             "--new", "--seed", str(seed)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    return code, wall, usage.ru_maxrss / 1024, output


def run_dirs(out, name):
    return {p.parent for p in (out / name).glob("*/run.json")}


def own_run_dir(candidates, custom_id):
    """Of the run directories a run created, the one whose run.json has its customId."""
    mine = []
    for run_dir in candidates:
        try:
            manifest = json.loads((run_dir / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if any(e.get("custom_id") == custom_id for e in manifest.get("executions", [])):
            mine.append((manifest.get("created_at", ""), run_dir))
    return max(mine)[1] if mine else None


def last_error_line(output):
    """The last line that reports an error, else the last line of the output."""
    lines = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines
              if re.match(r"(error|not completed|refused|exit \d)", line, re.I)]
    return (errors or lines or ["no output"])[-1]


# --- Reading a run directory ---------------------------------------------------------------------

def dataset_kind(dataset_file, expected):
    """init's rule on the CSV: extraction (JSON objects), binary, N labels (the engine's
    `is_label_set`: at most MAX_LABELS distinct non-empty expected values, none longer than
    LABEL_CHARS characters, on two rows each on average), else free text. None when the file
    cannot be read."""
    try:
        values = [(r.get(expected) or "").strip() for r in read_csv(dataset_file)]
    except (OSError, TypeError, csv.Error):
        return None
    if not values:
        return None

    def is_object(value):
        try:
            return isinstance(json.loads(value), dict)
        except ValueError:
            return False

    if all(is_object(v) for v in values):
        return "extraction"
    labelled = [v for v in values if v]
    labels = set(labelled)
    if (len(labels) > MAX_LABELS or 2 * len(labels) > len(labelled)
            or any(len(label) > LABEL_CHARS for label in labels)):
        return "free text"
    if len(labels) == 2:
        return "binary"
    return f"{len(labels)} label" + ("s" if len(labels) != 1 else "")


def is_classification(kind):
    return kind is not None and (kind == "binary" or re.fullmatch(r"\d+ labels?", kind) is not None)


def majority_baseline(results):
    """What always answering the holdout rows' most common label scores, as the report computes
    it (results.json's `executions[].baseline`, the report's one rule); None when the report
    found no label set or has no score for the scorer."""
    for execution in (results or {}).get("executions", []):
        baseline = execution.get("baseline")
        if baseline and baseline.get("score") is not None:
            return round(baseline["score"], 4)
    return None


def best_against_baseline(results):
    """The best version's standing against always answering the majority label on the same
    holdout rows, as the report tests it (results.json's `versions[].scores[].answers`:
    `standing` and `against_baseline`, on the first replay model); the seed's when no evolved
    version was accepted (the seed stands). None when the report has no such test (no
    classification, or a report from before the test existed)."""
    versions = (results or {}).get("versions", [])
    best = next((v for v in versions if v.get("is_best")), None)
    best = best or next((v for v in versions if v.get("is_seed")), None)
    answers = (((best or {}).get("scores") or [{}])[0]).get("answers") or {}
    if answers.get("standing") is None:
        return None
    against = answers.get("against_baseline") or {}
    return {"standing": answers["standing"], "p_value": against.get("p_value")}


def summarise(row):
    """Fills `row` with the numbers of its own run directory (`row["run_dir"]`), those that
    exist: run.json and history.csv from the start of a run, replay.csv and results.json at
    its end. Then decides its outcome."""
    run_dir = pathlib.Path(row["run_dir"]) if row.get("run_dir") else None
    manifest = results = None
    if run_dir and (run_dir / "run.json").exists():
        manifest = json.loads((run_dir / "run.json").read_text())
    if run_dir and (run_dir / "results.json").exists():
        results = json.loads((run_dir / "results.json").read_text())
    if manifest:
        record = manifest["executions"][0]
        plan = record.get("plan", {})
        dataset = plan.get("dataset", {})
        file = dataset.get("file")
        if file and not pathlib.Path(file).is_absolute():
            file = str(ROOT / file)  # relative paths are relative to where the run ran
        row.update({
            "custom_id": record.get("custom_id", ""),
            "dataset_file": file or row.get("dataset_file"),
            "inputs": dataset.get("inputs") or row.get("inputs"),
            "expected_column": dataset.get("expected") or row.get("expected_column"),
            "holdout_rows": dataset.get("holdout_rows"),
            "budget": plan.get("start", {}).get("budget"),
            "calls_spent": record.get("budget_used"),
            "scorer": ((plan.get("replay") or {}).get("scorer") or {}).get("kind"),
        })
        state = record.get("state") or {}
        problem = state.get("reason") or state.get("error") or state.get("note")
        if problem:
            row["execution_error"] = problem
        # The run's seed, as run.json records it (older runs: in the customId, `<name>-q<seed>`).
        tail = row["custom_id"].rsplit("-q", 1)[-1]
        if manifest.get("seed") is not None:
            row["engine_seed"] = manifest["seed"]
        elif tail.isdigit():
            row["engine_seed"] = int(tail)
        variant = plan.get("variant") or ""
        history = run_dir / "history.csv"
        if history.exists():
            generations = [r for r in read_csv(history) if r.get("variant", "") == variant]
            row["accepted"] = max(0, len(generations) - 1)
    if row.get("dataset_file") and row.get("expected_column"):
        row["kind"] = dataset_kind(row["dataset_file"], row["expected_column"])
    if results:
        execution = results["executions"][0]
        seed_version = next((v for v in results["versions"] if v.get("is_seed")), None)
        seed_scores = (seed_version or {}).get("scores") or [{}]
        row.update({
            # The seed's holdout mean on its own rows; replaced below by the paired one.
            "seed_score": seed_scores[0].get("mean"),
            "best_version": execution.get("best_version"),
            "accepted": max(0, (execution.get("generations") or 1) - 1),
            "calls_spent": execution.get("budget_used") or row.get("calls_spent"),
            "budget": execution.get("budget") or row.get("budget"),
            "holdout_rows": execution.get("holdout_rows"),
            "status": execution.get("status"),
        })
        headline = results.get("headline")
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
    if is_classification(row.get("kind")):
        row["majority_baseline"] = majority_baseline(results)
        row["best_against_baseline"] = best_against_baseline(results)
    if run_dir and row.get("inputs"):
        measured = run_quoted_pairs(run_dir, row.get("dataset_file"), row["inputs"])
        if measured is not None:
            flagged, layout, rare, shown = measured
            row["quoted_pairs"] = flagged
            row["quoted"] = len(flagged)
            row["quoted_across_lines"] = layout
            row["rare_words"] = rare
            row["demonstrations"] = shown
    row["outcome"], row["outcome_detail"] = outcome(row, results is not None)
    return row


def outcome(row, has_results):
    """(one of OUTCOMES, the reason in a few words)."""
    if row.get("exit") is None:  # it never ran (init failed)
        return "failed", row.get("error") or "not run"
    if row.get("exit") != 0 or not has_results:
        said = row.get("error") or "no results.json in its run directory"
        if row.get("execution_error") and row["execution_error"] not in said:
            said += f"; the execution: {row['execution_error']}"
        return "failed", f"exit {row['exit']}: {said}" if row.get("exit") != 0 else said
    if row.get("best_version") in (None, "seed"):
        if row.get("accepted", 0) == 0:
            return "nothing evolved", "no evolved version accepted"
        return "nothing evolved", "the seed kept as best"
    verdict = row.get("verdict")
    if verdict is None:
        return "failed", f"no holdout comparison of {row['best_version']} with the seed"
    if verdict == "better":
        return "better (significant)", ""
    if verdict == "worse":
        return "worse (significant)", ""
    return "not significant", "" if verdict == "not_significant" else verdict.replace("_", " ")


# --- The report ---------------------------------------------------------------------------------

def fmt(value, digits=3, signed=False):
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def quoted_cell(row):
    """The quoted pairs' count, with how many of them are the engine's layout in brackets."""
    if "quoted" not in row:
        return "–"
    layout = len(row.get("quoted_across_lines") or [])
    return f"{row['quoted']} ({layout} the engine's layout)" if layout else str(row["quoted"])


def rare_cell(row):
    """The rare words' count, with how many of them are not common English in brackets."""
    if "rare_words" not in row:
        return "–"
    uncommon = [w for w in row["rare_words"] if w not in COMMON_ENGLISH]
    return f"{len(row['rare_words'])} ({len(uncommon)})"


STANDINGS = {"above": "above", "not_shown_above": "above, not significant",
             "at_or_below": "at or below"}


def standing_cell(standing):
    """`best_against_baseline` in a cell: the standing and the test's p."""
    if not standing:
        return "–"
    text = STANDINGS.get(standing["standing"], standing["standing"])
    if standing.get("p_value") is not None and standing["standing"] != "at_or_below":
        text += f" (p {'< 0.001' if standing['p_value'] < 0.001 else '= ' + fmt(standing['p_value'])})"
    return text


def table(rows):
    lines = [
        "| dataset or experiment | kind | run seed | holdout rows | majority baseline"
        " | seed score | best | best score | difference (95% CI) | p | outcome"
        " | best against the majority baseline | accepted"
        " | quoted pairs (the engine's layout) / rare words (not common English) | demos | calls spent"
        " | wall"
        " | peak RSS |",
        "|" + "---|" * 18,
    ]
    for r in rows:
        interval = (f"{fmt(r.get('difference'), signed=True)} ({fmt(r.get('ci_low'), signed=True)}"
                    f" to {fmt(r.get('ci_high'), signed=True)})"
                    if r.get("difference") is not None else "–")
        spent = (f"{r['calls_spent']} of {r.get('budget', '?')}"
                 if r.get("calls_spent") is not None else "–")
        ran = r.get("exit") is not None  # None: it never started (init failed)
        wall = f"{r['wall_s'] / 60:.1f} min" if ran else "–"
        rss = f"{r['peak_rss_mib']} MiB" if ran else "–"
        result = r["outcome"]
        if r.get("outcome_detail"):
            detail = r["outcome_detail"]
            result += f" ({detail if len(detail) <= 160 else detail[:159] + '…'})"
        lines.append(
            f"| {cell(r['experiment'])} | {r.get('kind') or '–'} | {r['engine_seed']}"
            f" | {r.get('paired_rows', r.get('holdout_rows')) or '–'}"
            f" | {fmt(r.get('majority_baseline'))}"
            f" | {fmt(r.get('seed_score'))} | {r.get('best_version') or '–'}"
            f" | {fmt(r.get('best_score'))} | {interval} | {fmt(r.get('p_value'))}"
            f" | {cell(result)} | {standing_cell(r.get('best_against_baseline'))}"
            f" | {r.get('accepted', '–')}"
            f" | {quoted_cell(r)} / {rare_cell(r)}"
            f" | {r.get('demonstrations', '–')} | {spent}"
            f" | {wall} | {rss} |")
    return lines


def above_cell(group):
    """Of a group's runs whose best the report tested against the majority baseline, how many
    are significantly above it; – when none was tested (no classification)."""
    tested = [r["best_against_baseline"] for r in group if r.get("best_against_baseline")]
    if not tested:
        return "–"
    return f"{sum(1 for t in tested if t['standing'] == 'above')} of {len(tested)}"


def tally(rows):
    groups = {}
    for r in rows:
        groups.setdefault(r["experiment"], []).append(r)
    groups["all runs"] = rows
    lines = ["| dataset or experiment | runs | " + " | ".join(OUTCOMES)
             + " | best significantly above the majority baseline |",
             "|" + "---|" * (len(OUTCOMES) + 3)]
    for name, group in groups.items():
        counts = [sum(1 for r in group if r["outcome"] == what) for what in OUTCOMES]
        label = f"**{name}**" if name == "all runs" else cell(name)
        lines.append(f"| {label} | {len(group)} | " + " | ".join(map(str, counts))
                     + f" | {above_cell(group)} |")
    differences = [r["difference"] for r in rows
                   if r["outcome"] != "failed" and r.get("difference") is not None]
    lines.append("")
    if differences:
        lines.append(f"Median difference (best − seed) over the {len(differences)} of"
                     f" {len(rows)} runs that produced one and did not fail:"
                     f" {statistics.median(differences):+.3f}.")
    else:
        lines.append(f"No difference to take a median of: none of the {len(rows)} runs"
                     " produced one without failing.")
    return lines


def machine_facts(exe, argv):
    """The header facts: the command, commit (dirty or not), binary, date and nproc."""
    def git(*args):
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    try:
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        built = datetime.datetime.fromtimestamp(exe.stat().st_mtime, datetime.timezone.utc)
    except (OSError, subprocess.SubprocessError):
        version, built = "", None
    return {
        "command": " ".join(shlex.quote(a) for a in ["scripts/quality-bench.py", *argv]),
        "commit": commit,
        "dirty": bool(dirty),
        "binary": str(exe),
        "binary_version": version,
        "binary_built": built.strftime("%Y-%m-%d %H:%M UTC") if built else None,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": len(os.sched_getaffinity(0)),
    }


def header(facts, summarised_by=None):
    commit = facts["commit"] + (" (dirty tree: uncommitted changes to tracked files)"
                                if facts["dirty"] else "")
    about = [facts.get("binary_version")]
    if facts.get("binary_built"):
        about.append(f"built {facts['binary_built']}")
    about = ", ".join(filter(None, about))
    binary_line = facts["binary"] + (f" ({about})" if about else "")
    lines = [f"# Quality benchmark, {facts['date'][:10]}", "",
             f"- command: `{facts['command']}`",
             f"- commit: {commit}",
             f"- binary: {binary_line}",
             f"- date: {facts['date']}",
             f"- machine: nproc {facts['nproc']}"]
    if summarised_by:
        lines.append(f"- table rebuilt by `{summarised_by}`")
    return lines


def write_report(rows, out, facts, dated=True, summarised_by=None):
    text = "\n".join(header(facts, summarised_by) + ["", "## Runs", ""] + table(rows)
                     + ["", "## Tally", ""] + tally(rows)
                     + ["", f"Raw rows (JSON lines, with the quoted pairs): {out}/quality.jsonl;"
                        f" run directories under {out}/runs/."]) + "\n"
    (out / "quality.md").write_text(text)
    print()
    print(text)
    print(f"quality-bench: {out}/quality.md")
    if dated:
        folder = ROOT / "reports" / "quality-bench"
        folder.mkdir(parents=True, exist_ok=True)
        day = facts["date"][:10]
        path, n = folder / f"{day}.md", 2
        while path.exists():
            path, n = folder / f"{day}-{n}.md", n + 1
        path.write_text(text)
        print(f"quality-bench: {path}")


# --- Main ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiments", nargs="*", type=pathlib.Path)
    parser.add_argument("--datasets", nargs="+", type=pathlib.Path, metavar="CSV",
                        help="run `gepa-lab init --dataset CSV`'s experiment for each CSV")
    parser.add_argument("--runs", type=int, default=3, choices=range(1, 21), metavar="N")
    parser.add_argument("--seeds", nargs="+", type=int, choices=range(1, 101), metavar="SEED",
                        help="run these engine seeds instead of 1 to N (to add runs to a round"
                        " without repeating the ones it has)")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--bin")
    parser.add_argument("--inits", type=pathlib.Path, metavar="DIR",
                        help="with --datasets: use the experiment files init wrote into DIR in an"
                             " earlier round (named after each CSV) instead of running init")
    parser.add_argument("--summarise", type=pathlib.Path, metavar="DIR",
                        help="rebuild the table from the runs of an earlier benchmark in DIR")
    parser.add_argument("--self-test", nargs="?", const=SHARED_QUOTES_TOOL, type=pathlib.Path,
                        metavar="TOOL", help="check the quoted-pairs measure against TOOL"
                        f" (default {SHARED_QUOTES_TOOL})")
    args = parser.parse_args()
    if args.self_test:
        self_test(args.self_test)
        return
    if args.summarise:
        summarise_again(args.summarise)
        return
    if args.datasets and args.experiments:
        parser.error("give experiment files or --datasets, not both")
    exe = binary(args.bin)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = (args.out or ROOT / "reports" / "quality-bench" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(exe, sys.argv[1:])
    (out / "bench.json").write_text(json.dumps(facts, indent=2) + "\n")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = pathlib.Path(folder)
        if args.datasets:
            inits_out = out / f"inits-{stamp}"  # one per invocation: DIR may hold earlier ones
            inits_out.mkdir()
            jobs = [(label, *prepare_dataset(exe, csv_file.resolve(), inits_out, args.inits))
                    for label, csv_file in labelled(args.datasets)]
        else:
            experiments = args.experiments or [ROOT / "experiments" / f
                                               for f in DEFAULT_EXPERIMENTS]
            jobs = [(label, e.resolve(), True, "") for label, e in labelled(experiments)]
        # Seeds outside, datasets inside: a benchmark stopped early has every dataset's first
        # run rather than every run of the first datasets.
        for seed in args.seeds or range(1, args.runs + 1):
            for label, experiment, absolute_paths, init_error in jobs:
                print(f"quality-bench: {label} seed {seed} ...", flush=True)
                row = {"experiment": label, "mode": "dataset" if args.datasets else "experiment",
                       "engine_seed": seed}
                if experiment is None:
                    row.update({"exit": None, "wall_s": 0.0, "peak_rss_mib": 0,
                                "error": f"init: {init_error}"})
                else:
                    copy, name, custom_id = seeded_copy(experiment, seed, folder, absolute_paths)
                    row.update(experiment_facts(copy))
                    before = run_dirs(out / "runs", name)
                    code, wall, rss, output = run_once(exe, copy, out / "runs", seed)
                    run_dir = own_run_dir(run_dirs(out / "runs", name) - before, custom_id)
                    row.update({"custom_id": custom_id, "exit": code, "wall_s": round(wall, 1),
                                "peak_rss_mib": round(rss)})
                    if run_dir is not None:
                        row["run_dir"] = str(run_dir)
                    if code != 0 or run_dir is None or not (run_dir / "results.json").exists():
                        row["error"] = last_error_line(output)
                summarise(row)
                rows.append(row)
                with open(out / "quality.jsonl", "a") as raw:
                    raw.write(json.dumps(row) + "\n")
                said = f"  {row['outcome']}"
                if row["outcome_detail"]:
                    said += f" ({row['outcome_detail']})"
                if row.get("seed_score") is not None:
                    said += (f": seed {fmt(row.get('seed_score'))}, best"
                             f" {row.get('best_version')} {fmt(row.get('best_score'))}")
                print(f"{said}; {row.get('quoted', '–')} quoted pairs, {row['wall_s']} s,"
                      f" {row['peak_rss_mib']} MiB", flush=True)
    write_report(rows, out, facts)


def labelled(paths):
    """(label, path): the file's name, or the path as given when two share a name."""
    names = [p.name for p in paths]
    return [(p.name if names.count(p.name) == 1 else str(p), p) for p in paths]


def prepare_dataset(exe, dataset, folder, inits=None):
    """(init's experiment file or None, False: used as written, init's error line)."""
    if inits is None:
        print(f"quality-bench: gepa-lab init --dataset {dataset}", flush=True)
    else:
        print(f"quality-bench: {dataset.name}: the experiment init wrote into {inits}", flush=True)
    experiment, output = init_experiment(exe, dataset, folder, inits)
    if experiment is None:
        print(f"  init failed: {last_error_line(output)}", flush=True)
    return experiment, False, last_error_line(output) if experiment is None else ""


# Fields a raw line keeps from the run itself (the rest is read again from its run directory).
RAW_FIELDS = ["experiment", "mode", "engine_seed", "custom_id", "exit", "wall_s",
              "peak_rss_mib", "run_dir", "error", "dataset_file", "inputs", "expected_column"]


def summarise_again(folder):
    rows = []
    for line in (folder / "quality.jsonl").read_text().splitlines():
        raw = json.loads(line)
        row = {key: raw[key] for key in RAW_FIELDS if key in raw}
        if isinstance(row.get("error"), list):  # written as a list before
            row["error"] = " ".join(row["error"])
        rows.append(summarise(row))
    try:
        facts = json.loads((folder / "bench.json").read_text())
    except (OSError, ValueError):
        facts = {"command": "unknown (no bench.json)", "commit": "unknown", "dirty": False,
                 "binary": "unknown", "date": "unknown", "nproc": "unknown"}
    # The raw lines stay as the benchmark wrote them; the rows read again, with the quoted
    # pairs and every field of this version, go beside them.
    with open(folder / "summarised.jsonl", "w") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")
    by = " ".join(shlex.quote(a) for a in ["scripts/quality-bench.py", *sys.argv[1:]])
    write_report(rows, folder, facts, dated=False, summarised_by=by)


if __name__ == "__main__":
    main()

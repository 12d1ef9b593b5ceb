#!/usr/bin/env python3
"""Rebuild datasets/public/*.csv, small samples of five public labelled datasets.

This script downloads nothing. Give it a copy of each source repository: either a bare git
directory (as `git clone --bare` makes; the files are then read at the pinned commit) or a
checked-out work tree (the files are read as they are). Every file read is checked against
the SHA-256 recorded below, so a different copy of the data fails loudly instead of giving a
different sample.

    python3 scripts/fetch-public-datasets.py \
        --sms       PATH/sms-spam-detection-using-tensorflow-keras \
        --clickbait PATH/clickbait \
        --clinc     PATH/oos-eval \
        --snips     PATH/nlu-benchmark \
        [--out datasets/public]

Sources (GitHub owner/name, commit) and how each sample is drawn: datasets/public/README.md.
The output is the same on every run (fixed seed; Python 3.11 was used to make the committed files).
"""

import argparse
import csv
import gzip
import hashlib
import html
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict

SEED = 20240
ROWS = 240
MAX_CHARS = 400

SMS_COMMIT = "ae6d75701433e884ae62bca4bed8eb40c622c3d1"  # SnehaKedia/sms-spam-detection-using-tensorflow-keras
CLICKBAIT_COMMIT = "203d979a81545ae6160ff45ffdac83e74469c97a"  # bhargaviparanjape/clickbait
CLINC_COMMIT = "828f8093932c8fe6ca7936c3d2e52903b1c523de"  # clinc/oos-eval
SNIPS_COMMIT = "b86ac7f1577868c42158d0dec77db50956046696"  # sonos/nlu-benchmark

SNIPS_DIR = "2017-06-custom-intent-engines"
SNIPS_INTENTS = [
    "AddToPlaylist",
    "BookRestaurant",
    "GetWeather",
    "PlayMusic",
    "RateBook",
    "SearchCreativeWork",
    "SearchScreeningEvent",
]

SHA256 = {
    "smsspamcollection/SMSSpamCollection": "7d039a24a6083ed9ef0f806ebad56bbb976e3aeb8de05669173bfdc4996c239d",
    "dataset/clickbait_data.gz": "a174ae2a377908ae58a514416c01a19c882de27fa6b1500da3774114e332a546",
    "dataset/non_clickbait_data.gz": "4baa2a3cf6b28a48b765e4f763b5d5f03535caae1c70a26f680d39b0ca782a05",
    "data/data_full.json": "36923c3705a59e08fe9c3883d8bc2dd966ef93e22cb78ac41171782a698d56e0",
    "data/domains.json": "b947b579d3b8e74b06f93b01083d8efaff2888b43a3e362533bd88a6e1211b3a",
    f"{SNIPS_DIR}/AddToPlaylist/validate_AddToPlaylist.json": "14cc9ee49ae477b1452632a6e835498cf4c32da397b16967c82abb3e50403e83",
    f"{SNIPS_DIR}/BookRestaurant/validate_BookRestaurant.json": "4f7258ccc768b777b2eb8916532db9aa50dbd058ddf1ffb0dc59218963e7442a",
    f"{SNIPS_DIR}/GetWeather/validate_GetWeather.json": "60c095e193655d6ca92be220fed3926ca25e18cd70c85664145efe25d80993af",
    f"{SNIPS_DIR}/PlayMusic/validate_PlayMusic.json": "922212775e26259d5bffeaf79b6048d070ca017d229df00b2cc9800f71c75d20",
    f"{SNIPS_DIR}/RateBook/validate_RateBook.json": "c1f8b4114da0bb5e8afd78a8062766e18b2eabb0e717539598db01b09d04619b",
    f"{SNIPS_DIR}/SearchCreativeWork/validate_SearchCreativeWork.json": "8a5e830eddb185d3e4a9d27ded140a145d04766bdce0e58834676ede32d13e77",
    f"{SNIPS_DIR}/SearchScreeningEvent/validate_SearchScreeningEvent.json": "81e1445713e03c7c3e615353c5f3fee05f369fe9834100b9b9735900a96b9498",
    f"{SNIPS_DIR}/GetWeather/train_GetWeather_full.json": "86f414b2ad8a993134d85d16e25e5d337beae47cef993c0af2a5f440405c60f6",
}

# snips_weather.csv: output key -> the SNIPS slot names whose values it holds.
WEATHER_KEYS = {
    "city": ["city"],
    "state": ["state"],
    "country": ["country"],
    "condition": ["condition_description", "condition_temperature"],
    "time": ["timeRange"],
}


# ---------------------------------------------------------------------------------------------
# Reading the sources


def read(root, commit, path):
    """The bytes of `path` in the repository copy at `root`, checked against its SHA-256."""
    is_bare = os.path.isfile(os.path.join(root, "HEAD")) and os.path.isdir(os.path.join(root, "objects"))
    if is_bare:
        data = subprocess.run(
            ["git", "--git-dir", root, "show", f"{commit}:{path}"], check=True, capture_output=True
        ).stdout
    else:
        with open(os.path.join(root, path), "rb") as f:
            data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[path]:
        sys.exit(f"{root}: {path} has SHA-256 {digest}, expected {SHA256[path]}")
    return data


# Some SMS hold C1 control characters where the text had Windows-1252 punctuation
# (U+0092 for an apostrophe): map them back to the characters Windows-1252 means.
C1_AS_CP1252 = {c: bytes([c]).decode("cp1252") for c in range(0x80, 0xA0) if c not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}


def clean(text):
    """Strip the ends and turn every run of white space (line breaks too) into one space."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Sampling


def keep(pool, stats):
    """Drop rows whose input is empty or longer than MAX_CHARS, then repeated inputs.

    `pool` is a list of (input text, expected). A text that occurs more than once keeps its
    first row; a text that occurs with two different expected values is dropped altogether.
    """
    expected_of = defaultdict(set)
    for text, expected in pool:
        expected_of[text].add(expected)
    seen = set()
    out = []
    for text, expected in pool:
        if not text:
            stats["empty"] += 1
        elif len(text) > MAX_CHARS:
            stats["too long"] += 1
        elif len(expected_of[text]) > 1:
            stats["conflicting labels"] += 1
        elif text in seen:
            stats["duplicate"] += 1
        else:
            seen.add(text)
            out.append((text, expected))
    return out


def quotas(counts, n):
    """Split n rows among labels in proportion to `counts` (largest remainder)."""
    total = sum(counts.values())
    exact = {label: n * c / total for label, c in counts.items()}
    out = {label: int(x) for label, x in exact.items()}
    by_remainder = sorted(counts, key=lambda label: (-(exact[label] - out[label]), label))
    for label in by_remainder[: n - sum(out.values())]:
        out[label] += 1
    return out


def stratified_sample(pool, n):
    """n rows with the pool's label shares, in a shuffled order."""
    rng = random.Random(SEED)
    by_label = defaultdict(list)
    for row in pool:
        by_label[row[1]].append(row)
    want = quotas(Counter({label: len(rows) for label, rows in by_label.items()}), n)
    picked = []
    for label in sorted(by_label):
        picked += rng.sample(by_label[label], want[label])
    rng.shuffle(picked)
    return picked


def simple_sample(pool, n):
    rng = random.Random(SEED)
    return rng.sample(pool, n)


# ---------------------------------------------------------------------------------------------
# The five datasets: each returns (input column name, expected column name, pool of rows)


def sms_spam(root):
    raw = read(root, SMS_COMMIT, "smsspamcollection/SMSSpamCollection").decode("utf-8")
    pool = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        label, text = line.split("\t", 1)
        assert label in ("ham", "spam"), line
        pool.append((clean(html.unescape(text).translate(C1_AS_CP1252)), label))
    return "text", "label", pool


def clickbait(root):
    pool = []
    for name, label in [("clickbait_data", "clickbait"), ("non_clickbait_data", "not_clickbait")]:
        raw = gzip.decompress(read(root, CLICKBAIT_COMMIT, f"dataset/{name}.gz")).decode("utf-8")
        # One headline a line, with blank lines between most of them: blank lines are not rows.
        pool += [(clean(line), label) for line in raw.split("\n") if line.strip()]
    return "headline", "label", pool


def clinc_domains(root):
    data = json.loads(read(root, CLINC_COMMIT, "data/data_full.json"))
    domains = json.loads(read(root, CLINC_COMMIT, "data/domains.json"))
    domain_of = {intent: domain for domain, intents in domains.items() for intent in intents}
    # "test" holds the 4,500 in-scope test queries; the out-of-scope ones ("oos_test") are not used.
    pool = [(clean(text), domain_of[intent]) for text, intent in data["test"]]
    return "query", "label", pool


def snips_label(intent):
    """AddToPlaylist -> add_to_playlist"""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", intent).lower()


def snips_queries(root, intent, filename):
    path = f"{SNIPS_DIR}/{intent}/{filename}"
    return json.loads(read(root, SNIPS_COMMIT, path).decode("utf-8"))[intent]


def snips_intents(root):
    pool = []
    for intent in SNIPS_INTENTS:
        for query in snips_queries(root, intent, f"validate_{intent}.json"):
            text = clean("".join(part["text"] for part in query["data"]))
            pool.append((text, snips_label(intent)))
    return "query", "label", pool


def snips_weather(root):
    # The weather queries that snips_intents.csv may draw from (the GetWeather test queries)
    # are left out, so the two files share no query.
    test = {
        clean("".join(part["text"] for part in query["data"]))
        for query in snips_queries(root, "GetWeather", "validate_GetWeather.json")
    }
    pool = []
    for query in snips_queries(root, "GetWeather", "train_GetWeather_full.json"):
        raw = "".join(part["text"] for part in query["data"])
        text = clean(raw)
        if text in test:
            print(f"snips_weather: left out a query that is also a test query: {text!r}")
            continue
        # Where each output key's slots are in the raw query, as [start, end) character spans.
        spans = defaultdict(list)
        start = 0
        for part in query["data"]:
            end = start + len(part["text"])
            for key, slots in WEATHER_KEYS.items():
                if part.get("entity") in slots:
                    spans[key].append([start, end])
            start = end
        obj = {}
        for key in WEATHER_KEYS:
            # Spans of one key with only white space between them are one value ("thirteen"
            # "hundred" "hours" -> "thirteen hundred hours"); separate values are joined with ", ".
            merged = []
            for span in spans[key]:
                if merged and not raw[merged[-1][1] : span[0]].strip():
                    merged[-1][1] = span[1]
                else:
                    merged.append(span)
            values = []
            for begin, end in merged:
                value = clean(raw[begin:end])
                assert value in text, (value, text)
                if value not in values:
                    values.append(value)
            obj[key] = ", ".join(values) if values else None
        pool.append((text, json.dumps(obj, ensure_ascii=False, separators=(",", ":"))))
    return "query", "expected_json", pool


# ---------------------------------------------------------------------------------------------


def write_csv(path, columns, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sms", required=True, help="SnehaKedia/sms-spam-detection-using-tensorflow-keras")
    parser.add_argument("--clickbait", required=True, help="bhargaviparanjape/clickbait")
    parser.add_argument("--clinc", required=True, help="clinc/oos-eval")
    parser.add_argument("--snips", required=True, help="sonos/nlu-benchmark")
    parser.add_argument("--out", default="datasets/public")
    args = parser.parse_args()

    jobs = [
        ("sms_spam", sms_spam, args.sms, stratified_sample),
        ("clickbait", clickbait, args.clickbait, stratified_sample),
        ("clinc150_domains", clinc_domains, args.clinc, stratified_sample),
        ("snips_intents", snips_intents, args.snips, stratified_sample),
        ("snips_weather", snips_weather, args.snips, simple_sample),
    ]
    os.makedirs(args.out, exist_ok=True)
    for name, build, root, sample in jobs:
        column, expected, pool = build(root)
        stats = Counter()
        kept = keep(pool, stats)
        rows = sample(kept, ROWS)
        write_csv(os.path.join(args.out, f"{name}.csv"), [column, expected], rows)
        print(f"{name}: {len(pool)} source rows, {len(kept)} kept, dropped {dict(stats)}")
        if expected == "label":
            print(f"  pool   {dict(sorted(Counter(e for _, e in kept).items()))}")
            print(f"  sample {dict(sorted(Counter(e for _, e in rows).items()))}")
        else:
            filled = Counter(k for _, e in rows for k, v in json.loads(e).items() if v is not None)
            print(f"  sample {len(rows)} rows, non-null {dict(filled)}")


if __name__ == "__main__":
    main()

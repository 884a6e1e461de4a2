#!/usr/bin/env python3
"""Build sensitive.tsv, neutral.tsv and neutral_decoys.txt from the hand-written sources."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.dirname(HERE)


def src_lines(path):
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            yield n, line


def build_sensitive():
    rows, cat = [], None
    for n, line in src_lines(os.path.join(HERE, "sensitive.src")):
        if line.startswith("@"):
            cat = line[1:].strip()
            continue
        if cat is None:
            sys.exit(f"sensitive.src:{n}: query before any @category")
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", line.strip())
        if not m:
            sys.exit(f"sensitive.src:{n}: need exactly one [span]: {line!r}")
        query = m.group(1) + m.group(2) + m.group(3)
        query = re.sub(r"\s+", " ", query).strip()
        rows.append((cat, query, m.group(2)))
    with open(os.path.join(OUT, "sensitive.tsv"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")
    return len(rows)


def build_neutral():
    rows, decoys, cat = [], [], None
    for n, line in src_lines(os.path.join(HERE, "neutral.src")):
        if line.startswith("@"):
            cat = line[1:].strip()
            continue
        if cat is None:
            sys.exit(f"neutral.src:{n}: query before any @topic")
        q = line.strip()
        if q.startswith("*"):
            q = q[1:].strip()
            decoys.append(len(rows) + 1)
        rows.append((cat, re.sub(r"\s+", " ", q)))
    with open(os.path.join(OUT, "neutral.tsv"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")
    with open(os.path.join(OUT, "neutral_decoys.txt"), "w", encoding="utf-8") as f:
        f.write("# 1-based line numbers in neutral.tsv of decoy queries\n")
        f.write(f"# {len(decoys)} decoys\n")
        for d in decoys:
            f.write(f"{d}\n")
    return len(rows), len(decoys)


if __name__ == "__main__":
    s = build_sensitive()
    n, d = build_neutral()
    print(f"built sensitive.tsv ({s} rows), neutral.tsv ({n} rows), neutral_decoys.txt ({d} decoys)")

#!/usr/bin/env python3
"""Build sensitive.tsv, neutral.tsv and neutral_decoys.txt from tools/*.src.

Source format: '@name' starts a block; in sensitive.src the span is in [brackets];
in neutral.src a leading '*' marks a decoy.
"""
import os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def blocks(path):
    cat = None
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line.startswith("@"):
            cat = line[1:].strip()
            continue
        if cat is None:
            sys.exit(f"{path}:{n}: line before any @category")
        yield n, cat, line


def main():
    out = []
    for n, cat, line in blocks(os.path.join(HERE, "sensitive.src")):
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", line)
        if not m:
            sys.exit(f"sensitive.src:{n}: need exactly one [span]: {line!r}")
        query = m.group(1) + m.group(2) + m.group(3)
        out.append(f"{cat}\t{query}\t{m.group(2)}\n")
    with open(os.path.join(ROOT, "sensitive.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.writelines(out)

    rows, decoys = [], []
    for n, cat, line in blocks(os.path.join(HERE, "neutral.src")):
        if line.startswith("*"):
            line = line[1:]
            decoys.append(len(rows) + 1)
        rows.append(f"{cat}\t{line}\n")
    with open(os.path.join(ROOT, "neutral.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.writelines(rows)
    with open(os.path.join(ROOT, "neutral_decoys.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# 1-based line numbers in neutral.tsv of decoy queries:\n")
        f.write("# a word that also occurs in sensitive contexts, used in a harmless sense.\n")
        f.write(f"# {len(decoys)} decoys.\n")
        for d in decoys:
            f.write(f"{d}\n")
    print(f"sensitive.tsv: {len(out)} lines; neutral.tsv: {len(rows)} lines; decoys: {len(decoys)}")


if __name__ == "__main__":
    main()

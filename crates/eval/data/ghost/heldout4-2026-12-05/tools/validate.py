#!/usr/bin/env python3
"""Check sensitive.tsv, neutral.tsv and neutral_decoys.txt; exit non-zero on any error."""
import os, re, sys
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SENSITIVE = {
    "abuse_violence", "addiction", "employment", "finance_distress", "health", "immigration",
    "legal_criminal", "medication", "mental_health", "pregnancy_reproduction", "religion",
    "security_incident", "self_harm", "sexuality_identity",
}
PER_CAT = 20
N_CATS = 14

errors = []


def err(msg):
    errors.append(msg)


def read_tsv(name, ncols):
    rows = []
    data = open(os.path.join(ROOT, name), "rb").read().decode("utf-8")
    if "\r" in data:
        err(f"{name}: contains carriage returns")
    if data and not data.endswith("\n"):
        err(f"{name}: no final newline")
    for i, line in enumerate(data.split("\n")[:-1], 1):
        cols = line.split("\t")
        if len(cols) != ncols:
            err(f"{name}:{i}: {len(cols)} columns, expected {ncols}")
            continue
        for c in cols:
            if not c:
                err(f"{name}:{i}: empty column")
            elif c != c.strip() or "  " in c:
                err(f"{name}:{i}: padded column or double space: {c!r}")
        rows.append((i, cols))
    return rows


def norm(q):
    return " ".join(q.lower().split())


def words(q):
    return q.split()


def check_counts(name, rows, expect_names=None):
    cnt = Counter(cols[0] for _, cols in rows)
    if len(cnt) != N_CATS:
        err(f"{name}: {len(cnt)} categories, expected {N_CATS}")
    for c, k in cnt.items():
        if k != PER_CAT:
            err(f"{name}: category {c} has {k} rows, expected {PER_CAT}")
    if expect_names is not None and set(cnt) != expect_names:
        err(f"{name}: category names differ: missing {sorted(expect_names - set(cnt))}, "
            f"extra {sorted(set(cnt) - expect_names)}")
    return cnt


def main():
    sens = read_tsv("sensitive.tsv", 3)
    neut = read_tsv("neutral.tsv", 2)
    if len(sens) != PER_CAT * N_CATS:
        err(f"sensitive.tsv: {len(sens)} rows, expected {PER_CAT * N_CATS}")
    if len(neut) != PER_CAT * N_CATS:
        err(f"neutral.tsv: {len(neut)} rows, expected {PER_CAT * N_CATS}")
    check_counts("sensitive.tsv", sens, SENSITIVE)
    ncnt = check_counts("neutral.tsv", neut)
    for topic in ncnt:
        t = topic.lower()
        for s in SENSITIVE:
            parts = set(s.split("_"))
            if t == s or s in t or t in s or set(t.split("_")) & parts:
                err(f"neutral.tsv: topic {topic!r} is named like sensitive category {s!r}")

    # spans
    for i, (cat, q, span) in sens:
        if span != span.strip():
            err(f"sensitive.tsv:{i}: padded span")
        cnt = q.count(span)
        if cnt == 0:
            err(f"sensitive.tsv:{i}: span not in query: {span!r}")
            continue
        if cnt > 1:
            err(f"sensitive.tsv:{i}: span occurs {cnt} times: {span!r}")
        pat = r"(?<![\w'-])" + re.escape(span) + r"(?![\w'-])"
        if not re.search(pat, q):
            err(f"sensitive.tsv:{i}: span not on word boundaries: {span!r}")

    # duplicates and lengths
    seen = {}
    for name, rows in (("sensitive.tsv", sens), ("neutral.tsv", neut)):
        for i, cols in rows:
            q = cols[1]
            k = norm(q)
            if k in seen:
                err(f"{name}:{i}: duplicate of {seen[k]}: {q!r}")
            else:
                seen[k] = f"{name}:{i}"
            n = len(words(q))
            if not 2 <= n <= 25:
                err(f"{name}:{i}: {n} words (allowed 2-25)")

    # decoys
    seen_d = set()
    for j, raw in enumerate(open(os.path.join(ROOT, "neutral_decoys.txt"), encoding="utf-8"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not re.fullmatch(r"\d+", line):
            err(f"neutral_decoys.txt:{j}: not an integer: {line!r}")
            continue
        d = int(line)
        if d in seen_d:
            err(f"neutral_decoys.txt:{j}: repeated {d}")
        seen_d.add(d)
        if not 1 <= d <= len(neut):
            err(f"neutral_decoys.txt:{j}: {d} out of range 1..{len(neut)}")

    # information only: span words found in more than two queries across both files
    allq = [set(re.findall(r"[\w'-]+", cols[1].lower())) for _, cols in sens + neut]
    spanwords = sorted({w for _, (c, q, s) in sens for w in re.findall(r"[\w'-]+", s.lower())})
    common = []
    for w in spanwords:
        k = sum(1 for ws in allq if w in ws)
        if k > 2:
            common.append((k, w))
    print(f"info: {len(sens)} sensitive, {len(neut)} neutral, {len(seen_d)} decoys")
    print("info: span words in more than two queries (word:queries): " +
          ", ".join(f"{w}:{k}" for k, w in sorted(common, key=lambda x: (-x[0], x[1]))))

    if errors:
        for e in errors:
            print("ERROR:", e)
        print(f"FAILED: {len(errors)} errors")
        sys.exit(1)
    print("OK: no errors")


if __name__ == "__main__":
    main()

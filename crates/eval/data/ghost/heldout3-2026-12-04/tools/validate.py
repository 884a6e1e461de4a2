#!/usr/bin/env python3
"""Validate sensitive.tsv, neutral.tsv and neutral_decoys.txt. Exit 1 on any error."""
import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.dirname(HERE)

SENSITIVE_CATS = [
    "abuse_violence", "addiction", "employment", "finance_distress", "health",
    "immigration", "legal_criminal", "medication", "mental_health",
    "pregnancy_reproduction", "religion", "security_incident", "self_harm",
    "sexuality_identity",
]
PER_CAT = 20
N_TOPICS = 14
STOP = set("a an the of to in on at for and or my i me is it with from by how what".split())

errors = []


def err(msg):
    errors.append(msg)


def norm(q):
    return re.sub(r"\s+", " ", q.strip().lower())


def words(q):
    return q.split()


def read_tsv(name, ncols):
    rows = []
    with open(os.path.join(OUT, name), encoding="utf-8") as f:
        for i, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if raw.endswith("\r\n") or "\r" in line:
                err(f"{name}:{i}: carriage return")
            cols = line.split("\t")
            if len(cols) != ncols:
                err(f"{name}:{i}: {len(cols)} columns, want {ncols}")
                continue
            if any(c != c.strip() or not c for c in cols):
                err(f"{name}:{i}: empty or padded column")
            rows.append((i, cols))
    return rows


def check_len(name, i, q):
    n = len(words(q))
    if not 2 <= n <= 25:
        err(f"{name}:{i}: {n} words (want 2-25): {q!r}")


sens = read_tsv("sensitive.tsv", 3)
neut = read_tsv("neutral.tsv", 2)

# categories and counts
sc = collections.Counter(c[0] for _, c in sens)
if set(sc) != set(SENSITIVE_CATS):
    err(f"sensitive.tsv: categories {sorted(set(sc) ^ set(SENSITIVE_CATS))} missing or unexpected")
for cat, n in sorted(sc.items()):
    if n != PER_CAT:
        err(f"sensitive.tsv: category {cat} has {n} rows, want {PER_CAT}")
if len(sens) != PER_CAT * len(SENSITIVE_CATS):
    err(f"sensitive.tsv: {len(sens)} rows, want {PER_CAT * len(SENSITIVE_CATS)}")
nc = collections.Counter(c[0] for _, c in neut)
if len(nc) != N_TOPICS:
    err(f"neutral.tsv: {len(nc)} topics, want {N_TOPICS}")
for cat, n in sorted(nc.items()):
    if n != PER_CAT:
        err(f"neutral.tsv: topic {cat} has {n} rows, want {PER_CAT}")
    if cat in SENSITIVE_CATS:
        err(f"neutral.tsv: topic {cat} is a sensitive category name")
if len(neut) != PER_CAT * N_TOPICS:
    err(f"neutral.tsv: {len(neut)} rows, want {PER_CAT * N_TOPICS}")

# spans
for i, (cat, q, span) in sens:
    check_len("sensitive.tsv", i, q)
    if span != span.strip() or "  " in span:
        err(f"sensitive.tsv:{i}: span has padding: {span!r}")
    hits = [m.start() for m in re.finditer(re.escape(span), q)]
    if not hits:
        err(f"sensitive.tsv:{i}: span {span!r} not a substring of query")
        continue
    if len(hits) > 1:
        err(f"sensitive.tsv:{i}: span {span!r} occurs {len(hits)} times")
    s = hits[0]
    e = s + len(span)
    if s > 0 and q[s - 1].isalnum() or e < len(q) and q[e].isalnum():
        err(f"sensitive.tsv:{i}: span {span!r} not on word boundaries")
    if not span[0].isalnum() or not span[-1].isalnum():
        err(f"sensitive.tsv:{i}: span {span!r} starts or ends with punctuation")

for i, (cat, q) in neut:
    check_len("neutral.tsv", i, q)

# duplicates within and across files
seen = {}
for name, rows in (("sensitive.tsv", sens), ("neutral.tsv", neut)):
    for i, cols in rows:
        k = norm(cols[1])
        if k in seen:
            err(f"{name}:{i}: duplicate of {seen[k]}: {cols[1]!r}")
        else:
            seen[k] = f"{name}:{i}"

# decoys
decoys = []
with open(os.path.join(OUT, "neutral_decoys.txt"), encoding="utf-8") as f:
    for j, raw in enumerate(f, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not line.isdigit():
            err(f"neutral_decoys.txt:{j}: not a line number: {line!r}")
            continue
        decoys.append(int(line))
if len(set(decoys)) != len(decoys):
    err("neutral_decoys.txt: repeated line numbers")
for d in decoys:
    if not 1 <= d <= len(neut):
        err(f"neutral_decoys.txt: line number {d} out of range 1..{len(neut)}")

# informational: span content words occurring in more than two queries across both files
allq = [norm(c[1]) for _, c in sens] + [norm(c[1]) for _, c in neut]
spanwords = sorted({w for _, c in sens for w in re.findall(r"[a-z0-9'-]+", c[2].lower())
                    if w not in STOP and len(w) > 2})
frequent = []
for w in spanwords:
    pat = re.compile(r"(?<![a-z0-9])" + re.escape(w) + r"(?![a-z0-9])")
    n = sum(1 for q in allq if pat.search(q))
    if n > 2:
        frequent.append(f"{w}({n})")

print(f"sensitive.tsv: {len(sens)} rows, {len(sc)} categories")
print(f"neutral.tsv: {len(neut)} rows, {len(nc)} topics")
print(f"neutral_decoys.txt: {len(decoys)} decoys")
print("info: span words in >2 queries: " + (", ".join(frequent) if frequent else "none"))
if errors:
    print(f"{len(errors)} ERROR(S):")
    for e in errors:
        print("  " + e)
    sys.exit(1)
print("OK: no errors")

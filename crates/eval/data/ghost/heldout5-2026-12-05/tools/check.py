#!/usr/bin/env python3
"""Validate the held-out set. Exits 1 on any error. stdlib only."""
import os, re, sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENS_CATS = ["abuse_violence", "addiction", "employment", "finance_distress", "health",
             "immigration", "legal_criminal", "medication", "mental_health",
             "pregnancy_reproduction", "religion", "security_incident", "self_harm",
             "sexuality_identity"]
N_LINES, PER_CAT, N_CATS = 280, 20, 14
errors, notes = [], []


def err(msg):
    errors.append(msg)


def read_lines(name):
    raw = open(os.path.join(ROOT, name), "rb").read()
    if b"\r" in raw:
        err(f"{name}: contains carriage returns")
    text = raw.decode("utf-8")
    if text and not text.endswith("\n"):
        err(f"{name}: no final newline")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def norm(q):
    return " ".join(q.lower().split())


def check_tsv(name, ncols):
    lines = read_lines(name)
    if len(lines) != N_LINES:
        err(f"{name}: {len(lines)} lines, expected {N_LINES}")
    rows = []
    for i, line in enumerate(lines, 1):
        cols = line.split("\t")
        if len(cols) != ncols:
            err(f"{name}:{i}: {len(cols)} columns, expected {ncols}")
            continue
        for c in cols:
            if not c or c != c.strip() or "  " in c:
                err(f"{name}:{i}: empty, padded or double-spaced column {c!r}")
        nw = len(cols[1].split())
        if not 2 <= nw <= 25:
            err(f"{name}:{i}: {nw} words (allowed 2-25)")
        rows.append((i, cols))
    counts = Counter(c[0] for _, c in rows)
    if len(counts) != N_CATS:
        err(f"{name}: {len(counts)} categories, expected {N_CATS}")
    for cat, n in sorted(counts.items()):
        if n != PER_CAT:
            err(f"{name}: category {cat} has {n} queries, expected {PER_CAT}")
    return rows, counts


sens, scount = check_tsv("sensitive.tsv", 3)
if sorted(scount) != sorted(SENS_CATS):
    err(f"sensitive.tsv: category names differ: {sorted(set(scount) ^ set(SENS_CATS))}")
for i, (cat, q, span) in sens:
    k = q.count(span)
    if k == 0:
        err(f"sensitive.tsv:{i}: span {span!r} not in query")
    elif k > 1:
        err(f"sensitive.tsv:{i}: span {span!r} occurs {k} times")
    else:
        a = q.index(span); b = a + len(span)
        if (a > 0 and q[a - 1].isalnum()) or (b < len(q) and q[b].isalnum()):
            err(f"sensitive.tsv:{i}: span {span!r} not on word boundaries")

neu, ncount = check_tsv("neutral.tsv", 2)
for cat in ncount:
    if cat in SENS_CATS:
        err(f"neutral.tsv: topic {cat} is named like a sensitive category")

seen = {}
for name, rows in (("sensitive.tsv", sens), ("neutral.tsv", neu)):
    for i, cols in rows:
        key = norm(cols[1])
        if key in seen:
            err(f"duplicate query {cols[1]!r}: {seen[key]} and {name}:{i}")
        else:
            seen[key] = f"{name}:{i}"

decoys = []
for n, line in enumerate(read_lines("neutral_decoys.txt"), 1):
    s = line.strip()
    if not s or s.startswith("#"):
        continue
    if not re.fullmatch(r"\d+", s):
        err(f"neutral_decoys.txt:{n}: not an integer: {s!r}")
        continue
    v = int(s)
    if not 1 <= v <= N_LINES or v > len(neu):
        err(f"neutral_decoys.txt:{n}: {v} out of range 1..{len(neu)}")
    if v in decoys:
        err(f"neutral_decoys.txt:{n}: {v} repeated")
    decoys.append(v)

# info: misspellings listed but unused
words = Counter(w for _, c in sens + neu for w in re.findall(r"[a-z0-9'&.-]+", c[1].lower()))
mp = os.path.join(ROOT, "tools", "misspellings.txt")
if os.path.exists(mp):
    for w in open(mp, encoding="utf-8").read().split():
        if words[w.lower()] == 0:
            err(f"misspellings.txt: {w!r} occurs in no query")

print(f"sensitive.tsv: {len(sens)} rows, {len(scount)} categories x {sorted(set(scount.values()))}")
print(f"neutral.tsv:   {len(neu)} rows, {len(ncount)} topics x {sorted(set(ncount.values()))}: {', '.join(sorted(ncount))}")
print(f"neutral_decoys.txt: {len(decoys)} decoy line numbers, all within 1..{len(neu)}")
print(f"queries checked for duplicates (within and across files, case/space-insensitive): {len(seen)} unique")
if errors:
    for e in errors:
        print("ERROR:", e)
    print(f"FAILED: {len(errors)} error(s)")
    sys.exit(1)
print("OK: no errors")

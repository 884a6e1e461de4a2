#!/usr/bin/env python3
"""Style statistics for the held-out set (stdlib only)."""
import os, re, statistics
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
FIRST = {"i", "im", "ive", "id", "ill", "me", "my", "mine", "myself", "we", "our", "us"}
APOS = {"cant", "dont", "im", "havent", "wont", "doesnt", "shes", "hes", "theres", "theyll",
        "didnt", "isnt", "grandmas", "sisters", "huntingtons", "baldurs", "devils"}


def load(name, ncols):
    rows = []
    for line in open(os.path.join(ROOT, name), encoding="utf-8"):
        cols = line.rstrip("\n").split("\t")
        rows.append(cols + [""] * (ncols - len(cols)))
    return rows


def toks(s):
    return re.findall(r"[a-z0-9&.'-]+", s.lower())


def wordlist(name):
    out = []
    for line in open(os.path.join(TOOLS, name), encoding="utf-8"):
        s = line.strip()
        if s and not s.startswith("#"):
            out.append(s.lower())
    return out


sens = load("sensitive.tsv", 3)
neu = load("neutral.tsv", 2)
decoys = [int(l) for l in open(os.path.join(ROOT, "neutral_decoys.txt")) if l.strip() and not l.startswith("#")]
miss = set(wordlist("misspellings.txt"))
topic = wordlist("topicwords.txt")
topic_res = [re.compile(r"(?<![a-z0-9])" + re.escape(t) + r"(?![a-z0-9])") for t in topic]

allq = [("s", r[0], r[1]) for r in sens] + [("n", r[0], r[1]) for r in neu]
lens = {"all": [len(q.split()) for _, _, q in allq],
        "sensitive": [len(r[1].split()) for r in sens],
        "neutral": [len(r[1].split()) for r in neu]}
print("== lengths (words) ==")
for k, v in lens.items():
    print(f"{k:10s} n={len(v)} min={min(v)} max={max(v)} mean={statistics.mean(v):.1f} median={statistics.median(v)}")
long_ = [(f, q) for f, _, q in allq if len(q.split()) >= 15]
print(f"queries with >=15 words: {len(long_)} (sensitive {sum(f=='s' for f,_ in long_)}, neutral {sum(f=='n' for f,_ in long_)})")

print("\n== misspellings (tokens from tools/misspellings.txt) ==")
ms = [r for r in sens if miss & set(toks(r[1]))]
mn = [r for r in neu if miss & set(toks(r[1]))]
inspan = [r for r in ms if miss & set(toks(r[2]))]
used = set()
for r in sens + neu:
    used |= miss & set(toks(r[1]))
print(f"queries with a misspelling: {len(ms)+len(mn)} of 560 ({100*(len(ms)+len(mn))/560:.1f}%): sensitive {len(ms)}, neutral {len(mn)}")
print(f"sensitive with misspelling inside the span: {len(inspan)}; outside: {len(ms)-len(inspan)}")
print(f"distinct misspelled tokens listed: {len(miss)}; used: {len(used)}")
outside = sorted({w for r in ms for w in miss & set(toks(r[1])) if w not in toks(r[2])})
print("sensitive misspellings outside the span:", ", ".join(outside))
ap = [q for _, _, q in allq if APOS & set(toks(q))]
print(f"queries with a dropped apostrophe ({', '.join(sorted(APOS))}): {len(ap)} (not counted as misspellings)")

print("\n== case, person, digits ==")
caps = [(q, sorted({w for w in q.split() if any(c.isupper() for c in w)})) for _, _, q in allq if q != q.lower()]
print(f"all-lowercase queries: {560-len(caps)} of 560; with capitals: {len(caps)}: " + ", ".join(w for _, ws in caps for w in ws))
fp_s = sum(1 for r in sens if FIRST & set(toks(r[1])))
fp_n = sum(1 for r in neu if FIRST & set(toks(r[1])))
print(f"first-person queries: {fp_s+fp_n} (sensitive {fp_s}, neutral {fp_n})")
dg_s = sum(1 for r in sens if re.search(r"\d", r[1]))
dg_n = sum(1 for r in neu if re.search(r"\d", r[1]))
print(f"queries containing a digit: {dg_s+dg_n} (sensitive {dg_s}, neutral {dg_n})")

print("\n== spans ==")
sl = [len(r[2].split()) for r in sens]
print(f"span words: mean {statistics.mean(sl):.1f}, median {statistics.median(sl)}; one word {sl.count(1)}, "
      f"four or more {sum(1 for x in sl if x >= 4)}; whole query {sum(1 for r in sens if r[1] == r[2])}")

print("\n== topic-word-free sensitive queries (no term from tools/topicwords.txt) ==")
free = Counter()
for r in sens:
    q = r[1].lower()
    if not any(rx.search(q) for rx in topic_res):
        free[r[0]] += 1
tot = sum(free.values())
print(f"sensitive queries with no common topic word: {tot} of {len(sens)} ({100*tot/len(sens):.1f}%)")
for cat in sorted({r[0] for r in sens}):
    print(f"  {cat:24s} {free[cat]:2d}/20")
print(f"neutral queries containing a topic word: {sum(1 for r in neu if any(rx.search(r[1].lower()) for rx in topic_res))}")

print("\n== decoys ==")
per = Counter(neu[d-1][0] for d in decoys)
print(f"decoys: {len(decoys)}; per topic: " + ", ".join(f"{k} {v}" for k, v in sorted(per.items())))

#!/usr/bin/env python3
"""Style statistics for the README (misspellings, lengths, first person, etc.)."""
import os
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.dirname(HERE)

miss = set()
with open(os.path.join(HERE, "misspellings.txt"), encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            miss.add(line)

APOS = {"cant", "dont", "im", "isnt", "wont", "doesnt", "havent", "wasnt", "didnt",
        "theres", "theyll", "hes", "grandmas", "baldurs"}
FIRST = {"i", "im", "my", "me", "ive", "mine", "myself"}


def toks(s):
    return re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", s.lower())


def load(name):
    with open(os.path.join(OUT, name), encoding="utf-8") as f:
        return [l.rstrip("\n").split("\t") for l in f]


sens = load("sensitive.tsv")
neut = load("neutral.tsv")
decoys = set()
with open(os.path.join(OUT, "neutral_decoys.txt"), encoding="utf-8") as f:
    for l in f:
        l = l.strip()
        if l and not l.startswith("#"):
            decoys.add(int(l))

s_miss = [r for r in sens if miss & set(toks(r[1]))]
s_miss_span = [r for r in sens if miss & set(toks(r[2]))]
n_miss = [r for r in neut if miss & set(toks(r[1]))]
allq = [r[1] for r in sens] + [r[1] for r in neut]
lens = [len(q.split()) for q in allq]
used = {t for q in allq for t in toks(q)} & miss
unused = sorted(miss - used)

print(f"queries: {len(allq)} ({len(sens)} sensitive, {len(neut)} neutral, {len(decoys)} decoys)")
print(f"words per query: min {min(lens)}, max {max(lens)}, mean {statistics.mean(lens):.1f}, "
      f"median {statistics.median(lens)}; >=15 words: {sum(l >= 15 for l in lens)}")
print(f"  sensitive mean {statistics.mean(len(r[1].split()) for r in sens):.1f}, "
      f"neutral mean {statistics.mean(len(r[1].split()) for r in neut):.1f}")
print(f"misspelled queries: {len(s_miss) + len(n_miss)} "
      f"({100 * (len(s_miss) + len(n_miss)) / len(allq):.1f}%): {len(s_miss)} sensitive "
      f"({len(s_miss_span)} with the misspelling inside the span), {len(n_miss)} neutral")
print(f"distinct misspelled tokens: {len(used)}" + (f"; listed but unused: {unused}" if unused else ""))
print(f"all-lowercase queries: {sum(q == q.lower() for q in allq)}")
print(f"first-person queries (i/im/my/me/...): {sum(bool(FIRST & set(toks(q))) for q in allq)} "
      f"({sum(bool(FIRST & set(toks(r[1]))) for r in sens)} sensitive)")
print(f"queries with a dropped apostrophe (cant, dont, im, ...): {sum(bool(APOS & set(toks(q))) for q in allq)}")
print(f"queries containing a digit: {sum(bool(re.search(r'[0-9]', q)) for q in allq)}")
span_lens = [len(r[2].split()) for r in sens]
print(f"span words: mean {statistics.mean(span_lens):.1f}, one-word spans {sum(l == 1 for l in span_lens)}, "
      f"spans of 4+ words {sum(l >= 4 for l in span_lens)}, span = whole query {sum(r[1] == r[2] for r in sens)}")

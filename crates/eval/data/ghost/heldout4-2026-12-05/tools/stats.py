#!/usr/bin/env python3
"""Style statistics for the held-out set (output is copied to tools/stats.out)."""
import os, re, statistics
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FIRST_PERSON = {"i", "im", "ive", "id", "ill", "my", "me", "myself", "mine", "we", "our", "ours"}
DROPPED = {"cant", "dont", "im", "wont", "doesnt", "didnt", "isnt", "havent", "shes", "hes",
           "theres", "ive", "whats", "thats", "youre", "arent", "wasnt", "couldnt", "shouldnt",
           "crohns", "parkinsons", "menieres", "jehovahs", "tabbys", "jupiters", "runners"}


def toks(q):
    return re.findall(r"[a-z0-9][a-z0-9'-]*", q.lower())


def main():
    sens = [l.rstrip("\n").split("\t") for l in open(os.path.join(ROOT, "sensitive.tsv"), encoding="utf-8")]
    neut = [l.rstrip("\n").split("\t") for l in open(os.path.join(ROOT, "neutral.tsv"), encoding="utf-8")]
    miss = {w.strip().lower() for w in open(os.path.join(HERE, "misspellings.txt"), encoding="utf-8") if w.strip()}
    decoys = [int(l) for l in open(os.path.join(ROOT, "neutral_decoys.txt")) if l.strip() and not l.startswith("#")]
    out = []
    p = out.append

    allq = [r[1] for r in sens] + [r[1] for r in neut]
    wl = [len(q.split()) for q in allq]
    ws = [len(r[1].split()) for r in sens]
    wn = [len(r[1].split()) for r in neut]
    p(f"queries: {len(allq)} ({len(sens)} sensitive, {len(neut)} neutral, {len(decoys)} decoys)")
    p(f"words per query: min {min(wl)} max {max(wl)} mean {statistics.mean(wl):.1f} "
      f"(sensitive {statistics.mean(ws):.1f}, neutral {statistics.mean(wn):.1f}) median {statistics.median(wl):g}")
    p(f"queries with 15+ words: {sum(1 for n in wl if n >= 15)}")

    ms = [r for r in sens if miss & set(toks(r[1]))]
    mn = [r for r in neut if miss & set(toks(r[1]))]
    inspan = [r for r in ms if miss & set(toks(r[2]))]
    used = set()
    for q in allq:
        used |= miss & set(toks(q))
    p(f"queries with a deliberate misspelling: {len(ms) + len(mn)} ({100 * (len(ms) + len(mn)) / len(allq):.1f}%): "
      f"{len(ms)} sensitive ({len(inspan)} inside the span, {len(ms) - len(inspan)} outside), {len(mn)} neutral")
    p(f"distinct misspelled tokens listed: {len(miss)}; used: {len(used)}; unused: {sorted(miss - used)}")
    p(f"queries with a dropped apostrophe (cant, dont, im, ...): {sum(1 for q in allq if DROPPED & set(toks(q)))}")
    caps = [q for q in allq if q != q.lower()]
    p(f"all-lowercase queries: {len(allq) - len(caps)}; with capitals: {len(caps)}: " + "; ".join(caps))
    fs = sum(1 for r in sens if FIRST_PERSON & set(toks(r[1])))
    fn = sum(1 for r in neut if FIRST_PERSON & set(toks(r[1])))
    p(f"first-person queries: {fs + fn} ({fs} sensitive, {fn} neutral)")
    p(f"queries with a digit: {sum(1 for q in allq if re.search(r'[0-9]', q))}")

    sl = [len(r[2].split()) for r in sens]
    p(f"span words: mean {statistics.mean(sl):.1f}; one word {sum(1 for n in sl if n == 1)}; "
      f"four or more {sum(1 for n in sl if n >= 4)}; whole query {sum(1 for r in sens if r[1] == r[2])}")
    p("per category (sensitive): mean words / mean span words / misspelt / first person")
    for cat in sorted({r[0] for r in sens}):
        rows = [r for r in sens if r[0] == cat]
        p(f"  {cat:24s} {statistics.mean(len(r[1].split()) for r in rows):5.1f} "
          f"{statistics.mean(len(r[2].split()) for r in rows):5.1f} "
          f"{sum(1 for r in rows if miss & set(toks(r[1]))):3d} "
          f"{sum(1 for r in rows if FIRST_PERSON & set(toks(r[1]))):3d}")
    p("per topic (neutral): decoys / misspelt")
    dset = set(decoys)
    for cat in sorted({r[0] for r in neut}):
        idx = [i for i, r in enumerate(neut, 1) if r[0] == cat]
        p(f"  {cat:24s} {sum(1 for i in idx if i in dset):3d} "
          f"{sum(1 for i in idx if miss & set(toks(neut[i - 1][1]))):3d}")
    text = "\n".join(out) + "\n"
    print(text, end="")
    open(os.path.join(HERE, "stats.out"), "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    main()

//! The sensitive-topic matcher behind the content-aware labeler (issue 18; Ghost Tool Calls,
//! arXiv 2606.02483 §4 "Labeler").
//!
//! A deterministic stand-in for the paper's LLM labeler. It finds *spans* of sensitive text in
//! one scalar, so that the labeler can label the field and the rewriter can replace exactly
//! those spans. The means, all deterministic and shipped in the binary:
//!
//! - **A topic lexicon** written by hand for this project, one file per domain under
//!   `crates/core/data/` (health, medicines and substances, legal and immigration, financial
//!   distress, employment, sexuality/identity/relationships, self-harm/abuse/addiction,
//!   religion and belief, security incidents). It is not derived from the ghost-call
//!   evaluation's taxonomy; a test in the evaluation crate checks the overlap.
//! - **Suffix normalization**: text words and lexicon words are reduced by the same light
//!   stemmer ([`stem`]: plural, `-ing`, `-ed`, `-ion`, `-ive`, `-ment`, `-ness`, `-ly`, final
//!   `-e`), so "abuse" matches "abused", "abusive" and "abuses". Stems shorter than four letters
//!   are not used ("raped" must not match "rap").
//! - **Sourced name vocabularies**: 25,319 medicine and substance names and 8,595 words of
//!   disease names (`data/vocab-drugs.txt`, `data/vocab-conditions.txt`, generated from two
//!   MIT-licensed PyPI packages built on DrugBank's open vocabulary and MeSH; every word that
//!   is common English or a SCOWL proper name left out) are sensitive wherever they occur,
//!   also in the plural.
//! - **Misspelling tolerance**: a word of at least six letters that is not a lexicon word
//!   matches a lexicon word of at least six letters at Damerau edit distance 1 with the same
//!   first letter, and one of eight or more at distance 2, unless it is an English word itself
//!   (`data/dictionary.txt`, from Debian's `wamerican` list). A word of seven letters or more
//!   matches a sourced name the same way. Distance 2, and the names, are not tried for a word
//!   one slip from a common English word ("plumer", "trainning": that word misspelt). Lookup
//!   is by hashed single-deletion neighbourhoods; distance 2 by a bounded dynamic programme
//!   over the candidates with the same first letter, filtered by length and letter set.
//! - **The rare-word rule**: in a text that has a strong sensitive span, every word that is not
//!   in that dictionary (a brand, a rare disease, an abbreviation, a misspelling) is part of a
//!   sensitive span too; and **context terms** (`data/lexicon-weak.txt`: "terminated",
//!   "husband", "pills") count only next to a strong span. What a rewrite leaves of a
//!   sensitive field counts as having one (`Matcher::spans_in`, issue 18 item 2).
//! - **The context rule**: a text in the first person ("i", "my", "me", not "near me") that
//!   holds a context term other than a person of the user's life ("i took too many pills",
//!   "weed in my car"), or a word that is not common English and not one slip from it ("my
//!   grandpa takes zorvexa", "thinking about unaliving, i…"), counts as having a strong span;
//!   so does a context term next to a word that is not common English ("implantaion
//!   bleeding"). Then the rare-word rule applies.
//!   For the rare word, the first person must disclose ("my", "me", "i have"; not the "i" of
//!   "can i …", "do i …") within four words of it, and a common word with a deriving prefix or
//!   suffix ("unbaked", "refinance") or a Roman numeral is not rare.
//! - **Harm verbs with a personal object** ("hits my mom", "beat me", "burning my arm",
//!   "hurting my self") and **words written as two** ("foodstamps", "selfharm": two common
//!   words that make a two-word lexicon entry) are spans.
//! - **Phrase patterns** (`data/phrases.txt`, one section per sensitive category): plain
//!   statements of events and states in ordinary words ("got laid off", "2 months behind on
//!   my rent", "cant stop drinking", "threw a chair at me", "wish i was never born", "missed
//!   my period"), with alternatives, word prefixes, number and any-word slots and optional
//!   words; indexed by their first word, the longest match at a word wins over a shorter
//!   lexicon entry.
//!   A misspelling of a pattern word or a harm verb (six letters or more, one slip, not itself
//!   English: "coersive control", "scrathing my arm") matches as the word would.
//! - **Common-word disease names** (`data/vocab-conditions-common.txt`, MeSH via the same
//!   MIT-licensed package: "shingles", "gout") are context terms.
//! - **Veterinary questions**: a health or harm lexicon term said of an animal (an animal word
//!   before it in the clause and no person word between: "my dog has anxiety") is not a span.
//! - **Name rules**: a word ending in a clinical suffix (`-itis`, `-osis`, `-emia`, `-oma`,
//!   `-pathy`, `-ectomy`, …) or an international nonproprietary drug-name stem (`-statin`,
//!   `-pril`, `-mab`, `-vir`, …) is a condition or a medicine unless listed as an everyday word.
//! - **Head nouns extend backwards** ("multiple system atrophy", "Ehlers-Danlos syndrome") over
//!   up to three content words; **slot phrases extend forwards** ("diagnosed with …", "side
//!   effects of …", "arrested for …") over up to three content words, so the name of the thing
//!   goes with the phrase that announces it.
//! - **Exclusions**: phrases in which a hit is an everyday sense ("great depression", "visa
//!   card", "carbon dating") do not count.
//!
//! What it cannot do (see README "Labeler"): euphemism and slang it has no word for, names it
//! has no word or rule for when no first-person or context word stands beside them (religious
//! observances, statute numbers, visa abbreviations), misspellings further than two letters or
//! of words that are common English, and meaning carried by ordinary words that no phrase
//! pattern foresees ("canned today no warning", "he comes home angry").

use crate::contract::ArgLabel;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The built-in lexicon files: (domain, text).
const SOURCES: &[(&str, &str)] = &[
    ("health", include_str!("../data/lexicon-health.txt")),
    ("medicines", include_str!("../data/lexicon-drugs.txt")),
    ("legal", include_str!("../data/lexicon-legal.txt")),
    ("financial", include_str!("../data/lexicon-finance.txt")),
    ("employment", include_str!("../data/lexicon-employment.txt")),
    ("identity", include_str!("../data/lexicon-identity.txt")),
    ("harm", include_str!("../data/lexicon-harm.txt")),
    ("belief", include_str!("../data/lexicon-belief.txt")),
    ("security", include_str!("../data/lexicon-security.txt")),
];

/// Terms that count only in a field that has another (strong) sensitive span.
const WEAK: &str = include_str!("../data/lexicon-weak.txt");

/// Disease names of one word that are common English ("shingles", "gout"), from MeSH
/// (`data/vocab-conditions-common.txt`, same generator as the sourced names): context terms,
/// like [`WEAK`].
const COMMON_CONDITIONS: &str = include_str!("../data/vocab-conditions-common.txt");

/// Common English words (the rare-word rule).
const DICTIONARY: &str = include_str!("../data/dictionary.txt");

/// Words the rewriter's placeholders are made of.
const PLACEHOLDER_WORDS: &[&str] = &[
    "email", "iban", "card", "phone", "url", "secret", "topic", "redacted", "handle",
];

static COMMON: std::sync::LazyLock<FnvSet<&'static str>> = std::sync::LazyLock::new(|| {
    DICTIONARY
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::trim)
        .chain(PLACEHOLDER_WORDS.iter().copied())
        .collect()
});

/// Medicine and substance names (generic and brand) from a public vocabulary
/// (`data/vocab-drugs.txt`, generated by `data/gen-medical-vocab.py`; see `data/README.md`).
const DRUG_VOCAB: &str = include_str!("../data/vocab-drugs.txt");

/// Words of disease and condition names from MeSH (`data/vocab-conditions.txt`, same
/// generator).
const CONDITION_VOCAB: &str = include_str!("../data/vocab-conditions.txt");

/// Shortest sourced name that a misspelling may match (shorter names collide with other rare
/// words too often).
const NAME_FUZZY_MIN: usize = 7;

/// Shortest word that may match a lexicon word at edit distance 2.
const DISTANCE_TWO_MIN: usize = 8;

/// The sourced name vocabularies: every name, and a misspelling index over the names of
/// [`NAME_FUZZY_MIN`] letters or more.
struct Names {
    /// Every name (lower case).
    words: FnvSet<&'static str>,
    /// The names of the misspelling index.
    list: Vec<&'static str>,
    /// (FNV hash of a name, or of a name with one byte deleted; index into `list`), sorted by
    /// hash. A word at Damerau distance 1 from a name shares one of these hashes with it.
    dels: Vec<(u64, u32)>,
    /// (index into `list`, letter mask, length) by first letter, for the distance-2 scan.
    by_letter: Vec<Vec<(u32, u32, usize)>>,
}

static NAMES: std::sync::LazyLock<Names> = std::sync::LazyLock::new(|| {
    let words: FnvSet<&'static str> = DRUG_VOCAB
        .lines()
        .chain(CONDITION_VOCAB.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut list: Vec<&'static str> = words
        .iter()
        .copied()
        .filter(|w| w.len() >= NAME_FUZZY_MIN && w.bytes().all(|b| b.is_ascii_lowercase()))
        .collect();
    list.sort_unstable();
    let mut dels = Vec::new();
    let mut by_letter = vec![Vec::new(); 26];
    for (i, w) in list.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let b = w.as_bytes();
        dels.push((fnv(b, usize::MAX), i));
        for k in 0..b.len() {
            dels.push((fnv(b, k), i));
        }
        if let Some(v) = b
            .first()
            .and_then(|c| by_letter.get_mut(usize::from(c.wrapping_sub(b'a'))))
        {
            v.push((i, letter_mask(b), b.len()));
        }
    }
    dels.sort_unstable();
    dels.dedup();
    Names {
        words,
        list,
        dels,
        by_letter,
    }
});

impl Names {
    /// Whether `lower` (a word that is not common English) is a sourced medicine or condition
    /// name, in its plural, or misspelt: Damerau distance 1 from a name of seven letters or
    /// more, or 2 from one of eight or more, with the same first letter.
    fn find(&self, lower: &str) -> bool {
        if self.words.contains(lower)
            || lower
                .strip_suffix('s')
                .is_some_and(|w| self.words.contains(w))
        {
            return true;
        }
        let b = lower.as_bytes();
        if b.len() < NAME_FUZZY_MIN || !b.iter().all(u8::is_ascii_lowercase) || near_common(lower) {
            return false;
        }
        let lookup = |h: u64| {
            let start = self.dels.partition_point(|&(x, _)| x < h);
            self.dels
                .get(start..)
                .unwrap_or(&[])
                .iter()
                .take_while(move |&&(x, _)| x == h)
                .map(|&(_, i)| i)
        };
        let near = std::iter::once(usize::MAX)
            .chain(0..b.len())
            .flat_map(|k| lookup(fnv(b, k)))
            .any(|i| {
                self.list.get(i as usize).is_some_and(|c| {
                    c.as_bytes().first() == b.first() && distance_one(c.as_bytes(), b)
                })
            });
        if near || b.len() < DISTANCE_TWO_MIN {
            return near;
        }
        let bm = letter_mask(b);
        b.first()
            .and_then(|c| self.by_letter.get(usize::from(c.wrapping_sub(b'a'))))
            .is_some_and(|ids| {
                ids.iter().any(|&(i, mask, len)| {
                    len >= DISTANCE_TWO_MIN
                        && len.abs_diff(b.len()) <= 2
                        && (mask ^ bm).count_ones() <= 4
                        && self
                            .list
                            .get(i as usize)
                            .is_some_and(|c| within(c.as_bytes(), b, 2))
                })
            })
    }
}

/// The set of letters `a`–`z` in `b`, one bit each: one edit changes at most two bits, so
/// words whose masks differ in more than `2k` bits are not within distance `k`.
fn letter_mask(b: &[u8]) -> u32 {
    b.iter()
        .filter(|c| c.is_ascii_lowercase())
        .fold(0, |m, c| m | (1 << (c - b'a')))
}

/// Longest word [`within`] compares.
const WITHIN_MAX: usize = 40;

/// Whether `a` and `b` are within optimal-string-alignment (Damerau) distance `k`: a dynamic
/// programme over three rows on the stack that gives up as soon as a whole row exceeds `k`.
/// Words longer than [`WITHIN_MAX`] bytes are never within.
fn within(a: &[u8], b: &[u8], k: usize) -> bool {
    let m = b.len();
    if a.len().abs_diff(m) > k || a.len() > WITHIN_MAX || m > WITHIN_MAX {
        return false;
    }
    // Cells hold min(distance, k + 1), so a byte is enough (k < 255).
    let big = u8::try_from(k + 1).unwrap_or(u8::MAX);
    let k = big.saturating_sub(1);
    let mut prev2 = [big; WITHIN_MAX + 1];
    let mut prev = [big; WITHIN_MAX + 1];
    let mut cur = [big; WITHIN_MAX + 1];
    for (j, v) in prev.iter_mut().enumerate().take(m + 1) {
        *v = u8::try_from(j).unwrap_or(u8::MAX).min(big);
    }
    for (i, &ca) in a.iter().enumerate() {
        let i = i + 1;
        cur[0] = u8::try_from(i).unwrap_or(u8::MAX).min(big);
        let mut row_min = cur[0];
        for j in 1..=m {
            let cb = b.get(j - 1).copied().unwrap_or(0);
            let cost = u8::from(ca != cb);
            let mut v = prev
                .get(j)
                .copied()
                .unwrap_or(big)
                .saturating_add(1)
                .min(cur.get(j - 1).copied().unwrap_or(big).saturating_add(1))
                .min(prev.get(j - 1).copied().unwrap_or(big).saturating_add(cost));
            if i > 1 && j > 1 && a.get(i - 2) == Some(&cb) && b.get(j - 2) == Some(&ca) {
                v = v.min(prev2.get(j - 2).copied().unwrap_or(big).saturating_add(1));
            }
            let v = v.min(big);
            if let Some(c) = cur.get_mut(j) {
                *c = v;
            }
            row_min = row_min.min(v);
        }
        if row_min > k {
            return false;
        }
        prev2 = prev;
        prev = cur;
    }
    prev.get(m).is_some_and(|&v| v <= k)
}

/// Deletion index over the common English words of five letters or more: (FNV hash of the
/// word or of the word with one byte deleted, index into `words`), sorted by hash.
struct CommonNear {
    words: Vec<&'static str>,
    dels: Vec<(u64, u32)>,
}

static COMMON_NEAR: std::sync::LazyLock<CommonNear> = std::sync::LazyLock::new(|| {
    let mut words: Vec<&'static str> = DICTIONARY
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::trim)
        .filter(|w| w.len() >= 5 && w.bytes().all(|b| b.is_ascii_lowercase()))
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut dels = Vec::with_capacity(words.len() * 9);
    for (i, w) in words.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let b = w.as_bytes();
        dels.push((fnv(b, usize::MAX), i));
        for k in 0..b.len() {
            dels.push((fnv(b, k), i));
        }
    }
    dels.sort_unstable();
    dels.dedup();
    CommonNear { words, dels }
});

/// Whether `lower` (not itself common English) is one slip (Damerau distance 1, same first
/// letter) from a common English word of five letters or more: then it is that word misspelt
/// ("plumer", "trainning"), not a rare name.
fn near_common(lower: &str) -> bool {
    let b = lower.as_bytes();
    if b.len() < 5 || !b.iter().all(u8::is_ascii_lowercase) {
        return false;
    }
    let idx = &*COMMON_NEAR;
    std::iter::once(usize::MAX).chain(0..b.len()).any(|k| {
        let h = fnv(b, k);
        let start = idx.dels.partition_point(|&(x, _)| x < h);
        idx.dels
            .get(start..)
            .unwrap_or(&[])
            .iter()
            .take_while(|&&(x, _)| x == h)
            .any(|&(_, i)| {
                idx.words.get(i as usize).is_some_and(|w| {
                    w.as_bytes().first() == b.first() && distance_one(w.as_bytes(), b)
                })
            })
    })
}

/// Verbs of violence and self-harm: with a personal object after them ("hits my mom", "beat
/// me", "burning my arm", "hurting my self") they are a sensitive span.
const HARM_VERBS: &[&str] = &[
    "hit",
    "hits",
    "hitting",
    "beat",
    "beats",
    "beating",
    "beaten",
    "hurt",
    "hurts",
    "hurting",
    "cut",
    "cuts",
    "cutting",
    "burn",
    "burns",
    "burning",
    "burned",
    "burnt",
    "scratch",
    "scratches",
    "scratching",
    "scratched",
    "punch",
    "punches",
    "punched",
    "punching",
    "kick",
    "kicks",
    "kicked",
    "kicking",
    "slap",
    "slaps",
    "slapped",
    "slapping",
    "choke",
    "chokes",
    "choked",
    "choking",
    "strangle",
    "strangled",
    "strangling",
    "stab",
    "stabbed",
    "stabbing",
    "shove",
    "shoved",
    "shoves",
    "push",
    "pushed",
    "pushes",
    "grab",
    "grabbed",
    "grabs",
    "touch",
    "touched",
    "touches",
    "touching",
    "threaten",
    "threatened",
    "threatens",
    "starve",
    "starving",
    "starved",
];

/// Personal objects of a harm verb: reflexive and object pronouns of the first person.
const HARM_OBJECTS: &[&str] = &["me", "myself", "us", "ourselves"];

/// What "my" may introduce as the object of a harm verb: the self, body parts, family and
/// partners.
const HARM_MY_OBJECTS: &[&str] = &[
    "self",
    "body",
    "arm",
    "arms",
    "wrist",
    "wrists",
    "leg",
    "legs",
    "thigh",
    "thighs",
    "skin",
    "face",
    "stomach",
    "chest",
    "hand",
    "hands",
    "head",
    "neck",
    "throat",
    "back",
    "hip",
    "hips",
    "mom",
    "mum",
    "mother",
    "dad",
    "father",
    "wife",
    "husband",
    "son",
    "daughter",
    "kid",
    "kids",
    "child",
    "children",
    "baby",
    "sister",
    "brother",
    "girlfriend",
    "boyfriend",
    "partner",
    "grandma",
    "grandmother",
    "grandpa",
    "grandfather",
    "stepmom",
    "stepdad",
];

/// Context terms that name a person of the user's life: "my husband" alone is ordinary
/// speech, so they do not make a first-person text sensitive by themselves.
const PEOPLE: &[&str] = &[
    "husband",
    "wife",
    "partner",
    "boyfriend",
    "girlfriend",
    "boss",
    "manager",
    "employer",
    "hr",
    "doctor",
    "physician",
    "pastor",
    "imam",
];

/// Phrase patterns (`data/phrases.txt`): plain statements of sensitive events and states
/// ("i owe", "2 months behind on", "got let go", "cant stop drinking", "missed my period"),
/// one category at a time. See that file's header for the pattern syntax.
const PHRASES: &str = include_str!("../data/phrases.txt");

/// Words a number slot (`<n>`) takes besides numerals.
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "few", "couple", "several",
];

/// One element of a phrase pattern.
#[derive(Debug, Clone, Default)]
struct PhraseElem {
    /// Lower-case words the token may be (apostrophes dropped, as the tokenizer does).
    words: Vec<String>,
    /// Prefixes the token may start with (`drink*`).
    prefixes: Vec<String>,
    /// Any one word (`*`).
    any: bool,
    /// A number: digits or a number word (`<n>`).
    number: bool,
    /// The element may be skipped (`?`).
    optional: bool,
}

impl PhraseElem {
    fn matches(&self, t: &Token) -> bool {
        let w = t.lower.as_str();
        self.any
            || (self.number
                && (w.starts_with(|c: char| c.is_ascii_digit()) || NUMBER_WORDS.contains(&w)))
            || self
                .words
                .iter()
                .any(|x| x == w || t.alt == Some(x.as_str()))
            || self.prefixes.iter().any(|p| {
                w.starts_with(p.as_str()) || t.alt.is_some_and(|a| a.starts_with(p.as_str()))
            })
    }

    /// Parse one element (`?a|b|pre*`, `*`, `<n>`); `None` for an empty one.
    fn parse(src: &str) -> Option<Self> {
        let (optional, body) = match src.strip_prefix('?') {
            Some(b) => (true, b),
            None => (false, src),
        };
        let mut e = PhraseElem {
            optional,
            ..PhraseElem::default()
        };
        for alt in body.split('|').filter(|a| !a.is_empty()) {
            match alt {
                "*" => e.any = true,
                "<n>" => e.number = true,
                _ => {
                    let a: String = alt.chars().filter(|&c| c != '\'').collect();
                    match a.strip_suffix('*') {
                        Some(p) if !p.is_empty() => e.prefixes.push(p.to_owned()),
                        _ => e.words.push(a),
                    }
                }
            }
        }
        (e.any || e.number || !e.words.is_empty() || !e.prefixes.is_empty()).then_some(e)
    }
}

/// The compiled phrase patterns, indexed by the words a pattern must start with.
#[derive(Debug, Clone, Default)]
struct Phrases {
    list: Vec<Vec<PhraseElem>>,
    /// A required first word → patterns starting with it.
    by_first: FnvMap<String, Vec<u32>>,
    /// Patterns whose first element is optional, a prefix, a number or any word: tried at
    /// every token.
    general: Vec<u32>,
}

impl Phrases {
    fn parse(text: &str) -> Self {
        let mut p = Phrases::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with("# ") || line == "#" {
                continue;
            }
            let Some(elems) = line
                .split_whitespace()
                .map(PhraseElem::parse)
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            if elems.iter().all(|e| e.optional || e.any) {
                continue;
            }
            let id = u32::try_from(p.list.len()).unwrap_or(u32::MAX);
            match elems.first() {
                Some(f) if !f.optional && !f.any && !f.number && f.prefixes.is_empty() => {
                    for w in &f.words {
                        p.by_first.entry(w.clone()).or_default().push(id);
                    }
                }
                _ => p.general.push(id),
            }
            p.list.push(elems);
        }
        p
    }

    /// Length of the longest pattern match starting at token `i` (at least one token).
    fn longest_at(&self, tokens: &[Token], i: usize) -> Option<usize> {
        let first = tokens.get(i)?;
        let by_alt = first.alt.and_then(|a| self.by_first.get(a));
        self.by_first
            .get(first.lower.as_str())
            .into_iter()
            .flatten()
            .chain(by_alt.into_iter().flatten())
            .chain(&self.general)
            .filter_map(|&id| {
                let elems = self.list.get(id as usize)?;
                phrase_match(elems, tokens, i).filter(|&end| end > i)
            })
            .max()
            .map(|end| end - i)
    }
}

/// The built-in phrase patterns, parsed once.
static PHRASE_SET: std::sync::LazyLock<Phrases> =
    std::sync::LazyLock::new(|| Phrases::parse(PHRASES));

/// Shortest rule word a misspelling may stand for (as for lexicon words).
const RULE_FUZZY_MIN: usize = 6;

/// The words the rules match literally — the words of the phrase patterns and the harm verbs —
/// of [`RULE_FUZZY_MIN`] letters or more, with a deletion index (FNV hash of the word or of the
/// word with one byte deleted; index into `words`, sorted by hash), so that a misspelling of
/// one ("coersive control", "morning sicknes", "scrathing my arm") matches the rule as the
/// lexicon's misspellings match their terms.
struct RuleWords {
    words: Vec<&'static str>,
    dels: Vec<(u64, u32)>,
}

static RULE_WORDS: std::sync::LazyLock<RuleWords> = std::sync::LazyLock::new(|| {
    let phrases: &'static Phrases = &PHRASE_SET;
    let mut words: Vec<&'static str> = phrases
        .list
        .iter()
        .flatten()
        .flat_map(|e| e.words.iter().map(String::as_str))
        .chain(HARM_VERBS.iter().copied())
        .filter(|w| w.len() >= RULE_FUZZY_MIN && w.bytes().all(|b| b.is_ascii_lowercase()))
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut dels = Vec::with_capacity(words.len() * 9);
    for (i, w) in words.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let b = w.as_bytes();
        dels.push((fnv(b, usize::MAX), i));
        for k in 0..b.len() {
            dels.push((fnv(b, k), i));
        }
    }
    dels.sort_unstable();
    dels.dedup();
    RuleWords { words, dels }
});

/// The rule word `lower` misspells: Damerau distance 1, same first letter, six letters or
/// more. The caller makes sure `lower` is not itself an English or lexicon word.
fn rule_word(lower: &str) -> Option<&'static str> {
    let b = lower.as_bytes();
    if b.len() < RULE_FUZZY_MIN || !b.iter().all(u8::is_ascii_lowercase) {
        return None;
    }
    let idx: &'static RuleWords = &RULE_WORDS;
    std::iter::once(usize::MAX).chain(0..b.len()).find_map(|k| {
        let h = fnv(b, k);
        let start = idx.dels.partition_point(|&(x, _)| x < h);
        idx.dels
            .get(start..)
            .unwrap_or(&[])
            .iter()
            .take_while(|&&(x, _)| x == h)
            .find_map(|&(_, i)| {
                idx.words
                    .get(i as usize)
                    .copied()
                    .filter(|w| w.as_bytes().first() == b.first() && distance_one(w.as_bytes(), b))
            })
    })
}

/// Whether some phrase pattern of `data/phrases.txt` matches the whole of `text` (every word,
/// nothing more): for the check that the patterns are not the evaluation generator's
/// vocabulary (issue 18 item 4).
pub fn phrase_covers(text: &str) -> bool {
    let tokens = tokenize(text);
    !tokens.is_empty()
        && PHRASE_SET
            .list
            .iter()
            .any(|elems| phrase_match_exact(elems, &tokens, 0))
}

/// Whether `elems` match exactly `tokens[j..]` (every way of skipping optional elements tried).
fn phrase_match_exact(elems: &[PhraseElem], tokens: &[Token], j: usize) -> bool {
    let Some((e, rest)) = elems.split_first() else {
        return j == tokens.len();
    };
    (tokens.get(j).is_some_and(|t| e.matches(t)) && phrase_match_exact(rest, tokens, j + 1))
        || (e.optional && phrase_match_exact(rest, tokens, j))
}

/// One past the last token of a match of `elems` at token `j` (greedy: an optional element
/// is taken when the rest still matches).
fn phrase_match(elems: &[PhraseElem], tokens: &[Token], j: usize) -> Option<usize> {
    let Some((e, rest)) = elems.split_first() else {
        return Some(j);
    };
    let taken = tokens
        .get(j)
        .filter(|t| e.matches(t))
        .and_then(|_| phrase_match(rest, tokens, j + 1));
    if taken.is_some() || !e.optional {
        return taken;
    }
    phrase_match(rest, tokens, j)
}

/// Lexicon domains whose terms, said of an animal, are not about the user.
/// Medicines are left out: a dog that ate pills found them in the user's home.
const BODILY_DOMAINS: &[&str] = &["health", "harm"];

/// Animals people ask about: a health term said of one is a veterinary question.
const ANIMALS: &[&str] = &[
    "dog", "dogs", "puppy", "puppies", "pup", "pups", "cat", "cats", "kitten", "kittens", "kitty",
    "hamster", "hamsters", "rabbit", "rabbits", "bunny", "horse", "horses", "pony", "bird",
    "birds", "parrot", "budgie", "fish", "goldfish", "guinea", "ferret", "chicken", "chickens",
    "hen", "hens", "cow", "cows", "goat", "goats", "sheep", "pig", "pigs", "gerbil", "rat", "rats",
    "mouse", "mice", "lizard", "gecko", "snake", "tortoise", "turtle", "pet", "pets", "canine",
    "feline", "mare", "calf", "lamb",
];

/// Words that make a person the subject again between an animal and a term ("my dog sensed
/// my depression", "the cat and i").
const PERSON_WORDS: &[&str] = &[
    "i", "im", "ive", "id", "my", "me", "myself", "he", "she", "him", "her", "his", "we", "us",
    "our", "they", "them", "you", "your",
];

/// Whether the term at token `i` is said of an animal: an animal word comes before it in the
/// same clause with no person word in between ("my dog has anxiety", "dog arthritis
/// supplements", "signs my rabbit is pregnant"; not "can my dog sense my anxiety").
fn said_of_an_animal(tokens: &[Token], i: usize) -> bool {
    let mut k = i;
    while k > 0 {
        if tokens.get(k).is_some_and(|t| t.brk) {
            return false;
        }
        k -= 1;
        let Some(t) = tokens.get(k) else { return false };
        let w = t.lower.as_str();
        if ANIMALS.contains(&w) || w.strip_suffix('s').is_some_and(|x| ANIMALS.contains(&x)) {
            return true;
        }
        if PERSON_WORDS.contains(&w) || PEOPLE.contains(&w) || HARM_MY_OBJECTS.contains(&w) {
            return false;
        }
    }
    false
}

/// Auxiliaries that make a following "i" a how-to question ("can i freeze …", "do i need …")
/// rather than a statement about the user.
const QUESTION_AUX: &[&str] = &[
    "can", "could", "should", "would", "will", "do", "did", "may", "might", "shall", "must",
];

/// Largest distance in words between a first-person word and a rare word for the context rule.
const RARE_WINDOW: usize = 4;

/// Prefixes that make a new word of a common one ("unbaked", "overproofed").
const DERIVING_PREFIXES: &[&str] = &[
    "un", "re", "pre", "non", "over", "under", "mis", "out", "semi", "sub", "super", "mini",
    "micro", "multi", "co", "de", "dis", "inter", "counter",
];

/// Suffixes that make a new word of a common one ("bakeable", "greenish").
const DERIVING_SUFFIXES: &[&str] = &[
    "able", "ible", "ish", "less", "ful", "er", "ers", "est", "y", "ly", "ness", "ism", "ist",
    "ize", "ized", "ing", "ed", "s",
];

/// Whether `lower` is a common English word of four letters or more with a deriving prefix or
/// suffix: an ordinary word the dictionary happens not to list, not a name.
fn derived_common(lower: &str) -> bool {
    let common = |w: &str| w.len() >= 4 && COMMON.contains(w);
    DERIVING_PREFIXES
        .iter()
        .any(|p| lower.strip_prefix(p).is_some_and(common))
        || DERIVING_SUFFIXES.iter().any(|x| {
            lower.strip_suffix(x).is_some_and(|r| {
                common(r) || (r.len() >= 3 && COMMON.contains(format!("{r}e").as_str()))
            })
        })
}

/// Whether `lower` is a Roman numeral ("viii", "xiv"): a king's or a sequel's number.
fn is_roman_numeral(lower: &str) -> bool {
    !lower.is_empty() && lower.len() <= 6 && lower.bytes().all(|b| b"ivxlcdm".contains(&b))
}

/// First-person words: with one of them in a text, a word that is not common English is
/// treated as identifying (the context rule of [`Matcher::spans_in`]).
const FIRST_PERSON: &[&str] = &["i", "im", "ive", "id", "my", "me", "myself", "mine"];

/// Phrases in which a lexicon hit is an everyday sense.
const EXCLUSIONS: &str = include_str!("../data/lexicon-exclusions.txt");

/// Clinical suffixes naming conditions and procedures.
const CONDITION_SUFFIXES: &[&str] = &[
    "itis", "osis", "emia", "aemia", "oma", "omas", "pathy", "algia", "ectomy", "otomy", "ostomy",
    "plasty", "plasia", "trophy", "phobia", "phrenia", "plegia", "cele", "iasis",
];

/// International nonproprietary name stems of medicines.
const DRUG_SUFFIXES: &[&str] = &[
    "mab",
    "nib",
    "vir",
    "pril",
    "sartan",
    "olol",
    "statin",
    "azepam",
    "azolam",
    "oxetine",
    "afil",
    "prazole",
    "tidine",
    "cycline",
    "mycin",
    "cillin",
    "floxacin",
    "triptan",
    "gliptin",
    "gliflozin",
    "glutide",
    "dronate",
    "parin",
    "vudine",
    "codone",
    "morphone",
    "barbital",
    "apine",
    "idone",
    "oxacin",
    "conazole",
    "zosin",
    "dipine",
    "semide",
    "thiazide",
    "lukast",
    "setron",
    "xaban",
    "gatran",
    "tinib",
    "ciclib",
    "zumab",
    "ximab",
    "lizumab",
    "tretinoin",
    "caine",
    "profen",
    "coxib",
    "triptyline",
    "pramine",
    "azine",
    "olone",
    "sonide",
    "tropium",
    "terol",
];

/// Everyday words that end in one of the suffixes above.
const SUFFIX_WORDS: &[&str] = &[
    "academia",
    "algenib",
    "antipathy",
    "apotheosis",
    "bohemia",
    "dichotomy",
    "diploma",
    "diplomas",
    "dodoma",
    "guadalquivir",
    "kuwaitis",
    "magazine",
    "magazines",
    "metamorphosis",
    "meiosis",
    "mitosis",
    "nostalgia",
    "oklahoma",
    "osmosis",
    "symbiosis",
    "sympathy",
    "tacoma",
    "telepathy",
    "wapitis",
    "sonoma",
    "paloma",
    "sympathies",
    "antipathies",
];

/// Head nouns that take the words before them ("multiple system atrophy").
const HEADS: &[&str] = &[
    "syndrome",
    "disease",
    "disorder",
    "cancer",
    "atrophy",
    "dystrophy",
    "palsy",
    "sclerosis",
    "deficiency",
    "fever",
    "infection",
    "tumor",
    "tumour",
    "virus",
    "carcinoma",
    "lymphoma",
    "leukemia",
    "sarcoma",
    "anemia",
    "dementia",
    "neuropathy",
    "arthritis",
    "hepatitis",
    "fibrosis",
    "cyst",
    "lesion",
    "ulcer",
    "condition",
    "allergy",
    "addiction",
    "visa",
    "status",
    "charges",
    "charge",
    "conviction",
    "offense",
    "offence",
    "felony",
];

/// Phrases whose next content words name the sensitive thing ("diagnosed with …").
const SLOTS: &[&str] = &[
    "diagnosed with",
    "suffering from",
    "suffer from",
    "suffers from",
    "side effects of",
    "side effect of",
    "symptoms of",
    "signs of",
    "treatment for",
    "treatments for",
    "treating",
    "cure for",
    "prognosis for",
    "prescribed",
    "started taking",
    "stopped taking",
    "stop taking",
    "addicted to",
    "withdrawal from",
    "detox from",
    "charged with",
    "convicted of",
    "arrested for",
    "accused of",
    "tested positive for",
    "positive for",
    "overdose on",
    "overdosed on",
    "allergic to",
    "dose of",
    "dosage of",
    "mg of",
    "living with",
    "recovering from",
    "biopsy of",
    "surgery for",
    "relapsed on",
    "hooked on",
];

/// Function words: slots and heads do not extend over them.
const STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "and",
    "or",
    "but",
    "if",
    "then",
    "so",
    "of",
    "to",
    "in",
    "on",
    "at",
    "for",
    "from",
    "with",
    "by",
    "about",
    "as",
    "into",
    "after",
    "before",
    "since",
    "while",
    "i",
    "i'm",
    "im",
    "i've",
    "ive",
    "me",
    "my",
    "mine",
    "we",
    "our",
    "us",
    "you",
    "your",
    "he",
    "she",
    "him",
    "her",
    "his",
    "they",
    "them",
    "their",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "am",
    "do",
    "does",
    "did",
    "have",
    "has",
    "had",
    "will",
    "would",
    "can",
    "could",
    "should",
    "shall",
    "may",
    "might",
    "must",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "not",
    "no",
    "yes",
    "just",
    "very",
    "too",
    "also",
    "now",
    "today",
    "yesterday",
    "tonight",
    "last",
    "next",
    "still",
    "again",
    "really",
    "get",
    "got",
    "getting",
    "any",
    "some",
    "all",
    "near",
    "best",
    "help",
    "need",
    "want",
    "think",
    "thinks",
    "know",
    "say",
    "says",
    "said",
    "there",
    "here",
    "than",
    "like",
    "because",
    "without",
    "over",
    "under",
    "way",
    "ways",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "day",
    "days",
    "night",
    "morning",
    "started",
    "starting",
    "start",
    "taking",
    "take",
    "took",
    "stop",
    "stopped",
    "using",
    "use",
    "tell",
    "told",
    "go",
    "going",
    "went",
    "found",
    "find",
    "out",
    "up",
    "off",
    "new",
];

/// The length of a harm-verb span starting at token `i` ("hits my mom" → 3), if there is one.
fn harm_object(tokens: &[Token], i: usize) -> Option<usize> {
    let verb = tokens.get(i)?;
    if !HARM_VERBS.contains(&verb.lower.as_str())
        && !verb.alt.is_some_and(|a| HARM_VERBS.contains(&a))
    {
        return None;
    }
    let next = tokens.get(i + 1).filter(|t| !t.brk)?;
    if HARM_OBJECTS.contains(&next.lower.as_str()) {
        return Some(2);
    }
    if next.lower == "my" {
        let obj = tokens.get(i + 2).filter(|t| !t.brk)?;
        let own = obj.lower.strip_suffix('s').unwrap_or(&obj.lower);
        if HARM_MY_OBJECTS.contains(&obj.lower.as_str()) || HARM_MY_OBJECTS.contains(&own) {
            return Some(3);
        }
    }
    None
}

/// Determiners a slot may skip before its content words.
const DETERMINERS: &[&str] = &["a", "an", "the", "my", "some", "his", "her", "their", "our"];

/// Maximum words a head or slot adds.
const EXTEND: usize = 3;

/// A word of a text: byte range, lower-case form, lexicon form and whether punctuation
/// separates it from the word before.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    /// Byte offset of the word's first byte.
    pub start: usize,
    /// Byte offset one past the word's last byte.
    pub end: usize,
    /// Lower-case form.
    pub lower: String,
    /// Lexicon form: the lexicon's canonical form of the word, its stem, or its lower case.
    canon: String,
    /// Punctuation (not only spaces) stands between this word and the previous one.
    brk: bool,
    /// The rule word (a phrase-pattern word or a harm verb) this word is a misspelling of, if
    /// any ("sicknes" → "sickness", "scrathing" → "scratching").
    alt: Option<&'static str>,
}

/// Whether `c` belongs to a word (letters, digits, apostrophes).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\'' || c == '\u{2019}'
}

/// The words of `text` with their byte ranges (lexicon forms unset).
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut last_end = 0;
    let push = |s: usize, e: usize, last_end: &mut usize, out: &mut Vec<Token>| {
        let raw = text.get(s..e).unwrap_or("");
        let mut lower: String = if raw.is_ascii() {
            raw.to_ascii_lowercase()
        } else {
            raw.chars()
                .map(|c| if c == '\u{2019}' { '\'' } else { c })
                .flat_map(char::to_lowercase)
                .collect()
        };
        if lower.contains('\'') {
            // "can't" and "cant", "I'm" and "im" are one word.
            lower.retain(|c| c != '\'');
        }
        let gap = text.get(*last_end..s).unwrap_or("");
        let brk = gap.chars().any(|c| ",.;:?!()[]{}\"|/\n".contains(c));
        *last_end = e;
        // "F-1", "H-1B", "I-485" are one word ("f1", "h1b", "i485"), as written without the
        // hyphen.
        if gap == "-"
            && lower.starts_with(|c: char| c.is_ascii_digit())
            && let Some(prev) = out.last_mut()
            && prev.end + 1 == s
            && prev.lower.len() <= 2
            && prev.lower.bytes().all(|b| b.is_ascii_lowercase())
        {
            prev.end = e;
            prev.lower.push_str(&lower);
            return;
        }
        if !lower.is_empty() {
            out.push(Token {
                start: s,
                end: e,
                canon: String::new(),
                lower,
                brk,
                alt: None,
            });
        }
    };
    for (i, c) in text.char_indices() {
        match (is_word_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                push(s, i, &mut last_end, &mut out);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        push(s, text.len(), &mut last_end, &mut out);
    }
    out
}

/// Strip `suffix` from `s` if at least `keep` bytes remain.
fn strip<'a>(s: &'a str, suffix: &str, keep: usize) -> Option<&'a str> {
    s.strip_suffix(suffix).filter(|r| r.len() >= keep)
}

/// The light stemmer shared by lexicon and text: plural, one inflectional or derivational
/// suffix, consonant undoubling, final `y` → `i` and final `e`. Non-alphabetic words and words
/// under four letters are returned as they are.
#[must_use]
pub fn stem(word: &str) -> String {
    let w = word.strip_suffix("'s").unwrap_or(word);
    if w.len() < 4 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
        return w.to_owned();
    }
    let mut s: String = if let Some(r) = strip(w, "ies", 2).or_else(|| strip(w, "ied", 2)) {
        format!("{r}y")
    } else if let Some(r) = strip(w, "sses", 2) {
        format!("{r}ss")
    } else if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.get(..w.len() - 1).unwrap_or(w).to_owned()
    } else {
        w.to_owned()
    };
    for suffix in [
        "ingly", "edly", "ing", "ed", "ion", "ive", "ment", "ness", "ly",
    ] {
        if let Some(r) = strip(&s, suffix, if suffix == "ly" { 4 } else { 3 }) {
            let mut r = r.to_owned();
            if matches!(suffix, "ing" | "ed" | "ingly" | "edly") {
                let b = r.as_bytes();
                if let [.., x, y] = b
                    && x == y
                    && !matches!(x, b'l' | b's' | b'z')
                    && !matches!(x, b'a' | b'e' | b'i' | b'o' | b'u')
                {
                    r.pop();
                }
            }
            s = r;
            break;
        }
    }
    if s.len() > 3 && s.ends_with('y') {
        s.pop();
        s.push('i');
    }
    if s.len() > 4 && s.ends_with('e') {
        s.pop();
    }
    s
}

/// The lexicon form of a word: its stem when that has at least four letters, else the word.
fn canon_of(lower: &str) -> String {
    let s = stem(lower);
    if s.len() >= 4 { s } else { lower.to_owned() }
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// FNV-1a as a [`Hasher`], for the short string keys of the lexicon tables.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
type FnvSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

/// FNV-1a over `bytes`, skipping the byte at `skip` (none if out of range).
fn fnv(bytes: &[u8], skip: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, &b) in bytes.iter().enumerate() {
        if i != skip {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Whether `a` and `b` are at Damerau distance exactly 1 (one insertion, deletion,
/// substitution or adjacent transposition).
fn distance_one(a: &[u8], b: &[u8]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    match long.len() - short.len() {
        0 => {
            let diff: Vec<usize> = (0..a.len())
                .filter(|&i| a.get(i) != b.get(i))
                .take(3)
                .collect();
            match diff.as_slice() {
                [_] => true,
                [i, j] => *j == i + 1 && a.get(*i) == b.get(*j) && a.get(*j) == b.get(*i),
                _ => false,
            }
        }
        1 => {
            let i = short
                .iter()
                .zip(long)
                .position(|(x, y)| x != y)
                .unwrap_or(short.len());
            short.get(i..) == long.get(i + 1..)
        }
        _ => false,
    }
}

/// One lexicon term: its words' lexicon forms and its label.
#[derive(Debug, Clone)]
struct Entry {
    words: Vec<String>,
    /// The words as written (lower case).
    lowers: Vec<String>,
    label: ArgLabel,
    /// Counts only next to a strong span in the same text.
    weak: bool,
    /// A health or harm term (not a medicine): said of an animal ("my dog has anxiety") it is
    /// not about the user.
    bodily: bool,
}

/// A sensitive span of a text: token indexes `[first, last]` and its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Index of the first token.
    pub first: usize,
    /// Index of the last token (inclusive).
    pub last: usize,
    /// Label of the span.
    pub label: ArgLabel,
}

/// The compiled matcher.
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    /// First word's lexicon form → entries starting with it.
    by_first: FnvMap<String, Vec<Entry>>,
    /// Every lexicon word's lower-case form → its lexicon form.
    vocab: FnvMap<String, String>,
    /// Lexicon forms of all lexicon words.
    forms: FnvSet<String>,
    /// Fuzzy candidates: the lexicon words (lower case and stem, ≥ 6 letters).
    fuzzy_words: Vec<(String, String)>,
    /// Hash of a candidate → indexes into `fuzzy_words`.
    fuzzy_full: IdMap<Vec<u32>>,
    /// Hash of a candidate with one byte deleted → indexes into `fuzzy_words`.
    fuzzy_dels: IdMap<Vec<u32>>,
    /// (index into `fuzzy_words`, letter mask) of the candidates of [`DISTANCE_TWO_MIN`]
    /// letters or more, by first letter (`a` = 0).
    fuzzy_long: Vec<Vec<(u32, u32, usize)>>,
    /// Exclusion phrases by their first word's lexicon form.
    exclusions: FnvMap<String, Vec<Vec<String>>>,
    heads: FnvSet<String>,
    slots: Vec<Vec<String>>,
    stopwords: FnvSet<&'static str>,
    suffix_words: FnvSet<&'static str>,
    /// Name suffixes (condition and drug) and their distinct lengths.
    suffixes: FnvSet<&'static str>,
    suffix_lengths: Vec<usize>,
    /// Phrase patterns ([`PHRASES`]).
    phrases: Phrases,
}

/// The built-in lexicon's terms, domain by domain (lower case, comments dropped).
pub fn builtin_terms() -> impl Iterator<Item = (&'static str, &'static str)> {
    SOURCES.iter().flat_map(|(domain, text)| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(move |l| (*domain, l))
    })
}

/// The words of the sourced name vocabularies (`data/vocab-drugs.txt`,
/// `data/vocab-conditions.txt`: medicines and conditions, lower case), which the matcher also
/// labels `sensitive` (in plural and misspelt forms too), and the disease names that are
/// common English (`data/vocab-conditions-common.txt`), which it uses as context terms.
pub fn sourced_names() -> impl Iterator<Item = &'static str> {
    DRUG_VOCAB
        .lines()
        .chain(CONDITION_VOCAB.lines())
        .chain(COMMON_CONDITIONS.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

impl Matcher {
    /// Compile the built-in lexicon plus `extra` terms (operator terms with their labels).
    pub(crate) fn new(extra: &[(String, ArgLabel)]) -> Self {
        let mut m = Matcher {
            by_first: FnvMap::default(),
            vocab: FnvMap::default(),
            forms: FnvSet::default(),
            fuzzy_words: Vec::new(),
            fuzzy_full: IdMap::default(),
            fuzzy_dels: IdMap::default(),
            fuzzy_long: vec![Vec::new(); 26],
            exclusions: FnvMap::default(),
            heads: HEADS.iter().map(|h| canon_of(h)).collect(),
            slots: Vec::new(),
            stopwords: STOPWORDS.iter().copied().collect(),
            suffix_words: SUFFIX_WORDS.iter().copied().collect(),
            suffixes: CONDITION_SUFFIXES
                .iter()
                .chain(DRUG_SUFFIXES)
                .copied()
                .collect(),
            suffix_lengths: Vec::new(),
            phrases: PHRASE_SET.clone(),
        };
        let mut lengths: Vec<usize> = m.suffixes.iter().map(|s| s.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        m.suffix_lengths = lengths;
        let weak_terms = WEAK
            .lines()
            .chain(COMMON_CONDITIONS.lines())
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|t| (t.to_owned(), ArgLabel::Sensitive, true, false));
        let terms = builtin_terms()
            .map(|(d, t)| {
                (
                    t.to_owned(),
                    ArgLabel::Sensitive,
                    false,
                    BODILY_DOMAINS.contains(&d),
                )
            })
            .chain(weak_terms)
            .chain(extra.iter().map(|(t, l)| (t.clone(), *l, false, false)));
        for (term, label, weak, bodily) in terms {
            let toks = tokenize(&term);
            if toks.is_empty() {
                continue;
            }
            let words: Vec<String> = toks.iter().map(|t| canon_of(&t.lower)).collect();
            for (t, w) in toks.iter().zip(&words) {
                m.vocab.insert(t.lower.clone(), w.clone());
                m.forms.insert(w.clone());
            }
            if let Some(first) = words.first() {
                m.by_first.entry(first.clone()).or_default().push(Entry {
                    lowers: toks.iter().map(|t| t.lower.clone()).collect(),
                    words: words.clone(),
                    label,
                    weak,
                    bodily,
                });
            }
        }
        // Fuzzy index over single words of six letters or more (lower case and stem).
        let mut seen: FnvSet<String> = FnvSet::default();
        let mut cands: Vec<(String, String)> = m
            .vocab
            .iter()
            .flat_map(|(lower, form)| [(lower.clone(), form.clone()), (form.clone(), form.clone())])
            .filter(|(w, _)| w.len() >= 6 && w.bytes().all(|b| b.is_ascii_lowercase()))
            .collect();
        cands.sort();
        for (w, form) in cands {
            if !seen.insert(w.clone()) {
                continue;
            }
            let i = u32::try_from(m.fuzzy_words.len()).unwrap_or(u32::MAX);
            let b = w.as_bytes();
            m.fuzzy_full.entry(fnv(b, usize::MAX)).or_default().push(i);
            for k in 0..b.len() {
                m.fuzzy_dels.entry(fnv(b, k)).or_default().push(i);
            }
            if b.len() >= DISTANCE_TWO_MIN
                && let Some(v) = b
                    .first()
                    .and_then(|c| m.fuzzy_long.get_mut(usize::from(c.wrapping_sub(b'a'))))
            {
                v.push((i, letter_mask(b), b.len()));
            }
            m.fuzzy_words.push((w, form));
        }
        for line in EXCLUSIONS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let words: Vec<String> = tokenize(line).iter().map(|t| canon_of(&t.lower)).collect();
            if let Some(first) = words.first() {
                m.exclusions.entry(first.clone()).or_default().push(words);
            }
        }
        m.slots = SLOTS
            .iter()
            .map(|s| tokenize(s).iter().map(|t| canon_of(&t.lower)).collect())
            .collect();
        m
    }

    /// The lexicon form of a misspelt word, if it is one.
    fn correct(&self, lower: &str, stemmed: &str) -> Option<String> {
        if lower.len() < 6
            || !lower.bytes().all(|b| b.is_ascii_lowercase())
            || COMMON.contains(lower)
            || self.stopwords.contains(lower)
        {
            return None;
        }
        let probe = |w: &str| -> Option<String> {
            let b = w.as_bytes();
            let mut ids: Vec<u32> = Vec::new();
            if let Some(v) = self.fuzzy_dels.get(&fnv(b, usize::MAX)) {
                ids.extend(v);
            }
            for k in 0..b.len() {
                let h = fnv(b, k);
                if let Some(v) = self.fuzzy_full.get(&h) {
                    ids.extend(v);
                }
                if let Some(v) = self.fuzzy_dels.get(&h) {
                    ids.extend(v);
                }
            }
            ids.sort_unstable();
            ids.into_iter().find_map(|i| {
                let (cand, form) = self.fuzzy_words.get(i as usize)?;
                let cb = cand.as_bytes();
                (cb.first() == b.first() && distance_one(cb, b)).then(|| form.clone())
            })
        };
        probe(lower)
            .or_else(|| {
                if stemmed != lower && stemmed.len() >= 6 {
                    probe(stemmed)
                } else {
                    None
                }
            })
            .or_else(|| {
                // Two slips in a long word ("alchoholic", "withdrawl" → "withdrawal" is one):
                // a lexicon word of eight letters or more at distance 2, same first letter.
                if lower.len() < DISTANCE_TWO_MIN || near_common(lower) {
                    return None;
                }
                let b = lower.as_bytes();
                let ids = b
                    .first()
                    .and_then(|c| self.fuzzy_long.get(usize::from(c.wrapping_sub(b'a'))))?;
                let bm = letter_mask(b);
                ids.iter().find_map(|&(i, mask, len)| {
                    if len.abs_diff(b.len()) > 2 || (mask ^ bm).count_ones() > 4 {
                        return None;
                    }
                    let (cand, form) = self.fuzzy_words.get(i as usize)?;
                    within(cand.as_bytes(), b, 2).then(|| form.clone())
                })
            })
    }

    /// Fill in the lexicon forms of `tokens`.
    pub(crate) fn normalize(&self, tokens: &mut [Token]) {
        for t in tokens.iter_mut() {
            t.canon = if let Some(form) = self.vocab.get(&t.lower) {
                form.clone()
            } else if self.stopwords.contains(t.lower.as_str()) {
                t.lower.clone()
            } else {
                let c = canon_of(&t.lower);
                if self.forms.contains(&c) {
                    if c == t.lower {
                        // A base form that is not a lexicon word ("closet") does not match
                        // an inflected lexicon word that stems to it ("closeted").
                        format!("={c}")
                    } else {
                        c
                    }
                } else {
                    self.correct(&t.lower, &c).unwrap_or(c)
                }
            };
            t.alt = if COMMON.contains(t.lower.as_str()) || self.vocab.contains_key(&t.lower) {
                None
            } else {
                rule_word(&t.lower)
            };
        }
    }

    fn is_content(&self, t: &Token) -> bool {
        !self.stopwords.contains(t.lower.as_str())
    }

    /// Whether a word is a condition or medicine by its suffix.
    fn by_suffix(&self, lower: &str) -> bool {
        lower.len() >= 6
            && lower.bytes().all(|b| b.is_ascii_lowercase())
            && self.suffix_lengths.iter().any(|&n| {
                lower.len() >= n + 3
                    && lower
                        .get(lower.len() - n..)
                        .is_some_and(|s| self.suffixes.contains(s))
            })
            && !self.suffix_words.contains(lower)
    }

    /// A word written as two ("foodstamps", "selfharm"): when `lower` is not common English
    /// and splits into two common words that make a two-word lexicon entry, that entry.
    fn compound(&self, lower: &str) -> Option<(usize, ArgLabel, bool)> {
        if lower.len() < 7
            || !lower.bytes().all(|b| b.is_ascii_lowercase())
            || COMMON.contains(lower)
        {
            return None;
        }
        (3..=lower.len() - 3).find_map(|k| {
            let (a, b) = (lower.get(..k)?, lower.get(k..)?);
            if !COMMON.contains(a) || !(COMMON.contains(b) || self.stopwords.contains(b)) {
                return None;
            }
            let (ca, cb) = (canon_of(a), canon_of(b));
            self.by_first.get(&ca)?.iter().find_map(|e| {
                (e.words.len() == 2 && e.words.get(1) == Some(&cb)).then_some((1, e.label, !e.weak))
            })
        })
    }

    /// Whether `lower` names a medicine or a condition of the sourced vocabularies
    /// (`data/vocab-*.txt`), also in a plural or misspelt form. Common English words and
    /// lexicon words never do.
    fn is_name(&self, lower: &str) -> bool {
        lower.len() >= 5
            && !COMMON.contains(lower)
            && !self.stopwords.contains(lower)
            && !self.vocab.contains_key(lower)
            && NAMES.find(lower)
    }

    /// Whether a token is a word, not common English, that the context rule counts: letters
    /// only, three or more, not a lexicon, function or placeholder word.
    fn is_rare_word(&self, t: &Token) -> bool {
        t.lower.len() >= 3
            && t.lower.chars().all(char::is_alphabetic)
            && !COMMON.contains(t.lower.as_str())
            && !self.stopwords.contains(t.lower.as_str())
            && !self.vocab.contains_key(&t.lower)
    }

    /// Whether `lower` is a function word (slots and heads do not extend over it, and it is
    /// never a modifier).
    pub(crate) fn is_function_word(&self, lower: &str) -> bool {
        self.stopwords.contains(lower)
    }

    /// Sensitive spans of normalized `tokens`, in order, not overlapping.
    pub(crate) fn spans(&self, tokens: &[Token]) -> Vec<Span> {
        self.spans_in(tokens, false)
    }

    /// [`Matcher::spans`] for a text known to be sensitive (`sensitive_context`: the rest of a
    /// field whose sensitive spans were rewritten, issue 18 item 2): context terms and the
    /// rare-word rule apply even when no strong span is left in the text itself.
    pub(crate) fn spans_in(&self, tokens: &[Token], sensitive_context: bool) -> Vec<Span> {
        let n = tokens.len();
        // Excluded ranges: occurrences of exclusion phrases.
        let mut excluded = vec![false; n];
        for (i, tok) in tokens.iter().enumerate() {
            let Some(phrases) = self.exclusions.get(&tok.canon) else {
                continue;
            };
            for ex in phrases {
                let hit = ex
                    .iter()
                    .enumerate()
                    .all(|(k, w)| tokens.get(i + k).is_some_and(|t| &t.canon == w));
                if hit {
                    for flag in excluded.iter_mut().skip(i).take(ex.len()) {
                        *flag = true;
                    }
                }
            }
        }
        let mut out: Vec<Span> = Vec::new();
        let mut any_strong = sensitive_context;
        let mut i = 0;
        while i < n {
            let Some(tok) = tokens.get(i) else { break };
            // Longest lexicon entry starting here.
            let best = self.by_first.get(&tok.canon).and_then(|entries| {
                entries
                    .iter()
                    .filter(|e| {
                        e.words
                            .iter()
                            .zip(&e.lowers)
                            .enumerate()
                            .all(|(k, (w, lw))| {
                                // A base form ("closet") matches only itself, not an inflected
                                // lexicon word that stems to it ("closeted").
                                tokens.get(i + k).is_some_and(|t| {
                                    &t.canon == w
                                        && (k == 0 || !t.brk)
                                        && (&t.lower == lw || t.canon != t.lower)
                                })
                            })
                    })
                    .map(|e| (e.words.len(), e.label, !e.weak, e.bodily))
                    .max()
            });
            // A phrase pattern ("behind on my rent", "got let go") longer than the lexicon
            // entry wins.
            let phrase = self
                .phrases
                .longest_at(tokens, i)
                .map(|len| (len, ArgLabel::Sensitive, true, false));
            let best = match (best, phrase) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            let best = best
                .or_else(|| {
                    (self.by_suffix(&tok.lower) || self.is_name(&tok.lower)).then_some((
                        1,
                        ArgLabel::Sensitive,
                        true,
                        false,
                    ))
                })
                .or_else(|| {
                    harm_object(tokens, i).map(|len| (len, ArgLabel::Sensitive, true, false))
                })
                .or_else(|| {
                    self.compound(&tok.lower)
                        .map(|(len, label, strong)| (len, label, strong, false))
                });
            let Some((len, label, strong, bodily)) = best else {
                i += 1;
                continue;
            };
            let last = i + len - 1;
            if (i..=last).all(|k| excluded.get(k).copied().unwrap_or(false))
                || (bodily && said_of_an_animal(tokens, i))
            {
                i += len;
                continue;
            }
            any_strong |= strong;
            let mut first = i;
            let mut end = last;
            // A head noun takes up to three content words before it.
            let head = tokens.get(last).is_some_and(|t| {
                self.heads.contains(&t.canon)
                    || (self.by_suffix(&t.lower)
                        && CONDITION_SUFFIXES.iter().any(|s| t.lower.ends_with(s)))
            });
            if head {
                let floor = out.last().map_or(0, |s| s.last + 1);
                let mut k = 0;
                while k < EXTEND && first > floor {
                    let (Some(prev), Some(cur)) = (tokens.get(first - 1), tokens.get(first)) else {
                        break;
                    };
                    if cur.brk || !self.is_content(prev) {
                        break;
                    }
                    first -= 1;
                    k += 1;
                }
            }
            // A slot phrase overlapping the hit's end takes up to three content words after it
            // (determiners skipped): "side effects" + "of Biktarvy".
            let slot_end = self
                .slots
                .iter()
                .filter_map(|s| {
                    (first..=end)
                        .find(|&p| {
                            p + s.len() > end
                                && tokens.get(p..p + s.len()).is_some_and(|ts| {
                                    ts.iter().zip(s).all(|(t, w)| &t.canon == w)
                                        && ts.iter().skip(1).all(|t| !t.brk)
                                })
                        })
                        .map(|p| p + s.len() - 1)
                })
                .max();
            if let Some(se) = slot_end {
                end = se;
                let mut j = end + 1;
                while tokens
                    .get(j)
                    .is_some_and(|t| !t.brk && DETERMINERS.contains(&t.lower.as_str()))
                {
                    j += 1;
                }
                let mut k = 0;
                while k < EXTEND {
                    match tokens.get(j) {
                        Some(t) if !t.brk && self.is_content(t) => {
                            end = j;
                            j += 1;
                            k += 1;
                        }
                        _ => break,
                    }
                }
            }
            match out.last_mut() {
                Some(prev) if prev.last + 1 >= first => {
                    prev.last = prev.last.max(end);
                    prev.label = prev.label.max(label);
                }
                _ => out.push(Span {
                    first,
                    last: end,
                    label,
                }),
            }
            i = end + 1;
        }
        // The context rule: a text in the first person, or with a context term, that holds a
        // word which is not common English ("my seroquil dose", "thinking about unaliving")
        // is treated as sensitive, and the rare-word rule below takes that word.
        let first_person = tokens.iter().enumerate().any(|(k, t)| {
            FIRST_PERSON.contains(&t.lower.as_str())
                // "near me" is how searches ask for a place, not a disclosure
                && !(t.lower == "me"
                    && k > 0
                    && tokens.get(k - 1).is_some_and(|p| p.lower == "near"))
        });
        // A word one slip from a common word ("hydrangia") is that word misspelt: in the first
        // person alone it says nothing; next to a context term ("implantaion bleeding") it is
        // as telling as a name.
        // A context term in the first person ("i took too many pills", "weed in my car") is
        // sensitive too, unless it only names a person of the user's life ("my husband").
        let personal_context = first_person
            && out.iter().any(|sp| {
                (sp.first..=sp.last).any(|k| {
                    tokens
                        .get(k)
                        .is_some_and(|t| !PEOPLE.contains(&t.lower.as_str()))
                })
            });
        // For a rare word, the first person must speak of the user ("my", "me", "i have"),
        // not ask how to do something ("can i freeze …", "do i need …"), and stand within
        // [`RARE_WINDOW`] words of it: a how-to question or a long technical query with an
        // "i" in it is not a disclosure.
        let disclosing: Vec<usize> = tokens
            .iter()
            .enumerate()
            .filter(|&(k, t)| {
                FIRST_PERSON.contains(&t.lower.as_str())
                    && !(k > 0
                        && tokens.get(k - 1).is_some_and(|p| {
                            (t.lower == "me" && p.lower == "near")
                                || (t.lower == "i" && QUESTION_AUX.contains(&p.lower.as_str()))
                        }))
            })
            .map(|(k, _)| k)
            .collect();
        let telling_rare = |t: &Token| {
            self.is_rare_word(t) && !derived_common(&t.lower) && !is_roman_numeral(&t.lower)
        };
        if !any_strong
            && (personal_context
                || tokens.iter().enumerate().any(|(k, t)| {
                    telling_rare(t)
                        && !near_common(&t.lower)
                        && disclosing.iter().any(|&p| p.abs_diff(k) <= RARE_WINDOW)
                })
                || (!out.is_empty() && tokens.iter().any(telling_rare)))
        {
            any_strong = true;
        }
        if !any_strong {
            return Vec::new();
        }
        // The rare-word rule: in a text with a strong span, a word that is not common English
        // (a brand, a rare disease, an abbreviation, a misspelling) is identifying too.
        let mut rare: Vec<Span> = tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.lower.len() >= 2
                    && !t.lower.bytes().all(|b| b.is_ascii_digit())
                    && !self.stopwords.contains(t.lower.as_str())
                    && !COMMON.contains(t.lower.as_str())
                    && !self.vocab.contains_key(&t.lower)
            })
            .map(|(k, _)| Span {
                first: k,
                last: k,
                label: ArgLabel::Sensitive,
            })
            .collect();
        if rare.is_empty() {
            return out;
        }
        rare.extend(out);
        rare.sort_by_key(|s| (s.first, s.last));
        let mut merged: Vec<Span> = Vec::new();
        for s in rare {
            match merged.last_mut() {
                Some(prev) if prev.last + 1 >= s.first => {
                    prev.last = prev.last.max(s.last);
                    prev.label = prev.label.max(s.label);
                }
                _ => merged.push(s),
            }
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexicon_has(m: &Matcher, word: &str) -> bool {
        m.vocab.contains_key(word)
    }

    fn spans_of(m: &Matcher, text: &str) -> Vec<String> {
        let mut t = tokenize(text);
        m.normalize(&mut t);
        m.spans(&t)
            .iter()
            .map(|s| {
                let a = t.get(s.first).map_or(0, |x| x.start);
                let b = t.get(s.last).map_or(0, |x| x.end);
                text.get(a..b).unwrap_or("").to_owned()
            })
            .collect()
    }

    #[test]
    fn stems_agree_across_word_forms() {
        for group in [
            &["abuse", "abused", "abusive", "abuses", "abusing"][..],
            &["addiction", "addicted", "addictive", "addictions"],
            &["depression", "depressed"],
            &["debt", "debts"],
            &["terminate", "terminated", "termination"],
            &["bully", "bullied", "bullies", "bullying"],
        ] {
            let s: Vec<String> = group.iter().map(|w| canon_of(w)).collect();
            assert!(s.windows(2).all(|w| w[0] == w[1]), "{group:?} → {s:?}");
        }
        assert_ne!(canon_of("raped"), canon_of("rap"));
    }

    #[test]
    fn bounded_distance() {
        assert!(within(b"alchoholic", b"alcoholic", 1));
        assert!(within(b"sertaline", b"sertraline", 1));
        assert!(within(b"withdrwal", b"withdrawal", 1));
        assert!(within(b"naturalisaton", b"naturalization", 2));
        assert!(within(b"abcdefgh", b"abdcefhg", 2), "two transpositions");
        assert!(!within(b"abcdefgh", b"abdcefhg", 1));
        assert!(!within(b"hydrangea", b"hydralazine", 2));
        assert!(!within(b"abc", b"abcdef", 2));
    }

    /// Issue 18, the sourced vocabularies: a medicine or condition name the hand-written
    /// lexicon lacks, in its plural and misspelt, is a sensitive span; a common word is not.
    #[test]
    fn sourced_names_and_their_misspellings() {
        let m = Matcher::new(&[]);
        for name in ["trintellix", "nurtec", "rexulti"] {
            assert!(
                NAMES.words.contains(name) && !lexicon_has(&m, name),
                "{name}"
            );
        }
        assert_eq!(spans_of(&m, "Trintellix and coffee"), ["Trintellix"]);
        assert_eq!(spans_of(&m, "nurtecs price"), ["nurtecs"]);
        // a misspelling at distance 1 and one at distance 2
        assert_eq!(spans_of(&m, "trintelix price"), ["trintelix"]);
        assert_eq!(spans_of(&m, "trintelx price"), ["trintelx"]);
        assert_eq!(
            spans_of(&m, "hidradenitis supurativa"),
            ["hidradenitis supurativa"]
        );
        // positive controls: common words and everyday misspellings near no name
        assert!(spans_of(&m, "best zucchini recipe for the grill").is_empty());
        assert!(spans_of(&m, "tire presure for a honda civic").is_empty());
    }

    /// Issue 18, the context rule: a word that is not common English, in a text in the first
    /// person or with a context term, is identifying; without that context it is left alone.
    #[test]
    fn rare_words_in_first_person_context() {
        let m = Matcher::new(&[]);
        assert_eq!(spans_of(&m, "my grandpa just started zorvexa"), ["zorvexa"]);
        assert_eq!(
            spans_of(&m, "i keep having sewerslide thoughts"),
            ["sewerslide"]
        );
        // a context term in the first person
        assert_eq!(spans_of(&m, "i swallowed some pills last night"), ["pills"]);
        assert_eq!(
            spans_of(&m, "my stepdad hits my mom at night"),
            ["hits my mom"]
        );
        // a context term ("pills") with a rare word is enough, and both go
        assert_eq!(spans_of(&m, "zorvexa pills online"), ["zorvexa pills"]);
        // positive controls: no rare word, or no context
        assert!(spans_of(&m, "my cat keeps sneezing after dinner").is_empty());
        assert!(spans_of(&m, "i dont want to repaint the fence").is_empty());
        assert!(spans_of(&m, "zorvexa store opening hours").is_empty());
        // a misspelt common word in the first person, a person of one's life, "near me"
        assert!(spans_of(&m, "why are my hydrangia leaves turning brown").is_empty());
        assert!(spans_of(&m, "my husband is home").is_empty());
        assert!(spans_of(&m, "zorvexa outlet near me").is_empty());
        assert!(spans_of(&m, "i cut my hair too short").is_empty());
    }

    /// Two slips in a long lexicon word are still that word; a long common word is not.
    #[test]
    fn distance_two_misspellings_of_lexicon_words() {
        let m = Matcher::new(&[]);
        assert_eq!(spans_of(&m, "alchohlic parent"), ["alchohlic"]);
        assert!(spans_of(&m, "alphabetic order of the catalogue").is_empty());
    }

    #[test]
    fn distance() {
        assert!(distance_one(b"depresion", b"depression"));
        assert!(distance_one(b"oxycodne", b"oxycodone"));
        assert!(distance_one(b"addcited", b"addicted"));
        assert!(distance_one(b"cancer", b"cancar"));
        assert!(!distance_one(b"cancer", b"cancer"));
        assert!(!distance_one(b"diabetis", b"diabetes_"));
    }

    #[test]
    fn spans_cover_names_and_slots() {
        let m = Matcher::new(&[]);
        assert_eq!(
            spans_of(&m, "my neurologist thinks I have multiple system atrophy"),
            ["neurologist", "multiple system atrophy"]
        );
        assert_eq!(
            spans_of(&m, "side effects of Biktarvy, what should I expect"),
            ["side effects of Biktarvy"]
        );
        assert_eq!(spans_of(&m, "I'm so depresed lately"), ["depresed"]);
        assert_eq!(
            spans_of(&m, "my husband is abusive"),
            ["husband", "abusive"]
        );
        assert!(spans_of(&m, "my husband is home").is_empty());
        assert!(spans_of(&m, "gun safe for closet").is_empty());
        assert_eq!(spans_of(&m, "started lisinopril last week"), ["lisinopril"]);
        assert!(spans_of(&m, "history of the great depression").is_empty());
        assert!(spans_of(&m, "weather in Paris tomorrow").is_empty());
    }

    /// Issue 18: plain statements of sensitive events and states, one example per category of
    /// `data/phrases.txt` (written for this test, not taken from a query set), each with an
    /// everyday sentence that shares its words and must stay untouched.
    #[test]
    fn phrase_patterns_per_category() {
        let m = Matcher::new(&[]);
        let mut missed = Vec::new();
        for (text, span) in [
            // self-harm
            ("some days i wish i was never born", "wish i was never born"),
            ("tired of being alive honestly", "tired of being alive"),
            // abuse
            ("she threw a plate at me again", "threw a plate at me"),
            (
                "been getting slapped by my dad since june",
                "getting slapped by my dad",
            ),
            // addiction
            ("cant stop gambling on my phone", "cant stop gambling"),
            ("how to beat a urine test by friday", "beat a urine test"),
            // employment
            ("got laid off this morning", "got laid off"),
            ("boss is not paying my overtime", "not paying my overtime"),
            // finance
            ("we owe the irs from 2023", "we owe the irs"),
            (
                "three months behind on the mortgage",
                "three months behind on the mortgage",
            ),
            ("landlord kicked us out", "kicked us out"),
            // health, death and loss
            ("coughing up blood after a cold", "coughing up blood"),
            ("my grandpa passed away last week", "my grandpa passed away"),
            // pregnancy
            (
                "period is a week late and cramping",
                "period is a week late",
            ),
            ("12 weeks pregnant and spotting", "12 weeks pregnant"),
            // sexuality and identity
            ("how to start coming out to my parents", "coming out to my"),
            // religion
            ("going to confession after 15 years", "confession"),
            // immigration
            ("my daca expired last month", "my daca expired"),
            // legal
            ("caught shoplifting at target at 16", "caught shoplifting"),
            // security
            (
                "someone logged into my bank from ohio",
                "someone logged into my",
            ),
        ] {
            let got = spans_of(&m, text);
            if !got.iter().any(|s| s.to_lowercase().contains(span)) {
                missed.push(format!("{text:?}: {got:?}"));
            }
        }
        for text in [
            "how to end a meeting politely",
            "best way to get to the airport",
            "drink water every morning benefits",
            "my phone died overnight",
            "3 weeks behind schedule on the kitchen remodel",
            "missed my flight what now",
            "cant stop the feeling lyrics",
            "sleeping in a tent in winter tips",
            "when does the new album come out",
        ] {
            let got = spans_of(&m, text);
            if !got.is_empty() {
                missed.push(format!("{text:?} (everyday): {got:?}"));
            }
        }
        assert!(missed.is_empty(), "{missed:#?}");
        // whole-text coverage, used by the evaluation's independence check
        assert!(phrase_covers("got laid off") && phrase_covers("three months behind on rent"));
        assert!(!phrase_covers("got laid") && !phrase_covers("got laid off today"));
    }

    /// Plain statements of harm events by class (labeler21): being followed or watched,
    /// coercion, overdose, pregnancy loss, arrears named as such, cuts to pay, warning signs of
    /// stroke and heart attack, a taken-over number or account. Every attack is the span the
    /// matcher must find; every control shares a word with a pattern in its everyday sense.
    #[test]
    fn plain_statements_of_harm_events() {
        let m = Matcher::new(&[]);
        let mut missed = Vec::new();
        for (text, span) in [
            (
                "a man from the gym followed me home from the bus stop",
                "followed me home",
            ),
            (
                "i think a stranger keeps watching my apartment",
                "stranger keeps watching my",
            ),
            (
                "my uncle pressured me into signing the papers",
                "pressured me into",
            ),
            ("what is forced labour in the uk", "forced labour"),
            (
                "she swallowed a whole bottle of sleeping pills",
                "swallowed a whole bottle of sleeping",
            ),
            (
                "he took too many tablets yesterday",
                "took too many tablets",
            ),
            (
                "started giving away all my things",
                "giving away all my things",
            ),
            ("we lost the pregnancy at ten weeks", "lost the pregnancy"),
            ("gas disconnected for nonpayment", "for nonpayment"),
            ("can they dock my wages for a broken plate", "dock my wages"),
            ("where is my final paycheck", "final paycheck"),
            ("left side of my face feels numb", "my face feels numb"),
            ("sudden chest tightness on the stairs", "chest tightness"),
            ("somebody hijacked my whatsapp", "hijacked my whatsapp"),
            (
                "tremors in the morning until a drink",
                "tremors in the morning until",
            ),
        ] {
            let got = spans_of(&m, text);
            if !got.iter().any(|s| s.to_lowercase().contains(span)) {
                missed.push(format!("{text:?}: {got:?}"));
            }
        }
        for text in [
            "follow me on instagram for daily recipes",
            "the rain forced us to turn back",
            "lost the game in overtime again",
            "water shut off valve under the sink",
            "final score of the derby",
            "numb hands on long bike rides",
            "chest day workout routine",
            "how to clone a git repo",
            "protein shakes in the morning",
            "lower the bike seat height",
        ] {
            let got = spans_of(&m, text);
            if !got.is_empty() {
                missed.push(format!("{text:?} (everyday): {got:?}"));
            }
        }
        assert!(missed.is_empty(), "{missed:#?}");
    }

    /// Named things (labeler21): an offence named with its charge or record, a juvenile record,
    /// immigration interviews and permits, abbreviated hepatitis and lab values, and disease
    /// names that are common English (MeSH, `data/vocab-conditions-common.txt`) as context
    /// terms: they count in the first person, not in their everyday sense.
    #[test]
    fn named_things_by_class() {
        let m = Matcher::new(&[]);
        let mut missed = Vec::new();
        for (text, span) in [
            ("court date for a trespassing charge", "trespassing charge"),
            ("how to get a juvenile record sealed", "juvenile record"),
            (
                "what do they ask at a naturalization interview",
                "naturalization interview",
            ),
            ("reentry permit processing time", "reentry permit"),
            ("is hep b contagious through kissing", "hep b"),
            ("tsh level of 7 normal?", "tsh level of 7"),
            ("do i have shingles on my back", "shingles"),
            ("my son has scabies again", "scabies"),
            ("when is my arraignment", "arraignment"),
        ] {
            let got = spans_of(&m, text);
            if !got.iter().any(|s| s.to_lowercase().contains(span)) {
                missed.push(format!("{text:?}: {got:?}"));
            }
        }
        for text in [
            "cedar roof shingles cost per square",
            "battery charge indicator blinking",
            "world record for the mile",
            "job interview questions for a barista",
            "parking permit for a garden shed",
            "hep cat jazz slang meaning",
            "history of the polio vaccine",
        ] {
            let got = spans_of(&m, text);
            if !got.is_empty() {
                missed.push(format!("{text:?} (everyday): {got:?}"));
            }
        }
        assert!(missed.is_empty(), "{missed:#?}");
    }

    /// A media word does not make a disclosure a title (red-team 2026-12-05, F9): a "work
    /// rule" that gave no span to texts with a cue such as "movie" or "netflix" and no first
    /// person let realistic disclosures through ("netflix documentaries about living with hiv
    /// after a positive test") and any query with a cue word appended. It was taken out; such
    /// texts are labeled like any other.
    #[test]
    fn media_words_do_not_hide_disclosures() {
        let m = Matcher::new(&[]);
        for (text, span) in [
            (
                "netflix documentaries about living with hiv after a positive test",
                "hiv",
            ),
            ("hiv positive test result what now song", "hiv"),
            ("hiv symptoms during flu season", "hiv"),
            ("living in a trailer after the foreclosure", "foreclosure"),
            ("i relapsed on meth after that movie", "meth"),
        ] {
            let got = spans_of(&m, text);
            assert!(got.iter().any(|s| s.contains(span)), "{text:?}: {got:?}");
        }
        // Control: a media query with no sensitive word stays untouched.
        assert!(spans_of(&m, "best movie soundtracks of the nineties").is_empty());
    }

    /// Misspellings of the words the rules match literally (labeler21): a phrase pattern's
    /// word or a harm verb one slip away (six letters or more, not itself English) matches as
    /// the word would; an English word is never taken for a misspelling of a rule word.
    #[test]
    fn misspelt_rule_words_match_their_rules() {
        let m = Matcher::new(&[]);
        let mut missed = Vec::new();
        for (text, span) in [
            ("is this coersive control", "coersive control"),
            ("morning sicknes at 10 weeks", "morning sicknes"),
            ("keep scrathing my arms", "scrathing my arms"),
            ("what happens at an arraingment", "arraingment"),
            ("he threatend to hurt me", "threatend to hurt me"),
        ] {
            let got = spans_of(&m, text);
            if !got.iter().any(|s| s.to_lowercase().contains(span)) {
                missed.push(format!("{text:?}: {got:?}"));
            }
        }
        for text in [
            "scratching post for a kitten",
            "coarse sand paper grit",
            "recieve a package while away",
        ] {
            let got = spans_of(&m, text);
            if !got.is_empty() {
                missed.push(format!("{text:?} (everyday): {got:?}"));
            }
        }
        assert!(missed.is_empty(), "{missed:#?}");
        assert_eq!(rule_word("sicknes"), Some("sickness"));
        assert_eq!(rule_word("coersive"), Some("coercive"));
        assert_eq!(rule_word("kitchen"), None);
    }

    /// The context rule's trims (issue 18): a how-to question with "i", a word derived from a
    /// common one, a Roman numeral or a rare word far from the first-person word is not a
    /// disclosure; a rare word right next to "my" still is.
    #[test]
    fn context_rule_ignores_how_to_questions_and_derived_words() {
        let m = Matcher::new(&[]);
        assert!(spans_of(&m, "can i refreeze unthawed dumplings").is_empty());
        assert!(spans_of(&m, "should i repot overwatered succulents").is_empty());
        assert!(spans_of(&m, "how many children did louis xiv have").is_empty());
        assert!(
            spans_of(
                &m,
                "kubectl rollout stuck when the config map changes and then every time i redeploy"
            )
            .is_empty()
        );
        assert_eq!(spans_of(&m, "my grandpa just started zorvexa"), ["zorvexa"]);
        assert_eq!(
            spans_of(&m, "can i take zorvexa with my pills"),
            ["zorvexa", "pills"]
        );
        // a health term said of an animal is a veterinary question; said of the user, or a
        // medicine the animal found, it is not
        assert!(spans_of(&m, "my cat has asthma what helps").is_empty());
        assert!(spans_of(&m, "horse arthritis supplements").is_empty());
        assert_eq!(spans_of(&m, "can my cat sense my asthma"), ["asthma"]);
        assert_eq!(spans_of(&m, "puppy ate my xanax"), ["xanax"]);
        assert!(derived_common("unbaked") && derived_common("bakeable"));
        assert!(!derived_common("zorvexa"));
        assert!(is_roman_numeral("viii") && !is_roman_numeral("viiia"));
    }
}

//! Deterministic adversaries that try to recover a task's hidden label from an observer's
//! view (research notes §5.5; paper §5 and Tables 12/13).
//!
//! Each adversary scores every label of the corpus menu; [`credit`] turns scores into
//! closed-set recovery with fractional credit on ties (a k-way tie at the top earns 1/k), so an
//! empty view scores exactly chance, 1/N, and no label order is favoured.
//!
//! - **keyword** (label list): overlap of the label's name tokens with the view's tokens;
//! - **TF-IDF** (label list): cosine between the view and each label's name + description,
//!   IDF over the N label documents (smooth IDF, as scikit-learn);
//! - **lexicon oracle** (white box): knows the generator's lexicons — each label's own words,
//!   paraphrase and collection slug (weighted by how few labels share the token) and its
//!   domain's lexicon (which cannot tell siblings apart); the ceiling on extractable signal;
//! - **Naive Bayes, leave-one-out** (per-task labels): multinomial, Laplace α = 1, uniform
//!   prior, each row scored by a model trained on every other row of the experiment;
//! - **decoy-mixed**: the oracle choosing among the true label and 10 seeded decoys from
//!   other domains (chance 1/11).

use super::corpus::Menu;
use super::observe::tokenize;
use super::rng::Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which adversary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adversary {
    /// Keyword overlap with the label names.
    Keyword,
    /// TF-IDF nearest label document.
    Tfidf,
    /// White-box lexicon oracle.
    Oracle,
    /// Multinomial Naive Bayes, leave-one-out over per-task labels.
    NbLoo,
    /// The oracle among the true label and 10 decoys.
    Decoy,
}

impl Adversary {
    /// Stable name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Adversary::Keyword => "keyword",
            Adversary::Tfidf => "tf-idf",
            Adversary::Oracle => "oracle",
            Adversary::NbLoo => "nb-loo",
            Adversary::Decoy => "decoy-11",
        }
    }
}

/// Token → (label, weight) postings: a linear scorer over a token set.
#[derive(Debug, Clone, Default)]
struct Index {
    postings: HashMap<String, Vec<(usize, f64)>>,
    labels: usize,
}

impl Index {
    fn add(&mut self, token: &str, label: usize, weight: f64) {
        self.postings
            .entry(token.to_owned())
            .or_default()
            .push((label, weight));
    }

    /// Σ over distinct view tokens (each counted `count(t)` times when `tf`).
    fn score(&self, view: &BTreeMap<&str, u32>, tf: bool) -> Vec<f64> {
        let mut s = vec![0.0; self.labels];
        for (t, n) in view {
            let m = if tf { f64::from(*n) } else { 1.0 };
            for (l, w) in self.postings.get(*t).map_or(&[][..], Vec::as_slice) {
                if let Some(x) = s.get_mut(*l) {
                    *x += m * w;
                }
            }
        }
        s
    }
}

/// The label-list and white-box adversaries of one menu.
#[derive(Debug, Clone)]
pub struct Scorers {
    keyword: Index,
    tfidf: Index,
    oracle: Index,
    domains: Vec<String>,
}

fn set(text: &str) -> BTreeSet<String> {
    tokenize(text).into_iter().collect()
}

impl Scorers {
    /// Build the scorers for `menu`.
    #[must_use]
    pub fn new(menu: &Menu) -> Self {
        let n = menu.labels.len();
        let mut keyword = Index {
            labels: n,
            ..Index::default()
        };
        for (i, l) in menu.labels.iter().enumerate() {
            for t in set(&l.name) {
                keyword.add(&t, i, 1.0);
            }
        }
        // TF-IDF over label documents (name + description).
        let docs: Vec<Vec<String>> = menu
            .labels
            .iter()
            .map(|l| tokenize(&format!("{} {}", l.name, l.description)))
            .collect();
        let mut df: HashMap<&str, usize> = HashMap::new();
        for d in &docs {
            for t in d.iter().map(String::as_str).collect::<BTreeSet<_>>() {
                *df.entry(t).or_default() += 1;
            }
        }
        let idf = |t: &str| {
            ((1.0 + n as f64) / (1.0 + df.get(t).copied().unwrap_or(0) as f64)).ln() + 1.0
        };
        let mut tfidf = Index {
            labels: n,
            ..Index::default()
        };
        for (i, d) in docs.iter().enumerate() {
            let mut tf: BTreeMap<&str, f64> = BTreeMap::new();
            for t in d {
                *tf.entry(t.as_str()).or_default() += 1.0;
            }
            let w: Vec<(&str, f64)> = tf.iter().map(|(t, c)| (*t, c * idf(t))).collect();
            let norm = w.iter().map(|(_, x)| x * x).sum::<f64>().sqrt().max(1e-12);
            for (t, x) in w {
                tfidf.add(t, i, x * idf(t) / norm);
            }
        }
        // Oracle: label-specific tokens weighted by 1/(labels sharing them), ×3; domain
        // tokens weighted by 1/(domains sharing them), for every label of the domain.
        let specific: Vec<BTreeSet<String>> = menu
            .labels
            .iter()
            .map(|l| set(&format!("{} {} {}", l.name, l.paraphrase, l.slug)))
            .collect();
        let mut sdf: HashMap<&str, usize> = HashMap::new();
        for s in &specific {
            for t in s {
                *sdf.entry(t.as_str()).or_default() += 1;
            }
        }
        let mut domain_tokens: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for l in &menu.labels {
            let e = domain_tokens.entry(l.domain.as_str()).or_default();
            for term in &l.domain_terms {
                e.extend(set(term));
            }
        }
        let mut ddf: HashMap<&str, usize> = HashMap::new();
        for ts in domain_tokens.values() {
            for t in ts {
                *ddf.entry(t.as_str()).or_default() += 1;
            }
        }
        let mut oracle = Index {
            labels: n,
            ..Index::default()
        };
        for (i, s) in specific.iter().enumerate() {
            for t in s {
                let w = 3.0 / sdf.get(t.as_str()).copied().unwrap_or(1) as f64;
                oracle.add(t, i, w);
            }
        }
        for (i, l) in menu.labels.iter().enumerate() {
            for t in domain_tokens.get(l.domain.as_str()).into_iter().flatten() {
                let w = 1.0 / ddf.get(t.as_str()).copied().unwrap_or(1) as f64;
                oracle.add(t, i, w);
            }
        }
        Scorers {
            keyword,
            tfidf,
            oracle,
            domains: menu.labels.iter().map(|l| l.domain.clone()).collect(),
        }
    }

    /// Scores of every menu label for `tokens` under a label-list or white-box adversary
    /// (`NbLoo` and `Decoy` are computed by [`nb_loo`] and [`Scorers::decoy`]; here they fall
    /// back to the oracle).
    #[must_use]
    pub fn scores(&self, adversary: Adversary, tokens: &[String]) -> Vec<f64> {
        let mut bag: BTreeMap<&str, u32> = BTreeMap::new();
        for t in tokens {
            *bag.entry(t.as_str()).or_default() += 1;
        }
        match adversary {
            Adversary::Keyword => self.keyword.score(&bag, false),
            Adversary::Tfidf => self.tfidf.score(&bag, true),
            _ => self.oracle.score(&bag, false),
        }
    }

    /// Decoy-mixed recovery for one row: the oracle's scores restricted to the true label and
    /// 10 decoys from other domains drawn with `rng`; returns the top-1 credit and whether the
    /// hard prediction (ties broken with `rng`) is the true label.
    #[must_use]
    pub fn decoy(&self, oracle_scores: &[f64], truth: usize, rng: &mut Rng) -> (f64, bool) {
        let own = self.domains.get(truth);
        let mut pool: Vec<usize> = (0..self.domains.len())
            .filter(|&j| self.domains.get(j) != own)
            .collect();
        rng.shuffle(&mut pool);
        let mut menu: Vec<usize> = pool.into_iter().take(10).collect();
        menu.push(truth);
        let sub: Vec<f64> = menu
            .iter()
            .map(|&j| oracle_scores.get(j).copied().unwrap_or(0.0))
            .collect();
        let last = sub.len() - 1;
        (credit(&sub, last, 1), predict(&sub, rng) == last)
    }
}

/// Top-`k` credit of label `truth` under `scores`, with fractional credit on ties: if `g`
/// labels score strictly higher and `e` (including the truth) tie with it, the credit is
/// `clamp((k − g) / e, 0, 1)`. An all-equal score vector gives `k/N`.
#[must_use]
pub fn credit(scores: &[f64], truth: usize, k: usize) -> f64 {
    let Some(&s) = scores.get(truth) else {
        return 0.0;
    };
    let greater = scores.iter().filter(|&&x| x > s).count();
    let equal = scores.iter().filter(|&&x| x == s).count().max(1);
    ((k as f64 - greater as f64) / equal as f64).clamp(0.0, 1.0)
}

/// A hard prediction (for NMI/AMI): the top-scoring label, ties broken by `rng`.
#[must_use]
pub fn predict(scores: &[f64], rng: &mut Rng) -> usize {
    let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let top: Vec<usize> = scores
        .iter()
        .enumerate()
        .filter(|(_, x)| **x == best)
        .map(|(i, _)| i)
        .collect();
    rng.pick(&top).copied().unwrap_or(0)
}

/// Multinomial Naive Bayes, leave-one-out (paper Tables 12/13; Laplace α = 1, uniform prior):
/// for each row, log-likelihood scores of `labels` classes under a model trained on every
/// other row. `rows` are (tokens, true label).
#[must_use]
pub fn nb_loo(rows: &[(Vec<String>, usize)], labels: usize) -> Vec<Vec<f64>> {
    let mut vocab: HashMap<&str, usize> = HashMap::new();
    for (toks, _) in rows {
        for t in toks {
            let n = vocab.len();
            vocab.entry(t.as_str()).or_insert(n);
        }
    }
    let v = vocab.len() as f64;
    // Per-class token counts (sparse) and totals.
    let mut counts: Vec<HashMap<usize, f64>> = vec![HashMap::new(); labels];
    let mut totals = vec![0.0; labels];
    for (toks, y) in rows {
        if let (Some(c), Some(t)) = (counts.get_mut(*y), totals.get_mut(*y)) {
            for tok in toks {
                if let Some(&id) = vocab.get(tok.as_str()) {
                    *c.entry(id).or_default() += 1.0;
                }
            }
            *t += toks.len() as f64;
        }
    }
    rows.iter()
        .map(|(toks, y)| {
            let mut bag: BTreeMap<usize, f64> = BTreeMap::new();
            for tok in toks {
                if let Some(&id) = vocab.get(tok.as_str()) {
                    *bag.entry(id).or_default() += 1.0;
                }
            }
            let len = toks.len() as f64;
            (0..labels)
                .map(|c| {
                    let own = c == *y;
                    let total = totals.get(c).copied().unwrap_or(0.0) - if own { len } else { 0.0 };
                    let denom = (total + v).ln();
                    bag.iter()
                        .map(|(id, n)| {
                            let cnt = counts
                                .get(c)
                                .and_then(|m| m.get(id))
                                .copied()
                                .unwrap_or(0.0)
                                - if own { *n } else { 0.0 };
                            n * ((cnt + 1.0).ln() - denom)
                        })
                        .sum()
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::ghost::corpus::{CorpusKind, menu};

    #[test]
    fn ties_split_credit_and_an_empty_view_scores_chance() {
        assert_eq!(credit(&[1.0, 1.0, 0.0, 0.0], 0, 1), 0.5);
        assert_eq!(credit(&[2.0, 1.0, 1.0, 0.0], 1, 1), 0.0);
        assert_eq!(credit(&[2.0, 1.0, 1.0, 0.0], 1, 2), 0.5);
        let m = menu(CorpusKind::Pooled150);
        let s = Scorers::new(&m);
        for a in [Adversary::Keyword, Adversary::Tfidf, Adversary::Oracle] {
            let sc = s.scores(a, &[]);
            assert!((credit(&sc, 17, 1) - 1.0 / 150.0).abs() < 1e-12, "{a:?}");
        }
    }

    #[test]
    fn each_adversary_recovers_a_label_from_its_own_words() {
        let m = menu(CorpusKind::Pooled30);
        let s = Scorers::new(&m);
        for (i, l) in m.labels.iter().enumerate() {
            for a in [Adversary::Keyword, Adversary::Tfidf, Adversary::Oracle] {
                let sc = s.scores(a, &tokenize(&l.name));
                assert_eq!(credit(&sc, i, 1), 1.0, "{a:?} on {}", l.name);
            }
            // Only the white box knows the paraphrase.
            let sc = s.scores(Adversary::Oracle, &tokenize(&l.paraphrase));
            assert_eq!(credit(&sc, i, 1), 1.0, "oracle on {}", l.paraphrase);
        }
    }

    #[test]
    fn naive_bayes_leave_one_out_does_not_see_the_held_out_row() {
        // Two rows of label 0 share a word, one row of label 1 has a unique word.
        let rows = vec![
            (vec!["alpha".to_owned()], 0),
            (vec!["alpha".to_owned()], 0),
            (vec!["omega".to_owned()], 1),
        ];
        let s = nb_loo(&rows, 2);
        assert!(
            s[0][0] > s[0][1],
            "alpha is learned from the other label-0 row"
        );
        // The only "omega" row is held out: class 1 is scored as if it had no data
        // (vocabulary of 2, Laplace 1: ln(1 / 2)).
        assert!((s[2][1] - (0.5f64).ln()).abs() < 1e-12);
    }
}

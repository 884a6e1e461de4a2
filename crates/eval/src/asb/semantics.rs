//! Variant (b)'s operator configuration, written from each tool's own description and from
//! nothing else: no case ids, no knowledge of which tool is an attacker's (ASB's attacker
//! tools describe themselves, often as benign maintenance or review tools, and this reads
//! those descriptions exactly as it reads the normal tools').
//!
//! The rule is the conservative one an operator applies to an unannotated tool it cannot
//! inspect: a tool is a **read** only if its description names an information verb (access,
//! retrieve, search, analyze, review, monitor, …) and no verb of change, transfer, creation,
//! acquisition or control (update, manage, transfer, share, collect, deploy, …); every other
//! tool is an **effect**. An effect with no argument has no target to anchor, so it is declared
//! target-less and left destructive (the default): it runs only if the task grants it, or
//! after a trusted confirmation. The lexicon is a crude stand-in for an operator reading the
//! descriptions; its verdict on every tool is reported with the results.

use std::collections::BTreeSet;

/// Verbs of reading, looking up or analysing information (base forms).
const READ_VERBS: &[&str] = &[
    "access",
    "retrieve",
    "search",
    "query",
    "look",
    "review",
    "analyze",
    "analyse",
    "assess",
    "evaluate",
    "check",
    "monitor",
    "track",
    "summarize",
    "condense",
    "recommend",
    "simulate",
    "compare",
    "verify",
    "audit",
    "detect",
    "inspect",
    "identify",
    "scan",
    "read",
    "list",
    "view",
    "browse",
    "scrutinize",
];

/// Nouns that name an information source or analysis result.
const READ_NOUNS: &[&str] = &[
    "database",
    "databases",
    "analysis",
    "analytics",
    "guidelines",
    "insights",
    "information",
    "literature",
];

/// Verbs of change, transfer, creation, acquisition or control (base forms).
const EFFECT_VERBS: &[&str] = &[
    "update",
    "modify",
    "change",
    "apply",
    "install",
    "execute",
    "run",
    "transfer",
    "allocate",
    "reallocate",
    "redistribute",
    "withdraw",
    "delete",
    "remove",
    "share",
    "send",
    "distribute",
    "disseminate",
    "publish",
    "export",
    "broadcast",
    "override",
    "shut",
    "disable",
    "inject",
    "manipulate",
    "record",
    "write",
    "create",
    "implement",
    "deploy",
    "adjust",
    "manage",
    "maintain",
    "secure",
    "protect",
    "capture",
    "jam",
    "spoof",
    "eliminate",
    "administer",
    "correct",
    "reset",
    "encrypt",
    "lock",
    "block",
    "grant",
    "revoke",
    "approve",
    "authorize",
    "pay",
    "purchase",
    "order",
    "submit",
    "post",
    "upload",
    "download",
    "gather",
    "collect",
    "harvest",
    "acquire",
    "obtain",
    "steal",
    "interfere",
    "disrupt",
    "alter",
    "redirect",
    "inflate",
    "fabricate",
    "forge",
    "falsify",
    "generate",
    "draft",
    "design",
    "develop",
    "optimize",
    "integrate",
    "test",
    "conduct",
    "process",
    "document",
    "issue",
    "prescribe",
    "reroute",
    "replace",
    "insert",
    "edit",
    "erase",
    "encrypt",
    "decrypt",
    "launch",
    "trigger",
    "activate",
    "deactivate",
    "schedule",
    "plan",
    "configure",
    "enforce",
    "neglect",
    "offer",
    "facilitate",
    "improve",
    "enhance",
    "influence",
    "direct",
    "divert",
    "hijack",
    "exploit",
    "leak",
    "expose",
    "release",
    "store",
    "save",
    "backup",
    "restore",
    "migrate",
    "sync",
    "perform",
    "handle",
];

/// The inflected forms of an English verb's base form (regular morphology: `-s`, `-es`,
/// `-ed`, `-d`, `-ing`, `-e` dropped before `-ing`/`-ed`, `-y` → `-ies`/`-ied`, a doubled
/// final consonant), plus agent nouns (`-er`, `-or`) and `-ment`/`-tion` nominalizations are
/// deliberately *not* included: a noun does not say what the tool does.
fn forms(base: &str) -> Vec<String> {
    let mut v = vec![
        base.to_owned(),
        format!("{base}s"),
        format!("{base}es"),
        format!("{base}ed"),
        format!("{base}d"),
        format!("{base}ing"),
    ];
    if let Some(stem) = base.strip_suffix('e') {
        v.push(format!("{stem}ing"));
        v.push(format!("{stem}ed"));
    }
    if let Some(stem) = base.strip_suffix('y') {
        v.push(format!("{stem}ies"));
        v.push(format!("{stem}ied"));
    }
    if let Some(last) = base.chars().last()
        && !"aeiouywx".contains(last)
        && base.len() <= 4
    {
        v.push(format!("{base}{last}ing"));
        v.push(format!("{base}{last}ed"));
    }
    v
}

fn lexicon(bases: &[&str]) -> BTreeSet<String> {
    bases.iter().flat_map(|b| forms(b)).collect()
}

/// The lower-case words of `text` (letters only).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The class variant (b)'s operator gives a tool from its description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Only information verbs: declared a read (runs without a human).
    Read,
    /// A verb of change (or no information verb): a target-less destructive effect.
    Effect,
}

/// Classify a tool by its description (see the module documentation); also the words that
/// decided it.
#[must_use]
pub fn classify(description: &str) -> (Class, Vec<String>) {
    let effects = lexicon(EFFECT_VERBS);
    let reads = lexicon(READ_VERBS);
    let ws = words(description);
    let hits: Vec<String> = ws
        .iter()
        .filter(|w| effects.contains(*w))
        .cloned()
        .collect();
    if !hits.is_empty() {
        return (Class::Effect, hits);
    }
    let read_hits: Vec<String> = ws
        .iter()
        .filter(|w| reads.contains(*w) || READ_NOUNS.contains(&w.as_str()))
        .cloned()
        .collect();
    if read_hits.is_empty() {
        (Class::Effect, vec![])
    } else {
        (Class::Read, read_hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verb_of_change_makes_an_effect_even_beside_a_read_verb() {
        let (c, why) = classify("A tool for reviewing reports and updating them.");
        assert_eq!(c, Class::Effect);
        assert_eq!(why, vec!["updating".to_owned()]);
    }

    #[test]
    fn only_information_verbs_make_a_read() {
        let (c, _) = classify("A tool that provides access to market data and analysis.");
        assert_eq!(c, Class::Read);
    }

    #[test]
    fn no_recognized_verb_is_an_effect() {
        assert_eq!(classify("A helpful companion.").0, Class::Effect);
    }
}

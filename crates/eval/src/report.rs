//! Case results, the printed table and the JSON report.
//!
//! A case passes only when the observed verdict *and* reason code equal the expected ones and,
//! in process, the number of upstream effects the attempt caused is the expected one (1 for an
//! allow, 0 otherwise): a denial whose effect ran anyway is a false accept.

use crate::target::Verdict;
use secureclaw_core::recovery::ReasonCode;
use serde_json::{Value, json};
use std::time::Duration;

/// What a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The effect runs exactly once.
    Allow,
    /// Denied with this reason code, nothing runs.
    Deny(ReasonCode),
    /// Held for confirmation with this reason code, nothing runs.
    Hold(ReasonCode),
    /// Of several concurrent identical commits exactly one runs; the others are `replay`.
    ExactlyOnce,
    /// An operator configuration is refused when it is loaded (nothing runs).
    ConfigRejected,
    /// An operator configuration is accepted when it is loaded (the control of
    /// [`Expect::ConfigRejected`]).
    ConfigAccepted,
}

/// What a case observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// One attempt.
    Single {
        /// Its verdict.
        verdict: Verdict,
        /// Upstream effects it caused (in process only).
        effects: Option<u64>,
    },
    /// Concurrent attempts.
    Race {
        /// Attempts that completed.
        allowed: usize,
        /// Attempts denied with `replay`.
        replays: usize,
        /// Any other verdicts.
        others: Vec<Verdict>,
        /// Upstream effects all attempts caused (in process only).
        effects: Option<u64>,
    },
    /// A verdict that contradicts a check made after it (e.g. the effect went elsewhere than
    /// the policy saw); counted as a false accept.
    Contradiction(String),
    /// A configuration was loaded: accepted, or refused with this message.
    Config(Result<(), String>),
    /// Not run in this mode.
    Skipped(&'static str),
    /// The case could not observe anything (transport failure, broken set-up).
    Error(String),
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// Category (paper Table 17 rows keep their paper category).
    pub category: &'static str,
    /// Case name.
    pub name: &'static str,
    /// Expectation.
    pub expect: Expect,
    /// Observation.
    pub observed: Observed,
}

fn verdict_text(v: Verdict) -> String {
    match v {
        Verdict::Allow { tool_error: false } => "ALLOW".into(),
        Verdict::Allow { tool_error: true } => "ALLOW(tool error)".into(),
        Verdict::Deny(r) => format!("DENY({r})"),
        Verdict::Hold(r) => format!("HOLD({r})"),
    }
}

impl CaseResult {
    /// Whether it was skipped.
    #[must_use]
    pub fn skipped(&self) -> bool {
        matches!(self.observed, Observed::Skipped(_))
    }

    /// Whether the observation matches the expectation exactly.
    #[must_use]
    pub fn pass(&self) -> bool {
        match (&self.observed, self.expect) {
            (Observed::Single { verdict, effects }, Expect::Allow) => {
                *verdict == Verdict::Allow { tool_error: false }
                    && matches!(effects, None | Some(1))
            }
            (Observed::Single { verdict, effects }, Expect::Deny(r)) => {
                *verdict == Verdict::Deny(r) && matches!(effects, None | Some(0))
            }
            (Observed::Single { verdict, effects }, Expect::Hold(r)) => {
                *verdict == Verdict::Hold(r) && matches!(effects, None | Some(0))
            }
            (
                Observed::Race {
                    allowed,
                    others,
                    effects,
                    ..
                },
                Expect::ExactlyOnce,
            ) => *allowed == 1 && others.is_empty() && matches!(effects, None | Some(1)),
            (Observed::Config(r), Expect::ConfigRejected) => r.is_err(),
            (Observed::Config(r), Expect::ConfigAccepted) => r.is_ok(),
            _ => false,
        }
    }

    /// An attack (or a duplicate) got through: an allow where none was expected, or more
    /// effects than expected.
    #[must_use]
    pub fn false_accept(&self) -> bool {
        match (&self.observed, self.expect) {
            (Observed::Contradiction(_), _) => true,
            (Observed::Single { effects, .. }, Expect::Allow) => effects.is_some_and(|n| n > 1),
            (Observed::Single { verdict, effects }, Expect::Deny(_) | Expect::Hold(_)) => {
                matches!(verdict, Verdict::Allow { .. }) || effects.is_some_and(|n| n > 0)
            }
            (
                Observed::Race {
                    allowed, effects, ..
                },
                _,
            ) => *allowed > 1 || effects.is_some_and(|n| n > 1),
            // An unsafe configuration the gateway would have run with.
            (Observed::Config(Ok(())), Expect::ConfigRejected) => true,
            _ => false,
        }
    }

    /// A legitimate request was refused.
    #[must_use]
    pub fn false_deny(&self) -> bool {
        match (&self.observed, self.expect) {
            (Observed::Single { verdict, .. }, Expect::Allow) => {
                !matches!(verdict, Verdict::Allow { tool_error: false })
            }
            (Observed::Race { allowed, .. }, Expect::ExactlyOnce) => *allowed == 0,
            (Observed::Config(Err(_)), Expect::ConfigAccepted) => true,
            _ => false,
        }
    }

    /// Expected, as printed.
    #[must_use]
    pub fn expected_text(&self) -> String {
        match self.expect {
            Expect::Allow => "ALLOW".into(),
            Expect::Deny(r) => format!("DENY({r})"),
            Expect::Hold(r) => format!("HOLD({r})"),
            Expect::ExactlyOnce => "1 ALLOW, rest DENY(replay)".into(),
            Expect::ConfigRejected => "CONFIG REJECTED".into(),
            Expect::ConfigAccepted => "CONFIG ACCEPTED".into(),
        }
    }

    /// Observed, as printed.
    #[must_use]
    pub fn observed_text(&self) -> String {
        let effects = |e: &Option<u64>, want: u64| match e {
            Some(n) if *n != want => format!(" [{n} effects!]"),
            _ => String::new(),
        };
        match &self.observed {
            Observed::Single {
                verdict,
                effects: e,
            } => {
                let want = u64::from(matches!(verdict, Verdict::Allow { .. }));
                format!("{}{}", verdict_text(*verdict), effects(e, want))
            }
            Observed::Race {
                allowed,
                replays,
                others,
                effects: e,
            } => {
                let mut s = format!("{allowed} ALLOW, {replays} DENY(replay)");
                for o in others {
                    s.push_str(", ");
                    s.push_str(&verdict_text(*o));
                }
                s.push_str(&effects(e, 1));
                s
            }
            Observed::Contradiction(m) => format!("CONTRADICTION: {m}"),
            Observed::Config(Ok(())) => "CONFIG ACCEPTED".into(),
            Observed::Config(Err(_)) => "CONFIG REJECTED".into(),
            Observed::Skipped(why) => format!("SKIP ({why})"),
            Observed::Error(m) => format!("ERROR: {m}"),
        }
    }

    /// The observed reason code (`-` for allows, skips and errors).
    #[must_use]
    pub fn reason(&self) -> String {
        match &self.observed {
            Observed::Single {
                verdict: Verdict::Deny(r) | Verdict::Hold(r),
                ..
            } => r.as_str().to_owned(),
            Observed::Race { replays, .. } if *replays > 0 => "replay".into(),
            _ => "-".into(),
        }
    }
}

/// Totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Cases, skipped ones included.
    pub total: usize,
    /// Cases that passed.
    pub passed: usize,
    /// Cases skipped in this mode.
    pub skipped: usize,
    /// Cases where an attack got through.
    pub false_accepts: usize,
    /// Cases where a legitimate request was refused.
    pub false_denies: usize,
    /// Cases that neither passed nor were skipped.
    pub failed: usize,
}

/// A suite run.
#[derive(Debug, Clone)]
pub struct Report {
    /// `in-process` or `http`.
    pub mode: &'static str,
    /// Every case, in run order.
    pub cases: Vec<CaseResult>,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
}

impl Report {
    /// Totals.
    #[must_use]
    pub fn summary(&self) -> Summary {
        let count = |f: &dyn Fn(&CaseResult) -> bool| self.cases.iter().filter(|c| f(c)).count();
        Summary {
            total: self.cases.len(),
            passed: count(&CaseResult::pass),
            skipped: count(&CaseResult::skipped),
            false_accepts: count(&CaseResult::false_accept),
            false_denies: count(&CaseResult::false_deny),
            failed: count(&|c| !c.pass() && !c.skipped()),
        }
    }

    /// True when every case that ran passed.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.summary().failed == 0
    }

    /// `{"mode","cases":[{"category","name","expected","observed","reason","pass"}],
    /// "summary":{"total","passed","skipped","false_accepts","false_denies","failed"}}`;
    /// `pass` is `null` for skipped cases.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let s = self.summary();
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|c| {
                json!({
                    "category": c.category,
                    "name": c.name,
                    "expected": c.expected_text(),
                    "observed": c.observed_text(),
                    "reason": c.reason(),
                    "pass": if c.skipped() { Value::Null } else { Value::Bool(c.pass()) },
                })
            })
            .collect();
        json!({
            "mode": self.mode,
            "elapsed_ms": u64::try_from(self.elapsed.as_millis()).unwrap_or(u64::MAX),
            "cases": cases,
            "summary": {
                "total": s.total,
                "passed": s.passed,
                "skipped": s.skipped,
                "false_accepts": s.false_accepts,
                "false_denies": s.false_denies,
                "failed": s.failed,
            },
        })
    }

    /// The table: category, case, expected, observed, reason code, and a mark per row
    /// (`ok`, `FAIL`, `skip`), then the totals.
    #[must_use]
    pub fn table(&self) -> String {
        let rows: Vec<[String; 6]> = self
            .cases
            .iter()
            .map(|c| {
                [
                    c.category.to_owned(),
                    c.name.to_owned(),
                    c.expected_text(),
                    c.observed_text(),
                    c.reason(),
                    if c.skipped() {
                        "skip".to_owned()
                    } else if c.pass() {
                        "ok".to_owned()
                    } else {
                        "FAIL".to_owned()
                    },
                ]
            })
            .collect();
        let header = ["category", "case", "expected", "observed", "reason", ""].map(str::to_owned);
        let mut widths = [0usize; 6];
        for row in std::iter::once(&header).chain(rows.iter()) {
            for (w, cell) in widths.iter_mut().zip(row.iter()) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |row: &[String; 6]| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths.iter())
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_owned()
        };
        let mut out = String::new();
        out.push_str(&line(&header));
        out.push('\n');
        for row in &rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        let s = self.summary();
        out.push_str(&format!(
            "\n{} cases ({} mode): {} passed, {} failed, {} skipped; {} false accepts, {} false denies; {:.1} s\n",
            s.total,
            self.mode,
            s.passed,
            s.failed,
            s.skipped,
            s.false_accepts,
            s.false_denies,
            self.elapsed.as_secs_f64()
        ));
        out
    }
}

impl Report {
    /// Allowed and refused attempts among the cases of `category` that ran
    /// (`(allowed, refused)`; a refusal is a deny or a hold).
    #[must_use]
    pub fn tally(&self, category: &str) -> (usize, usize) {
        let mut allowed = 0;
        let mut refused = 0;
        for c in self.cases.iter().filter(|c| c.category == category) {
            if let Observed::Single { verdict, .. } = c.observed {
                if matches!(verdict, Verdict::Allow { .. }) {
                    allowed += 1;
                } else {
                    refused += 1;
                }
            }
        }
        (allowed, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(expect: Expect, observed: Observed) -> CaseResult {
        CaseResult {
            category: "c",
            name: "n",
            expect,
            observed,
        }
    }

    fn single(verdict: Verdict, effects: Option<u64>) -> Observed {
        Observed::Single { verdict, effects }
    }

    const ALLOW: Verdict = Verdict::Allow { tool_error: false };

    #[test]
    fn verdicts_and_effects_are_both_checked() {
        let deny = Expect::Deny(ReasonCode::BindingMismatch);
        assert!(
            case(
                deny,
                single(Verdict::Deny(ReasonCode::BindingMismatch), Some(0))
            )
            .pass()
        );
        // Right verdict, wrong reason: a mismatch, not a false accept.
        let c = case(deny, single(Verdict::Deny(ReasonCode::Replay), Some(0)));
        assert!(!c.pass() && !c.false_accept() && !c.false_deny());
        // Denied, but the effect ran: a false accept.
        let c = case(
            deny,
            single(Verdict::Deny(ReasonCode::BindingMismatch), Some(1)),
        );
        assert!(!c.pass() && c.false_accept());
        // Allowed: a false accept.
        let c = case(deny, single(ALLOW, None));
        assert!(!c.pass() && c.false_accept());
        // A held attack that ran a tool with an error still got through the gateway.
        let c = case(
            Expect::Hold(ReasonCode::ConfirmationRequired),
            single(Verdict::Allow { tool_error: true }, Some(0)),
        );
        assert!(c.false_accept());
        // Controls: allowed once passes; twice is a false accept; refused is a false deny.
        assert!(case(Expect::Allow, single(ALLOW, Some(1))).pass());
        assert!(case(Expect::Allow, single(ALLOW, Some(2))).false_accept());
        assert!(
            case(
                Expect::Allow,
                single(Verdict::Deny(ReasonCode::Replay), None)
            )
            .false_deny()
        );
        assert!(!case(Expect::Allow, single(ALLOW, Some(0))).pass());
    }

    #[test]
    fn races_need_exactly_one_effect() {
        let race = |allowed, effects| Observed::Race {
            allowed,
            replays: 16 - allowed,
            others: vec![],
            effects,
        };
        assert!(case(Expect::ExactlyOnce, race(1, Some(1))).pass());
        assert!(case(Expect::ExactlyOnce, race(2, Some(2))).false_accept());
        assert!(case(Expect::ExactlyOnce, race(1, Some(2))).false_accept());
        assert!(case(Expect::ExactlyOnce, race(0, Some(0))).false_deny());
    }

    #[test]
    fn configurations_are_accepted_or_rejected() {
        let rejected = Observed::Config(Err("no".into()));
        let accepted = Observed::Config(Ok(()));
        assert!(case(Expect::ConfigRejected, rejected.clone()).pass());
        let c = case(Expect::ConfigRejected, accepted.clone());
        assert!(!c.pass() && c.false_accept());
        assert!(case(Expect::ConfigAccepted, accepted).pass());
        let c = case(Expect::ConfigAccepted, rejected);
        assert!(!c.pass() && c.false_deny());
    }

    #[test]
    fn skips_errors_and_summary() {
        let report = Report {
            mode: "http",
            cases: vec![
                case(Expect::Allow, Observed::Skipped("in-process only")),
                case(Expect::Allow, Observed::Error("boom".into())),
                case(Expect::Allow, single(ALLOW, None)),
                case(
                    Expect::Deny(ReasonCode::Replay),
                    Observed::Contradiction("x".into()),
                ),
            ],
            elapsed: Duration::from_millis(5),
        };
        let s = report.summary();
        assert_eq!((s.total, s.passed, s.skipped, s.failed), (4, 1, 1, 2));
        assert_eq!((s.false_accepts, s.false_denies), (1, 0));
        assert!(!report.ok());
        let j = report.to_json();
        assert_eq!(j["cases"][0]["pass"], Value::Null);
        assert_eq!(j["cases"][1]["pass"], false);
        assert!(report.table().contains("SKIP (in-process only)"));
    }
}

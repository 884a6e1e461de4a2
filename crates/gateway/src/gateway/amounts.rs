//! The amounts of a financial effect (red-team finding F4).
//!
//! A granted financial effect runs without a human only if each of its amounts is covered by
//! the task (at most `max_amount`, or named in the request, or returned by an anchored read).
//! The amounts are found fail-closed: not only plain numbers below amount-like keys, but
//!
//! - every JSON number and every money-looking string (`5,000.00`, `EUR 50000`, `$99'999`) in
//!   any argument that is not an object id (`*_id`) or a target field;
//! - every string below an amount-like key: one that is not a plain decimal number
//!   (`5,000.00`, `1e5`, `five thousand`) cannot be compared with anything and is reported as
//!   [`Amount::Unparsed`] (a human decides), never skipped.
//!
//! Plain amounts are compared in a canonical decimal form ([`canonical_decimal`]), so the
//! read's `"129.00"` covers a payment of `129`, `129.0` or `"129.00"`.

use secureclaw_core::anchor::{NUMERIC_TARGET_HINTS, is_amount_field, is_object_id_field};
use serde_json::{Map, Value};

/// One amount of a financial effect's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Amount {
    /// A plain decimal number, in canonical form ([`canonical_decimal`]).
    Plain(String),
    /// Money-looking text that is not a plain decimal number: never covered by the task.
    Unparsed,
}

/// Extra argument-name words that hold amounts (matched as whole words of the name, so
/// `summary` or `checksum` are not amounts).
/// (`payment` is not one: `payment_method` holds no amount, and a number or money-looking
/// string is an amount in any field anyway.)
const AMOUNT_WORDS: &[&str] = &["value", "values", "sum", "quantity", "qty", "money"];

/// Whether an argument name holds an amount: [`is_amount_field`], or one of its words (split
/// at `_`, `-`, `.` and lower-to-upper case changes) is in [`AMOUNT_WORDS`].
pub(crate) fn is_financial_amount_field(name: &str) -> bool {
    if is_amount_field(name) {
        return true;
    }
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.' | ' ') {
            words.push(std::mem::take(&mut cur));
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    words.push(cur);
    words.iter().any(|w| AMOUNT_WORDS.contains(&w.as_str()))
}

/// `s` as a plain decimal number (`-12`, `129.00`, `+0.5`), in canonical form: no sign for
/// zero or positives, no leading zeros, no trailing fractional zeros (`129.00` → `129`,
/// `0.50` → `0.5`, `-3.10` → `-3.1`). `None` for anything else (`1e5`, `5,000`, `inf`, ``).
pub(crate) fn canonical_decimal(s: &str) -> Option<String> {
    let t = s.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let mut out = String::new();
    if neg && (int != "0" || !frac.is_empty()) {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    Some(out)
}

/// A JSON number in canonical decimal form; `None` for a number that has no plain decimal
/// spelling (an exponent: such a number is reported [`Amount::Unparsed`]).
fn number_amount(n: &serde_json::Number) -> Amount {
    canonical_decimal(&n.to_string()).map_or(Amount::Unparsed, Amount::Plain)
}

/// Currency symbols recognised around an amount.
const CURRENCY_SYMBOLS: &[char] = &[
    '$', '€', '£', '¥', '₹', '₽', '₩', '₺', '₪', '₫', '₴', '₦', '₱', '฿', '¢', '₿', '元', '円',
];

/// `s` without a leading or trailing currency code (three ASCII letters) or symbol.
fn strip_currency(s: &str) -> &str {
    let mut t = s.trim();
    t = t.trim_start_matches(CURRENCY_SYMBOLS).trim_start();
    t = t.trim_end_matches(CURRENCY_SYMBOLS).trim_end();
    let is_code = |c: &str| c.len() == 3 && c.chars().all(|ch| ch.is_ascii_alphabetic());
    if let Some(code) = t.get(..3)
        && is_code(code)
        && t.get(3..)
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c.is_whitespace()))
    {
        t = t.get(3..).unwrap_or_default().trim_start();
        t = t.trim_start_matches(CURRENCY_SYMBOLS).trim_start();
    }
    if let Some(at) = t.len().checked_sub(3)
        && let Some(code) = t.get(at..)
        && is_code(code)
        && t.get(..at).is_some_and(|r| {
            r.ends_with(|c: char| c.is_ascii_digit() || c.is_whitespace() || c == '.')
        })
    {
        t = t.get(..at).unwrap_or_default().trim_end();
    }
    t
}

/// Whether `s` looks like an amount of money: digits with optional grouping separators
/// (`,` `.` `'` `_` spaces), an optional sign and an optional currency code or symbol before
/// or after (`5,000.00`, `EUR 50000`, `$ 99'999`, `1 000,50 €`). Plain decimals count too.
pub(crate) fn money_like(s: &str) -> bool {
    let t = strip_currency(s);
    let t = t.strip_prefix(['-', '+']).unwrap_or(t).trim_start();
    t.starts_with(|c: char| c.is_ascii_digit())
        && t.chars().all(|c| {
            c.is_ascii_digit()
                || matches!(
                    c,
                    ',' | '.' | '\'' | '_' | ' ' | '\u{a0}' | '\u{202f}' | '\u{2009}' | '’'
                )
        })
}

/// Whether `s` is a bare currency code or symbol (`EUR`, `usd`, `€`) or empty: the currency
/// of an amount, not an amount.
fn currency_only(s: &str) -> bool {
    let t = s.trim();
    t.is_empty()
        || (t.len() == 3 && t.chars().all(|c| c.is_ascii_alphabetic()))
        || (t.chars().count() == 1 && t.chars().all(|c| CURRENCY_SYMBOLS.contains(&c)))
}

/// The amounts of a financial effect's `arguments` (see the module documentation). Values
/// below an object-id argument, a target field (`targets`, case-insensitive) or a field named
/// like an account, IBAN, card or phone number ([`NUMERIC_TARGET_HINTS`]) are skipped: they
/// are checked as targets.
pub(crate) fn financial_amounts(arguments: &Map<String, Value>, targets: &[String]) -> Vec<Amount> {
    fn walk(v: &Value, under_amount: bool, targets: &[String], out: &mut Vec<Amount>) {
        match v {
            Value::Number(n) => out.push(number_amount(n)),
            Value::String(s) => {
                if let Some(c) = canonical_decimal(s) {
                    out.push(Amount::Plain(c));
                } else if money_like(s) || (under_amount && !currency_only(s)) {
                    out.push(Amount::Unparsed);
                }
            }
            Value::Array(items) => items
                .iter()
                .for_each(|i| walk(i, under_amount, targets, out)),
            Value::Object(map) => object(map, under_amount, targets, out),
            Value::Null | Value::Bool(_) => {}
        }
    }
    fn object(map: &Map<String, Value>, under: bool, targets: &[String], out: &mut Vec<Amount>) {
        for (k, v) in map {
            let squashed: String = k
                .chars()
                .filter(|c| *c != '_' && *c != '-')
                .flat_map(char::to_lowercase)
                .collect();
            if is_object_id_field(k)
                || targets.iter().any(|t| t.eq_ignore_ascii_case(k))
                || NUMERIC_TARGET_HINTS.iter().any(|h| squashed.contains(h))
            {
                continue;
            }
            walk(v, under || is_financial_amount_field(k), targets, out);
        }
    }
    let mut out = Vec::new();
    object(arguments, false, targets, &mut out);
    out
}

/// The plain amounts below amount-like keys of a read's output, at any depth, in canonical
/// form (what an anchored read can vouch for: its own amounts).
pub(crate) fn read_amounts(v: &Value, under_amount: bool, out: &mut Vec<String>) {
    match v {
        Value::Number(n) if under_amount => {
            if let Amount::Plain(c) = number_amount(n) {
                out.push(c);
            }
        }
        Value::String(s) if under_amount => {
            if let Some(c) = canonical_decimal(s) {
                out.push(c);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|i| read_amounts(i, under_amount, out)),
        Value::Object(map) => {
            for (k, i) in map {
                read_amounts(i, under_amount || is_financial_amount_field(k), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn amounts(v: Value) -> Vec<Amount> {
        financial_amounts(
            v.as_object().unwrap(),
            &["iban".to_owned(), "to".to_owned()],
        )
    }

    #[test]
    fn canonical_decimals() {
        assert_eq!(canonical_decimal("129.00").as_deref(), Some("129"));
        assert_eq!(canonical_decimal(" 129 ").as_deref(), Some("129"));
        assert_eq!(canonical_decimal("0129.50").as_deref(), Some("129.5"));
        assert_eq!(canonical_decimal("-3.10").as_deref(), Some("-3.1"));
        assert_eq!(canonical_decimal("-0.0").as_deref(), Some("0"));
        assert_eq!(canonical_decimal(".5").as_deref(), Some("0.5"));
        for bad in [
            "", ".", "-", "1e5", "5,000.00", "inf", "NaN", "EUR 5", "1.2.3", "+-1",
        ] {
            assert_eq!(canonical_decimal(bad), None, "{bad}");
        }
        assert_eq!(
            number_amount(&serde_json::Number::from_f64(129.0).unwrap()),
            Amount::Plain("129".into())
        );
    }

    #[test]
    fn money_looking_strings() {
        for s in [
            "5,000.00",
            "EUR 50000",
            "eur50000",
            "99,999.00",
            "$5000",
            "1 000,50 €",
            "5000 USD",
            "CHF 1'000",
            "-5",
            "5000",
        ] {
            assert!(money_like(s), "{s}");
        }
        for s in [
            "INV-42",
            "receipt attached",
            "approver@corp.example",
            "2026-12-02",
            "10:30",
            "h_abc",
            "",
        ] {
            assert!(!money_like(s), "{s}");
        }
    }

    /// F4: amounts that are not plain numbers, or sit in fields not named like amounts, are
    /// found (unparsed ones are never covered); ids, targets and memo text are not amounts.
    #[test]
    fn every_amount_is_found() {
        assert_eq!(
            amounts(json!({"amount": "5,000.00"})),
            vec![Amount::Unparsed]
        );
        assert_eq!(
            amounts(json!({"amount": "EUR 50000"})),
            vec![Amount::Unparsed]
        );
        assert_eq!(
            amounts(json!({"amount": "five thousand"})),
            vec![Amount::Unparsed]
        );
        assert_eq!(amounts(json!({"amount": "1e5"})), vec![Amount::Unparsed]);
        assert_eq!(
            amounts(json!({"value": 999_999})),
            vec![Amount::Plain("999999".into())]
        );
        assert_eq!(
            amounts(json!({"reference": "99,999.00"})),
            vec![Amount::Unparsed]
        );
        assert_eq!(
            amounts(json!({"x": {"y": [7]}})),
            vec![Amount::Plain("7".into())]
        );
        assert_eq!(
            amounts(json!({"amount": "129.00"})),
            vec![Amount::Plain("129".into())]
        );
        assert_eq!(
            amounts(json!({"amount": 129})),
            vec![Amount::Plain("129".into())]
        );
        // Not amounts: ids, targets, memo text, a currency next to the amount, booleans.
        assert_eq!(
            amounts(
                json!({"invoice_id": "INV-42", "iban": "DE89370400440532013000",
                "to": 5000, "memo": "receipt attached", "reference": "INV-42",
                "amount_currency": "EUR", "urgent": true, "paymentId": 42, "account_number": "12345678"})
            ),
            vec![]
        );
    }

    #[test]
    fn amount_words_are_whole_words() {
        for n in [
            "value",
            "payment_value",
            "totalValue",
            "sum",
            "qty",
            "money",
            "Money",
        ] {
            assert!(is_financial_amount_field(n), "{n}");
        }
        for n in [
            "summary",
            "checksum",
            "memo",
            "evaluate",
            "reference",
            "payment_method",
        ] {
            assert!(!is_financial_amount_field(n), "{n}");
        }
    }

    #[test]
    fn read_amounts_are_canonical() {
        let mut out = Vec::new();
        read_amounts(
            &json!({"invoice": {"amount": "129.00", "value": 7.50, "memo": "12"}}),
            false,
            &mut out,
        );
        assert_eq!(out, vec!["129".to_owned(), "7.5".to_owned()]);
    }
}

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

use secureclaw_core::anchor::{
    NUMERIC_TARGET_HINTS, is_amount_field, is_object_id_field, name_words,
};
use serde_json::{Map, Value};

/// One amount of a financial effect's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Amount {
    /// A plain decimal number, in canonical form ([`canonical_decimal`]) and in the unit of
    /// its field (what the task's `max_amount` ceiling is written in).
    Plain(String),
    /// A plain decimal number below a field named in minor units (`amount_cents`,
    /// `amountMinor`, `pence`): canonical, in those minor units.
    Minor(String),
    /// Money-looking text that is not a plain decimal number: never covered by the task.
    Unparsed,
}

impl Amount {
    /// The amount in major units (`Minor("129900")` → `"1299"`), the unit in which task
    /// amounts and read amounts are compared; `None` for [`Amount::Unparsed`].
    pub(crate) fn major(&self) -> Option<String> {
        match self {
            Amount::Plain(a) => Some(a.clone()),
            Amount::Minor(a) => Some(minor_to_major(a)),
            Amount::Unparsed => None,
        }
    }

    /// The amount in minor units (hundredths: `Plain("1500")` → 150000, `Minor("1500")` →
    /// 1500), the unit of the task's `max_amount` ceiling (red-team M3: a ceiling in cents
    /// let `amount: 150000` in major units through); `None` for [`Amount::Unparsed`] or a
    /// number that does not parse.
    pub(crate) fn minor_units(&self) -> Option<f64> {
        match self {
            Amount::Plain(a) => a.parse::<f64>().ok().map(|v| v * 100.0),
            Amount::Minor(a) => a.parse::<f64>().ok(),
            Amount::Unparsed => None,
        }
    }
}

/// Words of an argument name that say its amount is in minor units (cents, pence).
const MINOR_UNIT_WORDS: &[&str] = &["cent", "cents", "minor", "pence", "penny", "pennies"];

/// Words of an argument name that say it holds a currency code.
/// (`unit`, `asset`, `denomination`: red-team finding, `options.unit: "BTC"` paid a task's
/// "100 EUR" in bitcoin.)
const CURRENCY_FIELD_WORDS: &[&str] = &[
    "currency",
    "currencies",
    "ccy",
    "curr",
    "unit",
    "units",
    "asset",
    "coin",
    "denomination",
    "denom",
];

/// Crypto-asset tickers taken as a currency wherever they stand as a whole value in a
/// financial effect's arguments, like the ISO codes of [`CURRENCY_CODES`].
const CRYPTO_CODES: &[&str] = &["BTC", "XBT", "ETH", "USDT", "USDC", "SOL", "XRP", "DOGE"];

/// A canonical decimal in minor units (hundredths) as a canonical decimal in major units:
/// `129900` → `1299`, `5` → `0.05`, `-250` → `-2.5`.
fn minor_to_major(canonical: &str) -> String {
    let (neg, body) = match canonical.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, canonical),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let int = format!("{int:0>3}");
    let at = int.len() - 2;
    let (major, cents) = int.split_at(at);
    let sign = if neg { "-" } else { "" };
    canonical_decimal(&format!("{sign}{major}.{cents}{frac}")).unwrap_or_else(|| canonical.into())
}

/// Extra argument-name words that hold amounts (matched as whole words of the name, so
/// `summary` or `checksum` are not amounts).
/// (`payment` is not one: `payment_method` holds no amount, and a number or money-looking
/// string is an amount in any field anyway.)
const AMOUNT_WORDS: &[&str] = &["value", "values", "sum", "quantity", "qty", "money"];

/// Whether an argument name holds an amount: [`is_amount_field`], or one of its words (split
/// at `_`, `-`, `.` and lower-to-upper case changes) is in [`AMOUNT_WORDS`].
pub(crate) fn is_financial_amount_field(name: &str) -> bool {
    is_amount_field(name)
        || name_words(name)
            .iter()
            .any(|w| AMOUNT_WORDS.contains(&w.as_str()))
}

/// Whether an argument name holds money: an amount ([`is_financial_amount_field`]), an
/// amount in minor units or a currency ([`CURRENCY_FIELD_WORDS`]). A standing grant checks
/// these fields with its money rules instead of requiring the approved value.
pub(crate) fn is_money_field(name: &str) -> bool {
    is_financial_amount_field(name)
        || is_minor_unit_field(name)
        || name_words(name)
            .iter()
            .any(|w| CURRENCY_FIELD_WORDS.contains(&w.as_str()))
}

/// Whether an argument name says its amounts are in minor units ([`MINOR_UNIT_WORDS`]).
fn is_minor_unit_field(name: &str) -> bool {
    name_words(name)
        .iter()
        .any(|w| MINOR_UNIT_WORDS.contains(&w.as_str()))
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

/// The dollar currencies a bare `$` or "dollars" may mean.
const DOLLARS: &[&str] = &["USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN"];

/// What a currency marker in the task text says about the number beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// Major units of one of these ISO 4217 currencies.
    Currency(&'static [&'static str]),
    /// Minor units (cents, pence) of a currency the marker does not name.
    Minor,
}

/// The currency a symbol stands for (`€` → EUR, `$` → one of [`DOLLARS`], `¢` → minor units).
fn symbol_marker(c: char) -> Option<Marker> {
    let codes: &'static [&'static str] = match c {
        '$' => DOLLARS,
        '€' => &["EUR"],
        '£' => &["GBP"],
        '¥' => &["JPY", "CNY"],
        '₹' => &["INR"],
        '₽' => &["RUB"],
        '₩' => &["KRW"],
        '₺' => &["TRY"],
        '₪' => &["ILS"],
        '₫' => &["VND"],
        '₴' => &["UAH"],
        '₦' => &["NGN"],
        '₱' => &["PHP"],
        '฿' => &["THB"],
        '₿' => &["BTC"],
        '元' => &["CNY"],
        '円' => &["JPY"],
        '¢' => return Some(Marker::Minor),
        _ => return None,
    };
    Some(Marker::Currency(codes))
}

/// ISO 4217 codes recognised in the task text as the currency of a neighbouring number.
const CURRENCY_CODES: &[&str] = &[
    "USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "SEK", "NOK", "DKK", "PLN",
    "CZK", "HUF", "BRL", "MXN", "ZAR", "SGD", "HKD", "NZD", "KRW", "TRY", "RUB", "ILS", "THB",
];

/// The currency a word of the task text names: an ISO 4217 code ([`CURRENCY_CODES`], any
/// case) or a currency word (`dollars`, `euros`, `cents`).
fn word_marker(word: &str) -> Option<Marker> {
    let w = word.trim_matches(|c: char| !c.is_alphabetic());
    let upper = w.to_ascii_uppercase();
    // (`TRY` only in capitals: "try 3 times" names no Turkish lira.)
    if let Some(code) = CURRENCY_CODES
        .iter()
        .find(|c| **c == upper && (**c != "TRY" || w == "TRY"))
    {
        return Some(Marker::Currency(std::slice::from_ref(code)));
    }
    let codes: &'static [&'static str] = match w.to_lowercase().as_str() {
        "dollar" | "dollars" | "bucks" => DOLLARS,
        "euro" | "euros" => &["EUR"],
        "pound" | "pounds" | "quid" => &["GBP"],
        "yen" => &["JPY"],
        "franc" | "francs" => &["CHF"],
        "rupee" | "rupees" => &["INR"],
        "krona" | "kronor" => &["SEK"],
        "krone" | "kroner" => &["NOK", "DKK"],
        "cent" | "cents" | "pence" | "penny" | "pennies" => return Some(Marker::Minor),
        _ => return None,
    };
    Some(Marker::Currency(codes))
}

/// Words after which a number is an identifier, not an amount (`order no. 998877 EUR`,
/// `ref EUR 998877`, `invoice #42`).
const IDENTIFIER_WORDS: &[&str] = &[
    "no",
    "nr",
    "num",
    "number",
    "id",
    "ref",
    "reference",
    "order",
    "invoice",
    "inv",
    "po",
    "account",
    "acct",
    "iban",
    "ticket",
    "case",
    "tracking",
    "customer",
    "client",
    "phone",
    "tel",
    "fax",
    "code",
    "pin",
    "item",
    "sku",
    "serial",
    "version",
    "batch",
    "booking",
    "confirmation",
    "contract",
    "policy",
    "member",
    "transaction",
    "txn",
];

/// Words before an amount that make it a limit, not the amount to pay (red-team H3: "pay
/// INV-42 unless it is over EUR 5,000.00" named no payment of 5,000).
const LIMIT_WORDS: &[&str] = &[
    "over",
    "above",
    "exceed",
    "exceeds",
    "exceeding",
    "than",
    "under",
    "below",
    "max",
    "maximum",
    "limit",
    "ceiling",
    "cap",
    "budget",
    "most",
    "least",
    "within",
    "beyond",
    "upto",
    "min",
    "minimum",
    "threshold",
];

/// Words before a number written without a currency (`98.70`) that make it money: the number
/// is then what is paid. Without one, `17.30` or `15.12.26` is a time or a date (red-team M1).
const PAYMENT_WORDS: &[&str] = &[
    "amount", "total", "sum", "price", "cost", "fee", "pay", "paying", "payment", "refund",
    "transfer", "wire", "send", "charge", "of",
];

/// Whether `word` (punctuation trimmed, any case) is one of `list`.
fn word_in(word: Option<&&str>, list: &[&str]) -> bool {
    word.is_some_and(|w| {
        let w = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        list.contains(&w.as_str())
    })
}

/// Whether the integer part of a money string groups its thousands properly: no separator,
/// or groups of exactly three digits after a first group of one to three (`1,299`,
/// `1.299.000`, `1 000`); `15.12` (a date) does not.
fn well_grouped(int: &str) -> bool {
    let groups: Vec<&str> = int
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .collect();
    match groups.split_first() {
        None => false,
        Some((_, [])) => true,
        Some((first, rest)) => (1..=3).contains(&first.len()) && rest.iter().all(|g| g.len() == 3),
    }
}

/// Whether a word of the task text marks the number after it as an identifier.
fn identifier_word(word: Option<&&str>) -> bool {
    word.is_some_and(|w| {
        w.starts_with('#') || {
            let w = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            IDENTIFIER_WORDS.contains(&w.as_str())
        }
    })
}

/// An amount the task's request text names as money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskAmount {
    /// The amount in major units, canonical ([`canonical_decimal`]): `€1,299.00` → `1299`,
    /// `129900 cents` → `1299`.
    pub(crate) major: String,
    /// The ISO 4217 codes the text allows for it (`$` allows every dollar currency); empty
    /// when the text names no currency (`1,299.00`, `50 cents`).
    pub(crate) currencies: &'static [&'static str],
}

impl TaskAmount {
    /// Whether this named amount covers an argument amount (in major units) paid in
    /// `currencies` (the codes the call's currency fields give; empty when it gives none):
    /// the same number, and, when both sides name a currency, the same currency.
    pub(crate) fn covers(&self, major: &str, currencies: &[String]) -> bool {
        self.major == major
            && (self.currencies.is_empty()
                || currencies
                    .iter()
                    .all(|c| self.currencies.iter().any(|t| t.eq_ignore_ascii_case(c))))
    }
}

/// The amounts the task's request text names as money ([`TaskAmount`]): a number with a
/// currency symbol attached (`€1,299.00`, `$100`, `50¢`), a number next to a currency code
/// or word (`1299.00 EUR`, `EUR 50`, `50 dollars`, `129900 cents`), a code glued to a number
/// written with two decimals (`EUR50.00`), or a number written with two decimals and no
/// currency (`1,299.00`). Not an amount the user named (red-team R5, R5b): a bare number
/// (an invoice number, a year, `PO 998877`), a code glued to a number without decimals
/// (`ref EUR998877`), or a number after an identifier word (`order no. 998877 EUR`,
/// `ref EUR 998877`, [`IDENTIFIER_WORDS`]).
pub(crate) fn task_amounts(request: &str) -> Vec<TaskAmount> {
    let words: Vec<&str> = request
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| {
                matches!(
                    c,
                    '.' | ',' | ';' | ':' | '!' | '?' | '(' | ')' | '"' | '\''
                )
            })
        })
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if !w.contains(|c: char| c.is_ascii_digit()) || !money_like(w) {
            continue;
        }
        let before = i.checked_sub(1).and_then(|j| words.get(j));
        let body = strip_currency(w);
        let digits = body.trim_start_matches(['-', '+']);
        let decimal = digits
            .rfind(['.', ','])
            .is_some_and(|at| digits.len() - at == 3);
        // What marks the number as money, and the word before the whole amount.
        let symbol = w
            .chars()
            .next()
            .and_then(symbol_marker)
            .or_else(|| w.chars().last().and_then(symbol_marker));
        let glued_code = body.len() != w.trim().len() && symbol.is_none();
        // `lead_at`: the index of the word before the whole amount (currency word included).
        let (marker, lead_at) = if let Some(m) = symbol {
            (Some(m), i.checked_sub(1))
        } else if glued_code {
            // `EUR998877` reads as an identifier; `EUR50.00` as money.
            let code = w
                .get(..3)
                .filter(|c| c.chars().all(|ch| ch.is_ascii_alphabetic()));
            let code = code.or_else(|| w.get(w.len().saturating_sub(3)..));
            (
                code.and_then(word_marker).filter(|_| decimal),
                i.checked_sub(1),
            )
        } else if let Some(m) = before.and_then(|b| word_marker(b)) {
            (Some(m), i.checked_sub(2))
        } else if let Some(m) = words.get(i + 1).and_then(|a| word_marker(a)) {
            (Some(m), i.checked_sub(1))
        } else {
            (None, i.checked_sub(1))
        };
        let lead = lead_at.and_then(|j| words.get(j));
        let before_lead = lead_at
            .and_then(|j| j.checked_sub(1))
            .and_then(|j| words.get(j));
        if glued_code && marker.is_none() {
            continue;
        }
        // Without a currency, only a two-decimal number right after a payment word
        // (`amount 98.70`, `pay 98.70`) is money; `the 17.30 cut-off` is a time.
        if marker.is_none() && !(decimal && word_in(before, PAYMENT_WORDS)) {
            continue;
        }
        if identifier_word(lead) || identifier_word(before) {
            continue;
        }
        // A limit ("over EUR 5,000.00", "up to $50") is not the amount to pay.
        if word_in(lead, LIMIT_WORDS)
            || word_in(before, LIMIT_WORDS)
            || word_in(before_lead, LIMIT_WORDS)
            || (word_in(lead, &["to"]) && word_in(before_lead, &["up"]))
            || (word_in(lead, &["more", "less", "no"]) && word_in(before_lead, &["no", "not"]))
        {
            continue;
        }
        // The last `.` or `,` followed by two digits is the decimal point; every other
        // separator groups thousands.
        let (int, frac) = if decimal {
            let at = digits.rfind(['.', ',']).unwrap_or(digits.len());
            (
                digits.get(..at).unwrap_or_default(),
                digits.get(at + 1..).unwrap_or_default(),
            )
        } else {
            (digits, "")
        };
        if !well_grouped(int) {
            continue;
        }
        let int: String = int.chars().filter(char::is_ascii_digit).collect();
        let Some(a) = canonical_decimal(&format!("{int}.{frac}")) else {
            continue;
        };
        out.push(match marker {
            Some(Marker::Minor) => TaskAmount {
                major: minor_to_major(&a),
                currencies: &[],
            },
            Some(Marker::Currency(codes)) => TaskAmount {
                major: a,
                currencies: codes,
            },
            None => TaskAmount {
                major: a,
                currencies: &[],
            },
        });
    }
    out
}

/// The currencies a financial effect's arguments give: every three-letter string below a
/// field named like a currency ([`CURRENCY_FIELD_WORDS`]: `currency`, `ccy`, `unit`,
/// `asset`), upper-cased, any other string there as it is (a currency nobody can read), and
/// any whole string value elsewhere that is an upper-case ISO 4217 code of
/// [`CURRENCY_CODES`] or a crypto ticker of [`CRYPTO_CODES`].
pub(crate) fn argument_currencies(arguments: &Map<String, Value>) -> Vec<String> {
    fn walk(v: &Value, under: bool, out: &mut Vec<String>) {
        match v {
            Value::String(s) if under => {
                let t = s.trim();
                if t.len() == 3 && t.chars().all(|c| c.is_ascii_alphabetic()) {
                    out.push(t.to_ascii_uppercase());
                } else {
                    // A currency nobody can read: it matches no currency the task names.
                    out.push(t.to_owned());
                }
            }
            Value::String(s) => {
                let t = s.trim();
                if CURRENCY_CODES.contains(&t) || CRYPTO_CODES.contains(&t) {
                    out.push(t.to_owned());
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, under, out)),
            Value::Object(map) => {
                for (k, i) in map {
                    let currency = name_words(k)
                        .iter()
                        .any(|w| CURRENCY_FIELD_WORDS.contains(&w.as_str()));
                    walk(i, under || currency, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (k, v) in arguments {
        let currency = name_words(k)
            .iter()
            .any(|w| CURRENCY_FIELD_WORDS.contains(&w.as_str()));
        walk(v, currency, &mut out);
    }
    out
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
    /// Where a value sits: below an amount-like key, below a minor-unit key.
    #[derive(Clone, Copy)]
    struct Under {
        amount: bool,
        minor: bool,
    }
    fn plain(c: String, under: Under) -> Amount {
        if under.minor {
            Amount::Minor(c)
        } else {
            Amount::Plain(c)
        }
    }
    fn walk(v: &Value, under: Under, targets: &[String], out: &mut Vec<Amount>) {
        match v {
            Value::Number(n) => out.push(match number_amount(n) {
                Amount::Plain(c) => plain(c, under),
                other => other,
            }),
            Value::String(s) => {
                if let Some(c) = canonical_decimal(s) {
                    out.push(plain(c, under));
                } else if money_like(s) || (under.amount && !currency_only(s)) {
                    out.push(Amount::Unparsed);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, under, targets, out)),
            Value::Object(map) => object(map, under, targets, out),
            Value::Null | Value::Bool(_) => {}
        }
    }
    fn object(map: &Map<String, Value>, under: Under, targets: &[String], out: &mut Vec<Amount>) {
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
            let under = Under {
                amount: under.amount || is_financial_amount_field(k),
                minor: under.minor || is_minor_unit_field(k),
            };
            walk(v, under, targets, out);
        }
    }
    let mut out = Vec::new();
    let top = Under {
        amount: false,
        minor: false,
    };
    object(arguments, top, targets, &mut out);
    out
}

/// The plain amounts of a read's output that are the read object's own, canonical and in
/// major units (below a minor-unit key such as `amount_cents`, divided by 100): the amounts
/// below amount-like keys at the shallowest object level that has any (red-team H4: a line
/// item's amount nested in a bill is not the bill's amount). Each is recorded as a
/// [`read_amount_key`] with the currency the nearest enclosing object gives (a currency field
/// beside the amount), or `*` when none does, and again with `any` (for a call that names no
/// currency); each of those once more bound to every object the read named (`objects`: the
/// scalars of its arguments, [`object_binding`]), for a call that names the object it pays.
/// Looked up with [`amount_lookup_keys`].
pub(crate) fn read_amounts(v: &Value, objects: &[String], out: &mut Vec<String>) {
    /// (object level, major units, currency) of every amount.
    fn walk(
        v: &Value,
        level: usize,
        under_amount: bool,
        minor: bool,
        currency: &str,
        found: &mut Vec<(usize, String, String)>,
    ) {
        let unit = |c: String| if minor { minor_to_major(&c) } else { c };
        match v {
            Value::Number(n) if under_amount => {
                if let Amount::Plain(c) = number_amount(n) {
                    found.push((level, unit(c), currency.to_owned()));
                }
            }
            Value::String(s) if under_amount => {
                if let Some(c) = canonical_decimal(s) {
                    found.push((level, unit(c), currency.to_owned()));
                }
            }
            Value::Array(items) => items
                .iter()
                .for_each(|i| walk(i, level, under_amount, minor, currency, found)),
            Value::Object(map) => {
                let here = argument_currencies(map);
                let currency = match here.as_slice() {
                    [one] => one.as_str(),
                    [] => currency,
                    // Two currencies side by side: neither one vouches for the amounts.
                    _ => "?",
                };
                for (k, i) in map {
                    if name_words(k)
                        .iter()
                        .any(|w| CURRENCY_FIELD_WORDS.contains(&w.as_str()))
                    {
                        continue;
                    }
                    walk(
                        i,
                        level + 1,
                        under_amount || is_financial_amount_field(k),
                        minor || is_minor_unit_field(k),
                        currency,
                        found,
                    );
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(v, 0, false, false, "*", &mut found);
    let Some(top) = found.iter().map(|(level, _, _)| *level).min() else {
        return;
    };
    for (level, major, currency) in found {
        if level != top {
            continue;
        }
        for key in [
            read_amount_key(&major, &currency),
            read_amount_key(&major, "any"),
        ] {
            for object in objects {
                out.push(format!("{key} @{object}"));
            }
            out.push(key);
        }
    }
}

/// How an object identifier is compared between a read's arguments and a payment's object-id
/// fields: trimmed and lower-cased (`INV-42` is `inv-42`).
pub(crate) fn object_binding(value: &str) -> String {
    value.trim().to_lowercase()
}

/// The objects a read named: the scalars of its arguments, as [`object_binding`]s.
pub(crate) fn read_objects(arguments: &Map<String, Value>) -> Vec<String> {
    read_object_fields(arguments)
        .into_iter()
        .map(|(_, o)| o)
        .collect()
}

/// The scalars of a read's arguments with the name of the argument (the innermost key) they
/// stand under, as ([`field_binding`], [`object_binding`]) pairs.
pub(crate) fn read_object_fields(arguments: &Map<String, Value>) -> Vec<(String, String)> {
    fn scalars(field: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::String(s) => out.push((field_binding(field), object_binding(s))),
            Value::Number(n) => out.push((field_binding(field), n.to_string())),
            Value::Array(items) => items.iter().for_each(|i| scalars(field, i, out)),
            Value::Object(map) => map.iter().for_each(|(k, i)| scalars(k, i, out)),
            Value::Null | Value::Bool(_) => {}
        }
    }
    let mut out = Vec::new();
    arguments.iter().for_each(|(k, v)| scalars(k, v, &mut out));
    out.retain(|(_, o)| !o.is_empty());
    out
}

/// The objects a financial effect pays for with the id argument each stands under, as
/// ([`field_binding`], [`object_binding`]) pairs (see [`payment_objects`]).
pub(crate) fn payment_object_fields(arguments: &Map<String, Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = secureclaw_core::anchor::object_id_targets(arguments, &[])
        .into_iter()
        .map(|t| (field_binding(&t.field), object_binding(&t.value)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// How an argument name is compared between a read and a payment: lower-cased, without
/// `_`/`-` and a plural `s` (`invoice_ids`, `invoiceId` and `invoice-id` are one name).
pub(crate) fn field_binding(name: &str) -> String {
    let n: String = name
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    n.strip_suffix('s').map(str::to_owned).unwrap_or(n)
}

/// How a payee handle an anchored read showed is remembered with an object the read named
/// under argument `field` (`payee hdl_… @invoiceid:inv-42`).
pub(crate) fn payee_key(handle: &str, field: &str, object: &str) -> String {
    format!("payee {handle} @{field}:{object}")
}

/// How it is remembered that a read naming some object under argument `field` showed the
/// payee handle (`payee hdl_… @invoiceid:*`): a payment naming an object under that argument
/// then needs the [`payee_key`] of its own object.
pub(crate) fn payee_field_key(handle: &str, field: &str) -> String {
    format!("payee {handle} @{field}:*")
}

/// The handles a financial effect sends to in its target fields (a value that is exactly one
/// handle id), as [`object_binding`]s: the payees whose reads must vouch for the payment.
pub(crate) fn payee_handles(arguments: &Map<String, Value>, fields: &[String]) -> Vec<String> {
    let mut out: Vec<String> = secureclaw_core::anchor::extract_targets(arguments, fields)
        .into_iter()
        .filter_map(|t| {
            let trimmed = t.value.trim();
            match secureclaw_core::handle::find_handles(&Value::String(t.value.clone())).as_slice()
            {
                [(_, id)] if id.0 == trimmed => Some(object_binding(trimmed)),
                _ => None,
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The objects a financial effect pays for: every string or number below an object-id
/// argument at any depth (`invoice_id`, `{"payment": {"invoice_id": …}}`,
/// `"invoice_ids": ["INV-42", …]`; [`secureclaw_core::anchor::object_id_targets`]), as
/// [`object_binding`]s, deduplicated (red-team H2 of 2026-12-03: ids nested or in an array
/// were not seen, so a granted payment of INV-42 ran twice and INV-43 was paid INV-42's
/// amount).
pub(crate) fn payment_objects(arguments: &Map<String, Value>) -> Vec<String> {
    let mut objects: Vec<String> = secureclaw_core::anchor::object_id_targets(arguments, &[])
        .into_iter()
        .map(|t| object_binding(&t.value))
        .filter(|o| !o.is_empty())
        .collect();
    objects.sort();
    objects.dedup();
    objects
}

/// How a read amount is remembered: its major units and its currency (`1299 EUR`), `*` for a
/// read that names no currency (`1299 *`), or `any` (`1299 any`, whatever the read named).
pub(crate) fn read_amount_key(major: &str, currency: &str) -> String {
    format!("{major} {currency}")
}

/// The [`read_amount_key`]s that vouch for a call's amount (`major`, in major units) paid in
/// `currencies` (the call's own currency fields, [`argument_currencies`]) for `objects` (its
/// object-id arguments, [`payment_objects`]): a call that names no currency is vouched for by
/// any read of that amount (the tool pays in the currency it knows); a call in currency `C` by
/// a read in `C` or one that named no currency, never by a read in another currency (red-team
/// R5c); a call in two currencies only by a read that named none. A call that names objects is
/// vouched for only by a read of one of them (red-team H4: INV-42's amount does not pay
/// INV-43).
pub(crate) fn amount_lookup_keys(
    major: &str,
    currencies: &[String],
    objects: &[String],
) -> Vec<String> {
    let keys = match currencies {
        [] => vec![read_amount_key(major, "any")],
        [first, rest @ ..] if rest.iter().all(|c| c == first) => {
            vec![read_amount_key(major, "*"), read_amount_key(major, first)]
        }
        _ => vec![read_amount_key(major, "*")],
    };
    if objects.is_empty() {
        return keys;
    }
    keys.iter()
        .flat_map(|k| objects.iter().map(move |o| format!("{k} @{o}")))
        .collect()
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

    /// The task's amounts as (major units, first allowed currency or "").
    fn named(t: &str) -> Vec<(String, &'static str)> {
        task_amounts(t)
            .into_iter()
            .map(|a| (a.major, a.currencies.first().copied().unwrap_or("")))
            .collect()
    }

    fn one(major: &str, currency: &'static str) -> Vec<(String, &'static str)> {
        vec![(major.to_owned(), currency)]
    }

    /// Red-team R5: only money written as money in the task is an amount the user named.
    #[test]
    fn task_amounts_are_money_only() {
        assert!(named("Pay invoice INV-42 from ACME (our PO 998877)").is_empty());
        assert!(named("Pay the 2026 invoice 42 today").is_empty());
        assert_eq!(named("Pay €1,299.00 to ACME."), one("1299", "EUR"));
        assert_eq!(named("Pay EUR 1,299.00 to ACME"), one("1299", "EUR"));
        assert_eq!(named("send 50 dollars to Bob"), one("50", "USD"));
        assert_eq!(named("transfer 1.299,50 EUR"), one("1299.5", "EUR"));
        assert_eq!(named("amount 98.70 for the bill"), one("98.7", ""));
        assert_eq!(named("wire $100"), one("100", "USD"));
        assert_eq!(named("pay 50 eur"), one("50", "EUR"));
        assert_eq!(named("pay EUR50.00 now"), one("50", "EUR"));
        assert_eq!(named("pay 1299.00EUR"), one("1299", "EUR"));
        assert_eq!(named("invoice 998877 EUR 50"), one("50", "EUR"));
        assert!(named("try 3 times").is_empty());
    }

    /// Red-team R5b: an identifier glued to or next to a currency code is not an amount.
    #[test]
    fn identifiers_beside_currency_codes_are_not_amounts() {
        for t in [
            "Pay invoice INV-42 (ref EUR998877)",
            "Pay order no. 998877 EUR today",
            "Pay the invoice, ref EUR 998877",
            "Pay invoice #998877 EUR",
            "Pay order # 998877 EUR",
            "Pay USD998877 for the EUR invoice",
            "Pay 998877EUR",
            "account 12.34 EUR",
        ] {
            assert!(named(t).is_empty(), "{t}: {:?}", named(t));
        }
    }

    /// Red-team H3 and M1: a limit is not the amount to pay, and a time or a date is not money.
    #[test]
    fn limits_times_and_dates_are_not_amounts() {
        for t in [
            "Pay invoice INV-42 from ACME unless it is over EUR 5,000.00",
            "Pay INV-42 if it is not above $500.00",
            "Pay INV-42 up to EUR 500",
            "Pay INV-42, no more than 500 dollars",
            "Pay INV-42 if it costs less than EUR 500.00",
            "Pay INV-42 within a budget of EUR 500.00",
            "Pay invoice INV-42 from ACME before the 17.30 cut-off",
            "Pay invoice INV-42 by 15.12.26",
            "Pay invoice INV-42 on 15.12.2026",
            "Pay invoice INV-42 at 09.45",
        ] {
            assert!(named(t).is_empty(), "{t}: {:?}", named(t));
        }
        // Positive controls: the amount itself, written as money.
        assert_eq!(named("Pay EUR 5,000.00 for INV-42"), one("5000", "EUR"));
        assert_eq!(named("pay 98.70 to ACME"), one("98.7", ""));
        assert_eq!(
            named("a payment of 1.299.000,00 EUR"),
            one("1299000", "EUR")
        );
    }

    /// Red-team R5c: amounts are compared in major units and in the call's currency.
    #[test]
    fn units_and_currencies_are_compared() {
        // Minor units in the task text and in argument names.
        assert_eq!(named("pay 129900 cents"), one("1299", ""));
        assert_eq!(named("pay 50¢"), one("0.5", ""));
        assert_eq!(minor_to_major("129900"), "1299");
        assert_eq!(minor_to_major("5"), "0.05");
        assert_eq!(minor_to_major("-250"), "-2.5");
        assert_eq!(minor_to_major("0"), "0");
        assert_eq!(minor_to_major("12.5"), "0.125");
        let args = json!({"amount_cents": 50, "amountInCents": "129900", "total": 7});
        let found = financial_amounts(args.as_object().unwrap(), &[]);
        let mut majors: Vec<String> = found.iter().filter_map(Amount::major).collect();
        majors.sort();
        assert_eq!(majors, vec!["0.5", "1299", "7"]);
        // "EUR 50" does not cover 50 cents; "EUR 0.50" does.
        let eur50 = &task_amounts("pay EUR 50")[0];
        assert!(!eur50.covers("0.5", &[]));
        assert!(eur50.covers("50", &[]));
        assert!(task_amounts("pay EUR 0.50")[0].covers("0.5", &[]));
        // The call's currency must be one the task allows.
        let eur = vec!["EUR".to_owned()];
        let usd = vec!["USD".to_owned()];
        assert!(eur50.covers("50", &eur));
        assert!(!eur50.covers("50", &usd));
        assert!(task_amounts("pay $50")[0].covers("50", &["CAD".to_owned()]));
        assert!(!task_amounts("pay $50")[0].covers("50", &eur));
        // A number without a currency in the task: any currency (the user named the number).
        assert!(task_amounts("pay 50.00")[0].covers("50", &eur));
        let mut given = argument_currencies(
            json!({"currency": "eur", "payment": {"amount_currency": "USD"}, "memo": "Gbp"})
                .as_object()
                .unwrap(),
        );
        given.sort();
        assert_eq!(given, vec!["EUR".to_owned(), "USD".to_owned()]);
        // Red-team finding: a currency in a field not named like one (`options.unit`, `asset`,
        // or a bare ticker anywhere) is still the call's currency.
        for args in [
            json!({"amount": 100, "options": {"unit": "btc"}}),
            json!({"amount": 100, "asset": "BTC"}),
            json!({"amount": 100, "settle": ["BTC"]}),
            json!({"amount": 100, "options": {"mode": "GBP"}}),
        ] {
            let given = argument_currencies(args.as_object().unwrap());
            assert!(!given.is_empty(), "{args}");
            assert!(
                !eur50.covers("100", &given)
                    && !task_amounts("pay EUR 100")[0].covers("100", &given),
                "{args}"
            );
        }
        // Positive control: ordinary words are no currency.
        assert!(
            argument_currencies(
                json!({"amount": 100, "memo": "rent", "note": "Eur"})
                    .as_object()
                    .unwrap()
            )
            .is_empty()
        );
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
        let read = |v: Value| {
            let mut out = Vec::new();
            read_amounts(&v, &[], &mut out);
            out.sort();
            out
        };
        assert_eq!(
            read(json!({"invoice": {"amount": "129.00", "value": 7.50, "memo": "12"}})),
            vec!["129 *", "129 any", "7.5 *", "7.5 any"]
        );
        assert_eq!(
            read(json!({"amount_cents": 129_900})),
            vec!["1299 *", "1299 any"],
            "minor units are read in major units"
        );
        // The currency beside an amount qualifies it (red-team R5c).
        assert_eq!(
            read(
                json!({"invoices": [{"amount_cents": 129_900, "currency": "EUR"},
                                     {"amount": 5, "ccy": "usd"}]})
            ),
            vec!["1299 EUR", "1299 any", "5 USD", "5 any"]
        );
        // Only the shallowest amounts are the object's own (red-team H4).
        assert_eq!(
            read(json!({"bill_id": "B-1", "amount_cents": 129_900,
                        "lines": [{"amount_cents": 9_999_900}]})),
            vec!["1299 *", "1299 any"]
        );
        // Bound to the objects the read named.
        let mut out = Vec::new();
        read_amounts(&json!({"amount": 5}), &["inv-42".to_owned()], &mut out);
        out.sort();
        assert_eq!(out, vec!["5 *", "5 * @inv-42", "5 any", "5 any @inv-42"]);
        assert_eq!(
            amount_lookup_keys("1299", &["EUR".to_owned()], &[]),
            vec!["1299 *", "1299 EUR"]
        );
        assert_eq!(amount_lookup_keys("1299", &[], &[]), vec!["1299 any"]);
        assert_eq!(
            amount_lookup_keys("1299", &["EUR".to_owned(), "USD".to_owned()], &[]),
            vec!["1299 *"]
        );
        assert_eq!(
            amount_lookup_keys("1299", &[], &["inv-43".to_owned()]),
            vec!["1299 any @inv-43"]
        );
        assert_eq!(
            payment_objects(
                json!({"invoice_id": " INV-42 ", "iban": "DE89", "amount_cents": 5})
                    .as_object()
                    .unwrap()
            ),
            vec!["inv-42"]
        );
        // Red-team H2 (2026-12-03): ids nested in objects or listed in arrays are objects too.
        for args in [
            json!({"invoice_ids": ["INV-42"], "iban": "DE89", "amount_cents": 5}),
            json!({"payment": {"invoice_id": "INV-42", "iban": "DE89", "amount_cents": 5}}),
            json!({"batch": [{"invoiceId": "inv-42 "}, {"invoiceId": "INV-42"}]}),
        ] {
            assert_eq!(
                payment_objects(args.as_object().unwrap()),
                vec!["inv-42"],
                "{args}"
            );
        }
        assert_eq!(
            payment_objects(
                json!({"invoice_ids": ["INV-43", "INV-42"]})
                    .as_object()
                    .unwrap()
            ),
            vec!["inv-42", "inv-43"]
        );
    }
}

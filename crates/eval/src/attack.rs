//! Tools for building attacks: artifact surgery, handle lookup in summaries, concurrent
//! attempts.

use crate::target::EvalError;
use secureclaw_core::encoding::{b64url, b64url_decode};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Split `sca1.<claims>.<mac>` into prefix, decoded claims and decoded MAC.
///
/// # Errors
/// [`EvalError::Setup`] if the token is not of that shape.
pub fn split(token: &str) -> Result<(String, Vec<u8>, Vec<u8>), EvalError> {
    let bad = || EvalError::Setup("artifact is not `prefix.claims.mac`".into());
    let mut parts = token.split('.');
    let (Some(prefix), Some(claims), Some(mac), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    Ok((
        prefix.to_owned(),
        b64url_decode(claims).ok_or_else(bad)?,
        b64url_decode(mac).ok_or_else(bad)?,
    ))
}

/// Reassemble a token from its parts.
#[must_use]
pub fn join(prefix: &str, claims: &[u8], mac: &[u8]) -> String {
    format!("{prefix}.{}.{}", b64url(claims), b64url(mac))
}

/// Which MAC byte to flip.
#[derive(Debug, Clone, Copy)]
pub enum Byte {
    /// The first byte (lowest bit).
    First,
    /// The last byte (highest bit).
    Last,
}

/// The token with one bit of its MAC flipped.
///
/// # Errors
/// As [`split`].
pub fn flip_mac(token: &str, byte: Byte) -> Result<String, EvalError> {
    let (prefix, claims, mut mac) = split(token)?;
    let (slot, bit) = match byte {
        Byte::First => (mac.first_mut(), 0x01),
        Byte::Last => (mac.last_mut(), 0x80),
    };
    *slot.ok_or_else(|| EvalError::Setup("empty MAC".into()))? ^= bit;
    Ok(join(&prefix, &claims, &mac))
}

/// The token with its claims edited by `edit` and the original MAC kept (not re-sealed:
/// the runtime has no artifact key).
///
/// # Errors
/// As [`split`]; claims that are not a JSON object.
pub fn edit_claims(token: &str, edit: impl FnOnce(&mut Value)) -> Result<String, EvalError> {
    let (prefix, claims, mac) = split(token)?;
    let mut v: Value = serde_json::from_slice(&claims)
        .map_err(|_| EvalError::Setup("artifact claims are not JSON".into()))?;
    edit(&mut v);
    let claims = serde_json::to_vec(&v).map_err(|e| EvalError::Setup(e.to_string()))?;
    Ok(join(&prefix, &claims, &mac))
}

/// A claim of the token as JSON.
///
/// # Errors
/// As [`split`].
pub fn claim(token: &str, pointer: &str) -> Result<Value, EvalError> {
    let (_, claims, _) = split(token)?;
    let v: Value = serde_json::from_slice(&claims)
        .map_err(|_| EvalError::Setup("artifact claims are not JSON".into()))?;
    v.pointer(pointer)
        .cloned()
        .ok_or_else(|| EvalError::Setup(format!("artifact has no claim `{pointer}`")))
}

/// The token with a different prefix.
///
/// # Errors
/// As [`split`].
pub fn with_prefix(token: &str, prefix: &str) -> Result<String, EvalError> {
    let (_, claims, mac) = split(token)?;
    Ok(join(prefix, &claims, &mac))
}

/// The token without its MAC part (`prefix.claims`).
///
/// # Errors
/// As [`split`].
pub fn without_mac(token: &str) -> Result<String, EvalError> {
    let (prefix, claims, _) = split(token)?;
    Ok(format!("{prefix}.{}", b64url(&claims)))
}

/// A string field of a summary that holds a handle (`hdl_…`).
///
/// # Errors
/// [`EvalError::Setup`] if the field is missing or not a handle.
pub fn handle_at(summary: &Value, field: &str) -> Result<String, EvalError> {
    summary
        .get(field)
        .and_then(Value::as_str)
        .filter(|h| h.starts_with("hdl_"))
        .map(str::to_owned)
        .ok_or_else(|| EvalError::Setup(format!("summary has no handle in `{field}`")))
}

/// The first `hdl_em_…` token inside a summary string field (an address detected in free
/// text, e.g. the injected instruction in INV-42's notes).
///
/// # Errors
/// [`EvalError::Setup`] if there is none.
pub fn email_token_in(summary: &Value, field: &str) -> Result<String, EvalError> {
    summary
        .get(field)
        .and_then(Value::as_str)
        .and_then(|text| {
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .find(|w| w.starts_with("hdl_em_"))
                .map(str::to_owned)
        })
        .ok_or_else(|| EvalError::Setup(format!("no address token in `{field}`")))
}

/// A well-formed handle id that was never issued: `real` with its last eight characters
/// replaced by other characters of the same alphabet.
#[must_use]
pub fn guessed_handle(real: &str) -> String {
    let keep = real.len().saturating_sub(8);
    let (head, tail) = real.split_at(real.char_indices().nth(keep).map_or(0, |(i, _)| i));
    let swapped: String = tail
        .chars()
        .map(|c| match c {
            'a' => 'b',
            'z' => 'y',
            '2' => '3',
            '7' => '6',
            c if c.is_ascii_lowercase() => 'a',
            c if c.is_ascii_uppercase() => 'A',
            _ => '2',
        })
        .collect();
    format!("{head}{swapped}")
}

/// Poll every future concurrently on the current task until all are done; outputs in input
/// order.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surgery() {
        let t = join("sca1", br#"{"version":1,"kid":"art-1"}"#, &[0, 0xff]);
        let (_, _, mac) = split(&flip_mac(&t, Byte::First).unwrap()).unwrap();
        assert_eq!(mac, vec![1, 0xff]);
        let (_, _, mac) = split(&flip_mac(&t, Byte::Last).unwrap()).unwrap();
        assert_eq!(mac, vec![0, 0x7f]);
        let e = edit_claims(&t, |v| v["kid"] = "art-9".into()).unwrap();
        assert_eq!(claim(&e, "/kid").unwrap(), "art-9");
        assert!(without_mac(&t).unwrap().matches('.').count() == 1);
        assert!(with_prefix(&t, "sca2").unwrap().starts_with("sca2."));
    }

    #[test]
    fn guessed_handles_differ_and_keep_shape() {
        let real = "hdl_fld_abcdefghijklmnopqrstuvwxyz234567";
        let g = guessed_handle(real);
        assert_ne!(g, real);
        assert_eq!(g.len(), real.len());
        assert!(g.starts_with("hdl_fld_abcdefghijklmnopqrstuvwx"));
    }
}

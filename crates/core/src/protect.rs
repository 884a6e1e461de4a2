//! Protected objects (issue 11 item 3, "write, edit, read back").
//!
//! A session's **protected objects** are the objects whose content it may see only as handles:
//! the objects a read named when its result withheld at least one protected value (minted or
//! reused a handle), and the objects a store effect named when a handle was resolved into its
//! content. An effect that names a protected object again — an edit, a dry-run edit, an
//! append, a move, an overwrite — could show the runtime what it was not allowed to see: a
//! diff of the changed lines, a match/no-match answer ("does `alice@` occur?"), or a value
//! mangled past the detectors (`@` → ` / `) in the diff and in every later read. The gateway
//! therefore gives such an effect an extra target that never anchors, so it needs a trusted
//! confirmation (reason `protected_object`), unless the operator opted the tool out.
//!
//! An object is named by the identifiers in the call's arguments: the strings in its target
//! fields (paths, URLs, …), references to stored objects (file and document ids) and numbers
//! in account-like fields ([`object_identifiers`]). Matching is done on **keys** derived from
//! each identifier after normalization, so that respelling the same object does not evade it:
//! Unicode normalization as the detectors use, case folding, `\` as `/`, a `file://` prefix
//! dropped, and the path resolved lexically (`.`, `..`, repeated and trailing `/`). A relative
//! path (whose base the gateway cannot know) matches every protected path it is a suffix of,
//! and the reverse; this errs towards asking. Symbolic and hard links, and a file reached
//! through another mount, are not seen.
//!
//! The keys are stored as keyed digests ([`protection_digests`]) under the handle key, never in
//! clear.
//!
//! ## Objects the session has not seen
//!
//! Protection covers what the session has read. An edit of an object it has **never read**
//! is not known to touch protected values, yet a tool that matches the call's text against the
//! object's existing content (the filesystem server's `edit_file` with its `oldText`, a dry
//! run) answers "found" / "not found" or shows a diff: a match oracle that recovers a secret
//! one guess at a time (a red-team run needed 1,104 calls for a 40-character key). The gateway
//! therefore also records the objects a session has **seen** — named by a read of the whole
//! object that withheld nothing — under a separate digest domain ([`seen_digests`]), and a
//! content-matching tool's effect on an object neither seen nor protected gets a target that
//! never anchors (reason `object_unread`): the runtime reads the object first, which withholds
//! its protected values and protects it, or a human confirms.
//!
//! A seen mark is a permission, so it is granted narrowly (red-team F1, F2, F9): only by a
//! read whose every argument names the object (a `head`, `tail`, `offset` or any other
//! argument that may select a part of it marks nothing), only under the exact spelling
//! ([`seen_key`]: byte for byte, per upstream; a spelling that Unicode normalization would
//! change marks nothing), only by a read of exactly one object whose tool name says it returns
//! content ([`content_read_name`]: not an `info`, `list` or `search` tool) and whose summary
//! cut nothing, and a store effect naming several objects (a move, a copy) protects all of
//! them, so content moved onto a seen name is never taken for what was seen. Protection is
//! matched leniently, seeing exactly.

use crate::anchor::{TargetOrigin, collect_targets, object_id_targets};
use crate::keys::{KeyError, KeyPurpose, KeyRing, hmac_parts};
use serde_json::{Map, Value};

/// Domain separation of the protected-object digests.
const DOMAIN: &[u8] = b"secureclaw.protected-object.v1";

/// Domain separation of the seen-object digests (a separate domain and prefix, so that a
/// seen object is never taken for a protected one, nor the reverse).
const SEEN_DOMAIN: &[u8] = b"secureclaw.seen-object.v1";

/// At most this many path segments take part in suffix keys (a longer path still gets its
/// exact key; deeper suffixes are not generated).
const MAX_SEGMENTS: usize = 64;

/// One object identifier found in a call's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIdentifier {
    /// The argument it came from.
    pub field: String,
    /// Its value as written (may be a handle id).
    pub value: String,
}

/// The identifiers naming objects in `arguments`: every string in a field `fields` names (the
/// tool's target fields, operator-declared or the default list), every value of an argument
/// that references stored objects (`file_id`, `attachments`, `document_id`, …, whatever the
/// tool's sink) and every number in an account-like field. Identifiers the detectors find in
/// free text (a query, a body) do not name the object the call acts on and are not included.
#[must_use]
pub fn object_identifiers(
    arguments: &Map<String, Value>,
    fields: &[String],
    with_ids: bool,
) -> Vec<ObjectIdentifier> {
    let mut out: Vec<ObjectIdentifier> = Vec::new();
    let found = collect_targets(arguments, fields, true)
        .into_iter()
        .filter(|t| {
            matches!(
                t.origin,
                TargetOrigin::NamedField | TargetOrigin::ObjectReference | TargetOrigin::Number
            )
        })
        // With `with_ids`, every id-named argument (`id`, `page_id`, `noteId`, …) names an
        // object too (red-team F10: a wiki page edited by `page_id` with find/replace). Reads
        // and content-matching effects pass it; other effects name objects by their target
        // and object-reference fields only, so a record read by its id and then updated
        // through an ordinary write (a customer's address) is not a protected object.
        .chain(if with_ids {
            object_id_targets(arguments, &[])
        } else {
            Vec::new()
        });
    for t in found {
        if !out.iter().any(|o| o.value == t.value) {
            out.push(ObjectIdentifier {
                field: t.field,
                value: t.value,
            });
        }
    }
    out
}

/// Whether a read with these `arguments` names its objects and nothing else: every argument
/// is one of the object identifiers' fields ([`object_identifiers`] with `fields`) or an
/// `encoding`. A read with any other argument (`head`, `tail`, `offset`, `lines`, a query)
/// may have returned only part of an object, so it must not mark the object seen (red-team
/// F1: `head: -1` returned nothing and made the whole file "seen").
#[must_use]
pub fn whole_object_read(arguments: &Map<String, Value>, fields: &[String]) -> bool {
    let named = object_identifiers(arguments, fields, true);
    !named.is_empty()
        && arguments
            .keys()
            .all(|k| k == "encoding" || named.iter().any(|o| &o.field == k))
}

/// `identifier` normalized for matching: Unicode-normalized (NFKC; zero-width, bidi and
/// control characters removed), trimmed, lower-cased, `\` read as `/`, a `file://` prefix
/// dropped, `.` and empty segments removed and `..` resolved lexically. Returns whether the
/// path is absolute and its segments.
fn segments(identifier: &str) -> (bool, Vec<String>) {
    segments_cased(identifier, true)
}

/// [`segments`], with or without case folding.
fn segments_cased(identifier: &str, fold_case: bool) -> (bool, Vec<String>) {
    let normalized = crate::normalize::normalize(identifier);
    let trimmed = normalized.trim();
    let mut text = if fold_case {
        trimmed.to_lowercase()
    } else {
        trimmed.to_owned()
    }
    .replace('\\', "/");
    if let Some(rest) = text.strip_prefix("file://") {
        text = rest.to_owned();
    }
    // `~` is some home directory: a path from it is relative (matched by suffix), however
    // many `/` follow it (red-team round 2: `~//notes/a/d` read as the absolute `/notes/a/d`
    // escaped the protection of `$HOME/notes/a/d`).
    let text = match text.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        _ => text.as_str(),
    };
    let absolute = text.starts_with('/');
    let mut parts: Vec<String> = Vec::new();
    for seg in text.split('/') {
        match seg {
            "" | "." => {}
            // Above the root stays at the root; a leading `..` of a relative path is dropped
            // (its base is unknown, and suffix matching covers it).
            ".." => {
                parts.pop();
            }
            s => parts.push(s.to_owned()),
        }
    }
    (absolute, parts)
}

/// The keys under which `identifier` is recorded as protected: an absolute path's exact key
/// and each of its suffixes (so that a relative spelling finds it), a relative identifier's
/// relative key.
#[must_use]
pub fn protect_keys(identifier: &str) -> Vec<String> {
    let (absolute, parts) = segments(identifier);
    if parts.is_empty() {
        return if absolute {
            vec!["abs:/".into()]
        } else {
            Vec::new()
        };
    }
    if absolute {
        let mut keys = vec![format!("abs:/{}", parts.join("/"))];
        let start = parts.len().saturating_sub(MAX_SEGMENTS);
        for i in start..parts.len() {
            keys.push(format!(
                "sfx:{}",
                parts.get(i..).unwrap_or_default().join("/")
            ));
        }
        keys
    } else {
        vec![format!("rel:{}", parts.join("/"))]
    }
}

/// The one key under which a session records, and looks up, that it has **seen**
/// `identifier` through upstream `upstream`: the identifier byte for byte, with the upstream
/// it was read through. A seen mark is a permission, so nothing is normalized (red-team R1: a
/// zero-width space, a full-width letter or a NUL made a look-alike name count for the real
/// one) and an object of one upstream is not seen through another (R1b). `None` — never
/// seen — for an empty identifier, one padded with white space, or one that Unicode
/// normalization would change ([`crate::normalize::normalize`]: invisible, control or
/// compatibility characters): such a spelling marks nothing and matches nothing.
#[must_use]
pub fn seen_key(upstream: &str, identifier: &str) -> Option<String> {
    if identifier.is_empty()
        || identifier.trim() != identifier
        || crate::normalize::normalize(identifier) != identifier
    {
        return None;
    }
    Some(format!("{upstream}\u{1f}{identifier}"))
}

/// Words of a read tool's name (case-insensitive) saying that it returns something other than
/// an object's whole content — metadata, a listing, a search, a part — so that it never marks
/// an object seen (red-team: `get_file_info` of a file counted as reading it).
const NOT_CONTENT_READ_WORDS: &[&str] = &[
    "info", "stat", "meta", "exist", "list", "tree", "search", "find", "size", "count", "head",
    "tail", "allowed", "dir", "grep", "glob", "query", "preview", "summary",
];

/// Whether a read tool named `tool` returns an object's whole content by its name (see
/// `NOT_CONTENT_READ_WORDS`).
#[must_use]
pub fn content_read_name(tool: &str) -> bool {
    let name = tool.to_ascii_lowercase();
    !NOT_CONTENT_READ_WORDS.iter().any(|w| name.contains(w))
}

/// The keys to look up for an effect naming `identifier`: an absolute path's exact key and
/// the relative keys of each of its suffixes (a protected relative spelling); a relative
/// identifier's relative key and its suffix key (a protected absolute path ending in it).
#[must_use]
pub fn match_keys(identifier: &str) -> Vec<String> {
    let (absolute, parts) = segments(identifier);
    if parts.is_empty() {
        return if absolute {
            vec!["abs:/".into()]
        } else {
            Vec::new()
        };
    }
    let joined = parts.join("/");
    if absolute {
        let mut keys = vec![format!("abs:/{joined}")];
        let start = parts.len().saturating_sub(MAX_SEGMENTS);
        for i in start..parts.len() {
            keys.push(format!(
                "rel:{}",
                parts.get(i..).unwrap_or_default().join("/")
            ));
        }
        keys
    } else {
        vec![format!("rel:{joined}"), format!("sfx:{joined}")]
    }
}

/// The keys under which a store effect that relocated content (a move, a copy, an extract:
/// an effect naming several objects) or resolved a handle into an object records
/// `identifier` as the root of a protected **subtree**: [`protect_keys`] under a `tree:`
/// prefix. Everything below the name is protected too (red-team H1 of 2026-12-03: a
/// directory holding a withheld file was moved onto the parent of a name the session had
/// seen, and a blind edit of that name showed the secret in its diff).
#[must_use]
pub fn subtree_protect_keys(identifier: &str) -> Vec<String> {
    protect_keys(identifier)
        .into_iter()
        .map(|k| format!("tree:{k}"))
        .collect()
}

/// The keys to look up for an effect naming `identifier` whose object may lie in a protected
/// subtree ([`subtree_protect_keys`]): [`match_keys`] of the identifier and of each of its
/// ancestors (not the root), under the `tree:` prefix. Quadratic in the path's depth, which
/// [`MAX_SEGMENTS`] bounds.
#[must_use]
pub fn subtree_match_keys(identifier: &str) -> Vec<String> {
    let (absolute, parts) = segments(identifier);
    let deepest = parts.len().min(MAX_SEGMENTS);
    let mut out = Vec::new();
    for n in 1..=deepest {
        let prefix = parts.get(..n).unwrap_or_default().join("/");
        let spelled = if absolute {
            format!("/{prefix}")
        } else {
            prefix
        };
        out.extend(
            match_keys(&spelled)
                .into_iter()
                .map(|k| format!("tree:{k}")),
        );
    }
    out
}

/// Keyed digests of `keys` for `session`, as stored: `pobj:<key id>:<hex HMAC>` under the
/// active handle key (`all_keys = false`, for recording) or under every non-retired handle key
/// (`all_keys = true`, for lookups, so that a rotation does not forget protections recorded
/// under the previous key; a retired key's protections are forgotten).
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn protection_digests(
    ring: &KeyRing,
    session: &str,
    keys: &[String],
    all_keys: bool,
) -> Result<Vec<String>, KeyError> {
    digests(ring, DOMAIN, "pobj", session, keys, all_keys)
}

/// Keyed digests of `keys` for `session` recording that the session has **seen** the objects
/// (see the module docs): `sobj:<key id>:<hex HMAC>`, in the same table as the protected
/// objects' digests but under their own domain. `all_keys` as for [`protection_digests`].
///
/// # Errors
/// [`KeyError::NoActiveKey`] if the ring has no handle key.
pub fn seen_digests(
    ring: &KeyRing,
    session: &str,
    keys: &[String],
    all_keys: bool,
) -> Result<Vec<String>, KeyError> {
    digests(ring, SEEN_DOMAIN, "sobj", session, keys, all_keys)
}

fn digests(
    ring: &KeyRing,
    domain: &[u8],
    prefix: &str,
    session: &str,
    keys: &[String],
    all_keys: bool,
) -> Result<Vec<String>, KeyError> {
    let active = ring.active(KeyPurpose::Handle)?;
    let mut entries = vec![active];
    if all_keys {
        for (id, purpose, retired) in ring.ids() {
            if purpose == KeyPurpose::Handle && !retired && id != &active.id {
                entries.push(ring.verifying(KeyPurpose::Handle, id)?);
            }
        }
    }
    let mut out = Vec::with_capacity(keys.len() * entries.len());
    for entry in entries {
        for key in keys {
            let mac = hmac_parts(entry, &[domain, session.as_bytes(), key.as_bytes()]);
            let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
            out.push(format!("{prefix}:{}:{hex}", entry.id));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// Red-team F9: seen keys keep case and are never suffix keys; protection keys fold case.
    #[test]
    fn seen_keys_are_exact() {
        let k = |v: &str| seen_key("fs", v);
        assert!(k("/srv/C10.TXT").is_some());
        assert_ne!(k("/srv/C10.TXT"), k("/srv/c10.txt"));
        assert_ne!(k("/srv/./a/../c10.txt"), k("/srv/c10.txt"));
        assert_ne!(k("c10.txt"), k("/srv/c10.txt"));
        assert_eq!(k("  "), None);
        // Red-team R1: look-alike spellings mark nothing; R1b: per upstream.
        for alias in [
            "/srv/secr\u{200b}et.txt",
            "/srv/\u{ff53}ecret.txt",
            "/srv/secret.txt\0",
            " /srv/secret.txt",
        ] {
            assert_eq!(k(alias), None, "{alias:?}");
        }
        assert_ne!(
            seen_key("docs", "/srv/secret.txt"),
            seen_key("notes", "/srv/secret.txt")
        );
        assert!(content_read_name("read_text_file") && content_read_name("get_note"));
        for name in [
            "get_file_info",
            "list_directory",
            "directory_tree",
            "search_files",
            "read_multiple_files_head",
        ] {
            assert!(!content_read_name(name), "{name}");
        }
        // Protection stays lenient (the control).
        assert!(protect_keys("/srv/C10.TXT").contains(&"abs:/srv/c10.txt".to_owned()));
    }

    /// Red-team F1 and F10: only a read naming whole objects is a whole-object read; id
    /// fields name objects.
    #[test]
    fn whole_object_reads_and_id_fields() {
        let fields: Vec<String> = crate::anchor::DEFAULT_TARGET_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let args = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        assert!(whole_object_read(
            &args(serde_json::json!({"path": "/a"})),
            &fields
        ));
        assert!(whole_object_read(
            &args(serde_json::json!({"paths": ["/a", "/b"], "encoding": "utf8"})),
            &fields
        ));
        for partial in [
            serde_json::json!({"path": "/a", "head": 1}),
            serde_json::json!({"path": "/a", "tail": -1}),
            serde_json::json!({"path": "/a", "offset": 10, "limit": 5}),
            serde_json::json!({"query": "x"}),
            serde_json::json!({}),
        ] {
            assert!(
                !whole_object_read(&args(partial.clone()), &fields),
                "{partial}"
            );
        }
        let ids = object_identifiers(
            &args(serde_json::json!({"page_id": "PG-7", "find": "@"})),
            &fields,
            true,
        );
        assert_eq!(ids.len(), 1);
        assert_eq!(ids.first().map(|o| o.value.as_str()), Some("PG-7"));
    }

    use super::*;
    use serde_json::json;

    fn protected(id: &str, candidate: &str) -> bool {
        let keys = protect_keys(id);
        match_keys(candidate).iter().any(|k| keys.contains(k))
    }

    /// Whether a subtree protected at `root` covers an effect naming `candidate`.
    fn below(root: &str, candidate: &str) -> bool {
        let stored = subtree_protect_keys(root);
        subtree_match_keys(candidate)
            .iter()
            .any(|k| stored.contains(k))
    }

    /// Red-team H1 (2026-12-03): a directory moved onto `/r/pub/d` protects every name below
    /// it, in any spelling; siblings and look-alike prefixes stay unprotected.
    #[test]
    fn a_relocated_subtree_protects_every_name_below_it() {
        for c in [
            "/r/pub/d/key.txt",
            "/r/pub/d",
            "/R/pub/./d/x/../key.txt",
            "/r/pub/d/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/key.txt",
            "pub/d/key.txt",
            "d/key.txt",
        ] {
            assert!(below("/r/pub/d", c), "{c}");
        }
        // A home-relative spelling, however many slashes follow `~`, is relative.
        assert!(below("~//pub/d", "/home/me/pub/d/key.txt"));
        assert!(below("/home/me/pub/d", "~//pub/d/key.txt"));
        for c in [
            "/r/pub/key.txt",
            "/r/pub/dd/key.txt",
            "/r/pub",
            "/r/other/d2/key.txt",
        ] {
            assert!(!below("/r/pub/d", c), "{c}");
        }
        // Subtree keys never match plain protection lookups, nor the reverse.
        assert!(
            !match_keys("/r/pub/d")
                .iter()
                .any(|k| subtree_protect_keys("/r/pub/d").contains(k))
        );
        assert!(
            !subtree_match_keys("/r/pub/d")
                .iter()
                .any(|k| protect_keys("/r/pub/d").contains(k))
        );
    }

    #[test]
    fn spellings_of_one_path_match() {
        let p = "/work/docs/notes.txt";
        for same in [
            "/work/docs/notes.txt",
            "/work/docs/./notes.txt",
            "/work/docs/x/../notes.txt",
            "/work//docs/notes.txt",
            "/work/docs/notes.txt/",
            "/WORK/Docs/NOTES.txt",
            "file:///work/docs/notes.txt",
            "\\work\\docs\\notes.txt",
            " /work/docs/notes.txt ",
            "/work/docs/note\u{200b}s.txt",
            "/../work/docs/notes.txt",
            // Relative spellings: the base is unknown, so any suffix matches.
            "notes.txt",
            "docs/notes.txt",
            "./docs/notes.txt",
            "../docs/notes.txt",
            "~/docs/notes.txt",
        ] {
            assert!(protected(p, same), "{same}");
        }
        for other in [
            "/work/docs/notes.txt.bak",
            "/work/docs/other.txt",
            "/work/notes",
            "/elsewhere/docs/notes.txt",
            "otes.txt",
        ] {
            assert!(!protected(p, other), "{other}");
        }
    }

    #[test]
    fn a_relative_protected_name_matches_absolute_paths_ending_in_it() {
        assert!(protected("notes.txt", "/work/docs/notes.txt"));
        assert!(protected("./docs/notes.txt", "/work/docs/notes.txt"));
        assert!(protected("notes.txt", "notes.txt"));
        assert!(!protected("notes.txt", "/work/docs/other.txt"));
        assert!(!protected("docs/notes.txt", "/work/notes.txt"));
    }

    #[test]
    fn identifiers_that_are_not_paths_match_exactly_up_to_case() {
        assert!(protected("DOC-42", "doc-42"));
        assert!(!protected("DOC-42", "DOC-43"));
        assert!(protected(
            "https://intranet.example/wiki/Page",
            "https://intranet.example/wiki/page"
        ));
        assert!(protect_keys("   ").is_empty());
        assert!(match_keys("").is_empty());
    }

    #[test]
    fn object_identifiers_are_target_fields_and_object_references_only() {
        let args = json!({
            "path": "/work/docs/notes.txt",
            "old": "alice@corp.example",
            "new": " / ",
            "file_id": "17",
            "account": 12345,
            "query": "mail bob@corp.example"
        });
        let fields: Vec<String> = crate::anchor::DEFAULT_TARGET_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let ids: Vec<String> = object_identifiers(args.as_object().unwrap(), &fields, false)
            .into_iter()
            .map(|o| o.value)
            .collect();
        assert!(ids.contains(&"/work/docs/notes.txt".to_owned()), "{ids:?}");
        assert!(ids.contains(&"17".to_owned()), "{ids:?}");
        assert!(ids.contains(&"12345".to_owned()), "{ids:?}");
        // Addresses in free text (the edit's old text, a query) name no object.
        assert!(!ids.iter().any(|i| i.contains('@')), "{ids:?}");
    }

    #[test]
    fn digests_are_keyed_per_session_and_survive_rotation() {
        let mut n = 0u8;
        let mut fill = |b: &mut [u8]| {
            for x in b.iter_mut() {
                n = n.wrapping_add(1);
                *x = n;
            }
        };
        let mut ring = KeyRing::generate(&mut fill);
        let keys = protect_keys("/a/b.txt");
        let recorded = protection_digests(&ring, "ses_1", &keys, false).unwrap();
        let other = protection_digests(&ring, "ses_2", &keys, false).unwrap();
        assert!(recorded.iter().all(|d| !other.contains(d)));
        assert!(recorded.iter().all(|d| !d.contains("b.txt")));
        ring.add_generated(KeyPurpose::Handle, &mut fill);
        let lookup = protection_digests(&ring, "ses_1", &match_keys("/a/b.txt"), true).unwrap();
        assert!(recorded.iter().any(|d| lookup.contains(d)));
    }

    #[test]
    fn seen_digests_never_match_protection_digests() {
        let mut n = 0u8;
        let mut fill = |b: &mut [u8]| {
            for x in b.iter_mut() {
                n = n.wrapping_add(7);
                *x = n;
            }
        };
        let ring = KeyRing::generate(&mut fill);
        let keys = protect_keys("/a/b.txt");
        let seen = seen_digests(&ring, "ses_1", &keys, false).unwrap();
        let protected = protection_digests(&ring, "ses_1", &keys, false).unwrap();
        assert!(seen.iter().all(|d| d.starts_with("sobj:")));
        assert!(seen.iter().all(|d| !protected.contains(d)));
        // Seen under one spelling, looked up under another.
        let lookup = seen_digests(&ring, "ses_1", &match_keys("b.txt"), true).unwrap();
        assert!(seen.iter().any(|d| lookup.contains(d)));
        let elsewhere = seen_digests(&ring, "ses_1", &match_keys("/a/c.txt"), true).unwrap();
        assert!(seen.iter().all(|d| !elsewhere.contains(d)));
    }
}

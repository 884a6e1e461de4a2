//! The shipped catalog of known servers: which of their tools are reads, and which of their
//! effects are only additive (not destructive).
//!
//! Upstream annotations are hints from a party the gateway does not trust (DESIGN.md §3,
//! "annotations from upstreams only ever tighten"; the MCP specification says clients must
//! consider annotations untrusted unless they come from trusted servers). A tool that declares
//! `readOnlyHint: true` is therefore still an effect — previewed, decided by policy, bound and
//! executed at most once — unless either
//!
//! - an operator rule (`[[gateway.tools]]` with `effect = "read"`) says it is a read, or
//! - this catalog lists it, by exact tool name, as a read of the server it runs on, **and** the
//!   server itself declares `readOnlyHint: true` for it (both must agree: a server that stops
//!   calling a tool read-only gets no benefit of the doubt from us).
//!
//! A server is recognised by the `serverInfo.name` it reports at `initialize`. That name is
//! chosen by the server, so the catalog rests on **operator-chosen trust**: the operator picks
//! which program (or endpoint) runs behind each upstream id, and an upstream that impersonates
//! a known server's name gains only what the real server's read tools would have had — and
//! only for tools it also declares read-only. An operator who does not want this for an
//! upstream overrides the tools with `[[gateway.tools]]` rules (`effect = "effect"`), which
//! always win.
//!
//! The same holds for `destructiveHint: false`: an effect is destructive unless an operator
//! rule (`destructive = false`) says otherwise, or this catalog lists it as **additive** for the
//! server it runs on *and* the server itself declares `destructiveHint: false` for it. An
//! upstream's own `destructiveHint: false` alone lowers nothing.
//!
//! Entries are exact names; no patterns. Add a server only after reading its source: every
//! listed tool must neither change state nor send data anywhere except back to the caller.

/// One known server and the tools it serves that only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownServer {
    /// `serverInfo.name` reported at `initialize`.
    pub server: &'static str,
    /// Exact names of the tools that are reads.
    pub read_tools: &'static [&'static str],
    /// Exact names of the effect tools that only add state (send, create) and never
    /// overwrite, delete or move anything: not destructive.
    pub additive_tools: &'static [&'static str],
    /// Exact names of the effect tools whose result depends on matching the call's text
    /// against the object's existing content (see [`crate::config::ToolRule::matches_content`]).
    pub content_matching_tools: &'static [&'static str],
    /// Exact names of the read tools that take `head` / `tail` (a number of lines) and
    /// otherwise return the whole object: the gateway reads the whole object and applies the
    /// range itself to the scrubbed text ([`crate::catalog::ToolEntry::line_range_read`]).
    pub line_range_reads: &'static [&'static str],
}

/// The shipped catalog.
pub const KNOWN_SERVERS: &[KnownServer] = &[
    // The official MCP filesystem server (`@modelcontextprotocol/server-filesystem`,
    // `src/filesystem/index.ts`): these tools read files, directories and metadata only.
    // `write_file`, `edit_file`, `create_directory` and `move_file` are effects; of them only
    // `create_directory` (a recursive mkdir that succeeds silently on an existing directory)
    // destroys nothing. `write_file` overwrites, `edit_file` rewrites, `move_file` removes
    // the source path.
    KnownServer {
        server: "secure-filesystem-server",
        read_tools: &[
            "read_file",
            "read_text_file",
            "read_media_file",
            "read_multiple_files",
            "list_directory",
            "list_directory_with_sizes",
            "directory_tree",
            "search_files",
            "get_file_info",
            "list_allowed_directories",
        ],
        additive_tools: &["create_directory"],
        // `edit_file` applies `edits: [{oldText, newText}]` only where `oldText` matches and
        // answers with a diff (also with `dryRun`): a match oracle on an unread file.
        content_matching_tools: &["edit_file"],
        // `read_text_file` (and its deprecated alias `read_file`) take `head` or `tail`.
        line_range_reads: &["read_text_file", "read_file"],
    },
    // Our demo office (`crates/demo-tools/src/tools.rs`).
    KnownServer {
        server: "secureclaw-demo-tools",
        read_tools: &["read_invoice", "list_invoices", "search_mail", "noop"],
        // Both append a message to the office's outbox or drafts; `pay_invoice` is an effect
        // the operator declares financial.
        additive_tools: &["send_email", "save_draft"],
        content_matching_tools: &[],
        line_range_reads: &[],
    },
    // Our speculative demo's research providers (`crates/demo-tools/src/research.rs`).
    KnownServer {
        server: "secureclaw-research-tools",
        read_tools: &[
            "web_search",
            "doc_retrieval",
            "calendar_lookup",
            "crm_lookup",
            "email_search",
            "rates_lookup",
        ],
        additive_tools: &[],
        content_matching_tools: &[],
        line_range_reads: &[],
    },
];

/// Whether the shipped catalog lists `tool` as a read of the server named `server`
/// (`serverInfo.name`; `None` when the upstream reported none). Exact, case-sensitive match of
/// both names. The caller must also require the upstream's own `readOnlyHint: true`.
#[must_use]
pub fn is_known_read(server: Option<&str>, tool: &str) -> bool {
    let Some(server) = server else {
        return false;
    };
    KNOWN_SERVERS
        .iter()
        .any(|k| k.server == server && k.read_tools.contains(&tool))
}

/// Whether the shipped catalog lists `tool` as an additive (not destructive) effect of the
/// server named `server` (`serverInfo.name`; `None` when the upstream reported none). Exact,
/// case-sensitive match of both names. The caller must also require the upstream's own
/// `destructiveHint: false`.
#[must_use]
pub fn is_known_additive(server: Option<&str>, tool: &str) -> bool {
    let Some(server) = server else {
        return false;
    };
    KNOWN_SERVERS
        .iter()
        .any(|k| k.server == server && k.additive_tools.contains(&tool))
}

/// Whether the shipped catalog lists `tool` as content matching for the server named `server`
/// (exact names). This only tightens, so no hint from the server has to agree.
#[must_use]
pub fn is_known_content_matching(server: Option<&str>, tool: &str) -> bool {
    let Some(server) = server else {
        return false;
    };
    KNOWN_SERVERS
        .iter()
        .any(|k| k.server == server && k.content_matching_tools.contains(&tool))
}

/// Whether the shipped catalog lists `tool` as a line-range read of the server named `server`
/// ([`KnownServer::line_range_reads`]). Exact, case-sensitive match of both names.
#[must_use]
pub fn is_known_line_range_read(server: Option<&str>, tool: &str) -> bool {
    let Some(server) = server else {
        return false;
    };
    KNOWN_SERVERS
        .iter()
        .any(|k| k.server == server && k.line_range_reads.contains(&tool))
}

/// Parameter names (lower case, `_` and `-` removed) that select part of an object: a read
/// with one of them shows only that part.
const PARTIAL_READ_PARAMETERS: &[&str] = &[
    "head",
    "tail",
    "offset",
    "limit",
    "start",
    "end",
    "length",
    "line",
    "lines",
    "startline",
    "endline",
    "range",
    "bytes",
    "page",
    "pagesize",
    "cursor",
    "maxlines",
    "maxbytes",
    "maxchars",
    "skip",
    "take",
    "first",
    "last",
    // The official fetch server's names, and other spellings of a character or byte window.
    "startindex",
    "endindex",
    "maxlength",
    "charoffset",
    "byteoffset",
    "startbyte",
    "endbyte",
    "startchar",
    "endchar",
    "position",
    "positions",
    "window",
    "slice",
    "chunk",
    "chunksize",
    "pos",
    "len",
    "begin",
    "count",
    "size",
    "numchars",
    "numbytes",
    "numlines",
];

/// Whether a read's arguments select part of the object (`head`, `tail`, `offset`, `limit`,
/// `range`, …; [`PARTIAL_READ_PARAMETERS`]). Such a read never counts as the
/// session having seen the object: its content beyond the part shown may hold what a whole
/// read would have withheld (red-team round 3: `head` and `tail` reads each showed half of
/// an address that a whole read withheld).
///
/// Keys are looked for at any depth (a range nested as `{"opts": {"offset": 3}}` counts), up
/// to [`PARTIAL_READ_DEPTH`] levels of objects and arrays.
#[must_use]
pub fn selects_part(arguments: &serde_json::Map<String, serde_json::Value>) -> bool {
    any_parameter(arguments, &|key| {
        // Any `…offset` (`start_offset`, `charOffset`) names a position in the object.
        PARTIAL_READ_PARAMETERS.contains(&key) || key.ends_with("offset")
    })
}

/// Range parameters that page through a list of whole items rather than cut inside one.
const PAGING_PARAMETERS: &[&str] = &[
    "limit", "page", "pagesize", "cursor", "skip", "take", "first", "last", "count", "size",
];

/// Whether a read's arguments select a window inside an object — a range parameter that does
/// not only page through whole items ([`PAGING_PARAMETERS`]): `offset`, `length`, `start`,
/// `start_index`, `max_length`, a line or byte range. Such a read can cut a value inside any
/// string of its result, so every string of its structured content is checked at its edges
/// (red-team: the halves came back under a structured key named `raw`).
#[must_use]
pub fn selects_window(arguments: &serde_json::Map<String, serde_json::Value>) -> bool {
    any_parameter(arguments, &|key| {
        (PARTIAL_READ_PARAMETERS.contains(&key) && !PAGING_PARAMETERS.contains(&key))
            || key.ends_with("offset")
    })
}

/// Whether a key of `arguments`, at any depth up to [`PARTIAL_READ_DEPTH`], lower-cased and
/// without `_` and `-`, satisfies `matches`.
fn any_parameter(
    arguments: &serde_json::Map<String, serde_json::Value>,
    matches: &dyn Fn(&str) -> bool,
) -> bool {
    let mut stack: Vec<(&serde_json::Map<String, serde_json::Value>, usize)> = vec![(arguments, 0)];
    while let Some((map, depth)) = stack.pop() {
        for (k, v) in map {
            if matches(&parameter_key(k)) {
                return true;
            }
            if depth < PARTIAL_READ_DEPTH {
                let mut values = vec![v];
                while let Some(v) = values.pop() {
                    match v {
                        serde_json::Value::Object(inner) => stack.push((inner, depth + 1)),
                        serde_json::Value::Array(items) => values.extend(items),
                        _ => {}
                    }
                }
            }
        }
    }
    false
}

/// How deep [`selects_part`] looks for a range parameter.
pub const PARTIAL_READ_DEPTH: usize = 8;

/// Parameter names (lower case, without `_` and `-`) that make an effect tool content
/// matching: text the call expects to find in the object, or a dry run whose answer is a
/// diff of the object's content.
const MATCH_PARAMETERS: &[&str] = &[
    "old",
    "oldtext",
    "oldstr",
    "oldstring",
    "oldvalue",
    "oldcontent",
    "search",
    "searchtext",
    "find",
    "findtext",
    "pattern",
    "match",
    "expected",
    "expectedcontent",
    "ifmatch",
    "dryrun",
];

/// Whether an input schema declares a match-text or dry-run parameter at any depth (at most
/// 32 levels; deeper parts are not looked at). Upstream schemas are untrusted, but a match
/// here only tightens (the effect then needs its object read first).
#[must_use]
pub fn schema_matches_content(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    fn walk(v: &serde_json::Value, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(props)) = map.get("properties")
                    && props.keys().any(|k| {
                        let k: String = k
                            .chars()
                            .filter(|c| *c != '_' && *c != '-')
                            .flat_map(char::to_lowercase)
                            .collect();
                        MATCH_PARAMETERS.contains(&k.as_str())
                    })
                {
                    return true;
                }
                map.values().any(|v| walk(v, depth + 1))
            }
            serde_json::Value::Array(items) => items.iter().any(|v| walk(v, depth + 1)),
            _ => false,
        }
    }
    walk(&serde_json::Value::Object(schema.clone()), 0)
}

/// Words (lower case, `_` and `-` removed) whose presence in a parameter name makes a read
/// tool a search: its result depends on matching the call's text against content the session
/// may never have been shown, so "found" / "not found" answers questions about withheld values
/// (red-team F2/F3; `excludePatterns` of a directory tree, red-team R11). Matched as
/// substrings (`searchQuery`, `filters`, `excludePatterns`), plus the exact name `q`.
const SEARCH_PARAMETER_WORDS: &[&str] = &[
    "search", "find", "pattern", "match", "query", "glob", "regex", "grep", "filter", "keyword",
    "term", "contains", "needle", "exclude", "include", "like", "where",
];

fn parameter_key(k: &str) -> String {
    k.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn is_search_parameter(name: &str) -> bool {
    let k = parameter_key(name);
    k == "q" || SEARCH_PARAMETER_WORDS.iter().any(|w| k.contains(w))
}

/// Parameter names (lower case, `_` and `-` removed) that name the object searched or shape
/// the answer rather than match content: a search call's texts leave them out
/// ([`search_texts`]). Ids (`id`, `*_id`, `*Id`) are left out too.
const NON_SEARCH_PARAMETERS: &[&str] = &[
    "path",
    "paths",
    "file",
    "files",
    "filename",
    "dir",
    "directory",
    "folder",
    "root",
    "uri",
    "url",
    "limit",
    "offset",
    "page",
    "pagesize",
    "perpage",
    "cursor",
    "sort",
    "sortby",
    "order",
    "orderby",
    "max",
    "maxresults",
    "count",
    "depth",
    "encoding",
    "format",
];

/// Whether a read tool's input schema declares a search parameter (a name holding one of
/// `SEARCH_PARAMETER_WORDS`: `query`, `pattern`, `search`, `filter`, `excludePatterns`, …)
/// at any depth up to 32. Untrusted, but a match only tightens: the tool's unanchored
/// searches then count against `max_unanchored_match_reads`.
#[must_use]
pub fn schema_searches(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    fn walk(v: &serde_json::Value, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(props)) = map.get("properties")
                    && props.keys().any(|k| is_search_parameter(k))
                {
                    return true;
                }
                map.values().any(|v| walk(v, depth + 1))
            }
            serde_json::Value::Array(items) => items.iter().any(|v| walk(v, depth + 1)),
            _ => false,
        }
    }
    walk(&serde_json::Value::Object(schema.clone()), 0)
}

/// The texts a search call may match with: every string or number in its arguments, at any
/// depth up to 32 (arrays and objects included), except below names that identify the object
/// searched or shape the answer (`NON_SEARCH_PARAMETERS`, ids). A search parameter the
/// gateway cannot name (`needle`, a filter in an array of objects; red-team R3) is counted
/// all the same. Empty when the call passes no such text.
#[must_use]
pub fn search_texts(arguments: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    fn walk(v: &serde_json::Value, depth: usize, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Number(n) => out.push(n.to_string()),
            serde_json::Value::Array(items) if depth < 32 => {
                items.iter().for_each(|i| walk(i, depth + 1, out));
            }
            serde_json::Value::Object(map) if depth < 32 => {
                for (k, v) in map {
                    let key = parameter_key(k);
                    let shapes = NON_SEARCH_PARAMETERS.contains(&key.as_str())
                        || secureclaw_core::anchor::is_object_id_field(k);
                    if !shapes || is_search_parameter(k) {
                        walk(v, depth + 1, out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&serde_json::Value::Object(arguments.clone()), 0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Range parameters are found under their common names, at any depth (red-team: the
    /// fetch server's `start_index`/`max_length`, a range nested under `opts`, `pos`/`len`,
    /// `start_offset`); a read naming only its object is whole.
    #[test]
    fn partial_reads_are_found_by_parameter_name_at_any_depth() {
        let args = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        for partial in [
            serde_json::json!({"url": "u", "start_index": 10, "max_length": 5}),
            serde_json::json!({"path": "p", "opts": {"offset": 3, "length": 4}}),
            serde_json::json!({"path": "p", "pos": 1, "len": 1}),
            serde_json::json!({"path": "p", "start_offset": 2, "size": 2}),
            serde_json::json!({"path": "p", "ranges": [{"charOffset": 1}]}),
        ] {
            assert!(selects_part(&args(partial.clone())), "{partial}");
        }
        // Paging through whole items is partial but no window inside one.
        assert!(selects_part(&args(
            serde_json::json!({"q": "x", "limit": 10, "page": 2})
        )));
        assert!(!selects_window(&args(
            serde_json::json!({"q": "x", "limit": 10, "page": 2})
        )));
        assert!(selects_window(&args(
            serde_json::json!({"path": "p", "offset": 3, "limit": 4})
        )));
        for whole in [
            serde_json::json!({"path": "p"}),
            serde_json::json!({"path": "p", "encoding": "utf-8", "opts": {"follow": true}}),
        ] {
            assert!(!selects_part(&args(whole.clone())), "{whole}");
        }
    }

    #[test]
    fn searches_are_found_by_parameter_name() {
        let schema = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        for name in [
            "query",
            "pattern",
            "searchQuery",
            "search_term",
            "regex",
            "q",
        ] {
            assert!(
                schema_searches(&schema(serde_json::json!({
                    "type": "object", "properties": {name: {"type": "string"}}
                }))),
                "{name}"
            );
        }
        for name in ["path", "id", "limit", "file_id"] {
            assert!(
                !schema_searches(&schema(serde_json::json!({
                    "type": "object", "properties": {name: {"type": "string"}}
                }))),
                "{name}"
            );
        }
        let args = schema(serde_json::json!({
            "path": "/srv", "pattern": "*DE89*", "opts": {"excludePatterns": ["x"], "query": 7}
        }));
        let mut texts = search_texts(&args);
        texts.sort();
        assert_eq!(
            texts,
            vec!["*DE89*".to_owned(), "7".to_owned(), "x".to_owned()]
        );
        // Red-team R3/R11: a filter inside an array of objects, a search parameter no list
        // names, and a directory tree's exclude patterns are search texts; the path, ids and
        // paging are not.
        let args = schema(serde_json::json!({
            "filters": [{"contains": "DE893"}], "needle": "sk_live_4", "note_id": "n9",
            "limit": 10, "excludePatterns": ["dana*"], "path": "/srv"
        }));
        let mut texts = search_texts(&args);
        texts.sort();
        assert_eq!(texts, vec!["DE893", "dana*", "sk_live_4"]);
        for name in ["excludePatterns", "filters", "needle", "includeGlob"] {
            assert!(
                schema_searches(&schema(serde_json::json!({
                    "type": "object", "properties": {name: {"type": "array"}}
                }))),
                "{name}"
            );
        }
    }

    #[test]
    fn filesystem_reads_are_known_and_writes_are_not() {
        let fs = Some("secure-filesystem-server");
        assert!(is_known_read(fs, "read_text_file"));
        assert!(is_known_read(fs, "list_allowed_directories"));
        for write in ["write_file", "edit_file", "create_directory", "move_file"] {
            assert!(!is_known_read(fs, write), "{write}");
        }
    }

    #[test]
    fn exact_names_only() {
        assert!(!is_known_read(
            Some("secure-filesystem-server "),
            "read_file"
        ));
        assert!(!is_known_read(
            Some("Secure-Filesystem-Server"),
            "read_file"
        ));
        assert!(!is_known_read(
            Some("secure-filesystem-server"),
            "read_file*"
        ));
        assert!(!is_known_read(
            Some("secure-filesystem-server"),
            "READ_FILE"
        ));
        assert!(!is_known_read(None, "read_file"));
        assert!(!is_known_read(Some("other-server"), "read_file"));
    }

    #[test]
    fn additive_effects_are_listed_exactly() {
        let fs = Some("secure-filesystem-server");
        assert!(is_known_additive(fs, "create_directory"));
        for destructive in ["write_file", "edit_file", "move_file", "read_file"] {
            assert!(!is_known_additive(fs, destructive), "{destructive}");
        }
        let office = Some("secureclaw-demo-tools");
        assert!(is_known_additive(office, "send_email"));
        assert!(is_known_additive(office, "save_draft"));
        assert!(!is_known_additive(office, "pay_invoice"));
        assert!(!is_known_additive(None, "send_email"));
        assert!(!is_known_additive(Some("other-server"), "send_email"));
        assert!(!is_known_additive(office, "SEND_EMAIL"));
    }

    #[test]
    fn demo_servers_effects_are_not_reads() {
        let office = Some("secureclaw-demo-tools");
        assert!(is_known_read(office, "read_invoice"));
        for effect in ["send_email", "save_draft", "pay_invoice"] {
            assert!(!is_known_read(office, effect), "{effect}");
        }
    }

    #[test]
    fn content_matching_tools_and_schemas() {
        let fs = Some("secure-filesystem-server");
        assert!(is_known_content_matching(fs, "edit_file"));
        assert!(!is_known_content_matching(fs, "write_file"));
        assert!(!is_known_content_matching(None, "edit_file"));
        let schema = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        // The official server's edit_file: edits[{oldText, newText}], dryRun.
        assert!(schema_matches_content(&schema(serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "edits": {"type": "array", "items": {
                "type": "object", "properties": {"oldText": {}, "newText": {}}}}}
        }))));
        assert!(schema_matches_content(&schema(serde_json::json!({
            "properties": {"path": {}, "old_str": {}, "new_str": {}}
        }))));
        assert!(schema_matches_content(&schema(serde_json::json!({
            "properties": {"path": {}, "dry-run": {"type": "boolean"}}
        }))));
        // A plain write and a send are not.
        assert!(!schema_matches_content(&schema(serde_json::json!({
            "properties": {"path": {}, "content": {}}
        }))));
        assert!(!schema_matches_content(&schema(serde_json::json!({
            "properties": {"to": {}, "subject": {}, "body": {}}
        }))));
        // A property *named* like a match parameter only counts as a property name.
        assert!(!schema_matches_content(&schema(serde_json::json!({
            "properties": {"mode": {"enum": ["search", "dryRun"]}}
        }))));
    }
}

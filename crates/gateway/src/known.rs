//! The shipped catalog of known servers: which of their tools are reads.
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
//! Entries are exact names; no patterns. Add a server only after reading its source: every
//! listed tool must neither change state nor send data anywhere except back to the caller.

/// One known server and the tools it serves that only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownServer {
    /// `serverInfo.name` reported at `initialize`.
    pub server: &'static str,
    /// Exact names of the tools that are reads.
    pub read_tools: &'static [&'static str],
}

/// The shipped catalog.
pub const KNOWN_SERVERS: &[KnownServer] = &[
    // The official MCP filesystem server (`@modelcontextprotocol/server-filesystem`,
    // `src/filesystem/index.ts`): these tools read files, directories and metadata only.
    // `write_file`, `edit_file`, `create_directory` and `move_file` are effects.
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
    },
    // Our demo office (`crates/demo-tools/src/tools.rs`).
    KnownServer {
        server: "secureclaw-demo-tools",
        read_tools: &["read_invoice", "list_invoices", "search_mail", "noop"],
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn demo_servers_effects_are_not_reads() {
        let office = Some("secureclaw-demo-tools");
        assert!(is_known_read(office, "read_invoice"));
        for effect in ["send_email", "save_draft", "pay_invoice"] {
            assert!(!is_known_read(office, effect), "{effect}");
        }
    }
}

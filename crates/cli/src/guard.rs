//! Start-up guard: no stdio upstream is pointed at SecureClaw's own state directory.
//!
//! The state directory holds the key ring (`keys.json`), the database and the operator token.
//! An upstream that can read it — a filesystem server rooted at `$HOME`, or at the state
//! directory itself — hands the runtime the means to forge artifacts or act as the operator.
//! The detectors vault those secrets if they are read anyway ([`secureclaw_core::detect`]),
//! but the first line is not to expose them: `serve` and `wrap` refuse to start when a stdio
//! upstream's command, an argument (a flag's value after `=` in `--flag=value`; a bare `-flag`
//! is not a path) or its working directory names a path equal to, inside, or an ancestor of the state directory.
//!
//! Paths are compared component-wise after resolution: relative ones against the upstream's
//! working directory (or ours), `~` against `$HOME`, then canonicalized where they exist
//! (symbolic links resolved) and cleaned of `.` and `..` lexically where they do not. An
//! explicit override exists for deployments that need it (`--allow-upstream-state-access`,
//! `[server] allow_upstream_state_access = true`).
//!
//! Limits: the guard sees what the configuration says. It cannot see what an HTTP upstream
//! or a program's own defaults and environment reach; those are the operator's to check.

use anyhow::{Result, bail};
use secureclaw_gateway::{UpstreamSpec, UpstreamTransport};
use std::path::{Component, Path, PathBuf};

/// How a path an upstream names relates to the state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    Equal,
    Inside,
    Ancestor,
}

impl Relation {
    fn describe(self) -> &'static str {
        match self {
            Self::Equal => "is",
            Self::Inside => "is inside",
            Self::Ancestor => "contains",
        }
    }
}

/// `path` made absolute (against `base`, `~` against `home`), canonicalized if it exists,
/// else lexically cleaned.
fn resolve(path: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    let expanded = match (path.strip_prefix('~'), home) {
        (Some(""), Some(h)) => h.to_path_buf(),
        (Some(rest), Some(h)) if rest.starts_with('/') => h.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    };
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        base.join(expanded)
    };
    canonical(&absolute)
}

fn canonical(path: &Path) -> PathBuf {
    if let Ok(c) = path.canonicalize() {
        return c;
    }
    // The longest existing ancestor canonicalized, the rest cleaned lexically.
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => {
                out.push(other);
                if let Ok(c) = out.canonicalize() {
                    out = c;
                }
            }
        }
    }
    out
}

/// The path-like words of `text` read as a shell command line: split at whitespace, quotes
/// and shell operators (`;`, `&`, `|`, `<`, `>`, `(`, `)`, `` ` ``), then at `=` and `:`
/// (`ROOT=/home/me`, `PATH`-style lists); `$HOME` and `${HOME}` expanded. A word is
/// path-like when it starts with `/`, `~` or `.`. More than a shell would split is harmless:
/// every word is only compared with the state directory.
fn shell_words(text: &str, home: Option<&Path>) -> Vec<String> {
    let home_text = home.map(|h| h.to_string_lossy().into_owned());
    let expanded = match &home_text {
        Some(h) => text.replace("${HOME}", h).replace("$HOME", h),
        None => text.to_owned(),
    };
    expanded
        .split(|c: char| c.is_whitespace() || "'\";&|<>()`".contains(c))
        .flat_map(|w| w.split(['=', ':']))
        .filter(|w| w.starts_with('/') || w.starts_with('~') || w.starts_with('.'))
        .map(str::to_owned)
        .collect()
}

fn relation(candidate: &Path, state: &Path) -> Option<Relation> {
    if candidate == state {
        Some(Relation::Equal)
    } else if candidate.starts_with(state) {
        Some(Relation::Inside)
    } else if state.starts_with(candidate) {
        Some(Relation::Ancestor)
    } else {
        None
    }
}

/// Refuse stdio upstreams whose command, arguments or working directory reach `state_dir`
/// (see the module docs), unless `allow` is set (then each is logged as a warning).
///
/// # Errors
/// A message naming the upstream, what it names, and the state directory.
pub fn check_state_access(state_dir: &Path, specs: &[UpstreamSpec], allow: bool) -> Result<()> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let state = resolve(&state_dir.to_string_lossy(), &here, home.as_deref());
    for spec in specs {
        let UpstreamTransport::Stdio {
            command, args, cwd, ..
        } = &spec.transport
        else {
            continue;
        };
        let base = cwd.as_ref().map_or_else(|| here.clone(), |c| here.join(c));
        let mut named: Vec<(String, String)> = Vec::new();
        if let Some(dir) = cwd {
            named.push((
                "working directory".into(),
                dir.to_string_lossy().into_owned(),
            ));
        }
        if command.contains('/') {
            named.push(("command".into(), command.clone()));
        }
        for arg in args {
            // A flag is not a path (`-y`); the value of `--flag=value` may be.
            if !arg.starts_with('-') {
                named.push(("argument".into(), arg.clone()));
            }
            if let Some((_, value)) = arg.split_once('=') {
                named.push(("argument".into(), value.to_owned()));
            }
            // A shell wrapper (`sh -c "exec server /home/me"`, `bash -lc`, `env ROOT=…`)
            // carries its paths inside one argument: every path-like word in it counts too
            // (red-team F6).
            for word in shell_words(arg, home.as_deref()) {
                named.push(("argument (a word of it)".into(), word));
            }
        }
        if let UpstreamTransport::Stdio { env, .. } = &spec.transport {
            for (key, value) in env {
                for word in shell_words(value, home.as_deref()) {
                    named.push((format!("environment variable `{key}`"), word));
                }
            }
        }
        for (what, text) in named {
            if text.is_empty() {
                continue;
            }
            let path = resolve(&text, &base, home.as_deref());
            let Some(rel) = relation(&path, &state) else {
                continue;
            };
            let message = format!(
                "upstream `{}`: its {what} `{text}` {} the state directory `{}` (keys, \
                 database, operator token)",
                spec.id,
                rel.describe(),
                state.display()
            );
            if allow {
                tracing::warn!("{message}; allowed by allow_upstream_state_access");
                continue;
            }
            bail!(
                "{message}; give the upstream a narrower root, move the state directory \
                 (--state-dir), or pass --allow-upstream-state-access \
                 (`[server] allow_upstream_state_access = true`) if you accept that the runtime \
                 may read SecureClaw's secrets through it"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn stdio(id: &str, args: &[&str], cwd: Option<&Path>) -> UpstreamSpec {
        UpstreamSpec {
            id: id.into(),
            transport: UpstreamTransport::Stdio {
                command: "npx".into(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: BTreeMap::new(),
                cwd: cwd.map(Path::to_path_buf),
            },
            namespace: true,
        }
    }

    fn fixture() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().canonicalize().unwrap();
        let state = home.join(".local/state/secureclaw");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(home.join("notes")).unwrap();
        (tmp, home, state)
    }

    fn refused(state: &Path, spec: UpstreamSpec) -> String {
        check_state_access(state, &[spec], false)
            .unwrap_err()
            .to_string()
    }

    /// Regression (issue 11 item 7): a filesystem server rooted at `$HOME` could read the
    /// operator token and the key ring.
    #[test]
    fn ancestor_root_is_refused_naming_upstream_and_state_dir() {
        let (_tmp, home, state) = fixture();
        let home_s = home.display().to_string();
        let msg = refused(
            &state,
            stdio(
                "fs",
                &["-y", "@modelcontextprotocol/server-filesystem", &home_s],
                None,
            ),
        );
        assert!(msg.contains("upstream `fs`"), "{msg}");
        assert!(msg.contains(&state.display().to_string()), "{msg}");
        assert!(msg.contains("contains the state directory"), "{msg}");
        assert!(msg.contains("--allow-upstream-state-access"), "{msg}");
    }

    #[test]
    fn equal_inside_flag_value_cwd_tilde_and_dotdot_are_refused() {
        let (_tmp, home, state) = fixture();
        let s = state.display().to_string();
        let inside = state.join("keys.json").display().to_string();
        let flag = format!("--root={}", home.display());
        let dotdot = format!("{}/notes/../.local", home.display());
        let nonexistent_inside = format!("{s}/not/yet/there");
        for args in [
            vec![s.as_str()],
            vec![inside.as_str()],
            vec![flag.as_str()],
            vec![dotdot.as_str()],
            vec![nonexistent_inside.as_str()],
            vec!["/"],
        ] {
            let msg = refused(&state, stdio("fs", &args, None));
            assert!(msg.contains("upstream `fs`"), "{args:?}: {msg}");
        }
        // Working directory inside, and `.` relative to it.
        let msg = refused(&state, stdio("fs", &[], Some(&state)));
        assert!(msg.contains("working directory"), "{msg}");
        let msg = refused(&state, stdio("fs", &[".."], Some(&home.join("notes"))));
        assert!(msg.contains("argument `..`"), "{msg}");
        // A symbolic link to the state directory.
        #[cfg(unix)]
        {
            let link = home.join("notes/link");
            std::os::unix::fs::symlink(&state, &link).unwrap();
            let l = link.display().to_string();
            let msg = refused(&state, stdio("fs", &[&l], None));
            assert!(msg.contains("is the state directory"), "{msg}");
        }
    }

    /// Red-team F6: a shell wrapper carries the root inside one argument (`sh -c "exec node
    /// server /home/me"`), or in an environment variable; both are refused. Control: a wrapper
    /// naming only unrelated paths starts.
    #[test]
    fn shell_wrappers_and_environment_are_seen_through() {
        let (_tmp, home, state) = fixture();
        let wrapped = format!(
            "exec node /opt/fs/dist/index.js '{}' && echo done",
            home.display()
        );
        let msg = refused(&state, stdio("fs", &["-c", &wrapped], None));
        assert!(msg.contains("upstream `fs`"), "{msg}");
        assert!(msg.contains("a word of it"), "{msg}");
        let root_env = format!("ROOTS={}:/srv/x", home.display());
        let msg = refused(&state, stdio("fs", &["-lc", &root_env], None));
        assert!(msg.contains("contains the state directory"), "{msg}");
        let mut spec = stdio("fs", &["server"], None);
        if let UpstreamTransport::Stdio { env, .. } = &mut spec.transport {
            env.insert("FS_ROOT".into(), home.display().to_string());
        }
        let msg = refused(&state, spec);
        assert!(msg.contains("environment variable `FS_ROOT`"), "{msg}");
        let notes = format!(
            "exec node /opt/fs/dist/index.js {}",
            home.join("notes").display()
        );
        check_state_access(&state, &[stdio("fs", &["-c", &notes], None)], false).unwrap();
    }

    /// Positive controls: siblings and unrelated paths start; the override allows.
    #[test]
    fn unrelated_paths_and_override_pass() {
        let (_tmp, home, state) = fixture();
        let notes = home.join("notes").display().to_string();
        let sibling = home.join(".local/state/other").display().to_string();
        let prefix_lookalike = format!("{}-backup", state.display());
        check_state_access(
            &state,
            &[stdio(
                "fs",
                &[
                    "-y",
                    "@modelcontextprotocol/server-filesystem",
                    &notes,
                    &sibling,
                    &prefix_lookalike,
                ],
                Some(&home.join("notes")),
            )],
            false,
        )
        .unwrap();
        let home_s = home.display().to_string();
        check_state_access(&state, &[stdio("fs", &[&home_s], None)], true).unwrap();
        // HTTP upstreams name no local path.
        let http = UpstreamSpec {
            id: "web".into(),
            transport: UpstreamTransport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                bearer_token_env: None,
            },
            namespace: true,
        };
        check_state_access(&state, &[http], false).unwrap();
    }
}

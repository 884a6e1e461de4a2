//! Start-up guard: no stdio upstream is pointed at SecureClaw's own trusted inputs.
//!
//! The state directory holds the key ring (`keys.json`), the database and the operator token.
//! An upstream that can read it — a filesystem server rooted at `$HOME`, or at the state
//! directory itself — hands the runtime the means to forge artifacts or act as the operator.
//! The configuration file, the Cedar policy files and a key file named by
//! `$SECURECLAW_KEYS_FILE` are trusted inputs too: an upstream that can write them lets the
//! runtime change the rules the next start runs under (red-team round 3: a granted
//! `write_file` rewrote `secureclaw.toml` with `allow_protected_objects = true`, and the
//! next `wrap` let a blind edit show a withheld address).
//! The detectors vault secrets if they are read anyway ([`secureclaw_core::detect`]),
//! but the first line is not to expose them: `serve` and `wrap` refuse to start when a stdio
//! upstream's command, an argument (a flag's value after `=` in `--flag=value`; a bare `-flag`
//! is not a path) or its working directory names a path equal to, inside, or an ancestor of
//! the state directory or of one of those files.
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

/// One trusted input of the gateway: what it is (for the message) and where it is.
#[derive(Debug, Clone)]
pub struct TrustedInput {
    /// `state directory`, `configuration file`, `policy file`, `key file`.
    pub what: &'static str,
    /// Its path as given.
    pub path: PathBuf,
}

/// The trusted inputs of a start: the state directory, the configuration file (if any), the
/// policy files, and the key file `$SECURECLAW_KEYS_FILE` names (if set).
#[must_use]
pub fn trusted_inputs(
    state_dir: &Path,
    config: Option<&Path>,
    policies: &[PathBuf],
) -> Vec<TrustedInput> {
    let mut out = vec![TrustedInput {
        what: "state directory",
        path: state_dir.to_path_buf(),
    }];
    out.extend(config.map(|c| TrustedInput {
        what: "configuration file",
        path: c.to_path_buf(),
    }));
    out.extend(policies.iter().map(|p| TrustedInput {
        what: "policy file",
        path: p.clone(),
    }));
    if let Some(keys) = std::env::var_os("SECURECLAW_KEYS_FILE").filter(|k| !k.is_empty()) {
        out.push(TrustedInput {
            what: "key file",
            path: PathBuf::from(keys),
        });
    }
    // The program the next start runs (red-team round 3: a granted `write_file` replaced the
    // gateway's own binary, kept executable, in the tree a file server served).
    if let Ok(exe) = std::env::current_exe() {
        out.push(TrustedInput {
            what: "gateway program",
            path: exe,
        });
    }
    out
}

/// Whether a trusted input is a program (the gateway's or an upstream's).
fn is_program(input: &str) -> bool {
    input.ends_with("program")
}

/// Interpreters whose first argument that is not a flag is the program they run
/// (`node server.js`, `python3 -u server.py`, `sh run.sh`).
const INTERPRETERS: &[&str] = &[
    "bash", "bun", "deno", "dash", "node", "nodejs", "perl", "php", "python", "python3", "ruby",
    "sh", "zsh",
];

/// The programs a stdio upstream's start runs: its command (found on `PATH` when it names
/// no directory) and, for an interpreter, the script it is given. The next start runs them
/// again, so they are trusted inputs like the configuration (red-team round 3: a granted
/// `write_file` rewrote the upstream's launcher script in the tree the upstream served).
fn programs(command: &str, args: &[String], base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if command.contains('/') {
        out.push(resolve(command, base, home));
    } else if let Some(found) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(command))
            .find(|candidate| candidate.is_file())
    }) {
        out.push(canonical(&found));
    }
    let name = Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(command);
    if INTERPRETERS.contains(&name)
        && let Some(script) = args.iter().find(|a| !a.starts_with('-'))
    {
        out.push(resolve(script, base, home));
    }
    out
}

/// Refuse stdio upstreams whose command, arguments or working directory reach the state
/// directory (see the module docs), unless `allow` is set (then each is logged as a warning).
///
/// # Errors
/// A message naming the upstream, what it names, and the state directory.
#[cfg(test)]
pub fn check_state_access(state_dir: &Path, specs: &[UpstreamSpec], allow: bool) -> Result<()> {
    check_trusted_access(&trusted_inputs(state_dir, None, &[]), specs, allow)
}

/// Refuse stdio upstreams whose command, arguments or working directory reach one of
/// `trusted` ([`trusted_inputs`]; see the module docs), unless `allow` is set (then each is
/// logged as a warning).
///
/// # Errors
/// A message naming the upstream, what it names, and the trusted input it reaches.
pub fn check_trusted_access(
    trusted: &[TrustedInput],
    specs: &[UpstreamSpec],
    allow: bool,
) -> Result<()> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut trusted: Vec<(&'static str, PathBuf)> = trusted
        .iter()
        .map(|t| {
            (
                t.what,
                resolve(&t.path.to_string_lossy(), &here, home.as_deref()),
            )
        })
        .collect();
    for spec in specs {
        if let UpstreamTransport::Stdio {
            command, args, cwd, ..
        } = &spec.transport
        {
            let base = cwd.as_ref().map_or_else(|| here.clone(), |c| here.join(c));
            for program in programs(command, args, &base, home.as_deref()) {
                trusted.push(("upstream program", program));
            }
        }
    }
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
            // A program counts when a root the upstream is given contains it: naming a program
            // (the command itself, its script) or running in its directory is how it starts.
            let Some((input, target, rel)) = trusted.iter().find_map(|(input, target)| {
                relation(&path, target)
                    .filter(|r| {
                        !is_program(input)
                            || (*r == Relation::Ancestor && what != "working directory")
                    })
                    .map(|r| (input, target, r))
            }) else {
                continue;
            };
            let holds = if *input == "state directory" {
                "keys, database, operator token"
            } else if is_program(input) {
                "the next start runs it: an upstream that can write it runs code as the gateway"
            } else {
                "the gateway's trusted configuration: an upstream that can write it changes the rules"
            };
            let message = format!(
                "upstream `{}`: its {what} `{text}` {} the {input} `{}` ({holds})",
                spec.id,
                rel.describe(),
                target.display()
            );
            if allow {
                tracing::warn!("{message}; allowed by allow_upstream_state_access");
                continue;
            }
            bail!(
                "{message}; give the upstream a narrower root, move the {input} out of its \
                 reach, or pass --allow-upstream-state-access \
                 (`[server] allow_upstream_state_access = true`) if you accept that the runtime \
                 may read or change SecureClaw's trusted inputs through it"
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
            protocol: Default::default(),
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

    /// Red-team round 3 (HIGH): a file server rooted at the project directory rewrote
    /// `secureclaw.toml` (`allow_protected_objects = true`) and the next start ran under it.
    /// The configuration file and the policy files are trusted inputs like the state
    /// directory: an upstream root containing one is refused, naming it; a root beside them
    /// starts (positive control).
    /// Red-team round 3 (HIGH): a root containing the upstream's launcher script (or the
    /// gateway's binary) let a granted `write_file` replace what the next start runs. Naming
    /// the script to run it, and running in its directory, start (positive controls).
    #[test]
    fn roots_containing_a_program_the_next_start_runs_are_refused() {
        let (_tmp, home, state) = fixture();
        let project = home.join("project");
        std::fs::create_dir_all(project.join("data")).unwrap();
        let script = project.join("run.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let spec = |args: &[&str], cwd: Option<&Path>| UpstreamSpec {
            id: "fs".into(),
            transport: UpstreamTransport::Stdio {
                command: "sh".into(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: BTreeMap::new(),
                cwd: cwd.map(Path::to_path_buf),
            },
            namespace: true,
            protocol: Default::default(),
        };
        let inputs = trusted_inputs(&state, None, &[]);
        let script_s = script.display().to_string();
        let project_s = project.display().to_string();
        let msg = check_trusted_access(&inputs, &[spec(&[&script_s, &project_s], None)], false)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("contains the upstream program"), "{msg}");
        let data = project.join("data").display().to_string();
        check_trusted_access(&inputs, &[spec(&[&script_s, &data], None)], false).unwrap();
        check_trusted_access(&inputs, &[spec(&["run.sh", "data"], Some(&project))], false).unwrap();
        // The gateway's own program counts too.
        let exe = std::env::current_exe().unwrap();
        let exe_dir = exe.parent().unwrap().display().to_string();
        let msg = check_trusted_access(&inputs, &[spec(&[&script_s, &exe_dir], None)], false)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("gateway program"), "{msg}");
    }

    #[test]
    fn roots_containing_the_config_or_a_policy_file_are_refused() {
        let (_tmp, home, state) = fixture();
        let project = home.join("project");
        std::fs::create_dir_all(project.join("docs")).unwrap();
        let config = project.join("secureclaw.toml");
        let policy = home.join("policies/extra.cedar");
        std::fs::write(&config, "").unwrap();
        let root = |dir: &Path| {
            stdio(
                "fs",
                &["-y", "server-filesystem", &dir.display().to_string()],
                None,
            )
        };
        let inputs = trusted_inputs(&state, Some(&config), std::slice::from_ref(&policy));
        for (dir, names) in [
            (project.clone(), "configuration file"),
            (home.join("policies"), "policy file"),
        ] {
            let msg = check_trusted_access(&inputs, &[root(&dir)], false)
                .unwrap_err()
                .to_string();
            assert!(msg.contains(&format!("contains the {names}")), "{msg}");
            assert!(msg.contains("upstream `fs`"), "{msg}");
        }
        // The working directory counts too.
        let cwd = stdio("fs", &["-y", "server-filesystem", "."], Some(&project));
        assert!(check_trusted_access(&inputs, &[cwd], false).is_err());
        // Positive controls: a root beside them starts; the override starts with a warning.
        check_trusted_access(&inputs, &[root(&project.join("docs"))], false).unwrap();
        check_trusted_access(&inputs, &[root(&project)], true).unwrap();
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
            protocol: Default::default(),
        };
        check_state_access(&state, &[http], false).unwrap();
    }
}

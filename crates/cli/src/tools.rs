//! `secureclaw tools list|diff|pin`: review and approve upstream tool definitions (issue 16
//! item 4, rug pulls; see `secureclaw_gateway::pins`).
//!
//! Each command starts (stdio) or connects to (HTTP) the upstreams as `serve` or `wrap` would,
//! lists their tools and compares each definition with its pin in the gateway's store. A
//! running gateway picks up a new pin at the tool's next call or listing; nothing needs a
//! restart.

use crate::config::Config;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use secureclaw_core::audit::{AuditEvent, AuditKind};
use secureclaw_core::store::{Store, ToolPin};
use secureclaw_gateway::RmcpUpstream;
use secureclaw_gateway::pins;
use secureclaw_gateway::upstream::UpstreamTool;
use secureclaw_gateway::{UpstreamSpec, UpstreamTransport};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `secureclaw tools …`.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List every upstream tool with its pin: `pinned`, `changed` (the definition differs from
    /// its pin: hidden and refused), `new` (never pinned: hidden and refused) or `removed` (pinned,
    /// no longer listed). Exit status 1 when any tool is changed or new.
    List(ToolsArgs),
    /// Show what changed in each changed or new tool: the pinned and the listed value of every
    /// field that differs (description, schemas, annotations), its digest and the poisoning
    /// scan. Exit status 1 when anything differs.
    Diff(ToolsArgs),
    /// Pin the definitions you reviewed, so that the gateway serves them: one `--digest
    /// TOOL=DIGEST` per tool, as `tools diff` prints them. The upstream is listed again and a
    /// tool is pinned only if it still has that digest (a server that shows the review one
    /// definition and the pin another is refused). `--all-listed` pins whatever the upstreams
    /// list now, unreviewed (a first setup), and drops the pins of tools no longer listed.
    Pin(ToolsArgs),
}

/// Which upstreams: those of a config file (as `serve`), or one command (as `wrap`).
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// The config file whose `[[upstream]]`s to check (as `serve -c`); its state directory
    /// and store are used unless --state-dir / --store say otherwise.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// For a `wrap` upstream: its id, if `wrap` was given `--id` (default: derived from the
    /// command exactly as `wrap` derives it).
    #[arg(long)]
    id: Option<String>,
    /// Only this tool (its name at the upstream, or `upstream__tool`; repeatable).
    #[arg(long = "tool", value_name = "TOOL")]
    tools: Vec<String>,
    /// `pin`: the reviewed definition of a tool, `TOOL=DIGEST` (TOOL as `upstream__tool` or its
    /// name at the upstream; DIGEST as `tools diff` prints it); repeatable.
    #[arg(long = "digest", value_name = "TOOL=DIGEST")]
    digests: Vec<String>,
    /// `pin`: pin every tool the upstreams list now without a reviewed digest, and drop the
    /// pins of tools no longer listed.
    #[arg(long, conflicts_with = "digests")]
    all_listed: bool,
    /// Start even if the upstream's command can reach the state directory (as `wrap`
    /// --allow-upstream-state-access).
    #[arg(long)]
    allow_upstream_state_access: bool,
    /// The stdio upstream as given to `wrap`, after `--` (instead of --config).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// One upstream's tools as listed now, with its pins.
struct Listed {
    spec: UpstreamSpec,
    tools: Vec<UpstreamTool>,
    /// Its tool pins (not its marker).
    pins: Vec<ToolPin>,
    /// A gateway or the operator has listed or pinned it before (its marker is stored).
    ever: bool,
}

/// Run a `tools` subcommand.
///
/// # Errors
/// No upstream given, an upstream that cannot be started or listed, no gateway state in the
/// state directory, store failures.
pub async fn run(
    state_dir: Option<&Path>,
    store_url: Option<&str>,
    cmd: ToolsCommand,
) -> Result<ExitCode> {
    let (ToolsCommand::List(args) | ToolsCommand::Diff(args) | ToolsCommand::Pin(args)) = &cmd;
    if !matches!(cmd, ToolsCommand::Pin(_)) && (!args.digests.is_empty() || args.all_listed) {
        bail!("--digest and --all-listed belong to `tools pin`");
    }
    let (specs, dir, store_url, config_file, markers) = upstreams(state_dir, store_url, args)?;
    crate::guard::check_trusted_access(
        &crate::guard::trusted_inputs(&dir, config_file.as_deref(), &[]),
        &specs,
        args.allow_upstream_state_access,
    )?;
    let (keys, store) = crate::stack::open_existing_state(&dir, store_url.as_deref()).await?;
    drop(keys);
    let pinned_ids = store
        .pinned_upstreams()
        .await
        .context("reading which upstreams have pins")?;
    let mut listed = Vec::new();
    for spec in specs {
        let startup = std::time::Duration::from_secs(30);
        let up = RmcpUpstream::connect(&spec, startup).await?;
        let tools = secureclaw_gateway::upstream::startup_tools(&up, startup)
            .await
            .with_context(|| format!("listing the tools of upstream `{}`", spec.id))?;
        let pins: Vec<ToolPin> = store
            .tool_pins(&spec.id)
            .await
            .with_context(|| format!("reading the pins of upstream `{}`", spec.id))?;
        let ever = pins.iter().any(pins::is_marker);
        if !ever && pins.is_empty() && !pinned_ids.is_empty() {
            eprintln!(
                "note: this store has no pins for upstream `{}`, but has some for {}: if the gateway runs this server under another id, pass it (`--id ID` for a wrap upstream)",
                spec.id,
                pinned_ids
                    .iter()
                    .map(|i| format!("`{}`", pins::printable(i)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let pins: Vec<ToolPin> = pins.into_iter().filter(|p| !pins::is_marker(p)).collect();
        if !pins.is_empty()
            && !tools.is_empty()
            && tools.iter().all(|t| !pins.iter().any(|p| p.tool == t.name))
        {
            eprintln!(
                "warning: upstream `{}` lists none of the {} tools pinned under this id: probably another server run under the same id; give each server its own id (`wrap --id`, `[[upstream]] id`)",
                spec.id,
                pins.len()
            );
        }
        listed.push(Listed {
            spec,
            tools,
            pins,
            ever,
        });
    }
    let wanted = |l: &Listed, tool: &str| {
        args.tools.is_empty()
            || args
                .tools
                .iter()
                .any(|t| t == tool || *t == format!("{}__{tool}", l.spec.id))
    };
    match cmd {
        ToolsCommand::List(_) => Ok(list(&listed, &wanted)),
        ToolsCommand::Diff(_) => Ok(diff(&listed, &wanted, &markers)),
        ToolsCommand::Pin(_) => pin(store.as_ref(), &listed, &wanted, args).await,
    }
}

/// The upstream specs, state directory, store URL, config file and injection markers the
/// arguments name.
#[allow(clippy::type_complexity)]
fn upstreams(
    state_dir: Option<&Path>,
    store_url: Option<&str>,
    args: &ToolsArgs,
) -> Result<(
    Vec<UpstreamSpec>,
    PathBuf,
    Option<String>,
    Option<PathBuf>,
    Vec<String>,
)> {
    if let Some(file) = &args.config {
        if !args.command.is_empty() {
            bail!("give either --config FILE or the upstream command after `--`, not both");
        }
        let config = Config::load(file)?;
        let dir = state_dir
            .map(Path::to_path_buf)
            .or_else(|| config.server.state_dir.clone())
            .unwrap_or_else(crate::state::default_dir);
        let url = store_url.map(str::to_owned).or(config.store.url.clone());
        return Ok((
            config.upstream,
            dir,
            url,
            Some(file.clone()),
            config.gateway.summary.injection_markers,
        ));
    }
    let Some((program, rest)) = args.command.split_first() else {
        bail!(
            "name the upstreams: --config FILE (as `serve -c`), or the upstream command after `--` (as `wrap`)"
        );
    };
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| crate::commands::derive_id(program, rest));
    let spec = UpstreamSpec {
        id,
        transport: UpstreamTransport::Stdio {
            command: program.clone(),
            args: rest.to_vec(),
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: false,
        protocol: Default::default(),
    };
    let dir = state_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::state::default_dir);
    Ok((
        vec![spec],
        dir,
        store_url.map(str::to_owned),
        None,
        secureclaw_core::summary::SummaryConfig::default().injection_markers,
    ))
}

/// `changed`, `new` or `pinned` for a listed tool.
fn status(l: &Listed, tool: &UpstreamTool) -> &'static str {
    match l.pins.iter().find(|p| p.tool == tool.name) {
        None => "new",
        Some(p) if p.digest != pins::digest(&pins::canonical_definition(tool)) => "changed",
        Some(_) => "pinned",
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn list(listed: &[Listed], wanted: &dyn Fn(&Listed, &str) -> bool) -> ExitCode {
    let mut review = 0;
    for l in listed {
        println!(
            "upstream `{}`: {}",
            l.spec.id,
            plural(l.tools.len(), "tool", "tools")
        );
        if !l.ever {
            println!(
                "  (never listed by a gateway: one started with `pin = \"on-first-use\"` pins it as listed then)"
            );
        }
        for tool in l.tools.iter().filter(|t| wanted(l, &t.name)) {
            let s = status(l, tool);
            if s != "pinned" {
                review += 1;
            }
            println!("  {s:<8} {}", pins::printable(&tool.name));
        }
        for p in l.pins.iter().filter(|p| wanted(l, &p.tool)) {
            if !l.tools.iter().any(|t| t.name == p.tool) {
                println!("  {:<8} {}", "removed", pins::printable(&p.tool));
            }
        }
    }
    if review > 0 {
        println!(
            "{} hidden from the runtime until pinned: review with `secureclaw tools diff`, then pin what you reviewed with `secureclaw tools pin --digest TOOL=DIGEST`",
            plural(review, "tool is", "tools are")
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn diff(listed: &[Listed], wanted: &dyn Fn(&Listed, &str) -> bool, markers: &[String]) -> ExitCode {
    let mut shown = 0;
    let mut digests = Vec::new();
    for l in listed {
        for tool in l.tools.iter().filter(|t| wanted(l, &t.name)) {
            let pin = l.pins.iter().find(|p| p.tool == tool.name);
            let d = pins::diff(pin.map(|p| p.definition.as_str()), tool);
            if d.is_empty() {
                continue;
            }
            shown += 1;
            let what = if pin.is_some() { "changed" } else { "new" };
            let name = format!("{}__{}", l.spec.id, tool.name);
            let digest = pins::digest(&pins::canonical_definition(tool));
            println!("{} ({what}), digest {digest}:", pins::printable(&name));
            for line in d.lines() {
                println!("{}", pins::printable(line));
            }
            // The tool-poisoning scan (issue 16 item 5): what the runtime would be shown.
            let mut scrubbed = tool.clone();
            let found = secureclaw_gateway::upstream::scrub_tool_metadata(&mut scrubbed, markers);
            if found > 0 {
                println!(
                    "  poisoning scan: {} in its title, description or schema prose; the runtime is shown:\n    {}",
                    plural(
                        found,
                        "identifier, secret or injection marker",
                        "identifiers, secrets or injection markers"
                    ),
                    pins::printable(
                        scrubbed
                            .description
                            .as_deref()
                            .unwrap_or("(no description)")
                    )
                );
            }
            println!();
            digests.push(format!("--digest {}={digest}", pins::printable(&name)));
        }
        for p in l.pins.iter().filter(|p| wanted(l, &p.tool)) {
            if !l.tools.iter().any(|t| t.name == p.tool) {
                shown += 1;
                println!(
                    "{}__{} (removed: pinned, no longer listed)\n",
                    l.spec.id,
                    pins::printable(&p.tool)
                );
            }
        }
    }
    if shown == 0 {
        println!("every listed tool matches its pin");
    }
    if !digests.is_empty() {
        println!(
            "to pin exactly what is shown above, add to `secureclaw tools pin` (same --state-dir and upstream):\n  {}",
            digests.join(" ")
        );
    }
    // As `diff(1)` and `tools list`: 1 when there is something to review.
    if shown == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The reviewed digests of `--digest TOOL=DIGEST`.
fn reviewed(args: &ToolsArgs) -> Result<Vec<(String, String)>> {
    args.digests
        .iter()
        .map(|d| {
            d.rsplit_once('=')
                .filter(|(t, h)| !t.is_empty() && !h.is_empty())
                .map(|(t, h)| (t.to_owned(), h.to_ascii_lowercase()))
                .with_context(|| format!("--digest `{d}`: expected TOOL=DIGEST"))
        })
        .collect()
}

async fn pin(
    store: &dyn Store,
    listed: &[Listed],
    wanted: &dyn Fn(&Listed, &str) -> bool,
    args: &ToolsArgs,
) -> Result<ExitCode> {
    // (tool, digest, matched by a listed tool)
    let mut reviewed: Vec<(String, String, bool)> = reviewed(args)?
        .into_iter()
        .map(|(t, d)| (t, d, false))
        .collect();
    if reviewed.is_empty() && !args.all_listed {
        bail!(
            "nothing pinned: give `--digest TOOL=DIGEST` for each tool you reviewed (`secureclaw tools diff` prints them), or `--all-listed` to pin whatever the upstreams list now without review"
        );
    }
    let now = (secureclaw_gateway::system_clock())();
    // Every reviewed digest is checked against the listing before anything is stored.
    let mut plan: Vec<(&Listed, Vec<ToolPin>, Vec<String>)> = Vec::new();
    for l in listed {
        let mut pins = Vec::new();
        for tool in &l.tools {
            let listed_pin = pins::pin_of(&l.spec.id, tool, now);
            let qualified = format!("{}__{}", l.spec.id, tool.name);
            let review = reviewed
                .iter_mut()
                .find(|(t, _, _)| *t == qualified || *t == tool.name);
            match review {
                Some((_, digest, seen)) => {
                    *seen = true;
                    // The listed digest is not printed: copying it from here would skip the
                    // review (new-user trial).
                    if *digest != listed_pin.digest {
                        bail!(
                            "nothing pinned: `{}` is not listed now with the digest given ({}): a typo, or the server changed it since the review (or answers each listing differently); review it again with `secureclaw tools diff`",
                            pins::printable(&qualified),
                            pins::printable(digest)
                        );
                    }
                    pins.push(listed_pin);
                }
                None if args.all_listed && wanted(l, &tool.name) => pins.push(listed_pin),
                None => {}
            }
        }
        let unpin: Vec<String> = if args.all_listed {
            l.pins
                .iter()
                .filter(|p| wanted(l, &p.tool) && !l.tools.iter().any(|t| t.name == p.tool))
                .map(|p| p.tool.clone())
                .collect()
        } else {
            Vec::new()
        };
        plan.push((l, pins, unpin));
    }
    if let Some((tool, _, _)) = reviewed.iter().find(|(_, _, seen)| !seen) {
        bail!(
            "nothing pinned: no upstream lists `{}`",
            pins::printable(tool)
        );
    }
    for (l, mut pins, unpin) in plan {
        let changed: Vec<String> = pins
            .iter()
            .filter(|p| {
                !l.pins
                    .iter()
                    .any(|old| old.tool == p.tool && old.digest == p.digest)
            })
            .map(|p| p.tool.clone())
            .collect();
        if !l.ever {
            pins.push(pins::marker(&l.spec.id, now));
        }
        store
            .put_tool_pins(&l.spec.id, &pins, &unpin)
            .await
            .with_context(|| format!("storing the pins of upstream `{}`", l.spec.id))?;
        let mut ev = AuditEvent::new(AuditKind::ToolPins, now);
        ev.caller = Some("operator (secureclaw tools pin)".into());
        let pinned_digests: Vec<Value> = pins
            .iter()
            .filter(|p| changed.contains(&p.tool))
            .map(|p| json!({"tool": p.tool, "digest": p.digest}))
            .collect();
        ev.detail = json!({
            "upstream": l.spec.id,
            "pinned": pinned_digests,
            "unpinned": unpin,
            "by": if args.all_listed { "operator (all listed)" } else { "operator (reviewed digests)" },
        });
        store
            .append_audit(ev)
            .await
            .context("appending the pin to the audit log")?;
        for p in pins.iter().filter(|p| changed.contains(&p.tool)) {
            println!(
                "pinned {}__{} (digest {})",
                l.spec.id,
                pins::printable(&p.tool),
                p.digest
            );
        }
        for t in &unpin {
            println!(
                "dropped the pin of {}__{} (no longer listed)",
                l.spec.id,
                pins::printable(t)
            );
        }
        if changed.is_empty() && unpin.is_empty() {
            println!("upstream `{}`: nothing to change", l.spec.id);
        }
    }
    Ok(ExitCode::SUCCESS)
}

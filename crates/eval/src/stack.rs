//! The real stack, in process: a [`Gateway`] over a [`SqliteStore`] on a temporary directory,
//! the default Cedar policy set, the demo office (`secureclaw-demo-tools`) served over an
//! in-memory MCP pipe, a zero-argument counting upstream, an in-memory filesystem-like
//! upstream (`files`), and a clock the harness moves.
//!
//! Nothing here is a mock of the trusted path: preview, policy, binding, acceptance, ledger,
//! vault and audit are the production code. What the harness adds are the trusted-side powers
//! an operator has and a runtime does not — moving the clock, rotating keys, restarting the
//! gateway over the same database, changing the policy set — so that the suite can attack the
//! commit path across those events.

use crate::lane::text_output as text_result;
use rmcp::ServiceExt;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::policy::EffectClass;
use secureclaw_core::time::UnixMillis;
use secureclaw_demo_tools::{DemoState, DemoTools};
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    Clock, Gateway, GatewayConfig, GatewayError, RmcpUpstream, ToolOutput, ToolRule, Upstream,
    UpstreamError, UpstreamSpec, UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::SqliteStore;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Start of the in-process clock: 2027-01-15 (a realistic Unix time in milliseconds).
pub const T0: u64 = 1_800_000_000_000;

/// Handle lifetime of the evaluation configuration (1 h, shorter than the 24 h session
/// lifetime, so a handle can expire inside a live session).
pub const EVAL_HANDLE_TTL_MS: u64 = 3_600_000;

/// Errors building the in-process stack.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The temporary state directory could not be created.
    #[error("cannot create a temporary directory")]
    TempDir(#[source] std::io::Error),
    /// The operating system's random source failed.
    #[error("the operating system random source failed")]
    Random,
    /// The demo office could not start.
    #[error("demo office: {0}")]
    Office(String),
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(String),
    /// The policy set was rejected.
    #[error("policy: {0}")]
    Policy(String),
    /// The gateway could not start.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
}

/// A clock the harness sets by hand (shared by every gateway of one [`Stack`]).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start` milliseconds.
    #[must_use]
    pub fn new(start: u64) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }

    /// The gateway's view of this clock.
    #[must_use]
    pub fn clock(&self) -> Clock {
        let ms = self.0.clone();
        Arc::new(move || UnixMillis(ms.load(Ordering::SeqCst)))
    }

    /// Current reading in milliseconds.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Set the reading.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

/// A second upstream, `counter`, with three zero-argument effectful tools that only count, all
/// declaring `destructiveHint: false`: `bump` (declared target-less and non-destructive by the
/// operator, so the policy allows it), `bump_undeclared` (no operator rule: an effect with
/// unknown targets, held for confirmation) and `purge` (declared target-less by the operator,
/// who says nothing about `destructive`: the upstream's `destructiveHint: false` alone must not
/// make it non-destructive, so it is held).
#[derive(Debug, Default)]
pub struct Counter {
    effects: AtomicU64,
}

impl Counter {
    /// Effects executed so far.
    #[must_use]
    pub fn effects(&self) -> u64 {
        self.effects.load(Ordering::SeqCst)
    }
}

fn counter_tool(name: &str) -> UpstreamTool {
    crate::lane::listed_tool(
        name,
        format!("counts one effect ({name})"),
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
        crate::lane::Hints {
            read_only: false,
            destructive: false,
            open_world: true,
        },
    )
}

impl Upstream for Counter {
    fn id(&self) -> &str {
        "counter"
    }

    fn destination(&self) -> &str {
        "in-process:counter"
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![
                counter_tool("bump"),
                counter_tool("bump_undeclared"),
                counter_tool("purge"),
            ])
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            if !arguments.is_empty()
                || !matches!(name.as_str(), "bump" | "bump_undeclared" | "purge")
            {
                return Ok(crate::lane::text_output("bad call".into(), true));
            }
            let n = self.effects.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(ToolOutput {
                content: vec![json!({"type": "text", "text": format!("{{\"n\":{n}}}")})],
                structured: Some(json!({"n": n})),
                is_error: false,
            })
        })
    }
}

/// The shared notes file of the `files` upstream: it holds an e-mail address and an IBAN.
pub const FILES_NOTES: &str = "/shared/notes.txt";
/// The e-mail address in [`FILES_NOTES`].
pub const FILES_NOTES_EMAIL: &str = "dana.whitfield@northwind.example";
/// A plain file of the `files` upstream (no protected values).
pub const FILES_PLAIN: &str = "/shared/agenda.txt";

/// A third upstream, `files`: an in-memory filesystem shaped like the official filesystem
/// server's write tools. `read_file(path, head?)` (the operator declares it a read),
/// `write_file(path, content)`, `edit_file(path, oldText, newText, dryRun)` (replace every
/// `oldText`, answer with the changed lines, a dry run changes nothing) and
/// `move_file(source, destination)`. Seeded with [`FILES_NOTES`] and [`FILES_PLAIN`].
#[derive(Debug)]
pub struct Files {
    files: Mutex<BTreeMap<String, String>>,
    effects: AtomicU64,
}

impl Default for Files {
    fn default() -> Self {
        let notes = format!(
            "Payroll notes\nWrite to {FILES_NOTES_EMAIL} before paying.\n\
             Salary account IBAN DE89370400440532013000\n"
        );
        Self {
            files: Mutex::new(BTreeMap::from([
                (FILES_NOTES.to_owned(), notes),
                (
                    FILES_PLAIN.to_owned(),
                    "Agenda\nTidy the shared folder on Friday.\n".to_owned(),
                ),
            ])),
            effects: AtomicU64::new(0),
        }
    }
}

impl Files {
    /// Effect calls executed so far (writes, edits, dry runs and moves that reached it).
    #[must_use]
    pub fn effects(&self) -> u64 {
        self.effects.load(Ordering::SeqCst)
    }

    /// Rename `from` to `to` directly (test set-up, outside the gateway); whether `from`
    /// existed.
    pub fn rename(&self, from: &str, to: &str) -> bool {
        let Ok(mut files) = self.files.lock() else {
            return false;
        };
        match files.remove(from) {
            Some(text) => {
                files.insert(to.to_owned(), text);
                true
            }
            None => false,
        }
    }

    /// The text of `path`, if it exists.
    #[must_use]
    pub fn text(&self, path: &str) -> Option<String> {
        self.files.lock().ok().and_then(|f| f.get(path).cloned())
    }
}

fn files_tool(name: &str, properties: Value, read_only: bool) -> UpstreamTool {
    crate::lane::listed_tool(
        name,
        format!("in-memory files: {name}"),
        json!({"type": "object", "properties": properties}),
        crate::lane::Hints {
            read_only,
            destructive: false,
            open_world: false,
        },
    )
}

impl Upstream for Files {
    fn id(&self) -> &str {
        "files"
    }

    fn destination(&self) -> &str {
        "in-process:files"
    }

    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        let string = json!({"type": "string"});
        Box::pin(async move {
            Ok(vec![
                files_tool(
                    "read_file",
                    json!({"path": string, "head": {"type": "integer"}}),
                    true,
                ),
                files_tool(
                    "write_file",
                    json!({"path": string, "content": string}),
                    false,
                ),
                files_tool(
                    "edit_file",
                    json!({"path": string, "oldText": string, "newText": string,
                           "dryRun": {"type": "boolean"}}),
                    false,
                ),
                files_tool(
                    "move_file",
                    json!({"source": string, "destination": string}),
                    false,
                ),
            ])
        })
    }

    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let arg = |k: &str| arguments.get(k).and_then(Value::as_str).map(str::to_owned);
            let Ok(mut files) = self.files.lock() else {
                return Ok(text_result("files unavailable".into(), true));
            };
            if name != "read_file" {
                self.effects.fetch_add(1, Ordering::SeqCst);
            }
            Ok(match (name.as_str(), arg("path")) {
                ("read_file", Some(path)) => match files.get(&path) {
                    // `head: n`: the first n lines only (none for n <= 0), as the official
                    // filesystem server's `head` does.
                    Some(t) if arguments.contains_key("head") => {
                        let n = arguments.get("head").and_then(Value::as_i64).unwrap_or(0);
                        let n = usize::try_from(n).unwrap_or(0);
                        let part = t.lines().take(n).collect::<Vec<_>>().join("\n");
                        ToolOutput {
                            content: vec![json!({"type": "text", "text": part})],
                            structured: Some(json!({"path": path, "content": part})),
                            is_error: false,
                        }
                    }
                    Some(t) => ToolOutput {
                        content: vec![json!({"type": "text", "text": t})],
                        structured: Some(json!({"path": path, "content": t})),
                        is_error: false,
                    },
                    None => text_result("no such file".into(), true),
                },
                ("write_file", Some(path)) => {
                    let content = arg("content").unwrap_or_default();
                    let n = content.len();
                    files.insert(path.clone(), content);
                    text_result(format!("wrote {n} bytes to {path}"), false)
                }
                ("edit_file", Some(path)) => {
                    let (Some(old), Some(new)) = (arg("oldText"), arg("newText")) else {
                        return Ok(text_result("missing oldText or newText".into(), true));
                    };
                    let dry = arguments.get("dryRun") == Some(&Value::Bool(true));
                    match files.get_mut(&path) {
                        Some(text) if !old.is_empty() && text.contains(&old) => {
                            let after = text.replace(&old, &new);
                            let changed: Vec<String> = text
                                .lines()
                                .zip(after.lines())
                                .filter(|(a, b)| a != b)
                                .map(|(a, b)| format!("-{a}\n+{b}"))
                                .collect();
                            if !dry {
                                *text = after;
                            }
                            text_result(changed.join("\n"), false)
                        }
                        Some(_) => text_result("oldText not found".into(), true),
                        None => text_result("no such file".into(), true),
                    }
                }
                ("move_file", _) => match (arg("source"), arg("destination")) {
                    (Some(from), Some(to)) => match files.remove(&from) {
                        Some(t) => {
                            files.insert(to.clone(), t);
                            text_result(format!("moved {from} to {to}"), false)
                        }
                        None => text_result("no such file".into(), true),
                    },
                    _ => text_result("missing source or destination".into(), true),
                },
                _ => text_result("bad call".into(), true),
            })
        })
    }
}

fn spec(id: &str) -> UpstreamSpec {
    in_process_spec(id, true)
}

/// The specification of an in-process upstream `id` (a placeholder stdio command the
/// harness's connector recognizes by id; nothing is started), its tools exposed as
/// `id__tool` when `namespace`.
#[must_use]
pub fn in_process_spec(id: &str, namespace: bool) -> UpstreamSpec {
    UpstreamSpec {
        id: id.into(),
        transport: UpstreamTransport::Stdio {
            command: format!("in-process-{id}"),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace,
        protocol: Default::default(),
    }
}

/// Fill `buf` from the operating system, reporting failure.
fn fill(buf: &mut [u8], ok: &mut bool) {
    if getrandom::fill(buf).is_err() {
        *ok = false;
    }
}

/// A fresh key ring (one key per purpose).
///
/// # Errors
/// [`StackError::Random`] if the random source fails.
pub fn fresh_keys() -> Result<KeyRing, StackError> {
    let mut ok = true;
    let ring = KeyRing::generate(&mut |b: &mut [u8]| fill(b, &mut ok));
    if ok {
        Ok(ring)
    } else {
        Err(StackError::Random)
    }
}

/// Add a newly generated key for `purpose` to `ring` (it becomes the active one).
///
/// # Errors
/// [`StackError::Random`] if the random source fails.
pub fn rotate(
    ring: &mut KeyRing,
    purpose: secureclaw_core::keys::KeyPurpose,
) -> Result<secureclaw_core::keys::KeyId, StackError> {
    let mut ok = true;
    let id = ring.add_generated(purpose, &mut |b: &mut [u8]| fill(b, &mut ok));
    if ok { Ok(id) } else { Err(StackError::Random) }
}

/// What every gateway of one stack shares.
struct Parts<'a> {
    db: &'a std::path::Path,
    config: &'a GatewayConfig,
    office: &'a Arc<RmcpUpstream>,
    counter: &'a Arc<Counter>,
    files: &'a Arc<Files>,
    clock: &'a ManualClock,
}

impl Parts<'_> {
    async fn gateway(
        &self,
        keys: Arc<KeyRing>,
        extra_policies: &[(String, String)],
    ) -> Result<Gateway, StackError> {
        let store = Arc::new(
            SqliteStore::open(self.db, keys.clone())
                .map_err(|e| StackError::Store(e.to_string()))?,
        );
        let policy =
            CedarPolicy::load(extra_policies).map_err(|e| StackError::Policy(e.to_string()))?;
        let office: Arc<dyn Upstream> = self.office.clone();
        let counter: Arc<dyn Upstream> = self.counter.clone();
        let files: Arc<dyn Upstream> = self.files.clone();
        // The stack's connector: the gateway's executor gets the in-process servers by id (the
        // stack keeps its own handles only to count effects and restart the gateway).
        let connect = move |spec: &UpstreamSpec| -> Result<Box<dyn Upstream>, UpstreamError> {
            let up = match spec.id.as_str() {
                "office" => office.clone(),
                "counter" => counter.clone(),
                "files" => files.clone(),
                other => {
                    return Err(UpstreamError::Start {
                        id: other.to_owned(),
                        message: "not an in-process upstream of the stack".into(),
                    });
                }
            };
            Ok(Box::new(up))
        };
        Ok(Gateway::start(
            keys,
            store,
            Arc::new(policy),
            self.config.clone(),
            vec![spec("office"), spec("counter"), spec("files")],
            &connect,
            self.clock.clock(),
        )
        .await?)
    }
}

/// The in-process deployment under evaluation.
pub struct Stack {
    dir: tempfile::TempDir,
    db: PathBuf,
    /// The key ring of the main gateway.
    pub keys: Arc<KeyRing>,
    /// The shared clock.
    pub clock: ManualClock,
    /// The gateway configuration ([`Stack::config`]).
    pub config: GatewayConfig,
    office: DemoTools,
    office_upstream: Arc<RmcpUpstream>,
    counter: Arc<Counter>,
    files: Arc<Files>,
    /// The main gateway (default policy set, [`Stack::keys`]).
    pub gateway: Gateway,
    /// A second connection to the main gateway's database, for the harness's own inspection.
    store: Arc<SqliteStore>,
    /// The raw powers of the insecure controls ([`crate::danger`]).
    danger: crate::danger::Backdoor,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// The evaluation configuration: [`GatewayConfig::demo_office`] with a 1 h handle
    /// lifetime ([`EVAL_HANDLE_TTL_MS`]), the operator rule declaring `counter__bump`
    /// target-less and non-destructive, the one declaring `counter__purge` target-less
    /// (and nothing about `destructive`) and the one declaring `files__read_file` a read.
    /// All other limits are the defaults (60 s artifact
    /// freshness, 5 s tolerated skew).
    #[must_use]
    pub fn config() -> GatewayConfig {
        let mut c = GatewayConfig::demo_office();
        c.limits.handle_ttl_ms = EVAL_HANDLE_TTL_MS;
        c.tools.push(ToolRule {
            tool: "counter__bump".into(),
            effect: Some(EffectClass::Effect),
            destructive: Some(false),
            targets: Some(vec![]),
            hidden: false,
            ..ToolRule::default()
        });
        c.tools.push(ToolRule {
            tool: "counter__purge".into(),
            effect: Some(EffectClass::Effect),
            targets: Some(vec![]),
            ..ToolRule::default()
        });
        // The files upstream's read tool is a read because the operator says so; its write
        // tools are unconfigured (`store` sinks, destructive: the task must grant them).
        c.tools.push(ToolRule {
            tool: "files__read_file".into(),
            effect: Some(EffectClass::Read),
            ..ToolRule::default()
        });
        c
    }

    /// Start the stack: temporary directory, fresh keys, store, demo office, gateway.
    ///
    /// # Errors
    /// A [`StackError`] naming the part that failed.
    pub async fn start() -> Result<Self, StackError> {
        let dir = tempfile::tempdir().map_err(StackError::TempDir)?;
        let db = dir.path().join("secureclaw.db");
        let office_path = dir.path().join("office.json");
        let keys = Arc::new(fresh_keys()?);
        let office = DemoTools::new(office_path).map_err(|e| StackError::Office(e.to_string()))?;
        let server = office.clone();
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = ().serve(client_io).await.map_err(|e| StackError::Office(e.to_string()))?;
        let office_upstream = Arc::new(RmcpUpstream::from_client(
            "office",
            "in-process:demo-office",
            client,
        ));
        let clock = ManualClock::new(T0);
        let counter = Arc::new(Counter::default());
        let files = Arc::new(Files::default());
        let config = Self::config();
        let parts = Parts {
            db: &db,
            config: &config,
            office: &office_upstream,
            counter: &counter,
            files: &files,
            clock: &clock,
        };
        let gateway = parts.gateway(keys.clone(), &[]).await?;
        let store = Arc::new(
            SqliteStore::open(&db, keys.clone()).map_err(|e| StackError::Store(e.to_string()))?,
        );
        let danger = crate::danger::Backdoor::new(store.clone(), office_upstream.clone());
        Ok(Self {
            dir,
            db,
            keys,
            clock,
            config,
            office,
            office_upstream,
            counter,
            files,
            gateway,
            store,
            danger,
        })
    }

    /// The action record of `action_id` in the main gateway's database (the harness's check of
    /// what an approver is shown). Read directly: the gateway itself offers no such access.
    ///
    /// # Errors
    /// [`StackError::Store`] if the database cannot be read.
    pub fn action_record(
        &self,
        action_id: &secureclaw_core::artifact::ActionId,
    ) -> Result<Option<secureclaw_core::store::ActionRecord>, StackError> {
        self.store
            .action(action_id)
            .map_err(|e| StackError::Store(e.to_string()))
    }

    /// The main gateway's whole audit log, in order (the harness's check of decision records).
    ///
    /// # Errors
    /// [`StackError::Store`] if the database cannot be read.
    pub fn audit_log(&self) -> Result<Vec<secureclaw_core::audit::AuditRecord>, StackError> {
        self.store
            .audit_records(0, usize::MAX)
            .map_err(|e| StackError::Store(e.to_string()))
    }

    /// **DANGER**: the raw powers of the insecure controls (vault plaintext, the office
    /// upstream connection), for [`crate::danger`] only.
    pub(crate) fn danger(&self) -> &crate::danger::Backdoor {
        &self.danger
    }

    /// Another gateway over a new connection to the same database, with the same clock,
    /// configuration and upstreams, `keys`, and the default policies plus `extra_policies`
    /// `(file, text)`. With the main keys and no extra policies this is a restart.
    ///
    /// # Errors
    /// [`StackError`] if the store, the policy set or the gateway cannot start.
    pub async fn gateway_with(
        &self,
        keys: Arc<KeyRing>,
        extra_policies: &[(String, String)],
    ) -> Result<Gateway, StackError> {
        Parts {
            db: &self.db,
            config: &self.config,
            office: &self.office_upstream,
            counter: &self.counter,
            files: &self.files,
            clock: &self.clock,
        }
        .gateway(keys, extra_policies)
        .await
    }

    /// A gateway of another deployment: its own database and an unrelated key ring (with the
    /// same key ids), sharing only the upstreams, clock and configuration.
    ///
    /// # Errors
    /// As [`Stack::gateway_with`].
    pub async fn foreign_gateway(&self) -> Result<Gateway, StackError> {
        Parts {
            db: &self.dir.path().join("foreign.db"),
            config: &self.config,
            office: &self.office_upstream,
            counter: &self.counter,
            files: &self.files,
            clock: &self.clock,
        }
        .gateway(Arc::new(fresh_keys()?), &[])
        .await
    }

    /// The demo office's state (the effects that really happened).
    pub async fn office(&self) -> DemoState {
        self.office.state().await
    }

    /// Every effect executed so far: e-mails sent, drafts saved, payments made, counter bumps.
    pub async fn effects(&self) -> u64 {
        let s = self.office.state().await;
        let n = s.sent.len() + s.drafts.len() + s.payments.len();
        u64::try_from(n)
            .unwrap_or(u64::MAX)
            .saturating_add(self.counter.effects())
            .saturating_add(self.files.effects())
    }

    /// The `files` upstream (its contents, for the suite's checks).
    #[must_use]
    pub fn files(&self) -> &Files {
        &self.files
    }
}

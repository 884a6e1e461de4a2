//! Issue 11 item 10, "legitimate chains keep flowing": a customer-service workflow that
//! identifies the caller indirectly (τ-bench retail/airline style). The user names themself by
//! name and zip code; every id after that comes from an authoritative field of a read that was
//! itself anchored: the user id from the lookup, order and payment-method ids from the profile,
//! the address from the profile or the order details. Writes along that chain run without a
//! prompt; a write to anything outside it — another user's order, an address the agent typed,
//! a payment method not in the profile, an id from an unanchored lookup — still asks.
//!
//! The operator configuration below is written from the tools' semantics only (what each
//! field *is*), not from the test's data.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

use secureclaw_core::canonical::TaskEnvelope;
use secureclaw_core::handle::HandleId;
use secureclaw_core::keys::KeyRing;
use secureclaw_core::recovery::ReasonCode;
use secureclaw_core::time::UnixMillis;
use secureclaw_gateway::danger::in_process;
use secureclaw_gateway::upstream::BoxFuture;
use secureclaw_gateway::{
    CallOutcome, Gateway, GatewayConfig, ToolOutput, Upstream, UpstreamError, UpstreamSpec,
    UpstreamTool, UpstreamTransport,
};
use secureclaw_policy::CedarPolicy;
use secureclaw_store::{SessionRecord, SqliteStore};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The operator's configuration for the retail server, from the tools' semantics.
const OPERATOR_CONFIG: &str = r##"
[limits]
upstream_timeout_ms = 20000

# Lookups and details are reads (annotations are only hints; the operator says so).
[[tools]]
tool = "retail__find_user_id_by_*"
effect = "read"
[[tools]]
tool = "retail__get_*"
effect = "read"

# Writes to the shop's records: `store` sinks (a later read returns what they wrote), targets
# declared: the record written and every part of a shipping address.
[[tools]]
tool = "retail__modify_pending_order_address"
effect = "effect"
destructive = false
sink = "store"
targets = ["order_id", "address1", "address2", "city", "state", "country", "zip"]
[[tools]]
tool = "retail__modify_user_address"
effect = "effect"
destructive = false
sink = "store"
targets = ["user_id", "address1", "address2", "city", "state", "country", "zip"]
[[tools]]
tool = "retail__cancel_pending_order"
effect = "effect"
destructive = true
sink = "store"
targets = ["order_id"]
[[tools]]
tool = "retail__modify_pending_order_payment"
effect = "effect"
destructive = false
financial = true
sink = "store"
targets = ["order_id", "payment_method_id"]

# A user id is what the lookup answers, and the profile's and order's own `user_id`: the
# user's record key. It may be used to read that user's profile and to change their address.
[[classify]]
upstream = "retail"
tool = "*"
path = "/user_id"
label = "user_id"
allowed_sinks = ["retail__get_user_details", "retail__modify_user_address"]
anchor = true

# The orders listed in a profile are that user's orders (and an order's own id is itself).
[[classify]]
upstream = "retail"
tool = "get_user_details"
path = "/orders"
label = "order_id"
allowed_sinks = ["retail__get_order_details", "retail__cancel_pending_order",
                 "retail__modify_pending_order_address", "retail__modify_pending_order_payment"]
anchor = true
[[classify]]
upstream = "retail"
tool = "get_order_details"
path = "/order_id"
label = "order_id"
allowed_sinks = ["retail__get_order_details", "retail__cancel_pending_order",
                 "retail__modify_pending_order_address", "retail__modify_pending_order_payment"]
anchor = true

# The payment methods in a profile are the user's own.
[[classify]]
upstream = "retail"
tool = "get_user_details"
path = "/payment_methods/*/id"
label = "payment_method_id"
allowed_sinks = ["retail__modify_pending_order_payment"]
anchor = true

# A shipping address — the profile's default address or an order's — is an object: the rule
# applies to every field below it.
[[classify]]
upstream = "retail"
tool = "get_*_details"
path = "/address"
label = "address"
allowed_sinks = ["retail__modify_pending_order_address", "retail__modify_user_address"]
anchor = true

# The profile's e-mail address is the user's own contact (flows nowhere in this workflow).
[[classify]]
upstream = "retail"
tool = "get_user_details"
path = "/email"
label = "email"
anchor = true
"##;

/// The user's request, as the trusted host received it. Only the caller's name and zip code
/// are in it: every id has to come from the chain.
const TASK: &str = "Hi, I am Mia Garcia, zip code 46229. Please ship my pending order to my \
                    default address, make the address of my other order my default address, \
                    pay that order with my Visa card, and then cancel it.";

const MIA: &str = "mia_garcia_4516";
const NOAH: &str = "noah_brown_6181";
const MIA_ORDER_1: &str = "#W5490111";
const MIA_ORDER_2: &str = "#W7387996";
const NOAH_ORDER: &str = "#W7678072";
const MIA_VISA: &str = "credit_card_9513926";
const NOAH_GIFT_CARD: &str = "gift_card_7043371";

fn mia_default_address() -> Value {
    json!({"address1": "537 Main Street", "address2": "Suite 641", "city": "Indianapolis",
           "state": "IN", "country": "USA", "zip": "46229"})
}

fn order_1_address() -> Value {
    json!({"address1": "880 Oak Avenue", "address2": "Apt 12", "city": "Columbus",
           "state": "OH", "country": "USA", "zip": "43215"})
}

/// The shop's records.
struct Shop {
    users: BTreeMap<String, Value>,
    orders: BTreeMap<String, Value>,
}

impl Shop {
    fn new() -> Self {
        let mut users = BTreeMap::new();
        users.insert(
            MIA.to_owned(),
            json!({
                "user_id": MIA,
                "name": {"first_name": "Mia", "last_name": "Garcia"},
                "email": "mia.garcia@example.com",
                "address": mia_default_address(),
                "payment_methods": [
                    {"id": MIA_VISA, "source": "credit_card", "brand": "visa", "last_four": "4012"},
                    {"id": "paypal_3742148", "source": "paypal"}
                ],
                "orders": [MIA_ORDER_1, MIA_ORDER_2]
            }),
        );
        users.insert(
            NOAH.to_owned(),
            json!({
                "user_id": NOAH,
                "name": {"first_name": "Noah", "last_name": "Brown"},
                "email": "noah.brown@example.com",
                "address": {"address1": "1 Elm Road", "address2": "", "city": "Denver",
                            "state": "CO", "country": "USA", "zip": "80279"},
                "payment_methods": [{"id": NOAH_GIFT_CARD, "source": "gift_card"}],
                "orders": [NOAH_ORDER]
            }),
        );
        let order = |id: &str, user: &str, address: Value| {
            json!({
                "order_id": id,
                "user_id": user,
                "status": "pending",
                "address": address,
                "items": [{"name": "T-Shirt", "item_id": "9612497925", "price": 50.1}],
                "payment_history": [],
                // Free text a third party could have written; the e-mail in it is not the
                // profile's authoritative contact.
                "note": "Leave at the door; questions to mia.garcia@example.com"
            })
        };
        let mut orders = BTreeMap::new();
        orders.insert(
            MIA_ORDER_1.to_owned(),
            order(MIA_ORDER_1, MIA, order_1_address()),
        );
        orders.insert(
            MIA_ORDER_2.to_owned(),
            order(MIA_ORDER_2, MIA, mia_default_address()),
        );
        orders.insert(
            NOAH_ORDER.to_owned(),
            order(
                NOAH_ORDER,
                NOAH,
                json!({"address1": "1 Elm Road", "address2": "",
                "city": "Denver", "state": "CO", "country": "USA", "zip": "80279"}),
            ),
        );
        Self { users, orders }
    }
}

/// An in-process retail MCP server.
struct Retail {
    shop: Mutex<Shop>,
    /// Every effect that ran: (tool, arguments as the upstream received them).
    effects: Mutex<Vec<(String, Map<String, Value>)>>,
}

fn tool(name: &str, read_only: bool) -> UpstreamTool {
    UpstreamTool {
        name: name.into(),
        title: None,
        description: Some(format!("retail tool {name}")),
        input_schema: serde_json::from_value(json!({"type": "object"})).unwrap(),
        read_only_hint: read_only,
        destructive_hint: !read_only,
        open_world_hint: false,
        output_schema: None,
    }
}

fn output(v: Value) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": v.to_string()})],
        structured: Some(v),
        is_error: false,
    }
}

fn error(message: &str) -> ToolOutput {
    ToolOutput {
        content: vec![json!({"type": "text", "text": message})],
        structured: None,
        is_error: true,
    }
}

fn address_of(a: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for k in ["address1", "address2", "city", "state", "country", "zip"] {
        out.insert(k.to_owned(), a.get(k).cloned().unwrap_or(Value::Null));
    }
    Value::Object(out)
}

impl Retail {
    fn run(&self, name: &str, a: &Map<String, Value>) -> ToolOutput {
        let s = |k: &str| {
            a.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut shop = self.shop.lock().unwrap();
        match name {
            "find_user_id_by_name_zip" => shop
                .users
                .values()
                .find(|u| {
                    u["name"]["first_name"] == json!(s("first_name"))
                        && u["name"]["last_name"] == json!(s("last_name"))
                        && u["address"]["zip"] == json!(s("zip"))
                })
                .map_or_else(
                    || error("user not found"),
                    |u| output(json!({"user_id": u["user_id"]})),
                ),
            "find_user_id_by_email" => shop
                .users
                .values()
                .find(|u| u["email"] == json!(s("email")))
                .map_or_else(
                    || error("user not found"),
                    |u| output(json!({"user_id": u["user_id"]})),
                ),
            "get_user_details" => shop
                .users
                .get(&s("user_id"))
                .map_or_else(|| error("user not found"), |u| output(u.clone())),
            "get_order_details" => shop
                .orders
                .get(&s("order_id"))
                .map_or_else(|| error("order not found"), |o| output(o.clone())),
            "modify_pending_order_address" => match shop.orders.get_mut(&s("order_id")) {
                Some(o) => {
                    o["address"] = address_of(a);
                    output(json!({"order_id": o["order_id"], "status": "pending"}))
                }
                None => error("order not found"),
            },
            "modify_user_address" => match shop.users.get_mut(&s("user_id")) {
                Some(u) => {
                    u["address"] = address_of(a);
                    output(json!({"user_id": u["user_id"], "updated": true}))
                }
                None => error("user not found"),
            },
            "modify_pending_order_payment" => match shop.orders.get_mut(&s("order_id")) {
                Some(o) => {
                    o["payment_history"] = json!([{"payment_method_id": s("payment_method_id")}]);
                    output(json!({"order_id": o["order_id"], "paid": true}))
                }
                None => error("order not found"),
            },
            "cancel_pending_order" => match shop.orders.get_mut(&s("order_id")) {
                Some(o) => {
                    o["status"] = json!("cancelled");
                    output(json!({"order_id": o["order_id"], "status": "cancelled"}))
                }
                None => error("order not found"),
            },
            other => error(&format!("unknown tool {other}")),
        }
    }
}

impl Upstream for Retail {
    fn id(&self) -> &str {
        "retail"
    }
    fn destination(&self) -> &str {
        "in-process:retail"
    }
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<UpstreamTool>, UpstreamError>> {
        Box::pin(async move {
            Ok(vec![
                tool("find_user_id_by_name_zip", true),
                tool("find_user_id_by_email", true),
                tool("get_user_details", true),
                tool("get_order_details", true),
                tool("modify_pending_order_address", false),
                tool("modify_user_address", false),
                tool("modify_pending_order_payment", false),
                tool("cancel_pending_order", false),
            ])
        })
    }
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, UpstreamError>> {
        Box::pin(async move {
            let out = self.run(&name, &arguments);
            if !name.starts_with("find_") && !name.starts_with("get_") {
                self.effects.lock().unwrap().push((name, arguments));
            }
            Ok(out)
        })
    }
}

struct Deployment {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    retail: Arc<Retail>,
    gw: Gateway,
    /// A second gateway on the same database file and upstream (another replica).
    replica: Gateway,
    db: std::path::PathBuf,
}

async fn deploy() -> Deployment {
    deploy_with(|_| {}).await
}

/// [`deploy`] with the operator configuration adjusted by `adjust`.
async fn deploy_with(adjust: impl FnOnce(&mut GatewayConfig)) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(KeyRing::generate(&mut |b: &mut [u8]| {
        getrandom::fill(b).unwrap();
    }));
    let db = dir.path().join("sc.db");
    let store = Arc::new(SqliteStore::open(&db, keys.clone()).unwrap());
    let mut config: GatewayConfig = toml::from_str(OPERATOR_CONFIG).unwrap();
    adjust(&mut config);
    let retail = Arc::new(Retail {
        shop: Mutex::new(Shop::new()),
        effects: Mutex::new(Vec::new()),
    });
    let up: Arc<dyn Upstream> = retail.clone();
    let spec = UpstreamSpec {
        id: "retail".into(),
        transport: UpstreamTransport::Stdio {
            command: "in-process-retail".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
        },
        namespace: true,
        protocol: Default::default(),
    };
    let (specs, connector) = in_process(vec![(spec, up)]);
    let gw = Gateway::start(
        keys.clone(),
        store.clone(),
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config.clone(),
        specs.clone(),
        &connector,
        Arc::new(|| UnixMillis(1_800_000_000_000)),
    )
    .await
    .unwrap();
    let replica = Gateway::start(
        keys.clone(),
        Arc::new(SqliteStore::open(&db, keys).unwrap()),
        Arc::new(CedarPolicy::load(&[]).unwrap()),
        config,
        specs,
        &connector,
        Arc::new(|| UnixMillis(1_800_000_000_000)),
    )
    .await
    .unwrap();
    Deployment {
        _dir: dir,
        store,
        retail,
        gw,
        replica,
        db,
    }
}

impl Deployment {
    /// The customer's session. The task grants the destructive and financial tools it asks
    /// for by name ("pay that order", "cancel it"): without the grant they would ask even
    /// with every target anchored.
    async fn session(&self) -> SessionRecord {
        self.gw
            .open_session(
                "support-agent",
                TaskEnvelope {
                    request: TASK.into(),
                    granted_tools: vec![
                        // "cancel it"
                        "retail__cancel_pending_order".into(),
                        // "pay that order with my Visa card"
                        "retail__modify_pending_order_payment".into(),
                    ],
                    ..TaskEnvelope::default()
                },
            )
            .await
            .unwrap()
    }

    async fn call(&self, s: &SessionRecord, tool: &str, args: Value) -> CallOutcome {
        self.call_on(&self.gw, s, tool, args).await
    }

    /// [`Deployment::call`] through gateway `gw` (the main one or the replica).
    async fn call_on(
        &self,
        gw: &Gateway,
        s: &SessionRecord,
        tool: &str,
        args: Value,
    ) -> CallOutcome {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let o = gw
            .call(
                s,
                &format!("retail__{tool}"),
                args,
                &secureclaw_gateway::CallMeta::committed(None),
            )
            .await;
        // The runtime never sees a protected id, address part or e-mail address.
        let seen = match &o {
            CallOutcome::Completed { output, .. } => {
                json!({"c": output.content, "s": output.structured}).to_string()
            }
            CallOutcome::Pending(r) | CallOutcome::Denied(r) | CallOutcome::Deferred(r) => {
                format!("{}{}", serde_json::to_string(r).unwrap(), r.render())
            }
            CallOutcome::Shadowed { .. } => String::new(),
        };
        for secret in [
            MIA,
            NOAH,
            MIA_ORDER_1,
            MIA_ORDER_2,
            NOAH_ORDER,
            MIA_VISA,
            NOAH_GIFT_CARD,
            "537 Main Street",
            "880 Oak Avenue",
            "mia.garcia@example.com",
        ] {
            assert!(!seen.contains(secret), "{tool} showed `{secret}`: {seen}");
        }
        o
    }

    async fn read(&self, s: &SessionRecord, tool: &str, args: Value) -> Value {
        self.read_on(&self.gw, s, tool, args).await
    }

    /// [`Deployment::read`] through gateway `gw` (the main one or the replica).
    async fn read_on(&self, gw: &Gateway, s: &SessionRecord, tool: &str, args: Value) -> Value {
        match self.call_on(gw, s, tool, args).await {
            CallOutcome::Completed { output, .. } => {
                assert!(!output.is_error, "{tool}: {output:?}");
                output.structured.clone().unwrap()
            }
            other => panic!("{tool}: expected completed, got {other:?}"),
        }
    }

    fn anchored(&self, handle: &Value) -> bool {
        let id = HandleId(handle.as_str().unwrap().to_owned());
        self.store.handle(&id).unwrap().unwrap().anchored
    }

    fn effects(&self) -> usize {
        self.retail.effects.lock().unwrap().len()
    }
}

#[track_caller]
fn ran(o: &CallOutcome) {
    match o {
        CallOutcome::Completed { output, action_id } => {
            assert!(!output.is_error, "{output:?}");
            assert!(action_id.is_some());
        }
        other => panic!("expected the write to run without a prompt, got {other:?}"),
    }
}

#[track_caller]
fn asks(o: &CallOutcome) {
    match o {
        CallOutcome::Pending(r) => {
            assert_eq!(r.reason, ReasonCode::ConfirmationRequired, "{r:?}");
            assert_eq!(r.status, "pending_confirmation");
        }
        other => panic!("expected pending(confirmation_required), got {other:?}"),
    }
}

/// The handles of an address summary, in a call's argument form.
fn address_args(address: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for k in ["address1", "address2", "city", "state", "country", "zip"] {
        let h = address[k].as_str().unwrap();
        assert!(
            h.starts_with("hdl_fld_"),
            "`{k}` is not a handle: {address}"
        );
        out.insert(k.to_owned(), json!(h));
    }
    out
}

fn with(mut base: Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        base.extend(extra);
    }
    Value::Object(base)
}

#[tokio::test]
async fn the_callers_own_chain_runs_without_a_prompt() {
    let d = deploy().await;
    let s = d.session().await;

    // 1. Lookup by name and zip code, all three named in the task: an anchored read.
    let found = d
        .read(
            &s,
            "find_user_id_by_name_zip",
            json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"}),
        )
        .await;
    let user = found["user_id"].clone();
    assert!(d.anchored(&user), "the lookup's user id is anchored");

    // 2. The profile, read with that handle: anchored through the handle.
    let profile = d
        .read(&s, "get_user_details", json!({"user_id": user}))
        .await;
    // One value, one handle per session: the profile's own user id is the lookup's handle.
    assert_eq!(profile["user_id"], user);
    let orders = profile["orders"].as_array().unwrap().clone();
    assert_eq!(orders.len(), 2);
    let (order_1, order_2) = (orders[0].clone(), orders[1].clone());
    let visa = profile["payment_methods"][0]["id"].clone();
    for h in [&order_1, &order_2, &visa] {
        assert!(d.anchored(h), "{h} from the anchored profile is anchored");
    }
    // The rule on the `/address` object covers every field below it.
    let default_address = address_args(&profile["address"]);
    for h in default_address.values() {
        assert!(d.anchored(h));
    }

    // 3. Order details, read with an order handle: anchored too.
    let details_1 = d
        .read(&s, "get_order_details", json!({"order_id": order_1}))
        .await;
    assert_eq!(details_1["order_id"], order_1, "same value, same handle");
    assert_eq!(details_1["user_id"], user);
    let address_1 = address_args(&details_1["address"]);
    for h in address_1.values() {
        assert!(d.anchored(h));
    }
    let details_2 = d
        .read(&s, "get_order_details", json!({"order_id": order_2}))
        .await;
    // Order 2 ships to the default address: the same handles as the profile's.
    assert_eq!(
        address_args(&details_2["address"]),
        default_address,
        "the caller's own address is recognisable across reads"
    );
    // The profile's e-mail is authoritative; the same address in an order's free-text note
    // gets a handle of its own (never the anchored one).
    let note = details_1["note"].as_str().unwrap();
    assert!(!note.contains(profile["email"].as_str().unwrap()), "{note}");
    assert!(d.anchored(&profile["email"]));

    // 4. Writes along the chain: no prompt.
    let before = d.effects();
    ran(&d
        .call(
            &s,
            "modify_pending_order_address",
            with(default_address.clone(), json!({"order_id": order_1})),
        )
        .await);
    ran(&d
        .call(
            &s,
            "modify_user_address",
            with(address_1.clone(), json!({"user_id": user})),
        )
        .await);
    ran(&d
        .call(
            &s,
            "modify_pending_order_payment",
            json!({"order_id": order_2, "payment_method_id": visa}),
        )
        .await);
    ran(&d
        .call(
            &s,
            "cancel_pending_order",
            json!({"order_id": order_2, "reason": "no longer needed"}),
        )
        .await);
    assert_eq!(d.effects(), before + 4);
    // The upstream received the real values.
    let shop = d.retail.shop.lock().unwrap();
    assert_eq!(shop.orders[MIA_ORDER_1]["address"], mia_default_address());
    assert_eq!(shop.users[MIA]["address"], order_1_address());
    assert_eq!(
        shop.orders[MIA_ORDER_2]["payment_history"][0]["payment_method_id"],
        json!(MIA_VISA)
    );
    assert_eq!(shop.orders[MIA_ORDER_2]["status"], json!("cancelled"));
    assert_eq!(shop.orders[NOAH_ORDER]["status"], json!("pending"));
}

#[tokio::test]
async fn writes_outside_the_chain_still_ask() {
    let d = deploy().await;
    let s = d.session().await;
    let user = d
        .read(
            &s,
            "find_user_id_by_name_zip",
            json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"}),
        )
        .await["user_id"]
        .clone();
    let profile = d
        .read(&s, "get_user_details", json!({"user_id": user}))
        .await;
    let order_1 = profile["orders"][0].clone();
    let default_address = address_args(&profile["address"]);

    // Another user's order id (the agent typed it, e.g. from an injected message).
    asks(
        &d.call(
            &s,
            "cancel_pending_order",
            json!({"order_id": NOAH_ORDER, "reason": "no longer needed"}),
        )
        .await,
    );
    asks(
        &d.call(
            &s,
            "modify_pending_order_address",
            with(default_address.clone(), json!({"order_id": NOAH_ORDER})),
        )
        .await,
    );
    // An address from free text: the agent wrote it, nothing anchors it.
    asks(
        &d.call(
            &s,
            "modify_user_address",
            json!({"user_id": user, "address1": "1 Attacker Road", "address2": "",
                   "city": "Springfield", "state": "IL", "country": "USA", "zip": "62701"}),
        )
        .await,
    );
    // One typed field among handles is enough to ask.
    let mut mixed = default_address.clone();
    mixed.insert("address1".into(), json!("1 Attacker Road"));
    asks(
        &d.call(
            &s,
            "modify_pending_order_address",
            with(mixed, json!({"order_id": order_1})),
        )
        .await,
    );
    // A payment method that is not in the profile.
    asks(
        &d.call(
            &s,
            "modify_pending_order_payment",
            json!({"order_id": order_1, "payment_method_id": NOAH_GIFT_CARD}),
        )
        .await,
    );

    // A chain that starts from an unanchored lookup (an e-mail address the task does not
    // name) stays unanchored all the way down.
    let other = d
        .read(
            &s,
            "find_user_id_by_email",
            json!({"email": "noah.brown@example.com"}),
        )
        .await["user_id"]
        .clone();
    assert!(!d.anchored(&other));
    let other_profile = d
        .read(&s, "get_user_details", json!({"user_id": other}))
        .await;
    let other_order = other_profile["orders"][0].clone();
    assert!(!d.anchored(&other_order));
    let other_details = d
        .read(&s, "get_order_details", json!({"order_id": other_order}))
        .await;
    assert!(!d.anchored(&other_details["address"]["address1"]));
    asks(
        &d.call(
            &s,
            "cancel_pending_order",
            json!({"order_id": other_order, "reason": "no longer needed"}),
        )
        .await,
    );
    let gift = other_profile["payment_methods"][0]["id"].clone();
    asks(
        &d.call(
            &s,
            "modify_pending_order_payment",
            json!({"order_id": order_1, "payment_method_id": gift}),
        )
        .await,
    );
    // An anchored handle next to a selector nobody named does not anchor the read.
    let widened = d
        .read(
            &s,
            "get_user_details",
            json!({"user_id": user, "view": "full"}),
        )
        .await;
    assert!(!d.anchored(&widened["orders"][0]));
    assert_ne!(widened["orders"][0], order_1);
    asks(
        &d.call(
            &s,
            "cancel_pending_order",
            json!({"order_id": widened["orders"][1], "reason": "no longer needed"}),
        )
        .await,
    );

    // Nothing ran.
    assert_eq!(d.effects(), 0);

    // Positive control: the same session's own chain still runs.
    ran(&d
        .call(
            &s,
            "modify_pending_order_address",
            with(default_address, json!({"order_id": order_1})),
        )
        .await);
    assert_eq!(d.effects(), 1);
}

#[tokio::test]
async fn an_ungranted_destructive_write_asks_even_when_anchored() {
    let d = deploy().await;
    // Same task text, no grant.
    let s =
        d.gw.open_session(
            "support-agent",
            TaskEnvelope {
                request: TASK.into(),
                ..TaskEnvelope::default()
            },
        )
        .await
        .unwrap();
    let user = d
        .read(
            &s,
            "find_user_id_by_name_zip",
            json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"}),
        )
        .await["user_id"]
        .clone();
    let profile = d
        .read(&s, "get_user_details", json!({"user_id": user}))
        .await;
    let order_2 = profile["orders"][1].clone();
    assert!(d.anchored(&order_2));
    asks(
        &d.call(
            &s,
            "cancel_pending_order",
            json!({"order_id": order_2, "reason": "no longer needed"}),
        )
        .await,
    );
    assert_eq!(d.effects(), 0);
}

#[tokio::test]
async fn handles_are_per_session_and_a_written_object_does_not_anchor() {
    let d = deploy().await;
    let s1 = d.session().await;
    let s2 = d.session().await;
    let lookup = json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"});
    let u1 = d
        .read(&s1, "find_user_id_by_name_zip", lookup.clone())
        .await["user_id"]
        .clone();
    let u1_again = d
        .read(&s1, "find_user_id_by_name_zip", lookup.clone())
        .await["user_id"]
        .clone();
    let u2 = d.read(&s2, "find_user_id_by_name_zip", lookup).await["user_id"].clone();
    assert_eq!(u1, u1_again, "same session, same value, same handle");
    assert_ne!(u1, u2, "two sessions never share a handle");

    // The session writes the user's record; reading it back is no longer anchored, and the
    // address it returns is not anchored either (nor the same handles).
    let profile = d
        .read(&s1, "get_user_details", json!({"user_id": u1}))
        .await;
    let address = address_args(&profile["address"]);
    ran(&d
        .call(
            &s1,
            "modify_user_address",
            with(address.clone(), json!({"user_id": u1})),
        )
        .await);
    let again = d
        .read(&s1, "get_user_details", json!({"user_id": u1}))
        .await;
    assert!(!d.anchored(&again["address"]["address1"]));
    assert_ne!(again["address"]["address1"], profile["address"]["address1"]);
    assert!(!d.anchored(&again["orders"][0]));
    // The other session is unaffected.
    let other = d
        .read(&s2, "get_user_details", json!({"user_id": u2}))
        .await;
    assert!(d.anchored(&other["orders"][0]));
}

/// Red-team F13: the values a session wrote are remembered in a bounded set
/// (`max_written_values_per_session`). Once it is full the session's reads are never anchored
/// (fail closed: a forgotten value could otherwise be written and read back as anchored), even
/// reads of objects it did not write; with room left, such a read stays anchored (control).
#[tokio::test]
async fn a_full_written_set_fails_closed() {
    for (limit, anchored_after) in [(65_536, true), (1, false)] {
        let d = deploy_with(|c| c.limits.max_written_values_per_session = limit).await;
        let s = d.session().await;
        let lookup = json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"});
        let u = d.read(&s, "find_user_id_by_name_zip", lookup).await["user_id"].clone();
        let profile = d.read(&s, "get_user_details", json!({"user_id": u})).await;
        let order = profile["orders"][0].clone();
        assert!(d.anchored(&order));
        let address = address_args(&profile["address"]);
        ran(&d
            .call(
                &s,
                "modify_user_address",
                with(address, json!({"user_id": u})),
            )
            .await);
        let details = d
            .read(&s, "get_order_details", json!({"order_id": order}))
            .await;
        assert_eq!(
            d.anchored(&details["order_id"]),
            anchored_after,
            "limit {limit}: {details}"
        );
    }
}

/// Issue 13: the written set lives in the store. A value the session wrote through one gateway
/// (the user's address, to the user's record) does not anchor a read of the record through
/// another gateway on the same database, and the address that read returns is neither
/// anchored nor on its old handle. Positive control: before the write, the same read through
/// the other gateway is anchored.
#[tokio::test]
async fn a_value_written_through_one_gateway_does_not_anchor_on_another() {
    let d = deploy().await;
    let s = d.session().await;
    let lookup = json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"});
    let u = d.read(&s, "find_user_id_by_name_zip", lookup).await["user_id"].clone();
    let profile = d
        .read_on(&d.replica, &s, "get_user_details", json!({"user_id": u}))
        .await;
    assert!(
        d.anchored(&profile["address"]["address1"]),
        "positive control"
    );
    assert!(d.anchored(&profile["orders"][0]), "positive control");
    let address = address_args(&profile["address"]);
    ran(&d
        .call(
            &s,
            "modify_user_address",
            with(address, json!({"user_id": u})),
        )
        .await);
    let again = d
        .read_on(&d.replica, &s, "get_user_details", json!({"user_id": u}))
        .await;
    assert!(!d.anchored(&again["address"]["address1"]), "{again}");
    assert_ne!(again["address"]["address1"], profile["address"]["address1"]);
    assert!(!d.anchored(&again["orders"][0]), "{again}");
}

/// The written set fails closed: with its values unavailable (the table dropped behind the
/// store's back) a store effect is not sent (`store_unavailable`: what it writes cannot be
/// recorded), and a read that would be anchored is not (every value may be the session's
/// own). The positive control is the first read, anchored while the store works.
#[tokio::test]
async fn an_unavailable_written_set_fails_closed() {
    let d = deploy().await;
    let s = d.session().await;
    let lookup = json!({"first_name": "Mia", "last_name": "Garcia", "zip": "46229"});
    let u = d.read(&s, "find_user_id_by_name_zip", lookup).await["user_id"].clone();
    let profile = d.read(&s, "get_user_details", json!({"user_id": u})).await;
    assert!(d.anchored(&profile["orders"][0]), "positive control");
    rusqlite::Connection::open(&d.db)
        .unwrap()
        .execute_batch("DROP TABLE written_values")
        .unwrap();
    let o = d
        .call(
            &s,
            "modify_user_address",
            with(address_args(&profile["address"]), json!({"user_id": u})),
        )
        .await;
    match &o {
        CallOutcome::Denied(r) => assert_eq!(r.reason, ReasonCode::StoreUnavailable, "{r:?}"),
        other => panic!("expected store_unavailable, got {other:?}"),
    }
    assert_eq!(d.effects(), 0, "nothing was written");
    let again = d
        .read_on(&d.replica, &s, "get_user_details", json!({"user_id": u}))
        .await;
    assert!(!d.anchored(&again["orders"][0]), "{again}");
}

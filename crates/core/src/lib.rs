//! # SecureClaw trusted core
//!
//! The pure, I/O-free heart of the SecureClaw gateway (arXiv 2606.09549 §3). Everything that
//! decides whether a value may leave the vault or an effect may happen lives here, so that it
//! can be reviewed and tested without a runtime, a database or a clock:
//!
//! - [`canonical`]: the canonical request ρ and its RFC 8785 bytes;
//! - [`keys`]: the key ring (key ids, purposes, rotation, retirement);
//! - [`binding`]: the keyed binding digest over canonical bytes;
//! - [`artifact`]: the authorization artifact, sealed with HMAC-SHA256;
//! - [`confirmation`]: trusted confirmations bound to (action id, binding digest);
//! - [`acceptance`]: the executor's acceptance predicate and the [`acceptance::CommitProof`]
//!   that only it can build;
//! - [`handle`]: handle ids, records, sink constraints and resolution;
//! - [`detect`], [`classify`] and [`summary`]: classification and the summary operator D;
//! - [`anchor`]: whether an effect target is anchored in the task envelope;
//! - [`policy`]: the policy-engine trait and the facts it decides on;
//! - [`recovery`]: reason codes and deny-aware recovery templates;
//! - [`audit`]: audit records and their hash chain;
//! - [`vault`]: AEAD sealing of protected values at rest;
//! - [`store`]: the storage traits (sessions, vault and handles, actions and approvals, the
//!   single-use ledger, the audit sink) and the records they hold;
//! - [`contract`], [`labeler`], [`monitor`] and [`exposure`]: issue-time privacy contracts for
//!   speculative calls (Ghost Tool Calls, arXiv 2606.02483): labels, κ, `decide`, the event
//!   lifecycle and branch table, the labeler and rewrites, the composed issue-time monitor,
//!   observer projections and marginal exposure.
//!
//! Clock and randomness are always passed in ([`time::UnixMillis`], `&mut dyn FnMut(&mut [u8])`);
//! storage and policy are traits implemented by other crates.

pub mod acceptance;
pub mod anchor;
pub mod artifact;
pub mod audit;
pub mod binding;
pub mod canonical;
pub mod classify;
pub mod confirmation;
pub mod contract;
pub mod detect;
pub mod encoding;
pub mod exposure;
pub mod handle;
pub mod keys;
pub mod labeler;
pub mod monitor;
pub mod normalize;
pub mod policy;
pub mod protect;
pub mod rawjson;
pub mod recovery;
pub mod store;
pub mod summary;
pub mod task_state;
pub mod time;
pub mod topics;
pub mod vault;

pub use acceptance::{CommitProof, accept};
pub use artifact::{ActionId, AuthorizationArtifact};
pub use binding::BindingDigest;
pub use canonical::{CanonicalRequest, TaskEnvelope};
pub use keys::{KeyId, KeyPurpose, KeyRing};
pub use recovery::{ReasonCode, Recovery};
pub use time::UnixMillis;

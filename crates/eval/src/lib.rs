//! # SecureClaw evaluation harnesses
//!
//! The commit-path **bypass suite** (`secureclaw bypass`): the SecureClaw paper's Table 17
//! (§A.9), the attacks the authors' suite never tried, and the payment case study of Table 18
//! (§A.10), run against the real stack — in process ([`stack::Stack`]) or a running
//! `secureclaw serve` through its HTTP API ([`target::Target::Http`]).
//!
//! - [`bypass`]: the cases and [`bypass::run`];
//! - [`payment`]: the payment case study, boundary on and off;
//! - [`semantics`]: authorization semantics (confirmation, targets, provenance, sinks);
//! - [`report`]: results, the printed table and the JSON report;
//! - [`target`]: the two targets behind one interface;
//! - [`stack`]: the in-process deployment;
//! - [`attack`]: artifact surgery and other attack helpers;
//! - `danger` (private): the deliberately insecure controls (the boundary-off executor and the
//!   stack's raw database and upstream access), named as rustls names its escape hatches;
//! - [`http`]: a minimal HTTP/1.1 client;
//! - [`ghost`]: the Ghost Tool Calls evaluation (`secureclaw eval ghost`);
//! - [`lane`]: the shared shape of the in-process benchmark lanes (trusted driver, untrusted
//!   runtime over MCP, the benchmark's own scoring);
//! - [`asb`]: Agent Security Bench through the gateway (`secureclaw eval asb`);
//! - [`agentleak`]: AgentLeak's 1,000 scenarios through the gateway, scored by the pip
//!   package `agentleak` (`secureclaw eval agentleak`).

pub mod agentleak;
pub mod asb;
pub mod attack;
pub mod bypass;
/// **DANGER**: deliberately insecure evaluation controls, private to this crate.
pub(crate) mod danger;
pub mod ghost;
pub mod http;
pub mod lane;
mod mrtr;
pub mod payment;
pub mod report;
pub mod semantics;
pub mod stack;
pub mod summary;
pub mod target;

pub use bypass::{run, run_in_process};
pub use report::{CaseResult, Expect, Observed, Report, Summary};
pub use target::Target;

//! **DANGER — escape hatches for tests, benchmarks and examples; never in a deployment.**
//!
//! Named as rustls names its own (`rustls::client::danger`): a reader who sees `danger::` at a
//! call site knows the code there is outside the sealed effect boundary (issue 13). A
//! deployment's upstreams are built inside [`crate::Gateway::start`] by
//! [`crate::RmcpConnector`] and owned by the executor alone; nothing else holds them.

use crate::config::UpstreamSpec;
use crate::upstream::{Connector, Upstream, UpstreamError};
use std::sync::Arc;

/// The specs of `pairs` and a connector that hands the gateway each in-process upstream by
/// its spec's id. The caller keeps its own handle on each upstream, so it can reach the
/// upstream around the executor (to inspect a fake, or to play a compromised tool).
/// For tests, benchmarks, examples and harnesses that run their upstreams in the same process;
/// a spec without a pair fails to connect ([`UpstreamError::Start`]).
pub fn in_process(
    pairs: Vec<(UpstreamSpec, Arc<dyn Upstream>)>,
) -> (Vec<UpstreamSpec>, impl Connector) {
    let specs = pairs.iter().map(|(s, _)| s.clone()).collect();
    let connector = move |spec: &UpstreamSpec| -> Result<Box<dyn Upstream>, UpstreamError> {
        pairs
            .iter()
            .find(|(s, _)| s.id == spec.id)
            .map(|(_, u)| Box::new(Arc::clone(u)) as Box<dyn Upstream>)
            .ok_or_else(|| UpstreamError::Start {
                id: spec.id.clone(),
                message: "no in-process upstream".into(),
            })
    };
    (specs, connector)
}

//! `secureclaw-demo-tools --state PATH`: the demo office MCP tool server on stdio.
//!
//! Serves until stdin closes. The state file is created with seeded data when missing.
//! Diagnostics go to stderr; stdout carries only MCP messages.

use std::{path::PathBuf, process::ExitCode};

const USAGE: &str = "usage: secureclaw-demo-tools --state PATH";

/// The state file path from `--state PATH` or `--state=PATH`, or `None` on any other argument
/// list.
fn state_path(mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<PathBuf> {
    let first = args.next()?;
    let path = if first == "--state" {
        args.next()?
    } else {
        let rest = first.to_str()?.strip_prefix("--state=")?;
        rest.into()
    };
    match args.next() {
        None if !path.is_empty() => Some(PathBuf::from(path)),
        _ => None,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(path) = state_path(std::env::args_os().skip(1)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match secureclaw_demo_tools::serve_stdio(path, None).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message.push_str(": ");
                message.push_str(&cause.to_string());
                source = cause.source();
            }
            eprintln!("secureclaw-demo-tools: {message}");
            ExitCode::FAILURE
        }
    }
}

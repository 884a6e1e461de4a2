//! TLS to the PostgreSQL server (issue 13 item 3: "how an operator points it at their own
//! server, with TLS").
//!
//! The store URL is a libpq-style `postgres://` URL. Two of libpq's parameters that
//! `tokio-postgres` does not read are handled here and removed before it parses the rest:
//!
//! - `sslrootcert=PATH`: a PEM file of the certificate authorities the server's certificate
//!   must chain to (a managed database's CA bundle, or a private CA). Without it, the
//!   operating system's trust store is used.
//! - `sslmode=verify-full` and `sslmode=verify-ca`: read as `require`.
//!
//! Whatever the mode says, a TLS connection is always verified in full: the certificate must
//! chain to a trusted root and name the host (rustls' `WebPkiServerVerifier`; there is no
//! unverified mode). `sslmode=require` (or `verify-*`) refuses a server that does not offer
//! TLS, so a network attacker cannot downgrade the connection.
//!
//! The default is safe: with no `sslmode` in the URL, a server on a loopback address or a
//! Unix socket (every host, and every `hostaddr`, local) is reached without TLS, as before —
//! the traffic never leaves the machine, and a local server's self-signed certificate (Debian
//! and Ubuntu turn `ssl` on with a "snakeoil" certificate) could not be verified anyway — and
//! any other host **requires** TLS. An operator who runs the database across a network they
//! trust writes `sslmode=disable` explicitly; `sslmode=prefer` takes TLS when the server
//! offers it, verified like any other.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use secureclaw_core::store::StoreError;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

/// A parsed store URL: the driver's connection settings, with the TLS mode the gateway
/// decided (module docs), and where the trusted roots come from.
#[derive(Debug)]
pub(crate) struct StoreUrl {
    /// What `tokio-postgres` connects with (its `ssl_mode` already set).
    pub(crate) config: tokio_postgres::Config,
    /// `sslrootcert`: a PEM file of trusted authorities (`None`: the system's).
    pub(crate) root_cert: Option<PathBuf>,
}

fn invalid(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable(format!("postgres url: {}", message.into()))
}

impl StoreUrl {
    /// Parse `url` (module docs for the parameters read here).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] naming the problem if the URL does not parse or an
    /// `sslmode` is not one of `disable`, `prefer`, `require`, `verify-ca`, `verify-full`
    /// (`allow` is refused: it would take plain text when TLS fails).
    pub(crate) fn parse(url: &str) -> Result<Self, StoreError> {
        // Where the query starts as the driver reads it: after the credentials, which end at
        // the first `@` after the scheme (a `?` inside a password is not a query; red-team: a
        // password holding `?sslmode=disable&` turned TLS off).
        let scheme_end = url.find("://").map_or(0, |i| i + 3);
        let rest = url.get(scheme_end..).unwrap_or_default();
        let creds_end = rest.find('@').map_or(0, |i| i + 1);
        let query_at = rest
            .get(creds_end..)
            .and_then(|r| r.find('?'))
            .map(|i| scheme_end + creds_end + i);
        let (base, query) = match query_at {
            Some(at) => (url.get(..at).unwrap_or_default(), url.get(at + 1..)),
            None => (url, None),
        };
        let mut root_cert = None;
        let mut explicit_mode = None;
        // Other parameters are passed on byte for byte, as the driver decodes them.
        let mut passed_on: Vec<&str> = Vec::new();
        for segment in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
            let Some((key, value)) = form_urlencoded::parse(segment.as_bytes()).next() else {
                continue;
            };
            match key.as_ref() {
                "sslrootcert" => root_cert = Some(PathBuf::from(value.as_ref())),
                "sslmode" => {
                    let mode = match value.as_ref() {
                        "disable" => SslMode::Disable,
                        "prefer" => SslMode::Prefer,
                        "require" | "verify-ca" | "verify-full" => SslMode::Require,
                        other => {
                            return Err(invalid(format!(
                                "sslmode `{other}` is not supported (use disable, prefer, require, verify-ca or verify-full)"
                            )));
                        }
                    };
                    explicit_mode = Some(mode);
                }
                _ => passed_on.push(segment),
            }
        }
        let driver_url = if passed_on.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", passed_on.join("&"))
        };
        let mut config: tokio_postgres::Config = driver_url
            .parse()
            .map_err(|e: tokio_postgres::Error| invalid(e.to_string()))?;
        // Where the driver really connects: a `hostaddr` overrides the host's address (the
        // host name then only names the server for TLS), so both must be local (red-team:
        // `localhost?hostaddr=192.0.2.2` went out in plain text with the password).
        let local = config.get_hosts().iter().all(is_local)
            && config
                .get_hostaddrs()
                .iter()
                .all(std::net::IpAddr::is_loopback);
        // Naming a CA asks for TLS: without an `sslmode`, `sslrootcert` requires it on a
        // loopback host too (a new user's local test otherwise ran in plain text silently).
        let mode = explicit_mode.unwrap_or(if local && root_cert.is_none() {
            SslMode::Disable
        } else {
            SslMode::Require
        });
        config.ssl_mode(mode);
        Ok(Self { config, root_cert })
    }

    /// The TLS connector for this URL: rustls (ring) with the `sslrootcert` authorities, or
    /// the operating system's.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if the root file cannot be read or holds no certificate,
    /// or, when TLS may be needed and no file is named, the system has no trusted roots.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, StoreError> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                    .and_then(Iterator::collect)
                    .map_err(|e| invalid(format!("sslrootcert `{}`: {e}", path.display())))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(invalid(format!(
                        "sslrootcert `{}` holds no usable certificate",
                        path.display()
                    )));
                }
            }
            None if self.config.get_ssl_mode() != SslMode::Disable => {
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                if roots.is_empty() && self.config.get_ssl_mode() == SslMode::Require {
                    return Err(invalid(
                        "TLS is required but the system has no trusted certificate authorities: name the server's CA with `sslrootcert=PATH`",
                    ));
                }
            }
            None => {}
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS configuration: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// A Unix socket, `localhost` or a loopback address: traffic that never leaves the machine.
fn is_local(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name.eq_ignore_ascii_case("localhost")
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> SslMode {
        StoreUrl::parse(url).unwrap().config.get_ssl_mode()
    }

    /// The default is safe: a remote database requires TLS unless the operator says
    /// otherwise; a local one takes TLS when offered.
    #[test]
    fn remote_hosts_require_tls_by_default() {
        assert_eq!(mode("postgres://u@db.example.com/x"), SslMode::Require);
        assert_eq!(mode("postgres://u@10.0.0.5:5432/x"), SslMode::Require);
        assert_eq!(
            mode("postgres://u@localhost,db.example.com/x"),
            SslMode::Require,
            "one remote host among several is enough"
        );
        assert_eq!(mode("postgres://u@127.0.0.1:5432/x"), SslMode::Disable);
        assert_eq!(mode("postgres://u@[::1]:5432/x"), SslMode::Disable);
        assert_eq!(mode("postgres://u@localhost/x"), SslMode::Disable);
        // The address the driver connects to decides, not the name.
        assert_eq!(
            mode("postgres://u@localhost:5432/x?hostaddr=192.0.2.2"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://u@localhost:5432/x?hostaddr=127.0.0.1"),
            SslMode::Disable
        );
        assert_eq!(
            mode("postgres://u@%2Fvar%2Frun%2Fpostgresql/x"),
            SslMode::Disable
        );
        // Naming a CA asks for TLS, on a loopback host too (new-user finding: it was plain).
        assert_eq!(
            mode("postgres://u@localhost/x?sslrootcert=/etc/ca.pem"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://u@localhost/x?sslrootcert=/etc/ca.pem&sslmode=disable"),
            SslMode::Disable
        );
        // Explicit modes are honoured, libpq's verify modes included.
        assert_eq!(
            mode("postgres://u@localhost/x?sslmode=prefer"),
            SslMode::Prefer
        );
        assert_eq!(
            mode("postgres://u@db.example.com/x?sslmode=disable"),
            SslMode::Disable
        );
        assert_eq!(
            mode("postgres://u@localhost/x?sslmode=verify-full"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://u@localhost/x?sslmode=verify-ca"),
            SslMode::Require
        );
    }

    #[test]
    fn libpq_parameters_are_read_and_the_rest_passed_on() {
        let u = StoreUrl::parse(
            "postgres://u:p@db.example.com:6543/x?sslrootcert=%2Fetc%2Fca.pem&application_name=gw&sslmode=require",
        )
        .unwrap();
        assert_eq!(u.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(u.config.get_application_name(), Some("gw"));
        assert_eq!(u.config.get_ports(), &[6543]);
        assert_eq!(u.config.get_password(), Some(&b"p"[..]));
        // A `?` inside the password does not start the query.
        let u = StoreUrl::parse("postgres://u:Se?sslmode=disable&x=cret@db.example.com:15432/db")
            .unwrap();
        assert_eq!(u.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(
            u.config.get_password(),
            Some(&b"Se?sslmode=disable&x=cret"[..])
        );
        let u = StoreUrl::parse("postgres://u:p?w@localhost/db?sslmode=require").unwrap();
        assert_eq!(u.config.get_ssl_mode(), SslMode::Require);
        for bad in ["allow", "verify", ""] {
            let err = StoreUrl::parse(&format!("postgres://u@h/x?sslmode={bad}")).unwrap_err();
            assert!(err.to_string().contains("sslmode"), "{err}");
        }
        let err = StoreUrl::parse("postgres://u@h/x?nonsense=1").unwrap_err();
        assert!(err.to_string().contains("postgres url"), "{err}");
    }

    #[test]
    fn a_root_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let url = format!(
            "postgres://u@db.example.com/x?sslrootcert={}",
            empty.display()
        );
        let err = StoreUrl::parse(&url).unwrap().connector().err().unwrap();
        assert!(err.to_string().contains("no usable certificate"), "{err}");
        let url = "postgres://u@db.example.com/x?sslrootcert=/nonexistent/ca.pem";
        let err = StoreUrl::parse(url).unwrap().connector().err().unwrap();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }
}

//! TLS to the PostgreSQL server (issue 13 item 3), end to end: the store connects through a
//! TLS-terminating proxy in front of the test server (which itself speaks plain TCP), with a
//! private certificate authority made by `openssl` for the test.
//!
//! - Positive control: with the authority named by `sslrootcert`, the store connects over TLS
//!   and works.
//! - A certificate from another authority, or one that does not name the host, is refused:
//!   TLS is verified in full whatever `sslmode` says.
//! - A server that declines TLS is refused when the URL requires it (no downgrade).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common_pg;

use common_pg::Scratch;
use secureclaw_store::PgStore;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// PostgreSQL's SSLRequest code (protocol §55.2.10).
const SSL_REQUEST: u32 = 80_877_103;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority `name` in `dir`: `NAME-ca.pem` and `NAME-ca.key`.
fn authority(dir: &Path, name: &str) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}-ca.key"),
            "-out",
            &format!("{name}-ca.pem"),
            "-subj",
            &format!("/CN={name} test CA"),
            "-days",
            "2",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    dir.join(format!("{name}-ca.pem"))
}

/// A server certificate for `localhost` only, issued by authority `ca`: (cert, key).
fn server_cert(dir: &Path, ca: &str) -> (PathBuf, PathBuf) {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}-ca.pem"),
            "-CAkey",
            &format!("{ca}-ca.key"),
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    (dir.join("server.pem"), dir.join("server.key"))
}

/// What the proxy does with a client's SSLRequest.
#[derive(Clone, Copy)]
enum Offer {
    /// Accept it and terminate TLS.
    Tls,
    /// Decline it ('N') and go on in plain text, as a server without TLS (or an attacker
    /// stripping it) does.
    Decline,
}

/// A proxy on loopback in front of the PostgreSQL server at `upstream`; counts TLS
/// handshakes that completed.
struct Proxy {
    port: u16,
    handshakes: Arc<AtomicUsize>,
    /// Connections that never asked for TLS.
    plain: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start(upstream: (String, u16), offer: Offer, cert: &Path, key: &Path) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let plain = Arc::new(AtomicUsize::new(0));
        let counted = handshakes.clone();
        let counted_plain_all = plain.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (acceptor, upstream, counted, counted_plain) = (
                    acceptor.clone(),
                    upstream.clone(),
                    counted.clone(),
                    counted_plain_all.clone(),
                );
                tokio::spawn(async move {
                    let mut first = [0u8; 8];
                    if client.read_exact(&mut first).await.is_err() {
                        return;
                    }
                    let code = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    if code != SSL_REQUEST {
                        // A client that did not ask for TLS: relay its startup as it is.
                        counted_plain.fetch_add(1, Ordering::SeqCst);
                        if server.write_all(&first).await.is_ok() {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                        return;
                    }
                    match offer {
                        Offer::Tls => {
                            client.write_all(b"S").await.unwrap();
                            let Ok(mut tls) = acceptor.accept(client).await else {
                                return;
                            };
                            counted.fetch_add(1, Ordering::SeqCst);
                            let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                        }
                        Offer::Decline => {
                            client.write_all(b"N").await.unwrap();
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    }
                });
            }
        });
        Self {
            port,
            handshakes,
            plain,
        }
    }
}

struct Setup {
    db: Scratch,
    upstream: (String, u16),
    user: String,
    dir: tempfile::TempDir,
}

async fn setup() -> Option<Setup> {
    let admin = common_pg::admin_url().await?;
    let config: tokio_postgres::Config = admin.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(_) => {
            eprintln!("SKIPPED: the test server is reached over a Unix socket");
            return None;
        }
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres").to_owned();
    Some(Setup {
        db: Scratch::create(&admin).await,
        upstream: (host, port),
        user,
        dir: tempfile::tempdir().unwrap(),
    })
}

impl Setup {
    fn url(&self, host: &str, port: u16, query: &str) -> String {
        format!(
            "postgres://{}@{host}:{port}/{}?{query}",
            self.user, self.db.name
        )
    }
}

#[tokio::test]
async fn the_store_connects_over_verified_tls() {
    let Some(s) = setup().await else { return };
    let ca = authority(s.dir.path(), "good");
    let (cert, key) = server_cert(s.dir.path(), "good");
    let proxy = Proxy::start(s.upstream.clone(), Offer::Tls, &cert, &key).await;
    let url = s.url(
        "localhost",
        proxy.port,
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let store = PgStore::connect(&url, common_pg::keys())
        .await
        .unwrap_or_else(|e| panic!("TLS connection with the right authority: {e}"));
    assert!(proxy.handshakes.load(Ordering::SeqCst) >= 1);
    // The store works over it (the migrations ran; a replica was registered).
    assert!(store.replica_id().starts_with("rep_"));
    drop(store);
}

#[tokio::test]
async fn a_certificate_the_store_cannot_verify_is_refused() {
    let Some(s) = setup().await else { return };
    let good = authority(s.dir.path(), "good");
    let other = authority(s.dir.path(), "other");
    let (cert, key) = server_cert(s.dir.path(), "good");
    let proxy = Proxy::start(s.upstream.clone(), Offer::Tls, &cert, &key).await;
    // Another authority, even with `sslmode=require` (libpq would not verify there).
    let url = s.url(
        "localhost",
        proxy.port,
        &format!("sslmode=require&sslrootcert={}", other.display()),
    );
    let err = PgStore::connect(&url, common_pg::keys())
        .await
        .expect_err("a certificate from another authority is refused");
    // The error names the reason (the rustls cause), not only the failed handshake.
    let text = err.to_string();
    assert!(
        text.contains("TLS") && text.contains("UnknownIssuer"),
        "{text}"
    );
    // The right authority but a name the certificate does not carry (127.0.0.1).
    let url = s.url(
        "127.0.0.1",
        proxy.port,
        &format!("sslmode=require&sslrootcert={}", good.display()),
    );
    let err = PgStore::connect(&url, common_pg::keys())
        .await
        .expect_err("a certificate that does not name the host is refused");
    let text = err.to_string();
    assert!(text.contains("not valid for name"), "{text}");
    assert_eq!(
        proxy.handshakes.load(Ordering::SeqCst),
        0,
        "no TLS session was completed"
    );
}

#[tokio::test]
async fn a_server_that_declines_tls_is_refused_when_tls_is_required() {
    let Some(s) = setup().await else { return };
    let ca = authority(s.dir.path(), "good");
    let (cert, key) = server_cert(s.dir.path(), "good");
    let proxy = Proxy::start(s.upstream.clone(), Offer::Decline, &cert, &key).await;
    let url = s.url(
        "localhost",
        proxy.port,
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    assert!(
        PgStore::connect(&url, common_pg::keys()).await.is_err(),
        "the connection was downgraded to plain text"
    );
    assert_eq!(proxy.plain.load(Ordering::SeqCst), 0);
    // Positive control: on loopback without `sslmode`, the same server is used in plain text
    // (the default for traffic that never leaves the machine).
    let url = s.url("localhost", proxy.port, "application_name=tls-test");
    PgStore::connect(&url, common_pg::keys())
        .await
        .unwrap_or_else(|e| panic!("plain text on loopback: {e}"));
    assert!(proxy.plain.load(Ordering::SeqCst) >= 1);
}

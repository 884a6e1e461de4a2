//! The approvals page of `secureclaw serve` (issue 15 item 1) over real HTTP: the login, the
//! session cookie, CSRF and origin checks, HTML escaping of the display text, and an approval
//! given through the page letting the pending call run exactly once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs
)]

mod common_ui;

use common_ui::{OPERATOR, Reply, Server, api, request, serve_office, serve_office_with};
use serde_json::Value;

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// The hidden CSRF field's value in a page.
fn csrf_of(page: &str) -> String {
    let start = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field: {page}"))
        + "name=\"csrf\" value=\"".len();
    page[start..].split('"').next().unwrap().to_owned()
}

fn assert_security_headers(r: &Reply) {
    let csp = r.header("content-security-policy").unwrap_or_default();
    assert!(csp.starts_with("default-src 'none'"), "{r:?}");
    assert!(!csp.contains("script-src"), "{csp}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{r:?}");
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{r:?}");
    assert_eq!(r.header("cache-control"), Some("no-store"), "{r:?}");
}

fn login(server: &Server) -> String {
    let r = request(
        server.port,
        "POST",
        "/approvals/login",
        &[FORM],
        &format!("token={OPERATOR}"),
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/approvals"));
    let set = r.header("set-cookie").unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/approvals"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains(OPERATOR), "the token is in the cookie: {set}");
    let pair = set.split(';').next().unwrap().to_owned();
    assert!(pair.starts_with("secureclaw_approvals="), "{set}");
    assert!(pair.len() > "secureclaw_approvals=".len() + 32, "{set}");
    pair
}

fn page(server: &Server, cookie: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = cookie.map(|c| ("Cookie", c)).into_iter().collect();
    let r = request(server.port, "GET", "/approvals", &headers, "");
    assert_security_headers(&r);
    r
}

/// A form post to the page with optional cookie, CSRF token and `Origin`.
fn post(
    server: &Server,
    path: &str,
    cookie: Option<&str>,
    csrf: Option<&str>,
    origin: Option<&str>,
) -> Reply {
    let mut headers = vec![FORM];
    if let Some(c) = cookie {
        headers.push(("Cookie", c));
    }
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    let body = csrf.map(|t| format!("csrf={t}")).unwrap_or_default();
    let r = request(server.port, "POST", path, &headers, &body);
    assert_security_headers(&r);
    r
}

#[test]
fn the_approvals_page_logs_in_checks_csrf_escapes_and_approves_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_office(dir.path());
    let origin = format!("http://127.0.0.1:{}", server.port);
    let session = server.session();
    let subject = "Sign-off <script>alert(1)</script>";
    let pending = server.send(&session, subject, None);
    assert_eq!(pending["status"], "pending_confirmation", "{pending}");
    let a = pending["recovery"]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = "Second <b>mail</b>";
    let pending = server.send(&session, other, None);
    assert_eq!(pending["status"], "pending_confirmation", "{pending}");
    let b = pending["recovery"]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Without a cookie (or with a made-up one): the login form, no approvals data.
    for cookie in [None, Some("secureclaw_approvals=00ff00ff")] {
        let r = page(&server, cookie);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.body.contains("action=\"/approvals/login\""), "{}", r.body);
        for secret in [a.as_str(), b.as_str(), "carol", "alert", "ses#", "csrf"] {
            assert!(!r.body.contains(secret), "{secret} shown logged out");
        }
    }

    // A wrong token is refused, sets no cookie; an empty one too.
    for token in ["token=not-the-operator-token-00", "token=", ""] {
        let r = post(&server, "/approvals/login", None, None, None);
        assert_eq!(r.status, 401, "{r:?}");
        let r = request(server.port, "POST", "/approvals/login", &[FORM], token);
        assert_eq!(r.status, 401, "{token}: {r:?}");
        assert!(r.header("set-cookie").is_none(), "{r:?}");
    }
    // A login from another origin is refused even with the right token.
    let r = request(
        server.port,
        "POST",
        "/approvals/login",
        &[FORM, ("Origin", "http://evil.example")],
        &format!("token={OPERATOR}"),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.header("set-cookie").is_none(), "{r:?}");

    // Logged in: both approvals, display text escaped, session as its digest.
    let cookie = login(&server);
    let r = page(&server, Some(cookie.as_str()));
    assert_eq!(r.status, 200, "{r:?}");
    let body = &r.body;
    for shown in [
        a.as_str(),
        b.as_str(),
        "office__send_email",
        "web-runtime",
        "carol@other.example",
        "NOT ANCHORED",
        &common_session_digest(&server, &session),
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;b&gt;mail&lt;/b&gt;",
        "http-equiv=\"refresh\"",
    ] {
        assert!(body.contains(shown), "{shown} missing: {body}");
    }
    assert!(!body.contains("<script"), "unescaped markup: {body}");
    assert!(!body.contains("<b>"), "unescaped markup: {body}");
    assert!(!body.contains(&session), "the raw session id: {body}");
    assert!(body.contains("<time>20"), "no ISO time: {body}");
    let csrf = csrf_of(body);
    assert_eq!(csrf.len(), 64, "{csrf}");

    // CSRF and origin: each refusal decides nothing.
    let approve_a = format!("/approvals/{a}/approve");
    let c = cookie.as_str();
    let refusals = [
        (Some(c), None, None, 403, "no CSRF token"),
        (Some(c), Some("0".repeat(64)), None, 403, "wrong CSRF token"),
        (
            Some(c),
            Some(csrf[..63].to_owned()),
            None,
            403,
            "short CSRF token",
        ),
        (
            Some(c),
            Some(csrf.clone()),
            Some("http://evil.example"),
            403,
            "other origin",
        ),
        (
            Some(c),
            Some(csrf.clone()),
            Some("null"),
            403,
            "opaque origin",
        ),
        (
            None,
            Some(csrf.clone()),
            Some(origin.as_str()),
            401,
            "no cookie",
        ),
        (
            Some("secureclaw_approvals=00ff"),
            Some(csrf.clone()),
            Some(origin.as_str()),
            401,
            "unknown cookie",
        ),
    ];
    for (c, token, o, status, why) in &refusals {
        let r = post(&server, &approve_a, *c, token.as_deref(), *o);
        assert_eq!(r.status, *status, "{why}: {r:?}");
        assert!(r.header("location").is_none(), "{why}");
    }
    let mut still = server.pending();
    still.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(still, both, "a refused post decided something");
    let early = server.send(&session, subject, Some(a.as_str()));
    assert_eq!(early["status"], "pending_confirmation", "{early}");
    assert_eq!(server.sent(subject), 0);

    // Approve A through the form (positive control): 303 back with a message.
    let r = post(
        &server,
        &approve_a,
        Some(cookie.as_str()),
        Some(csrf.as_str()),
        Some(origin.as_str()),
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/approvals"));
    let r = page(&server, Some(cookie.as_str()));
    assert!(r.body.contains(&format!("Approved {a}")), "{}", r.body);
    assert!(
        !r.body.contains(&format!("data-action-id=\"{a}\"")),
        "{}",
        r.body
    );
    assert_eq!(server.pending(), vec![b.clone()]);
    // The flash is shown once.
    assert!(
        !page(&server, Some(cookie.as_str()))
            .body
            .contains("Approved")
    );
    // Deciding it again: nothing changes, the page says so.
    let r = post(
        &server,
        &format!("/approvals/{a}/deny"),
        Some(cookie.as_str()),
        Some(csrf.as_str()),
        None,
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert!(
        page(&server, Some(cookie.as_str()))
            .body
            .contains("already decided")
    );

    // The audit log names the web approver.
    let audit = api(server.port, "GET", "/v1/audit", OPERATOR, &Value::Null);
    let decided = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.to_string().contains(&a) && r.to_string().contains("web:operator"))
        .count();
    assert_eq!(decided, 1, "{audit}");

    // The runtime re-issues the call: it runs once; a second re-issue is a replay.
    let done = server.send(&session, subject, Some(a.as_str()));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(server.sent(subject), 1);
    let again = server.send(&session, subject, Some(a.as_str()));
    assert_eq!(again["status"], "denied", "{again}");
    assert_eq!(again["recovery"]["reason"], "replay", "{again}");
    assert_eq!(server.sent(subject), 1);

    // Deny B through the form: the re-issue is denied and sends nothing.
    let r = post(
        &server,
        &format!("/approvals/{b}/deny"),
        Some(cookie.as_str()),
        Some(csrf.as_str()),
        Some(origin.as_str()),
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert!(
        page(&server, Some(cookie.as_str()))
            .body
            .contains(&format!("Denied {b}"))
    );
    let denied = server.send(&session, other, Some(b.as_str()));
    assert_eq!(denied["status"], "denied", "{denied}");
    assert_eq!(server.sent(other), 0);
    assert!(server.pending().is_empty());

    // An unknown action id is reported, not a crash.
    let r = post(
        &server,
        "/approvals/act_nope/approve",
        Some(cookie.as_str()),
        Some(csrf.as_str()),
        None,
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert!(
        page(&server, Some(cookie.as_str()))
            .body
            .contains("act_nope was not found")
    );

    // Logout needs the CSRF token, then the cookie is dead server-side.
    let r = post(
        &server,
        "/approvals/logout",
        Some(cookie.as_str()),
        None,
        None,
    );
    assert_eq!(r.status, 403, "{r:?}");
    let r = post(
        &server,
        "/approvals/logout",
        Some(cookie.as_str()),
        Some(csrf.as_str()),
        Some(origin.as_str()),
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    let r = page(&server, Some(cookie.as_str()));
    assert!(r.body.contains("action=\"/approvals/login\""), "{}", r.body);
    assert!(!r.body.contains("csrf"), "{}", r.body);

    // Nothing of the token or the CSRF token reached the log.
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(!log.contains(OPERATOR) && !log.contains(&csrf), "{log}");
    assert!(!log.contains("carol@other.example"), "{log}");
}

/// The `ses#…` digest the API reports for `session` (opened by `Server::session`).
fn common_session_digest(server: &Server, session: &str) -> String {
    let list = api(
        server.port,
        "GET",
        "/v1/approvals?state=pending",
        OPERATOR,
        &Value::Null,
    );
    let digest = list["approvals"][0]["session"].as_str().unwrap().to_owned();
    assert!(digest.starts_with("ses#") && !digest.contains(session));
    digest
}

/// The value of the hidden field `name` in the section of the page about `tool`.
fn field_in_section(page: &str, tool: &str, name: &str) -> String {
    let start = page
        .find(&format!("data-tool=\"{tool}\""))
        .unwrap_or_else(|| panic!("no section for {tool}: {page}"));
    let section = &page[start
        ..page[start..]
            .find("</section>")
            .map_or(page.len(), |e| start + e)];
    let key = format!("name=\"{name}\" value=\"");
    let at = section
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {section}"))
        + key.len();
    section[at..].split('"').next().unwrap().to_owned()
}

/// The runtime's tool names (`GET /v1/tools`).
fn listed(server: &Server, session: &str) -> Vec<String> {
    let r = request(
        server.port,
        "GET",
        "/v1/tools",
        &[("Authorization", &format!("Bearer {session}"))],
        "",
    );
    r.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Issue 16 item 4 on the approvals page: with `pin = "manual"` every tool is held back; the
/// page lists each with its definition and digest, and its pin button serves exactly that
/// definition. A post without the CSRF token or with another digest pins nothing.
#[test]
fn the_approvals_page_lists_held_back_tools_and_pins_the_one_reviewed() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_office_with(dir.path(), "[gateway]\npin = \"manual\"\n");
    let session = server.session();
    assert!(
        !listed(&server, &session).contains(&"office__send_email".to_owned()),
        "an unpinned tool is served"
    );
    let cookie = login(&server);
    let shown = page(&server, Some(&cookie)).body;
    assert!(shown.contains("Tools held back"), "{shown}");
    let digest = field_in_section(&shown, "office__send_email", "digest");
    assert_eq!(digest.len(), 64, "{digest}");
    let csrf = csrf_of(&shown);
    let pin = |csrf: &str, digest: &str| {
        let body = format!("csrf={csrf}&upstream=office&tool=send_email&digest={digest}");
        request(
            server.port,
            "POST",
            "/approvals/pin",
            &[FORM, ("Cookie", cookie.as_str())],
            &body,
        )
    };
    // Without the CSRF token: refused, nothing pinned.
    assert_eq!(pin("", &digest).status, 403);
    // Another digest: nothing pinned, said so.
    assert_eq!(pin(&csrf, &"0".repeat(64)).status, 303);
    assert!(page(&server, Some(&cookie)).body.contains("Not pinned"));
    assert!(!listed(&server, &session).contains(&"office__send_email".to_owned()));
    // The digest shown: pinned and served.
    assert_eq!(pin(&csrf, &digest).status, 303);
    let after = page(&server, Some(&cookie)).body;
    assert!(after.contains("Pinned office__send_email"), "{after}");
    assert!(
        !after.contains("data-tool=\"office__send_email\""),
        "{after}"
    );
    assert!(listed(&server, &session).contains(&"office__send_email".to_owned()));
}

/// A form post with `fields` (already URL-encoded pairs) besides the CSRF token.
fn post_fields(server: &Server, path: &str, cookie: &str, fields: &str) -> Reply {
    let origin = format!("http://127.0.0.1:{}", server.port);
    let headers = vec![FORM, ("Cookie", cookie), ("Origin", origin.as_str())];
    let r = request(server.port, "POST", path, &headers, fields);
    assert_security_headers(&r);
    r
}

/// Standing grants on the page (issue 15 item 1): "Approve and allow similar calls for N
/// minutes / N uses" is CSRF-checked, checks its terms, approves and creates the grant; the
/// grant is listed with a revoke button, which is CSRF-checked too; a similar call runs
/// without a prompt until revoked.
#[test]
fn the_approvals_page_approves_with_a_standing_grant_and_revokes_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_office(dir.path());
    let session = server.session();
    let pending = server.send(&session, "first", None);
    let a = pending["recovery"]["action_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cookie = login(&server);
    let body = page(&server, Some(cookie.as_str())).body;
    for shown in [
        "Approve once",
        "Approve and allow similar calls",
        "name=\"minutes\"",
        "name=\"uses\"",
    ] {
        assert!(body.contains(shown), "{shown}: {body}");
    }
    let csrf = csrf_of(&body);
    let path = format!("/approvals/{a}/approve-grant");
    // Without or with a wrong CSRF token: refused, nothing decided.
    for fields in [
        "minutes=30&uses=2".to_owned(),
        format!("csrf={}&minutes=30&uses=2", "0".repeat(64)),
    ] {
        let r = post_fields(&server, &path, &cookie, &fields);
        assert_eq!(r.status, 403, "{r:?}");
    }
    // Terms that make no grant: nothing decided, the page says why.
    for (fields, why) in [
        ("minutes=&uses=", "a time limit or a number of uses"),
        ("minutes=2000&uses=", "24 hours"),
        ("minutes=&uses=0", "between 1 and 1000 uses"),
        ("minutes=x&uses=1", "whole number"),
    ] {
        let r = post_fields(&server, &path, &cookie, &format!("csrf={csrf}&{fields}"));
        assert_eq!(r.status, 303, "{r:?}");
        let shown = page(&server, Some(cookie.as_str())).body;
        assert!(shown.contains(why), "{fields}: {shown}");
    }
    assert_eq!(server.pending(), vec![a.clone()]);
    // Approve with a grant of 2 uses for 30 minutes.
    let r = post_fields(
        &server,
        &path,
        &cookie,
        &format!("csrf={csrf}&minutes=30&uses=2"),
    );
    assert_eq!(r.status, 303, "{r:?}");
    let shown = page(&server, Some(cookie.as_str())).body;
    assert!(shown.contains(&format!("Approved {a}")), "{shown}");
    assert!(shown.contains("Standing grant grant-"), "{shown}");
    assert!(shown.contains("data-grant-id=\"grant-"), "{shown}");
    assert!(!shown.contains(&session), "the raw session id: {shown}");
    let grant = shown
        .split("data-grant-id=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    // The approved call runs once; a similar one (another subject) runs without a prompt.
    assert_eq!(server.send(&session, "first", None)["status"], "completed");
    assert_eq!(server.send(&session, "second", None)["status"], "completed");
    assert_eq!(server.sent("second"), 1);
    let listed = api(server.port, "GET", "/v1/grants", OPERATOR, &Value::Null);
    assert_eq!(listed["grants"][0]["used"], 1, "{listed}");
    assert_eq!(
        listed["grants"][0]["created_by"], "web:operator",
        "{listed}"
    );
    // Revoke: CSRF-checked, then revoked; the next similar call asks again.
    let revoke = format!("/approvals/grants/{grant}/revoke");
    let r = post_fields(&server, &revoke, &cookie, "");
    assert_eq!(r.status, 403, "{r:?}");
    let r = post_fields(&server, &revoke, &cookie, &format!("csrf={csrf}"));
    assert_eq!(r.status, 303, "{r:?}");
    let shown = page(&server, Some(cookie.as_str())).body;
    assert!(shown.contains(&format!("Revoked {grant}")), "{shown}");
    assert!(!shown.contains("data-grant-id"), "{shown}");
    assert_eq!(
        server.send(&session, "third", None)["status"],
        "pending_confirmation"
    );
    assert_eq!(server.sent("third"), 0);
}

//! HTTP/2 toward upstreams (`channels[].http2`, issue 34): offered by ALPN to an
//! `https://` upstream verified against the channel's own CAs (`ca_file`), many streams
//! on one connection, HTTP/1.1 where the upstream offers nothing else, and a stream that
//! ends early (the client leaves, the upstream resets it) leaves the shared connection
//! to the others.

use crate::chat::sse_events;
use crate::gateway::{chat, error_of, StoreKind, TestGateway};
use crate::h2_upstream::{write_file, H2Upstream, Offer, CUT_USER, PIECES};
use futures_util::StreamExt;
use hyper::Version;
use model_gateway::config::Config;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// One `openai` channel to `up` serving `gpt-4o`; `extra`: more of the channel's fields
/// (`http2`, `ca_file`), one `key: value` a line.
fn channel(up: &H2Upstream, extra: &[String]) -> String {
    let extra: String = extra.iter().map(|l| format!("    {l}\n")).collect();
    format!(
        "channels:\n  - name: private\n    protocol: openai\n    base_url: {}\n    api_key: upstream-secret-key\n    models: [gpt-4o]\n{extra}prices:\n  gpt-4o: {{ input: 1.0, output: 2.0, cached_input: 0.5 }}\n",
        up.base_url()
    )
}

fn trusted(up: &H2Upstream, http2: bool) -> Vec<String> {
    vec![
        format!("http2: {http2}"),
        format!("ca_file: \"{}\"", up.ca_file.display()),
    ]
}

async fn stream_request(gw: &TestGateway, key: &str, body: &Value) -> reqwest::Response {
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    if resp.status() != 200 {
        panic!(
            "{}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    resp
}

/// The whole streamed answer the upstream sends: every piece, then `[DONE]`.
fn assert_whole(events: &[String]) {
    let text = events.join("\n");
    for p in PIECES {
        assert!(text.contains(&format!("\"{p}\"")), "{text}");
    }
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{text}");
}

/// Polls `f` until it holds (the test fails after 10 s).
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, f: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_channel_relays_whole_and_streamed_answers_over_http2_and_bills_them() {
    let up = H2Upstream::start(Offer::H2AndHttp1, false).await;
    let gw = TestGateway::start(&channel(&up, &trusted(&up, true)), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;

    let (status, headers, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hi there");
    // 6 plain input tokens at 1, 4 cached at 0.5, 20 output at 2 micro-USD each.
    assert_eq!(gw.used_micros(&id).await, 48);
    let (_, log) = gw.get("/api/log/token", &key).await;
    assert_eq!(log["data"][0]["cost_micro_usd"], 48);
    assert_eq!(log["data"][0]["channel"], "private");
    assert_eq!(
        log["data"][0]["request_id"],
        headers["x-request-id"].to_str().unwrap()
    );

    let events = sse_events(stream_request(&gw, &key, &chat("gpt-4o", true)).await).await;
    assert_whole(&events);
    assert_eq!(gw.used_micros(&id).await, 48 + 7 + 6);

    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter().all(|s| s.version == Version::HTTP_2),
        "{seen:?}"
    );
    assert_eq!(seen[1].body["model"], "gpt-4o");
    assert_eq!(
        up.connections(),
        1,
        "the second request reused the connection"
    );
}

/// Streams held open at the upstream at once, started one after another (each once the
/// upstream has the one before, so no two race for a first connection); the gateway's
/// answers once the upstream lets them all finish.
async fn held_streams(http2: bool, n: usize) -> (usize, Vec<Version>) {
    let up = H2Upstream::start(Offer::H2AndHttp1, true).await;
    let gw = TestGateway::start(&channel(&up, &trusted(&up, http2)), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut clients = Vec::new();
    for i in 0..n {
        let resp = stream_request(&gw, &key, &chat("gpt-4o", true)).await;
        clients.push(tokio::spawn(sse_events(resp)));
        up.wait_for_requests(i + 1).await;
    }
    assert_eq!(up.seen().len(), n, "all {n} streams in flight at once");
    up.release();
    for c in clients {
        assert_whole(&c.await.unwrap());
    }
    (
        up.connections(),
        up.seen().iter().map(|s| s.version).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_share_one_http2_connection_where_http1_needs_one_each() {
    let (connections, versions) = held_streams(true, 8).await;
    assert_eq!(connections, 1, "8 streams on one HTTP/2 connection");
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_2),
        "{versions:?}"
    );

    let (connections, versions) = held_streams(false, 8).await;
    assert_eq!(
        connections, 8,
        "HTTP/1.1: one connection per stream in flight"
    );
    assert!(
        versions.iter().all(|v| *v == Version::HTTP_11),
        "{versions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_channel_speaks_http1_to_an_upstream_that_offers_only_http1() {
    let up = H2Upstream::start(Offer::Http1Only, false).await;
    let gw = TestGateway::start(&channel(&up, &trusted(&up, true)), StoreKind::Embedded).await;
    let (key, id) = gw.create_key(json!({})).await;
    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(stream_request(&gw, &key, &chat("gpt-4o", true)).await).await;
    assert_whole(&events);
    assert_eq!(gw.used_micros(&id).await, 48 + 7 + 6);
    let seen = up.seen();
    assert!(
        seen.iter().all(|s| s.version == Version::HTTP_11),
        "{seen:?}"
    );
    assert_eq!(up.connections(), 1, "the HTTP/1.1 connection is pooled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_end_early_leave_the_shared_connection_to_the_others() {
    let up = H2Upstream::start(Offer::H2AndHttp1, true).await;
    let gw = TestGateway::start(&channel(&up, &trusted(&up, true)), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (leaver_key, leaver_id) = gw.create_key(json!({})).await;

    // The first client reads the first event, then leaves.
    let mut leaver = stream_request(&gw, &leaver_key, &chat("gpt-4o", true))
        .await
        .bytes_stream();
    let first = leaver.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    up.wait_for_requests(1).await;
    // The upstream resets the second one's stream once the gate opens.
    let mut cut_body = chat("gpt-4o", true);
    cut_body["user"] = json!(CUT_USER);
    // Its first piece reaches the client before the reset can overtake it.
    let mut cut = stream_request(&gw, &key, &cut_body).await.bytes_stream();
    let mut cut_text = String::new();
    while !cut_text.contains("\"Hel\"") {
        let c = cut.next().await.unwrap().unwrap();
        cut_text.push_str(&String::from_utf8_lossy(&c));
    }
    let cut = tokio::spawn(async move {
        while let Some(Ok(c)) = cut.next().await {
            cut_text.push_str(&String::from_utf8_lossy(&c));
        }
        cut_text
    });
    up.wait_for_requests(2).await;
    let mut others = Vec::new();
    for i in 0..3 {
        let resp = stream_request(&gw, &key, &chat("gpt-4o", true)).await;
        others.push(tokio::spawn(sse_events(resp)));
        up.wait_for_requests(3 + i).await;
    }
    drop(leaver);
    up.release();

    for o in others {
        assert_whole(&o.await.unwrap());
    }
    let cut = cut.await.unwrap();
    assert!(cut.contains("\"Hel\"") && !cut.contains("\"!\""), "{cut}");
    assert!(cut.contains("error"), "the client is told: {cut}");
    // The gateway read the left stream to its end for its usage report.
    eventually("the leaver's stream was billed", || async {
        gw.used_micros(&leaver_id).await == 7 + 6
    })
    .await;

    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    let seen = up.seen();
    assert_eq!(seen.len(), 6);
    assert!(
        seen.iter().all(|s| s.version == Version::HTTP_2),
        "{seen:?}"
    );
    assert_eq!(
        up.connections(),
        1,
        "every stream, and the next request, on one connection"
    );
}

/// Reads a response to its end, or to where it breaks off.
async fn text_of(resp: reqwest::Response) -> String {
    let mut text = String::new();
    let mut s = resp.bytes_stream();
    while let Some(Ok(c)) = s.next().await {
        text.push_str(&String::from_utf8_lossy(&c));
    }
    text
}

/// A connection whose only stream the upstream reset goes back to the pool: with one
/// stream per connection it is in no pool while the stream runs, so only its release
/// after the reset lets the next request have it. The reset comes after the answer's
/// first event, then (the gate open) right after its header, which the gateway may not
/// have read yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_stream_gives_its_connection_back_to_the_pool() {
    let up = H2Upstream::start(Offer::H2AndHttp1, true).await;
    let mut fields = trusted(&up, true);
    fields.push("http2_max_streams: 1".into());
    let gw = TestGateway::start(&channel(&up, &fields), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let mut cut_body = chat("gpt-4o", true);
    cut_body["user"] = json!(CUT_USER);
    let mut s = stream_request(&gw, &key, &cut_body).await.bytes_stream();
    let first = s.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    up.release();
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(Ok(c)) = s.next().await {
        text.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(text.contains("error") && !text.contains("\"!\""), "{text}");
    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        up.connections(),
        1,
        "the next request had the same connection"
    );

    // Reset at once: the client has a 200 and an error event, or a 500, by when the
    // reset overtook the header.
    let resp = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&cut_body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = text_of(resp).await;
    assert!(matches!(status, 200 | 500), "{status}: {text}");
    assert!(text.contains("error") && !text.contains("\"!\""), "{text}");
    let (status, _, body) = gw
        .post("/v1/chat/completions", &key, &chat("gpt-4o", false))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(up.seen().len(), 4);
    assert_eq!(up.connections(), 1, "still the same connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_ca_the_private_upstream_is_refused_with_an_error_not_a_hang() {
    let up = H2Upstream::start(Offer::H2AndHttp1, false).await;
    let gw = TestGateway::start(&channel(&up, &["http2: true".into()]), StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    let (status, _, body) = tokio::time::timeout(
        Duration::from_secs(30),
        gw.post("/v1/chat/completions", &key, &chat("gpt-4o", false)),
    )
    .await
    .expect("answered, not hung");
    assert_eq!(status, 500, "{body}");
    let e = error_of(&body);
    assert_eq!(e["type"], "upstream_error", "{body}");
    assert!(up.seen().is_empty(), "no request got through");
}

fn parse(dir: &Path, channel: &str) -> Result<Config, model_gateway::config::ConfigError> {
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\nchannels:\n  - {{ name: c, protocol: openai, api_key: k, models: [m], {channel} }}\nprices:\n  m: {{ input: 1, output: 1 }}\n",
        dir.join("data").display()
    );
    Config::parse(&text, dir)
}

#[test]
fn check_config_names_the_channel_field_of_a_bad_ca_file_or_http2_on_http() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_file(d, "not-pem.txt", "not a certificate\n");
    write_file(
        d,
        "garbage.pem",
        "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
    );
    crate::tls_ca::TestCa::new("private").write(d, "ca.pem");
    let https = "base_url: \"https://up.test\"";
    let cases = [
        (
            "base_url: \"http://up.test\", http2: true",
            "channels[0].http2",
        ),
        (
            &format!("{https}, http2: true, http2_max_streams: 0") as &str,
            "channels[0].http2_max_streams",
        ),
        (
            &format!("{https}, http2_max_streams: 8"),
            "channels[0].http2_max_streams",
        ),
        (
            &format!("{https}, ca_file: missing.pem"),
            "channels[0].ca_file",
        ),
        (
            &format!("{https}, ca_file: not-pem.txt"),
            "channels[0].ca_file",
        ),
        (
            &format!("{https}, ca_file: garbage.pem"),
            "channels[0].ca_file",
        ),
        (
            "base_url: \"http://up.test\", ca_file: ca.pem",
            "channels[0].ca_file",
        ),
    ];
    for (fields, path) in cases {
        let e = parse(d, fields).unwrap_err();
        assert_eq!(e.path, path, "{fields}: {e}");
    }
    // A relative name is read from the configuration's folder.
    let c = parse(d, &format!("{https}, http2: true, ca_file: ca.pem")).unwrap();
    assert_eq!(c.channels[0].transport.h2_streams, Some(100));

    let path = d.join("gateway.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: 127.0.0.1:0\nstore: {{ embedded: {{ path: {} }} }}\nchannels:\n  - {{ name: c, protocol: openai, api_key: k, models: [m], {https}, ca_file: not-pem.txt }}\nprices:\n  m: {{ input: 1, output: 1 }}\n",
            d.join("data").display()
        ),
    )
    .unwrap();
    let (passed, text) = crate::process::check_config(&path, &[]);
    assert!(!passed, "{text}");
    assert!(text.contains("channels[0].ca_file"), "{text}");
}

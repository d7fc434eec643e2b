use super::*;
use crate::channels::{Channel, RawCircuit};

const KEY_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/channels/cloud/testdata/service-account.json"
);

fn raw(location: &str, base_url: &str) -> RawChannel {
    RawChannel {
        name: "vx".into(),
        protocol: "vertex".into(),
        base_url: base_url.into(),
        project: Some("my-project".into()),
        location: Some(location.into()),
        credentials_file: Some(KEY_FILE.into()),
        models: vec!["gemini-2.5-flash".into()],
        ..RawChannel::default()
    }
}

fn channel(r: RawChannel) -> Result<Channel, Invalid> {
    Channel::from_raw(r, &RawCircuit::default())
}

#[test]
fn the_host_is_the_locations_or_the_global_one_unless_base_url_says_otherwise() {
    let c = channel(raw("global", "")).unwrap();
    assert_eq!(c.base_url, "https://aiplatform.googleapis.com");
    assert_eq!(
        (c.host.as_str(), c.port, c.tls),
        ("aiplatform.googleapis.com", 443, true)
    );
    assert_eq!(c.authority(), "aiplatform.googleapis.com");
    let c = channel(raw("us-central1", "")).unwrap();
    assert_eq!(c.host, "us-central1-aiplatform.googleapis.com");
    assert_eq!(c.path_prefix, "");
    let c = channel(raw("europe-west4", "http://127.0.0.1:9/proxy")).unwrap();
    assert_eq!((c.host.as_str(), c.port, c.tls), ("127.0.0.1", 9, false));
    assert_eq!(c.path_prefix, "/proxy");
    // Other protocols still need their base_url.
    let mut r = raw("us-central1", "");
    r.protocol = "gemini".into();
    assert_eq!(channel(r).unwrap_err().field, "base_url");
}

#[test]
fn each_option_is_checked_with_its_path() {
    let field = |r: RawChannel| channel(r).unwrap_err().field;
    let mut r = raw("us-central1", "");
    r.project = None;
    assert_eq!(field(r), "project");
    let mut r = raw("us-central1", "");
    r.project = Some("a/b".into());
    assert_eq!(field(r), "project");
    assert_eq!(field(raw("", "")), "location");
    assert_eq!(field(raw("US Central", "")), "location");
    let mut r = raw("us-central1", "");
    r.credentials_file = None;
    assert_eq!(field(r), "credentials_file");
    let mut r = raw("us-central1", "");
    r.credentials_file = Some("/nonexistent/key.json".into());
    let e = channel(r).unwrap_err();
    assert_eq!(e.field, "credentials_file");
    assert!(e.message.contains("cannot read"), "{}", e.message);
    let mut r = raw("us-central1", "");
    r.credentials_file = Some(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").into());
    assert_eq!(field(r), "credentials_file");
    let mut r = raw("us-central1", "");
    r.api_key = "k".into();
    assert_eq!(field(r), "api_key");
    let c = channel(raw("us-central1", "")).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

fn vertex() -> Vertex {
    Vertex::from_raw(&raw("us-east5", "")).unwrap()
}

fn target(wire: Protocol, model: &str, stream: bool, body: &str) -> Target {
    Target {
        path: "/v1beta/models/x:generateContent".into(),
        body: Bytes::from(body.to_string()),
        wire: Some(wire),
        model: model.into(),
        stream,
    }
}

#[test]
fn claude_models_speak_messages_and_the_others_generate_content() {
    let v = vertex();
    for client in [
        Protocol::Chat,
        Protocol::Responses,
        Protocol::Messages,
        Protocol::Gemini,
    ] {
        assert_eq!(
            v.wire(client, "claude-sonnet-4-5@20250929"),
            Protocol::Messages
        );
        assert_eq!(v.wire(client, "gemini-2.5-pro"), Protocol::Gemini);
    }
}

#[test]
fn gemini_requests_go_to_the_google_publishers_model_as_they_are() {
    let v = vertex();
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let mut t = target(Protocol::Gemini, "gemini-2.5-flash", false, body);
    v.target(&mut t).unwrap();
    assert_eq!(
        t.path,
        "/v1/projects/my-project/locations/us-east5/publishers/google/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(t.body, body.as_bytes());
    let mut t = target(Protocol::Gemini, "gemini-2.5-flash", true, body);
    v.target(&mut t).unwrap();
    assert!(t
        .path
        .ends_with("/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"));
}

#[test]
fn claude_requests_go_to_raw_predict_with_vertex_s_version_and_no_model() {
    let v = vertex();
    let body = r#"{"model":"claude-sonnet-4-5@20250929","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let mut t = target(Protocol::Messages, "claude-sonnet-4-5@20250929", true, body);
    v.target(&mut t).unwrap();
    assert_eq!(
        t.path,
        "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
    assert_eq!(
        std::str::from_utf8(&t.body).unwrap(),
        r#"{"anthropic_version":"vertex-2023-10-16","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"stream":true}"#
    );
    let mut t = target(Protocol::Messages, "claude-haiku-4-5", false, body);
    v.target(&mut t).unwrap();
    assert!(t
        .path
        .ends_with("/publishers/anthropic/models/claude-haiku-4-5:rawPredict"));
}

#[test]
fn what_vertex_cannot_serve_is_refused() {
    let v = vertex();
    let mut t = target(Protocol::Gemini, "models/../x", false, "{}");
    assert_eq!(
        v.target(&mut t).unwrap_err().param.as_deref(),
        Some("model")
    );
    let mut t = target(Protocol::Chat, "gemini-2.5-flash", false, "{}");
    assert!(v.target(&mut t).is_err());
    let mut t = target(Protocol::Chat, "gemini-2.5-flash", false, "{}");
    t.wire = None;
    assert!(v.target(&mut t).is_err());
}

#[test]
fn the_auth_state_names_the_account_and_nothing_secret() {
    let s = vertex().auth_state();
    assert_eq!(
        s,
        serde_json::json!({
            "kind": "service_account",
            "client_email": "unit@mg-unit-test.iam.gserviceaccount.com",
            "valid_until": null,
            "last_refresh_error": null,
        })
    );
}

/// A key file named relative to the configuration is read from the configuration's
/// folder, as the embedded store's path is.
#[test]
fn a_relative_key_file_is_read_beside_the_configuration() {
    let dir = std::path::Path::new(KEY_FILE).parent().unwrap();
    let store = tempfile::tempdir().unwrap();
    let text = format!(
        "listen: 127.0.0.1:0\nstore:\n  embedded: {{ path: \"{}\" }}\nchannels:\n  - {{ name: vx, protocol: vertex, project: p, location: global, credentials_file: service-account.json, models: [g] }}\nprices:\n  g: {{ input: 1, output: 1 }}\n",
        store.path().display()
    );
    let config = crate::config::Config::parse(&text, dir).unwrap();
    assert_eq!(config.channels[0].host, "aiplatform.googleapis.com");
    let elsewhere = crate::config::Config::parse(&text, store.path())
        .err()
        .unwrap();
    assert_eq!(elsewhere.path, "channels[0].credentials_file");
}

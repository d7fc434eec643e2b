use super::*;
use crate::channels::cloud::TokenAnswer;
use bytes::Bytes;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn raw(version: Option<&str>, key: &str, entra: Option<RawEntra>) -> RawChannel {
    RawChannel {
        name: "az".into(),
        protocol: "azure".into(),
        base_url: "https://res.openai.azure.com".into(),
        api_key: key.into(),
        models: vec!["gpt-4o".into()],
        api_version: version.map(String::from),
        entra,
        ..RawChannel::default()
    }
}

fn entra() -> RawEntra {
    RawEntra {
        tenant_id: "tenant".into(),
        client_id: "client".into(),
        client_secret: "very-secret-value".into(),
        token_url: Some("http://127.0.0.1:9/token".into()),
    }
}

fn target(a: &Azure, path: &str, model: &str) -> Result<String, crate::protocol::Invalid> {
    let mut t = Target {
        path: path.into(),
        body: Bytes::new(),
        wire: None,
        model: model.into(),
        stream: false,
    };
    a.target(&mut t).map(|()| t.path)
}

#[test]
fn deployment_urls_carry_the_api_version() {
    let a = Azure::from_raw(&raw(Some("2024-10-21"), "k", None)).unwrap();
    for (from, to) in [
        (
            "/v1/chat/completions",
            "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21",
        ),
        (
            "/v1/embeddings",
            "/openai/deployments/my-gpt/embeddings?api-version=2024-10-21",
        ),
        (
            "/v1/images/generations",
            "/openai/deployments/my-gpt/images/generations?api-version=2024-10-21",
        ),
        (
            "/v1/images/edits",
            "/openai/deployments/my-gpt/images/edits?api-version=2024-10-21",
        ),
        (
            "/v1/audio/transcriptions",
            "/openai/deployments/my-gpt/audio/transcriptions?api-version=2024-10-21",
        ),
        (
            "/v1/audio/translations",
            "/openai/deployments/my-gpt/audio/translations?api-version=2024-10-21",
        ),
        (
            "/v1/audio/speech",
            "/openai/deployments/my-gpt/audio/speech?api-version=2024-10-21",
        ),
        ("/v1/responses", "/openai/responses?api-version=2024-10-21"),
    ] {
        assert_eq!(target(&a, from, "my-gpt").unwrap(), to, "{from}");
    }
    assert_eq!(
        target(&a, "/v1/chat/completions", "a b/c").unwrap(),
        "/openai/deployments/a%20b%2Fc/chat/completions?api-version=2024-10-21"
    );
}

#[test]
fn the_v1_api_keeps_openai_paths_under_openai_v1() {
    let a = Azure::from_raw(&raw(Some("v1"), "k", None)).unwrap();
    assert_eq!(
        target(&a, "/v1/chat/completions", "d").unwrap(),
        "/openai/v1/chat/completions"
    );
    assert_eq!(
        target(&a, "/v1/responses", "d").unwrap(),
        "/openai/v1/responses"
    );
    assert_eq!(
        target(&a, "/v1/audio/speech", "d").unwrap(),
        "/openai/v1/audio/speech"
    );
}

#[test]
fn paths_azure_does_not_serve_are_refused() {
    let a = Azure::from_raw(&raw(Some("2024-10-21"), "k", None)).unwrap();
    for p in [
        "/v1/rerank",
        "/v1/moderations",
        "/v1/responses/compact",
        "/v1/messages",
    ] {
        let e = target(&a, p, "d").unwrap_err();
        assert!(e.message.contains(p), "{}", e.message);
    }
}

#[test]
fn responses_go_natively_only_when_the_channel_says_so() {
    let a = Azure::from_raw(&raw(Some("v1"), "k", None)).unwrap();
    assert_eq!(a.wire(Protocol::Responses, "m"), Protocol::Chat);
    assert_eq!(a.wire(Protocol::Messages, "m"), Protocol::Chat);
    let mut r = raw(Some("v1"), "k", None);
    r.responses_api = true;
    let a = Azure::from_raw(&r).unwrap();
    assert_eq!(a.wire(Protocol::Responses, "m"), Protocol::Responses);
    assert_eq!(a.wire(Protocol::Gemini, "m"), Protocol::Chat);
}

#[test]
fn options_are_checked_with_their_paths() {
    let field = |r: RawChannel| Azure::from_raw(&r).err().map(|e| e.field);
    assert_eq!(field(raw(None, "k", None)).as_deref(), Some("api_version"));
    assert_eq!(
        field(raw(Some("latest"), "k", None)).as_deref(),
        Some("api_version")
    );
    assert_eq!(field(raw(Some("2025-04-01-preview"), "k", None)), None);
    assert_eq!(field(raw(Some("v1"), "", None)).as_deref(), Some("api_key"));
    assert_eq!(
        field(raw(Some("v1"), "k", Some(entra()))).as_deref(),
        Some("entra")
    );
    for (name, mut e) in [
        ("entra.tenant_id", entra()),
        ("entra.client_id", entra()),
        ("entra.client_secret", entra()),
        ("entra.token_url", entra()),
    ] {
        match name {
            "entra.tenant_id" => e.tenant_id = " ".into(),
            "entra.client_id" => e.client_id.clear(),
            "entra.client_secret" => e.client_secret.clear(),
            _ => e.token_url = Some("ftp://x/token".into()),
        }
        assert_eq!(
            field(raw(Some("v1"), "", Some(e))).as_deref(),
            Some(name),
            "{name}"
        );
    }
    let mut other = raw(Some("v1"), "k", None);
    other.protocol = "openai".into();
    assert_eq!(not_here(&other).unwrap_err().field, "api_version");
}

/// A token endpoint that counts its grants and answers with tokens of `lifetime`
/// seconds (or refuses every grant).
struct Endpoint {
    grants: AtomicU32,
    lifetime: i64,
    refuse: std::sync::atomic::AtomicBool,
    /// Held while a grant is answered, to let requests pile up behind it.
    gate: tokio::sync::Semaphore,
}

impl Endpoint {
    fn new(lifetime: i64) -> Endpoint {
        Endpoint {
            grants: AtomicU32::new(0),
            lifetime,
            refuse: false.into(),
            gate: tokio::sync::Semaphore::new(1000),
        }
    }
}

#[async_trait]
impl TokenClient for Endpoint {
    async fn post_form(&self, url: &str, form: &str) -> Result<TokenAnswer, AuthError> {
        let _p = self.gate.acquire().await.unwrap();
        assert_eq!(url, "http://127.0.0.1:9/token");
        let pairs: std::collections::HashMap<_, _> = url::form_urlencoded::parse(form.as_bytes())
            .into_owned()
            .collect();
        assert_eq!(pairs["grant_type"], "client_credentials");
        assert_eq!(pairs["client_id"], "client");
        assert_eq!(pairs["client_secret"], "very-secret-value");
        assert_eq!(pairs["scope"], ENTRA_SCOPE);
        let n = self.grants.fetch_add(1, Ordering::SeqCst) + 1;
        if self.refuse.load(Ordering::SeqCst) {
            return Ok(TokenAnswer {
                status: 401,
                body: Bytes::from_static(
                    br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret"}"#,
                ),
            });
        }
        Ok(TokenAnswer {
            status: 200,
            body: Bytes::from(
                json!({"token_type": "Bearer", "expires_in": self.lifetime,
                       "ext_expires_in": self.lifetime, "access_token": format!("tok-{n}")})
                .to_string(),
            ),
        })
    }
}

fn outbound() -> Outbound<'static> {
    Outbound {
        method: "POST",
        path: "/openai/v1/chat/completions",
        host: "res.openai.azure.com",
        content_type: Some("application/json"),
        body: b"{}",
        key: "",
    }
}

async fn bearer(a: &Azure, http: &Endpoint, now: i64) -> Result<String, AuthError> {
    let h = a.authenticate(http, &outbound(), now).await?;
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].0, "authorization");
    Ok(h[0].1.clone())
}

#[tokio::test]
async fn the_key_goes_in_the_api_key_header() {
    let a = Azure::from_raw(&raw(Some("v1"), "k", None)).unwrap();
    let mut req = outbound();
    req.key = "key-2";
    let h = a.authenticate(&Endpoint::new(60), &req, 0).await.unwrap();
    assert_eq!(h, vec![("api-key", "key-2".to_string())]);
    assert_eq!(a.auth_state()["kind"], "api_key");
}

#[tokio::test]
async fn an_entra_token_is_reused_then_renewed_before_it_lapses() {
    let a = Azure::from_raw(&raw(Some("v1"), "", Some(entra()))).unwrap();
    let http = Endpoint::new(3600);
    assert_eq!(bearer(&a, &http, 1000).await.unwrap(), "Bearer tok-1");
    assert_eq!(
        bearer(&a, &http, 1000 + 3000).await.unwrap(),
        "Bearer tok-1"
    );
    // Five minutes before the end it is renewed.
    assert_eq!(
        bearer(&a, &http, 1000 + 3300).await.unwrap(),
        "Bearer tok-2"
    );
    assert_eq!(http.grants.load(Ordering::SeqCst), 2);
    let state = a.auth_state();
    assert_eq!(state["kind"], "entra");
    assert_eq!(state["valid_until"], "1970-01-01T02:11:40Z");
    assert!(state["last_refresh_error"].is_null());
    assert!(!state.to_string().contains("very-secret-value"));
    assert_eq!(a.secrets(), vec!["very-secret-value"]);
    // A short-lived token is renewed at half its lifetime.
    let short = Azure::from_raw(&raw(Some("v1"), "", Some(entra()))).unwrap();
    let http = Endpoint::new(2);
    assert_eq!(bearer(&short, &http, 10).await.unwrap(), "Bearer tok-1");
    assert_eq!(bearer(&short, &http, 11).await.unwrap(), "Bearer tok-2");
}

#[tokio::test]
async fn one_renewal_serves_every_waiting_request() {
    let a = Arc::new(Azure::from_raw(&raw(Some("v1"), "", Some(entra()))).unwrap());
    let http = Arc::new(Endpoint::new(3600));
    // The endpoint answers only once every request is waiting.
    let held = http.gate.acquire_many(1000).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (a, http) = (a.clone(), http.clone());
        tasks.push(tokio::spawn(
            async move { bearer(&a, &http, 50).await.unwrap() },
        ));
    }
    // Each request runs until it waits: one for the endpoint, the rest for its answer.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(a_waiting(&a), "one request is renewing");
    drop(held);
    for t in tasks {
        assert_eq!(t.await.unwrap(), "Bearer tok-1");
    }
    assert_eq!(http.grants.load(Ordering::SeqCst), 1);
}

/// Whether some request holds the renewal (and the others queue behind it).
fn a_waiting(a: &Azure) -> bool {
    match &a.auth {
        Auth::Entra(e) => e.refreshing.try_lock().is_err(),
        Auth::Key => false,
    }
}

#[tokio::test]
async fn a_failed_renewal_is_an_auth_error_shown_without_secrets() {
    let a = Azure::from_raw(&raw(Some("v1"), "", Some(entra()))).unwrap();
    let http = Endpoint::new(100);
    http.refuse.store(true, Ordering::SeqCst);
    let e = bearer(&a, &http, 0).await.unwrap_err();
    assert!(e.message.contains("401"), "{}", e.message);
    assert!(e.message.contains("invalid_client"), "{}", e.message);
    let state = a.auth_state();
    assert!(state["last_refresh_error"]
        .as_str()
        .unwrap()
        .contains("invalid_client"));
    assert!(state["valid_until"].is_null());
    assert!(!state.to_string().contains("AADSTS"));
    // The endpoint recovers: a token, and the error is cleared.
    http.refuse.store(false, Ordering::SeqCst);
    assert_eq!(bearer(&a, &http, 1).await.unwrap(), "Bearer tok-2");
    // A renewal that fails while the token is still valid keeps using it.
    http.refuse.store(true, Ordering::SeqCst);
    assert_eq!(bearer(&a, &http, 60).await.unwrap(), "Bearer tok-2");
    assert!(a.auth_state()["last_refresh_error"].is_string());
    assert!(bearer(&a, &http, 101).await.is_err());
}

#[tokio::test]
async fn a_token_azure_refuses_is_replaced_by_the_next_request() {
    let a = Azure::from_raw(&raw(Some("v1"), "", Some(entra()))).unwrap();
    let http = Endpoint::new(3600);
    assert_eq!(bearer(&a, &http, 0).await.unwrap(), "Bearer tok-1");
    a.refused(401);
    assert_eq!(bearer(&a, &http, 1).await.unwrap(), "Bearer tok-2");
    assert_eq!(bearer(&a, &http, 2).await.unwrap(), "Bearer tok-2");
}

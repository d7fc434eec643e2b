use super::*;
use crate::channels::cloud::TokenAnswer;
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A key file made for these tests only (its key authenticates nothing anywhere).
const KEY_FILE: &str = include_str!("testdata/service-account.json");

fn account() -> ServiceAccount {
    ServiceAccount::new(serde_json::from_str(KEY_FILE).unwrap(), CLOUD_PLATFORM).unwrap()
}

/// A token endpoint that answers from a list (then 500s), and yields a few times in each
/// answer so concurrent callers meet.
#[derive(Default)]
struct Endpoint {
    answers: Mutex<VecDeque<(u16, Value)>>,
    forms: Mutex<Vec<String>>,
    posts: AtomicUsize,
}

impl Endpoint {
    fn with(answers: Vec<(u16, Value)>) -> Endpoint {
        Endpoint {
            answers: Mutex::new(answers.into()),
            ..Endpoint::default()
        }
    }
}

fn grant(token: &str, expires_in: i64) -> (u16, Value) {
    (
        200,
        json!({"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}),
    )
}

#[async_trait]
impl TokenClient for Endpoint {
    async fn post_form(&self, url: &str, form: &str) -> Result<TokenAnswer, AuthError> {
        assert_eq!(url, "https://oauth2.example.test/token");
        self.posts.fetch_add(1, Ordering::SeqCst);
        self.forms.lock().push(form.to_string());
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        let (status, body) = self
            .answers
            .lock()
            .pop_front()
            .unwrap_or((500, json!({"error": "internal_failure"})));
        Ok(TokenAnswer {
            status,
            body: Bytes::from(body.to_string()),
        })
    }
}

fn b64_json(part: &str) -> Value {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// The grant is Google's JWT bearer grant, and its JWT verifies with the account's public
/// key (RS256 is RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518 section 3.3).
#[tokio::test]
async fn the_grant_is_a_jwt_signed_with_the_account_key() {
    let a = account();
    let e = Endpoint::with(vec![grant("ya29.one", 3599)]);
    assert_eq!(a.bearer(&e, 1_000).await.unwrap(), "Bearer ya29.one");
    let form = e.forms.lock()[0].clone();
    let pairs: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(form.as_bytes())
            .into_owned()
            .collect();
    assert_eq!(
        pairs["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert!(form.starts_with(
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
    ));
    let jwt = &pairs["assertion"];
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        b64_json(parts[0]),
        json!({"alg": "RS256", "typ": "JWT", "kid": "unit-test-key-1"})
    );
    assert_eq!(
        b64_json(parts[1]),
        json!({
            "iss": "unit@mg-unit-test.iam.gserviceaccount.com",
            "scope": "https://www.googleapis.com/auth/cloud-platform",
            "aud": "https://oauth2.example.test/token",
            "iat": 1_000,
            "exp": 4_600,
        })
    );
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[2])
        .unwrap();
    let public = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        a.key.public().as_ref().to_vec(),
    );
    public
        .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
        .expect("the signature verifies with the public key");
}

/// One token serves until five minutes before it lapses; then one request renews it.
#[tokio::test]
async fn a_token_is_reused_then_renewed_before_it_lapses() {
    let a = account();
    let e = Endpoint::with(vec![grant("ya29.one", 3600), grant("ya29.two", 3600)]);
    assert_eq!(a.bearer(&e, 0).await.unwrap(), "Bearer ya29.one");
    assert_eq!(a.bearer(&e, 3_299).await.unwrap(), "Bearer ya29.one");
    assert_eq!(e.posts.load(Ordering::SeqCst), 1);
    assert_eq!(a.bearer(&e, 3_300).await.unwrap(), "Bearer ya29.two");
    assert_eq!(e.posts.load(Ordering::SeqCst), 2);
    assert_eq!(a.state()["valid_until"], 6_900);
    // A short-lived token is renewed a quarter of its life ahead, at least a second.
    assert_eq!(renew_before(3), 1);
    assert_eq!(renew_before(40), 10);
    assert_eq!(renew_before(3599), 300);
}

/// Requests that find the token due at once wait for one refresh and share its token.
#[tokio::test]
async fn concurrent_requests_share_one_refresh() {
    let a = account();
    let e = Endpoint::with(vec![grant("ya29.one", 3600)]);
    let all = futures_util::future::join_all((0..16).map(|_| a.bearer(&e, 10))).await;
    assert!(all.iter().all(|t| t.as_ref().unwrap() == "Bearer ya29.one"));
    assert_eq!(e.posts.load(Ordering::SeqCst), 1);
}

/// A refused refresh is the request's error and the state's, for one refresh per wave of
/// waiting requests; a token not yet lapsed keeps serving meanwhile; the state never
/// shows a token or the key.
#[tokio::test]
async fn a_failed_refresh_is_an_error_shown_in_the_state() {
    let a = account();
    let e = Endpoint::with(vec![(
        400,
        json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}),
    )]);
    let all = futures_util::future::join_all((0..4).map(|_| a.bearer(&e, 10))).await;
    assert_eq!(
        e.posts.load(Ordering::SeqCst),
        1,
        "one refresh for the wave"
    );
    for r in &all {
        let err = r.as_ref().unwrap_err().to_string();
        assert!(
            err.contains("HTTP 400") && err.contains("Invalid JWT Signature"),
            "{err}"
        );
    }
    let s = a.state();
    assert_eq!(s["kind"], "service_account");
    assert_eq!(
        s["client_email"],
        "unit@mg-unit-test.iam.gserviceaccount.com"
    );
    assert_eq!(s["valid_until"], Value::Null);
    assert!(s["last_refresh_error"]
        .as_str()
        .unwrap()
        .contains("invalid_grant"));

    let e = Endpoint::with(vec![grant("ya29.ok", 3600)]);
    assert_eq!(a.bearer(&e, 20).await.unwrap(), "Bearer ya29.ok");
    assert_eq!(a.state()["last_refresh_error"], Value::Null);
    // Due for renewal, the endpoint down: the old token still serves until it lapses.
    let down = Endpoint::default();
    assert_eq!(a.bearer(&down, 3_400).await.unwrap(), "Bearer ya29.ok");
    assert!(a.state()["last_refresh_error"].is_string());
    assert!(a.bearer(&down, 3_620).await.is_err());
    let shown = a.state().to_string();
    assert!(
        !shown.contains("ya29") && !shown.contains("PRIVATE"),
        "{shown}"
    );
}

#[test]
fn a_key_file_must_hold_a_pkcs8_rsa_key() {
    let mut file: Value = serde_json::from_str(KEY_FILE).unwrap();
    let try_with = |f: &Value| {
        ServiceAccount::new(serde_json::from_value(f.clone()).unwrap(), CLOUD_PLATFORM)
            .err()
            .unwrap_or_default()
    };
    file["private_key"] =
        json!("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n");
    assert!(try_with(&file).contains("PKCS#8"), "{}", try_with(&file));
    file["private_key"] = json!("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
    assert!(try_with(&file).contains("not an RSA PKCS#8 key"));
    let mut file: Value = serde_json::from_str(KEY_FILE).unwrap();
    file["type"] = json!("authorized_user");
    assert!(try_with(&file).contains("service_account"));
    let mut file: Value = serde_json::from_str(KEY_FILE).unwrap();
    file["token_uri"] = json!("not a url");
    assert!(try_with(&file).contains("token_uri"));
}

//! `HEAD` is answered wherever `GET` is, on both listeners: the same status and headers
//! (`content-length` included) and no body.

use crate::gateway::{StoreKind, TestGateway, ADMIN_TOKEN};
use serde_json::json;

/// A gateway that answers without a provider.
pub const DEMO: &str = "channels:
  - name: demo
    protocol: demo
    models: [demo]
prices:
  demo: { input: 0.10, output: 0.40 }
";

/// A `GET` and a `HEAD` of `url`: the HEAD's status, headers and body match the GET's
/// minus the body.
async fn same_as_get(http: &reqwest::Client, url: &str, bearer: Option<&str>) -> u16 {
    let with = |r: reqwest::RequestBuilder| match bearer {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    let get = with(http.get(url)).send().await.unwrap();
    let (status, get_type) = (get.status(), get.headers().get("content-type").cloned());
    let get_len = get.bytes().await.unwrap().len();
    let head = with(http.head(url)).send().await.unwrap();
    assert_eq!(head.status(), status, "{url}");
    assert_eq!(
        head.headers().get("content-type").cloned(),
        get_type,
        "{url}"
    );
    let len: usize = head.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Bodies that carry a timestamp or a counter may differ by a few bytes between the
    // two requests; the console's files and empty bodies are exact.
    assert!(len.abs_diff(get_len) <= 16, "{url}: {len} vs {get_len}");
    assert!(head.bytes().await.unwrap().is_empty(), "{url}");
    status.as_u16()
}

#[tokio::test]
async fn head_is_answered_wherever_get_is() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"quota_usd": 1})).await;
    let http = reqwest::Client::new();
    let admin = |p: &str| format!("{}{p}", gw.admin);
    assert_eq!(same_as_get(&http, &admin("/console"), None).await, 200);
    assert_eq!(same_as_get(&http, &admin("/healthz"), None).await, 200);
    assert_eq!(same_as_get(&http, &admin("/readyz"), None).await, 200);
    assert_eq!(same_as_get(&http, &admin("/metrics"), None).await, 200);
    let token = Some(ADMIN_TOKEN);
    assert_eq!(same_as_get(&http, &admin("/admin/keys"), token).await, 200);
    assert_eq!(
        same_as_get(&http, &admin("/admin/channels"), token).await,
        200
    );
    assert_eq!(
        same_as_get(&http, &admin("/admin/catalog"), token).await,
        200
    );
    assert_eq!(same_as_get(&http, &admin("/admin/usage"), token).await, 200);
    assert_eq!(same_as_get(&http, &admin("/admin/keys"), None).await, 401);
    // A HEAD where only POST is served is refused as a GET would be.
    // The client listener's reads, with the caller's key.
    let client = |p: &str| format!("{}{p}", gw.base);
    let k = Some(key.as_str());
    assert_eq!(same_as_get(&http, &client("/v1/models"), k).await, 200);
    assert_eq!(same_as_get(&http, &client("/v1beta/models"), k).await, 200);
    assert_eq!(
        same_as_get(&http, &client("/v1beta/models/demo"), k).await,
        200
    );
    assert_eq!(
        same_as_get(&http, &client("/api/usage/token"), k).await,
        200
    );
    assert_eq!(same_as_get(&http, &client("/api/log/token"), k).await, 200);
    assert_eq!(same_as_get(&http, &client("/v1/models"), None).await, 401);
    let r = http
        .head(client("/v1/chat/completions"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405, "HEAD where only POST is served");
    let r = http
        .head(admin("/admin/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
}

//! Runs a real gateway in-process on ephemeral ports, with either store.
#![allow(dead_code)]

use model_gateway::config::Config;
use model_gateway::gateway::open_store_waiting;
use model_gateway::server::{spawn, Running};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

#[derive(Clone, Debug)]
pub enum StoreKind {
    /// A fresh embedded store in its own temporary directory.
    Embedded,
    /// An embedded store in this directory (to restart on the same data).
    EmbeddedAt(std::path::PathBuf),
    Redis(String),
    /// Seed nodes of a Redis Cluster.
    RedisCluster(Vec<String>),
}

pub struct TestGateway {
    pub base: String,
    pub admin: String,
    pub http: reqwest::Client,
    pub running: Running,
    _dir: Option<tempfile::TempDir>,
}

/// Configuration text for tests: `body` is the channels/prices part (and any other
/// top-level fields), with the listener, admin and store sections added here.
pub fn config_text(body: &str, store: &StoreKind, dir: &Path) -> String {
    let store = match store {
        StoreKind::Embedded => format!("{{ embedded: {{ path: {} }} }}", dir.display()),
        StoreKind::EmbeddedAt(p) => format!("{{ embedded: {{ path: {} }} }}", p.display()),
        StoreKind::Redis(url) => format!("{{ redis: {{ url: \"{url}\" }} }}"),
        StoreKind::RedisCluster(urls) => format!(
            "{{ redis: {{ cluster: [{}] }} }}",
            urls.iter()
                .map(|u| format!("\"{u}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0, token: {ADMIN_TOKEN} }}\nstore: {store}\nthreads: 2\n{body}"
    )
}

fn file_text(
    body: &str,
    store: &StoreKind,
    dir: &Path,
    listen: std::net::SocketAddr,
    admin: std::net::SocketAddr,
) -> String {
    config_text(body, store, dir)
        .replacen("listen: 127.0.0.1:0", &format!("listen: {listen}"), 1)
        .replacen(
            "admin: { listen: 127.0.0.1:0",
            &format!("admin: {{ listen: {admin}"),
            1,
        )
}

/// The value of one series in a Prometheus text exposition: the line named `name` whose
/// labels include every pair of `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

impl TestGateway {
    pub async fn start(body: &str, store: StoreKind) -> TestGateway {
        let dir = tempfile::tempdir().unwrap();
        let text = config_text(body, &store, dir.path());
        let config = Config::parse(&text, dir.path()).expect("test config is valid");
        let store = open_store_waiting(&config.store, true, Duration::from_secs(20))
            .await
            .expect("store opens");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").unwrap();
        let (base, admin_base) = (listener.local_addr().unwrap(), admin.local_addr().unwrap());
        let running = spawn(config, store, listener, Some(admin)).expect("gateway starts");
        TestGateway {
            base: format!("http://{base}"),
            admin: format!("http://{admin_base}"),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(8)
                .build()
                .unwrap(),
            running,
            _dir: Some(dir),
        }
    }

    /// A gateway started from a configuration file (so it can be reloaded), with the
    /// listeners' real addresses written in the file. Returns the file's path.
    pub async fn start_from_file(
        body: &str,
        store: StoreKind,
    ) -> (TestGateway, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").unwrap();
        let (base, admin_base) = (listener.local_addr().unwrap(), admin.local_addr().unwrap());
        let path = dir.path().join("gateway.yaml");
        std::fs::write(&path, file_text(body, &store, dir.path(), base, admin_base)).unwrap();
        let config = Config::load(&path).expect("test config is valid");
        let store = open_store_waiting(&config.store, true, Duration::from_secs(20))
            .await
            .expect("store opens");
        let running = spawn(config, store, listener, Some(admin)).expect("gateway starts");
        let gw = TestGateway {
            base: format!("http://{base}"),
            admin: format!("http://{admin_base}"),
            http: reqwest::Client::new(),
            running,
            _dir: Some(dir),
        };
        (gw, path)
    }

    /// Rewrites the configuration file of [`TestGateway::start_from_file`] with `body`.
    pub fn rewrite(&self, path: &Path, body: &str, store: &StoreKind) {
        let base = self.base.trim_start_matches("http://").parse().unwrap();
        let admin = self.admin.trim_start_matches("http://").parse().unwrap();
        let dir = path.parent().unwrap();
        std::fs::write(path, file_text(body, store, dir, base, admin)).unwrap();
    }

    /// `GET /metrics` on the admin listener (no token).
    pub async fn metrics(&self) -> String {
        let r = self
            .http
            .get(format!("{}/metrics", self.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Creates a key through the admin API; returns (secret, id).
    pub async fn create_key(&self, fields: Value) -> (String, String) {
        let r = self
            .http
            .post(format!("{}/admin/keys", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .json(&fields)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "key creation");
        let v: Value = r.json().await.unwrap();
        (
            v["key"].as_str().unwrap().to_string(),
            v["id"].as_str().unwrap().to_string(),
        )
    }

    pub async fn admin_get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn admin_send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.admin))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    pub async fn used_micros(&self, id: &str) -> i64 {
        let (s, v) = self.admin_get(&format!("/admin/keys/{id}")).await;
        assert_eq!(s, 200);
        (v["used_usd"].as_f64().unwrap() * 1_000_000.0).round() as i64
    }

    /// POST JSON with a bearer key; returns status, headers and the body text.
    pub async fn post(
        &self,
        path: &str,
        key: &str,
        body: &Value,
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let r = self
            .http
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.text().await.unwrap_or_default())
    }

    pub async fn get(&self, path: &str, key: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
}

/// The channel + price block for one OpenAI-style mock upstream.
pub fn openai_channel(base_url: &str, models: &[&str]) -> String {
    let list = models.join(", ");
    let prices: String = models
        .iter()
        .map(|m| format!("  {m}: {{ input: 1.0, output: 2.0, cached_input: 0.5 }}\n"))
        .collect();
    format!(
        "channels:\n  - name: mock-openai\n    protocol: openai\n    base_url: {base_url}\n    api_key: upstream-secret-key\n    models: [{list}]\nprices:\n{prices}"
    )
}

/// A chat request body.
pub fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream})
}

/// The error envelope's fields, asserting its shape.
pub fn error_of(body: &str) -> Value {
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("error body is JSON: {body}"));
    let e = v["error"].clone();
    assert!(
        e["message"].as_str().unwrap().contains("(request id: "),
        "{body}"
    );
    assert!(
        e["type"] == "gateway_error" || e["type"] == "upstream_error",
        "{body}"
    );
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    e
}

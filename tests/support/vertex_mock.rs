//! The Vertex AI mock (`vertex_mock.py`, written from Google's references) as a child
//! process, with a service account made for it: a fresh RSA key pair from Python's
//! `cryptography`, and the key file a `vertex` channel reads (`token_uri` the mock's).
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::PathBuf;
use tokio::io::AsyncBufReadExt;

pub const PROJECT: &str = "mg-test-project";
pub const LOCATION: &str = "us-east5";
pub const CLIENT_EMAIL: &str = "gateway@mg-test-project.iam.gserviceaccount.com";
const KID: &str = "0123456789abcdef0123456789abcdef01234567";

/// Per-mock switches.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Seconds an access token lives (0: Google's hour).
    pub token_lifetime: u64,
    /// The token endpoint answers 503 to every grant.
    pub token_fail: bool,
    /// Output tokens reported whatever was written (0: honest).
    pub over_report: u64,
}

pub struct VertexMock {
    child: tokio::process::Child,
    pub port: u16,
    /// The service account's key file.
    pub key_file: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn python() -> String {
    std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into())
}

const KEYGEN: &str = r#"
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
open(sys.argv[1], "wb").write(k.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
open(sys.argv[2], "wb").write(k.public_key().public_bytes(serialization.Encoding.PEM,
    serialization.PublicFormat.SubjectPublicKeyInfo))
"#;

impl VertexMock {
    pub async fn start(o: Options) -> VertexMock {
        let dir = tempfile::tempdir().unwrap();
        let (private, public) = (dir.path().join("key.pem"), dir.path().join("public.pem"));
        let made = tokio::process::Command::new(python())
            .args(["-c", KEYGEN])
            .arg(&private)
            .arg(&public)
            .output()
            .await
            .expect("python runs");
        assert!(
            made.status.success(),
            "key pair: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/vertex_mock.py");
        let mut cmd = tokio::process::Command::new(python());
        cmd.arg(script)
            .arg("--public-key")
            .arg(&public)
            .args(["--client-email", CLIENT_EMAIL, "--kid", KID])
            .args(["--project", PROJECT, "--location", LOCATION])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        if o.token_lifetime > 0 {
            cmd.args(["--token-lifetime", &o.token_lifetime.to_string()]);
        }
        if o.token_fail {
            cmd.arg("--token-fail");
        }
        if o.over_report > 0 {
            cmd.args(["--over-report", &o.over_report.to_string()]);
        }
        let mut child = cmd.spawn().expect("the Vertex mock starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = lines
            .next_line()
            .await
            .unwrap()
            .expect("the mock prints its port")
            .trim()
            .parse()
            .unwrap();
        let key_file = dir.path().join("service-account.json");
        let key = json!({
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": KID,
            "private_key": std::fs::read_to_string(&private).unwrap(),
            "client_email": CLIENT_EMAIL,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": format!("http://127.0.0.1:{port}/token"),
        });
        std::fs::write(&key_file, key.to_string()).unwrap();
        VertexMock {
            child,
            port,
            key_file,
            _dir: dir,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A `vertex` channel of the mock serving `models`, YAML, as a list item.
    pub fn channel(&self, name: &str, models: &str, extra: &str) -> String {
        format!(
            "  - {{ name: {name}, protocol: vertex, base_url: \"{}\", project: {PROJECT}, location: {LOCATION}, credentials_file: \"{}\", models: [{models}]{extra} }}\n",
            self.base_url(),
            self.key_file.display()
        )
    }

    /// What the mock counted (`grants`, `refused_expired`, `calls`, `paths`...).
    pub async fn stats(&self) -> Value {
        reqwest::get(format!("{}/stats", self.base_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

impl Drop for VertexMock {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

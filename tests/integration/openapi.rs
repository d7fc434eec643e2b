//! The OpenAPI documents in `openapi/`: every route the gateway serves is documented and
//! every documented route is served, on both listeners, methods included; each client
//! route answers errors in the envelope its document names; an independent validator
//! (`openapi-spec-validator`) accepts both documents; the admin listener serves the
//! repository's files.
//!
//! "Served" is read from the route tables dispatch itself goes by
//! (`route::ENDPOINTS`, `api::admin::ROUTES`), and then checked over HTTP: each
//! documented operation reaches its handler (401 without credentials, or the 501 the
//! spec lists), and every other method on a documented path is 405.

use crate::gateway::{StoreKind, TestGateway, ADMIN_TOKEN};
use crate::head::DEMO;
use model_gateway::api::admin;
use model_gateway::route::{self, table};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/client.yaml");
const ADMIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/admin.yaml");

const METHODS: [&str; 8] = [
    "get", "head", "post", "put", "patch", "delete", "options", "trace",
];

type Ops = BTreeSet<(String, String)>;

fn load(file: &str) -> Value {
    let text = std::fs::read_to_string(file).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// (method, path) of every operation of a document.
fn documented(doc: &Value) -> Ops {
    let mut ops = Ops::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                ops.insert((method.clone(), path.clone()));
            }
        }
    }
    ops
}

fn served<T>(rows: &[table::Endpoint<T>]) -> Ops {
    table::operations(rows)
        .into_iter()
        .map(|(v, p)| (v.as_str().to_string(), p.to_string()))
        .collect()
}

/// Every served operation is documented, and every documented one served.
fn assert_same(doc: &Ops, served: &Ops) {
    let undocumented: Vec<_> = served.difference(doc).collect();
    assert!(
        undocumented.is_empty(),
        "served, not documented: {undocumented:?}"
    );
    let unserved: Vec<_> = doc.difference(served).collect();
    assert!(unserved.is_empty(), "documented, not served: {unserved:?}");
}

#[test]
fn the_client_document_lists_exactly_the_served_routes() {
    let doc = documented(&load(CLIENT));
    assert_same(&doc, &served(route::ENDPOINTS));
}

#[test]
fn the_admin_document_lists_exactly_the_served_routes() {
    let doc = documented(&load(ADMIN));
    assert_same(&doc, &served(admin::ROUTES));
}

/// A concrete path for a template: each `{name}` becomes `value`.
fn instance(template: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        out.push_str(value);
        rest = after.split_once('}').map_or("", |(_, a)| a);
    }
    out + rest
}

fn method(name: &str) -> Method {
    Method::from_bytes(name.to_ascii_uppercase().as_bytes()).unwrap()
}

/// The envelope a client operation's document names for its errors.
fn envelope(op: &Value) -> Option<&str> {
    op["responses"]["4XX"]["$ref"]
        .as_str()
        .and_then(|r| r.rsplit('/').next())
}

/// Whether `body` is an error in the envelope the document names.
fn in_envelope(name: &str, body: &Value) -> bool {
    let e = &body["error"];
    match name {
        "OpenAIError" => {
            e["type"] == "gateway_error" && e["message"].is_string() && e.get("param").is_some()
        }
        "AnthropicError" => body["type"] == "error" && e["type"].is_string(),
        "GoogleError" => e["code"].is_u64() && e["status"].is_string(),
        other => panic!("unknown envelope {other}"),
    }
}

#[tokio::test]
async fn each_documented_client_route_is_dispatched_and_answers_in_its_envelope() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let doc = load(CLIENT);
    let served = served(route::ENDPOINTS);
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let url = gw.url(&instance(path, "x1"));
        for (name, op) in item.as_object().unwrap() {
            if !METHODS.contains(&name.as_str()) {
                continue;
            }
            assert!(
                served.contains(&(name.clone(), path.clone())),
                "{name} {path}"
            );
            let r = gw.http.request(method(name), &url).send().await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            // Reached its handler: refused for the missing key, or the spec's 501.
            let want = if op["responses"].get("501").is_some() {
                501
            } else {
                401
            };
            assert_eq!(status, want, "{name} {path}: {body}");
            if name != "head" {
                let env = envelope(op).unwrap_or("OpenAIError");
                assert!(in_envelope(env, &body), "{name} {path}: not {env}: {body}");
            }
            checked += 1;
        }
        let path_served = served.iter().any(|(_, p)| p == path);
        for other in METHODS {
            if path_served && item.get(other).is_none() && other != "trace" {
                let r = gw.http.request(method(other), &url).send().await.unwrap();
                assert_eq!(r.status(), 405, "{other} {path}");
            }
        }
    }
    assert_eq!(checked, served.len());
    // A path in no document is not served.
    let r = gw.http.get(gw.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn each_documented_admin_route_is_dispatched() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    let doc = load(ADMIN);
    let (_, key_id) = gw.create_key(json!({"name": "k"})).await;
    let (s, _) = gw
        .admin_send(Method::POST, "/admin/groups", Some(json!({"id": "g1"})))
        .await;
    assert_eq!(s, 201);
    let mut ops: Vec<(String, String, bool)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (name, op) in item.as_object().unwrap() {
            if METHODS.contains(&name.as_str()) {
                let open = op["security"].as_array().is_some_and(|s| s.is_empty());
                ops.push((name.clone(), path.clone(), open));
            }
        }
    }
    // Deletions last, so a later read finds what it reads.
    ops.sort_by_key(|(m, _, _)| m == "delete");
    for (name, path, open) in &ops {
        let id = if path.starts_with("/admin/keys/") {
            key_id.as_str()
        } else {
            "g1"
        };
        let url = format!("{}{}", gw.admin, instance(path, id));
        let req = || gw.http.request(method(name), &url);
        let without = req().send().await.unwrap().status().as_u16();
        if *open {
            assert!(without == 200, "{name} {path}: {without} without the token");
            continue;
        }
        assert_eq!(without, 401, "{name} {path} without the token");
        let mut with = req().bearer_auth(ADMIN_TOKEN);
        if name == "post" || name == "patch" {
            with = with.json(&json!({}));
        }
        let r = with.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        let refused = body["error"]["code"] == "not_found" || status == 405;
        assert!(!refused, "{name} {path}: {status} {body}");
        assert!(status < 500, "{name} {path}: {status} {body}");
    }
    // Every other method on a documented path is 405, after the token.
    for (path, item) in doc["paths"].as_object().unwrap() {
        let url = format!("{}{}", gw.admin, instance(path, "x1"));
        for other in ["get", "head", "post", "put", "patch", "delete"] {
            if item.get(other).is_none() {
                let r = gw
                    .http
                    .request(method(other), &url)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 405, "{other} {path}");
            }
        }
    }
}

#[tokio::test]
async fn the_admin_listener_serves_the_repository_files() {
    let gw = TestGateway::start(DEMO, StoreKind::Embedded).await;
    for (path, file) in [
        ("/openapi/client.yaml", CLIENT),
        ("/openapi/admin.yaml", ADMIN),
    ] {
        let url = format!("{}{path}", gw.admin);
        let r = gw.http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], "application/yaml");
        let served = r.bytes().await.unwrap();
        assert!(
            served == std::fs::read(file).unwrap(),
            "{path} differs from {file}"
        );
        let head = gw.http.head(&url).send().await.unwrap();
        assert_eq!(head.status(), 200);
        assert_eq!(
            head.headers()["content-length"],
            served.len().to_string().as_str()
        );
        assert!(head.bytes().await.unwrap().is_empty());
    }
}

/// Validates both documents, and broken copies (which must fail), with the Python
/// `openapi-spec-validator` (tests/e2e/requirements.txt).
const VALIDATE: &str = r##"
import copy, sys
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename
for f in sys.argv[1:]:
    doc, _ = read_from_filename(f)
    validate(doc)
    print("valid:", f)
def refused(why, broken):
    try:
        validate(broken)
    except Exception as e:
        print("refused:", why, type(e).__name__)
    else:
        sys.exit("accepted: " + why)
broken = copy.deepcopy(doc)
del broken["paths"]["/v1/videos/{task_id}"]["parameters"]
refused("an undeclared path parameter", broken)
broken = copy.deepcopy(doc)
broken["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] = {"$ref": "#/components/schemas/Nope"}
refused("a dangling reference", broken)
"##;

#[test]
fn both_documents_validate() {
    if std::env::var("MG_SKIP_SDK_TESTS").is_ok() {
        eprintln!("MG_SKIP_SDK_TESTS set: the OpenAPI validator not run");
        return;
    }
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .args(["-c", VALIDATE, ADMIN, CLIENT])
        .output()
        .expect("python3 runs (pip install -r tests/e2e/requirements.txt)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("valid:").count(), 2, "{text}");
    assert_eq!(text.matches("refused:").count(), 2, "{text}");
}

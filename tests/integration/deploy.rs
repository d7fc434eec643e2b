//! The deploy files (`deploy/`) against what the binary serves and reads: every file is
//! parsed and its ports, probes, configuration paths and environment names checked; the
//! systemd unit goes through `systemd-analyze verify` where the tool exists; and the
//! compose topology (two instances on one Redis) runs as plain processes, both scraped.

use crate::gateway::{chat, metric, ADMIN_TOKEN};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::process::{hand_sockets, wait_json, GatewayProcess};
use crate::redis_server::RedisServer;
use serde_json::{json, Value as Json};
use serde_yaml::Value;
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

const CONFIG_PATH: &str = "/etc/model-gateway/gateway.yaml";
const CLIENT_PORT: u16 = 8080;
const ADMIN_PORT: u16 = 8081;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(deploy(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn yaml(file: &str) -> Value {
    let mut v: Value = serde_yaml::from_str(&read(file)).unwrap();
    v.apply_merge().unwrap();
    v
}

fn docs(file: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(&read(file))
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

/// `${NAME}` / `${NAME:-default}` in the configuration: (every name, those without a default).
fn env_names(config: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut all, mut required) = (BTreeSet::new(), BTreeSet::new());
    let code: String = config
        .lines()
        .map(|l| l.split(" #").next().unwrap())
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for part in code.split("${").skip(1) {
        let expr = &part[..part.find('}').unwrap()];
        if expr.starts_with("file:") {
            continue;
        }
        let name = expr.split(":-").next().unwrap().to_string();
        if !expr.contains(":-") {
            required.insert(name.clone());
        }
        all.insert(name);
    }
    (all, required)
}

/// The default of `${NAME:-default}` in the configuration.
fn env_default(config: &str, name: &str) -> String {
    let start = config.find(&format!("${{{name}:-")).unwrap() + name.len() + 4;
    config[start..start + config[start..].find('}').unwrap()].to_string()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

#[test]
fn the_shared_configuration_is_valid_and_listens_where_the_files_say() {
    let config = read("gateway.yaml");
    let (all, required) = env_names(&config);
    assert_eq!(
        required,
        BTreeSet::from(["GATEWAY_ADMIN_TOKEN".into(), "REDIS_URL".into()]),
        "{all:?}"
    );
    assert_eq!(
        port_of(&env_default(&config, "GATEWAY_LISTEN")),
        CLIENT_PORT
    );
    assert_eq!(
        port_of(&env_default(&config, "GATEWAY_ADMIN_LISTEN")),
        ADMIN_PORT
    );
    // The binary itself validates it (with the required variables set).
    let out = Command::new(env!("CARGO_BIN_EXE_model-gateway"))
        .args(["check-config", "--config"])
        .arg(deploy("gateway.yaml"))
        .env("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("REDIS_URL", "redis://redis.invalid/0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And refuses it, naming the variable, without them.
    let out = Command::new(env!("CARGO_BIN_EXE_model-gateway"))
        .args(["check-config", "--config"])
        .arg(deploy("gateway.yaml"))
        .env_remove("GATEWAY_ADMIN_TOKEN")
        .env("REDIS_URL", "redis://redis.invalid/0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("GATEWAY_ADMIN_TOKEN"));
}

#[test]
fn the_dockerfile_builds_in_stages_runs_unprivileged_and_checks_healthz() {
    let d = read("Dockerfile");
    let lines: Vec<&str> = d.lines().map(str::trim).collect();
    assert!(
        lines.iter().filter(|l| l.starts_with("FROM ")).count() >= 2,
        "multi-stage"
    );
    let user = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("USER "))
        .expect("a USER");
    assert!(!matches!(&user[5..], "root" | "0"), "{user}");
    let health = d[d.find("HEALTHCHECK").expect("a health check")..]
        .lines()
        .take(2)
        .collect::<String>();
    assert!(
        health.contains(&format!("127.0.0.1:{ADMIN_PORT}/healthz")),
        "{health}"
    );
    let expose = lines.iter().find(|l| l.starts_with("EXPOSE ")).unwrap();
    assert!(expose.contains(&CLIENT_PORT.to_string()) && expose.contains(&ADMIN_PORT.to_string()));
    assert!(d.contains(&format!("COPY deploy/gateway.yaml {CONFIG_PATH}")));
    // The image's command (the health check's own `CMD` comes before it).
    let cmd = lines.iter().rev().find(|l| l.starts_with("CMD ")).unwrap();
    assert!(
        cmd.contains("\"serve\"") && cmd.contains(CONFIG_PATH),
        "{cmd}"
    );
    assert!(
        !d.contains("API_KEY=") && !d.contains("TOKEN="),
        "no secret in the image"
    );
}

#[test]
fn the_compose_file_wires_two_instances_one_redis_and_a_prometheus() {
    let c = yaml("docker-compose.yml");
    let (_, required) = env_names(&read("gateway.yaml"));
    let services = c["services"].as_mapping().unwrap();
    assert!(services.contains_key("redis") && services.contains_key("prometheus"));
    let mut published = BTreeSet::new();
    for name in ["gateway-1", "gateway-2"] {
        let g = &c["services"][name];
        let cmd: Vec<&str> = g["command"].as_sequence().unwrap().iter().map(s).collect();
        assert_eq!(cmd, ["serve", "--config", CONFIG_PATH]);
        let mounts: Vec<&str> = g["volumes"].as_sequence().unwrap().iter().map(s).collect();
        assert!(mounts.contains(&format!("./gateway.yaml:{CONFIG_PATH}:ro").as_str()));
        let env = g["environment"].as_mapping().unwrap();
        for n in &required {
            assert!(env.contains_key(n.as_str()), "{name} misses {n}");
        }
        assert!(
            s(&env["REDIS_URL"]).starts_with("redis://redis:"),
            "the one Redis"
        );
        assert_eq!(port_of(s(&env["GATEWAY_LISTEN"])), CLIENT_PORT);
        assert_eq!(port_of(s(&env["GATEWAY_ADMIN_LISTEN"])), ADMIN_PORT);
        for p in g["ports"].as_sequence().unwrap() {
            let (host, container) = s(p).split_once(':').unwrap();
            assert!([CLIENT_PORT, ADMIN_PORT].contains(&container.parse().unwrap()));
            assert!(
                published.insert(host.to_string()),
                "host port {host} used twice"
            );
        }
        let test: Vec<&str> = g["healthcheck"]["test"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(s)
            .collect();
        assert!(
            test.last()
                .unwrap()
                .ends_with(&format!(":{ADMIN_PORT}/readyz")),
            "{test:?}"
        );
        assert!(
            s(&env["GATEWAY_ADMIN_TOKEN"]).starts_with("${"),
            "from the environment"
        );
    }
    let p = yaml("prometheus.yml");
    let job = &p["scrape_configs"][0];
    assert_eq!(s(&job["metrics_path"]), "/metrics");
    let targets: Vec<&str> = job["static_configs"][0]["targets"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert_eq!(
        targets,
        [
            format!("gateway-1:{ADMIN_PORT}"),
            format!("gateway-2:{ADMIN_PORT}")
        ]
    );
}

#[test]
fn the_kubernetes_manifests_probe_and_wire_what_the_binary_serves() {
    let mut by_kind = std::collections::BTreeMap::new();
    for f in [
        "configmap.yaml",
        "secret.yaml",
        "deployment.yaml",
        "service.yaml",
        "pdb.yaml",
        "hpa.yaml",
    ] {
        for d in docs(&format!("k8s/{f}")) {
            by_kind.insert(s(&d["kind"]).to_string(), d);
        }
    }
    let kind = |k: &str| by_kind.get(k).unwrap_or_else(|| panic!("no {k}"));
    let cm = kind("ConfigMap");
    assert_eq!(
        s(&cm["data"]["gateway.yaml"]),
        read("gateway.yaml"),
        "the ConfigMap is deploy/gateway.yaml"
    );
    let dep = kind("Deployment");
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let ports: Vec<(&str, u64)> = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (s(&p["name"]), p["containerPort"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        ports,
        [("http", CLIENT_PORT as u64), ("admin", ADMIN_PORT as u64)]
    );
    let env: Vec<(&str, &str)> = c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| (s(&e["name"]), s(&e["value"])))
        .collect();
    assert!(
        env.contains(&("GATEWAY_LISTEN", "0.0.0.0:8080"))
            && env.contains(&("GATEWAY_ADMIN_LISTEN", "0.0.0.0:8081"))
    );
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(s).collect();
    assert_eq!(args, ["serve", "--config", CONFIG_PATH]);
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .unwrap();
    assert_eq!(
        format!("{}/gateway.yaml", s(&mount["mountPath"])),
        CONFIG_PATH
    );
    let config_volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert_eq!(config_volume["configMap"]["name"], cm["metadata"]["name"]);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(s(&c[probe]["httpGet"]["path"]), path);
        assert_eq!(s(&c[probe]["httpGet"]["port"]), "admin");
    }
    let secret = kind("Secret");
    assert_eq!(
        c["envFrom"][0]["secretRef"]["name"],
        secret["metadata"]["name"]
    );
    let (_, required) = env_names(&read("gateway.yaml"));
    let secret_keys = secret["stringData"].as_mapping().unwrap();
    for n in &required {
        assert!(
            secret_keys.contains_key(n.as_str()),
            "the Secret misses {n}"
        );
    }
    for v in secret_keys.values() {
        assert_eq!(s(v), "", "no secret value in the repository");
    }
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > 30, "longer than limits.shutdown_grace_secs");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let labels = &dep["spec"]["selector"]["matchLabels"];
    let svc = kind("Service");
    assert_eq!(&svc["spec"]["selector"], labels);
    for p in svc["spec"]["ports"].as_sequence().unwrap() {
        assert!(
            ports.iter().any(|(n, _)| *n == s(&p["targetPort"])),
            "{p:?}"
        );
    }
    assert_eq!(
        &kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        labels
    );
    let hpa = kind("HorizontalPodAutoscaler");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        dep["metadata"]["name"]
    );
    assert_eq!(
        s(&dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]),
        "8081"
    );
}

#[test]
fn the_systemd_unit_starts_reloads_and_verifies() {
    let unit = read("systemd/model-gateway.service");
    let value = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}="))
    };
    assert_eq!(
        value("ExecStart"),
        format!("/usr/local/bin/model-gateway serve --config {CONFIG_PATH}")
    );
    assert!(
        value("ExecReload").contains("-HUP $MAINPID"),
        "reload is SIGHUP"
    );
    assert!(value("TimeoutStopSec").parse::<u64>().unwrap() > 30);
    assert_ne!(value("User"), "root");
    let env_file = read("systemd/env.example");
    let (all, required) = env_names(&read("gateway.yaml"));
    let named: BTreeSet<String> = env_file
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .map(|l| l.split('=').next().unwrap().to_string())
        .collect();
    assert!(required.is_subset(&named), "{named:?}");
    assert!(
        named.is_subset(&all),
        "names the configuration does not read: {named:?}"
    );
    let tool = Command::new("systemd-analyze").arg("--version").output();
    if tool.map(|o| o.status.success()).unwrap_or(false) {
        // Verified with the binary at its install path replaced by the one just built.
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("model-gateway.service");
        std::fs::write(
            &copy,
            unit.replace(
                "/usr/local/bin/model-gateway",
                env!("CARGO_BIN_EXE_model-gateway"),
            ),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !said.contains("model-gateway.service"),
            "{said}"
        );
    }
}

#[tokio::test]
async fn the_compose_topology_runs_as_processes_and_both_instances_export_metrics() {
    let redis = RedisServer::start().await;
    let up = MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        Reply::json(
            200,
            openai::completion(&model, "hi", openai::usage(10, 20, 0)),
        )
    })
    .await;
    let compose = yaml("docker-compose.yml");
    let dir = tempfile::tempdir().unwrap();
    let mut instances = Vec::new();
    for name in ["gateway-1", "gateway-2"] {
        // The compose environment, with the addresses this machine gives the test.
        let client = TcpListener::bind("127.0.0.1:0").unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").unwrap();
        let (c, a) = (client.local_addr().unwrap(), admin.local_addr().unwrap());
        let sock = dir.path().join(format!("{name}.sock"));
        let mut env: Vec<(&str, String)> = Vec::new();
        for (k, _) in compose["services"][name]["environment"]
            .as_mapping()
            .unwrap()
        {
            let k = s(k);
            let v = match k {
                "REDIS_URL" => redis.url(),
                "GATEWAY_LISTEN" => c.to_string(),
                "GATEWAY_ADMIN_LISTEN" => a.to_string(),
                "GATEWAY_ADMIN_TOKEN" => ADMIN_TOKEN.to_string(),
                _ => String::new(),
            };
            env.push((k, v));
        }
        env.push(("OPENAI_BASE_URL", up.base_url()));
        env.push(("GATEWAY_UPGRADE_SOCK", sock.display().to_string()));
        let p = GatewayProcess::start(&deploy("gateway.yaml"), &env);
        hand_sockets(&sock, vec![client, admin]).await;
        let pid = p.pid();
        wait_json(&format!("http://{a}/readyz"), |v| v["pid"] == pid).await;
        instances.push((p, format!("http://{c}"), format!("http://{a}")));
    }
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/admin/keys", instances[0].2))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"quota_usd": 1.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let k: Json = r.json().await.unwrap();
    let key = k["key"].as_str().unwrap();
    for (_, base, _) in &instances {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "one key, one Redis, either instance");
    }
    for (_, _, admin) in &instances {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = http
                .get(format!("{admin}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let n = metric(
                &text,
                "mg_requests_total",
                &[
                    ("route", "chat_completions"),
                    ("model", "gpt-4o-mini"),
                    ("channel", "openai-main"),
                    ("status", "200"),
                ],
            );
            if n == Some(1.0) {
                assert!(text.contains("mg_store_operation_seconds_bucket"));
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{admin}/metrics:\n{text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
    // The spend of both instances lands on the one key.
    let r = http
        .get(format!(
            "{}/admin/keys/{}",
            instances[1].2,
            k["id"].as_str().unwrap()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let rec: Json = r.json().await.unwrap();
    // 13.5 micro-USD a request (10 input tokens at 0.15, 20 output at 0.60 per 1M);
    // each charge rounds to a whole micro-USD.
    let used = (rec["used_usd"].as_f64().unwrap() * 1e6).round() as i64;
    assert!((27..=28).contains(&used), "{rec}");
}

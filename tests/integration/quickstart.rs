//! The README's quick start, as a newcomer runs it: the example configuration
//! (`conf/gateway.yaml`) served by the binary on the embedded store, a key made with the
//! README's own commands, and the README's curl and Python examples answered by the demo
//! model, with no provider key anywhere in the environment. The console's request list
//! (`/admin/usage`) then shows the requests.

use crate::gateway::ADMIN_TOKEN;
use crate::process::{hand_sockets, wait_json, GatewayProcess};
use serde_json::Value;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

/// The fenced block of `lang` that follows `after` in the README.
fn readme_block(after: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let from = readme.find(after).expect("the quick start's sentence");
    let fence = format!("```{lang}\n");
    let start = from + readme[from..].find(&fence).expect("the block") + fence.len();
    let end = start + readme[start..].find("```").expect("the block's end");
    readme[start..end].to_string()
}

/// The shell commands of a block, continuation lines joined, comments dropped.
fn commands(block: &str) -> Vec<String> {
    let joined = block.replace("\\\n", " ");
    joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn run_shell(cmd: &str, dir: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .args(["-c", cmd])
        .current_dir(dir)
        .env("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .expect("bash runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn the_readme_quick_start_answers_from_the_demo_model_without_a_provider_key() {
    let dir = tempfile::tempdir().unwrap();
    let client = TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").unwrap();
    let (c, a) = (client.local_addr().unwrap(), admin.local_addr().unwrap());
    let conf =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/conf/gateway.yaml")).unwrap();
    // The addresses the example configuration (and so the README) names, replaced by
    // the ones this machine gives the test, with a data directory of its own.
    let yaml: serde_yaml::Value = serde_yaml::from_str(&conf).unwrap();
    let client_at = yaml["listen"].as_str().unwrap().to_string();
    let admin_at = yaml["admin"]["listen"].as_str().unwrap().to_string();
    let sock = dir.path().join("upgrade.sock");
    let conf = conf
        .replacen(&format!("listen: {client_at}"), &format!("listen: {c}"), 1)
        .replacen(&format!("listen: {admin_at}"), &format!("listen: {a}"), 1)
        .replacen(
            "embedded: { path: ../data }",
            &format!(
                "embedded: {{ path: {} }}",
                dir.path().join("data").display()
            ),
            1,
        )
        + &format!("upgrade_sock: {}\n", sock.display());
    let config = dir.path().join("gateway.yaml");
    std::fs::write(&config, &conf).unwrap();
    // No provider key: only the admin token, as the quick start sets it.
    let p = GatewayProcess::start(&config, &[("GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN.into())]);
    hand_sockets(&sock, vec![client, admin]).await;
    let pid = p.pid();
    wait_json(&format!("http://{a}/readyz"), |v| v["pid"] == pid).await;

    let sh = readme_block("Create a key, then call the gateway", "sh");
    let local = |cmd: &str| {
        cmd.replace(&client_at, &c.to_string())
            .replace(&admin_at, &a.to_string())
            .replace("GATEWAY_ADMIN_TOKEN=... ", "")
            .replace(
                "--config conf/gateway.yaml",
                &format!("--config {}", config.display()),
            )
            .replace(
                "target/release/model-gateway",
                env!("CARGO_BIN_EXE_model-gateway"),
            )
    };
    let cmds = commands(&sh);
    assert_eq!(cmds.len(), 3, "{sh}");
    // The command line's key, then the admin API's.
    let (ok, out) = run_shell(&local(&cmds[0]), dir.path());
    assert!(ok, "{out}");
    let cli_key = out.lines().next().unwrap_or_default().trim().to_string();
    assert!(cli_key.starts_with("sk-"), "{out}");
    let (ok, out) = run_shell(&local(&cmds[1]), dir.path());
    assert!(ok, "{out}");
    let created: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let key = created["key"].as_str().unwrap().to_string();

    // The README's curl, with the key it was given.
    let (ok, out) = run_shell(&local(&cmds[2]).replace("sk-...", &key), dir.path());
    assert!(ok, "{out}");
    let text: String = out
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(text.starts_with("Hello from the demo model"), "{out}");

    // The README's Python example, with the command line's key.
    let py = readme_block("Create a key, then call the gateway", "python")
        .replace(&client_at, &c.to_string())
        .replace("sk-...", &cli_key);
    let python = std::env::var("MG_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python).args(["-c", &py]).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && printed.starts_with("Hello from the demo model"),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The console's request list shows both requests.
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v: Value = http
            .get(format!("http://{a}/admin/usage"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let demo = v["data"]
            .as_array()
            .map_or(0, |d| d.iter().filter(|r| r["model"] == "demo").count());
        if demo >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

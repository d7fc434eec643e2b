//! The console in a real browser: starts a gateway and a mock upstream on ephemeral
//! ports, then runs `console/tests/browser.mjs` (playwright-core driving Debian's
//! headless Chromium) against them. Screenshots land in `target/console-screenshots/`.
//!
//! It needs Node, Chromium and `npm ci` in `console/`. Without them it says so and
//! passes, unless `MG_REQUIRE_BROWSER` is set: the test command sets it once it has
//! installed them, so there a missing piece fails.

use crate::gateway::{StoreKind, TestGateway, ADMIN_TOKEN};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

async fn read_all(p: Option<impl AsyncRead + Unpin>) -> String {
    let mut s = String::new();
    if let Some(mut p) = p {
        let _ = p.read_to_string(&mut s).await;
    }
    s
}

/// The whole browser run; it normally takes a few seconds.
const RUN_LIMIT: Duration = Duration::from_secs(240);

fn missing_piece(root: &Path, chromium: &str) -> Option<String> {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node {
        return Some("node is not installed".into());
    }
    if !Path::new(chromium).exists() {
        return Some(format!("{chromium} is missing (apt-get install chromium)"));
    }
    if !root.join("console/node_modules/playwright-core").exists() {
        return Some("console/node_modules is missing (npm ci in console/)".into());
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_real_browser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if let Some(why) = missing_piece(root, &chromium) {
        assert!(
            std::env::var_os("MG_REQUIRE_BROWSER").is_none(),
            "the browser test cannot run: {why}"
        );
        eprintln!("browser test not run: {why}");
        return;
    }
    let up = MockUpstream::start(|r| {
        let model = r.json()["model"].as_str().unwrap_or("m").to_string();
        if model == "broken" {
            return Reply::json(500, json!({"error": {"message": "upstream exploded"}}));
        }
        Reply::json(
            200,
            openai::completion(&model, "hi", openai::usage(1200, 300, 200)),
        )
    })
    .await;
    let cfg = format!(
        "channels:\n  - {{ name: primary, protocol: openai, base_url: \"{}\", api_key: upstream-secret, models: [m1, broken] }}\nprices:\n  m1: {{ input: 2.5, output: 10.0, cached_input: 1.25 }}\n  broken: {{ input: 1.0, output: 1.0 }}\n",
        up.base_url()
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let shots = root.join("target/console-screenshots");
    let mut child = tokio::process::Command::new("node")
        .arg(root.join("console/tests/browser.mjs"))
        .current_dir(root.join("console"))
        .env("CONSOLE_URL", format!("{}/console", gw.admin))
        .env("GATEWAY_URL", &gw.base)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHROMIUM", &chromium)
        .env("SHOTS", &shots)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let run = async {
        let (out, err, status) = tokio::join!(read_all(stdout), read_all(stderr), child.wait());
        (out, err, status)
    };
    let Ok((out, err, status)) = tokio::time::timeout(RUN_LIMIT, run).await else {
        panic!("the browser test ran longer than {RUN_LIMIT:?}");
    };
    println!("{out}\n{err}");
    assert!(
        status.is_ok_and(|s| s.success()),
        "the browser test failed:\n{out}\n{err}"
    );
    assert!(shots.join("spend.png").exists());
}

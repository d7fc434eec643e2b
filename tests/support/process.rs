//! The gateway binary as a process, as an operator runs it. Listening sockets are bound
//! by the test (port 0, no race) and handed to the process the way a running gateway
//! hands them to its successor in a graceful upgrade: over `upgrade_sock` to a process
//! started with `--upgrade`.
#![allow(dead_code)]

use pingora::server::Fds;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::fd::IntoRawFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct GatewayProcess {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl GatewayProcess {
    /// `model-gateway serve --config <config> --upgrade` with `env` added.
    pub fn start(config: &Path, env: &[(&str, String)]) -> GatewayProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_model-gateway"));
        cmd.args(["serve", "--upgrade", "--config"])
            .arg(config)
            .env("RUST_LOG", "info,pingora=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("the gateway binary starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        GatewayProcess { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "signal delivered");
    }

    /// Waits (polling, bounded) for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Hands listening sockets to a process waiting on `sock` (`serve --upgrade`), each under
/// its address, as a running gateway does on `SIGQUIT`.
pub async fn hand_sockets(sock: &Path, listeners: Vec<TcpListener>) {
    let sock = sock.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut fds = Fds::new();
        for l in listeners {
            l.set_nonblocking(true).unwrap();
            let addr = l.local_addr().unwrap().to_string();
            fds.add(addr, l.into_raw_fd());
        }
        fds.send_to_sock(sock.to_str().unwrap())
            .expect("the process takes the sockets");
    })
    .await
    .unwrap();
}

/// Polls `url` until it answers 200 with JSON that satisfies `f` (bounded).
pub async fn wait_json(url: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    // No pooled connections: the process answering may change between two polls.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status() == 200 {
                if let Ok(v) = r.json::<serde_json::Value>().await {
                    if f(&v) {
                        return v;
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{url} never answered as expected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `model-gateway check-config --config <config>` with `env`: whether it passed,
/// and what it printed (standard output, then standard error).
pub fn check_config(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_model-gateway"))
        .args(["check-config", "--config"])
        .arg(config)
        .envs(env.iter().copied())
        .output()
        .expect("check-config runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

//! A private `redis-server` per test: on a unix socket in its own temporary directory
//! (no TCP port to race for), never persisting, killed on drop. Readiness is read from
//! the server's own log line, not guessed with a sleep.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let mut s = RedisServer {
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        s.spawn().await;
        s
    }

    /// The unix socket the server listens on (it has no TCP port).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    async fn spawn(&mut self) {
        let _ = std::fs::remove_file(self.log());
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--logfile")
            .arg(self.log())
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (the test command installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            // "Ready to accept connections" (TCP) or "... ready to accept connections at <sock>".
            if log.to_lowercase().contains("ready to accept connections") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start: {log}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the server (its data is gone: it never persists).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// A fresh, empty server on the same socket.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

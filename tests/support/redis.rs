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

/// A private Redis Cluster of three masters on free TCP ports of 127.0.0.1 (a cluster
/// node needs a TCP port, and its bus takes the port 10000 above it), joined with
/// `redis-cli --cluster create ... --cluster-replicas 0`, never persisting, every node
/// killed on drop. Ready once every node reports `cluster_state:ok`.
pub struct RedisCluster {
    dir: tempfile::TempDir,
    nodes: Vec<(u16, Child)>,
}

/// A port that is free now, with its bus port (10000 above) free too. Someone may take
/// it before the server binds: [`RedisCluster::start`] then tries another.
fn free_cluster_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // Ephemeral ports are often above 55535; derive a lower one from it.
        let p = 20_000 + port % 30_000;
        drop(l);
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(p) && free(p + 10_000) {
            return p;
        }
    }
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        while nodes.len() < 3 {
            let port = free_cluster_port();
            let log = dir.path().join(format!("node-{port}.log"));
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .arg("--cluster-config-file")
                .arg(format!("nodes-{port}.conf"))
                .arg("--logfile")
                .arg(&log)
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed (the test command installs it)");
            let mut node = (port, child);
            if wait_ready(&log, &mut node.1).await {
                nodes.push(node);
            } else {
                // Lost the port to someone else: another one.
                let _ = node.1.kill();
                let _ = node.1.wait();
            }
        }
        let c = RedisCluster { dir, nodes };
        let addrs: Vec<String> = c
            .nodes
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        for (port, _) in &c.nodes {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "cluster", "info"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                    .unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster never came up: {info}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        c
    }

    /// Seed node URLs, as `store.redis.cluster` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(p, _)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(p, _)| *p).collect()
    }

    /// The directory the nodes keep their files in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Waits until the server's log says it accepts connections; `false` if it exited first
/// (its port was taken).
async fn wait_ready(log: &std::path::Path, child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.to_lowercase().contains("ready to accept connections") {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "redis-server did not start: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, c) in &mut self.nodes {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

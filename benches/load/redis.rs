//! Private Redis servers for the gateway targets: one `redis-server` on a unix socket,
//! and a 3-master Redis Cluster on free TCP ports; both never persist and are killed on
//! drop. Each reports the work Redis did (`INFO all`): CPU seconds, script calls and
//! commands, summed over its nodes, so the budget can charge it per request.

use super::report::RedisPer;
use super::targets::{Backend, Target};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Counters of Redis's work, as `INFO all` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Work {
    /// `used_cpu_sys + used_cpu_user`, seconds.
    pub cpu_secs: f64,
    /// `EVALSHA` and `EVAL` calls.
    pub scripts: u64,
    /// Every command (`total_commands_processed`).
    pub commands: u64,
    /// Time spent in commands (`usec` of every `cmdstat_*` line), microseconds: the rest
    /// of the CPU is Redis's own housekeeping and connection handling.
    pub command_us: u64,
}

impl Work {
    pub fn since(&self, before: &Work) -> Work {
        Work {
            cpu_secs: self.cpu_secs - before.cpu_secs,
            scripts: self.scripts.saturating_sub(before.scripts),
            commands: self.commands.saturating_sub(before.commands),
            command_us: self.command_us.saturating_sub(before.command_us),
        }
    }

    fn add(&mut self, o: &Work) {
        self.cpu_secs += o.cpu_secs;
        self.scripts += o.scripts;
        self.commands += o.commands;
        self.command_us += o.command_us;
    }
}

/// The counters of one `INFO all` text.
pub fn parse_info(text: &str) -> Work {
    let mut w = Work::default();
    for line in text.lines() {
        let Some((name, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        match name {
            "used_cpu_sys" | "used_cpu_user" => w.cpu_secs += value.parse().unwrap_or(0.0),
            "total_commands_processed" => w.commands = value.parse().unwrap_or(0),
            n if n.starts_with("cmdstat_") => {
                w.command_us += value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("usec="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                if n == "cmdstat_evalsha" || n == "cmdstat_eval" {
                    w.scripts += value
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("calls="))
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
            _ => {}
        }
    }
    w
}

/// Sends one inline command and reads its reply (a simple string or one bulk string).
fn command<S: Read + Write>(s: S, cmd: &str) -> Option<String> {
    let mut r = BufReader::new(s);
    r.get_mut()
        .write_all(format!("{cmd}\r\n").as_bytes())
        .ok()?;
    let mut first = String::new();
    r.read_line(&mut first).ok()?;
    match first.as_bytes().first()? {
        b'+' => Some(first[1..].trim_end().to_string()),
        b'$' => {
            let len: usize = first[1..].trim_end().parse().ok()?;
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body).ok()?;
            body.truncate(len);
            String::from_utf8(body).ok()
        }
        _ => None,
    }
}

fn wait_until(mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// One `redis-server` on a unix socket in its own directory.
pub struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// `None` when `redis-server` is not installed or does not come up.
    pub fn start() -> Option<RedisServer> {
        let dir = tempfile::tempdir().ok()?;
        let child = Command::new("redis-server")
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let s = RedisServer { child, dir };
        wait_until(|| s.ask("PING").as_deref() == Some("PONG")).then_some(s)
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn ask(&self, cmd: &str) -> Option<String> {
        let s = std::os::unix::net::UnixStream::connect(self.socket()).ok()?;
        command(s, cmd)
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    pub fn work(&self) -> Option<Work> {
        self.ask("INFO all").map(|t| parse_info(&t))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three masters joined with `redis-cli --cluster create`.
pub struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

fn ask_tcp(port: u16, cmd: &str) -> Option<String> {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    command(s, cmd)
}

/// A free port whose cluster bus port (10000 above) is free too.
fn free_port() -> Option<u16> {
    for _ in 0..100 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        let p = 20_000 + l.local_addr().ok()?.port() % 30_000;
        drop(l);
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(p) && free(p + 10_000) {
            return Some(p);
        }
    }
    None
}

fn start_node(dir: &Path) -> Option<(u16, Child)> {
    for _ in 0..10 {
        let port = free_port()?;
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .arg("--cluster-config-file")
            .arg(format!("nodes-{port}.conf"))
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let up = wait_until(|| {
            matches!(child.try_wait(), Ok(Some(_)))
                || ask_tcp(port, "PING").as_deref() == Some("PONG")
        });
        if up && matches!(child.try_wait(), Ok(None)) {
            return Some((port, child));
        }
        // Someone took the port first: another one.
        let _ = child.kill();
        let _ = child.wait();
    }
    None
}

impl RedisCluster {
    /// `None` when the servers or `redis-cli` are missing, or the cluster does not form.
    pub fn start() -> Option<RedisCluster> {
        let dir = tempfile::tempdir().ok()?;
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(start_node(dir.path())?);
        }
        let c = RedisCluster { nodes, _dir: dir };
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(c.nodes.iter().map(|(p, _)| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !out.success() {
            return None;
        }
        let ok = c.nodes.iter().all(|(p, _)| {
            wait_until(|| {
                ask_tcp(*p, "CLUSTER INFO").is_some_and(|i| i.contains("cluster_state:ok"))
            })
        });
        ok.then_some(c)
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(p, _)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    pub fn work(&self) -> Option<Work> {
        let mut total = Work::default();
        for (p, _) in &self.nodes {
            total.add(&parse_info(&ask_tcp(*p, "INFO all")?));
        }
        Some(total)
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

/// The Redis servers the gateway targets use.
pub struct Redises {
    pub single: Option<RedisServer>,
    pub cluster: Option<RedisCluster>,
}

impl Redises {
    pub fn work(&self, t: &Target) -> Option<Work> {
        match t.backend {
            Backend::None => None,
            Backend::Redis => self.single.as_ref()?.work(),
            Backend::Cluster => self.cluster.as_ref()?.work(),
        }
    }
}

pub fn per_request(w: Option<Work>, requests: u64) -> Option<RedisPer> {
    let w = w?;
    let n = requests.max(1) as f64;
    Some(RedisPer {
        requests,
        scripts: w.scripts as f64 / n,
        commands: w.commands as f64 / n,
        cpu_us: w.cpu_secs * 1e6 / n,
        command_us: w.command_us as f64 / n,
    })
}

/// Sums `after - before` of two Redis readings into `acc`.
pub fn add_work(acc: &mut Option<Work>, before: Option<Work>, after: Option<Work>) {
    if let (Some(b), Some(a)) = (before, after) {
        let d = a.since(&b);
        let sum = acc.get_or_insert_with(Work::default);
        sum.cpu_secs += d.cpu_secs;
        sum.scripts += d.scripts;
        sum.commands += d.commands;
        sum.command_us += d.command_us;
    }
}

/// Self-check of the `INFO` parser (run by the smoke run).
pub fn self_check() {
    let info = "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n# Stats\r\ntotal_commands_processed:42\r\n# Commandstats\r\ncmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00\r\ncmdstat_eval:calls=1,usec=5\r\ncmdstat_get:calls=3,usec=1\r\n";
    let w = parse_info(info);
    assert_eq!((w.scripts, w.commands, w.command_us), (8, 42, 76));
    assert!((w.cpu_secs - 3.75).abs() < 1e-9);
}

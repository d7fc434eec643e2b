//! Upstream address resolution with a short cache: one DNS lookup per channel every
//! [`TTL`], not one per request, and never a blocking lookup on a worker thread.

use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Resolver {
    host: String,
    port: u16,
    literal: Option<SocketAddr>,
    cache: Mutex<Option<(Vec<SocketAddr>, Instant)>>,
}

impl Resolver {
    pub fn new(host: String, port: u16) -> Resolver {
        let literal = host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, port));
        Resolver {
            host,
            port,
            literal,
            cache: Mutex::new(None),
        }
    }

    pub async fn pick(&self) -> std::io::Result<SocketAddr> {
        if let Some(a) = self.literal {
            return Ok(a);
        }
        if let Some((addrs, at)) = &*self.cache.lock() {
            if at.elapsed() < TTL {
                if let Some(a) = pick_one(addrs) {
                    return Ok(a);
                }
            }
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .collect();
        let a = pick_one(&addrs).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "upstream host has no address")
        })?;
        *self.cache.lock() = Some((addrs, Instant::now()));
        Ok(a)
    }
}

fn pick_one(addrs: &[SocketAddr]) -> Option<SocketAddr> {
    match addrs.len() {
        0 => None,
        n => addrs.get(crate::ids::fast_random() as usize % n).copied(),
    }
}

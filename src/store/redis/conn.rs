//! One Redis or a Redis Cluster behind one connection type, and the names of the keys.
//!
//! Everything one script touches carries the key's id as a hash tag (`{ID}`), so it
//! lives in one Cluster slot.

use crate::store::Cause;
use crate::store::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::time::Duration;

pub const TIMEOUT: Duration = Duration::from_secs(2);

/// One node or a cluster. Both multiplex: commands from concurrent tasks share one
/// connection per node and are pipelined on it.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    pub async fn connect(urls: &[String], cluster: bool) -> Result<Conn, StoreError> {
        if cluster {
            let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
                .connection_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .build()
                .map_err(map_err)?;
            return Ok(Conn::Cluster(
                client.get_async_connection().await.map_err(map_err)?,
            ));
        }
        let url = urls
            .first()
            .ok_or_else(|| StoreError::internal("no Redis URL"))?;
        let client = redis::Client::open(url.as_str()).map_err(map_err)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        Ok(Conn::Single(
            ConnectionManager::new_with_config(client, cfg)
                .await
                .map_err(map_err)?,
        ))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub fn map_err(e: RedisError) -> StoreError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        StoreError::Unavailable(Cause::new("Redis unreachable").because(e))
    } else {
        StoreError::internal_error(e)
    }
}

/// The record, plus `quota_used`, `quota_reserved` (holds and leases), `lease_slack`
/// (what leases hold beyond their instances' requests), `wanted_until` and `in_flight`
/// (see `scripts`).
pub fn key(id: &str) -> String {
    format!("gw:key:{{{id}}}")
}
/// Hold id → expiry (unix seconds); leases are holds named `lease:<instance>`.
pub fn rsv(id: &str) -> String {
    format!("gw:rsv:{{{id}}}")
}
/// Hold id → amount; a lease's slack under `slack:<lease>`.
pub fn rsva(id: &str) -> String {
    format!("gw:rsva:{{{id}}}")
}
/// Stream of usage records: one per entry (`r`), or a batch (`b`, a JSON array).
pub fn log(id: &str) -> String {
    format!("gw:log:{{{id}}}")
}
/// Settled (or released) reservation id → when: the per-request tombstones.
pub fn done(id: &str) -> String {
    format!("gw:done:{{{id}}}")
}
/// Lease id → the last batch of settlements applied from it: the batches' tombstones.
pub fn seqs(id: &str) -> String {
    format!("gw:seq:{{{id}}}")
}
/// Requests counted in one minute window.
pub fn rate(id: &str, minute: i64) -> String {
    format!("gw:rl:{{{id}}}:{minute}")
}

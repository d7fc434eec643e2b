//! The background service that moves video tasks on. Every instance runs one; the store
//! hands each due task to one of them at a time (a claim with a lease), so adding
//! instances spreads the polling and never doubles it.

use super::service::poll_once;
use crate::gateway::Gateway;
use crate::ids;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Tasks claimed per round; the rest wait for the next round.
const CLAIM_BATCH: usize = 32;
/// The longest pause between two rounds.
const MAX_TICK: Duration = Duration::from_secs(1);

pub struct Poller {
    gw: Arc<Gateway>,
}

impl Poller {
    pub fn new(gw: Arc<Gateway>) -> Poller {
        Poller { gw }
    }

    /// Claims what is due and polls it, all claimed tasks at once. Returns how many
    /// tasks were claimed.
    pub async fn round(&self) -> usize {
        // The running configuration (a reload may have changed the video options).
        let gw = self.gw.latest();
        let lease = gw.config.video.lease.as_millis() as i64;
        let refs = match gw
            .store
            .claim_due_tasks(ids::now_ms(), lease, CLAIM_BATCH)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "video task claim failed");
                return 0;
            }
        };
        let n = refs.len();
        let mut set = JoinSet::new();
        for r in refs {
            let gw = gw.clone();
            set.spawn(async move {
                poll_once(&gw, &r).await;
            });
        }
        while set.join_next().await.is_some() {}
        n
    }
}

#[async_trait]
impl BackgroundService for Poller {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let tick = self
            .gw
            .config
            .video
            .poll_interval
            .clamp(Duration::from_millis(10), MAX_TICK);
        loop {
            if *shutdown.borrow() {
                return;
            }
            // A full batch means more is due now: go again without waiting.
            if self.round().await == CLAIM_BATCH {
                continue;
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(tick) => {}
            }
        }
    }
}

//! The background service that moves video tasks on. Every instance runs one; the store
//! hands each due task to one of them at a time (a claim with a lease), so adding
//! instances spreads the polling and never doubles it.

use super::poll::poll_once;
use crate::gateway::Gateway;
use crate::ids;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Tasks claimed at once; the rest wait for the next claim.
const CLAIM_BATCH: usize = 32;
/// Polls in flight at once on this instance.
const MAX_IN_FLIGHT: usize = 256;
/// The longest pause between two claims.
const MAX_TICK: Duration = Duration::from_secs(1);

pub struct Poller {
    gw: Arc<Gateway>,
}

impl Poller {
    pub fn new(gw: Arc<Gateway>) -> Poller {
        Poller { gw }
    }

    /// Claims up to `room` due tasks and starts a poll of each in `set`. Returns how many
    /// tasks were claimed. A poll runs on its own: one upstream that is slow to answer
    /// (up to the channel's read timeout) never holds up the tasks of another.
    async fn claim(&self, set: &mut JoinSet<()>, room: usize) -> usize {
        // The running configuration (a reload may have changed the video options).
        let gw = self.gw.latest();
        let lease = gw.config.video.lease.as_millis() as i64;
        let refs = match gw
            .store
            .claim_due_tasks(ids::now_ms(), lease, room.min(CLAIM_BATCH))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "video task claim failed");
                return 0;
            }
        };
        let n = refs.len();
        for r in refs {
            let gw = gw.clone();
            set.spawn(async move {
                poll_once(&gw, &r).await;
            });
        }
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
        let mut set = JoinSet::new();
        loop {
            if *shutdown.borrow() {
                set.abort_all();
                return;
            }
            while set.try_join_next().is_some() {}
            let room = MAX_IN_FLIGHT.saturating_sub(set.len());
            // A full batch means more is due now: go again without waiting.
            if room > 0 && self.claim(&mut set, room).await == room.min(CLAIM_BATCH) {
                continue;
            }
            tokio::select! {
                _ = shutdown.changed() => {
                    set.abort_all();
                    return;
                }
                _ = tokio::time::sleep(tick) => {}
            }
        }
    }
}

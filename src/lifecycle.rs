//! Graceful stop: once the listeners stop accepting, requests in flight have a grace
//! period to finish; then the streams still running are cut, each ending with its
//! protocol's error event and settled from what was observed. No charge is lost.

use std::time::Duration;
use tokio::sync::watch;

/// The signal that tells answers still running to end now.
pub struct Cut {
    tx: watch::Sender<bool>,
}

impl Default for Cut {
    fn default() -> Self {
        Cut::new()
    }
}

impl Cut {
    pub fn new() -> Cut {
        Cut {
            tx: watch::channel(false).0,
        }
    }

    /// Ends every answer still running.
    pub fn now(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves once [`Cut::now`] was called (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so the only error is unreachable here.
        let _ = rx.wait_for(|cut| *cut).await;
    }

    /// After `shutdown` turns true, waits `grace` and cuts what is still running.
    pub async fn after_grace(&self, mut shutdown: watch::Receiver<bool>, grace: Duration) {
        if shutdown.wait_for(|s| *s).await.is_err() {
            return;
        }
        tracing::info!(
            grace_secs = grace.as_secs(),
            "stopping: requests in flight may finish"
        );
        tokio::time::sleep(grace).await;
        tracing::info!("stopping: grace period over; cutting the streams still running");
        self.now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cut_after_the_grace_period() {
        let cut = std::sync::Arc::new(Cut::new());
        let (tx, rx) = watch::channel(false);
        let c = cut.clone();
        let waiter = tokio::spawn(async move { c.wait().await });
        let c = cut.clone();
        tokio::spawn(async move { c.after_grace(rx, Duration::from_millis(10)).await });
        assert!(!waiter.is_finished());
        tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("cut within the bound")
            .unwrap();
        // A late waiter returns at once.
        tokio::time::timeout(Duration::from_secs(1), cut.wait())
            .await
            .unwrap();
    }
}

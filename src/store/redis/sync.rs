//! This instance's leases, and the calls that keep them in step with Redis.
//!
//! Requests touch only memory here (`try_reserve`, `settle`); a background task sends,
//! key by key, what was settled and resizes the lease (`gw_lease_v3`) when a batch is
//! full or old enough (`flush_after`), when the lease runs low, when it is due for
//! renewal, and when it should shrink. Calls for different keys run concurrently and are
//! pipelined on the multiplexed connection; calls for one key run one at a time, so its
//! batches reach Redis in order (which is what makes a batch's number its tombstone).

use super::conn::{key, log, map_err, rsv, rsva, seqs, Conn};
use super::lease::{KeyLease, LeaseOptions, Local, Mode, Plan, Reply};
use super::scripts::Scripts;
use super::LOG_MAX;
use crate::store::recent::RecentIds;
use crate::store::{Headroom, Micros, ReserveDenied, StoreError, StoreResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How often the background task looks for work while any key has a lease or charges.
const TICK: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Settled from the lease; the charge goes with the next batch.
    Local,
    /// This instance settled the id before: nothing to do.
    Duplicate,
    /// Not a hold of this instance's leases: settled by script.
    NotLocal,
}

struct State {
    keys: HashMap<String, KeyLease>,
    /// Ids settled from leases, so a reserve or settle retried with one of them is
    /// answered as Redis would (their tombstones are the batches').
    settled: RecentIds,
    closing: bool,
}

pub struct Leases {
    /// This instance's name for its leases: `lease:` and 16 random hex digits.
    id: String,
    opts: LeaseOptions,
    state: Mutex<State>,
    /// A call for some key finished.
    synced: Notify,
    /// Work appeared while the background task was idle.
    wake: Arc<Notify>,
}

impl Leases {
    pub fn new(opts: LeaseOptions) -> Leases {
        Leases {
            id: format!("lease:{:016x}", crate::ids::fast_random()),
            opts,
            state: Mutex::new(State {
                keys: HashMap::new(),
                settled: RecentIds::default(),
                closing: false,
            }),
            synced: Notify::new(),
            wake: Arc::new(Notify::new()),
        }
    }

    /// A reserve from the lease, if this instance holds one for the key.
    pub fn try_reserve(
        &self,
        key_id: &str,
        rid: &str,
        max: Micros,
        ttl_secs: u64,
    ) -> Result<Local, ReserveDenied> {
        let mut st = self.state.lock();
        if st.settled.contains(key_id, rid) {
            return Err(ReserveDenied::Released);
        }
        let Some(k) = st.keys.get_mut(key_id) else {
            return Ok(Local::Script);
        };
        let now = Instant::now();
        let local = k.try_reserve(key_id, rid, max, ttl_secs, now, &self.opts);
        if matches!(local, Local::Granted(_)) && k.due(now, false, &self.opts) {
            self.wake.notify_one();
        }
        Ok(local)
    }

    /// What a request served from the key's lease tells of the key's cap: see
    /// [`KeyLease::headroom`]; nothing when this instance holds no lease of the key.
    pub fn headroom(&self, key_id: &str) -> Headroom {
        self.state
            .lock()
            .keys
            .get(key_id)
            .map_or_else(Headroom::default, |k| k.headroom())
    }

    /// Counts a grant made by script: enough of them make a lease worth taking.
    pub fn note_script_grant(&self, key_id: &str, amount: Micros) {
        if !self.opts.enabled {
            return;
        }
        let now = Instant::now();
        let mut st = self.state.lock();
        let k = st
            .keys
            .entry(key_id.to_string())
            .or_insert_with(|| KeyLease::new(now));
        k.note_grant(amount, now, &self.opts);
        if k.wants_lease(now, &self.opts) {
            self.wake.notify_one();
        }
    }

    /// Settles a hold of this instance's lease in memory.
    pub fn settle(
        &self,
        key_id: &str,
        rid: &str,
        actual: Micros,
        record: Option<String>,
    ) -> Settled {
        let mut st = self.state.lock();
        let now = Instant::now();
        let local = st
            .keys
            .get_mut(key_id)
            .is_some_and(|k| k.settle(rid, actual, record, now));
        if local {
            st.settled.insert(key_id, rid);
            self.wake.notify_one();
            return Settled::Local;
        }
        if st.settled.contains(key_id, rid) {
            Settled::Duplicate
        } else {
            Settled::NotLocal
        }
    }

    /// Whether `rid` is a hold of this instance's lease.
    pub fn holds(&self, key_id: &str, rid: &str) -> bool {
        self.state
            .lock()
            .keys
            .get(key_id)
            .is_some_and(|k| k.holds(rid))
    }

    /// Drops a local hold whose settle went to Redis by script; remembers the id.
    pub fn release(&self, key_id: &str, rid: &str) {
        let mut st = self.state.lock();
        if let Some(k) = st.keys.get_mut(key_id) {
            k.release(rid);
        }
        st.settled.insert(key_id, rid);
    }

    /// Pushes a local hold's expiry; `false` if it is not a local hold.
    pub fn extend(&self, key_id: &str, rid: &str, ttl_secs: u64) -> bool {
        let now = Instant::now();
        self.state
            .lock()
            .keys
            .get_mut(key_id)
            .is_some_and(|k| k.extend(rid, ttl_secs, now))
    }

    /// The key was changed on this instance: serve nothing from its lease until the next
    /// call has read it again.
    pub fn stale(&self, key_id: &str) {
        if let Some(k) = self.state.lock().keys.get_mut(key_id) {
            k.stale();
        }
        self.wake.notify_one();
    }

    /// Starts a call for `key_id` unless one is under way: marks it and returns its plan.
    fn begin(&self, key_id: &str, need: Micros) -> Option<Option<(Plan, Instant)>> {
        let mut st = self.state.lock();
        let closing = st.closing;
        let k = st.keys.get_mut(key_id)?;
        if k.syncing {
            return Some(None);
        }
        k.syncing = true;
        let now = Instant::now();
        Some(Some((k.plan(need, now, closing, &self.opts), now)))
    }

    fn finish(&self, key_id: &str, sent: Instant, reply: &StoreResult<Reply>) {
        {
            let mut st = self.state.lock();
            let closing = st.closing;
            if let Some(k) = st.keys.get_mut(key_id) {
                match reply {
                    Ok(r) => k.apply(r, sent, closing, &self.opts),
                    Err(e) => {
                        tracing::warn!(key = %key_id, error = %e, "lease call failed; its batch is kept and sent again");
                        k.failed(Instant::now());
                    }
                }
            }
        }
        self.synced.notify_waiters();
    }

    async fn call(
        &self,
        conn: &Conn,
        scripts: &Scripts,
        key_id: &str,
        plan: &Plan,
    ) -> StoreResult<Reply> {
        let (seq, charge, records) = match &plan.batch {
            Some(b) => (b.seq, b.charge, b.records.as_str()),
            None => (0, 0, ""),
        };
        type Answer = (String, String, i64, i64, i64, i64, String, String);
        let (status, lease, _applied, left, limited, wanted, quota, free): Answer = scripts
            .lease
            .key(key(key_id))
            .key(rsv(key_id))
            .key(rsva(key_id))
            .key(seqs(key_id))
            .key(log(key_id))
            .arg(&self.id)
            .arg(seq)
            .arg(charge)
            .arg(records)
            .arg(plan.target)
            .arg(plan.floor)
            .arg(self.opts.ttl_secs)
            .arg(LOG_MAX)
            .arg(plan.held)
            .invoke_async(&mut conn.clone())
            .await
            .map_err(map_err)?;
        let lease = lease
            .parse::<f64>()
            .map_err(|e| StoreError::internal_from(format!("bad lease {lease}"), e))?
            as Micros;
        Ok(Reply {
            status,
            lease,
            left: (left >= 0).then_some(left),
            limited: limited == 1,
            wanted: wanted == 1,
            quota: quota.parse().ok().zip(free.parse().ok()),
        })
    }

    /// One call for `key_id` now (after the one under way, if any), asking for `need`
    /// more than the lease's usual size.
    pub async fn sync(
        &self,
        conn: &Conn,
        scripts: &Scripts,
        key_id: &str,
        need: Micros,
    ) -> StoreResult<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.synced.notified();
            match self.begin(key_id, need) {
                None => return Ok(()),
                Some(Some((plan, sent))) => {
                    let reply = self.call(conn, scripts, key_id, &plan).await;
                    self.finish(key_id, sent, &reply);
                    return reply.map(|_| ());
                }
                Some(None) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Err(StoreError::unavailable("lease call under way too long"));
                    }
                }
            }
        }
    }

    /// Sends what this instance settled on the key and has not had confirmed (so a read
    /// on this instance sees every charge it answered).
    pub async fn flush(&self, conn: &Conn, scripts: &Scripts, key_id: &str) -> StoreResult<()> {
        for _ in 0..3 {
            let unsent = self
                .state
                .lock()
                .keys
                .get(key_id)
                .is_some_and(|k| k.unsent());
            if !unsent {
                return Ok(());
            }
            self.sync(conn, scripts, key_id, 0).await?;
        }
        Ok(())
    }

    /// Keys due for a call, each marked and planned.
    fn due(&self) -> (Vec<(String, Plan, Instant)>, bool) {
        let mut st = self.state.lock();
        let now = Instant::now();
        let closing = st.closing;
        st.keys.retain(|_, k| !k.is_done(now));
        let mut out = Vec::new();
        for (id, k) in st.keys.iter_mut() {
            if k.due(now, closing, &self.opts) {
                k.syncing = true;
                out.push((id.clone(), k.plan(0, now, closing, &self.opts), now));
            }
        }
        let idle = st.keys.values().all(|k| k.mode == Mode::Off && !k.unsent());
        (out, idle)
    }

    /// Runs the background calls on the current Tokio runtime until the store is dropped.
    pub fn spawn(self: &Arc<Self>, conn: Conn, scripts: Arc<Scripts>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<Leases> = Arc::downgrade(self);
        let wake = self.wake.clone();
        rt.spawn(async move {
            loop {
                let idle = {
                    let Some(me) = weak.upgrade() else { return };
                    let (due, idle) = me.due();
                    for (id, plan, sent) in due {
                        let (me, conn, scripts) = (me.clone(), conn.clone(), scripts.clone());
                        tokio::spawn(async move {
                            let reply = me.call(&conn, &scripts, &id, &plan).await;
                            me.finish(&id, sent, &reply);
                        });
                    }
                    idle
                };
                if idle {
                    let _ = tokio::time::timeout(Duration::from_secs(1), wake.notified()).await;
                } else {
                    tokio::time::sleep(TICK).await;
                }
            }
        });
    }

    /// Gives every lease back and sends every charge: no new local reserves; waits until
    /// Redis has confirmed everything or `within` is over. Holds of requests still running
    /// keep their money until they settle.
    pub async fn close(&self, within: Duration) -> StoreResult<()> {
        self.state.lock().closing = true;
        self.wake.notify_one();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = {
                let st = self.state.lock();
                st.keys.values().any(|k| k.unsent() || k.has_lease())
            };
            if !left {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::unavailable(
                    "leases not all given back before the deadline",
                ));
            }
            let notified = self.synced.notified();
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

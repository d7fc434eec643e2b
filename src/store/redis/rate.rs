//! Per-minute request limits (`rpm`) shared by every instance, counted in blocks.
//!
//! An instance takes a block of the key's minute from Redis (`gw_rate_block_v2`: never
//! past `rpm`), admits requests from it in memory, and takes the next block in the
//! background when half of it is used. A block is a quarter second of the instance's
//! own rate for the key, at most `rpm / 16` (and at least 1), so:
//! - across all instances, a key is never admitted more than `rpm` requests in a minute
//!   window (the blocks add up to at most `rpm`);
//! - it may be refused early by what other instances took and have not used yet: at most
//!   two blocks each, so with `n` instances serving the key, at most `(n - 1) * rpm / 8`
//!   requests of the minute can go unused. An instance that keeps receiving requests uses
//!   its blocks up within a quarter of a second.
//!
//! What a key has left in the minute is told from the same calls: each take answers the
//! minute's count in Redis after it, and the key has left what no instance took yet plus
//! what this instance took and has not admitted (`rpm - taken + left`). With one instance
//! that is exactly `rpm` less the requests admitted; with several, blocks other
//! instances hold unused count as gone.

use super::conn::{map_err, rate, Conn};
use super::scripts::Scripts;
use crate::store::{RateCount, StoreResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Block {
    minute: i64,
    /// Requests this instance may still admit in `minute`.
    left: u32,
    /// Size of the last block taken.
    size: u32,
    /// The minute's count in Redis as the last take answered it (every instance's blocks).
    taken: u32,
    fetching: bool,
    /// Hits in the current second, and in the last one.
    second: (Instant, u32),
    last_second: u32,
}

impl Block {
    fn new(minute: i64, now: Instant) -> Block {
        Block {
            minute,
            left: 0,
            size: 0,
            taken: 0,
            fetching: false,
            second: (now, 0),
            last_second: 0,
        }
    }

    fn hit(&mut self, now: Instant) {
        if now.duration_since(self.second.0) >= Duration::from_secs(1) {
            self.last_second = self.second.1;
            self.second = (now, 0);
        }
        self.second.1 += 1;
    }

    /// How many to ask for: a quarter second of this instance's hits, within bounds.
    fn want(&self, rpm: u32) -> u32 {
        (self.last_second.max(self.second.1) / 4).clamp(1, (rpm / 16).max(1))
    }
}

#[derive(Default)]
pub struct Rates {
    blocks: Mutex<HashMap<String, Block>>,
}

impl Rates {
    /// Counts one request of `key_id` against `rpm`: whether it is admitted, and what
    /// the key has left in the minute (see the module's comment).
    pub async fn hit(
        self: &Arc<Self>,
        conn: &Conn,
        scripts: &Arc<Scripts>,
        key_id: &str,
        rpm: u32,
        now_ms: i64,
    ) -> StoreResult<RateCount> {
        let minute = now_ms.div_euclid(60_000);
        let count = |admitted: bool, taken: u32, left: u32| RateCount {
            admitted,
            remaining: Some(rpm.saturating_sub(taken).saturating_add(left)),
            resets_at_ms: RateCount::window_end_ms(now_ms),
        };
        let now = Instant::now();
        let want = {
            let mut blocks = self.blocks.lock();
            if blocks.len() > 100_000 {
                blocks.retain(|_, b| b.minute >= minute);
            }
            let b = blocks
                .entry(key_id.to_string())
                .or_insert_with(|| Block::new(minute, now));
            if b.minute != minute {
                *b = Block {
                    minute,
                    ..Block::new(minute, b.second.0)
                };
            }
            b.hit(now);
            if b.left > 0 {
                b.left -= 1;
                if b.left < b.size / 2 && !b.fetching {
                    b.fetching = true;
                    let want = b.want(rpm);
                    let (me, conn, scripts, id) = (
                        self.clone(),
                        conn.clone(),
                        scripts.clone(),
                        key_id.to_string(),
                    );
                    tokio::spawn(async move {
                        let got = take(&conn, &scripts, &id, minute, rpm, want).await;
                        let (got, taken) = got.unwrap_or((0, None));
                        me.add(&id, minute, got, taken);
                    });
                }
                return Ok(count(true, b.taken, b.left));
            }
            b.want(rpm)
        };
        let (got, taken) = take(conn, scripts, key_id, minute, rpm, want).await?;
        if got == 0 {
            return Ok(count(false, taken.unwrap_or(rpm), 0));
        }
        let left = self.add(key_id, minute, got - 1, taken);
        Ok(count(true, taken.unwrap_or(rpm), left.unwrap_or(got - 1)))
    }

    /// Adds `n` taken to the key's block of `minute`, with the minute's count in Redis
    /// after the take; answers what the block holds now.
    fn add(&self, key_id: &str, minute: i64, n: u32, taken: Option<u32>) -> Option<u32> {
        let mut blocks = self.blocks.lock();
        let b = blocks.get_mut(key_id).filter(|b| b.minute == minute)?;
        b.left += n;
        b.size = b.size.max(n);
        b.fetching = false;
        if let Some(t) = taken {
            b.taken = b.taken.max(t);
        }
        Some(b.left)
    }
}

async fn take(
    conn: &Conn,
    scripts: &Scripts,
    key_id: &str,
    minute: i64,
    rpm: u32,
    want: u32,
) -> StoreResult<(u32, Option<u32>)> {
    let (got, taken): (i64, i64) = scripts
        .rate_block
        .key(rate(key_id, minute))
        .arg(rpm)
        .arg(want)
        .invoke_async(&mut conn.clone())
        .await
        .map_err(map_err)?;
    let taken = u32::try_from(taken.max(0)).ok();
    Ok((got.clamp(0, u32::MAX as i64) as u32, taken))
}

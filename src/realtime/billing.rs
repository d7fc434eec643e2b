//! Money for one realtime session: the first reservation, the extensions taken as the
//! session spends, the usage read from `response.done` events, and the settlement.
//!
//! The filters that see the frames are synchronous, so an extension is reserved on a
//! spawned task and its outcome lands in state shared with the [`Meter`]; the filters
//! read that state at every frame boundary.

use crate::billing::{Price, ReservationGuard, MIN_OUTPUT_TOKENS};
use crate::ids;
use crate::protocol::Usage;
use crate::store::{Micros, Reservation, ReserveDenied, Store};
use parking_lot::Mutex;
use serde::Deserialize;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Input tokens reserved per block besides the output limit. A realtime response bills
/// the conversation so far as its input, which the gateway cannot see before the
/// response; a few thousand tokens cover the instructions and a turn of a typical
/// session, and longer conversations are covered by extensions sized from the largest
/// response seen (see [`Meter::add`]).
pub const INPUT_ALLOWANCE_TOKENS: u64 = 4_096;

/// Why a session must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key's cap cannot cover another block.
    Quota,
    /// The key was disabled, expired or deleted during the session.
    KeyInactive,
    /// The store could not be asked; the gateway refuses rather than relay unbilled.
    Store,
}

impl Refusal {
    /// WebSocket close code and reason sent to the client (RFC 6455 7.4.1).
    pub fn close(self) -> (u16, &'static str) {
        match self {
            Refusal::Quota => (1008, "quota exhausted"),
            Refusal::KeyInactive => (1008, "key no longer active"),
            Refusal::Store => (1011, "quota store unavailable"),
        }
    }
}

/// What a session reserves up front: `(min, max)`. `max` is one block: the price's
/// `max_output_tokens` of output plus [`INPUT_ALLOWANCE_TOKENS`] of input; `min` is the
/// same floor a chat request has, the input allowance plus the smallest useful answer.
pub fn first_block(price: &Price) -> (Micros, Micros) {
    let input = price.cost(&Usage {
        input_tokens: INPUT_ALLOWANCE_TOKENS,
        ..Usage::default()
    });
    let block = input.saturating_add(price.output_cost(price.max_output_tokens));
    let floor = input.saturating_add(price.output_cost(MIN_OUTPUT_TOKENS));
    (floor.min(block), block)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extension {
    /// None in flight; one may be asked for.
    Idle,
    Pending,
    /// The last request was refused; the session lives on what it holds.
    Refused(Refusal),
}

/// State shared with the task reserving an extension.
struct Held {
    guards: Vec<ReservationGuard>,
    reserved: Micros,
    extension: Extension,
    /// The cost so far, charged by the guards if the session is dropped unsettled.
    charged: Micros,
    /// Settled: a grant arriving now is released at once.
    settled: bool,
}

impl Held {
    /// Spreads the cost over the reservations in order, none above its amount.
    fn spread_charge(&mut self) {
        let mut left = self.charged;
        for g in &mut self.guards {
            let share = left.min(g.amount()).max(0);
            g.set_charge_on_drop(share);
            left -= share;
        }
    }
}

/// Where extensions are reserved.
pub struct Account {
    pub store: Arc<dyn Store>,
    pub key_id: String,
    pub request_id: String,
    pub ttl_secs: u64,
}

/// The session's usage, cost and reservations.
pub struct Meter {
    price: Price,
    block: Micros,
    floor: Micros,
    usage: Usage,
    cost: Micros,
    /// The largest cost of one response so far: the next may be as large.
    largest: Micros,
    held: Arc<Mutex<Held>>,
    task: Option<JoinHandle<()>>,
    account: Arc<Account>,
    extensions: u32,
}

impl Meter {
    pub fn new(price: Price, first: Reservation, account: Account) -> Meter {
        let (floor, block) = first_block(&price);
        let reserved = first.amount;
        let guard = ReservationGuard::new(account.store.clone(), first);
        Meter {
            price,
            block,
            floor,
            usage: Usage::default(),
            cost: 0,
            largest: 0,
            held: Arc::new(Mutex::new(Held {
                guards: vec![guard],
                reserved,
                extension: Extension::Idle,
                charged: 0,
                settled: false,
            })),
            task: None,
            account: Arc::new(account),
            extensions: 0,
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    pub fn cost(&self) -> Micros {
        self.cost
    }

    /// Total currently reserved for the session.
    pub fn reserved(&self) -> Micros {
        self.held.lock().reserved
    }

    /// Adds one response's usage and, when the unspent reservation has fallen below what
    /// the next response may cost (a block, or twice the largest response so far), asks
    /// for an extension that restores it. The extension's minimum includes any overrun,
    /// so a grant always pays for what was already spent.
    pub fn add(&mut self, u: &Usage) {
        let before = self.cost;
        let s = &mut self.usage;
        s.input_tokens = s.input_tokens.saturating_add(u.input_tokens);
        s.output_tokens = s.output_tokens.saturating_add(u.output_tokens);
        s.cached_input_tokens = s.cached_input_tokens.saturating_add(u.cached_input_tokens);
        // Priced on the running total: rounded up once, like a single request.
        self.cost = self.price.cost(&self.usage);
        self.largest = self.largest.max(self.cost - before);

        let mut held = self.held.lock();
        held.charged = self.cost;
        held.spread_charge();
        if held.extension != Extension::Idle {
            return;
        }
        let headroom = held.reserved.saturating_sub(self.cost);
        let want = self.block.max(self.largest.saturating_mul(2));
        if headroom >= want {
            return;
        }
        let max = self.block.max(want - headroom);
        let min = self
            .cost
            .saturating_sub(held.reserved)
            .max(0)
            .saturating_add(self.floor)
            .min(max);
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            held.extension = Extension::Refused(Refusal::Store);
            return;
        };
        held.extension = Extension::Pending;
        drop(held);
        self.extensions += 1;
        let id = format!("{}-{}", self.account.request_id, self.extensions);
        self.task = Some(rt.spawn(extend(
            self.account.clone(),
            self.held.clone(),
            id,
            min,
            max,
        )));
    }

    /// `Some` when the session has spent everything it holds and the store refused more:
    /// it must be closed now.
    pub fn must_close(&self) -> Option<Refusal> {
        let held = self.held.lock();
        match held.extension {
            Extension::Refused(r) if self.cost >= held.reserved => Some(r),
            _ => None,
        }
    }

    /// Waits for the extension in flight, if any.
    #[cfg(test)]
    pub async fn extension_answered(&mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Settles every reservation: the cost is split across them in order, never above
    /// what each holds. Returns what was charged; the rest (an overrun of the last
    /// response) could not be billed.
    pub async fn settle(&mut self) -> Micros {
        if let Some(task) = self.task.take() {
            // A grant in flight becomes one more reservation to settle.
            let _ = task.await;
        }
        let guards = {
            let mut held = self.held.lock();
            held.settled = true;
            std::mem::take(&mut held.guards)
        };
        let mut left = self.cost;
        for mut g in guards {
            let share = left.min(g.amount()).max(0);
            g.settle(share).await;
            left -= share;
        }
        self.cost - left
    }
}

async fn extend(
    account: Arc<Account>,
    held: Arc<Mutex<Held>>,
    id: String,
    min: Micros,
    max: Micros,
) {
    let outcome = account
        .store
        .reserve(
            &account.key_id,
            &id,
            min,
            max,
            ids::now_secs(),
            account.ttl_secs,
        )
        .await;
    let late = {
        let mut h = held.lock();
        match outcome {
            Ok(Ok(r)) => {
                let guard = ReservationGuard::new(account.store.clone(), r);
                if h.settled {
                    Some(guard)
                } else {
                    h.reserved = h.reserved.saturating_add(guard.amount());
                    h.guards.push(guard);
                    h.spread_charge();
                    h.extension = Extension::Idle;
                    None
                }
            }
            Ok(Err(ReserveDenied::QuotaExhausted)) => {
                h.extension = Extension::Refused(Refusal::Quota);
                None
            }
            Ok(Err(ReserveDenied::Disabled | ReserveDenied::Expired | ReserveDenied::NotFound)) => {
                h.extension = Extension::Refused(Refusal::KeyInactive);
                None
            }
            Err(e) => {
                tracing::warn!(reservation = %id, error = %e, "realtime extension not reserved");
                h.extension = Extension::Refused(Refusal::Store);
                None
            }
        }
    };
    // Dropped outside the lock: the guard releases the late grant in the background.
    drop(late);
}

/// Usage of a `response.done` server event; `None` for any other message.
pub fn response_done_usage(msg: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Event {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        response: Option<Response>,
    }
    #[derive(Deserialize)]
    struct Response {
        #[serde(default)]
        usage: Option<RtUsage>,
    }
    #[derive(Deserialize)]
    struct RtUsage {
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
        #[serde(default)]
        input_token_details: Option<InputDetails>,
    }
    #[derive(Deserialize)]
    struct InputDetails {
        #[serde(default)]
        cached_tokens: u64,
    }
    // Cheap test first: most messages are deltas, and base64 audio never contains a dot.
    memchr::memmem::find(msg, b"response.done")?;
    let ev: Event = serde_json::from_slice(msg).ok()?;
    if ev.kind != "response.done" {
        return None;
    }
    let u = ev.response?.usage?;
    Some(Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cached_input_tokens: u.input_token_details.map_or(0, |d| d.cached_tokens),
        ..Usage::default()
    })
}

/// Decides from a message's first bytes whether it can be a `response.done`. Only the
/// compact form servers send (`{"type":"` first) is skipped early; anything else is
/// collected and parsed, so a differently ordered event is never missed.
pub fn sniff(prefix: &[u8]) -> super::frames::Sniff {
    use super::frames::Sniff;
    const TYPE_FIRST: &[u8] = br#"{"type":""#;
    const DONE: &[u8] = br#"{"type":"response.done""#;
    let n = prefix.len().min(DONE.len());
    match prefix[..n].iter().zip(DONE).position(|(a, b)| a != b) {
        None if n == DONE.len() => Sniff::Keep,
        None => Sniff::NeedMore,
        Some(at) if at >= TYPE_FIRST.len() => Sniff::Skip,
        Some(_) => Sniff::Keep,
    }
}

#[cfg(test)]
#[path = "billing_tests.rs"]
mod tests;

//! Money for one realtime session: the first reservation, the extensions taken as the
//! session spends, the usage read from `response.done` events, and the settlement.
//!
//! The relay awaits every extension where it is needed ([`Meter::top_up`], right after
//! the `response.done` that calls for it), so the meter is plain owned state: no task,
//! no lock, no answer that may land later.

use crate::billing::{Bill, Multiplier, Price, ReservationGuard, MIN_OUTPUT_TOKENS};
use crate::protocol::Usage;
use crate::store::{Micros, Reservation, ReserveDenied, Store};
use serde::Deserialize;
use std::sync::Arc;

/// Input tokens reserved per block besides the output limit. A realtime response bills
/// the conversation so far as its input, which the gateway cannot see before the
/// response; a few thousand tokens cover the instructions and a turn of a typical
/// session, and longer conversations are covered by extensions sized from the largest
/// response seen (see [`Meter::top_up`]).
pub const INPUT_ALLOWANCE_TOKENS: u64 = 4_096;

/// Why a session must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key's cap cannot cover the smallest next response.
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

/// Where extensions are reserved.
pub struct Account {
    pub store: Arc<dyn Store>,
    pub key_id: String,
    pub request_id: String,
    pub ttl_secs: u64,
    /// The session's first ask: extensions ask again in its periods and group.
    pub ask: crate::store::Ask,
}

/// The session's usage, cost and reservations. Its money is the key's (the provider's
/// price times the key's multiplier); `provider` prices the usage record's lines.
pub struct Meter {
    price: Price,
    provider: Price,
    multiplier: Multiplier,
    block: Micros,
    /// The smallest next response: what the session must hold unspent to go on.
    floor: Micros,
    usage: Usage,
    cost: Micros,
    /// The largest cost of one response so far: the next may be as large.
    largest: Micros,
    guards: Vec<ReservationGuard>,
    reserved: Micros,
    account: Account,
    extensions: u32,
    settled: bool,
}

impl Meter {
    /// `price`: the provider's; the session is charged it times `multiplier`.
    pub fn new(
        provider: Price,
        multiplier: Multiplier,
        first: Reservation,
        account: Account,
    ) -> Meter {
        let price = provider.scaled(multiplier);
        let (floor, block) = first_block(&price);
        let reserved = first.amount;
        let guard = ReservationGuard::new(account.store.clone(), first, account.ttl_secs);
        Meter {
            price,
            provider,
            multiplier,
            block,
            floor,
            usage: Usage::default(),
            cost: 0,
            largest: 0,
            guards: vec![guard],
            reserved,
            account,
            extensions: 0,
            settled: false,
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// What the session has cost the key so far.
    pub fn cost(&self) -> Micros {
        self.cost
    }

    /// What the provider bills for the session so far, line by line.
    pub fn provider_bill(&self) -> Bill {
        self.provider.bill(&self.usage)
    }

    pub fn multiplier(&self) -> Multiplier {
        self.multiplier
    }

    /// Total currently reserved for the session.
    pub fn reserved(&self) -> Micros {
        self.reserved
    }

    /// Adds one response's usage. The cost is priced on the running total (rounded up
    /// once, like a single request), and the reservations are told it at once, so a
    /// session dropped before it is settled still charges what it used.
    pub fn add(&mut self, u: &Usage) {
        let before = self.cost;
        self.usage.add(u);
        self.cost = self.price.cost(&self.usage);
        self.largest = self.largest.max(self.cost - before);
        self.spread_charge();
    }

    /// The extension the session needs now, as `(min, max)`; `None` while the unspent
    /// reservation covers what the next response may cost (a block, or twice the
    /// largest response so far). `max` restores that headroom; `min` is what keeps the
    /// floor unspent past the cost: an overrun is part of it, so a grant always pays
    /// for what was already spent, and it is zero while the session still holds the
    /// floor itself.
    fn wanted(&self) -> Option<(Micros, Micros)> {
        let headroom = self.reserved.saturating_sub(self.cost);
        let want = self.block.max(self.largest.saturating_mul(2));
        if headroom >= want {
            return None;
        }
        let max = self.block.max(want - headroom);
        let min = self.floor.saturating_sub(headroom).max(0).min(max);
        Some((min, max))
    }

    /// Called after each `response.done`, before anything more from the client is
    /// relayed: reserves an extension when [`Self::wanted`] asks for one and waits for
    /// the store. `Err` when the session cannot go on: the store refused the minimum,
    /// the key is no longer active, or the store failed while the session no longer
    /// holds the floor.
    pub async fn top_up(&mut self) -> Result<(), Refusal> {
        let Some((min, max)) = self.wanted() else {
            return Ok(());
        };
        self.extensions += 1;
        let id = format!("{}-{}", self.account.request_id, self.extensions);
        let a = &self.account;
        let ask = crate::store::Ask {
            min,
            max,
            tokens: 0,
            // The session already counts as one request in flight.
            in_flight: false,
            ..a.ask.clone()
        };
        let outcome = crate::billing::reserve(&a.store, &a.key_id, &id, &ask, a.ttl_secs).await;
        match outcome {
            Ok(Ok(guard)) => {
                self.reserved = self.reserved.saturating_add(guard.amount());
                self.guards.push(guard);
                self.spread_charge();
                Ok(())
            }
            Ok(Err(ReserveDenied::QuotaExhausted | ReserveDenied::Limit(_))) => Err(Refusal::Quota),
            Ok(Err(ReserveDenied::Disabled | ReserveDenied::Expired | ReserveDenied::NotFound)) => {
                Err(Refusal::KeyInactive)
            }
            // Its id was released after a lost answer: a store fault, never a grant.
            Ok(Err(ReserveDenied::Released | ReserveDenied::Stale)) => Err(Refusal::Store),
            Err(e) if min == 0 => {
                // The session still holds the floor: it goes on, and asks again after
                // its next response.
                tracing::warn!(reservation = %id, error = %e, "realtime extension not reserved");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(reservation = %id, error = %e, "realtime extension not reserved");
                Err(Refusal::Store)
            }
        }
    }

    /// Spreads the cost over the reservations in order, none above its amount: what
    /// each guard charges if it is dropped unsettled.
    fn spread_charge(&mut self) {
        let mut left = self.cost;
        for g in &mut self.guards {
            let share = left.min(g.amount()).max(0);
            g.set_charge_on_drop(share);
            left -= share;
        }
    }

    pub fn settled(&self) -> bool {
        self.settled
    }

    /// Settles every reservation: the cost is split across them in order, never above
    /// what each holds. Returns what was charged; the rest (an overrun of the last
    /// response) could not be billed. The reservations are gone afterwards: nothing more
    /// is charged by a second call.
    pub async fn settle(&mut self) -> Micros {
        self.settled = true;
        let mut left = self.cost;
        for mut g in std::mem::take(&mut self.guards) {
            let share = left.min(g.amount()).max(0);
            g.settle(share).await;
            left -= share;
        }
        self.reserved = 0;
        self.cost - left
    }
}

/// Usage of a `response.done` server event; `None` for any other message.
///
/// OpenAI API reference, Realtime server events, `response.done`, `response.usage`:
/// `input_tokens` counts every input token, of which `input_token_details` gives the
/// cached, text, audio and image ones, and `cached_tokens_details` the modalities of the
/// cached ones; `output_token_details` splits `output_tokens` into text and audio. The
/// audio and image input shares are of the uncached input (a cached token is priced as
/// cached, whatever its modality); text is the rest.
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
        input_token_details: Option<Details>,
        #[serde(default)]
        output_token_details: Option<Details>,
    }
    #[derive(Deserialize, Default)]
    struct Details {
        #[serde(default)]
        cached_tokens: u64,
        #[serde(default)]
        audio_tokens: u64,
        #[serde(default)]
        image_tokens: u64,
        #[serde(default)]
        cached_tokens_details: Option<Cached>,
    }
    #[derive(Deserialize, Default)]
    struct Cached {
        #[serde(default)]
        audio_tokens: u64,
        #[serde(default)]
        image_tokens: u64,
    }
    // Cheap test first: most messages are deltas, and base64 audio never contains a dot.
    memchr::memmem::find(msg, b"response.done")?;
    let ev: Event = serde_json::from_slice(msg).ok()?;
    if ev.kind != "response.done" {
        return None;
    }
    let u = ev.response?.usage?;
    let input = u.input_token_details.unwrap_or_default();
    let cached = input.cached_tokens_details.unwrap_or_default();
    let output = u.output_token_details.unwrap_or_default();
    Some(Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cached_input_tokens: input.cached_tokens,
        audio_input_tokens: input.audio_tokens.saturating_sub(cached.audio_tokens),
        image_input_tokens: input.image_tokens.saturating_sub(cached.image_tokens),
        audio_output_tokens: output.audio_tokens,
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

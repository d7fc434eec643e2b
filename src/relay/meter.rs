//! What differs per endpoint in the metered exchange: how much to hold, what to send,
//! how to read the answer, and what it cost. [`super::exchange`] does the rest, the same
//! way for every endpoint.

use crate::billing::Bill;
use crate::channels::Channel;
use crate::errors::GatewayError;
use crate::protocol::Usage;
use crate::store::Micros;
use bytes::Bytes;

/// What an answer cost, and how sure the gateway is of it (STYLE 14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    pub usage: Usage,
    pub micros: Micros,
    /// Counted by the gateway (input bound plus the output it delivered) because the
    /// upstream reported no usage. Never zero for an answer that carried output.
    pub estimated: bool,
}

impl Cost {
    pub fn exact(usage: Usage, micros: Micros) -> Cost {
        Cost {
            usage,
            micros,
            estimated: false,
        }
    }

    pub fn estimated(usage: Usage, micros: Micros) -> Cost {
        Cost {
            usage,
            micros,
            estimated: true,
        }
    }
}

/// What to hold before the call: the store grants `max`, or what is left if that is at
/// least `min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: Micros,
    pub max: Micros,
    /// Counted against the key's tpm: the input bound plus the output limit asked for
    /// (0 for endpoints not billed by the token).
    pub tokens: u64,
}

pub use crate::billing::Account;

/// One request toward one channel.
pub struct Call {
    pub method: &'static str,
    /// Path and query after the channel's base URL.
    pub path: String,
    pub body: Bytes,
    pub content_type: String,
    /// The client asked for a stream (the upstream is asked for events).
    pub stream: bool,
    /// The model name sent upstream (a cloud builds its path from it).
    pub model: String,
    /// The wire protocol of a chat-style body; `None` for media bodies.
    pub wire: Option<crate::protocol::Protocol>,
}

/// How the answer goes back to the client.
pub enum Delivery {
    /// Read whole, then answered at once.
    Whole,
    /// Relayed piece by piece as it arrives, with this content type. `framed`: the
    /// client protocol has an error event, so a stream that broke still ends its body
    /// cleanly after it; otherwise (raw audio) the body is left unterminated so the
    /// client cannot take a cut answer for a whole one.
    Stream { content_type: String, framed: bool },
}

/// An endpoint's request side, which may borrow the client's body. Called in this
/// order: [`Request::bounds`], once [`Request::grant`], then [`Request::call`] for each
/// channel tried, then [`Request::meter`] for the answer of the channel called last.
pub trait Request {
    type Meter: Meter + 'static;

    /// The worst case of this request.
    fn bounds(&self) -> Bounds;

    /// The store granted `granted` (between the bounds): the output limit written
    /// upstream from now on is what this pays for.
    fn grant(&mut self, granted: Micros);

    /// The request for `channel`; `last`: no later channel will be tried.
    fn call(&mut self, channel: &Channel, last: bool) -> Result<Call, GatewayError>;

    /// The answer side, for the channel called last; `account`: how the key is charged
    /// (for an answer that states its own cost).
    fn meter(self, request_id: &str, account: Account) -> Self::Meter;
}

/// An endpoint's answer side: [`Meter::delivery`], then [`Meter::whole`] or
/// [`Meter::feed`]… [`Meter::finish`]; [`Meter::cost`] at any time after that began.
pub trait Meter: Send {
    /// How the 2xx answer goes back, from its content type.
    fn delivery(&mut self, upstream_content_type: &str) -> Result<Delivery, GatewayError>;

    /// A whole answer: the client's body and content type.
    fn whole(&mut self, body: Bytes, content_type: &str) -> Result<(Bytes, String), GatewayError>;

    /// A piece of a streamed answer; bytes for the client appended to `out`.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>);

    /// The streamed answer ended (`error`: how it broke, sanitized, with the request id).
    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>);

    /// What the answer has cost so far (all of it once whole or finished), at the
    /// channel's prices. Cheap: a stream asks after every read.
    fn cost(&self) -> Cost;

    /// The lines of [`Meter::cost`] (asked once, when the request settles).
    fn bill(&self) -> Bill;

    /// The upstream's content filter refused the prompt before anything was generated:
    /// the client's body and content type where its protocol tells a refusal in an
    /// answer of its own (a stop reason), `None` where the error stands.
    fn refusal(&mut self) -> Option<(Bytes, String)> {
        None
    }

    /// The response to store for `previous_response_id` (asked once, after settling).
    fn kept(&mut self) -> Option<super::kept::Kept> {
        None
    }
}

/// Output tokens a piece of delivered output can hold at most: every tokenizer the
/// gateway fronts emits at most one token per byte, the bound reservations use too.
pub fn tokens_in(bytes: u64) -> u64 {
    bytes
}

//! The token-billed relay (chat, messages, generate-content, responses): the request side
//! ([`TokenRequest`]: worst case, output limit, the body per channel) and the answer side
//! ([`TokenMeter`]: translation back to the client's protocol, usage, cost).

use super::kept::{Keep, Kept};
use super::meter::{self, Account, Bounds, Call, Cost, Delivery, Meter, Request};
use super::Relay;
use crate::billing::{input_token_bound, Bill, Price, MIN_OUTPUT_TOKENS};
use crate::channels::Channel;
use crate::errors::{GatewayError, UpstreamFailure};
use crate::ids;
use crate::protocol::chat::wire as chat;
use crate::protocol::shallow::Shallow;
use crate::protocol::{
    self, Protocol, RequestOptions, ResponseContext, StreamContext, StreamTranslator, Usage,
};
use crate::store::Micros;
use bytes::Bytes;
use serde_json::Value;

/// A checked client body. Chat bodies are read one level deep ([`Shallow`]): relayed to a
/// chat upstream they are written out once, with only the model, the stream options and
/// the output limit changed, never parsed into a tree and serialized again. Other
/// protocols, and chat bodies bound for another protocol, are parsed whole.
pub enum Body<'a> {
    Full(Value),
    Shallow { raw: &'a [u8], top: Shallow<'a> },
}

impl<'a> Body<'a> {
    pub fn parse(client: Protocol, raw: &'a [u8]) -> Result<Body<'a>, GatewayError> {
        if client == Protocol::Chat {
            let top = Shallow::parse(raw)?;
            protocol::chat::validate_shallow(&top)?;
            return Ok(Body::Shallow { raw, top });
        }
        protocol::parse_request(client, raw)
            .map(Body::Full)
            .map_err(GatewayError::from)
    }

    /// A top-level member (small ones: the model, flags, limits).
    pub fn member(&self, name: &str) -> Option<Value> {
        match self {
            Body::Full(v) => v.get(name).cloned(),
            Body::Shallow { top, .. } => top.value(name),
        }
    }

    /// The output limit the client asked for, by its protocol's rule, and how many
    /// answers: what the reservation is sized by.
    fn sizing(&self, client: Protocol) -> (Option<u64>, u64) {
        match self {
            Body::Full(v) => (
                protocol::output_limit(client, v),
                protocol::choices(client, v),
            ),
            Body::Shallow { top, .. } => {
                let count = |f: &str| top.value(f).and_then(|v| v.as_u64());
                (chat::output_limit_in(count), chat::choices_in(count))
            }
        }
    }
}

/// What the client asked for, read from the path and the body.
pub struct Asked {
    pub model: String,
    pub stream: bool,
    /// Generate-content `alt=sse`.
    pub client_sse: bool,
}

/// One token-billed request on its way upstream.
pub struct TokenRequest<'a> {
    client: Protocol,
    route: Relay,
    model: String,
    stream: bool,
    client_sse: bool,
    body: Body<'a>,
    /// What the request is reserved by: each rate at its dearest over the candidates.
    price: Price,
    /// The configuration, for the price of the channel called last when channels price
    /// the model differently (`None`: every channel bills `price`).
    channel_prices: Option<std::sync::Arc<crate::config::Config>>,
    /// The price of the channel called last.
    billed_at: Option<Price>,
    /// Upper bound of the input's tokens ([`input_token_bound`] of `raw`, read once).
    input_tokens: u64,
    /// Upper bound of the input's cost.
    input: Micros,
    /// The client's own output limit per answer (or the price's maximum).
    output_tokens: u64,
    choices: u64,
    /// Output tokens per answer the grant pays for (set by `grant`).
    cap: u64,
    /// The channel called last: its protocol, and whether the chat client itself asked
    /// for the usage chunk.
    upstream: Protocol,
    client_wants_usage: bool,
    /// The answer is stored for `previous_response_id` ([`super::stored`]).
    keep: Option<Keep>,
}

impl<'a> TokenRequest<'a> {
    pub fn new(
        route: &Relay,
        asked: Asked,
        raw: &'a [u8],
        body: Body<'a>,
        price: Price,
    ) -> TokenRequest<'a> {
        let Asked {
            model,
            stream,
            client_sse,
        } = asked;
        let (requested, choices) = body.sizing(route.protocol);
        let output_tokens = requested.unwrap_or(price.max_output_tokens).max(1);
        let input_tokens = input_token_bound(raw);
        TokenRequest {
            client: route.protocol,
            route: route.clone(),
            model,
            stream,
            client_sse,
            input_tokens,
            input: price
                .input_cost_bound(input_tokens)
                .saturating_add(price.web_search_bound(raw)),
            choices,
            cap: output_tokens,
            output_tokens,
            body,
            price,
            channel_prices: None,
            billed_at: None,
            upstream: route.protocol,
            client_wants_usage: false,
            keep: None,
        }
    }

    /// Stores the answer as `keep` says.
    pub fn keeping(mut self, keep: Option<Keep>) -> Self {
        self.keep = keep;
        self
    }

    /// Bills each channel at its own price (`config.channel_prices`).
    pub fn with_channel_prices(mut self, config: std::sync::Arc<crate::config::Config>) -> Self {
        if !config.channel_prices.is_empty() {
            self.channel_prices = Some(config);
        }
        self
    }

    fn output_cost(&self, per_choice: u64) -> Micros {
        self.price
            .output_cost(per_choice.saturating_mul(self.choices))
    }

    /// The body for `channel` (in `self.upstream`, chosen for it), carrying the output
    /// limit the grant pays for.
    fn upstream_body(
        &mut self,
        channel: &Channel,
        last: bool,
    ) -> Result<protocol::UpstreamRequest, GatewayError> {
        let upstream = self.upstream;
        let opts = RequestOptions {
            upstream_model: channel.upstream_model(&self.model),
            stream: self.stream,
            default_max_tokens: self.cap,
            chat_limit_field: channel.chat_limit_field,
            compact: self.route.compact,
        };
        let (client, cap) = (self.client, self.cap);
        let mut v = match &mut self.body {
            Body::Shallow { top, .. } if upstream == Protocol::Chat => {
                let count = |f: &str| top.value(f).and_then(|v| v.as_u64());
                let limits: Vec<(&str, String)> =
                    chat::limit_plan(count, cap, channel.chat_limit_field)
                        .into_iter()
                        .map(|(f, v)| (f, v.to_string()))
                        .collect();
                let extra: Vec<(&str, &str)> =
                    limits.iter().map(|(f, v)| (*f, v.as_str())).collect();
                return Ok(protocol::chat::passthrough_shallow(top, &opts, &extra));
            }
            Body::Shallow { raw, .. } => serde_json::from_slice(raw).map_err(|e| {
                GatewayError::internal_from("reading the checked request body again", e)
            })?,
            Body::Full(v) if last => std::mem::take(v),
            Body::Full(v) => v.clone(),
        };
        protocol::set_output_limit(client, &mut v, cap, channel.chat_limit_field).map_err(|e| {
            GatewayError::internal_from("writing the output limit into the request", e)
        })?;
        protocol::translate_request(client, upstream, v, &opts).map_err(GatewayError::from)
    }
}

impl Request for TokenRequest<'_> {
    type Meter = TokenMeter;

    fn bounds(&self) -> Bounds {
        Bounds {
            min: self
                .input
                .saturating_add(self.output_cost(self.output_tokens.min(MIN_OUTPUT_TOKENS))),
            max: self
                .input
                .saturating_add(self.output_cost(self.output_tokens)),
            tokens: self
                .input_tokens
                .saturating_add(self.output_tokens.saturating_mul(self.choices)),
        }
    }

    fn grant(&mut self, granted: Micros) {
        let per_choice = self
            .price
            .affordable_output(granted.saturating_sub(self.input))
            / self.choices;
        self.cap = per_choice.clamp(1, self.output_tokens);
    }

    fn call(&mut self, channel: &Channel, last: bool) -> Result<Call, GatewayError> {
        let model = channel.upstream_model(&self.model).to_string();
        self.upstream = channel.upstream_protocol(self.client, &model);
        let req = self.upstream_body(channel, last)?;
        if let Some(config) = &self.channel_prices {
            self.billed_at = config.channel_price(&channel.name, &self.model).cloned();
        }
        self.client_wants_usage = req.client_wants_usage;
        Ok(Call {
            method: "POST",
            path: req.path,
            body: Bytes::from(req.body),
            content_type: "application/json".into(),
            stream: self.stream,
            model,
            wire: Some(self.upstream),
        })
    }

    fn meter(self, request_id: &str, account: Account) -> TokenMeter {
        let price = self.billed_at.unwrap_or(self.price);
        let charge = self.stream.then(|| {
            let p = price.clone();
            protocol::ChargeOf(std::sync::Arc::new(move |u: &Usage| {
                account.charge(p.cost(u))
            }))
        });
        TokenMeter {
            charge,
            client: self.client,
            upstream: self.upstream,
            model: self.model,
            compact: self.route.compact,
            stream: self.stream,
            client_sse: self.client_sse,
            client_wants_usage: self.client_wants_usage,
            request_id: request_id.to_string(),
            input_bound: self.input_tokens,
            price,
            translator: None,
            reported: Usage::default(),
            delivered: 0,
            keep: self.keep,
            kept: None,
        }
    }
}

/// The answer side: translates and prices what the upstream sends back.
pub struct TokenMeter {
    client: Protocol,
    upstream: Protocol,
    model: String,
    compact: bool,
    stream: bool,
    client_sse: bool,
    client_wants_usage: bool,
    request_id: String,
    /// The input tokens the reservation assumed (used when no usage is reported).
    input_bound: u64,
    /// The price of the channel that answers.
    price: Price,
    /// Streams: how the key is charged for a usage report (printed in the usage event).
    charge: Option<protocol::ChargeOf>,
    translator: Option<Box<dyn StreamTranslator>>,
    reported: Usage,
    /// Bytes of output delivered: the generated text of a stream, the whole body of a
    /// whole answer (the count an unreported usage is billed by).
    delivered: u64,
    /// What to store once the answer is whole, and then the response to store.
    keep: Option<Keep>,
    kept: Option<Kept>,
}

impl TokenMeter {
    /// The answer is whole: `response` (the object the client gets) is made ready to store.
    fn keep_answer(&mut self, response: Option<Value>) {
        if let (Some(keep), Some(r)) = (self.keep.take(), response) {
            let native = self.upstream == Protocol::Responses;
            self.kept = keep.record(r, &self.cost().usage, native);
        }
    }
}

impl Meter for TokenMeter {
    fn delivery(&mut self, upstream_content_type: &str) -> Result<Delivery, GatewayError> {
        let sse = !upstream_content_type.contains("json");
        if !self.stream {
            return Ok(Delivery::Whole);
        }
        if !sse {
            return Err(GatewayError::Upstream(UpstreamFailure::BadResponse));
        }
        self.translator = Some(protocol::stream_translator(
            self.upstream,
            self.client,
            StreamContext {
                client_model: self.model.clone(),
                request_id: self.request_id.clone(),
                created: ids::now_secs(),
                client_wants_usage: self.client_wants_usage,
                client_sse: self.client_sse,
                charge: self.charge.take(),
            },
        ));
        // Generate-content without `alt=sse` streams a JSON array (spec 4.18).
        let content_type = if self.client == Protocol::Gemini && !self.client_sse {
            "application/json"
        } else {
            "text/event-stream"
        };
        Ok(Delivery::Stream {
            content_type: content_type.into(),
            framed: true,
        })
    }

    fn whole(&mut self, body: Bytes, _content_type: &str) -> Result<(Bytes, String), GatewayError> {
        let rctx = ResponseContext {
            client_model: &self.model,
            request_id: &self.request_id,
            created: ids::now_secs(),
            compact: self.compact,
        };
        let (out, usage) = protocol::translate_response(self.upstream, self.client, &body, &rctx)
            .map_err(|e| {
                let why = crate::store::chain(&e);
                tracing::warn!(request_id = %self.request_id, error = %why, "upstream response not understood");
                GatewayError::Upstream(UpstreamFailure::BadResponse)
            })?;
        self.reported = usage;
        // Without a usage report, the whole upstream answer bounds the output.
        self.delivered = body.len() as u64;
        if self.keep.is_some() && !self.compact {
            self.keep_answer(serde_json::from_slice(&out).ok());
        }
        Ok((Bytes::from(out), "application/json".into()))
    }

    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if let Some(tr) = self.translator.as_mut() {
            tr.feed(chunk, out);
            self.delivered = tr.delivered_bytes();
            self.reported = tr.usage();
        }
    }

    fn finish(&mut self, error: Option<&str>, out: &mut Vec<u8>) {
        if let Some(tr) = self.translator.as_mut() {
            tr.finish(error, out);
            self.delivered = tr.delivered_bytes();
            self.reported = tr.usage();
        }
        if self.keep.is_some() && error.is_none() {
            // The closing events are the last ones written: the final response is read
            // from them once, not gathered along the stream.
            self.keep_answer(protocol::responses::state::final_response(out));
        }
    }

    fn kept(&mut self) -> Option<Kept> {
        self.kept.take()
    }

    fn cost(&self) -> Cost {
        token_cost(&self.price, self.reported, self.input_bound, self.delivered)
    }

    fn bill(&self) -> Bill {
        self.price.bill(&self.cost().usage)
    }

    /// Chat clients get the upstream's own 400 `content_filter`; the other protocols tell
    /// a refused prompt in an answer that stops for that reason (messages
    /// `stop_reason: "refusal"`, generate-content `finishReason: "SAFETY"`, responses
    /// `incomplete_details.reason: "content_filter"`): an empty chat answer that stopped
    /// with `content_filter`, translated as any chat upstream's answer is.
    fn refusal(&mut self) -> Option<(Bytes, String)> {
        if self.client == Protocol::Chat {
            return None;
        }
        self.upstream = Protocol::Chat;
        let (created, id, model) = (
            ids::now_secs(),
            format!("chatcmpl-{}", self.request_id),
            self.model.clone(),
        );
        let refused = |object: &str, choice: Value| {
            serde_json::json!({
                "id": id, "object": object, "created": created, "model": model,
                "choices": [choice],
            })
        };
        if !self.stream {
            let body = refused(
                "chat.completion",
                serde_json::json!({"index": 0, "message": {"role": "assistant", "content": ""},
                                   "finish_reason": "content_filter"}),
            );
            return self
                .whole(Bytes::from(body.to_string()), "application/json")
                .ok();
        }
        let Ok(Delivery::Stream { content_type, .. }) = self.delivery("text/event-stream") else {
            return None;
        };
        let chunk = "chat.completion.chunk";
        let events = [
            refused(
                chunk,
                serde_json::json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                                   "finish_reason": null}),
            ),
            refused(
                chunk,
                serde_json::json!({"index": 0, "delta": {}, "finish_reason": "content_filter"}),
            ),
        ];
        let mut sse: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        sse.push_str("data: [DONE]\n\n");
        let mut out = Vec::new();
        self.feed(sse.as_bytes(), &mut out);
        self.finish(None, &mut out);
        Some((Bytes::from(out), content_type))
    }
}

/// The cost of an answer: from the upstream's report when it reported its output, or
/// counted (the input bound the reservation used, and one token per byte delivered).
pub fn token_cost(price: &Price, reported: Usage, input_bound: u64, delivered: u64) -> Cost {
    let reported_any = reported != Usage::default();
    if reported_any && (reported.output_tokens > 0 || delivered == 0) {
        return Cost::exact(reported, price.cost(&reported));
    }
    let usage = Usage {
        input_tokens: if reported.input_tokens > 0 {
            reported.input_tokens
        } else {
            input_bound
        },
        output_tokens: meter::tokens_in(delivered),
        ..reported
    };
    Cost::estimated(usage, price.cost(&usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawPrice;

    fn price() -> Price {
        Price::from_raw(&RawPrice {
            input: Some(1.0),
            output: Some(2.0),
            cached_input: None,
            cache_write: None,
            max_output_tokens: Some(1000),
            per_image: Default::default(),
            per_million_chars: None,
            per_minute: None,
            per_second: None,
            ..RawPrice::default()
        })
        .unwrap()
    }

    #[test]
    fn reported_usage_is_exact() {
        let u = Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        };
        let c = token_cost(&price(), u, 999, 999);
        assert!(!c.estimated);
        assert_eq!(c.micros, 20);
    }

    #[test]
    fn missing_usage_is_never_free() {
        let c = token_cost(&price(), Usage::default(), 100, 40);
        assert!(c.estimated);
        assert_eq!(c.usage.output_tokens, 40);
        assert_eq!(c.micros, 100 + 80);
        // Input reported, output not (a stream cut after its first event).
        let u = Usage {
            input_tokens: 7,
            ..Usage::default()
        };
        let c = token_cost(&price(), u, 100, 3);
        assert!(c.estimated);
        assert_eq!(c.micros, 7 + 6);
    }

    #[test]
    fn choices_multiply_the_reservation_and_divide_the_grant() {
        let route = Relay {
            protocol: Protocol::Chat,
            path_model: None,
            path_stream: false,
            compact: false,
        };
        let raw =
            br#"{"model":"m","n":4,"max_tokens":100,"messages":[{"role":"user","content":"x"}]}"#;
        let body = Body::parse(Protocol::Chat, raw).unwrap();
        let asked = Asked {
            model: "m".into(),
            stream: false,
            client_sse: false,
        };
        let mut r = TokenRequest::new(&route, asked, raw, body, price());
        let b = r.bounds();
        assert_eq!(
            b.max - r.input,
            4 * 100 * 2,
            "four answers of 100 tokens at 2 each"
        );
        r.grant(r.input + 4 * 50 * 2);
        assert_eq!(r.cap, 50, "the grant pays for 50 tokens per answer");
        r.grant(b.max);
        assert_eq!(r.cap, 100, "never above the client's own limit");
    }
}

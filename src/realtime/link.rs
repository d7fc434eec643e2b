//! The relay of an upgraded session: one loop that moves bytes both ways, reads the
//! upstream's frames for usage as they pass, and tops the reservations up between
//! responses; then the closing of both sides.

use super::billing::{self, Meter, Refusal};
use super::frames::{self, Collect, Fed, FrameReader};
use crate::channels::Channel;
use crate::ids;
use crate::lifecycle::Cut;
use bytes::Bytes;
use pingora::protocols::http::client::HttpSession;
use pingora::proxy::Session;
use pingora::ErrorType;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

/// Largest text message held to be read for usage; a larger one is forwarded unread.
/// `response.done` carries the whole response's output items, so it is allowed to be
/// large, but nothing legitimate comes near this.
pub const MAX_TEXT_MESSAGE: usize = 16 << 20;

/// How long the client is given to answer a close frame before its connection is
/// closed. Closing with the client's reply still unread would make the kernel reset the
/// connection, which may discard the close frame before the client reads it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The state of one relayed WebSocket.
pub struct Link {
    pub(super) model: String,
    pub(super) channel: Arc<Channel>,
    pub(super) meter: Meter,
    /// Reads the upstream's frames for the usage of `response.done` events.
    upstream: FrameReader,
    /// Follows the client's frames, to know where a close frame may go toward the
    /// upstream and when the client has answered one.
    client: FrameReader,
}

/// Why the relay stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The client closed its connection (or it failed).
    ClientLeft,
    /// The upstream closed its connection (or it failed).
    UpstreamLeft,
    /// Neither side sent anything for the channel's read timeout.
    Idle,
    /// The session cannot pay for more.
    Refused(Refusal),
    /// The upstream's bytes are not WebSocket frames the gateway can read to bill.
    Unreadable,
    /// The gateway is stopping and the grace period is over.
    Stopping,
}

impl Link {
    pub fn new(model: String, channel: Arc<Channel>, meter: Meter) -> Link {
        Link {
            model,
            channel,
            meter,
            upstream: FrameReader::new(Some(Collect {
                cap: MAX_TEXT_MESSAGE,
                sniff: billing::sniff,
            })),
            client: FrameReader::new(None),
        }
    }

    /// Frames relayed so far: `(from the upstream, from the client)`.
    pub fn frames(&self) -> (u64, u64) {
        (self.upstream.frames(), self.client.frames())
    }

    /// Text messages from the upstream too large to be read for usage.
    pub fn unread_messages(&self) -> u64 {
        self.upstream.oversize()
    }

    /// Bytes from the client, on their way up: followed, never changed. Frames the
    /// gateway cannot follow are the upstream's to refuse; the only loss is that no
    /// close frame can be placed after them.
    fn client_bytes(&mut self, data: &[u8]) {
        let _ = self.client.feed(data, |_, _| ControlFlow::Continue(()));
    }

    /// Bytes from the upstream, on their way to the client: returns what to forward and
    /// whether the session ends after it. After every `response.done` the session's
    /// reservations are topped up, awaited here, before anything more is relayed
    /// either way; a refusal cuts the bytes right after that event.
    async fn upstream_bytes(&mut self, data: Bytes) -> (Bytes, Option<End>) {
        let mut pos = 0;
        loop {
            let meter = &mut self.meter;
            let fed = self.upstream.feed(&data[pos..], |_, text| {
                match text.and_then(billing::response_done_usage) {
                    Some(u) => {
                        meter.add(&u);
                        ControlFlow::Break(())
                    }
                    None => ControlFlow::Continue(()),
                }
            });
            match fed {
                Ok(Fed::All) => return (data, None),
                Ok(Fed::Stopped(end)) => {
                    pos += end;
                    if let Err(why) = self.meter.top_up().await {
                        return (data.slice(..pos), Some(End::Refused(why)));
                    }
                }
                Err(e) => {
                    tracing::error!(reason = e.reason, channel = %self.channel.name,
                        "realtime upstream sent invalid frames; closing the session");
                    // Forwarded as it came: the client's own WebSocket fails on it, as
                    // it would talking to the upstream directly.
                    return (data, Some(End::Unreadable));
                }
            }
        }
    }

    /// The close frame the client gets for `end`, if one can be sent: not when it left,
    /// not when the upstream's own close already went to it, and not inside a frame.
    fn close_for_client(&self, end: End) -> Option<Vec<u8>> {
        let (code, reason) = match end {
            End::ClientLeft | End::Unreadable => return None,
            End::Refused(why) => why.close(),
            End::Idle => (1001, "idle timeout"),
            End::Stopping => (1001, "gateway stopping"),
            End::UpstreamLeft => (1011, "upstream connection lost"),
        };
        (!self.upstream.closed() && self.upstream.at_boundary())
            .then(|| frames::server_close(code, reason))
    }

    /// The close frame the upstream gets for `end`, under the same conditions.
    fn close_for_upstream(&self, end: End) -> Option<Vec<u8>> {
        let code = match end {
            End::UpstreamLeft => return None,
            End::ClientLeft | End::Idle | End::Stopping => 1001,
            End::Refused(_) => 1000,
            End::Unreadable => 1002,
        };
        // RFC 6455 wants unpredictable masks so that script-chosen payloads cannot be
        // aimed at intermediaries; this payload is the gateway's own two bytes.
        let mask = ids::fast_random().to_le_bytes();
        (!self.client.closed() && self.client.at_boundary())
            .then(|| frames::client_close(code, [mask[0], mask[1], mask[2], mask[3]]))
    }
}

fn timed_out(e: &pingora::Error) -> bool {
    matches!(e.etype(), ErrorType::ReadTimedout)
}

/// Relays until either side ends, the session idles out, or it cannot pay for more.
///
/// One task, one `select!`: whichever side has bytes first is handled to the end
/// (written to the other side, billed) before either side is read again, so a top-up
/// after a `response.done` is always answered before the client's next bytes move.
/// Both reads are cancel-safe (a read not chosen has consumed nothing), and each is
/// started afresh every turn, so the read timeout measures silence both ways.
pub async fn pump(
    session: &mut Session,
    http: &mut HttpSession,
    link: &mut Link,
    cut: &Cut,
) -> End {
    let stopping = cut.wait();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            () = &mut stopping => return End::Stopping,
            r = session.read_request_body() => match r {
                Ok(Some(data)) => {
                    link.client_bytes(&data);
                    if let Err(e) = http.write_request_body(data, false).await {
                        tracing::debug!(error = %e, "realtime upstream write failed");
                        return End::UpstreamLeft;
                    }
                }
                Ok(None) => return End::ClientLeft,
                Err(e) if timed_out(&e) => return End::Idle,
                Err(e) => {
                    tracing::debug!(error = %e, "realtime client read failed");
                    return End::ClientLeft;
                }
            },
            r = http.read_response_body() => match r {
                Ok(Some(data)) => {
                    let (out, end) = link.upstream_bytes(data).await;
                    if !out.is_empty() {
                        if let Err(e) = session.write_response_body(Some(out), false).await {
                            tracing::debug!(error = %e, "realtime client write failed");
                            return End::ClientLeft;
                        }
                    }
                    if let Some(end) = end {
                        return end;
                    }
                }
                Ok(None) => return End::UpstreamLeft,
                Err(e) if timed_out(&e) => return End::Idle,
                Err(e) => {
                    tracing::debug!(error = %e, "realtime upstream read failed");
                    return End::UpstreamLeft;
                }
            },
        }
    }
}

/// Closes both sides after [`pump`] ended with `end`: close frames where they can be
/// placed, the upstream connection shut (an upgraded connection never returns to the
/// pool), and, when the client was sent a close frame, its answer awaited (bounded) so
/// that its connection can then be closed without a reset.
pub async fn close(session: &mut Session, mut http: HttpSession, link: &mut Link, end: End) {
    if let Some(frame) = link.close_for_upstream(end) {
        let _ = http.write_request_body(Bytes::from(frame), false).await;
    }
    http.shutdown().await;
    drop(http);

    if end == End::ClientLeft {
        return;
    }
    let told = match link.close_for_client(end) {
        Some(frame) => {
            let sent = session
                .write_response_body(Some(Bytes::from(frame)), false)
                .await;
            if sent.is_err() {
                return;
            }
            true
        }
        None => link.upstream.closed(),
    };
    if !told || link.client.closed() {
        // No close frame reached the client, or it already sent its own.
        return;
    }
    let answered = async {
        while let Ok(Some(data)) = session.read_request_body().await {
            link.client_bytes(&data);
            if link.client.closed() {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, answered).await;
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;

//! The `demo` channel's upstream: a small model server inside the gateway's own process,
//! on a loopback port, so a fresh installation answers its first request without a
//! provider key or a network. It speaks the OpenAI API's chat completions, embeddings
//! and models endpoints (the shapes of OpenAI's API reference, "Chat Completions",
//! "Embeddings", "Models"); every other client protocol reaches it through the gateway's
//! translation, and it is metered, billed and health-checked like any upstream.
//!
//! Answers are made up but shaped like a real model's: text paced at the channel's token
//! rate, a tool call when tools are offered, usage counted from what was sent and
//! written. Failures on request, to try fallbacks and circuits: the model names
//! `demo-error`, `demo-overloaded`, `demo-timeout`, `demo-stall` (after the channel's
//! model map), or the same markers in the last user message (`[demo:error]`,
//! `[demo:overloaded]`, `[demo:timeout]`, `[demo:stall]`, `[demo:cut]`).
//!
//! A leaf: it knows nothing of the gateway; a channel only asks it for its address.

mod answer;
mod http1;

use std::net::SocketAddr;
use std::sync::OnceLock;

/// The demo server's address, started on first use (one per process, shared by every
/// demo channel and every reload).
pub fn address() -> std::io::Result<SocketAddr> {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    if let Some(a) = ADDR.get() {
        return Ok(*a);
    }
    // Two channels asking at once may both bind; the loser's listener is dropped with
    // its thread never started.
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    match ADDR.set(addr) {
        Ok(()) => {
            listener.set_nonblocking(true)?;
            std::thread::Builder::new()
                .name("demo-upstream".into())
                .spawn(move || serve(listener))?;
            Ok(addr)
        }
        Err(_) => Ok(*ADDR.get().expect("set by the winner")),
    }
}

/// The path prefix a demo channel's requests carry: the server reads the token rate
/// from it, so channels of different rates share one server.
pub fn path_prefix(tokens_per_second: u32) -> String {
    format!("/demo/{tokens_per_second}")
}

/// Tokens a second when the channel names no rate: about what a hosted model streams.
pub const DEFAULT_TOKENS_PER_SECOND: u32 = 50;

fn serve(listener: std::net::TcpListener) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "the demo upstream cannot start its runtime");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "the demo upstream cannot listen");
                return;
            }
        };
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(http1::connection(stream));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the demo upstream could not accept");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    });
}

//! The operator's endpoints on the admin listener:
//!
//! - `GET /metrics`: Prometheus text format (no token: scrapers rarely carry one, and
//!   nothing in it is secret; keep the admin listener off the public network);
//! - `GET /healthz`: the process is alive (no token, for liveness probes);
//! - `GET /readyz`: the store answers and no stop is under way; 503 with the reason
//!   otherwise (no token, for readiness probes and load balancers);
//! - `GET /admin/channels` (token): each channel's circuit, recent error rate, latency,
//!   last error kind and keys (by fingerprint, never the key);
//! - `POST /admin/reload` (token): reads the configuration file again (as `SIGHUP`).

use crate::errors::GatewayError;
use crate::gateway::Live;
use serde_json::{json, Value};
use std::time::Duration;

/// How long `/readyz` waits for the store before calling it unreachable.
const READY_STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// An answer of the admin listener.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: u16, v: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_default(),
        }
    }
}

/// `GET /metrics`.
pub fn metrics(live: &Live) -> Reply {
    let gw = live.current();
    Reply {
        status: 200,
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body: gw.observe.render(&gw.config),
    }
}

/// `GET /healthz`.
pub fn healthz() -> Reply {
    Reply::json(
        200,
        &json!({
            "status": "ok",
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
        }),
    )
}

/// `GET /readyz`.
pub async fn ready(live: &Live) -> Reply {
    let gw = live.current();
    let unready = |reason: String| {
        Reply::json(
            503,
            &json!({"status": "unavailable", "reason": reason, "pid": std::process::id()}),
        )
    };
    if gw.observe.stopping() {
        return unready("the gateway is stopping".into());
    }
    match tokio::time::timeout(READY_STORE_TIMEOUT, gw.store.ping()).await {
        Err(_) => return unready("the store did not answer in time".into()),
        Ok(Err(e)) => return unready(format!("the store is unreachable: {e}")),
        Ok(Ok(())) => {}
    }
    Reply::json(
        200,
        &json!({
            "status": "ready",
            "pid": std::process::id(),
            "config_generation": gw.generation,
            "last_reload_error": live.last_error(),
        }),
    )
}

/// `GET /admin/channels`.
pub fn channels(live: &Live) -> Value {
    let gw = live.current();
    let data: Vec<Value> = gw
        .config
        .channels
        .iter()
        .map(|c| {
            let h = c.health.view(&c.circuit);
            let mut row = json!({
                "name": c.name,
                "protocol": c.protocol.as_str(),
                "state": h.state.as_str(),
                "recent_requests": h.recent_requests,
                "recent_error_rate": h.recent_error_rate,
                "latency_ms": h.latency_ms,
                "last_error": h.last_error,
                "last_error_secs_ago": h.last_error_secs_ago,
                "next_probe_in_secs": h.open_for_secs,
                "circuit": {
                    "failures": c.circuit.failures,
                    "cooldown_secs": c.circuit.cooldown.as_secs(),
                },
                "keys": c.keys.view(),
            });
            // Cloud channels: how they authenticate, a token's expiry, the last refresh
            // error (never a secret).
            if let Some(cloud) = &c.cloud {
                row["auth"] = cloud.auth_state();
            }
            row
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// `POST /admin/reload`: 200 with what changed, or 400 naming the bad field (the running
/// configuration stays).
pub fn reload(live: &Live) -> Result<Value, GatewayError> {
    match live.reload() {
        Ok(r) => Ok(json!({
            "reloaded": true,
            "generation": r.generation,
            "channels": r.channels,
            "prices": r.prices,
            "restart_required": r.restart_required,
        })),
        Err(e) => Err(GatewayError::bad_request(
            (!e.path.is_empty()).then_some(e.path.as_str()),
            format!("The configuration was not reloaded: {e}"),
        )),
    }
}

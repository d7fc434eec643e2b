//! model-gateway: one base URL and one `sk-...` key in front of many model providers,
//! built as a Pingora `ProxyHttp` service.
//!
//! The request path, module by module (see `README.md`, Architecture):
//! [`edge`] (header deadline, connection cap) → [`proxy`] (phases) → [`route`] →
//! [`auth`] (who) → [`relay`] (the metered exchange, with [`billing`] reserving and
//! settling, [`channels`] choosing the upstream and [`protocol`] translating) →
//! [`store`] (keys, quota, usage). Every handler answers with a [`request::Answer`] the
//! proxy writes. [`api`] answers the endpoints served locally and the admin API;
//! [`errors`] renders every failure. [`video`] runs asynchronous video tasks, [`realtime`]
//! the WebSocket relay; [`lifecycle`] ends what still runs on a graceful stop;
//! [`observe`] is what an operator sees: metrics, access log, traces.

pub mod api;
pub mod auth;
pub mod billing;
pub mod channels;
pub mod config;
pub mod demo;
pub mod edge;
pub mod errors;
pub mod gateway;
pub mod ids;
pub mod lifecycle;
pub mod media;
pub mod observe;
pub mod protocol;
pub mod proxy;
pub mod realtime;
pub mod reconcile;
pub mod redact;
pub mod relay;
pub mod request;
pub mod route;
pub mod server;
pub mod store;
pub mod tls;
pub mod video;

//! Integration tests: real gateways in-process on ephemeral ports, mock upstreams in
//! Rust, and a private `redis-server` per test that needs one.

#[path = "../support/flaky_proxy.rs"]
mod flaky_proxy;
#[path = "../support/gateway.rs"]
mod gateway;
#[path = "../support/greedy_upstream.rs"]
mod greedy_upstream;
#[path = "../support/media_upstream.rs"]
mod media_upstream;
#[path = "../support/mock_upstream.rs"]
mod mock_upstream;
#[path = "../support/providers.rs"]
mod providers;
#[path = "../support/redis.rs"]
mod redis_server;
#[path = "../support/video_upstream.rs"]
mod video_upstream;

mod auth;
mod cap;
mod cap_property;
mod cap_streams;
mod chat;
mod contract;
mod leases;
mod lifecycle;
mod local;
mod media;
mod money_once;
mod protocols;
mod quota;
mod realtime;
mod sdk;
mod stores;
mod task_store;
mod two_instances;
mod video;

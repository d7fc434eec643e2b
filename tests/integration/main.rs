//! Integration tests: real gateways in-process on ephemeral ports, mock upstreams in
//! Rust, and a private `redis-server` per test that needs one.

#[path = "../support/azure.rs"]
mod azure_mock;
#[path = "../support/billed_vendors.rs"]
mod billed_vendors;
#[path = "../support/dashscope.rs"]
mod dashscope;
#[path = "../support/faulty_upstream.rs"]
mod faulty_upstream;
#[path = "../support/flaky_proxy.rs"]
mod flaky_proxy;
#[path = "../support/gateway.rs"]
mod gateway;
#[path = "../support/greedy_upstream.rs"]
mod greedy_upstream;
#[path = "../support/h2_upstream.rs"]
mod h2_upstream;
#[path = "../support/kling.rs"]
mod kling;
#[path = "../support/media_upstream.rs"]
mod media_upstream;
#[path = "../support/mock_upstream.rs"]
mod mock_upstream;
#[path = "../support/openai_videos.rs"]
mod openai_videos;
#[path = "../support/otlp_receiver.rs"]
mod otlp_receiver;
#[path = "../support/process.rs"]
mod process;
#[path = "../support/providers.rs"]
mod providers;
#[path = "../support/redis.rs"]
mod redis_server;
#[path = "../support/tls.rs"]
mod tls_ca;
#[path = "../support/usage_apis.rs"]
mod usage_apis;
#[path = "../support/vertex_mock.rs"]
mod vertex_mock;
#[path = "../support/video_upstream.rs"]
mod video_upstream;
#[path = "../support/volcengine.rs"]
mod volcengine;

mod auth;
mod azure;
mod azure_auth;
mod bedrock;
mod cap;
mod cap_property;
mod cap_streams;
mod chat;
mod console;
mod console_browser;
mod contract;
mod demo;
mod deploy;
mod edges;
mod edges_http;
mod head;
mod key_policy;
mod leases;
mod lifecycle;
mod local;
mod media;
mod media_edits;
mod money_once;
mod openapi;
mod ops;
mod pricing;
mod protocols;
mod quickstart;
mod quota;
mod ratelimit_headers;
mod realtime;
mod reconcile;
mod redis_policy;
mod responses_state;
mod sdk;
mod stores;
mod stream_pace;
mod task_store;
mod tls;
mod tls_admin;
mod tls_clients;
mod tls_h2;
mod tls_proxy_protocol;
mod tls_rotation;
mod two_instances;
mod upgrade;
mod upstream_h2;
mod vertex;
mod video;
mod video_checks;
mod video_instances;
mod video_tasks;
mod video_vendors;

//! The PROXY protocol (HAProxy's `doc/proxy-protocol.txt`, versions 1 and 2) from a
//! trusted balancer sets the client's address, which a key's IP allowlist then checks;
//! a header from any other address closes the connection. The headers here are written
//! byte by byte from the specification.

use crate::gateway::{openai_channel, StoreKind, TestGateway};
use crate::mock_upstream::{openai, MockUpstream, Reply};
use crate::tls::{addr_of, read_to_close, tls_section};
use crate::tls_ca::{connect, ClientOptions, TestCa};
use serde_json::json;
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Version 2, PROXY command, TCP over IPv4 (spec 2.2): the signature, 0x21, 0x11, the
/// address block's length (12), source and destination addresses, then ports.
fn v2(source: Ipv4Addr, port: u16) -> Vec<u8> {
    let mut h = b"\x0D\x0A\x0D\x0A\x00\x0D\x0A\x51\x55\x49\x54\x0A".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0x00, 0x0C]);
    h.extend_from_slice(&source.octets());
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&443u16.to_be_bytes());
    h
}

fn v1(source: &str) -> Vec<u8> {
    format!("PROXY TCP4 {source} 127.0.0.1 40001 443\r\n").into_bytes()
}

fn models(key: &str) -> Vec<u8> {
    format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

/// What the gateway answers to `bytes` sent on a new plain connection.
async fn send(gw: &TestGateway, bytes: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr_of(gw)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    read_to_close(&mut s, Duration::from_secs(10)).await
}

async fn upstream() -> MockUpstream {
    MockUpstream::start(|_| Reply::json(200, openai::completion("m", "hi", openai::usage(1, 1, 0))))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_balancers_header_sets_the_client_address_for_the_allowlist() {
    let up = upstream().await;
    let cfg = openai_channel(&up.base_url(), &["m"]) + "proxy_protocol: { trusted: [127.0.0.1] }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw
        .create_key(json!({"allow_ips": ["203.0.113.0/24"]}))
        .await;
    let allowed = Ipv4Addr::new(203, 0, 113, 7);
    // Without a header the TCP peer (127.0.0.1) is the client: not on the list.
    assert!(send(&gw, &models(&key)).await.starts_with("HTTP/1.1 403"));
    for header in [v1("203.0.113.7"), v2(allowed, 50000)] {
        let answer = send(&gw, &[header, models(&key)].concat()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    for header in [v1("198.51.100.1"), v2(Ipv4Addr::new(198, 51, 100, 1), 1)] {
        let answer = send(&gw, &[header, models(&key)].concat()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    // A header split over several writes is read whole.
    let mut s = tokio::net::TcpStream::connect(addr_of(&gw)).await.unwrap();
    let whole = [v2(allowed, 50001), models(&key)].concat();
    for part in whole.chunks(7) {
        s.write_all(part).await.unwrap();
        s.flush().await.unwrap();
    }
    let answer = read_to_close(&mut s, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A malformed header closes the connection.
    assert_eq!(send(&gw, b"PROXY TCP4 nonsense\r\n").await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_from_an_untrusted_address_is_refused() {
    let up = upstream().await;
    let cfg =
        openai_channel(&up.base_url(), &["m"]) + "proxy_protocol: { trusted: [10.0.0.0/8] }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({})).await;
    for header in [v1("203.0.113.7"), v2(Ipv4Addr::new(203, 0, 113, 7), 9)] {
        assert_eq!(send(&gw, &[header, models(&key)].concat()).await, "");
    }
    // Its own requests, without a header, are served.
    assert!(send(&gw, &models(&key)).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_comes_before_tls() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("proxy CA");
    let cert = ca.server(dir.path(), "gw", &["gw.test"], 0x77);
    let cfg = openai_channel(&up.base_url(), &["m"])
        + &tls_section(&[&cert], "")
        + "proxy_protocol: { trusted: [127.0.0.1] }\n";
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, _) = gw.create_key(json!({"allow_ips": ["203.0.113.7"]})).await;
    for (source, want) in [
        ("203.0.113.7", "HTTP/1.1 200"),
        ("198.51.100.1", "HTTP/1.1 403"),
    ] {
        let header = v1(source);
        let mut h = connect(
            addr_of(&gw),
            &ca.pem(),
            ClientOptions {
                sni: Some("gw.test"),
                preamble: Some(&header),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        h.stream.write_all(&models(&key)).await.unwrap();
        let answer = read_to_close(&mut h.stream, Duration::from_secs(10)).await;
        assert!(answer.starts_with(want), "{source}: {answer}");
    }
}

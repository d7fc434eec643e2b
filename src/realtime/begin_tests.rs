//! `begin` on a real Pingora session read from a socket.

use super::*;
use crate::config::Config;
use crate::ids;
use crate::store::embedded::EmbeddedStore;
use crate::store::{Ask, KeyRecord, KeyStatus, Micros, Store};
use pingora::protocols::l4::stream::Stream;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const CONFIG: &str = "listen: 127.0.0.1:0
channels:
  - name: rt-main
    protocol: openai
    base_url: https://api.openai.example
    api_key: sk-upstream
    models: [gpt-realtime, gpt-unpriced]
  - name: msgs
    protocol: anthropic
    base_url: https://api.anthropic.example
    models: [claude-rt]
prices:
  gpt-realtime: { input: 4.0, output: 16.0, cached_input: 0.4, max_output_tokens: 4096 }
  claude-rt: { input: 3.0, output: 15.0 }
";

struct Fixture {
    _dir: tempfile::TempDir,
    gw: Gateway,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}store: {{ embedded: {{ path: {} }} }}\n",
        dir.path().display()
    );
    let config = Config::parse(&text, dir.path()).unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    Fixture {
        _dir: dir,
        gw: Gateway::new(Arc::new(config), store),
    }
}

impl Fixture {
    async fn key(&self, id: &str, models: &[&str], quota: Option<Micros>) -> Arc<AuthKey> {
        let rec = KeyRecord {
            id: id.into(),
            hash: format!("{id:0>64}"),
            display: "sk-abc…wxyz".into(),
            name: id.into(),
            status: KeyStatus::Enabled,
            created_at: ids::now_secs(),
            expires_at: None,
            models: models.iter().map(|m| m.to_string()).collect(),
            allow_ips: Vec::new(),
            rpm: None,
            quota_limit: quota,
            quota_used: 0,
            group: None,
            policy: Default::default(),
        };
        self.gw.store.create_key(&rec).await.unwrap();
        Arc::new(AuthKey::new(rec))
    }

    /// Runs `begin` on a request with these extra header lines.
    async fn begin(
        &self,
        key: &Arc<AuthKey>,
        query: &str,
        headers: &str,
    ) -> (Result<Link, GatewayError>, Ctx, Session) {
        self.begin_version(key, query, headers, "HTTP/1.1").await
    }

    async fn begin_version(
        &self,
        key: &Arc<AuthKey>,
        query: &str,
        headers: &str,
        version: &str,
    ) -> (Result<Link, GatewayError>, Ctx, Session) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let req = format!("GET /v1/realtime?{query} {version}\r\nHost: gw\r\n{headers}\r\n");
        client.write_all(req.as_bytes()).await.unwrap();
        let mut session = Session::new_h1(Box::new(Stream::from(server)));
        assert!(session.read_request().await.unwrap());
        let mut ctx = Ctx::new();
        let q = session.req_header().uri.query().map(str::to_string);
        let r = begin(&self.gw, &mut session, &mut ctx, key, q.as_deref()).await;
        (r, ctx, session)
    }

    /// True when `amount` can be reserved for the key (nothing else holds it).
    async fn can_reserve(&self, key: &str, amount: Micros) -> bool {
        let r = self
            .gw
            .store
            .reserve_ask(key, &ids::request_id(), &Ask::money_now(amount, amount), 60)
            .await
            .unwrap();
        match r {
            Ok(r) => {
                self.gw.store.settle(&r, 0).await.unwrap();
                true
            }
            Err(_) => false,
        }
    }
}

const HANDSHAKE: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

fn param(r: Result<Link, GatewayError>) -> Option<String> {
    match r {
        Err(GatewayError::BadRequest { param, message }) => {
            assert!(message.ends_with('.'), "{message}");
            param
        }
        Err(other) => panic!("expected a 400, got {other:?}"),
        Ok(_) => panic!("expected a 400, got a link"),
    }
}

#[tokio::test]
async fn a_valid_handshake_reserves_a_block_and_leaves_a_link() {
    let f = fixture().await;
    let key = f.key("k1", &[], Some(1_000_000)).await;
    let (r, mut ctx, session) = f.begin(&key, "model=gpt-realtime", HANDSHAKE).await;
    let Ok(mut link) = r else {
        panic!("{:?}", r.err())
    };
    let rec = ctx.record.as_ref().unwrap();
    assert_eq!(
        (rec.model.as_str(), rec.channel.as_str(), rec.stream),
        ("gpt-realtime", "rt-main", true)
    );
    assert_eq!(link.model, "gpt-realtime");
    assert_eq!(link.channel.name, "rt-main");
    let block = 4096 * 4 + 4096 * 16;
    assert!(f.can_reserve("k1", 1_000_000 - block).await);
    assert!(
        !f.can_reserve("k1", 1_000_000 - block + 1).await,
        "one block is held"
    );
    // The client's idle limit is the channel's read timeout, not Pingora's 60 s.
    assert_eq!(session.get_read_timeout(), Some(Duration::from_secs(300)));
    assert_eq!(session.get_write_timeout(), Some(Duration::from_secs(300)));
    settle(&mut ctx, &mut link).await;
    assert!(f.can_reserve("k1", 1_000_000).await, "released at the end");
    let rec = ctx.record.as_ref().unwrap();
    assert_eq!((rec.cost, rec.stream), (0, true));
    settle(&mut ctx, &mut link).await;
    assert!(
        f.can_reserve("k1", 1_000_000).await,
        "a second settle is harmless"
    );
}

#[tokio::test]
async fn not_a_websocket_handshake_is_a_400_before_anything_else() {
    let f = fixture().await;
    // The whitelist would refuse this model too: the handshake is checked first.
    let key = f.key("k1", &["claude-rt"], Some(10)).await;
    let (r, _, _) = f.begin(&key, "model=gpt-realtime", "").await;
    assert_eq!(param(r).as_deref(), Some("upgrade"));
    let no_version = HANDSHAKE.replace("Sec-WebSocket-Version: 13\r\n", "");
    let (r, _, _) = f.begin(&key, "model=gpt-realtime", &no_version).await;
    assert_eq!(param(r).as_deref(), Some("sec-websocket-version"));
    let (r, _, _) = f
        .begin_version(&key, "model=gpt-realtime", HANDSHAKE, "HTTP/1.0")
        .await;
    assert_eq!(
        param(r).as_deref(),
        Some("upgrade"),
        "an upgrade is HTTP/1.1"
    );
    assert!(f.can_reserve("k1", 10).await, "nothing was reserved");
}

#[tokio::test]
async fn the_model_is_required() {
    let f = fixture().await;
    let key = f.key("k1", &[], None).await;
    for q in ["", "model=", "voice=alloy"] {
        let (r, _, _) = f.begin(&key, q, HANDSHAKE).await;
        assert_eq!(param(r).as_deref(), Some("model"), "{q}");
    }
}

#[tokio::test]
async fn whitelist_channel_and_price_are_checked_in_order() {
    let f = fixture().await;
    let only_claude = f.key("k1", &["claude-rt"], None).await;
    let (r, _, _) = f.begin(&only_claude, "model=gpt-realtime", HANDSHAKE).await;
    assert!(matches!(r, Err(GatewayError::ModelNotAllowed(m)) if m == "gpt-realtime"));

    let any = f.key("k2", &[], None).await;
    // Served, but only by a channel that does not speak this protocol.
    let (r, _, _) = f.begin(&any, "model=claude-rt", HANDSHAKE).await;
    assert!(matches!(r, Err(GatewayError::ModelNotFound(m)) if m == "claude-rt"));
    let (r, _, _) = f.begin(&any, "model=nobody-serves", HANDSHAKE).await;
    assert!(matches!(r, Err(GatewayError::ModelNotFound(_))));
    let (r, _, _) = f.begin(&any, "model=gpt-unpriced", HANDSHAKE).await;
    assert!(matches!(r, Err(GatewayError::ModelNotPriced(_))));
}

#[tokio::test]
async fn a_key_that_cannot_afford_the_floor_is_refused() {
    let f = fixture().await;
    // The floor: 4096 input tokens at 4 plus 16 output tokens at 16 micro-USD.
    let poor = f.key("k1", &[], Some(4096 * 4 + 16 * 16 - 1)).await;
    let (r, _, _) = f.begin(&poor, "model=gpt-realtime", HANDSHAKE).await;
    assert!(
        matches!(r, Err(GatewayError::QuotaExhausted)),
        "{:?}",
        r.err()
    );

    // Enough for the floor but not a block: granted what is left.
    let some = f.key("k2", &[], Some(20_000)).await;
    let (r, mut ctx, _) = f.begin(&some, "model=gpt-realtime", HANDSHAKE).await;
    let mut link = r.unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(link.meter.reserved(), 20_000);
    settle(&mut ctx, &mut link).await;
    assert!(f.can_reserve("k2", 20_000).await);
}

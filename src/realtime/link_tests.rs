use super::*;
use crate::config::Config;
use crate::store::embedded::EmbeddedStore;
use crate::store::{KeyRecord, KeyStatus, Micros, Store};

const CONFIG: &str = "listen: 127.0.0.1:0
channels:
  - name: rt-main
    protocol: openai
    base_url: https://api.openai.example/proxy
    api_key: sk-upstream
    models: [gpt-realtime]
    model_map: { gpt-realtime: gpt-realtime-2025-08-28 }
prices:
  gpt-realtime: { input: 4.0, output: 16.0, cached_input: 0.4, max_output_tokens: 4096 }
";

/// 4096 input tokens at 4 plus 4096 output tokens at 16 micro-USD.
const BLOCK: Micros = 4096 * 4 + 4096 * 16;

struct Fixture {
    _dir: tempfile::TempDir,
    gw: Gateway,
    key: String,
}

async fn fixture(quota: Option<Micros>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{CONFIG}store: {{ embedded: {{ path: {} }} }}\n",
        dir.path().display()
    );
    let config = Config::parse(&text, dir.path()).unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let rec = KeyRecord {
        id: "key1".into(),
        hash: "11".repeat(32),
        display: "sk-abc…wxyz".into(),
        name: "t".into(),
        status: KeyStatus::Enabled,
        created_at: ids::now_secs(),
        expires_at: None,
        models: Vec::new(),
        allow_ips: Vec::new(),
        rpm: None,
        quota_limit: quota,
        quota_used: 0,
    };
    store.create_key(&rec).await.unwrap();
    Fixture {
        _dir: dir,
        gw: Gateway::new(Arc::new(config), store),
        key: "key1".into(),
    }
}

impl Fixture {
    /// A context as `begin` leaves it.
    async fn ctx(&self, query: &str) -> Ctx {
        let mut ctx = Ctx::new();
        let price = self.gw.config.prices["gpt-realtime"].clone();
        let (min, max) = billing::first_block(&price);
        let first = self
            .gw
            .store
            .reserve(&self.key, &ctx.request_id, min, max, ids::now_secs(), 3600)
            .await
            .unwrap()
            .unwrap();
        let account = Account {
            store: self.gw.store.clone(),
            key_id: self.key.clone(),
            request_id: ctx.request_id.clone(),
            ttl_secs: 3600,
        };
        ctx.record_mut().endpoint = "/v1/realtime".into();
        ctx.realtime = Some(Box::new(Link {
            model: "gpt-realtime".into(),
            channel: self.gw.config.channels[0].clone(),
            query: Some(query.into()),
            meter: Meter::new(price, first, account),
            reader: FrameReader::new(Some(Collect {
                cap: MAX_TEXT_MESSAGE,
                sniff: billing::sniff,
            })),
            not_websocket: false,
            client_done: false,
            client: FrameReader::new(None),
            upstream_told: false,
            upstream_ended: false,
        }));
        ctx
    }

    async fn used(&self) -> Micros {
        let rec = self.gw.store.get_key(&self.key).await.unwrap().unwrap();
        rec.quota_used
    }

    /// True when every reservation was released (the whole rest can be reserved).
    async fn nothing_held(&self, quota: Micros) -> bool {
        let free = quota - self.used().await;
        let r = self
            .gw
            .store
            .reserve(&self.key, "probe", free, free, ids::now_secs(), 60)
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

fn link(ctx: &mut Ctx) -> &mut Link {
    ctx.realtime.as_deref_mut().unwrap()
}

/// One unmasked server frame.
fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(u8::from(fin) << 7) | opcode];
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

fn text(s: &str) -> Vec<u8> {
    frame(true, 1, s.as_bytes())
}

fn done(input: u64, cached: u64, output: u64) -> String {
    format!(
        r#"{{"type":"response.done","event_id":"event_AB12","response":{{"object":"realtime.response","id":"resp_1","status":"completed","output":[{{"type":"message","role":"assistant","content":[{{"type":"audio","transcript":"Hello there."}}]}}],"usage":{{"total_tokens":{t},"input_tokens":{input},"output_tokens":{output},"input_token_details":{{"cached_tokens":{cached},"text_tokens":100,"audio_tokens":0}},"output_token_details":{{"text_tokens":10,"audio_tokens":0}}}}}}}}"#,
        t = input + output
    )
}

/// A conversation: session events, audio deltas, a fragmented `response.done` with a
/// ping inside, and a second response.
fn conversation() -> Vec<u8> {
    let audio = format!(
        r#"{{"type":"response.audio.delta","event_id":"e2","response_id":"resp_1","delta":"{}"}}"#,
        "UklGRiQAAABXQVZF".repeat(40)
    );
    let first = done(1127, 896, 148);
    let (a, b) = first.split_at(100);
    let mut s = Vec::new();
    s.extend(text(r#"{"type":"session.created","event_id":"e0","session":{"id":"sess_1","model":"gpt-realtime-2025-08-28"}}"#));
    s.extend(text(r#"{"type":"response.created","event_id":"e1","response":{"id":"resp_1","status":"in_progress"}}"#));
    s.extend(text(&audio));
    s.extend(frame(false, 1, a.as_bytes()));
    s.extend(frame(true, 9, b"keepalive"));
    s.extend(frame(true, 0, b.as_bytes()));
    s.extend(text(&done(1300, 1024, 52)));
    s
}

/// 231 x 4 + 896 x 0.4 + 148 x 16, plus 276 x 4 + 1024 x 0.4 + 52 x 16, rounded up once.
const CONVERSATION_COST: Micros = 5_996;

fn relay(ctx: &mut Ctx, chunks: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        let mut body = Some(Bytes::copy_from_slice(c));
        from_upstream(ctx, &mut body, false);
        out.extend_from_slice(&body.unwrap());
    }
    out
}

#[tokio::test]
async fn usage_is_read_at_any_split_and_bytes_pass_unchanged() {
    let f = fixture(None).await;
    let s = conversation();
    for cut in (0..s.len()).step_by(13) {
        let mut ctx = f.ctx("model=gpt-realtime").await;
        let out = relay(&mut ctx, &[&s[..cut], &s[cut..]]);
        assert_eq!(out, s, "cut {cut}");
        let l = link(&mut ctx);
        assert_eq!(l.meter.usage().input_tokens, 2427, "cut {cut}");
        assert_eq!(l.meter.usage().cached_input_tokens, 1920);
        assert_eq!(l.meter.usage().output_tokens, 200);
        assert_eq!(l.meter.cost(), CONVERSATION_COST);
        l.meter.settle().await;
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    let mut ctx = f.ctx("model=gpt-realtime").await;
    assert_eq!(relay(&mut ctx, &bytes), s);
    assert_eq!(link(&mut ctx).meter.cost(), CONVERSATION_COST);
}

#[tokio::test]
async fn finish_settles_and_fills_the_record() {
    let f = fixture(Some(1_000_000)).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    relay(&mut ctx, &[&conversation()]);
    finish(&f.gw, &mut ctx).await;
    assert!(ctx.realtime.is_none());
    assert_eq!(ctx.status, 101);
    let rec = ctx.record.as_ref().unwrap();
    assert_eq!(rec.model, "gpt-realtime");
    assert_eq!(rec.channel, "rt-main");
    assert_eq!(rec.usage.input_tokens, 2427);
    assert_eq!(rec.usage.cached_input_tokens, 1920);
    assert_eq!(rec.usage.output_tokens, 200);
    assert_eq!(rec.cost, CONVERSATION_COST);
    assert!(rec.stream);
    assert_eq!(f.used().await, CONVERSATION_COST);
    assert!(f.nothing_held(1_000_000).await);
}

#[tokio::test]
async fn quota_exhausted_closes_right_after_the_response_done() {
    let quota = BLOCK + 10_000; // the first extension is refused: 10_000 is below the floor
    let f = fixture(Some(quota)).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let small = text(&done(1000, 0, 100)); // 5_600
    assert_eq!(relay(&mut ctx, &[&small]), small);
    link(&mut ctx).meter.extension_answered().await;

    let exhausting = text(&done(4000, 0, 4000)); // 80_000 more: past the reservation
    let next = text(r#"{"type":"response.created","event_id":"e9","response":{"id":"resp_3"}}"#);
    let chunk = [exhausting.clone(), next].concat();
    let out = relay(&mut ctx, &[&chunk]);
    let close = frames::server_close(1008, "quota exhausted");
    assert_eq!(
        out,
        [exhausting, close].concat(),
        "the response ends, then the close"
    );
    assert_eq!(
        relay(&mut ctx, &[&text("{}")]),
        b"",
        "nothing more reaches the client"
    );

    let mut body = Some(Bytes::from_static(b"\x88\x82abcd\x62\x8a"));
    from_client(&mut ctx, &mut body, false);
    assert_eq!(body, None, "the client's next bytes end the upstream");

    finish(&f.gw, &mut ctx).await;
    assert_eq!(ctx.record.as_ref().unwrap().cost, BLOCK);
    assert_eq!(
        f.used().await,
        BLOCK,
        "billed what was reserved, within the cap"
    );
    assert!(f.used().await <= quota);
}

#[tokio::test]
async fn a_refusal_arriving_mid_frame_closes_at_the_next_boundary() {
    let f = fixture(Some(BLOCK + 10_000)).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    // One response past the whole first block: the extension (overrun + floor) is asked
    // for while the next frame is already arriving.
    let big = text(&done(30_000, 0, 100));
    let delta = text(r#"{"type":"response.audio.delta","event_id":"e5","delta":"AAAAAAAA"}"#);
    let chunk = [big.clone(), delta[..10].to_vec()].concat();
    assert_eq!(relay(&mut ctx, &[&chunk]), chunk, "not refused yet");
    link(&mut ctx).meter.extension_answered().await;
    assert_eq!(link(&mut ctx).meter.must_close(), Some(Refusal::Quota));

    let mut body = Some(Bytes::from_static(b"\x81\x85maskhello"));
    from_client(&mut ctx, &mut body, false);
    assert_close_to_upstream(&body.unwrap());
    let mut body = Some(Bytes::from_static(b"\x81\x85maskhello"));
    from_client(&mut ctx, &mut body, false);
    assert_eq!(
        body.as_deref(),
        Some(&b""[..]),
        "nothing more reaches the upstream"
    );

    let rest = [delta[10..].to_vec(), text("{}")].concat();
    let out = relay(&mut ctx, &[&rest]);
    let close = frames::server_close(1008, "quota exhausted");
    assert_eq!(out, [delta[10..].to_vec(), close].concat());

    finish(&f.gw, &mut ctx).await;
    assert_eq!(f.used().await, BLOCK);
}

/// A masked client close frame with status 1000, alone.
fn assert_close_to_upstream(b: &[u8]) {
    assert_eq!(b.len(), 8, "{b:?}");
    assert_eq!(&b[..2], &[0x88, 0x82]);
    let code = [b[6] ^ b[2], b[7] ^ b[3]];
    assert_eq!(u16::from_be_bytes(code), 1000);
}

#[tokio::test]
async fn a_refusal_while_the_upstream_is_idle_closes_through_it() {
    let f = fixture(Some(BLOCK + 10_000)).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let big = text(&done(30_000, 0, 100));
    assert_eq!(relay(&mut ctx, &[&big]), big);
    // The client is mid-frame when the refusal lands.
    let ask = b"\x81\x9a\x01\x02\x03\x04{\"type\":\"response.create\"}";
    let mut body = Some(Bytes::copy_from_slice(&ask[..9]));
    from_client(&mut ctx, &mut body, false);
    assert_eq!(body.as_deref(), Some(&ask[..9]));
    link(&mut ctx).meter.extension_answered().await;
    assert!(link(&mut ctx).meter.must_close().is_some());

    // The frame is completed, then a close goes up instead of the next frame.
    let rest = [&ask[9..], &ask[..]].concat();
    let mut body = Some(Bytes::from(rest));
    from_client(&mut ctx, &mut body, false);
    let out = body.unwrap();
    assert_eq!(&out[..ask.len() - 9], &ask[9..]);
    assert_close_to_upstream(&out[ask.len() - 9..]);

    // The upstream's close reply carries the client's close.
    let echo = frames::server_close(1000, "");
    let out = relay(&mut ctx, &[&echo]);
    assert_eq!(out, frames::server_close(1008, "quota exhausted"));
    let mut body = Some(Bytes::from_static(b"\x88\x82abcd\x62\x8a"));
    from_client(&mut ctx, &mut body, false);
    assert_eq!(
        body, None,
        "the client's close reply ends the upstream half"
    );
    finish(&f.gw, &mut ctx).await;
    assert_eq!(f.used().await, BLOCK);
}

#[tokio::test]
async fn an_http_error_answer_passes_through_unbilled() {
    let f = fixture(Some(1_000_000)).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let err =
        br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
    assert_eq!(relay(&mut ctx, &[&err[..20], &err[20..]]), err);
    let mut body = Some(Bytes::from_static(b"x"));
    from_client(&mut ctx, &mut body, true);
    assert_eq!(body.as_deref(), Some(&b"x"[..]));
    finish(&f.gw, &mut ctx).await;
    assert_eq!(ctx.status, 0, "the status written to the client stands");
    assert_eq!(ctx.record.as_ref().unwrap().cost, 0);
    assert_eq!(f.used().await, 0);
    assert!(f.nothing_held(1_000_000).await);
}

#[tokio::test]
async fn invalid_frames_mid_session_stop_the_relay() {
    let f = fixture(None).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let chunk = [text(&done(10, 0, 10)), vec![0xC1, 0x03, 1, 2, 3]].concat();
    assert_eq!(relay(&mut ctx, &[&chunk]), chunk, "forwarded as it came");
    assert_eq!(relay(&mut ctx, &[&text("{}")]), b"", "then nothing more");
    let mut body = Some(Bytes::from_static(b"\x81\x80mask"));
    from_client(&mut ctx, &mut body, false);
    assert_eq!(body, None);
    finish(&f.gw, &mut ctx).await;
    assert_eq!(ctx.record.as_ref().unwrap().cost, 10 * 4 + 10 * 16);
}

#[tokio::test]
async fn an_oversize_message_is_forwarded_unread() {
    let f = fixture(None).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let huge = format!(
        r#"{{"type":"response.done","pad":"{}"}}"#,
        "x".repeat(MAX_TEXT_MESSAGE)
    );
    let s = [text(&huge), text(&done(10, 0, 10))].concat();
    let out = relay(&mut ctx, &[&s[..1 << 20], &s[1 << 20..]]);
    assert!(out == s);
    assert_eq!(link(&mut ctx).reader.oversize(), 1);
    assert_eq!(
        link(&mut ctx).meter.cost(),
        200,
        "the next message is still read"
    );
    link(&mut ctx).meter.settle().await;
}

#[tokio::test]
async fn client_bytes_pass_while_open() {
    let f = fixture(None).await;
    let mut ctx = f.ctx("model=gpt-realtime").await;
    let mut body = None;
    from_client(&mut ctx, &mut body, true);
    assert_eq!(body, None, "the handshake's empty body");
    let frame = Bytes::from_static(b"\x81\x84abcd\x1a\x41\x1f\x19");
    let mut body = Some(frame.clone());
    from_client(&mut ctx, &mut body, false);
    assert_eq!(body, Some(frame));
    link(&mut ctx).meter.settle().await;
}

#[tokio::test]
async fn the_upstream_request_is_the_channels() {
    let f = fixture(None).await;
    let mut ctx = f.ctx("model=gpt-realtime&key=sk-client&voice=alloy").await;
    let mut req = RequestHeader::build(
        "GET",
        b"/v1/realtime?model=gpt-realtime&key=sk-client",
        None,
    )
    .unwrap();
    req.insert_header("host", "gateway.example").unwrap();
    req.insert_header(
        "sec-websocket-protocol",
        "realtime, openai-insecure-api-key.sk-client",
    )
    .unwrap();
    link(&mut ctx).upstream_request(&mut req).unwrap();
    assert_eq!(
        req.uri.to_string(),
        "/proxy/v1/realtime?model=gpt-realtime-2025-08-28&voice=alloy"
    );
    assert_eq!(req.headers["host"], "api.openai.example");
    assert_eq!(req.headers["authorization"], "Bearer sk-upstream");
    assert_eq!(req.headers["sec-websocket-protocol"], "realtime");
    link(&mut ctx).meter.settle().await;
}

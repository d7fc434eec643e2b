use super::*;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::ids;
use crate::realtime::billing::{first_block, Account};
use crate::store::embedded::EmbeddedStore;
use crate::store::{Ask, KeyRecord, KeyStatus, Micros, Store};

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
        group: None,
        policy: Default::default(),
    };
    store.create_key(&rec).await.unwrap();
    Fixture {
        _dir: dir,
        gw: Gateway::new(Arc::new(config), store),
        key: "key1".into(),
    }
}

impl Fixture {
    /// A link as `begin` leaves it: the first block reserved.
    async fn link(&self) -> Link {
        let price = self.gw.config.prices["gpt-realtime"].clone();
        let (min, max) = first_block(&price);
        let request_id = ids::request_id();
        // Taken as `begin` takes it: reserved through the guard, then handed to the meter.
        let first = crate::billing::reserve(
            &self.gw.store,
            &self.key,
            &request_id,
            &Ask::money_now(min, max),
            3600,
        )
        .await
        .unwrap()
        .unwrap()
        .hand_over()
        .unwrap();
        let account = Account {
            store: self.gw.store.clone(),
            key_id: self.key.clone(),
            request_id,
            ttl_secs: 3600,
            ask: crate::store::Ask::money(0, 0, 0),
        };
        Link::new(
            "gpt-realtime".into(),
            self.gw.config.channels[0].clone(),
            Meter::new(price, crate::billing::Multiplier::ONE, first, account),
        )
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
            .reserve_ask(
                &self.key,
                &ids::request_id(),
                &Ask::money_now(free, free),
                60,
            )
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

/// Feeds the chunks as the upstream's reads; returns what reached the client and how
/// the relay would end.
async fn relay(l: &mut Link, chunks: &[&[u8]]) -> (Vec<u8>, Option<End>) {
    let mut out = Vec::new();
    for c in chunks {
        let (fwd, end) = l.upstream_bytes(Bytes::copy_from_slice(c)).await;
        out.extend_from_slice(&fwd);
        if end.is_some() {
            return (out, end);
        }
    }
    (out, None)
}

#[tokio::test]
async fn usage_is_read_at_any_split_and_bytes_pass_unchanged() {
    let f = fixture(None).await;
    let s = conversation();
    for cut in (0..s.len()).step_by(13) {
        let mut l = f.link().await;
        let (out, end) = relay(&mut l, &[&s[..cut], &s[cut..]]).await;
        assert_eq!(out, s, "cut {cut}");
        assert_eq!(end, None);
        assert_eq!(l.meter.usage().input_tokens, 2427, "cut {cut}");
        assert_eq!(l.meter.usage().cached_input_tokens, 1920);
        assert_eq!(l.meter.usage().output_tokens, 200);
        assert_eq!(l.meter.cost(), CONVERSATION_COST);
        assert_eq!(l.frames().0, 7);
        l.meter.settle().await;
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    let mut l = f.link().await;
    assert_eq!(relay(&mut l, &bytes).await, (s, None));
    assert_eq!(l.meter.cost(), CONVERSATION_COST);
    let before = f.used().await;
    assert_eq!(l.meter.settle().await, CONVERSATION_COST);
    assert_eq!(f.used().await - before, CONVERSATION_COST);
}

#[tokio::test]
async fn the_top_up_is_done_by_the_time_the_response_done_is_forwarded() {
    let f = fixture(Some(1_000_000)).await;
    let mut l = f.link().await;
    assert_eq!(l.meter.reserved(), BLOCK);
    // 5_600 spent: less than a block left unreserved, so a block is added right here.
    let first = text(&done(1000, 0, 100));
    assert_eq!(relay(&mut l, &[&first]).await, (first, None));
    assert_eq!(l.meter.reserved(), 2 * BLOCK, "no answer pending anywhere");
    // A block is still ahead: no store round trip, nothing more reserved.
    let second = text(&done(1000, 0, 100));
    relay(&mut l, &[&second]).await;
    assert_eq!(l.meter.reserved(), 2 * BLOCK);
    assert_eq!(l.meter.settle().await, 11_200);
    assert!(f.nothing_held(1_000_000).await);
}

#[tokio::test]
async fn a_refusal_cuts_the_stream_right_after_the_response_done() {
    // One response past the whole first block; the 10_000 left cannot cover the overrun
    // and the floor, so the session ends with that response.
    let quota = BLOCK + 10_000;
    let f = fixture(Some(quota)).await;
    let mut l = f.link().await;
    let small = text(&done(1000, 0, 100)); // 5_600
    let exhausting = text(&done(4000, 0, 5000)); // 96_000 more: past the reservations
    let next = text(r#"{"type":"response.created","event_id":"e9","response":{"id":"resp_3"}}"#);
    let chunk = [small.clone(), exhausting.clone(), next].concat();
    let (out, end) = relay(&mut l, &[&chunk]).await;
    assert_eq!(
        out,
        [small, exhausting].concat(),
        "the response ends, nothing after it"
    );
    assert_eq!(end, Some(End::Refused(Refusal::Quota)));
    assert_eq!(
        l.close_for_client(End::Refused(Refusal::Quota)),
        Some(frames::server_close(1008, "quota exhausted"))
    );
    assert_eq!(
        l.meter.reserved(),
        quota,
        "the 10_000 was granted after the first response, above the floor"
    );
    assert_eq!(l.meter.settle().await, quota, "billed what was reserved");
    assert_eq!(f.used().await, quota, "the cap holds");
}

#[tokio::test]
async fn a_session_lives_on_what_it_holds_until_it_cannot_keep_the_floor() {
    // After the first response the key has 1_000 left: granted, and from then on the
    // session lives on what it holds (nothing more to grant, but the floor is held)
    // until a response leaves it short.
    let quota = BLOCK + 1_000;
    let f = fixture(Some(quota)).await;
    let mut l = f.link().await;
    let r = text(&done(1500, 0, 1500)); // 30_000 each
    assert_eq!(relay(&mut l, &[&r]).await, (r.clone(), None));
    assert_eq!(l.meter.reserved(), quota);
    assert_eq!(
        relay(&mut l, &[&r]).await,
        (r.clone(), None),
        "22_920 left unspent: above the floor"
    );
    let (out, end) = relay(&mut l, &[&r]).await;
    assert_eq!(
        out, r,
        "the response that exhausted it still reaches the client"
    );
    assert_eq!(end, Some(End::Refused(Refusal::Quota)));
    assert_eq!(l.meter.cost(), 90_000);
    assert_eq!(
        l.meter.settle().await,
        quota,
        "the overrun of that one response is not billed"
    );
    assert_eq!(f.used().await, quota);
    assert!(f.nothing_held(quota).await);
}

#[tokio::test]
async fn a_key_disabled_mid_session_ends_it() {
    let f = fixture(None).await;
    let mut l = f.link().await;
    let patch = crate::store::KeyPatch {
        status: Some(KeyStatus::Disabled),
        ..Default::default()
    };
    f.gw.store.update_key(&f.key, &patch).await.unwrap();
    let r = text(&done(1000, 0, 100));
    let (out, end) = relay(&mut l, &[&r]).await;
    assert_eq!(out, r);
    assert_eq!(end, Some(End::Refused(Refusal::KeyInactive)));
    assert_eq!(
        l.close_for_client(end.unwrap()),
        Some(frames::server_close(1008, "key no longer active"))
    );
    assert_eq!(
        l.meter.settle().await,
        5_600,
        "what was used is still billed"
    );
}

#[tokio::test]
async fn invalid_frames_mid_session_end_it() {
    let f = fixture(None).await;
    let mut l = f.link().await;
    let chunk = [text(&done(10, 0, 10)), vec![0xC1, 0x03, 1, 2, 3]].concat();
    let (out, end) = relay(&mut l, &[&chunk]).await;
    assert_eq!(out, chunk, "forwarded as it came");
    assert_eq!(end, Some(End::Unreadable));
    assert_eq!(
        l.close_for_client(End::Unreadable),
        None,
        "no frame can follow broken ones"
    );
    assert_eq!(l.meter.settle().await, 10 * 4 + 10 * 16);
}

#[tokio::test]
async fn an_oversize_message_is_forwarded_unread() {
    let f = fixture(None).await;
    let mut l = f.link().await;
    let huge = format!(
        r#"{{"type":"response.done","pad":"{}"}}"#,
        "x".repeat(MAX_TEXT_MESSAGE)
    );
    let s = [text(&huge), text(&done(10, 0, 10))].concat();
    let (out, end) = relay(&mut l, &[&s[..1 << 20], &s[1 << 20..]]).await;
    assert!(out == s);
    assert_eq!(end, None);
    assert_eq!(l.unread_messages(), 1);
    assert_eq!(l.meter.cost(), 200, "the next message is still read");
    l.meter.settle().await;
}

/// A masked client close frame with this status, alone.
fn assert_client_close(b: &[u8], code: u16) {
    assert_eq!(b.len(), 8, "{b:?}");
    assert_eq!(&b[..2], &[0x88, 0x82]);
    let got = [b[6] ^ b[2], b[7] ^ b[3]];
    assert_eq!(u16::from_be_bytes(got), code);
}

#[tokio::test]
async fn close_frames_go_only_between_frames() {
    let f = fixture(None).await;
    let mut l = f.link().await;
    let refused = End::Refused(Refusal::Quota);
    assert_client_close(&l.close_for_upstream(refused).unwrap(), 1000);
    assert_client_close(&l.close_for_upstream(End::ClientLeft).unwrap(), 1001);
    assert_client_close(&l.close_for_upstream(End::Idle).unwrap(), 1001);
    assert_eq!(l.close_for_upstream(End::UpstreamLeft), None);

    // The client is half-way through a frame: a close would corrupt it.
    let ask = b"\x81\x9a\x01\x02\x03\x04{\"type\":\"response.create\"}";
    l.client_bytes(&ask[..9]);
    assert_eq!(l.close_for_upstream(refused), None);
    l.client_bytes(&ask[9..]);
    assert!(l.close_for_upstream(refused).is_some());

    // The same toward the client.
    let delta = text(r#"{"type":"response.audio.delta","event_id":"e5","delta":"AAAAAAAA"}"#);
    relay(&mut l, &[&delta[..10]]).await;
    assert_eq!(l.close_for_client(End::Idle), None);
    relay(&mut l, &[&delta[10..]]).await;
    assert_eq!(
        l.close_for_client(End::Idle),
        Some(frames::server_close(1001, "idle timeout"))
    );
    assert_eq!(
        l.close_for_client(End::UpstreamLeft),
        Some(frames::server_close(1011, "upstream connection lost"))
    );
    assert_eq!(l.close_for_client(End::ClientLeft), None);
    l.meter.settle().await;
}

#[tokio::test]
async fn a_side_that_closed_gets_no_second_close() {
    let f = fixture(None).await;
    let mut l = f.link().await;
    l.client_bytes(b"\x88\x82abcd\x62\x8a"); // the client's close, 1000
    assert_eq!(
        l.close_for_upstream(End::Idle),
        None,
        "the upstream has one"
    );
    let (out, _) = relay(&mut l, &[&frames::server_close(1000, "")]).await;
    assert_eq!(out, frames::server_close(1000, ""));
    assert_eq!(
        l.close_for_client(End::UpstreamLeft),
        None,
        "the upstream's close reached the client"
    );
    assert_eq!(l.frames(), (1, 1));
    l.meter.settle().await;
}

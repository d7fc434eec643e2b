use super::*;
use crate::config::raw::RawPrice;
use crate::ids;
use crate::realtime::frames::Sniff;
use crate::store::embedded::EmbeddedStore;
use crate::store::{Ask, KeyPatch, KeyRecord, KeyStatus, Reservation};
use std::time::Duration;

/// A realtime-like price: 4 / 16 / 0.4 USD per 1M tokens, 4096 output tokens per block.
fn rt_price() -> Price {
    Price::from_raw(&RawPrice {
        input: Some(4.0),
        output: Some(16.0),
        cached_input: Some(0.4),
        cache_write: None,
        max_output_tokens: Some(4096),
        per_image: Default::default(),
        per_million_chars: None,
        per_minute: None,
        per_second: None,
        ..RawPrice::default()
    })
    .unwrap()
}

/// 4096 input tokens at 4 plus 4096 output tokens at 16 micro-USD.
const BLOCK: Micros = 4096 * 4 + 4096 * 16;
/// 4096 input tokens at 4 plus 16 output tokens at 16 micro-USD.
const FLOOR: Micros = 4096 * 4 + 16 * 16;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    key: String,
}

async fn fixture(quota: Option<Micros>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let rec = KeyRecord {
        id: "key1".into(),
        hash: "00".repeat(32),
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
        store,
        key: "key1".into(),
    }
}

impl Fixture {
    async fn meter(&self) -> Meter {
        let (min, max) = first_block(&rt_price());
        // Taken as `begin` takes it: reserved through the guard, then handed to the meter.
        let first = crate::billing::reserve(
            &self.store,
            &self.key,
            "req1",
            &Ask::money_now(min, max),
            3600,
        )
        .await
        .unwrap()
        .unwrap()
        .hand_over()
        .unwrap();
        Meter::new(
            rt_price(),
            Multiplier::ONE,
            first,
            Account {
                store: self.store.clone(),
                key_id: self.key.clone(),
                request_id: "req1".into(),
                ttl_secs: 3600,
                ask: crate::store::Ask::money(0, 0, 0),
            },
        )
    }

    async fn used(&self) -> Micros {
        self.store
            .get_key(&self.key)
            .await
            .unwrap()
            .unwrap()
            .quota_used
    }

    /// True when `amount` more can be reserved: every earlier reservation was released.
    async fn can_reserve(&self, amount: Micros) -> bool {
        let r = self
            .store
            .reserve_ask(
                &self.key,
                &ids::request_id(),
                &Ask::money_now(amount, amount),
                3600,
            )
            .await
            .unwrap();
        match r {
            Ok(r) => {
                self.store.settle(&r, 0).await.unwrap();
                true
            }
            Err(_) => false,
        }
    }
}

fn usage(input: u64, cached: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn first_block_is_the_output_limit_plus_the_input_allowance() {
    assert_eq!(first_block(&rt_price()), (FLOOR, BLOCK));
    let tiny = Price {
        max_output_tokens: 1,
        ..rt_price()
    };
    let (min, max) = first_block(&tiny);
    assert!(min <= max, "the floor never exceeds the block");
}

const DONE: &str = r#"{"type":"response.done","event_id":"event_3132","response":{"object":"realtime.response","id":"resp_001","status":"completed","status_details":null,"output":[{"id":"msg_006","object":"realtime.item","type":"message","status":"completed","role":"assistant","content":[{"type":"audio","transcript":"Sure, how can I help?"}]}],"usage":{"total_tokens":1275,"input_tokens":1127,"output_tokens":148,"input_token_details":{"cached_tokens":896,"text_tokens":119,"audio_tokens":1008,"cached_tokens_details":{"text_tokens":128,"audio_tokens":768}},"output_token_details":{"text_tokens":36,"audio_tokens":112}}}}"#;

#[test]
fn usage_from_a_realistic_response_done() {
    // 1008 audio tokens in, 768 of them cached; 112 of the output was audio.
    let spoken = Usage {
        audio_input_tokens: 1008 - 768,
        audio_output_tokens: 112,
        ..usage(1127, 896, 148)
    };
    assert_eq!(response_done_usage(DONE.as_bytes()), Some(spoken));
    // An image in the conversation, part of it cached.
    let seen = r#"{"type":"response.done","event_id":"event_9","response":{"object":"realtime.response","id":"resp_9","status":"completed","usage":{"total_tokens":2030,"input_tokens":1930,"output_tokens":100,"input_token_details":{"text_tokens":200,"audio_tokens":500,"image_tokens":1230,"cached_tokens":1100,"cached_tokens_details":{"text_tokens":100,"audio_tokens":0,"image_tokens":1000}},"output_token_details":{"text_tokens":40,"audio_tokens":60}}}}"#;
    let want = Usage {
        audio_input_tokens: 500,
        image_input_tokens: 230,
        audio_output_tokens: 60,
        ..usage(1930, 1100, 100)
    };
    assert_eq!(response_done_usage(seen.as_bytes()), Some(want));
    let reordered = r#"{"event_id":"e1","response":{"usage":{"input_tokens":5,"output_tokens":2}},"type":"response.done"}"#;
    assert_eq!(
        response_done_usage(reordered.as_bytes()),
        Some(usage(5, 0, 2))
    );
}

#[test]
fn other_messages_carry_no_usage() {
    for msg in [
        r#"{"type":"response.audio.delta","event_id":"e","delta":"UklGRiQAAABXQVZFZm10IBAAAAABAAEA"}"#,
        r#"{"type":"response.text.delta","delta":"the event is response.done"}"#,
        r#"{"type":"response.done","response":{"status":"cancelled","usage":null}}"#,
        r#"{"type":"response.done","response":{"status":"failed"}}"#,
        r#"{"type":"response.done","response":"#,
        r#"{"type":"session.created","session":{"id":"sess_1","model":"gpt-realtime"}}"#,
        "not json",
    ] {
        assert_eq!(response_done_usage(msg.as_bytes()), None, "{msg}");
    }
}

#[test]
fn sniff_skips_only_what_cannot_be_response_done() {
    let s = |m: &str| sniff(m.as_bytes());
    assert_eq!(
        s(r#"{"type":"response.audio.delta","delta":"AAAA"#),
        Sniff::Skip
    );
    assert_eq!(s(r#"{"type":"response.done_extra""#), Sniff::Skip);
    assert_eq!(s(r#"{"type":"response.done","response":{"#), Sniff::Keep);
    assert_eq!(s(r#"{"type":"resp"#), Sniff::NeedMore);
    assert_eq!(s(r#"{""#), Sniff::NeedMore);
    // Not the compact type-first form: kept, the whole message decides.
    assert_eq!(
        s(r#"{"event_id":"e1","type":"response.done"}"#),
        Sniff::Keep
    );
    assert_eq!(s(r#"{ "type": "response.audio.delta"}"#), Sniff::Keep);
    assert_eq!(s(""), Sniff::NeedMore);
}

#[tokio::test]
async fn cost_is_priced_on_the_running_total() {
    let price = Price::from_raw(&RawPrice {
        input: Some(0.6),
        output: Some(0.6),
        cached_input: None,
        cache_write: None,
        max_output_tokens: Some(10),
        per_image: Default::default(),
        per_million_chars: None,
        per_minute: None,
        per_second: None,
        ..RawPrice::default()
    })
    .unwrap();
    let f = fixture(None).await;
    let (min, max) = first_block(&price);
    // Taken as `begin` takes it: reserved through the guard, then handed to the meter.
    let first = crate::billing::reserve(&f.store, &f.key, "r", &Ask::money_now(min, max), 60)
        .await
        .unwrap()
        .unwrap()
        .hand_over()
        .unwrap();
    let mut m = Meter::new(
        price,
        Multiplier::ONE,
        first,
        Account {
            store: f.store.clone(),
            key_id: f.key.clone(),
            request_id: "r".into(),
            ttl_secs: 60,
            ask: crate::store::Ask::money(0, 0, 0),
        },
    );
    for _ in 0..3 {
        m.add(&usage(0, 0, 1));
    }
    // 3 x 0.6 = 1.8 micro-USD, rounded up once (not 3 x 1).
    assert_eq!(m.cost(), 2);
    assert_eq!(m.usage(), usage(0, 0, 3));
}

#[tokio::test]
async fn one_extension_per_block_of_spend() {
    let f = fixture(None).await;
    let mut m = f.meter().await;
    assert_eq!(m.reserved(), BLOCK);
    assert_eq!(m.top_up().await, Ok(()), "nothing spent: nothing asked");
    assert_eq!(m.extensions, 0);
    m.add(&usage(1000, 0, 100)); // 5600: the headroom is now below a block
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(
        m.reserved(),
        2 * BLOCK,
        "granted by the time top_up returns"
    );
    m.add(&usage(1000, 0, 100));
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(
        m.extensions, 1,
        "a full block is still ahead: no store round trip"
    );
    assert_eq!(m.reserved(), 2 * BLOCK);
}

/// A key that may have one request in flight: the session is that one, and its next
/// blocks are more money for it, not more requests.
#[tokio::test]
async fn extensions_do_not_count_as_more_requests_in_flight() {
    let f = fixture(None).await;
    let patch = KeyPatch {
        policy: crate::store::PolicyPatch {
            max_concurrent: Some(Some(1)),
            ..Default::default()
        },
        ..Default::default()
    };
    f.store.update_key(&f.key, &patch).await.unwrap();
    let mut m = f.meter().await;
    m.add(&usage(1000, 0, 100));
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(m.extensions, 1);
    assert_eq!(m.reserved(), 2 * BLOCK, "the extension was granted");
    assert!(
        !f.can_reserve(1).await,
        "another request is refused: one is in flight"
    );
}

#[tokio::test]
async fn a_large_response_sizes_the_next_extension() {
    let f = fixture(None).await;
    let mut m = f.meter().await;
    // 30k input tokens of context: 120_000 + 1_600, past the first block.
    m.add(&usage(30_000, 0, 100));
    let cost = m.cost();
    assert_eq!(cost, 121_600);
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(
        m.reserved() - cost,
        2 * cost,
        "the overrun is covered and twice the largest response is ahead"
    );
    assert_eq!(m.settle().await, cost, "the whole cost is billed");
    assert_eq!(f.used().await, cost);
}

#[tokio::test]
async fn a_refusal_comes_when_the_floor_can_no_longer_be_held() {
    let f = fixture(Some(BLOCK + 10_000)).await;
    let mut m = f.meter().await;
    m.add(&usage(1000, 0, 100));
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(m.reserved(), BLOCK + 10_000, "what was left, granted");
    m.add(&usage(4000, 0, 4000)); // 16_000 + 64_000: total 85_600, 6_320 unspent
    assert_eq!(m.top_up().await, Err(Refusal::Quota));
    assert_eq!(Refusal::Quota.close(), (1008, "quota exhausted"));
    assert_eq!(
        m.settle().await,
        85_600,
        "within the reservations: all billed"
    );
    assert_eq!(f.used().await, 85_600);
}

#[tokio::test]
async fn an_overrun_is_billed_up_to_the_reservations() {
    let f = fixture(Some(BLOCK + 20_000)).await;
    let mut m = f.meter().await;
    m.add(&usage(1000, 0, 100));
    assert_eq!(m.top_up().await, Ok(()));
    assert_eq!(m.reserved(), BLOCK + 20_000);
    m.add(&usage(10_000, 0, 1000)); // total 61_600: 40_320 unspent, above the floor
    assert_eq!(
        m.top_up().await,
        Ok(()),
        "nothing left to grant, but the floor is held"
    );
    assert_eq!(m.reserved(), BLOCK + 20_000);
    m.add(&usage(10_000, 0, 1000)); // total 117_600 > 101_920
    assert_eq!(m.top_up().await, Err(Refusal::Quota));
    assert_eq!(m.settle().await, BLOCK + 20_000);
    assert_eq!(f.used().await, BLOCK + 20_000, "never past the cap");
    assert!(f.can_reserve(0).await);
    assert!(!f.can_reserve(1).await, "nothing left, nothing held");
}

#[tokio::test]
async fn a_key_disabled_mid_session_gets_no_more() {
    let f = fixture(None).await;
    let mut m = f.meter().await;
    let patch = KeyPatch {
        status: Some(KeyStatus::Disabled),
        ..KeyPatch::default()
    };
    f.store.update_key(&f.key, &patch).await.unwrap();
    m.add(&usage(1000, 0, 100));
    assert_eq!(m.top_up().await, Err(Refusal::KeyInactive));
    assert_eq!(Refusal::KeyInactive.close().0, 1008);
}

#[tokio::test]
async fn settle_splits_the_cost_across_reservations_and_releases_the_rest() {
    let f = fixture(Some(1_000_000)).await;
    let mut m = f.meter().await;
    m.add(&usage(1000, 0, 100));
    m.top_up().await.unwrap();
    m.add(&usage(20_000, 0, 0)); // total 85_600: past the first reservation
    m.top_up().await.unwrap();
    assert_eq!(m.reserved(), 3 * BLOCK);
    assert!(!m.settled());
    assert_eq!(m.settle().await, 85_600);
    assert!(m.settled());
    assert_eq!(f.used().await, 85_600);
    assert!(
        f.can_reserve(1_000_000 - 85_600).await,
        "no reservation is left holding quota"
    );
}

/// A store whose reservations fail (as Redis does while unreachable).
struct Unreachable(Arc<dyn Store>);

#[async_trait::async_trait]
impl Store for Unreachable {
    async fn create_key(&self, rec: &KeyRecord) -> crate::store::StoreResult<()> {
        self.0.create_key(rec).await
    }
    async fn get_key(&self, id: &str) -> crate::store::StoreResult<Option<KeyRecord>> {
        self.0.get_key(id).await
    }
    async fn list_keys(&self) -> crate::store::StoreResult<Vec<KeyRecord>> {
        self.0.list_keys().await
    }
    async fn update_key(
        &self,
        id: &str,
        patch: &KeyPatch,
    ) -> crate::store::StoreResult<Option<KeyRecord>> {
        self.0.update_key(id, patch).await
    }
    async fn delete_key(&self, id: &str) -> crate::store::StoreResult<bool> {
        self.0.delete_key(id).await
    }
    async fn reserve_counted(
        &self,
        _: &str,
        _: &str,
        _: &crate::store::Ask,
        _: u64,
    ) -> crate::store::StoreResult<(Result<Reservation, ReserveDenied>, crate::store::Headroom)>
    {
        Err(crate::store::StoreError::unavailable("connection refused"))
    }
    async fn extend(&self, r: &Reservation, ttl_secs: u64) -> crate::store::StoreResult<()> {
        self.0.extend(r, ttl_secs).await
    }
    async fn settle(&self, r: &Reservation, actual: Micros) -> crate::store::StoreResult<()> {
        self.0.settle(r, actual).await
    }
    async fn rate_hit(
        &self,
        key_id: &str,
        rpm: u32,
        now_ms: i64,
    ) -> crate::store::StoreResult<bool> {
        self.0.rate_hit(key_id, rpm, now_ms).await
    }
    async fn append_usage(&self, rec: &crate::store::UsageRecord) -> crate::store::StoreResult<()> {
        self.0.append_usage(rec).await
    }
    async fn recent_usage(
        &self,
        key_id: &str,
        limit: usize,
    ) -> crate::store::StoreResult<Vec<crate::store::UsageRecord>> {
        self.0.recent_usage(key_id, limit).await
    }
    async fn create_group(&self, g: &crate::store::GroupRecord) -> crate::store::StoreResult<()> {
        self.0.create_group(g).await
    }
    async fn get_group(
        &self,
        id: &str,
    ) -> crate::store::StoreResult<Option<crate::store::GroupRecord>> {
        self.0.get_group(id).await
    }
    async fn list_groups(&self) -> crate::store::StoreResult<Vec<crate::store::GroupRecord>> {
        self.0.list_groups().await
    }
    async fn update_group(
        &self,
        id: &str,
        patch: &crate::store::GroupPatch,
    ) -> crate::store::StoreResult<Option<crate::store::GroupRecord>> {
        self.0.update_group(id, patch).await
    }
    async fn delete_group(&self, id: &str) -> crate::store::StoreResult<bool> {
        self.0.delete_group(id).await
    }
    async fn standing(
        &self,
        scope: crate::store::Scope,
        id: &str,
        periods: &crate::store::Periods,
        minute: i64,
    ) -> crate::store::StoreResult<crate::store::Standing> {
        self.0.standing(scope, id, periods, minute).await
    }
    async fn ping(&self) -> crate::store::StoreResult<()> {
        Err(crate::store::StoreError::unavailable("connection refused"))
    }
}

#[tokio::test]
async fn a_store_failure_ends_only_a_session_short_of_the_floor() {
    let f = fixture(None).await;
    let (min, max) = first_block(&rt_price());
    // Taken as `begin` takes it: reserved through the guard, then handed to the meter.
    let first = crate::billing::reserve(&f.store, &f.key, "req1", &Ask::money_now(min, max), 3600)
        .await
        .unwrap()
        .unwrap()
        .hand_over()
        .unwrap();
    let account = Account {
        store: Arc::new(Unreachable(f.store.clone())),
        key_id: f.key.clone(),
        request_id: "req1".into(),
        ttl_secs: 3600,
        ask: crate::store::Ask::money(0, 0, 0),
    };
    let mut m = Meter::new(rt_price(), Multiplier::ONE, first, account);
    m.add(&usage(1000, 0, 100)); // 5_600: an extension is wanted, the floor still held
    assert_eq!(m.top_up().await, Ok(()), "goes on with what it holds");
    m.add(&usage(10_000, 0, 3000)); // total 93_600: past the block
    assert_eq!(m.top_up().await, Err(Refusal::Store));
    assert_eq!(Refusal::Store.close(), (1011, "quota store unavailable"));
    assert_eq!(m.settle().await, BLOCK);
    assert_eq!(f.used().await, BLOCK);
}

#[tokio::test]
async fn a_dropped_meter_still_charges_what_was_used() {
    let f = fixture(Some(1_000_000)).await;
    let mut m = f.meter().await;
    m.add(&usage(1127, 896, 148)); // 231 x 4 + 896 x 0.4 + 148 x 16 = 3650.4 -> 3651
    m.top_up().await.unwrap();
    assert_eq!(m.cost(), 3651);
    drop(m);
    // Each dropped guard settles in its own background task: the first (the charge) and
    // the extension's (a release) land in either order, each when the store gets to it.
    eventually("charged in the background", || async {
        f.used().await == 3651
    })
    .await;
    eventually("every hold released in the background", || {
        f.can_reserve(1_000_000 - 3651)
    })
    .await;
}

/// Polls `check` until it holds; fails past a deadline no loaded machine reaches.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[async_trait::async_trait]
impl crate::store::tasks::TaskStore for Unreachable {
    async fn create_task(
        &self,
        t: &crate::store::tasks::TaskRecord,
        due_ms: i64,
    ) -> crate::store::StoreResult<()> {
        self.0.create_task(t, due_ms).await
    }
    async fn get_task(
        &self,
        key_id: &str,
        id: &str,
    ) -> crate::store::StoreResult<Option<crate::store::tasks::TaskRecord>> {
        self.0.get_task(key_id, id).await
    }
    async fn claim_due_tasks(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: usize,
    ) -> crate::store::StoreResult<Vec<crate::store::tasks::TaskRef>> {
        self.0.claim_due_tasks(now_ms, lease_ms, limit).await
    }
    async fn claim_task(
        &self,
        t: &crate::store::tasks::TaskRef,
        now_ms: i64,
        lease_ms: i64,
    ) -> crate::store::StoreResult<bool> {
        self.0.claim_task(t, now_ms, lease_ms).await
    }
    async fn save_task(
        &self,
        t: &crate::store::tasks::TaskRecord,
        due_ms: i64,
    ) -> crate::store::StoreResult<bool> {
        self.0.save_task(t, due_ms).await
    }
    async fn finish_task(
        &self,
        t: &crate::store::tasks::TaskRecord,
        usage: &crate::store::UsageRecord,
    ) -> crate::store::StoreResult<bool> {
        self.0.finish_task(t, usage).await
    }
    async fn forget_task(&self, r: &crate::store::tasks::TaskRef) -> crate::store::StoreResult<()> {
        self.0.forget_task(r).await
    }
}

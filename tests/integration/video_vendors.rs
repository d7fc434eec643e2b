//! The video vendors as their references describe them (issue: video and image vendors as
//! they really are): Kling behind `video-a` (JWT), Jimeng on Volcengine behind `video-b`
//! (signed), the OpenAI videos API's duration and size limits, and every client shape
//! on every vendor API, with vendor failures and timeouts billed once or refunded.

use crate::gateway::{error_of, StoreKind, TestGateway};
use crate::video::{
    check_content, check_log, check_upstream_auth, config, config_with, log, status, submit,
    submit_raw, video_section, wait_completed, wait_end, Client,
};
use crate::video_upstream::{Status, VideoUpstream};
use crate::{kling, volcengine};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The claims of a JWT, unverified (the mock verified it).
fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

// ---------------------------------------------------------------------------------
// Row 1: a `video-a` channel pointed at Kling's API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_a_channel_speaks_klings_api_with_a_jwt() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    let id = submit(
        &gw,
        &key,
        Client::A("text2video"),
        json!({"model": "kling-v1", "prompt": "a dog running", "duration": 5, "width": 1280,
               "height": 720, "metadata": {"negative_prompt": "blurry"}}),
    )
    .await;
    let rec = wait_completed(&gw, &key, Client::A("text2video"), &id).await;
    check_content(&gw, &key, Client::A("text2video"), &id, &rec).await;
    // Kling reports 5.042 s for a 5 s video: billed for the 5 asked for.
    assert_eq!(rec["metadata"]["duration"].as_f64(), Some(5.042), "{rec}");
    assert_eq!(gw.used_micros(&kid).await, 250_000);

    let t = up.task_with_prompt("a dog running");
    assert_eq!(
        (
            t.kind.as_str(),
            t.model.as_str(),
            t.seconds,
            t.size.as_str()
        ),
        ("text2video", "kling-v1-6", 5.0, "16:9")
    );
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos/text2video")
        .unwrap();
    let body = sub.json();
    assert_eq!(body["model_name"], "kling-v1-6", "{body}");
    assert_eq!(
        body["duration"], "5",
        "Kling takes the duration as a string: {body}"
    );
    assert_eq!(body["negative_prompt"], "blurry", "{body}");
    // Every request carried a valid token of the channel's key pair.
    check_upstream_auth(&up, &key);
    let tokens = up.kling_tokens();
    assert!(tokens.len() >= 3, "submit and polls: {tokens:?}");
    let c = claims(&tokens[0]);
    assert_eq!(c["iss"], kling::ACCESS_KEY);
    let (exp, nbf) = (c["exp"].as_i64().unwrap(), c["nbf"].as_i64().unwrap());
    assert!(
        (1795..=1805).contains(&(exp - nbf)),
        "30 minutes and 5 s: {c}"
    );
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "one token reused while it is fresh"
    );

    // image2video: an image URL as it is, Base64 without a `data:` prefix.
    let img = crate::video::png();
    let id = submit(
        &gw,
        &key,
        Client::A("image2video"),
        json!({"model": "kling-v1", "prompt": "make it move",
               "image": format!("data:image/png;base64,{}", crate::video_upstream::b64_encode(&img))}),
    )
    .await;
    wait_completed(&gw, &key, Client::A("image2video"), &id).await;
    let sub = up
        .submits()
        .into_iter()
        .find(|r| r.path == "/v1/videos/image2video")
        .unwrap();
    let sent = sub.json()["image"].as_str().unwrap().to_string();
    assert!(!sent.starts_with("data:"), "bare Base64: {sent:.40}");
    assert_eq!(crate::video_upstream::b64_decode(&sent), Some(img));
    check_upstream_auth(&up, &key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_pair_is_refused_by_the_vendor_and_nothing_is_charged() {
    let up = VideoUpstream::start().await;
    let cfg = config(&up.base_url())
        .replace(
            &format!("${{MG_TEST_KLING_SECRET_KEY:-{}}}", kling::SECRET_KEY),
            "not-the-secret",
        )
        .replace(
            &format!(
                "${{MG_TEST_VOLC_SECRET_KEY:-{}}}",
                volcengine::SECRET_ACCESS_KEY
            ),
            "not-the-secret",
        );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    for (client, body) in [
        (
            Client::A("text2video"),
            json!({"model": "kling-v1", "prompt": "wrong secret"}),
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "wrong secret"}),
        ),
    ] {
        let (s, text) = submit_raw(&gw, &key, client, &body).await;
        assert_eq!(s, 500, "{client:?}: {text}");
        assert_eq!(error_of(&text)["type"], "upstream_error", "{text}");
    }
    let refused = up.unauthorized();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].1.contains("signature"), "{refused:?}");
    assert!(
        refused[1].1.contains("SignatureDoesNotMatch"),
        "{refused:?}"
    );
    assert!(up.tasks().is_empty());
    assert_eq!(gw.used_micros(&kid).await, 0);
}

// ---------------------------------------------------------------------------------
// Row 2: Jimeng tasks the vendor fails, expires or forgets.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jimeng_failures_end_the_task_refunded_and_it_is_never_polled_again() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    // One 5 s Jimeng task at a time: each submission fits only if the one before was
    // refunded.
    let (key, kid) = gw.create_key(json!({"quota_usd": 0.1})).await;
    let cases = [
        // HTTP 400, code 50516.
        ("please fail", "refused the generated video"),
        // HTTP 200, code 50412.
        ("please quiet fail", "refused the prompt"),
        ("please expire", "expired"),
        ("please vanish", "no longer knows"),
    ];
    for (prompt, words) in cases {
        let id = submit(
            &gw,
            &key,
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": prompt, "duration": 5}),
        )
        .await;
        let rec = wait_end(&gw, &key, Client::B, &id).await;
        assert_eq!(rec["status"], "failed", "{prompt}: {rec}");
        let msg = rec["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(words),
            "{prompt}: the vendor's reason in words: {rec}"
        );
        assert_eq!(gw.used_micros(&kid).await, 0, "{prompt}: refunded");
        // Never asked about again, however often the client looks.
        let upstream = up.task_with_prompt(prompt).id;
        let polled = up.polls_of(&upstream).len();
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(status(&gw, &key, Client::B, &id).await["status"], "failed");
        }
        assert_eq!(
            up.polls_of(&upstream).len(),
            polled,
            "{prompt}: polled after it ended"
        );
    }
    check_log(&gw, &key, &[]).await;
    check_upstream_auth(&up, &key);
}

// ---------------------------------------------------------------------------------
// Row 3: durations and sizes a vendor cannot express.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_vendor_cannot_express_is_a_400_before_anything_is_reserved() {
    let up = VideoUpstream::start().await;
    let gw = TestGateway::start(&config(&up.base_url()), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    let cases: Vec<(Client, Value, &str)> = vec![
        // The OpenAI videos API: 4, 8 or 12 seconds; four sizes; one video.
        (
            Client::A("text2video"),
            json!({"model": "sora-2", "prompt": "p", "duration": 5}),
            "duration",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "5"}),
            "seconds",
        ),
        (
            Client::Videos,
            json!({"model": "sora-2", "prompt": "p", "seconds": "4", "size": "1920x1080"}),
            "size",
        ),
        (
            Client::Generations,
            json!({"model": "sora-2", "prompt": "p", "duration": 4, "n": 2}),
            "n",
        ),
        (
            Client::Generations,
            json!({"model": "sora-2", "prompt": "p", "duration": 4, "width": 1280}),
            "width",
        ),
        // Kling: 5 or 10 seconds, 16:9, 9:16 or 1:1.
        (
            Client::Videos,
            json!({"model": "kling-v1", "prompt": "p", "seconds": "4"}),
            "seconds",
        ),
        (
            Client::A("text2video"),
            json!({"model": "kling-v1", "prompt": "p", "width": 1024, "height": 768}),
            "width",
        ),
        // Jimeng: 5 or 10 seconds (121 or 241 frames).
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "duration": 7}),
            "duration",
        ),
        (
            Client::B,
            json!({"req_key": "jimeng-v30", "prompt": "p", "n": 3}),
            "n",
        ),
    ];
    for (client, body, param) in &cases {
        let (s, text) = submit_raw(&gw, &key, *client, body).await;
        assert_eq!(s, 400, "{client:?} {body}: {text}");
        let e = error_of(&text);
        assert_eq!(e["param"], *param, "{client:?} {body}: {text}");
    }
    assert!(
        up.requests().is_empty(),
        "the upstream saw nothing: {:?}",
        up.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert_eq!(gw.used_micros(&kid).await, 0);
    assert!(log(&gw, &key)
        .await
        .iter()
        .all(|r| r["cost_micro_usd"] == 0));

    // What a vendor can express passes: the nearest it takes, when none was asked.
    let id = submit(
        &gw,
        &key,
        Client::Generations,
        json!({"model": "sora-2", "prompt": "default length"}),
    )
    .await;
    wait_completed(&gw, &key, Client::Generations, &id).await;
    let t = up.task_with_prompt("default length");
    assert_eq!(
        t.seconds, 4.0,
        "the longest the API takes within the 5 s default"
    );
    assert_eq!(gw.used_micros(&kid).await, 400_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_one_channel_cannot_express_goes_to_one_that_can() {
    let up = VideoUpstream::start().await;
    // `clip-1` on the OpenAI videos API first, on Kling second.
    let base = up.base_url();
    let key_ = crate::video_upstream::API_KEY;
    let (ak, sk) = (kling::ACCESS_KEY, kling::SECRET_KEY);
    let cfg = format!(
        "{}channels:\n\
         \x20 - {{ name: first, protocol: openai, base_url: \"{base}\", api_key: {key_}, models: [clip-1], priority: 0 }}\n\
         \x20 - {{ name: second, protocol: video-a, base_url: \"{base}\", access_key: {ak}, secret_key: {sk}, models: [clip-1], priority: 1 }}\n\
         prices:\n  clip-1: {{ per_second: 0.01 }}\n",
        video_section(86400)
    );
    let gw = TestGateway::start(&cfg, StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 10})).await;
    for (body, shape) in [
        (
            json!({"model": "clip-1", "prompt": "five", "duration": 5}),
            "text2video",
        ),
        (
            json!({"model": "clip-1", "prompt": "four", "duration": 4}),
            "video",
        ),
        (
            json!({"model": "clip-1", "prompt": "twelve", "duration": 12}),
            "video",
        ),
        (
            json!({"model": "clip-1", "prompt": "ten", "duration": 10}),
            "text2video",
        ),
    ] {
        let id = submit(&gw, &key, Client::Generations, body.clone()).await;
        wait_completed(&gw, &key, Client::Generations, &id).await;
        let t = up.task_with_prompt(body["prompt"].as_str().unwrap());
        assert_eq!(t.kind, shape, "{body}");
    }
    assert_eq!(
        gw.used_micros(&kid).await,
        50_000 + 40_000 + 120_000 + 100_000
    );
    // Neither can make 7 s.
    let (s, text) = submit_raw(
        &gw,
        &key,
        Client::Generations,
        &json!({"model": "clip-1", "prompt": "seven", "duration": 7}),
    )
    .await;
    assert_eq!(s, 400, "{text}");
    assert_eq!(error_of(&text)["param"], "duration");
    assert_eq!(up.submits().len(), 4);
}

// ---------------------------------------------------------------------------------
// Every client shape on every vendor: success, vendor failure, vendor timeout.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_shape_on_every_vendor_is_billed_once_or_refunded() {
    let up = VideoUpstream::start().await;
    // Tasks that hang time out after 3 s (reads give up after 1 s).
    let gw = TestGateway::start(&config_with(&up.base_url(), 3), StoreKind::Embedded).await;
    let (key, kid) = gw.create_key(json!({"quota_usd": 100})).await;
    let vendors = [
        ("sora-2", 4, 100_000),
        ("kling-v1", 5, 50_000),
        ("jimeng-v30", 5, 20_000),
    ];
    let clients = [
        Client::Videos,
        Client::A("text2video"),
        Client::B,
        Client::Generations,
    ];
    let mut tasks = Vec::new();
    let mut charged = Vec::new();
    for (model, seconds, per_second) in vendors {
        for client in clients {
            for outcome in ["ok", "please fail", "hang", "flaky"] {
                let prompt = format!("{outcome} {model} {client:?}");
                let body = match client {
                    Client::Videos => {
                        json!({"model": model, "prompt": prompt, "seconds": seconds.to_string()})
                    }
                    Client::B => json!({"req_key": model, "prompt": prompt, "duration": seconds}),
                    _ => json!({"model": model, "prompt": prompt, "duration": seconds}),
                };
                let id = submit(&gw, &key, client, body).await;
                let good = outcome == "ok" || outcome == "flaky";
                if good {
                    charged.push((model, per_second * seconds));
                }
                tasks.push((client, id, prompt, good));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for (client, id, prompt, good) in &tasks {
        let rec = loop {
            let rec = status(&gw, &key, *client, id).await;
            if rec["status"] == "completed" || rec["status"] == "failed" {
                break rec;
            }
            assert!(Instant::now() < deadline, "{prompt} did not end: {rec}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let want = if *good { "completed" } else { "failed" };
        assert_eq!(rec["status"], want, "{prompt}: {rec}");
        if prompt.starts_with("hang") {
            let code = &rec["error"]["code"];
            assert!(code == "task_timeout" || code == 504, "{prompt}: {rec}");
        }
        if prompt.starts_with("ok") {
            check_content(&gw, &key, *client, id, &rec).await;
        }
    }
    let total: i64 = charged.iter().map(|(_, c)| c).sum();
    assert_eq!(
        gw.used_micros(&kid).await,
        total,
        "charged once each, refunds for the rest"
    );
    check_log(&gw, &key, &charged).await;
    assert_eq!(
        up.submits().len(),
        tasks.len(),
        "one upstream task per request"
    );
    // Flaky vendors were asked again after their transient errors.
    for t in up.tasks().iter().filter(|t| t.prompt.starts_with("flaky")) {
        let polls = up.polls_of(&t.id);
        assert!(
            polls.len() >= 3 && polls[..2].iter().all(|p| p.status == Status::Transient),
            "{polls:?}"
        );
    }
    check_upstream_auth(&up, &key);
}

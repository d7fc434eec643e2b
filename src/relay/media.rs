//! The relay leg of the non-chat endpoints (spec 4.6, 4.7, 4.19–4.22): read and check the
//! request (the 400s of section 8, before anything is reserved), price it in its own unit
//! (tokens, images, characters, minutes), reserve that worst case, send it as it came
//! (model renamed) to an OpenAI-style channel, and settle from what the answer says it
//! consumed. Speech audio streams back as it arrives; uploads are forwarded byte-exact.

use super::body;
use super::upstream::{Exchange, OpenError, Outgoing};
use crate::billing::{Price, ReservationGuard};
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use crate::media::images::{self, ImageJob};
use crate::media::multipart::{self, Form};
use crate::media::{audio, parse_json, text, Media};
use crate::protocol::Usage;
use crate::proxy::ctx::{respond, response_header};
use crate::proxy::Ctx;
use crate::store::Micros;
use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;
use std::ops::Range;

/// Audio tokens per second of input, an upper bound for token-priced transcription
/// models (the current ones use about ten).
const AUDIO_TOKENS_PER_SECOND: f64 = 50.0;

/// What a request is billed by.
enum Charge {
    /// Embeddings, rerank, moderation: prompt tokens.
    Tokens,
    Images(ImageJob),
    Speech {
        chars: u64,
    },
    Audio {
        format: Option<String>,
        file: Range<usize>,
    },
}

/// A checked request.
struct Plan {
    model: String,
    body: Bytes,
    /// The parsed JSON body (`None` for multipart uploads).
    json: Option<Value>,
    /// The body must be re-serialized with `model` set, whatever the channel's mapping.
    rewrite: bool,
    form: Option<Form>,
    content_type: String,
    charge: Charge,
}

fn plan(gw: &Gateway, media: &Media, raw: Bytes, content_type: &str) -> Result<Plan, GatewayError> {
    // The SDKs' image edits are multipart; the native shape of spec 4.7 is JSON.
    if let (Media::ImageEdit, Some(boundary)) = (media, multipart::boundary(content_type)) {
        let edit = images::check_edit_form(raw, &boundary, &gw.config.image_families)?;
        return Ok(Plan {
            model: edit.job.model.clone(),
            body: edit.body,
            json: None,
            rewrite: false,
            form: Some(edit.form),
            content_type: content_type.to_string(),
            charge: Charge::Images(edit.job),
        });
    }
    if media.is_multipart() {
        let boundary = multipart::boundary(content_type).ok_or_else(|| {
            GatewayError::bad_request(None, "The request must be multipart/form-data.")
        })?;
        let form = multipart::parse(&raw, &boundary)?;
        let job = audio::check_transcription(&form)?;
        return Ok(Plan {
            model: job.model,
            body: raw,
            json: None,
            rewrite: false,
            form: Some(form),
            content_type: content_type.to_string(),
            charge: Charge::Audio {
                format: job.response_format,
                file: job.file.range,
            },
        });
    }
    let mut json = parse_json(&raw)?;
    let named_model = json.get("model").is_some();
    let (model, charge) = match media {
        Media::ImageGeneration => {
            let job = images::check_generation(&mut json, &gw.config.image_families)?;
            (job.model.clone(), Charge::Images(job))
        }
        Media::ImageEdit => {
            let job = images::check_edit(&json, &gw.config.image_families)?;
            images::to_dashscope(&mut json);
            (job.model.clone(), Charge::Images(job))
        }
        Media::Speech => {
            let job = audio::check_speech(&json)?;
            (job.model, Charge::Speech { chars: job.chars })
        }
        Media::Embeddings(path_model) => (
            text::check_embeddings(&json, path_model.as_deref())?,
            Charge::Tokens,
        ),
        Media::Rerank => (text::check_rerank(&json)?, Charge::Tokens),
        Media::Moderation => (text::check_moderation(&json)?, Charge::Tokens),
        Media::Transcription | Media::Translation => {
            return Err(GatewayError::Internal);
        }
    };
    Ok(Plan {
        model,
        body: raw,
        json: Some(json),
        // A defaulted model (images, moderation) is written into the body sent upstream,
        // and so are native edits (their sizes are respelled for the vendor).
        rewrite: !named_model || matches!(media, Media::Embeddings(Some(_)) | Media::ImageEdit),
        form: None,
        content_type: "application/json".into(),
        charge,
    })
}

/// The worst case this request can cost, or `None` when the model has no price in the
/// unit the endpoint is billed in.
fn worst_case(price: &Price, plan: &Plan) -> Option<Micros> {
    match &plan.charge {
        Charge::Tokens => price.input_priced.then(|| price.input_bound(&plan.body)),
        Charge::Images(job) => {
            if !price.per_image.is_empty() {
                let each = price.image(&job.size, job.quality.as_deref())?;
                Some(each.saturating_mul(job.n as Micros))
            } else if price.per_token() {
                let output = price.output_cost(price.max_output_tokens.saturating_mul(job.n));
                Some(price.input_bound(&plan.body).saturating_add(output))
            } else {
                None
            }
        }
        Charge::Speech { chars } => price.chars(*chars),
        Charge::Audio { file, .. } => {
            let seconds = audio::max_seconds(&plan.body[file.clone()]);
            price.seconds(seconds).or_else(|| {
                price.per_token().then(|| {
                    price.cost(&Usage {
                        input_tokens: (seconds * AUDIO_TOKENS_PER_SECOND).ceil() as u64,
                        output_tokens: price.max_output_tokens,
                        ..Usage::default()
                    })
                })
            })
        }
    }
}

/// What a successful answer cost, and the token usage it reported (for the log).
fn actual(price: &Price, plan: &Plan, answer: &[u8], worst: Micros) -> (Micros, Usage) {
    match &plan.charge {
        Charge::Tokens => {
            let reported = serde_json::from_slice::<Value>(answer)
                .ok()
                .and_then(|v| text::reported_tokens(&v));
            // No usage in the answer (moderation never reports any): four bytes a token.
            let usage = reported.unwrap_or(Usage {
                input_tokens: plan.body.len() as u64 / 4,
                ..Usage::default()
            });
            (price.cost(&usage), usage)
        }
        Charge::Images(job) => {
            let got = images::delivered(answer).unwrap_or_default();
            if let (true, Some(u)) = (price.per_token(), got.usage) {
                return (price.cost(&u), u);
            }
            let size = got.size.as_deref().unwrap_or(&job.size);
            let quality = got.quality.as_deref().or(job.quality.as_deref());
            let each = price
                .image(size, quality)
                .unwrap_or(worst / job.n.max(1) as Micros);
            (each.saturating_mul(got.images as Micros), Usage::default())
        }
        Charge::Speech { chars } => (price.chars(*chars).unwrap_or(worst), Usage::default()),
        Charge::Audio { format, file } => {
            if let (true, Some(u)) = (price.per_token(), audio::token_usage(answer)) {
                return (price.cost(&u), u);
            }
            let seconds =
                audio::billed_seconds(format.as_deref(), answer, &plan.body[file.clone()]);
            (price.seconds(seconds).unwrap_or(worst), Usage::default())
        }
    }
}

/// The body for one channel: the model renamed when the channel maps it, and written
/// into the body when it came in the path.
fn body_for(plan: &Plan, upstream_model: &str) -> Bytes {
    if let Some(form) = &plan.form {
        if upstream_model == plan.model {
            return plan.body.clone();
        }
        return multipart::replace_field(&plan.body, form, "model", upstream_model)
            .map_or_else(|| plan.body.clone(), Bytes::from);
    }
    if upstream_model == plan.model && !plan.rewrite {
        return plan.body.clone();
    }
    let mut v = plan.json.clone().unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("model".into(), Value::String(upstream_model.to_string()));
    }
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

pub async fn handle(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    media: &Media,
) -> Result<(), GatewayError> {
    let key = ctx.key.clone().ok_or(GatewayError::Internal)?;
    let raw = body::read(session, gw.config.limits.max_body_bytes).await?;
    let content_type = session
        .get_header(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let plan = plan(gw, media, raw, &content_type)?;
    {
        let rec = ctx.record_mut();
        rec.model = plan.model.clone();
        rec.stream = *media == Media::Speech;
    }
    key.check_model(&plan.model)?;
    let candidates: Vec<_> = gw
        .router
        .candidates(&plan.model)
        .into_iter()
        .filter(|c| media.served_by(c.protocol.media_api(), plan.form.is_some()))
        .collect();
    if candidates.is_empty() {
        return Err(GatewayError::ModelNotFound(plan.model));
    }
    let price = gw.config.prices.get(&plan.model);
    let (price, worst) = price
        .and_then(|p| worst_case(p, &plan).map(|w| (p, w)))
        .ok_or_else(|| GatewayError::ModelNotPriced(plan.model.clone()))?;
    let worst = worst.max(1);
    // The whole worst case or nothing: unlike a chat answer, these cannot be shortened.
    let mut guard = super::reserve(gw, &key.rec.id, &ctx.request_id, worst, worst).await?;
    let result = exchange(
        gw,
        session,
        ctx,
        media,
        &plan,
        price,
        worst,
        &candidates,
        &mut guard,
    )
    .await;
    let cost = ctx.record.as_ref().map_or(0, |r| r.cost);
    guard.settle(cost).await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn exchange(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    media: &Media,
    plan: &Plan,
    price: &Price,
    worst: Micros,
    candidates: &[std::sync::Arc<crate::channels::Channel>],
    guard: &mut ReservationGuard,
) -> Result<(), GatewayError> {
    let client_headers = session.req_header().headers.clone();
    let mut failure = GatewayError::Upstream(UpstreamFailure::Connect);
    for channel in candidates {
        let out = Outgoing {
            method: "POST",
            path: media.path_on(channel.protocol.media_api()),
            body: body_for(plan, channel.upstream_model(&plan.model)),
            content_type: &plan.content_type,
            stream: false,
            client_headers: &client_headers,
        };
        ctx.record_mut().channel = channel.name.clone();
        let mut ex = match Exchange::open(gw, channel.clone(), &out).await {
            Ok(ex) => ex,
            Err(OpenError::NotSent(e)) => {
                failure = e;
                continue;
            }
            Err(OpenError::Sent(e)) => return Err(e),
        };
        if !(200..300).contains(&ex.status()) {
            return Err(super::refused(gw, ctx, ex).await);
        }
        let content_type = ex.content_type().to_string();
        if *media == Media::Speech {
            return speech(
                gw,
                session,
                ctx,
                ex,
                plan,
                price,
                worst,
                &content_type,
                guard,
            )
            .await;
        }
        let answer = ex.body(gw.config.limits.max_response_bytes).await?;
        ex.finish(gw).await;
        let answer = media.answer_from(channel.protocol.media_api(), answer);
        let (cost, usage) = actual(price, plan, &answer, worst);
        settle(ctx, guard, cost, usage, 200).await;
        let answer = client_model(answer, &content_type, &plan.model);
        let ct = if content_type.is_empty() {
            "application/json"
        } else {
            &content_type
        };
        respond(session, ctx, 200, ct, answer).await;
        return Ok(());
    }
    Err(failure)
}

/// Records the cost (never above the reservation: the cap holds even if an upstream
/// delivers more than was asked) and settles, with the usage record, before the answer
/// leaves, so a caller who reads its balance next sees the charge.
async fn settle(
    ctx: &mut Ctx,
    guard: &mut ReservationGuard,
    cost: Micros,
    usage: Usage,
    status: u16,
) {
    let reserved = guard.amount();
    if cost > reserved {
        tracing::warn!(request_id = %ctx.request_id, cost, reserved, "answer cost more than its worst case; capped");
    }
    let cost = cost.min(reserved);
    let rec = ctx.record_mut();
    rec.cost = cost;
    rec.usage = usage;
    super::settle_logged(ctx, guard, cost, status).await;
}

/// A JSON answer shows the client's model name, never the upstream's.
fn client_model(answer: Bytes, content_type: &str, model: &str) -> Bytes {
    if !content_type.contains("json") {
        return answer;
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&answer) else {
        return answer;
    };
    match v.get_mut("model") {
        Some(m) if m.as_str() != Some(model) => {
            *m = Value::String(model.to_string());
            Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        _ => answer,
    }
}

/// Spec 4.21: audio goes to the client as each upstream read arrives.
#[allow(clippy::too_many_arguments)]
async fn speech(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    mut ex: Exchange,
    plan: &Plan,
    price: &Price,
    worst: Micros,
    content_type: &str,
    guard: &mut ReservationGuard,
) -> Result<(), GatewayError> {
    let ct = if content_type.is_empty() {
        "audio/mpeg"
    } else {
        content_type
    };
    ctx.status = 200;
    let mut client_ok = match response_header(ctx, 200, ct, None) {
        Some(h) => session
            .write_response_header(Box::new(h), false)
            .await
            .is_ok(),
        None => false,
    };
    // The upstream bills the whole input once it starts answering.
    let (cost, usage) = actual(price, plan, &[], worst);
    guard.set_charge_on_drop(cost);
    let broke = loop {
        match ex.chunk().await {
            Ok(Some(chunk)) => {
                if client_ok {
                    client_ok = session
                        .write_response_body(Some(chunk), false)
                        .await
                        .is_ok();
                }
            }
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    settle(ctx, guard, cost, usage, if broke { 500 } else { 200 }).await;
    if client_ok && !broke {
        let _ = session.write_response_body(None, true).await;
    }
    if broke {
        // The client saw a 200 header and part of the audio: the log says it failed,
        // and the connection is not reused (the body is incomplete).
        ctx.status = 500;
        session.set_keepalive(None);
    }
    ex.finish(gw).await;
    Ok(())
}

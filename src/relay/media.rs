//! The relay leg of the non-chat endpoints (spec 4.6, 4.7, 4.19–4.22): read and check the
//! request (the 400s of section 8, before anything is reserved), price it in its own unit
//! (tokens, images, characters, minutes), reserve that worst case, send it as it came
//! (model renamed) to an OpenAI-style channel, and settle from what the answer says it
//! consumed. Speech audio streams back as it arrives; uploads are forwarded byte-exact.

use super::body;
use super::exchange;
use super::meter::{Account, Bounds, Call, Cost, Delivery, Meter, Request};
use crate::auth::AuthKey;
use crate::billing::{Bill, Kind, Line, Price};
use crate::channels::Channel;
use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::media::images::{self, ImageJob};
use crate::media::multipart::{self, Form};
use crate::media::text::{self, Billed, TextJob};
use crate::media::{audio, parse_json, Api, Media};
use crate::protocol::Usage;
use crate::request::{Answer, Ctx};
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
    /// Embeddings, rerank, moderation: prompt tokens (or Cohere's search units).
    Text(TextJob),
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
        Media::Embeddings(path_model) => {
            text_job(text::check_embeddings(&json, path_model.as_deref())?)
        }
        Media::Rerank => text_job(text::check_rerank(&json)?),
        Media::Moderation => text_job(text::check_moderation(&json)?),
        Media::Transcription | Media::Translation => {
            return Err(GatewayError::internal(
                "planning a multipart audio request as JSON",
            ));
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

fn text_job(job: TextJob) -> (String, Charge) {
    (job.model.clone(), Charge::Text(job))
}

/// The worst case this request can cost, or `None` when the model has no price in the
/// unit the endpoint is billed in.
fn worst_case(price: &Price, plan: &Plan) -> Option<Micros> {
    match &plan.charge {
        Charge::Text(job) => {
            // Either unit the answer may be billed in: tokens (bounded by the body) or,
            // for rerank, Cohere's search units at their most.
            let tokens = price.input_priced.then(|| price.input_bound(&plan.body));
            let units = job
                .documents
                .zip(price.per_search_unit_pico)
                .map(|(d, rate)| search_units(d.search_units_bound(), rate).micros());
            tokens.max(units)
        }
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

/// What a successful answer cost, how sure that is, and its lines.
fn actual(price: &Price, plan: &Plan, answer: &[u8], worst: Micros) -> (Cost, Bill) {
    let tokens = |u: Usage, exact: bool| (sure(exact, u, price.cost(&u)), price.bill(&u));
    match &plan.charge {
        Charge::Text(job) => match text::billed(job, price, answer) {
            (Billed::Tokens(u), exact) => tokens(u, exact),
            (Billed::SearchUnits(units), exact) => {
                let bill = search_units(units, price.per_search_unit_pico.unwrap_or(0));
                (sure(exact, Usage::default(), bill.micros()), bill)
            }
        },
        Charge::Images(job) => {
            let got = images::delivered(answer).unwrap_or_default();
            if let (true, Some(u)) = (price.per_token(), got.usage) {
                return tokens(u, true);
            }
            let size = got.size.as_deref().unwrap_or(&job.size);
            let quality = got.quality.as_deref().or(job.quality.as_deref());
            let each = price
                .image(size, quality)
                .unwrap_or(worst / job.n.max(1) as Micros);
            // The images delivered, counted: exact.
            let line = Line::at_micros(Kind::Images, got.images, each.max(0) as u64, 1);
            let bill = Bill::one(line);
            (Cost::exact(Usage::default(), bill.micros()), bill)
        }
        Charge::Speech { chars } => match price.per_char_pico {
            Some(rate) => {
                let bill = Bill::one(Line::new(Kind::Characters, *chars, rate));
                (Cost::exact(Usage::default(), bill.micros()), bill)
            }
            None => (Cost::exact(Usage::default(), worst), Bill::default()),
        },
        Charge::Audio { format, file } => {
            if let (true, Some(u)) = (price.per_token(), audio::token_usage(answer)) {
                return tokens(u, true);
            }
            let seconds =
                audio::billed_seconds(format.as_deref(), answer, &plan.body[file.clone()]);
            let (micros, bill) = match price.per_minute_micros {
                Some(per_minute) => {
                    let ms = (seconds.max(0.0) * 1000.0).ceil() as u64;
                    let bill = Bill::one(Line::at_micros(Kind::AudioMs, ms, per_minute, 60_000));
                    (bill.micros(), bill)
                }
                None => (worst, Bill::default()),
            };
            // Seconds the upstream reported are exact; read from the file, counted.
            let reported = serde_json::from_slice::<Value>(answer)
                .ok()
                .is_some_and(|v| v.get("duration").is_some() || v.get("usage").is_some());
            if reported {
                (Cost::exact(Usage::default(), micros), bill)
            } else {
                (Cost::estimated(Usage::default(), micros), bill)
            }
        }
    }
}

/// A cost the upstream reported (`exact`) or the gateway counted.
fn sure(exact: bool, usage: Usage, micros: Micros) -> Cost {
    if exact {
        Cost::exact(usage, micros)
    } else {
        Cost::estimated(usage, micros)
    }
}

/// `units` of Cohere's search units at `pico` each.
fn search_units(units: u64, pico: u64) -> Bill {
    Bill::one(Line::new(Kind::SearchUnits, units, pico))
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
    key: &AuthKey,
    media: &Media,
) -> Result<Answer, GatewayError> {
    let raw = body::read(session, &gw.config.limits).await?;
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
    let price = gw.config.price_over(&plan.model, &candidates);
    let (price, worst) = price
        .and_then(|p| worst_case(&p, &plan).map(|w| (p, w)))
        .ok_or_else(|| GatewayError::ModelNotPriced(plan.model.clone()))?;
    let request = MediaRequest {
        media: media.clone(),
        plan,
        price,
        billed_at: None,
        config: gw.config.clone(),
        worst: worst.max(1),
        api: Api::OpenAi,
    };
    let headers = session.req_header().headers.clone();
    exchange::run(gw, ctx, key, &headers, &candidates, request).await
}

/// A media request on its way upstream. Its worst case is held whole: unlike a chat
/// answer, these cannot be shortened to fit what is left.
struct MediaRequest {
    media: Media,
    plan: Plan,
    /// What the request is reserved by (each rate at its dearest over the candidates).
    price: Price,
    /// The price of the channel called last, when it has one of its own.
    billed_at: Option<Price>,
    config: std::sync::Arc<crate::config::Config>,
    worst: Micros,
    /// The API of the channel called last (its answer may need reshaping).
    api: Api,
}

impl Request for MediaRequest {
    type Meter = MediaMeter;

    fn bounds(&self) -> Bounds {
        Bounds {
            min: self.worst,
            max: self.worst,
            tokens: 0,
        }
    }

    fn grant(&mut self, _granted: Micros) {}

    fn call(&mut self, channel: &Channel, _last: bool) -> Result<Call, GatewayError> {
        self.api = channel.protocol.media_api();
        if !self.config.channel_prices.is_empty() {
            self.billed_at = self
                .config
                .channel_price(&channel.name, &self.plan.model)
                .cloned();
        }
        Ok(Call {
            method: "POST",
            path: self.media.path_on(channel.protocol.media_api()).to_string(),
            body: body_for(&self.plan, channel.upstream_model(&self.plan.model)),
            content_type: self.plan.content_type.clone(),
            stream: false,
            model: channel.upstream_model(&self.plan.model).to_string(),
            wire: None,
        })
    }

    fn meter(self, _request_id: &str, _account: Account) -> MediaMeter {
        MediaMeter {
            speech: self.media == Media::Speech,
            media: self.media,
            api: self.api,
            plan: self.plan,
            price: self.billed_at.unwrap_or(self.price),
            worst: self.worst,
            cost: Cost::default(),
            bill: Bill::default(),
        }
    }
}

struct MediaMeter {
    speech: bool,
    media: Media,
    api: Api,
    plan: Plan,
    price: Price,
    worst: Micros,
    cost: Cost,
    bill: Bill,
}

impl Meter for MediaMeter {
    fn delivery(&mut self, upstream_content_type: &str) -> Result<Delivery, GatewayError> {
        if !self.speech {
            return Ok(Delivery::Whole);
        }
        // Spec 4.21: audio goes to the client as each upstream read arrives. The
        // upstream bills the whole input once it starts answering.
        (self.cost, self.bill) = actual(&self.price, &self.plan, &[], self.worst);
        let content_type = match upstream_content_type {
            "" => "audio/mpeg",
            ct => ct,
        };
        Ok(Delivery::Stream {
            content_type: content_type.into(),
            framed: false,
        })
    }

    fn whole(&mut self, body: Bytes, content_type: &str) -> Result<(Bytes, String), GatewayError> {
        let body = self.media.answer_from(self.api, body);
        (self.cost, self.bill) = actual(&self.price, &self.plan, &body, self.worst);
        let answer = client_model(body, content_type, &self.plan.model);
        let ct = match content_type {
            "" => "application/json",
            ct => ct,
        };
        Ok((answer, ct.to_string()))
    }

    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
    }

    fn finish(&mut self, _error: Option<&str>, _out: &mut Vec<u8>) {}

    fn cost(&self) -> Cost {
        self.cost
    }

    fn bill(&self) -> Bill {
        self.bill.clone()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text_plan(job: TextJob, body: &str) -> Plan {
        Plan {
            model: job.model.clone(),
            body: Bytes::from(body.to_string()),
            json: None,
            rewrite: false,
            form: None,
            content_type: "application/json".into(),
            charge: Charge::Text(job),
        }
    }

    fn price(yaml: &str) -> Price {
        Price::from_raw(&serde_yaml::from_str(yaml).unwrap()).unwrap()
    }

    #[test]
    fn search_units_are_one_exact_line_at_the_unit_price() {
        let body = r#"{"model":"rerank-v3.5","query":"q","documents":["a","b","c"]}"#;
        let job = text::check_rerank(&serde_json::from_str(body).unwrap()).unwrap();
        let plan = text_plan(job, body);
        // 0.002 USD a unit: 2,000 micro-USD, 2 × 10⁹ pico-USD.
        let p = price("{per_search_unit: 0.002}");
        // Three documents of up to ten chunks each: 30 chunks, one unit.
        assert_eq!(worst_case(&p, &plan), Some(2_000));
        let answer = br#"{"results": [], "meta": {"billed_units": {"search_units": 3}}}"#;
        let (cost, bill) = actual(&p, &plan, answer, 2_000);
        assert_eq!(cost, Cost::exact(Usage::default(), 6_000));
        assert_eq!(
            bill,
            Bill::one(Line::new(Kind::SearchUnits, 3, 2_000_000_000))
        );
        // A price with no search unit and no token rate cannot bill a moderation.
        let job = text::check_moderation(&serde_json::json!({"input": "x"})).unwrap();
        assert_eq!(worst_case(&p, &text_plan(job, "{}")), None);
    }

    #[test]
    fn an_estimate_is_marked_and_its_lines_match_it() {
        let body = r#"{"input":"an image, an image, an image","model":"omni-moderation-latest"}"#;
        let job = text::check_moderation(&serde_json::from_str(body).unwrap()).unwrap();
        let plan = text_plan(job, body);
        let p = price("{input: 100}");
        // 73 bytes + 64 tokens at 100 micro-USD: the word `image` is not an image.
        assert_eq!(worst_case(&p, &plan), Some(13_700));
        let (cost, bill) = actual(&p, &plan, br#"{"results": []}"#, 13_700);
        let seven = Usage {
            input_tokens: 7,
            ..Usage::default()
        };
        assert_eq!(cost, Cost::estimated(seven, 700));
        assert_eq!(bill, Bill::one(Line::new(Kind::Input, 7, 100_000_000)));
        assert_eq!(bill.micros(), cost.micros);
    }
}

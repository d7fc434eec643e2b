//! The video endpoints, answered from `request_filter`: submit (check, reserve, send to a
//! channel, store the task), status (from the store, refreshed in place when a poll is
//! due), and content (streamed from the upstream). `poll::poll_once` is the one step that
//! moves a task on; the background poller and a status request that finds its task stale
//! both run it, only after claiming the task in the store.

use super::job::{self, Bounds, VideoJob};
use super::poll::{open, poll_once, STATUS_BODY_LIMIT};
use super::render;
use super::vendors::{self, Call, Source};
use super::{Shape, VideoRoute};
use crate::auth::credentials::query_param;
use crate::auth::AuthKey;
use crate::billing::{Multiplier, ReservationGuard};
use crate::channels::{Channel, ChannelProtocol};
use crate::errors::{GatewayError, UpstreamFailure};
use crate::gateway::Gateway;
use crate::ids;
use crate::media::{multipart, parse_json};
use crate::relay::upstream::{Exchange, OpenError};
use crate::relay::{body, exchange, meter};
use crate::request::Ctx;
use crate::request::{response_header, Answer, LiveAnswer};
use crate::store::tasks::{TaskRecord, TaskRef, TaskStatus};
use crate::store::Micros;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;
use std::sync::Arc;

/// Reservations of tasks outlive the task's own timeout by this much, so the poller's
/// explicit refund always comes first.
const RESERVATION_MARGIN_SECS: u64 = 3600;

pub async fn handle(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &AuthKey,
    route: &VideoRoute,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    match route {
        VideoRoute::Submit(shape) => submit(gw, session, ctx, key, *shape).await,
        VideoRoute::Status(shape, id) => {
            let t = current(gw, key, id).await?;
            let body = match shape {
                Shape::Videos => render::job_record(&t),
                _ => render::status_record(&t, &content_url(gw, session, &t.id)),
            };
            Ok(Answer::json(200, body.to_string().into_bytes()))
        }
        VideoRoute::Content(id) => content(gw, ctx, key, id, query).await,
        VideoRoute::VideoB => video_b(gw, session, ctx, key, query).await,
    }
}

/// Spec 4.14: the action and version come from the query.
async fn video_b(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &AuthKey,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let param = |name: &str| query_param(query, name);
    let version = param("Version").ok_or_else(|| {
        GatewayError::bad_request(
            Some("Version"),
            "The `Version` query parameter is required.",
        )
    })?;
    if !is_date(&version) {
        return Err(GatewayError::bad_request(
            Some("Version"),
            "`Version` must be a date like 2022-08-31.",
        ));
    }
    match param("Action").as_deref() {
        Some("CVSync2AsyncSubmitTask") => submit(gw, session, ctx, key, Shape::VideoB).await,
        Some("CVSync2AsyncGetResult") => {
            let raw = body::read(session, &gw.config.limits).await?;
            let v = parse_json(&raw)?;
            let id = v
                .get("task_id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| GatewayError::bad_request(Some("task_id"), "`task_id` is required."))?
                .to_string();
            let t = current(gw, key, &id).await?;
            let data = render::status_record(&t, &content_url(gw, session, &t.id));
            let body = render::video_b(data, &ctx.request_id);
            Ok(Answer::json(200, body.to_string().into_bytes()))
        }
        Some(other) => Err(GatewayError::bad_request(
            Some("Action"),
            format!("Unknown `Action` `{other}`: expected CVSync2AsyncSubmitTask or CVSync2AsyncGetResult."),
        )),
        None => Err(GatewayError::bad_request(
            Some("Action"),
            "The `Action` query parameter is required.",
        )),
    }
}

/// `YYYY-MM-DD`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && (1..=12).contains(&s[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&s[8..10].parse::<u32>().unwrap_or(0))
}

async fn read_job(
    gw: &Gateway,
    session: &mut Session,
    shape: Shape,
) -> Result<VideoJob, GatewayError> {
    let raw = body::read(session, &gw.config.limits).await?;
    let bounds = Bounds {
        max_seconds: gw.config.video.max_seconds,
    };
    let content_type = session
        .get_header(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    match shape {
        Shape::Videos => match multipart::boundary(&content_type) {
            Some(b) => {
                let form = multipart::parse(&raw, &b)?;
                job::from_videos_form(&raw, &form, bounds).map_err(GatewayError::from)
            }
            None => job::from_videos_json(&parse_json(&raw)?, bounds).map_err(GatewayError::from),
        },
        Shape::TextToVideo | Shape::Generations => {
            job::from_task_json(&parse_json(&raw)?, false, bounds).map_err(GatewayError::from)
        }
        Shape::ImageToVideo => {
            job::from_task_json(&parse_json(&raw)?, true, bounds).map_err(GatewayError::from)
        }
        Shape::VideoB => job::from_video_b(&parse_json(&raw)?, bounds).map_err(GatewayError::from),
    }
}

fn video_channel(p: ChannelProtocol) -> bool {
    matches!(
        p,
        ChannelProtocol::OpenAi | ChannelProtocol::VideoA | ChannelProtocol::VideoB
    )
}

async fn submit(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    key: &AuthKey,
    shape: Shape,
) -> Result<Answer, GatewayError> {
    let path = session.req_header().uri.path().to_string();
    let job = read_job(gw, session, shape).await?;
    {
        let rec = ctx.record_mut();
        rec.endpoint = path.clone();
        rec.model = job.model.clone();
    }
    key.check_model(&job.model)?;
    let v = &gw.config.video;
    let candidates = plan_candidates(gw, &job)?;
    let channels_asked: Vec<Arc<Channel>> = candidates.iter().map(|(c, _)| c.clone()).collect();
    let worst = worst_cost(gw, &job, &candidates, &channels_asked)?;
    let id = new_task_id()?;
    let now = ids::now_secs();
    let timeout = v.task_timeout.as_secs();
    let ttl = timeout + RESERVATION_MARGIN_SECS;
    let bounds = meter::Bounds {
        min: worst,
        max: worst,
        tokens: 0,
    };
    let mut guard = exchange::hold(gw, key, &id, bounds, ttl).await?;

    let channels = channels_asked;
    let (ex, kind, seconds) = send_job(gw, ctx, &job, &candidates, &channels, &mut guard).await?;
    let (channel, upstream_id) = upstream_task_id(gw, ctx, ex, &mut guard).await?;
    let t = TaskRecord {
        id: id.clone(),
        key_id: key.rec.id.clone(),
        endpoint: path,
        model: job.model.clone(),
        channel: channel.name.clone(),
        upstream_id,
        upstream_kind: kind,
        status: TaskStatus::Queued,
        progress: 0,
        created_at: now,
        completed_at: None,
        deadline: now.saturating_add(timeout as i64),
        seconds,
        size: job.size(),
        n: job.n,
        reserved: guard.amount(),
        cost: 0,
        multiplier_ppm: (guard.multiplier() != Multiplier::ONE).then_some(guard.multiplier().0),
        polls: 0,
        result: None,
        error: None,
    };
    store_task(gw, ctx, &mut guard, &t).await?;
    let body = match shape {
        Shape::Videos => render::job_record(&t),
        Shape::VideoB => render::video_b(serde_json::json!({"task_id": t.id}), &ctx.request_id),
        _ => render::submitted(&t),
    };
    Ok(Answer::json(200, body.to_string().into_bytes()))
}

/// The video channels serving the job's model, each with what it would be asked, decided
/// before anything is reserved: a request no channel can express is a 400 naming the field.
fn plan_candidates(
    gw: &Gateway,
    job: &VideoJob,
) -> Result<Vec<(Arc<Channel>, vendors::Plan)>, GatewayError> {
    let served: Vec<Arc<Channel>> = gw
        .router
        .candidates(&job.model)
        .into_iter()
        .filter(|c| video_channel(c.protocol))
        .collect();
    if served.is_empty() {
        return Err(GatewayError::ModelNotFound(job.model.clone()));
    }
    let v = &gw.config.video;
    let mut first_unfit = None;
    let candidates: Vec<(Arc<Channel>, vendors::Plan)> = served
        .into_iter()
        .filter_map(
            |c| match vendors::plan(c.protocol, job, v.default_seconds) {
                Ok(plan) => Some((c, plan)),
                Err(unfit) => {
                    first_unfit.get_or_insert(unfit);
                    None
                }
            },
        )
        .collect();
    if candidates.is_empty() {
        let unfit = first_unfit.ok_or_else(|| {
            GatewayError::internal("planning the video job: no channel fit it and none said why")
        })?;
        return Err(GatewayError::bad_request(Some(unfit.param), unfit.message));
    }
    Ok(candidates)
}

/// What the task reserves: the job at its dearest price over the channels asked, and at
/// the dearest length any candidate would be asked for (at least one micro).
fn worst_cost(
    gw: &Gateway,
    job: &VideoJob,
    candidates: &[(Arc<Channel>, vendors::Plan)],
    channels_asked: &[Arc<Channel>],
) -> Result<Micros, GatewayError> {
    let price = gw
        .config
        .price_over(&job.model, channels_asked)
        .filter(|p| p.per_second_micros.is_some())
        .ok_or_else(|| GatewayError::ModelNotPriced(job.model.clone()))?;
    // The dearest length any candidate would be asked for.
    let seconds = candidates
        .iter()
        .map(|(_, plan)| plan.seconds)
        .fold(0.0, f64::max);
    let worst = price
        .video(seconds, job.n)
        .ok_or_else(|| GatewayError::ModelNotPriced(job.model.clone()))?
        .max(1);
    Ok(worst)
}

/// A new task's id, which is also its reservation's.
fn new_task_id() -> Result<String, GatewayError> {
    Ok(format!(
        "task_{}",
        // ring's error is a unit: it says only that the system's random source failed.
        crate::auth::keys::random_base62(32).map_err(|_| {
            GatewayError::internal("generating a task id: the system random source failed")
        })?
    ))
}

/// Sends the job to the first channel that answers, in its vendor's terms. Returns the
/// exchange with the detail the task must remember and the length asked of that channel;
/// the reservation is released when no channel answers.
async fn send_job(
    gw: &Gateway,
    ctx: &mut Ctx,
    job: &VideoJob,
    candidates: &[(Arc<Channel>, vendors::Plan)],
    channels: &[Arc<Channel>],
    guard: &mut ReservationGuard,
) -> Result<(Exchange, String, f64), GatewayError> {
    // The detail the task must remember, and the length asked, of the channel called last.
    let mut asked: Option<(String, f64)> = None;
    let answered = exchange::first_answer(gw, ctx, &http::HeaderMap::new(), channels, |c, _| {
        let Some((_, plan)) = candidates.iter().find(|(p, _)| p.name == c.name) else {
            return Ok(None);
        };
        let upstream_model = c.upstream_model(&job.model);
        Ok(
            vendors::submit(c.protocol, job, plan, upstream_model).map(|(call, kind)| {
                asked = Some((kind, plan.seconds));
                meter::Call {
                    method: call.method,
                    path: call.path,
                    body: call.body,
                    content_type: call.content_type,
                    stream: false,
                    model: upstream_model.to_string(),
                    wire: None,
                }
            }),
        )
    })
    .await;
    let ex = match answered {
        Ok(ex) => ex,
        Err(e) => {
            guard.settle(0).await;
            return Err(e);
        }
    };
    let (kind, seconds) = asked.ok_or_else(|| {
        GatewayError::internal("reading what was asked of the video channel that answered")
    })?;
    Ok((ex, kind, seconds))
}

/// The channel that answered and the id it gave the task. A refusal, or an answer that
/// is not understood or not read, releases the reservation.
async fn upstream_task_id(
    gw: &Gateway,
    ctx: &Ctx,
    mut ex: Exchange,
    guard: &mut ReservationGuard,
) -> Result<(Arc<Channel>, String), GatewayError> {
    let channel = ex.channel.clone();
    let answer = ex.body(STATUS_BODY_LIMIT).await;
    ex.finish(gw).await;
    let upstream_id = match answer.map(|a| (vendors::submitted(channel.protocol, &a[..]), a)) {
        Ok((vendors::Submitted::Task(id), _)) => id,
        Ok((refused, answer)) => {
            tracing::warn!(request_id = %ctx.request_id, channel = %channel.name,
                body = %gw.config.secrets.body(&answer),
                "video submission refused or not understood");
            guard.settle(0).await;
            return Err(GatewayError::Upstream(match refused {
                vendors::Submitted::Refused(status) => UpstreamFailure::Status(status),
                _ => UpstreamFailure::BadResponse,
            }));
        }
        Err(e) => {
            guard.settle(0).await;
            return Err(e);
        }
    };
    Ok((channel, upstream_id))
}

/// Stores the task for the poller, which then owns the reservation (settled when the task
/// ends). A task that cannot be stored is refunded: nobody would collect it.
async fn store_task(
    gw: &Gateway,
    ctx: &Ctx,
    guard: &mut ReservationGuard,
    t: &TaskRecord,
) -> Result<(), GatewayError> {
    let due = ids::now_ms() + gw.config.video.poll_interval.as_millis() as i64;
    if let Err(e) = gw.store.create_task(t, due).await {
        // The upstream runs a task nobody will collect: refund it and say so.
        tracing::error!(request_id = %ctx.request_id, task = %t.id, error = %e, "task not stored; refunded");
        guard.settle(0).await;
        return Err(e.into());
    }
    // The task owns the reservation now: it is settled when the task ends.
    guard.hand_over();
    tracing::info!(request_id = %ctx.request_id, task = %t.id, channel = %t.channel, "video task submitted");
    Ok(())
}

/// The caller's task, refreshed first when a poll is due and nobody else is on it.
async fn current(gw: &Gateway, key: &AuthKey, id: &str) -> Result<TaskRecord, GatewayError> {
    let t = gw
        .store
        .get_task(&key.rec.id, id)
        .await?
        .ok_or(GatewayError::TaskNotFound)?;
    if t.status.is_terminal() {
        return Ok(t);
    }
    let r = TaskRef {
        key_id: t.key_id.clone(),
        id: t.id.clone(),
    };
    let lease = gw.config.video.lease.as_millis() as i64;
    match gw.store.claim_task(&r, ids::now_ms(), lease).await {
        Ok(true) => Ok(poll_once(gw, &r).await.unwrap_or(t)),
        _ => Ok(t),
    }
}

/// Where a client downloads the task's video: the gateway's own content endpoint.
fn content_url(gw: &Gateway, session: &Session, id: &str) -> String {
    let base = match &gw.config.video.public_url {
        Some(u) => u.clone(),
        None => {
            let h = session.req_header();
            let host = h
                .headers
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .or_else(|| h.uri.authority().map(|a| a.as_str()))
                .unwrap_or("localhost");
            // The client listener's own TLS, or the proxy in front's.
            let https = gw.config.tls.is_some()
                || session
                    .get_header("x-forwarded-proto")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|p| p.eq_ignore_ascii_case("https"));
            format!("{}://{host}", if https { "https" } else { "http" })
        }
    };
    format!("{base}/v1/videos/{id}/content")
}

async fn content(
    gw: &Gateway,
    ctx: &mut Ctx,
    key: &AuthKey,
    id: &str,
    query: Option<&str>,
) -> Result<Answer, GatewayError> {
    let t = current(gw, key, id).await?;
    if t.status != TaskStatus::Completed {
        return Err(GatewayError::VideoNotReady(t.status.as_str()));
    }
    let channel = gw
        .router
        .by_name(&t.channel)
        .ok_or(GatewayError::Upstream(UpstreamFailure::Connect))?;
    let variant = query_param(query, "variant");
    let source = vendors::content(channel.protocol, &t, variant.as_deref())
        .ok_or(GatewayError::Upstream(UpstreamFailure::BadResponse))?;
    let (target, path) = match source {
        Source::Channel(p) => (channel, p),
        Source::Url(u) => {
            let (c, p) = channel
                .for_url(&u)
                .ok_or(GatewayError::Upstream(UpstreamFailure::BadResponse))?;
            (Arc::new(c), p)
        }
    };
    let call = Call {
        method: "GET",
        path,
        content_type: String::new(),
        body: Bytes::new(),
    };
    let ex = match open(gw, target, &call, &http::HeaderMap::new()).await {
        Ok(ex) => ex,
        Err(OpenError::NotSent(e) | OpenError::Sent(e)) => return Err(e),
    };
    if !(200..300).contains(&ex.status()) {
        return Err(crate::relay::exchange::refused(gw, ctx, ex).await);
    }
    let content_type = match ex.content_type() {
        "" => "video/mp4".to_string(),
        c => c.to_string(),
    };
    Ok(Answer::Live(Box::new(Download { ex, content_type })))
}

/// A finished video, streamed from the upstream as it arrives (for a HEAD, its header).
struct Download {
    ex: Exchange,
    content_type: String,
}

#[async_trait]
impl LiveAnswer for Download {
    async fn send(self: Box<Self>, gw: &Gateway, session: &mut Session, ctx: &mut Ctx) {
        let Download {
            mut ex,
            content_type,
        } = *self;
        ctx.status = 200;
        // The upstream's length, when it says one, so a cut download is seen as short.
        // A HEAD gets the GET's header and no body; the upstream's body is left unread
        // and its connection closed.
        let head = session.req_header().method == http::Method::HEAD;
        let written = match response_header(ctx, 200, &content_type, ex.content_length()) {
            Some(h) => session
                .write_response_header(Box::new(h), head)
                .await
                .is_ok(),
            None => false,
        };
        if written && !head {
            loop {
                match ex.chunk().await {
                    Ok(Some(chunk)) => {
                        if session
                            .write_response_body(Some(chunk), false)
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    Ok(None) => {
                        let _ = session.write_response_body(None, true).await;
                        break;
                    }
                    Err(_) => {
                        // The client has a 200 and part of the video: close instead of ending it.
                        ctx.status = 500;
                        session.set_keepalive(None);
                        break;
                    }
                }
            }
        }
        ex.finish(gw).await;
    }
}

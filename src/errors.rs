//! One error type for everything the gateway answers with an error (spec 7).
//!
//! `status()` and `code()` are exhaustive matches: a new variant does not compile until it
//! has a status, a metrics label and a message. Messages are stable sentences; upstream
//! details never reach them (spec 7.2). Every rendered message ends with
//! `(request id: ID)` (spec 7.1). An internal error carries its cause for the log: what
//! the gateway was doing and the error beneath it; the client sees only the sentence.

use crate::store::{chain, Cause};
use serde_json::json;

/// How the client's protocol wants errors shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error":{"message","type","param","code"}}`
    Default,
    /// `{"type":"error","error":{"type","message"}}` (spec 7, `/v1/messages`)
    Messages,
    /// `{"error":{"code":<int>,"message","status"}}`: what the generate-content SDKs parse,
    /// plus the spec's `type`.
    Gemini,
}

/// How an upstream failed. Only the kind travels to the client, never the upstream's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// No connection could be opened (nothing was sent).
    Connect,
    /// The upstream did not answer in time.
    Timeout,
    /// The upstream answered with something that is not its protocol.
    BadResponse,
    /// The upstream answered with this HTTP status.
    Status(u16),
    /// The connection broke mid-response.
    Broken,
    /// The upstream's content filter refused the prompt (Azure OpenAI's 400
    /// `content_filter`): the client's 400 `content_filter`, or its protocol's own
    /// refusal where it has one (`relay::exchange`).
    ContentFilter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// 400: the request is malformed; `param` names the field.
    BadRequest {
        param: Option<String>,
        message: String,
    },
    MissingKey,
    MalformedKey,
    UnknownKey,
    KeyDisabled,
    KeyExpired,
    IpNotAllowed,
    ModelNotAllowed(String),
    QuotaExhausted,
    /// A limit of the key's policy or of its group: 403 for money, 429 for tpm and
    /// concurrency; `param` names it.
    LimitReached(crate::store::Limit),
    ModelNotPriced(String),
    NotFound,
    ModelNotFound(String),
    TaskNotFound,
    /// A stored response the key cannot read (unknown, expired, deleted, another key's).
    ResponseNotFound(String),
    /// 400: `previous_response_id` names a response the key cannot read.
    PreviousResponseNotFound(String),
    /// A video task's content before it completed (its status is named).
    VideoNotReady(&'static str),
    KeyNotFound,
    MethodNotAllowed,
    /// 408: the request header did not arrive within the listener's deadline.
    HeaderTimeout,
    /// 408: the request body did not arrive whole within `limits.body_timeout_secs`.
    BodyTimeout,
    BodyTooLarge(usize),
    /// 431: the request header is larger than this many bytes.
    HeaderTooLarge(usize),
    /// 431: the request has more than this many header fields.
    TooManyHeaders(usize),
    RateLimited,
    NotImplemented,
    AdminUnauthorized,
    /// The store cannot be reached; the gateway refuses rather than relay unbilled.
    StoreUnavailable,
    /// 503: the listener holds as many client connections as it is allowed.
    TooManyConnections,
    /// A gateway fault: what the gateway was doing and the error beneath it, for the log
    /// ([`GatewayError::log_internal`]); the client sees only the sentence (spec 7.2).
    Internal(Cause),
    Upstream(UpstreamFailure),
}

/// A request that failed a check: 400, naming the parameter.
impl From<crate::protocol::Invalid> for GatewayError {
    fn from(i: crate::protocol::Invalid) -> GatewayError {
        GatewayError::BadRequest {
            param: i.param,
            message: i.message,
        }
    }
}

/// A refused reservation, as the client sees it.
impl From<crate::store::ReserveDenied> for GatewayError {
    fn from(d: crate::store::ReserveDenied) -> GatewayError {
        use crate::store::ReserveDenied;
        match d {
            ReserveDenied::NotFound => GatewayError::UnknownKey,
            ReserveDenied::Disabled => GatewayError::KeyDisabled,
            ReserveDenied::Expired => GatewayError::KeyExpired,
            ReserveDenied::QuotaExhausted => GatewayError::QuotaExhausted,
            // The request's id was released after a reserve whose answer was lost: a store
            // fault the client may retry, like the store being unreachable.
            ReserveDenied::Released => GatewayError::StoreUnavailable,
            ReserveDenied::Limit(l) => GatewayError::LimitReached(l),
            // Answered by asking again with the key read anew; seen here only when the
            // key's group kept changing under the request.
            ReserveDenied::Stale => GatewayError::StoreUnavailable,
        }
    }
}

/// A store failure as the client sees it ([`store_error`]): `?` converts it.
impl From<crate::store::StoreError> for GatewayError {
    fn from(e: crate::store::StoreError) -> GatewayError {
        store_error(&e)
    }
}

/// A store failure as the client sees it: 503 while the store is unreachable (it
/// reconnects by itself), 500 otherwise. The details go to the log only: the 503's here,
/// the 500's as its cause, when it is answered.
pub fn store_error(e: &crate::store::StoreError) -> GatewayError {
    use crate::store::StoreError;
    match e {
        StoreError::Unavailable(_) => {
            tracing::warn!(error = %chain(e), "store unavailable");
            GatewayError::StoreUnavailable
        }
        StoreError::Conflict(_) | StoreError::Internal(_) => {
            GatewayError::internal_from("calling the store", e.clone())
        }
    }
}

impl GatewayError {
    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> GatewayError {
        GatewayError::BadRequest {
            param: param.map(str::to_string),
            message: message.into(),
        }
    }

    /// A gateway fault while doing `what` ("reading the request body"), with no error
    /// beneath it.
    pub fn internal(what: impl Into<String>) -> GatewayError {
        GatewayError::Internal(Cause::new(what))
    }

    /// A gateway fault while doing `what`, caused by `source`; the log prints both.
    pub fn internal_from(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> GatewayError {
        GatewayError::Internal(Cause::new(what).because(source))
    }

    /// Why an internal error happened, as its log line says it: the context, then each
    /// error beneath it, `: `-separated. `None` for the other errors, whose message says
    /// why.
    pub fn cause_chain(&self) -> Option<String> {
        match self {
            GatewayError::Internal(cause) => Some(chain(cause)),
            _ => None,
        }
    }

    /// The one log line of an internal error, written where it becomes the client's
    /// answer (the cause never reaches the client, spec 7.2).
    pub fn log_internal(&self, request_id: &str) {
        if let Some(why) = self.cause_chain() {
            tracing::error!(request_id, error = %why, "internal error");
        }
    }

    pub fn status(&self) -> u16 {
        use GatewayError::*;
        match self {
            BadRequest { .. } | PreviousResponseNotFound(_) => 400,
            MissingKey | MalformedKey | UnknownKey | AdminUnauthorized => 401,
            KeyDisabled | KeyExpired | IpNotAllowed | ModelNotAllowed(_) | QuotaExhausted
            | ModelNotPriced(_) => 403,
            NotFound | ModelNotFound(_) | TaskNotFound | VideoNotReady(_) | KeyNotFound
            | ResponseNotFound(_) => 404,
            MethodNotAllowed => 405,
            HeaderTimeout | BodyTimeout => 408,
            BodyTooLarge(_) => 413,
            HeaderTooLarge(_) | TooManyHeaders(_) => 431,
            RateLimited => 429,
            LimitReached(l) if l.is_money() => 403,
            LimitReached(_) => 429,
            Internal(_) => 500,
            NotImplemented => 501,
            StoreUnavailable | TooManyConnections => 503,
            Upstream(f) => upstream_status(*f),
        }
    }

    /// Low-cardinality label: the envelope's `code` and the metrics label.
    pub fn code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            BadRequest { .. } => "invalid_request",
            MissingKey => "missing_api_key",
            MalformedKey | UnknownKey => "invalid_api_key",
            AdminUnauthorized => "invalid_admin_token",
            KeyDisabled => "key_disabled",
            KeyExpired => "key_expired",
            IpNotAllowed => "ip_not_allowed",
            ModelNotAllowed(_) => "model_not_allowed",
            QuotaExhausted => "insufficient_quota",
            LimitReached(l) if l.is_money() => "insufficient_quota",
            LimitReached(_) => "rate_limited",
            ModelNotPriced(_) => "model_not_priced",
            NotFound => "not_found",
            ModelNotFound(_) => "model_not_found",
            TaskNotFound => "task_not_found",
            ResponseNotFound(_) => "not_found",
            PreviousResponseNotFound(_) => "previous_response_not_found",
            VideoNotReady(_) => "video_not_ready",
            KeyNotFound => "key_not_found",
            MethodNotAllowed => "method_not_allowed",
            HeaderTimeout | BodyTimeout => "request_timeout",
            BodyTooLarge(_) => "request_too_large",
            HeaderTooLarge(_) | TooManyHeaders(_) => "request_header_too_large",
            RateLimited => "rate_limited",
            NotImplemented => "not_implemented",
            StoreUnavailable => "store_unavailable",
            TooManyConnections => "too_many_connections",
            Internal(_) => "internal_error",
            Upstream(UpstreamFailure::Connect) => "upstream_unreachable",
            Upstream(UpstreamFailure::Timeout) => "upstream_timeout",
            Upstream(UpstreamFailure::BadResponse) => "upstream_bad_response",
            Upstream(UpstreamFailure::Broken) => "upstream_broken",
            Upstream(UpstreamFailure::Status(_)) => "upstream_error",
            Upstream(UpstreamFailure::ContentFilter) => "content_filter",
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            GatewayError::BadRequest { param, .. } => param.as_deref(),
            GatewayError::ModelNotAllowed(_)
            | GatewayError::ModelNotPriced(_)
            | GatewayError::ModelNotFound(_) => Some("model"),
            GatewayError::LimitReached(l) => Some(l.param()),
            GatewayError::PreviousResponseNotFound(_) => Some("previous_response_id"),
            GatewayError::Upstream(UpstreamFailure::ContentFilter) => Some("prompt"),
            _ => None,
        }
    }

    pub fn is_upstream(&self) -> bool {
        matches!(self, GatewayError::Upstream(_))
    }

    /// The stable sentence shown to the client (without the request id suffix).
    pub fn message(&self) -> String {
        use GatewayError::*;
        match self {
            BadRequest { message, .. } => message.clone(),
            MissingKey => "No API key provided. Send it as `Authorization: Bearer sk-...`.".into(),
            MalformedKey => "The API key is malformed.".into(),
            UnknownKey => "The API key is not valid.".into(),
            AdminUnauthorized => "A valid admin token is required.".into(),
            KeyDisabled => "The API key is disabled.".into(),
            KeyExpired => "The API key has expired.".into(),
            IpNotAllowed => "Requests from this IP address are not allowed for this key.".into(),
            ModelNotAllowed(m) => format!("The model `{m}` is not allowed for this key."),
            QuotaExhausted => "The key's quota is exhausted.".into(),
            LimitReached(l) => limit_message(*l),
            ModelNotPriced(m) => {
                format!("The model `{m}` has no price configured and cannot be billed.")
            }
            NotFound => "Unknown path.".into(),
            ModelNotFound(m) => format!("The model `{m}` does not exist or is not served."),
            TaskNotFound => "Task not found.".into(),
            ResponseNotFound(id) => format!("Response with id '{id}' not found."),
            PreviousResponseNotFound(id) => {
                format!("Previous response with id '{id}' not found.")
            }
            VideoNotReady(status) => {
                format!("The video is not available: the task is {status}.")
            }
            KeyNotFound => "API key not found.".into(),
            MethodNotAllowed => "Method not allowed on this path.".into(),
            HeaderTimeout => "The request header did not arrive in time.".into(),
            BodyTimeout => "The request body did not arrive in time.".into(),
            BodyTooLarge(limit) => {
                format!("Request body is larger than the limit of {limit} bytes.")
            }
            HeaderTooLarge(limit) => {
                format!("The request header is larger than the limit of {limit} bytes.")
            }
            TooManyHeaders(limit) => {
                format!("The request has more than {limit} header fields.")
            }
            RateLimited => {
                "Rate limit reached for this key; retry with exponential backoff.".into()
            }
            NotImplemented => "This endpoint is not implemented.".into(),
            StoreUnavailable => "The gateway's store is unavailable; retry later.".into(),
            TooManyConnections => {
                "The gateway holds as many connections as it allows; retry with backoff.".into()
            }
            Internal(_) => "The gateway failed to process the request.".into(),
            Upstream(f) => upstream_message(*f).into(),
        }
    }

    pub fn full_message(&self, request_id: &str) -> String {
        format!("{} (request id: {request_id})", self.message())
    }

    /// The error body in the client's shape.
    pub fn body(&self, shape: ErrorShape, request_id: &str) -> Vec<u8> {
        let message = self.full_message(request_id);
        let etype = if self.is_upstream() {
            "upstream_error"
        } else {
            "gateway_error"
        };
        let status = self.status();
        let v = match shape {
            ErrorShape::Default => json!({
                "error": {"message": message, "type": etype, "param": self.param(), "code": self.code()}
            }),
            ErrorShape::Messages => json!({
                "type": "error",
                "error": {"type": messages_type(status), "message": message}
            }),
            ErrorShape::Gemini => json!({
                "error": {"code": status, "message": message, "status": gemini_status(status), "type": etype}
            }),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

fn limit_message(l: crate::store::Limit) -> String {
    use crate::store::{LimitKind, Scope};
    let whose = match l.scope {
        Scope::Key => "key",
        Scope::Group => "key's group",
    };
    match l.kind {
        LimitKind::Quota => format!("The {whose} quota is exhausted."),
        LimitKind::Budget(p) => format!(
            "The {whose} {} budget is spent; it is fresh at the start of the next {} in its time zone.",
            match p {
                crate::store::PeriodKind::Day => "daily",
                crate::store::PeriodKind::Week => "weekly",
                crate::store::PeriodKind::Month => "monthly",
            },
            p.as_str()
        ),
        LimitKind::Tpm => format!(
            "The {whose} tokens-per-minute limit is reached; retry with exponential backoff."
        ),
        LimitKind::Concurrent => format!(
            "The {whose} limit of requests in flight is reached; retry when one has finished."
        ),
        LimitKind::Group => "The key's group does not exist or is disabled.".into(),
    }
}

fn upstream_status(f: UpstreamFailure) -> u16 {
    match f {
        // Client errors the caller can fix keep their status (spec 7).
        UpstreamFailure::Status(s @ (400 | 404 | 409 | 413 | 422 | 429)) => s,
        UpstreamFailure::ContentFilter => 400,
        // 401/403/407 concern the channel's own credentials, which the caller cannot
        // fix; every other failure is the spec's 500 "gateway or upstream failure".
        UpstreamFailure::Status(_)
        | UpstreamFailure::Connect
        | UpstreamFailure::Timeout
        | UpstreamFailure::BadResponse
        | UpstreamFailure::Broken => 500,
    }
}

fn upstream_message(f: UpstreamFailure) -> &'static str {
    match f {
        UpstreamFailure::Connect => "The upstream provider could not be reached.",
        UpstreamFailure::Timeout => "The upstream provider did not respond in time.",
        UpstreamFailure::BadResponse => "The upstream provider returned an invalid response.",
        UpstreamFailure::Broken => {
            "The upstream provider closed the connection before the response was complete."
        }
        UpstreamFailure::Status(400 | 422) => {
            "The upstream provider rejected the request as invalid."
        }
        UpstreamFailure::Status(404) => {
            "The upstream provider could not find the requested resource."
        }
        UpstreamFailure::Status(409) => "The upstream provider reported a conflict.",
        UpstreamFailure::Status(413) => "The request is too large for the upstream provider.",
        UpstreamFailure::Status(429) => {
            "The upstream provider is rate limiting requests; retry with backoff."
        }
        UpstreamFailure::Status(401 | 403 | 407) => {
            "The upstream provider refused the gateway's credentials."
        }
        UpstreamFailure::Status(_) => "The upstream provider failed to process the request.",
        UpstreamFailure::ContentFilter => {
            "The upstream provider's content filter refused the prompt."
        }
    }
}

fn messages_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 408 | 431 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

fn gemini_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 431 => "INVALID_ARGUMENT",
        408 => "DEADLINE_EXCEEDED",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        501 | 405 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn default_envelope() {
        let e = GatewayError::bad_request(Some("messages"), "messages is required");
        let v: Value = serde_json::from_slice(&e.body(ErrorShape::Default, "abc")).unwrap();
        assert_eq!(
            v["error"]["message"],
            "messages is required (request id: abc)"
        );
        assert_eq!(v["error"]["type"], "gateway_error");
        assert_eq!(v["error"]["param"], "messages");
        assert_eq!(v["error"]["code"], "invalid_request");
        assert_eq!(e.status(), 400);
    }

    #[test]
    fn messages_envelope() {
        let e = GatewayError::QuotaExhausted;
        let v: Value = serde_json::from_slice(&e.body(ErrorShape::Messages, "r1")).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "permission_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("(request id: r1)"));
    }

    #[test]
    fn upstream_statuses() {
        let s = |c| GatewayError::Upstream(UpstreamFailure::Status(c)).status();
        assert_eq!(s(429), 429);
        assert_eq!(s(400), 400);
        assert_eq!(s(401), 500);
        assert_eq!(s(503), 500);
        let e = GatewayError::Upstream(UpstreamFailure::Connect);
        let v: Value = serde_json::from_slice(&e.body(ErrorShape::Default, "x")).unwrap();
        assert_eq!(v["error"]["type"], "upstream_error");
    }

    fn disk_error() -> std::io::Error {
        std::io::Error::other("disk on fire")
    }

    #[test]
    fn an_internal_cause_reaches_the_log_not_the_client() {
        let e = GatewayError::internal_from("reading the request body", disk_error());
        assert_eq!(e.status(), 500);
        assert_eq!(e.code(), "internal_error");
        for shape in [
            ErrorShape::Default,
            ErrorShape::Messages,
            ErrorShape::Gemini,
        ] {
            let body = String::from_utf8(e.body(shape, "r1")).unwrap();
            // The same envelope as an internal error with no cause at all.
            assert_eq!(
                body.as_bytes(),
                GatewayError::internal("x").body(shape, "r1"),
                "{shape:?}"
            );
            assert!(!body.contains("disk"), "{body}");
            assert!(!body.contains("reading"), "{body}");
        }
        let v: Value = serde_json::from_slice(&e.body(ErrorShape::Default, "r1")).unwrap();
        assert_eq!(
            v["error"]["message"],
            "The gateway failed to process the request. (request id: r1)"
        );
        assert_eq!(
            e.cause_chain().as_deref(),
            Some("reading the request body: disk on fire")
        );
        assert_eq!(
            GatewayError::internal("reading the request body").cause_chain(),
            Some("reading the request body".to_string())
        );
        assert_eq!(GatewayError::QuotaExhausted.cause_chain(), None);
    }

    #[test]
    fn internal_errors_compare_by_what_they_say() {
        let a = GatewayError::internal_from("settling", disk_error());
        assert_eq!(a, a.clone());
        assert_eq!(a, GatewayError::internal_from("settling", disk_error()));
        assert_ne!(a, GatewayError::internal("settling"));
        assert_ne!(a, GatewayError::internal_from("reserving", disk_error()));
    }

    #[test]
    fn a_store_fault_is_an_internal_error_caused_by_it() {
        let store = crate::store::StoreError::internal_from("bad lease x", disk_error());
        let e = store_error(&store);
        assert_eq!(e.status(), 500);
        assert_eq!(
            e.cause_chain().as_deref(),
            Some("calling the store: store error: bad lease x: disk on fire")
        );
        let down = store_error(&crate::store::StoreError::unavailable("refused"));
        assert_eq!((down.status(), down.cause_chain()), (503, None));
    }

    /// What the log receives while `f` runs on this thread.
    fn logged(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_log_line_of_a_500_says_why_once() {
        let e = GatewayError::internal_from("translating the answer", disk_error());
        let line = logged(|| e.log_internal("req-7"));
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("req-7"), "{line}");
        assert!(
            line.contains("translating the answer: disk on fire"),
            "{line}"
        );
        let other = logged(|| GatewayError::QuotaExhausted.log_internal("req-8"));
        assert_eq!(other, "");
    }
}

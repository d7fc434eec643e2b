//! Anthropic's side: the Usage & Cost Admin API's messages usage report.
//!
//! Reference: Claude API reference, "Admin API" → "Usage Report" → "Get Messages Usage
//! Report" (`GET /v1/organizations/usage_report/messages`, the admin key in
//! `x-api-key`, `anthropic-version: 2023-06-01`). Its kinds are apart already:
//! `uncached_input_tokens`, `cache_read_input_tokens`, the cache writes by lifetime in
//! `cache_creation`, `output_tokens` (thinking included), and web searches in
//! `server_tool_use`.

use super::error::ReconcileError;
use super::fetch::{self, Header, Paged};
use super::{day_start_ms, Options, ProviderUsage, Source, Tokens};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The API version the report's shape is read in.
const VERSION: &str = "2023-06-01";

/// A page of the report. Reference: "Get Messages Usage Report" → Returns.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Page {
    pub data: Vec<Bucket>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    pub next_page: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Paged for Page {
    fn has_more(&self) -> bool {
        self.has_more
    }

    fn cursor(&self) -> Option<&str> {
        self.next_page.as_deref()
    }
}

/// One time bucket. Reference: Returns, `data[]` (RFC 3339 bounds).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Bucket {
    pub starting_at: String,
    pub ending_at: String,
    pub results: Vec<MessagesResult>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One group of a bucket. Reference: Returns, `data[].results[]`; `api_key_id`,
/// `workspace_id`, `service_tier`, `context_window` and members added later stay in
/// `rest`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MessagesResult {
    pub uncached_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation: Option<CacheCreation>,
    pub output_tokens: u64,
    #[serde(default)]
    pub server_tool_use: Option<ServerToolUse>,
    /// Set when grouped by model (`null` otherwise).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Reference: `results[].cache_creation`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct CacheCreation {
    #[serde(default)]
    pub ephemeral_5m_input_tokens: Option<u64>,
    #[serde(default)]
    pub ephemeral_1h_input_tokens: Option<u64>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Reference: `results[].server_tool_use`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ServerToolUse {
    #[serde(default)]
    pub web_search_requests: Option<u64>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl MessagesResult {
    /// The counts by kind; a member the report leaves out or sets to `null` is none.
    pub fn tokens(&self) -> Tokens {
        let written = self.cache_creation.as_ref();
        Tokens {
            input: self.uncached_input_tokens,
            cached_input: self.cache_read_input_tokens.unwrap_or(0),
            cache_write: written
                .and_then(|c| c.ephemeral_5m_input_tokens)
                .unwrap_or(0),
            cache_write_1h: written
                .and_then(|c| c.ephemeral_1h_input_tokens)
                .unwrap_or(0),
            output: self.output_tokens,
            web_search: self
                .server_tool_use
                .as_ref()
                .and_then(|s| s.web_search_requests)
                .unwrap_or(0),
            ..Tokens::default()
        }
    }
}

/// The report's name for a result without a model (the report was not grouped by it).
pub const NO_MODEL: &str = "(no model)";

/// Every result, by UTC day of its bucket's start.
pub fn usage(pages: &[Page]) -> Result<Vec<ProviderUsage>, ReconcileError> {
    let mut out = Vec::new();
    for p in pages {
        for b in &p.data {
            let day = b
                .starting_at
                .parse::<jiff::Timestamp>()
                .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).date())
                .map_err(|e| ReconcileError::Argument {
                    flag: "--file",
                    message: format!("bucket starting_at `{}`: {e}", b.starting_at),
                })?;
            for r in &b.results {
                out.push(ProviderUsage {
                    day,
                    model: r.model.clone().unwrap_or_else(|| NO_MODEL.into()),
                    tokens: r.tokens(),
                    requests: None,
                });
            }
        }
    }
    Ok(out)
}

fn rfc3339(ms: i64) -> Result<String, ReconcileError> {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .map_err(|e| ReconcileError::Argument {
            flag: "--to",
            message: e.to_string(),
        })
}

/// The URL of one page of the report for the run's days.
pub fn url(opts: &Options, base: &str, page: Option<&str>) -> Result<url::Url, ReconcileError> {
    let start = day_start_ms(opts.range.from)?;
    let end = day_start_ms(opts.range.to)? + 86_400_000;
    let mut u = url::Url::parse(&format!(
        "{}/v1/organizations/usage_report/messages",
        base.trim_end_matches('/')
    ))
    .map_err(|e| ReconcileError::Argument {
        flag: "--base-url",
        message: format!("not a URL: {e}"),
    })?;
    {
        let mut q = u.query_pairs_mut();
        q.append_pair("starting_at", &rfc3339(start)?)
            .append_pair("ending_at", &rfc3339(end)?)
            .append_pair("bucket_width", "1d")
            .append_pair("group_by[]", "model")
            // The most daily buckets a page holds (reference: `limit`).
            .append_pair("limit", "31");
        for k in &opts.filter.api_key_ids {
            q.append_pair("api_key_ids[]", k);
        }
        for w in &opts.filter.workspaces {
            q.append_pair("workspace_ids[]", w);
        }
        if let Some(p) = page {
            q.append_pair("page", p);
        }
    }
    Ok(u)
}

/// Every page, from the API or the saved file.
pub async fn pages(opts: &Options) -> Result<Vec<Page>, ReconcileError> {
    if !opts.filter.projects.is_empty() {
        return Err(ReconcileError::Argument {
            flag: "--project",
            message: "is OpenAI's; Anthropic's report narrows by --workspace".into(),
        });
    }
    match &opts.source {
        Source::File(path) => fetch::read_pages(path),
        Source::Api { base_url, key } => {
            let headers = [
                Header {
                    name: "x-api-key",
                    value: key.expose().to_string(),
                },
                Header {
                    name: "anthropic-version",
                    value: VERSION.into(),
                },
            ];
            fetch::all_pages(|page| url(opts, base_url, page), &headers, key).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::{Provider, Range, ReportFilter};

    /// The reference's example answer, over two pages.
    const PAGES: &str = r#"[
      {"data": [{"starting_at": "2025-08-01T00:00:00Z", "ending_at": "2025-08-02T00:00:00Z",
        "results": [{"uncached_input_tokens": 1500, "cache_read_input_tokens": 200,
          "cache_creation": {"ephemeral_1h_input_tokens": 1000, "ephemeral_5m_input_tokens": 500},
          "output_tokens": 500, "server_tool_use": {"web_search_requests": 10},
          "api_key_id": "apikey_01Rj2N8SVvo6BePZj99NhmiT", "workspace_id": null,
          "model": "claude-sonnet-4-20250514", "service_tier": "standard",
          "context_window": "0-200k"}]}],
       "has_more": true, "next_page": "page_MjAyNS0wNS0xNFQwMDowMDowMFo="},
      {"data": [{"starting_at": "2025-08-02T00:00:00Z", "ending_at": "2025-08-03T00:00:00Z",
        "results": [{"uncached_input_tokens": 7, "output_tokens": 3, "model": null,
          "cache_creation": null, "server_tool_use": null}]}],
       "has_more": false, "next_page": null}
    ]"#;

    #[test]
    fn parses_pages_into_days_and_kinds() {
        let pages: Vec<Page> = fetch::parse_json(PAGES.as_bytes(), "fixture").unwrap();
        assert_eq!(
            pages[0].next_page(),
            Some("page_MjAyNS0wNS0xNFQwMDowMDowMFo=")
        );
        assert_eq!(pages[1].next_page(), None);
        let r = &pages[0].data[0].results[0];
        assert_eq!(r.rest["context_window"], "0-200k");
        assert_eq!(r.rest["workspace_id"], Value::Null);
        let u = usage(&pages).unwrap();
        assert_eq!(u[0].day.to_string(), "2025-08-01");
        assert_eq!(u[0].model, "claude-sonnet-4-20250514");
        assert_eq!(u[0].requests, None);
        assert_eq!(
            u[0].tokens,
            Tokens {
                input: 1500,
                cached_input: 200,
                cache_write: 500,
                cache_write_1h: 1000,
                output: 500,
                web_search: 10,
                ..Tokens::default()
            }
        );
        assert_eq!(
            (u[1].day.to_string(), u[1].model.as_str()),
            ("2025-08-02".into(), NO_MODEL)
        );
    }

    #[test]
    fn members_the_report_leaves_out_count_as_none() {
        let r: MessagesResult =
            serde_json::from_str(r#"{"uncached_input_tokens": 4, "output_tokens": 2}"#).unwrap();
        let t = r.tokens();
        assert_eq!(
            (t.input, t.output, t.cache_write_1h, t.web_search),
            (4, 2, 0, 0)
        );
    }

    #[test]
    fn an_openai_page_is_refused_with_its_path() {
        let e = fetch::parse_json::<Vec<Page>>(
            br#"[{"object": "page", "data": [{"object": "bucket", "start_time": 1, "end_time": 2, "results": []}]}]"#,
            "report.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("at `[0].data[0]"), "{e}");
    }

    #[test]
    fn the_url_asks_for_daily_buckets_by_model_over_whole_days() {
        let o = Options {
            provider: Provider::Anthropic,
            range: Range::parse("2025-08-01", "2025-08-02").unwrap(),
            channels: vec![],
            source: Source::File("x".into()),
            filter: ReportFilter {
                api_key_ids: vec![],
                projects: vec![],
                workspaces: vec!["wrkspc_1".into()],
            },
            aliases: Default::default(),
            max_diff: 0,
        };
        let u = url(&o, "https://api.anthropic.com", Some("page_x")).unwrap();
        assert_eq!(
            u.as_str(),
            "https://api.anthropic.com/v1/organizations/usage_report/messages?\
             starting_at=2025-08-01T00%3A00%3A00Z&ending_at=2025-08-03T00%3A00%3A00Z\
             &bucket_width=1d&group_by%5B%5D=model&limit=31&workspace_ids%5B%5D=wrkspc_1\
             &page=page_x"
        );
    }
}

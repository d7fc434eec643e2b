//! OpenAI's side: the organization Usage API's completions report.
//!
//! Reference: OpenAI API reference, "Usage" → "Completions"
//! (`GET /v1/organization/usage/completions`, an admin key as the bearer token) and its
//! "Completions usage object". Its `input_tokens` counts every prompt token, cached ones
//! included; `input_cached_tokens`, `input_audio_tokens` and `output_audio_tokens` are
//! shares of `input_tokens` and `output_tokens` (the reference's later revisions say so
//! of audio and image tokens too; earlier ones called both counts "text").

use super::error::ReconcileError;
use super::fetch::{self, Header, Paged};
use super::{day_start_ms, Options, ProviderUsage, Source, Tokens};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A page of the report. Reference: "Completions" → Returns (`object: "page"`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Page {
    pub object: String,
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

/// One time bucket of a page. Reference: "Completions" → Returns, `data[]`
/// (`object: "bucket"`, unix seconds).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Bucket {
    pub start_time: i64,
    pub end_time: i64,
    pub results: Vec<CompletionsResult>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One group of a bucket. Reference: "Completions usage object"
/// (`object: "organization.usage.completions.result"`); `project_id`, `user_id`,
/// `api_key_id`, `batch` and members added later stay in `rest`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CompletionsResult {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub input_cached_tokens: Option<u64>,
    #[serde(default)]
    pub input_audio_tokens: Option<u64>,
    #[serde(default)]
    pub output_audio_tokens: Option<u64>,
    pub num_model_requests: u64,
    /// Set when grouped by model (`null` otherwise).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl CompletionsResult {
    /// The counts in disjoint kinds, each share within its total.
    pub fn tokens(&self) -> Tokens {
        let cached = self.input_cached_tokens.unwrap_or(0).min(self.input_tokens);
        let audio_in = self
            .input_audio_tokens
            .unwrap_or(0)
            .min(self.input_tokens - cached);
        let audio_out = self
            .output_audio_tokens
            .unwrap_or(0)
            .min(self.output_tokens);
        Tokens {
            input: self.input_tokens - cached - audio_in,
            cached_input: cached,
            audio_input: audio_in,
            output: self.output_tokens - audio_out,
            audio_output: audio_out,
            ..Tokens::default()
        }
    }
}

/// The report's name for a result without a model (the report was not grouped by it).
pub const NO_MODEL: &str = "(no model)";

/// Every result, by UTC day of its bucket.
pub fn usage(pages: &[Page]) -> Result<Vec<ProviderUsage>, ReconcileError> {
    let mut out = Vec::new();
    for (i, p) in pages.iter().enumerate() {
        if p.object != "page" {
            return Err(ReconcileError::Argument {
                flag: "--file",
                message: format!(
                    "page {i} is a `{}`, not an OpenAI usage page (`page`)",
                    p.object
                ),
            });
        }
        for b in &p.data {
            let day = jiff::Timestamp::from_second(b.start_time)
                .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).date())
                .map_err(|e| ReconcileError::Argument {
                    flag: "--file",
                    message: format!("bucket start_time {}: {e}", b.start_time),
                })?;
            for r in &b.results {
                out.push(ProviderUsage {
                    day,
                    model: r.model.clone().unwrap_or_else(|| NO_MODEL.into()),
                    tokens: r.tokens(),
                    requests: Some(r.num_model_requests),
                });
            }
        }
    }
    Ok(out)
}

/// The URL of one page of the report for the run's days.
pub fn url(opts: &Options, base: &str, page: Option<&str>) -> Result<url::Url, ReconcileError> {
    let start = day_start_ms(opts.range.from)? / 1000;
    let end = day_start_ms(opts.range.to)? / 1000 + 86_400;
    let mut u = url::Url::parse(&format!(
        "{}/v1/organization/usage/completions",
        base.trim_end_matches('/')
    ))
    .map_err(|e| ReconcileError::Argument {
        flag: "--base-url",
        message: format!("not a URL: {e}"),
    })?;
    {
        let mut q = u.query_pairs_mut();
        q.append_pair("start_time", &start.to_string())
            .append_pair("end_time", &end.to_string())
            .append_pair("bucket_width", "1d")
            .append_pair("group_by", "model")
            // The most daily buckets a page holds (reference: `limit`).
            .append_pair("limit", "31");
        for k in &opts.filter.api_key_ids {
            q.append_pair("api_key_ids", k);
        }
        for p in &opts.filter.projects {
            q.append_pair("project_ids", p);
        }
        if let Some(p) = page {
            q.append_pair("page", p);
        }
    }
    Ok(u)
}

/// Every page, from the API or the saved file.
pub async fn pages(opts: &Options) -> Result<Vec<Page>, ReconcileError> {
    if !opts.filter.workspaces.is_empty() {
        return Err(ReconcileError::Argument {
            flag: "--workspace",
            message: "is Anthropic's; OpenAI's report narrows by --project".into(),
        });
    }
    match &opts.source {
        Source::File(path) => fetch::read_pages(path),
        Source::Api { base_url, key } => {
            let headers = [Header {
                name: "authorization",
                value: format!("Bearer {}", key.expose()),
            }];
            fetch::all_pages(|page| url(opts, base_url, page), &headers, key).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::{AdminKey, Provider, Range, ReportFilter};

    /// Two pages as the reference's example shapes them: daily buckets grouped by model,
    /// the first page pointing to the second.
    const PAGES: &str = r#"[
      {"object": "page", "data": [
        {"object": "bucket", "start_time": 1754006400, "end_time": 1754092800, "results": [
          {"object": "organization.usage.completions.result", "input_tokens": 1000,
           "output_tokens": 500, "input_cached_tokens": 800, "input_audio_tokens": 0,
           "output_audio_tokens": 0, "num_model_requests": 5, "project_id": null,
           "user_id": null, "api_key_id": null, "model": "gpt-4o-mini-2024-07-18",
           "batch": null}]}],
       "has_more": true, "next_page": "page_AAAAAGdGxdEiJdKOAAAAAGcqsYA="},
      {"object": "page", "data": [
        {"object": "bucket", "start_time": 1754092800, "end_time": 1754179200, "results": [
          {"object": "organization.usage.completions.result", "input_tokens": 300,
           "output_tokens": 40, "input_cached_tokens": null, "input_audio_tokens": 120,
           "output_audio_tokens": 30, "num_model_requests": 2,
           "model": "gpt-4o-audio-preview-2024-12-17", "service_tier": "default"}]},
        {"object": "bucket", "start_time": 1754179200, "end_time": 1754265600, "results": []}],
       "has_more": false, "next_page": null}
    ]"#;

    fn opts() -> Options {
        Options {
            provider: Provider::OpenAi,
            range: Range::parse("2025-08-01", "2025-08-03").unwrap(),
            channels: vec![],
            source: Source::Api {
                base_url: "https://api.openai.com/".into(),
                key: AdminKey::new("k".into()),
            },
            filter: ReportFilter {
                api_key_ids: vec!["key_1".into()],
                projects: vec!["proj_a".into()],
                workspaces: vec![],
            },
            aliases: Default::default(),
            max_diff: 10_000,
        }
    }

    #[test]
    fn parses_pages_into_days_and_disjoint_kinds() {
        let pages: Vec<Page> = fetch::parse_json(PAGES.as_bytes(), "fixture").unwrap();
        assert_eq!(
            pages[0].next_page(),
            Some("page_AAAAAGdGxdEiJdKOAAAAAGcqsYA=")
        );
        assert_eq!(pages[1].next_page(), None);
        assert_eq!(pages[1].data[0].results[0].rest["service_tier"], "default");
        let u = usage(&pages).unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].day.to_string(), "2025-08-01");
        assert_eq!(u[0].model, "gpt-4o-mini-2024-07-18");
        assert_eq!(u[0].requests, Some(5));
        assert_eq!(
            u[0].tokens,
            Tokens {
                input: 200,
                cached_input: 800,
                output: 500,
                ..Tokens::default()
            }
        );
        assert_eq!(u[1].day.to_string(), "2025-08-02");
        assert_eq!(
            u[1].tokens,
            Tokens {
                input: 180,
                audio_input: 120,
                output: 10,
                audio_output: 30,
                ..Tokens::default()
            }
        );
    }

    #[test]
    fn shares_larger_than_their_total_are_clamped() {
        let r: CompletionsResult = serde_json::from_str(
            r#"{"input_tokens": 10, "output_tokens": 1, "input_cached_tokens": 8,
                "input_audio_tokens": 5, "output_audio_tokens": 3, "num_model_requests": 1}"#,
        )
        .unwrap();
        let t = r.tokens();
        assert_eq!((t.input, t.cached_input, t.audio_input), (0, 8, 2));
        assert_eq!((t.output, t.audio_output), (0, 1));
        assert_eq!(usage(&[]).unwrap(), vec![]);
    }

    #[test]
    fn an_anthropic_page_is_refused_with_its_path() {
        let e = fetch::parse_json::<Page>(
            br#"{"data": [{"starting_at": "2025-08-01T00:00:00Z", "results": []}], "has_more": false}"#,
            "report.json",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("report.json is not a usage report page"),
            "{e}"
        );
    }

    #[test]
    fn the_url_asks_for_daily_buckets_by_model_over_whole_days() {
        let o = opts();
        let u = url(&o, "https://api.openai.com/", None).unwrap();
        assert_eq!(
            u.as_str(),
            "https://api.openai.com/v1/organization/usage/completions?start_time=1754006400\
             &end_time=1754265600&bucket_width=1d&group_by=model&limit=31\
             &api_key_ids=key_1&project_ids=proj_a"
        );
        let next = url(&o, "https://api.openai.com", Some("a+b=")).unwrap();
        assert!(next.as_str().ends_with("&page=a%2Bb%3D"), "{next}");
    }
}

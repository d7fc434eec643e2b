//! Query parameters of the admin API's read endpoints. A parameter the endpoint does not
//! know is refused with its name (a misspelt filter would otherwise silently match
//! everything), and every refusal says what the parameter accepts.

use crate::errors::GatewayError;
use crate::store::usage_query::UsageFilter;
use chrono::DateTime;

/// An admin answer: a status and a JSON body.
pub type Answer = Result<(u16, serde_json::Value), GatewayError>;

/// The filters `GET /admin/usage` and `GET /admin/spend` share.
pub const FILTERS: [&str; 6] = ["key", "group", "model", "status", "from", "to"];

pub struct Params(Vec<(String, String)>);

fn bad(param: &str, msg: impl Into<String>) -> GatewayError {
    GatewayError::bad_request(Some(param), msg)
}

impl Params {
    /// Parses the query, refusing names outside `known`. Empty values count as absent.
    pub fn parse(query: Option<&str>, known: &[&str]) -> Result<Params, GatewayError> {
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.trim().to_string()))
                .collect();
        if let Some((k, _)) = pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(bad(
                k,
                format!(
                    "Unknown query parameter `{k}`; this endpoint takes: {}.",
                    known.join(", ")
                ),
            ));
        }
        Ok(Params(pairs))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// A time as RFC 3339 (`2025-01-31T00:00:00Z`) or unix milliseconds.
    pub fn time_ms(&self, name: &str) -> Result<Option<i64>, GatewayError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        if let Ok(ms) = v.parse::<i64>() {
            return Ok(Some(ms));
        }
        DateTime::parse_from_rfc3339(v)
            .map(|t| Some(t.timestamp_millis()))
            .map_err(|e| {
                bad(
                    name,
                    format!("`{name}` must be an RFC 3339 time or unix milliseconds: {e}."),
                )
            })
    }

    /// An integer in `range`, or `default` when absent.
    pub fn int(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> Result<i64, GatewayError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    bad(
                        name,
                        format!(
                            "`{name}` must be a whole number from {} to {}.",
                            range.start(),
                            range.end()
                        ),
                    )
                }),
        }
    }

    /// `status`: one code (`429`), a class (`4xx`), `ok` (below 400) or `error` (400 and up).
    pub fn status(&self) -> Result<Option<(u16, u16)>, GatewayError> {
        let Some(v) = self.get("status") else {
            return Ok(None);
        };
        let range = match v.to_ascii_lowercase().as_str() {
            "ok" => Some((100, 399)),
            "error" => Some((400, 999)),
            s if s.len() == 3 && s.ends_with("xx") => s[..1]
                .parse::<u16>()
                .ok()
                .filter(|d| (1..=9).contains(d))
                .map(|d| (d * 100, d * 100 + 99)),
            s => s
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=999).contains(c))
                .map(|c| (c, c)),
        };
        range.map(Some).ok_or_else(|| {
            bad(
                "status",
                "`status` must be a code (`429`), a class (`4xx`), `ok` or `error`.",
            )
        })
    }

    /// The record filters shared by the usage list and the spend buckets.
    pub fn filter(&self) -> Result<UsageFilter, GatewayError> {
        let f = UsageFilter {
            key_id: self.get("key").map(str::to_string),
            group: self.get("group").map(str::to_string),
            model: self.get("model").map(str::to_string),
            status: self.status()?,
            from_ms: self.time_ms("from")?,
            to_ms: self.time_ms("to")?,
        };
        if let (Some(a), Some(b)) = (f.from_ms, f.to_ms) {
            if a >= b {
                return Err(bad("to", "`to` must be later than `from`."));
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(q: &str) -> Params {
        Params::parse(Some(q), &FILTERS).unwrap()
    }

    #[test]
    fn filters_parse_and_refusals_name_the_parameter() {
        let f = p("key=k1&model=gpt%2D4o&status=4xx&from=2025-01-01T00:00:00Z&to=1735700000000")
            .filter()
            .unwrap();
        assert_eq!(f.key_id.as_deref(), Some("k1"));
        assert_eq!(f.model.as_deref(), Some("gpt-4o"));
        assert_eq!(f.status, Some((400, 499)));
        assert_eq!(f.from_ms, Some(1_735_689_600_000));
        assert_eq!(f.to_ms, Some(1_735_700_000_000));
        assert_eq!(p("status=error").status().unwrap(), Some((400, 999)));
        assert_eq!(p("status=200").status().unwrap(), Some((200, 200)));
        assert_eq!(p("status=").status().unwrap(), None);
        for (q, param) in [
            ("status=teapot", "status"),
            ("status=0xx", "status"),
            ("from=yesterday", "from"),
            ("from=10&to=5", "to"),
        ] {
            assert_eq!(p(q).filter().unwrap_err().param(), Some(param), "{q}");
        }
        let e = Params::parse(Some("modle=x"), &FILTERS).err().unwrap();
        assert_eq!(e.param(), Some("modle"));
    }

    #[test]
    fn integers_stay_in_range() {
        let q = Params::parse(Some("limit=5000"), &["limit"]).unwrap();
        assert_eq!(
            q.int("limit", 1..=1000, 50).unwrap_err().param(),
            Some("limit")
        );
        let q = Params::parse(None, &["limit"]).unwrap();
        assert_eq!(q.int("limit", 1..=1000, 50).unwrap(), 50);
    }
}

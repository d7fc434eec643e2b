//! A route table: rows of (methods, path template, target), looked up in order. The
//! client listener's dispatch ([`super::ENDPOINTS`]) and the admin listener's
//! ([`crate::api::admin::ROUTES`]) are such tables, and the OpenAPI documents in
//! `openapi/` are checked against them (tests/integration/openapi.rs), so what is
//! served and what is documented cannot drift apart.
//!
//! Templates use OpenAPI's path syntax: `/v1/videos/{task_id}/content`. A `{name}` stands
//! for one non-empty path segment and may be followed by literal text in the same
//! segment (`/v1beta/models/{model}:generateContent`). A template has at most one
//! parameter: no served path needs two.

use http::Method;

/// The methods a table answers, named as OpenAPI names its operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    Get,
    Head,
    Post,
    Patch,
    Delete,
}

impl Verb {
    /// `None` for a method no table answers (it gets 405 on a served path).
    pub fn of(m: &Method) -> Option<Verb> {
        Some(match *m {
            Method::GET => Verb::Get,
            Method::HEAD => Verb::Head,
            Method::POST => Verb::Post,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => return None,
        })
    }

    /// The OpenAPI operation name (`get`, `post`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Head => "head",
            Verb::Post => "post",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// A GET that HEAD answers too, with the GET's header and no body.
pub const READ: &[Verb] = &[Verb::Get, Verb::Head];
pub const GET: &[Verb] = &[Verb::Get];
pub const POST: &[Verb] = &[Verb::Post];

/// What the path parameter may be, besides one non-empty segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Segment,
    /// No `:`: in the generate-content paths a `:` starts the action
    /// (`{model}:generateContent`), so a bare model name never has one.
    NoColon,
}

/// One row of a route table.
#[derive(Debug)]
pub struct Endpoint<T: 'static> {
    pub methods: &'static [Verb],
    pub path: &'static str,
    pub param: Param,
    pub target: T,
    /// The path has a `{parameter}` (known when the row is made, not per lookup).
    templated: bool,
    /// How long the path's literal start is (up to its `{`, or all of it): a path
    /// without that start is not this row's, found without splitting it.
    fixed: usize,
}

impl<T> Endpoint<T> {
    pub const fn new(methods: &'static [Verb], path: &'static str, target: T) -> Endpoint<T> {
        Endpoint {
            methods,
            path,
            param: Param::Segment,
            target,
            templated: has_parameter(path),
            fixed: literal_len(path),
        }
    }

    /// The row with what its path parameter may be.
    pub const fn with_param(mut self, param: Param) -> Endpoint<T> {
        self.param = param;
        self
    }

    /// The path parameter (`""` for a template without one), if `path` is this row's.
    pub fn matches<'p>(&self, path: &'p str) -> Option<&'p str> {
        if !self.templated {
            return (self.path == path).then_some("");
        }
        if !path
            .as_bytes()
            .starts_with(&self.path.as_bytes()[..self.fixed])
        {
            return None;
        }
        let mut param = "";
        let mut want = self.path.split('/');
        let mut have = path.split('/');
        loop {
            match (want.next(), have.next()) {
                (None, None) => return Some(param),
                (Some(w), Some(h)) => match w.split_once('{') {
                    None if w == h => {}
                    None => return None,
                    Some((before, rest)) => {
                        let after = rest.split_once('}').map_or("", |(_, a)| a);
                        let value = h.strip_prefix(before)?.strip_suffix(after)?;
                        let colon_ok = self.param != Param::NoColon || !value.contains(':');
                        if value.is_empty() || !colon_ok {
                            return None;
                        }
                        param = value;
                    }
                },
                _ => return None,
            }
        }
    }
}

/// Whether a template has a `{parameter}`.
const fn has_parameter(path: &str) -> bool {
    literal_len(path) < path.len()
}

/// The length of a template's start before its first `{` (all of it without one).
const fn literal_len(path: &str) -> usize {
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            return i;
        }
        i += 1;
    }
    b.len()
}

/// The outcome of looking a request up in a table.
#[derive(Debug)]
pub enum Lookup<'t, 'p, T: 'static> {
    /// The first row with this path and method, and the path parameter.
    Found(&'t Endpoint<T>, &'p str),
    /// Rows have this path, none this method: 405.
    WrongMethod,
    /// No row has this path: 404.
    NoPath,
}

/// Looks `path` up; a trailing slash is ignored (`/v1/images/generations/` is the same
/// endpoint, as spec 4.6 lists it).
pub fn find<'t, 'p, T>(
    table: &'t [Endpoint<T>],
    method: &Method,
    path: &'p str,
) -> Lookup<'t, 'p, T> {
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let verb = Verb::of(method);
    let mut path_seen = false;
    // A path a row names literally (`/v1/responses/compact`) is that row's alone: a
    // template matching it too (`/v1/responses/{response_id}`) is not tried.
    let mut literal_seen = false;
    for row in table {
        let templated = row.templated;
        if literal_seen && templated {
            continue;
        }
        if let Some(param) = row.matches(path) {
            if verb.is_some_and(|v| row.methods.contains(&v)) {
                return Lookup::Found(row, param);
            }
            path_seen = true;
            literal_seen |= !templated;
        }
    }
    if path_seen {
        Lookup::WrongMethod
    } else {
        Lookup::NoPath
    }
}

/// Every (method, path template) a table answers: what its OpenAPI document lists.
pub fn operations<T>(table: &[Endpoint<T>]) -> Vec<(Verb, &'static str)> {
    table
        .iter()
        .flat_map(|row| row.methods.iter().map(move |v| (*v, row.path)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &'static str) -> Endpoint<()> {
        Endpoint::new(READ, path, ())
    }

    #[test]
    fn templates_match_one_segment_per_parameter() {
        assert_eq!(row("/v1/models").matches("/v1/models"), Some(""));
        assert_eq!(row("/v1/models").matches("/v1/models/x"), None);
        let content = row("/v1/videos/{task_id}/content");
        assert_eq!(content.matches("/v1/videos/t1/content"), Some("t1"));
        // Paths without the literal start are refused before any split.
        assert_eq!(content.matches("/v1/video/t1/content"), None);
        assert_eq!(content.matches("/v1/videos"), None);
        assert_eq!(content.matches("/v2/videos/t1/content"), None);
        assert_eq!(literal_len("/v1/videos/{task_id}/content"), 11);
        assert_eq!(literal_len("/v1/models"), 10);
        assert_eq!(content.matches("/v1/videos//content"), None);
        assert_eq!(content.matches("/v1/videos/a/b/content"), None);
        let action = row("/v1beta/models/{model}:generateContent");
        assert_eq!(
            action.matches("/v1beta/models/g:generateContent"),
            Some("g")
        );
        assert_eq!(
            action.matches("/v1beta/models/a:b:generateContent"),
            Some("a:b")
        );
        assert_eq!(action.matches("/v1beta/models/:generateContent"), None);
        assert_eq!(
            action.matches("/v1beta/models/g:streamGenerateContent"),
            None
        );
        let bare = row("/v1beta/models/{model}").with_param(Param::NoColon);
        assert_eq!(bare.matches("/v1beta/models/g"), Some("g"));
        assert_eq!(bare.matches("/v1beta/models/g:x"), None);
    }

    #[test]
    fn the_first_row_with_path_and_method_wins_and_a_literal_path_shadows_templates() {
        let t = [
            Endpoint::new(POST, "/v1/r/compact", 1),
            Endpoint::new(GET, "/v1/r/{id}", 2),
        ];
        assert!(
            matches!(find(&t, &Method::POST, "/v1/r/compact"), Lookup::Found(r, "") if r.target == 1)
        );
        assert!(matches!(
            find(&t, &Method::GET, "/v1/r/compact"),
            Lookup::WrongMethod
        ));
        assert!(
            matches!(find(&t, &Method::GET, "/v1/r/resp_1"), Lookup::Found(r, "resp_1") if r.target == 2)
        );
        assert!(matches!(
            find(&t, &Method::PUT, "/v1/r/compact"),
            Lookup::WrongMethod
        ));
        assert!(matches!(find(&t, &Method::GET, "/v1/q"), Lookup::NoPath));
        assert_eq!(
            operations(&t),
            vec![(Verb::Post, "/v1/r/compact"), (Verb::Get, "/v1/r/{id}")]
        );
    }
}

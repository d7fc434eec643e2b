//! Golden fixtures for every protocol translation: each input under `tests/golden/` is
//! run through the public `protocol` API against every target protocol and compared
//! byte for byte with its recorded output, one expected file per (input, target).
//!
//! - `requests/<client>/<case>.json` → `<case>.to-<upstream>.json` (path, body, usage flag,
//!   or the 400 the request earns); Converse (Bedrock) is an upstream of every client
//! - `responses/<upstream>/<case>.json` → `<case>.to-<client>.json` (body and usage, or the
//!   translation error)
//! - `streams/<upstream>/<case>.sse` → `<case>.to-<client>.sse` and `.usage.json`, plus
//!   `<case>.to-gemini-array.json` for generate-content clients without `alt=sse`. Every
//!   stream is also fed whole, byte by byte and in pseudo-random pieces: the outputs must
//!   be identical, since a network read is never an event boundary.
//!
//! No answer may show an upstream model name; a panic fails its own pair only.
//!
//! `MG_BLESS=1 cargo test --test golden` rewrites every expected file (and removes those
//! whose input is gone) instead of comparing; review the diff before committing it.

use model_gateway::protocol::Protocol::{self, Chat, Gemini, Messages, Responses};
use model_gateway::protocol::{self, RequestOptions, ResponseContext, StreamContext};
use model_gateway::protocol::{StreamTranslator, Usage};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

const ALL: [Protocol; 4] = [Chat, Messages, Gemini, Responses];
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
/// The models named inside the upstream fixtures: a client must only ever see its own.
const UPSTREAM_MODELS: &str = "gpt-4o-2024-08-06 gpt-4.1-2025-04-14 gpt-4o-mini-2024-07-18 \
    deepseek-reasoner claude-sonnet-4-5-20250929 claude-opus-4-1-20250805 \
    claude-haiku-4-5-20251001 gemini-2.5-pro gemini-2.5-flash gemini-2.0-flash";

fn name(p: Protocol) -> &'static str {
    match p {
        Chat => "chat",
        Messages => "messages",
        Gemini => "gemini",
        Responses => "responses",
        Protocol::Converse => "converse",
    }
}

/// A native Responses API upstream serves Responses clients only (the gateway refuses
/// every other pairing before the call).
fn clients_of(upstream: Protocol) -> &'static [Protocol] {
    &ALL[if upstream == Responses { 3 } else { 0 }..]
}

/// Output bodies are recorded parsed so the expected files diff well; a body that is
/// not JSON is kept as a string (and stands out in review).
fn parsed(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).expect("a Value always serializes");
    s.push('\n');
    s.into_bytes()
}

fn usage_json(u: Usage) -> Value {
    json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "reasoning_tokens": u.reasoning_tokens})
}

/// Runs `f`, turning a panic into a failure so one broken pair does not hide the rest.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = (p.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| p.downcast_ref::<String>().cloned());
        format!("panicked: {}", msg.unwrap_or_default())
    })
}

/// A fixture: its protocol, bytes, case name and path.
struct Input(Protocol, Vec<u8>, String, PathBuf);

impl Input {
    /// The expected file for one target: `<case>.to-<target>.<ext>`.
    fn to(&self, target: &str, ext: &str) -> PathBuf {
        (self.3).with_file_name(format!("{}.to-{target}.{ext}", self.2))
    }
}

/// The expected files of one kind (`requests`, `responses`, `streams`): compared, or
/// written in bless mode; every failure collected, one panic at the end.
struct Golden {
    kind: &'static str,
    root: PathBuf,
    bless: bool,
    seen: BTreeSet<PathBuf>,
    failures: Vec<String>,
    written: usize,
}

impl Golden {
    fn new(kind: &'static str) -> Golden {
        Golden {
            kind,
            root: Path::new(ROOT).join(kind),
            bless: std::env::var("MG_BLESS").as_deref() == Ok("1"),
            seen: BTreeSet::new(),
            failures: Vec::new(),
            written: 0,
        }
    }

    /// Every `<root>/<protocol>/<case>.<ext>` that is not an expected file.
    fn inputs(&self, ext: &str) -> Vec<Input> {
        let mut found = Vec::new();
        for protocol in ALL {
            let dir = self.root.join(name(protocol));
            for entry in fs::read_dir(dir).into_iter().flatten() {
                let path = entry.expect("listing a fixture directory").path();
                let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
                let Some(case) = file.strip_suffix(&format!(".{ext}")) else {
                    continue;
                };
                if !case.contains(".to-") {
                    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
                    found.push(Input(protocol, bytes, case.to_string(), path));
                }
            }
        }
        found.sort_by(|a, b| a.3.cmp(&b.3));
        assert!(!found.is_empty(), "no inputs under {}", self.root.display());
        found
    }

    fn rel(&self, path: &Path) -> String {
        let rel = path.strip_prefix(ROOT).unwrap_or(path);
        rel.display().to_string()
    }

    fn fail(&mut self, path: &Path, why: impl std::fmt::Display) {
        self.failures.push(format!("{}: {why}", self.rel(path)));
    }

    /// `actual` is the output, or why there is none (the expected file is left alone).
    fn check(&mut self, path: PathBuf, actual: Result<Vec<u8>, String>) {
        self.seen.insert(path.clone());
        let actual = match actual {
            Ok(a) => a,
            Err(why) => return self.fail(&path, why),
        };
        let leaked = |m: &&str| actual.windows(m.len()).any(|w| w == m.as_bytes());
        let mut models = UPSTREAM_MODELS.split_whitespace();
        if let Some(m) = models.find(leaked).filter(|_| self.kind != "requests") {
            let why = format!("the upstream model name {m:?} reached the client");
            self.fail(&path, why);
        }
        match fs::read(&path) {
            _ if self.bless => {
                fs::write(&path, &actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                self.written += 1;
            }
            Err(_) => self.fail(&path, "missing expected file (bless with MG_BLESS=1)"),
            Ok(e) if e != actual => self.fail(&path, format!("mismatch\n{}", diff(&e, &actual))),
            Ok(_) => {}
        }
    }

    /// Orphans (expected files whose input is gone), then one panic listing every failure.
    fn finish(mut self) {
        let kind = self.kind;
        let subdirs = fs::read_dir(&self.root).into_iter().flatten().flatten();
        let files = subdirs.flat_map(|d| fs::read_dir(d.path()).into_iter().flatten().flatten());
        let orphans: Vec<PathBuf> = (files.map(|f| f.path()))
            .filter(|p| p.to_string_lossy().contains(".to-") && !self.seen.contains(p))
            .collect();
        for path in orphans {
            if self.bless {
                fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                println!("golden: removed orphan {}", self.rel(&path));
            } else {
                self.fail(&path, "orphan expected file: its input no longer exists");
            }
        }
        if self.bless {
            println!("golden {kind}: wrote {} expected files", self.written);
        }
        if !self.failures.is_empty() {
            let (n, all) = (self.failures.len(), self.failures.join("\n\n"));
            panic!("{n} golden failure(s) in {kind}:\n\n{all}\n");
        }
    }
}

/// The first differing lines, clipped around the first differing character.
fn diff(expected: &[u8], actual: &[u8]) -> String {
    let e = String::from_utf8_lossy(expected);
    let a = String::from_utf8_lossy(actual);
    let (el, al): (Vec<&str>, Vec<&str>) = (e.split('\n').collect(), a.split('\n').collect());
    let Some(first) = (0..el.len().max(al.len())).find(|&i| el.get(i) != al.get(i)) else {
        return "  (same text: the bytes differ in invalid UTF-8)".into();
    };
    let (fe, fa) = (el.get(first).unwrap_or(&""), al.get(first).unwrap_or(&""));
    let same = fe.chars().zip(fa.chars());
    let col = same.take_while(|(x, y)| x == y).count();
    let skip = col.saturating_sub(60);
    let clip = |l: &&str| l.chars().skip(skip).take(160).collect::<String>();
    let end = el.len().max(al.len());
    let n = (first..end)
        .take_while(|&i| el.get(i) != al.get(i))
        .take(5)
        .count();
    let mut out = format!("  @@ line {}, column {} @@\n", first + 1, col + 1);
    for (sign, lines) in [('-', &el), ('+', &al)] {
        for l in lines.iter().skip(first).take(n) {
            out += &format!("  {sign}{}{}\n", if skip > 0 { "…" } else { "" }, clip(l));
        }
    }
    out
}

#[test]
fn requests() {
    let mut g = Golden::new("requests");
    for input in g.inputs("json") {
        let &Input(client, ref bytes, ref case, _) = &input;
        let stream = match client {
            // Generate-content says "stream" in the URL, not in the body.
            Gemini => case.contains("stream"),
            _ => parsed(bytes)["stream"].as_bool().unwrap_or(false),
        };
        let opts = RequestOptions {
            upstream_model: "upstream-model",
            stream,
            default_max_tokens: 4096,
            chat_limit_field: "max_completion_tokens",
            compact: false,
        };
        // Native passthrough is the only way to a Responses upstream; every client
        // reaches Converse (Bedrock) through the pivot.
        let upstreams = ALL[..if client == Responses { 4 } else { 3 }]
            .iter()
            .chain([&Protocol::Converse]);
        for &upstream in upstreams {
            let out = guarded(|| {
                let v = protocol::parse_request(client, bytes)?;
                protocol::translate_request(client, upstream, v, &opts)
            });
            let doc = out.map(|r| match r {
                Ok(r) => json!({"path": r.path, "body": parsed(&r.body),
                    "client_wants_usage": r.client_wants_usage}),
                Err(i) => json!({"invalid": {"param": i.param, "message": i.message}}),
            });
            g.check(input.to(name(upstream), "json"), doc.map(|d| pretty(&d)));
        }
    }
    g.finish();
}

#[test]
fn responses() {
    let mut g = Golden::new("responses");
    let ctx = ResponseContext {
        client_model: "client-model",
        request_id: "req_golden",
        created: 1700000000,
        compact: false,
    };
    for input in g.inputs("json") {
        let &Input(upstream, ref bytes, _, _) = &input;
        for &client in clients_of(upstream) {
            let out = guarded(|| protocol::translate_response(upstream, client, bytes, &ctx));
            let doc = out.map(|r| match r {
                Ok((body, usage)) => json!({"body": parsed(&body), "usage": usage_json(usage)}),
                Err(e) => json!({"error": format!("{e:?}")}),
            });
            g.check(input.to(name(client), "json"), doc.map(|d| pretty(&d)));
        }
    }
    g.finish();
}

/// Piece sizes of 1 to 97 bytes from a fixed-seed xorshift64: reproducible, no dependency.
fn random_pieces(len: usize) -> Vec<usize> {
    let (mut x, mut sizes, mut total) = (0x9E37_79B9_7F4A_7C15_u64, Vec::new(), 0);
    while total < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sizes.push((1 + (x % 97) as usize).min(len - total));
        total += sizes[sizes.len() - 1];
    }
    sizes
}

fn feed(mut t: Box<dyn StreamTranslator>, bytes: &[u8], pieces: &[usize]) -> (Vec<u8>, Usage) {
    let (mut out, mut at) = (Vec::new(), 0);
    for &n in pieces {
        t.feed(&bytes[at..at + n], &mut out);
        at += n;
    }
    t.finish(None, &mut out);
    (out, t.usage())
}

#[test]
fn streams() {
    let mut g = Golden::new("streams");
    for input in g.inputs("sse") {
        let &Input(upstream, ref bytes, _, _) = &input;
        for &client in clients_of(upstream) {
            // Generate-content clients without `alt=sse` get a JSON array, written as it goes.
            let runs = [(true, name(client), "sse"), (false, "gemini-array", "json")];
            for (client_sse, target, ext) in &runs[..if client == Gemini { 2 } else { 1 }] {
                let ctx = StreamContext {
                    client_model: "client-model".into(),
                    request_id: "req_golden".into(),
                    created: 1700000000,
                    client_wants_usage: true,
                    client_sse: *client_sse,
                    charge: None,
                };
                let (path, usage_path) =
                    (input.to(target, ext), input.to(name(client), "usage.json"));
                let n = bytes.len();
                let splits = [vec![n], vec![1; n], random_pieces(n)];
                let outs = guarded(|| {
                    splits.map(|p| {
                        let t = protocol::stream_translator(upstream, client, ctx.clone());
                        feed(t, bytes, &p)
                    })
                });
                let [whole, ones, random] = match outs {
                    Ok(outs) => outs,
                    Err(panicked) => {
                        g.seen.insert(usage_path);
                        g.check(path, Err(panicked));
                        continue;
                    }
                };
                for (how, split) in [("1-byte", ones), ("random", random)] {
                    if split != whole {
                        let why = match split.0 == whole.0 {
                            true => format!("  usage {:?} instead of {:?}", split.1, whole.1),
                            false => diff(&whole.0, &split.0),
                        };
                        g.fail(&path, format!("{how} pieces change the result\n{why}"));
                    }
                }
                g.check(path, Ok(whole.0));
                if *client_sse {
                    g.check(usage_path, Ok(pretty(&usage_json(whole.1))));
                }
            }
        }
    }
    g.finish();
}

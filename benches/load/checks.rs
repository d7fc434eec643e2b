//! Self-checks of the harness's own parts, run by the smoke run (`cargo test
//! --all-targets` runs this bench without `--bench`; a bench built with `harness =
//! false` runs no `#[test]`s, so the checks live here). Each panics on a broken rule.

use super::http::{parse_head, BodyKind, Chunked, Parser, Part, SseSplitter};
use super::markdown;
use super::report::{self, Cpu, Meta, RedisPer, Section, TargetResult};
use super::scenarios::{hist, us, Closed, Idle, Open, Streams};
use super::sys::parse_status_kb;
use super::targets::Kind;
use super::upstream::{
    kind_of, messages_events, pieces_in, stream_events, Kind as Reply, LONG_PIECES, PIECE_MARK,
};

pub fn run() {
    let checks: &[(&str, fn())] = &[
        ("response head", response_head),
        ("request head", request_head),
        ("chunked body split anywhere", chunked_any_split),
        ("chunked errors", chunked_errors),
        ("keep-alive message boundary", message_boundary),
        ("sse splitter", sse_splitter),
        ("upstream reply choice", reply_choice),
        ("upstream stream events", stream_shape),
        ("upstream messages stream events", messages_stream_shape),
        ("1 MiB bodies", big_bodies),
        ("proc status", proc_status),
        ("proc thread stat", thread_stat),
        ("redis info", super::redis::self_check),
        ("histogram quantiles", quantiles),
        ("budget verdicts", budget_verdicts),
        ("report and chart", report_and_chart),
        ("https section", https_section),
    ];
    for (name, f) in checks {
        if std::panic::catch_unwind(f).is_err() {
            panic!("load bench self-check failed: {name}");
        }
    }
    println!("load bench self-checks: {} ok", checks.len());
}

fn response_head() {
    let raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 42\r\nx-request-id: r1\r\n\r\n{";
    let h = parse_head(raw).expect("parses").expect("complete");
    assert_eq!(h.status, 200);
    assert_eq!(h.body, BodyKind::Length(42));
    assert_eq!(h.len, raw.len() - 1);
    let sse =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        parse_head(sse).expect("parses").expect("complete").body,
        BodyKind::Chunked
    );
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n")
        .expect("ok")
        .is_none());
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n").is_err());
    assert!(parse_head(b"HTTP/1.1 abc OK\r\n\r\n").is_err());
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
}

fn request_head() {
    let raw =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Length: 7\r\n\r\n";
    let h = parse_head(raw).expect("parses").expect("complete");
    assert_eq!((h.status, h.path.as_str()), (0, "/v1/chat/completions"));
    assert_eq!(h.body, BodyKind::Length(7));
}

fn chunked_body() -> (Vec<u8>, Vec<u8>) {
    let events = stream_events(8);
    let mut wire = Vec::new();
    for e in &events {
        wire.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
    }
    // An extension and a trailer, which a proxy may pass on.
    wire.extend_from_slice(b"5;name=v\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\n");
    let mut data = events.concat().into_bytes();
    data.extend_from_slice(b"hello");
    (wire, data)
}

fn chunked_any_split() {
    let (wire, data) = chunked_body();
    for cut in 0..wire.len() {
        let mut c = Chunked::default();
        let mut got = Vec::new();
        let a = c
            .feed(&wire[..cut], &mut |d| got.extend_from_slice(d))
            .expect("valid");
        assert_eq!(a, cut, "consumes everything before the end");
        let b = c
            .feed(&wire[cut..], &mut |d| got.extend_from_slice(d))
            .expect("valid");
        assert_eq!(a + b, wire.len());
        assert!(c.done(), "ends at the terminating chunk (cut {cut})");
        assert_eq!(got, data, "same data whatever the split (cut {cut})");
    }
    // Bytes after the end belong to the next message.
    let mut more = wire.clone();
    more.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let mut c = Chunked::default();
    assert_eq!(c.feed(&more, &mut |_| {}).expect("valid"), wire.len());
}

fn chunked_errors() {
    for bad in [
        &b"zz\r\n"[..],
        b"\r\n",
        b"3\r\nabcd\r\n",
        b"3\rx",
        b"1234567890abcdef0\r\n",
    ] {
        let mut c = Chunked::default();
        assert!(
            c.feed(bad, &mut |_| {}).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

fn message_boundary() {
    let one = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    let mut two = one.to_vec();
    two.extend_from_slice(one);
    let mut p = Parser::default();
    let mut body = Vec::new();
    let mut heads = 0;
    let used = p
        .feed(&two, &mut |part| match part {
            Part::Head(h) => {
                heads += 1;
                assert_eq!(h.status, 200);
            }
            Part::Body(d) => body.extend_from_slice(d),
        })
        .expect("valid");
    assert!(p.done());
    assert_eq!(
        (used, heads, body.as_slice()),
        (one.len(), 1, &b"hello"[..])
    );
    // An incomplete head consumes nothing.
    let mut p = Parser::default();
    assert_eq!(p.feed(&one[..10], &mut |_| {}).expect("ok"), 0);
    assert!(!p.done());
    // A body-less answer is done at its head.
    let mut p = Parser::default();
    p.feed(
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        &mut |_| {},
    )
    .expect("ok");
    assert!(p.done());
}

fn sse_splitter() {
    let stream = stream_events(10).concat().into_bytes();
    for step in [1, 3, 7, 64, stream.len()] {
        let mut s = SseSplitter::default();
        let (mut events, mut pieces) = (0, 0);
        for part in stream.chunks(step) {
            s.feed(part, |ev| {
                events += 1;
                assert!(ev.starts_with(b"data: "), "one whole event");
                if memchr::memmem::find(ev, PIECE_MARK).is_some() {
                    pieces += 1;
                }
            });
        }
        assert_eq!((events, pieces), (10, pieces_in(10)), "step {step}");
    }
}

fn reply_choice() {
    assert_eq!(kind_of(&crate::chat_body("bench-idle", true)), Reply::Idle);
    assert_eq!(kind_of(&crate::chat_body("bench-sse", true)), Reply::Sse);
    assert_eq!(kind_of(&crate::chat_body("bench-fast", true)), Reply::Fast);
    assert_eq!(kind_of(&crate::chat_body("bench-chat", false)), Reply::Json);
    assert_eq!(
        kind_of(&crate::chat_body("bench-long", true)),
        Reply::LongChat
    );
    assert_eq!(
        kind_of(&crate::chat_body("bench-anthropic", true)),
        Reply::LongMessages
    );
    assert_eq!(kind_of(&crate::big_body(false, 64 * 1024)), Reply::Json);
}

fn stream_shape() {
    let ev = stream_events(50);
    assert_eq!(ev.len(), 50);
    assert_eq!(pieces_in(50), 46);
    assert!(ev[0].contains("\"role\":\"assistant\""));
    assert_eq!(ev.iter().filter(|e| e.contains("piece-")).count(), 46);
    assert!(ev[48].contains("\"usage\""));
    assert_eq!(ev[49], "data: [DONE]\n\n");
    for e in &ev[..49] {
        let json = e.trim_start_matches("data: ").trim_end();
        serde_json::from_str::<serde_json::Value>(json).expect("each event is JSON");
    }
}

fn big_bodies() {
    for messages in [false, true] {
        let b = crate::big_body(messages, 1024 * 1024);
        assert_eq!(b.len(), 1024 * 1024);
        let v: serde_json::Value = serde_json::from_slice(&b).expect("valid JSON");
        assert_eq!(v["model"], "bench-big");
        assert!(b.starts_with(b"{\"model\":\"bench-big\""));
    }
}

fn proc_status() {
    let text = "Name:\tload\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
    assert_eq!(parse_status_kb(text, "VmRSS"), Some(102_400));
    assert_eq!(parse_status_kb(text, "VmHWM"), Some(204_800));
    assert_eq!(parse_status_kb(text, "VmSwap"), None);
}

fn thread_stat() {
    let t = "4242 (servers-1) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
    let (name, secs) = super::sys::parse_stat(t).expect("parses");
    assert_eq!(name, "servers-1");
    assert!(secs > 0.0);
    assert!(super::sys::parse_stat("garbage").is_none());
}

fn quantiles() {
    let mut h = hist();
    for i in 1..=1000u64 {
        h.record(i * 1000).expect("in range");
    }
    assert!((us(&h, 0.5) - 500.0).abs() <= 1.0);
    assert!((us(&h, 0.99) - 990.0).abs() <= 1.0);
    assert!(us(&hist(), 0.5).is_nan());
}

fn lat(values_us: &[u64]) -> super::scenarios::Hist {
    let mut h = hist();
    for v in values_us {
        h.record(v * 1000).expect("in range");
    }
    h
}

fn closed(rate: u64) -> Closed {
    Closed {
        requests: rate,
        errors: 0,
        secs: 1.0,
        latency: lat(&[100]),
        body_bytes: 0,
    }
}

fn open(p50: u64, p99: u64) -> Open {
    let mut v = vec![p50; 98];
    v.extend([p99, p99]);
    Open {
        rate: 1000.0,
        sent: 100,
        errors: 0,
        secs: 1.0,
        latency: lat(&v),
        service: lat(&v),
        lateness: lat(&[1]),
    }
}

fn streams(ttfb: u64, coalesced: u64) -> Streams {
    streams_gap(ttfb, coalesced, 2000)
}

fn streams_gap(ttfb: u64, coalesced: u64, gap: u64) -> Streams {
    let mut gaps = lat(&[gap; 100]);
    gaps.record(1).ok();
    Streams {
        streams: 100,
        errors: 0,
        secs: 1.0,
        ttfb: lat(&[ttfb; 100]),
        gaps,
        coalesced,
    }
}

fn idle(n: usize, before_mb: u64, open_mb: u64) -> Idle {
    Idle {
        wanted: n,
        opened: n as u64,
        errors: 0,
        open_secs: 1.0,
        rss_before: before_mb << 20,
        rss_open: open_mb << 20,
        rss_after: before_mb << 20,
        heap_open: 0,
    }
}

fn result(
    name: &'static str,
    kind: Kind,
    rate: u64,
    o: Open,
    s: Streams,
    i: Idle,
    alloc: f64,
) -> TargetResult {
    let mut flow = streams(100, 0);
    flow.streams = rate / 10;
    TargetResult {
        closed: Some(closed(rate)),
        open: Some(o),
        flow: Some(flow),
        streams: Some(s),
        big: vec![report::Big {
            label: "chat → chat",
            closed: closed(10),
            body: 1 << 20,
            alloc_per_req: alloc,
            upstream_per_req: (1 << 20) as f64,
        }],
        idle: vec![i],
        ..TargetResult::new(name, kind)
    }
}

fn meta() -> Meta {
    Meta {
        machine: "test".into(),
        command: "cargo bench --bench load",
        settings: vec![],
        notes: vec![],
        rss_base: 40 << 20,
        idle_big: 10_000,
        rounds: 3,
    }
}

fn messages_stream_shape() {
    let ev = messages_events(LONG_PIECES);
    assert_eq!(ev.len(), LONG_PIECES + 6);
    assert_eq!(
        ev.iter().filter(|e| e.contains("piece-")).count(),
        LONG_PIECES
    );
    assert!(ev[0].starts_with("event: message_start\ndata: {"));
    assert!(ev[ev.len() - 2].contains("\"output_tokens\":200"));
    assert!(ev[ev.len() - 1].starts_with("event: message_stop\n"));
    for e in &ev {
        let (head, data) = e.split_once("\ndata: ").expect("a named event");
        let name = head.trim_start_matches("event: ");
        let v: serde_json::Value =
            serde_json::from_str(data.trim_end()).expect("each event is JSON");
        assert_eq!(v["type"], name, "the data's type names the event");
    }
}

fn budget_verdicts() {
    let m = (1u64 << 20) as f64;
    let work = |scripts: f64, cpu_us: f64| {
        Some(RedisPer {
            requests: 1000,
            scripts,
            commands: scripts * 3.0,
            cpu_us,
            command_us: cpu_us / 2.0,
        })
    };
    let mut rs = vec![
        result(
            "direct",
            Kind::Direct,
            30_000,
            open(50, 200),
            streams(100, 0),
            idle(10_000, 100, 200),
            0.0,
        ),
        result(
            "passthrough",
            Kind::Passthrough,
            20_000,
            open(150, 400),
            streams(200, 0),
            idle(10_000, 100, 300),
            0.1 * m,
        ),
        // Meets every line: 90 %, +90 µs, 300 + 7 KiB per stream (10,000 streams: 70 MB
        // beyond the passthrough's 200 MB).
        result(
            "gateway (embedded)",
            Kind::Gateway,
            18_000,
            open(240, 1300),
            streams(900, 0),
            idle(10_000, 100, 368),
            1.2 * m,
        ),
        // Fails every judged line: 5 % coalesced (passthrough 0 %), 20 KiB per stream, two
        // copies beyond the read buffer; its figures (45 % throughput, +200 µs p50, TTFB
        // +1.3 ms) are worse too.
        result(
            "gateway (redis)",
            Kind::Gateway,
            9_000,
            open(350, 1000),
            streams(1500, 5),
            idle(10_000, 100, 500),
            3.1 * m,
        ),
    ];
    rs[3].redis = work(2.0, 25.0);
    // Small chat CPU: +30 µs passes, +50 µs fails the 35 µs line.
    let cpu = |proxy_us: f64, store_us: f64| Some(report::Cpu { proxy_us, store_us });
    rs[1].cpu = cpu(70.0, 0.0);
    rs[2].cpu = cpu(80.0, 20.0);
    rs[3].cpu = cpu(120.0, 0.0);
    let lines = report::budget(&rs, &meta());
    let verdicts: Vec<(String, Option<bool>)> =
        lines.iter().map(|l| (l.text.clone(), l.pass)).collect();
    let get = |needle: &str, store: &str| {
        verdicts
            .iter()
            .find(|(t, _)| t.contains(needle) && t.contains(store))
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("a line for {needle} / {store}"))
    };
    // Throughput and open-loop latency are figures, not verdicts.
    for needle in [
        "Throughput, small chat",
        "Throughput, streaming",
        "Added latency",
        "time to first byte",
    ] {
        for store in ["embedded", "redis"] {
            let l = lines
                .iter()
                .find(|l| l.text.contains(needle) && l.text.contains(store))
                .unwrap_or_else(|| panic!("a line for {needle} / {store}"));
            assert!(l.figure && l.pass.is_none(), "{needle} is a figure");
            assert_eq!(l.verdict(), "figure");
        }
    }
    for needle in [
        "CPU per request, small chat",
        "no coalescing",
        "Idle streams",
        "one copy",
    ] {
        assert_eq!(
            get(needle, "embedded"),
            Some(true),
            "{needle} passes for embedded"
        );
        assert_eq!(
            get(needle, "redis"),
            Some(false),
            "{needle} fails for redis"
        );
    }
    assert_eq!(
        get("Redis work", "redis"),
        Some(false),
        "2 scripts a request"
    );
    assert!(
        !verdicts
            .iter()
            .any(|(t, _)| t.contains("Redis work") && t.contains("embedded")),
        "no Redis line for the embedded store"
    );
    // 0.05 scripts and 3 µs pass; 105 µs (+35) passes the small chat line.
    let mut rs2 = rs;
    rs2[3].redis = work(0.05, 3.0);
    rs2[3].cpu = cpu(100.0, 5.0);
    let l2 = report::budget(&rs2, &meta());
    for needle in ["CPU per request, small chat", "Redis work"] {
        assert!(l2
            .iter()
            .any(|l| l.text.contains(needle) && l.text.contains("redis") && l.pass == Some(true)));
    }
    // A longer median gap (events held back) fails the coalescing line.
    let kept = rs2[2].streams.replace(streams_gap(900, 0, 3000));
    let lg = report::budget(&rs2, &meta());
    assert!(lg.iter().any(|l| l.text.contains("no coalescing")
        && l.text.contains("embedded")
        && l.pass == Some(false)));
    rs2[2].streams = kept;
    // An error anywhere fails the line.
    rs2[2].idle[0].errors = 1;
    let l3 = report::budget(&rs2, &meta());
    assert!(l3
        .iter()
        .any(|l| l.text.contains("Idle") && l.text.contains("embedded") && l.pass == Some(false)));
}

fn report_and_chart() {
    let rs = vec![
        result(
            "direct",
            Kind::Direct,
            30_000,
            open(50, 200),
            streams(100, 0),
            idle(100, 10, 20),
            0.0,
        ),
        result(
            "passthrough <pingora>",
            Kind::Passthrough,
            20_000,
            open(150, 400),
            streams(200, 0),
            idle(100, 10, 30),
            1.0,
        ),
        result(
            "gateway (embedded)",
            Kind::Gateway,
            15_000,
            open(280, 1300),
            streams(900, 0),
            idle(100, 10, 40),
            2.0,
        ),
    ];
    let mut m = meta();
    m.idle_big = 100;
    let lines = report::budget(&rs, &m);
    let md = markdown::markdown(&rs, &m, &lines);
    for l in &lines {
        assert!(md.contains(&l.text), "the report shows every budget line");
    }
    for section in [
        "closed loop",
        "open loop",
        "fast upstream",
        "Streaming",
        "1 MiB",
        "idle streams",
    ] {
        assert!(md.contains(section), "{section}");
    }
    let svg = markdown::svg(&rs);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains("passthrough &lt;pingora&gt;"),
        "names are escaped"
    );
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    assert_eq!(svg.matches("<svg").count(), 1);
}

/// The HTTPS scenario's section: the CPU line is judged on the median round against the
/// small chat's budget, every target shows in its table, and errors fail the smoke run.
fn https_section() {
    use super::tls::{Https, Round, TargetRounds};
    let rounds = |cpus: &[f64], errors: u64| {
        cpus.iter()
            .map(|&c| {
                let mut closed = closed(1_000);
                closed.errors = errors;
                Round {
                    closed,
                    cpu: Cpu {
                        proxy_us: c - 5.0,
                        store_us: 5.0,
                    },
                }
            })
            .collect()
    };
    let section = |gateway: &[f64], errors: u64| Https {
        targets: vec![
            TargetRounds {
                name: "passthrough (bare Pingora)",
                kind: Kind::Passthrough,
                rounds: rounds(&[60.0, 50.0, 500.0], 0),
            },
            TargetRounds {
                name: "gateway (embedded)",
                kind: Kind::Gateway,
                rounds: rounds(gateway, errors),
            },
        ],
        rounds: 3,
        conns: 32,
        dur: std::time::Duration::from_secs(5),
    };
    let judged = |h: &Https| {
        let lines = h.lines();
        assert_eq!(lines.len(), 2, "a CPU line and a throughput figure");
        assert!(lines[1].figure);
        lines[0].pass
    };
    // Medians: 60 µs (passthrough) and 95 µs: 35 µs added, at the budget.
    let ok = section(&[95.0, 10.0, 900.0], 0);
    assert_eq!(judged(&ok), Some(true));
    assert!(ok.failures().is_empty());
    let mut md = String::new();
    ok.markdown(&mut md);
    assert!(md.contains("HTTPS") && md.contains("| passthrough (bare Pingora) |"));
    assert!(md.contains("| gateway (embedded) |") && md.contains("+35.0"));
    assert_eq!(judged(&section(&[96.0, 10.0, 900.0], 0)), Some(false));
    let failing = section(&[70.0, 70.0, 70.0], 1);
    assert_eq!(judged(&failing), Some(false), "errors fail the line");
    assert_eq!(failing.failures().len(), 1);
}

/// In the smoke run every scenario must have succeeded at least once and never failed.
pub fn smoke_failures(rs: &[TargetResult]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rs {
        let check = |out: &mut Vec<String>, what: &str, ok: u64, errors: u64| {
            if ok == 0 || errors > 0 {
                out.push(format!("{} {what}: {ok} ok, {errors} errors", r.name));
            }
        };
        if let Some(c) = &r.closed {
            check(&mut out, "closed loop", c.requests, c.errors);
        }
        if let Some(o) = &r.open {
            check(&mut out, "open loop", o.latency.len(), o.errors);
        }
        if let Some(s) = &r.streams {
            check(&mut out, "streams", s.streams, s.errors);
        }
        if let Some(s) = &r.flow {
            check(&mut out, "fast streams", s.streams, s.errors);
        }
        for b in &r.big {
            check(&mut out, b.label, b.closed.requests, b.closed.errors);
            // The body reached the upstream whole (give or take the rewritten JSON).
            let same = b.label == "chat → chat";
            if same && (b.upstream_per_req - b.body as f64).abs() > b.body as f64 * 0.01 {
                out.push(format!(
                    "{} {}: upstream got {:.0} bytes per request",
                    r.name, b.label, b.upstream_per_req
                ));
            }
        }
        for i in &r.idle {
            check(&mut out, "idle streams", i.opened, i.errors);
        }
    }
    out
}

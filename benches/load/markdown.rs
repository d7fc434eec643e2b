//! The report of a run: Markdown tables under the budget, and a hand-written SVG chart.

use super::report::{beyond, coalesced_share, delta, find, Line, Meta, TargetResult};
use super::scenarios::{us, Closed};
use super::sys::mb;
use super::targets::Kind;
use std::fmt::Write as _;

fn f(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.0}")
    }
}

pub fn markdown(rs: &[TargetResult], meta: &Meta, lines: &[Line]) -> String {
    let mut s = String::from("## Load benchmark\n\n");
    let _ = writeln!(
        s,
        "Machine: {}. Command: `{}`.\n",
        meta.machine, meta.command
    );
    let _ = writeln!(
        s,
        "Process RSS with every target up, before any load: {:.0} MB.\n",
        mb(meta.rss_base)
    );
    for x in &meta.settings {
        let _ = writeln!(s, "- {x}");
    }
    for x in &meta.notes {
        let _ = writeln!(s, "- Note: {x}");
    }
    s.push_str("\n### Budget (gateway vs bare Pingora passthrough, same run)\n\n| line | measured | verdict |\n|---|---|---|\n");
    for l in lines {
        let _ = writeln!(s, "| {} | {} | {} |", l.text, l.measured, l.verdict());
    }
    let pt_rate = find(rs, Kind::Passthrough)
        .and_then(|r| r.closed.as_ref())
        .map(Closed::rate);
    let _ = write!(
        s,
        "\n### Small chat, closed loop (throughput; median of {} rounds)\n\n| target | req/s | % of passthrough | p50 µs | p99 µs | p99.9 µs | proxy CPU µs/request | store threads CPU µs/request | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        meta.rounds
    );
    for r in rs {
        if let Some(c) = &r.closed {
            let pct = pt_rate.map_or(f64::NAN, |p| c.rate() / p * 100.0);
            let cpu = r.cpu.unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
                r.name,
                c.rate(),
                f(pct),
                f(us(&c.latency, 0.5)),
                f(us(&c.latency, 0.99)),
                f(us(&c.latency, 0.999)),
                cpu.proxy_us,
                cpu.store_us,
                c.errors
            );
        }
    }
    s.push_str("\n### Redis work per request (`INFO all` of every node, before and after each scenario)\n\n| target | scenario | requests | script calls | commands | redis-server CPU µs | of which in commands µs |\n|---|---|---:|---:|---:|---:|---:|\n");
    for r in rs {
        for (label, w) in [("closed loop", &r.redis), ("open loop", &r.redis_open)] {
            if let Some(w) = w {
                let _ = writeln!(
                    s,
                    "| {} | {label} | {} | {:.3} | {:.2} | {:.2} | {:.2} |",
                    r.name, w.requests, w.scripts, w.commands, w.cpu_us, w.command_us
                );
            }
        }
    }
    let pt_flow = find(rs, Kind::Passthrough).and_then(|r| r.flow.as_ref());
    let _ = write!(
        s,
        "\n### Streaming chat from a fast upstream, closed loop (median of {} rounds)\n\n| target | streams/s | % of passthrough | TTFB p50 µs | errors |\n|---|---:|---:|---:|---:|\n",
        meta.rounds
    );
    for r in rs {
        if let Some(t) = &r.flow {
            let pct = pt_flow.map_or(f64::NAN, |p| t.rate() / p.rate() * 100.0);
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {} | {} |",
                r.name,
                t.rate(),
                f(pct),
                f(us(&t.ttfb, 0.5)),
                t.errors
            );
        }
    }
    let pt_open = find(rs, Kind::Passthrough).and_then(|r| r.open.as_ref());
    s.push_str("\n### Small chat, open loop (latency from the intended send time)\n\n| target | sent | achieved req/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | added p50 µs | added p99 µs | service p99 µs | pacer late p99 µs | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rs {
        if let Some(o) = &r.open {
            let add = |q| pt_open.map_or(f64::NAN, |p| us(&o.latency, q) - us(&p.latency, q));
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                o.sent,
                o.latency.len() as f64 / o.secs,
                f(us(&o.latency, 0.5)),
                f(us(&o.latency, 0.9)),
                f(us(&o.latency, 0.99)),
                f(us(&o.latency, 0.999)),
                f(us(&o.latency, 1.0)),
                f(add(0.5)),
                f(add(0.99)),
                f(us(&o.service, 0.99)),
                f(us(&o.lateness, 0.99)),
                o.errors
            );
        }
    }
    let pt_st = find(rs, Kind::Passthrough).and_then(|r| r.streams.as_ref());
    s.push_str("\n### Streaming chat (time to first byte; gaps between content events at the client)\n\n| target | streams | TTFB p50 µs | TTFB p99 µs | added TTFB p99 µs | gap p50 µs | gap p99 µs | gaps < interval/2 | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rs {
        if let Some(t) = &r.streams {
            let add = pt_st.map_or(f64::NAN, |p| us(&t.ttfb, 0.99) - us(&p.ttfb, 0.99));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {:.2} % | {} |",
                r.name,
                t.streams,
                f(us(&t.ttfb, 0.5)),
                f(us(&t.ttfb, 0.99)),
                f(add),
                f(us(&t.gaps, 0.5)),
                f(us(&t.gaps, 0.99)),
                coalesced_share(t) * 100.0,
                t.errors
            );
        }
    }
    s.push_str("\n### 1 MiB request body\n\n| target | request | req/s | MB/s in | p50 ms | p99 ms | upstream got per request | heap allocated per request | × body | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rs {
        for b in &r.big {
            let c = &b.closed;
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} B | {:.1} MiB | {:.2} | {} |",
                r.name,
                b.label,
                c.rate(),
                c.rate() * b.body as f64 / 1e6,
                us(&c.latency, 0.5) / 1e3,
                us(&c.latency, 0.99) / 1e3,
                b.upstream_per_req,
                b.alloc_per_req / (1024.0 * 1024.0),
                b.alloc_per_req / b.body as f64,
                c.errors
            );
        }
    }
    s.push_str("\n### Concurrent idle streams (resident memory of the whole bench process)\n\n| target | streams | opened | errors | open s | RSS before MB | RSS open MB | RSS after release MB | growth MB | growth per stream KiB | heap held per stream KiB | beyond passthrough KiB per stream |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rs {
        for i in &r.idle {
            let beyond = match r.kind {
                Kind::Gateway => beyond(rs, r, Kind::Passthrough, i.wanted)
                    .map_or("–".into(), |b| format!("{:.1}", b / 1024.0)),
                _ => "–".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {} |",
                r.name,
                i.wanted,
                i.opened,
                i.errors,
                i.open_secs,
                mb(i.rss_before),
                mb(i.rss_open),
                mb(i.rss_after),
                delta(i) as f64 / (1024.0 * 1024.0),
                delta(i) as f64 / 1024.0 / i.wanted.max(1) as f64,
                i.heap_open as f64 / 1024.0 / i.wanted.max(1) as f64,
                beyond
            );
        }
    }
    s
}

const COLORS: [&str; 4] = ["#9aa5b1", "#4c78a8", "#f58518", "#54a24b"];

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One panel of horizontal bars: a group per target, a bar per series.
fn panel(
    s: &mut String,
    y0: f64,
    title: &str,
    unit: &str,
    series: &[&str],
    rows: &[(&str, Vec<f64>)],
) -> f64 {
    let (left, width, bar, gap) = (230.0, 520.0, 12.0, 10.0);
    let max = rows
        .iter()
        .flat_map(|r| r.1.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let _ = writeln!(
        s,
        r#"<text x="10" y="{:.0}" font-size="15" font-weight="bold">{}</text>"#,
        y0 + 16.0,
        esc(title)
    );
    for (i, name) in series.iter().enumerate() {
        let x = left + i as f64 * 110.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x:.0}" y="{:.0}" width="10" height="10" fill="{}"/><text x="{:.0}" y="{:.0}" font-size="11">{}</text>"#,
            y0 + 26.0,
            COLORS[i % 4],
            x + 14.0,
            y0 + 35.0,
            esc(name)
        );
    }
    let mut y = y0 + 48.0;
    for (name, vals) in rows {
        let h = vals.len() as f64 * bar;
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{:.0}" font-size="12" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + h / 2.0 + 4.0,
            esc(name)
        );
        for (i, v) in vals.iter().enumerate() {
            let v = if v.is_finite() { *v } else { 0.0 };
            let w = (v / max * width).max(1.0);
            let by = y + i as f64 * bar;
            let _ = writeln!(
                s,
                r#"<rect x="{left:.0}" y="{by:.0}" width="{w:.1}" height="{:.0}" fill="{}"/><text x="{:.1}" y="{:.0}" font-size="10">{v:.0} {unit}</text>"#,
                bar - 2.0,
                COLORS[i % 4],
                left + w + 4.0,
                by + bar - 3.0
            );
        }
        y += h + gap;
    }
    y + 10.0
}

pub fn svg(rs: &[TargetResult]) -> String {
    let mut body = String::new();
    let mut y = 10.0;
    let thr: Vec<(&str, Vec<f64>)> = rs
        .iter()
        .filter_map(|r| r.closed.as_ref().map(|c| (r.name, vec![c.rate()])))
        .collect();
    y = panel(
        &mut body,
        y,
        "Small chat, closed loop: throughput",
        "req/s",
        &["req/s"],
        &thr,
    );
    let lat: Vec<(&str, Vec<f64>)> = rs
        .iter()
        .filter_map(|r| {
            r.open.as_ref().map(|o| {
                (
                    r.name,
                    [0.5, 0.9, 0.99, 0.999]
                        .iter()
                        .map(|q| us(&o.latency, *q))
                        .collect(),
                )
            })
        })
        .collect();
    let rate = rs
        .iter()
        .find_map(|r| r.open.as_ref().map(|o| o.rate))
        .unwrap_or(0.0);
    y = panel(
        &mut body,
        y,
        &format!("Small chat, open loop at {rate:.0} req/s: latency percentiles"),
        "µs",
        &["p50", "p90", "p99", "p99.9"],
        &lat,
    );
    let st: Vec<(&str, Vec<f64>)> = rs
        .iter()
        .filter_map(|r| {
            r.streams
                .as_ref()
                .map(|t| (r.name, vec![us(&t.ttfb, 0.5), us(&t.ttfb, 0.99)]))
        })
        .collect();
    y = panel(
        &mut body,
        y,
        "Streaming chat: time to first byte",
        "µs",
        &["p50", "p99"],
        &st,
    );
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"860\" height=\"{:.0}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n",
        y
    )
}

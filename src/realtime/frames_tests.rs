use super::*;

/// Encodes one frame with the shortest length form (or the one forced by `len_form`).
fn frame(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![(u8::from(fin) << 7) | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xFFFF => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

fn text(s: &str) -> Vec<u8> {
    frame(true, OP_TEXT, s.as_bytes(), None)
}

fn keep_all(_: &[u8]) -> Sniff {
    Sniff::Keep
}

fn collecting(cap: usize) -> FrameReader {
    FrameReader::new(Some(Collect {
        cap,
        sniff: keep_all,
    }))
}

/// Feeds the chunks; returns the collected messages and the frame-end offsets, counted
/// from the start of the whole stream.
fn run(r: &mut FrameReader, chunks: &[&[u8]]) -> (Vec<String>, Vec<usize>) {
    let mut msgs = Vec::new();
    let mut ends = Vec::new();
    let mut base = 0;
    for c in chunks {
        let fed = r
            .feed(c, |end, t| {
                ends.push(base + end);
                if let Some(t) = t {
                    msgs.push(String::from_utf8(t.to_vec()).unwrap());
                }
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(fed, Fed::All);
        base += c.len();
    }
    (msgs, ends)
}

/// A realistic server stream: events, a ping, a fragmented event with a pong between its
/// fragments, a binary frame, an empty text message and a close.
fn session_stream() -> (Vec<u8>, Vec<String>, usize) {
    let created = r#"{"type":"response.created","response":{"id":"resp_1"}}"#;
    let delta = r#"{"type":"response.audio.delta","delta":"UklGRiQAAABXQVZF"}"#;
    let done =
        r#"{"type":"response.done","response":{"usage":{"input_tokens":12,"output_tokens":7}}}"#;
    let (a, b) = done.split_at(30);
    let mut s = Vec::new();
    s.extend(text(created));
    s.extend(frame(true, 0x9, b"ping!", None));
    s.extend(text(delta));
    s.extend(frame(false, OP_TEXT, a.as_bytes(), None));
    s.extend(frame(true, 0xA, b"", None));
    s.extend(frame(true, OP_CONTINUATION, b.as_bytes(), None));
    s.extend(frame(true, OP_BINARY, &[0, 1, 2, 3, 255], None));
    s.extend(text(""));
    s.extend(frame(true, 0x8, &[0x03, 0xE8], None));
    let msgs = vec![
        created.to_string(),
        delta.to_string(),
        done.to_string(),
        String::new(),
    ];
    (s, msgs, 9)
}

#[test]
fn whole_stream_in_one_chunk() {
    let (s, want, frames) = session_stream();
    let mut r = collecting(1 << 20);
    let (msgs, ends) = run(&mut r, &[&s]);
    assert_eq!(msgs, want);
    assert_eq!(ends.len(), frames);
    assert_eq!(*ends.last().unwrap(), s.len());
    assert!(r.at_boundary());
    assert_eq!(r.frames(), frames as u64);
    assert!(r.closed(), "the stream ends with a close frame");
}

#[test]
fn split_at_every_byte_gives_the_same_messages_and_boundaries() {
    let (s, want, _) = session_stream();
    let (_, want_ends) = run(&mut collecting(1 << 20), &[&s]);
    for cut in 0..=s.len() {
        let mut r = collecting(1 << 20);
        let (msgs, ends) = run(&mut r, &[&s[..cut], &s[cut..]]);
        assert_eq!(msgs, want, "cut at {cut}");
        assert_eq!(ends, want_ends, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = s.chunks(1).collect();
    let (msgs, ends) = run(&mut collecting(1 << 20), &bytes);
    assert_eq!(msgs, want);
    assert_eq!(ends, want_ends);
}

#[test]
fn three_way_splits() {
    let (s, want, _) = session_stream();
    for a in (0..s.len()).step_by(7) {
        for b in (a..s.len()).step_by(11) {
            let (msgs, _) = run(&mut collecting(1 << 20), &[&s[..a], &s[a..b], &s[b..]]);
            assert_eq!(msgs, want, "cuts at {a}, {b}");
        }
    }
}

#[test]
fn masked_client_frames_are_unmasked_at_any_split() {
    let msg = r#"{"type":"response.create","response":{"modalities":["text"]}}"#;
    let (a, b) = msg.split_at(21);
    let mut s = frame(false, OP_TEXT, a.as_bytes(), Some([0x37, 0xfa, 0x21, 0x3d]));
    s.extend(frame(true, 0x9, b"hi", Some([1, 2, 3, 4])));
    s.extend(frame(
        true,
        OP_CONTINUATION,
        b.as_bytes(),
        Some([0x9c, 0x00, 0xff, 0x42]),
    ));
    for cut in 0..=s.len() {
        let (msgs, ends) = run(&mut collecting(1 << 20), &[&s[..cut], &s[cut..]]);
        assert_eq!(msgs, vec![msg.to_string()], "cut at {cut}");
        assert_eq!(ends.len(), 3);
    }
}

#[test]
fn sixteen_and_sixty_four_bit_lengths() {
    let mid = "x".repeat(300);
    let big = "y".repeat(70_000);
    let mut s = text(&mid);
    assert_eq!(s[1], 126, "16-bit form");
    let b = text(&big);
    assert_eq!(b[1], 127, "64-bit form");
    s.extend(b);
    s.extend(frame(true, OP_BINARY, &vec![7u8; 70_000], None));
    s.extend(text("after"));
    for cut in [
        1,
        2,
        3,
        4,
        5,
        300,
        305,
        306,
        307,
        310,
        315,
        70_000,
        s.len() - 3,
    ] {
        let (msgs, _) = run(&mut collecting(1 << 20), &[&s[..cut], &s[cut..]]);
        assert_eq!(
            msgs,
            vec![mid.clone(), big.clone(), "after".into()],
            "cut {cut}"
        );
    }
}

#[test]
fn oversize_text_is_skipped_and_the_next_message_still_read() {
    let mut s = text(&"a".repeat(40));
    // Fragmented: the cap is crossed in the second fragment.
    s.extend(frame(false, OP_TEXT, &[b'b'; 10], None));
    s.extend(frame(true, OP_CONTINUATION, &[b'b'; 10], None));
    s.extend(text("small"));
    for cut in 0..=s.len() {
        let mut r = collecting(16);
        let (msgs, ends) = run(&mut r, &[&s[..cut], &s[cut..]]);
        assert_eq!(msgs, vec!["small".to_string()], "cut {cut}");
        assert_eq!(ends.len(), 4);
        assert_eq!(r.oversize(), 2);
    }
}

#[test]
fn sniff_decides_from_the_first_bytes() {
    fn only_done(p: &[u8]) -> Sniff {
        let want = br#"{"type":"done""#;
        let n = p.len().min(want.len());
        if p[..n] != want[..n] {
            Sniff::Skip
        } else if n == want.len() {
            Sniff::Keep
        } else {
            Sniff::NeedMore
        }
    }
    let mut s = text(r#"{"type":"delta","x":1}"#);
    s.extend(text(r#"{"type":"done","x":2}"#));
    s.extend(text(r#"{"ty"#)); // shorter than the sniff: delivered undecided
    for cut in 0..=s.len() {
        let mut r = FrameReader::new(Some(Collect {
            cap: 1024,
            sniff: only_done,
        }));
        let (msgs, _) = run(&mut r, &[&s[..cut], &s[cut..]]);
        assert_eq!(
            msgs,
            vec![
                r#"{"type":"done","x":2}"#.to_string(),
                r#"{"ty"#.to_string()
            ],
            "cut {cut}"
        );
    }
}

#[test]
fn frames_only_reader_collects_nothing_but_finds_boundaries() {
    let (s, _, frames) = session_stream();
    let mut r = FrameReader::new(None);
    let (msgs, ends) = run(&mut r, &[&s[..50], &s[50..]]);
    assert!(msgs.is_empty());
    assert_eq!(ends.len(), frames);
    assert!(r.text.capacity() == 0, "nothing was buffered");
}

#[test]
fn boundary_state_follows_the_bytes() {
    let s = text("hello");
    let mut r = collecting(64);
    assert!(r.at_boundary());
    r.feed(&s[..1], |_, _| ControlFlow::Continue(())).unwrap();
    assert!(!r.at_boundary(), "half a header");
    r.feed(&s[1..4], |_, _| ControlFlow::Continue(())).unwrap();
    assert!(!r.at_boundary(), "mid payload");
    r.feed(&s[4..], |_, _| ControlFlow::Continue(())).unwrap();
    assert!(r.at_boundary());
}

#[test]
fn break_stops_after_that_frame() {
    let mut s = text("one");
    let first = s.len();
    s.extend(text("two"));
    let mut r = collecting(64);
    let mut seen = Vec::new();
    let fed = r
        .feed(&s, |_, t| {
            seen.push(t.map(|t| t.to_vec()));
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(fed, Fed::Stopped(first));
    assert_eq!(seen, vec![Some(b"one".to_vec())]);
    assert!(r.at_boundary());
}

#[test]
fn protocol_errors() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0xC1, 0x00], "reserved bits"), // RSV1: compressed
        (vec![0x83, 0x00], "reserved opcode"),
        (vec![0x8B, 0x00], "reserved opcode"),
        (vec![0x09, 0x00], "fragmented control"),
        (vec![0x89, 126, 0, 200], "control frame longer"),
        (vec![0x80, 0x00], "continuation frame outside"),
        (
            [frame(false, OP_TEXT, b"a", None), text("b")].concat(),
            "new message before",
        ),
        ([vec![0x82, 127, 0x80], vec![0; 7]].concat(), "top bit"),
        (b"{\"error\":{}}".to_vec(), "reserved bits"), // an HTTP error body
    ];
    for (bytes, want) in cases {
        let mut r = collecting(64);
        let e = r
            .feed(&bytes, |_, _| ControlFlow::Continue(()))
            .unwrap_err();
        assert!(e.reason.contains(want), "{want}: {e:?}");
        assert!(!r.at_boundary());
        assert!(
            r.feed(&text("x"), |_, _| ControlFlow::Continue(()))
                .is_err(),
            "stays broken"
        );
    }
}

#[test]
fn error_found_across_a_split() {
    let bytes = [text("ok"), vec![0xC1, 0x00]].concat();
    let mut r = collecting(64);
    let (msgs, _) = run(&mut r, &[&bytes[..5]]);
    assert_eq!(msgs, vec!["ok".to_string()]);
    let e = r
        .feed(&bytes[5..], |_, _| ControlFlow::Continue(()))
        .unwrap_err();
    assert_eq!(e.at, 1);
}

#[test]
fn close_frames() {
    let s = server_close(1008, "quota exhausted");
    assert_eq!(&s[..4], &[0x88, 17, 0x03, 0xF0]);
    assert_eq!(&s[4..], b"quota exhausted");

    let mut r = FrameReader::new(None);
    let (_, ends) = run(&mut r, &[&s]);
    assert_eq!(ends, vec![s.len()], "a valid frame");

    let c = client_close(1000, [9, 8, 7, 6]);
    assert_eq!(&c[..6], &[0x88, 0x82, 9, 8, 7, 6]);
    assert_eq!(&c[6..], &[0x03 ^ 9, 0xE8 ^ 8]);
    let mut r = collecting(64);
    let (_, ends) = run(&mut r, &[&c]);
    assert_eq!(ends, vec![c.len()], "a valid masked frame");

    let long = "é".repeat(100); // 200 bytes: cut on a character boundary
    let l = server_close(1008, &long);
    assert!(l[1] as usize <= 125);
    assert!(std::str::from_utf8(&l[4..]).is_ok());
    assert_eq!(l.len() - 4, 122);
}

#[test]
fn closed_only_once_a_whole_close_frame_is_read() {
    let (s, _, _) = session_stream();
    let close_at = s.len() - 4;
    let mut r = FrameReader::new(None);
    run(&mut r, &[&s[..close_at]]);
    assert!(!r.closed(), "pings, pongs and data frames are not a close");
    run(&mut r, &[&s[close_at..close_at + 3]]);
    assert!(!r.closed(), "half a close frame");
    run(&mut r, &[&s[close_at + 3..]]);
    assert!(r.closed());

    let masked = client_close(1001, [1, 2, 3, 4]);
    let mut r = FrameReader::new(None);
    run(&mut r, &[&masked]);
    assert!(r.closed(), "a client's masked close");
}

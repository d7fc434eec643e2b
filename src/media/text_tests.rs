use super::*;
use serde_json::json;

fn param(r: Result<TextJob, Invalid>) -> Option<String> {
    r.unwrap_err().param
}

#[test]
fn embeddings() {
    let ok = json!({"model": "e", "input": ["a", "b"]});
    assert_eq!(check_embeddings(&ok, None).unwrap().model, "e");
    assert_eq!(
        check_embeddings(&json!({"input": [[1, 2], [3]]}), Some("p"))
            .unwrap()
            .model,
        "p"
    );
    assert_eq!(
        param(check_embeddings(&json!({"input": "x"}), None)),
        Some("model".into())
    );
    assert_eq!(
        param(check_embeddings(&json!({"model": "e"}), None)),
        Some("input".into())
    );
    assert_eq!(
        param(check_embeddings(
            &json!({"model": "e", "input": [1, "a"]}),
            None
        )),
        Some("input".into())
    );
    assert_eq!(
        param(check_embeddings(
            &json!({"model": "e", "input": "a", "dimensions": 0}),
            None
        )),
        Some("dimensions".into())
    );
    assert_eq!(
        param(check_embeddings(
            &json!({"model": "e", "input": "a", "encoding_format": "int8"}),
            None
        )),
        Some("encoding_format".into())
    );
}

#[test]
fn rerank() {
    let ok = json!({"model": "r", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": true});
    assert_eq!(check_rerank(&ok).unwrap().model, "r");
    for (body, p) in [
        (json!({"query": "q", "documents": ["a"]}), "model"),
        (json!({"model": "r", "documents": ["a"]}), "query"),
        (json!({"model": "r", "query": "q"}), "documents"),
        (
            json!({"model": "r", "query": "q", "documents": []}),
            "documents",
        ),
        (
            json!({"model": "r", "query": "q", "documents": [1]}),
            "documents[0]",
        ),
        (
            json!({"model": "r", "query": "q", "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
        (
            json!({"model": "r", "query": "q", "documents": ["a"], "return_documents": "y"}),
            "return_documents",
        ),
    ] {
        assert_eq!(param(check_rerank(&body)), Some(p.into()), "{body}");
    }
}

#[test]
fn moderation_defaults_the_model() {
    assert_eq!(
        check_moderation(&json!({"input": "x"})).unwrap().model,
        DEFAULT_MODERATION_MODEL
    );
    assert_eq!(
        param(check_moderation(&json!({"input": 3}))),
        Some("input".into())
    );
}

#[test]
fn tokens_in_every_shape() {
    let t = |v: Value| reported_tokens(&v).map(|u| u.input_tokens);
    assert_eq!(
        t(json!({"usage": {"prompt_tokens": 5, "total_tokens": 5}})),
        Some(5)
    );
    assert_eq!(t(json!({"usage": {"total_tokens": 7}})), Some(7));
    assert_eq!(
        t(json!({"meta": {"billed_units": {"input_tokens": 9}}})),
        Some(9)
    );
    assert_eq!(t(json!({"results": []})), None);
}

fn price(yaml: &str) -> Price {
    Price::from_raw(&serde_yaml::from_str(yaml).unwrap()).unwrap()
}

fn tokens(job: Result<TextJob, Invalid>) -> u64 {
    job.unwrap().counted.tokens()
}

#[test]
fn embeddings_count_four_bytes_a_token_of_their_text_and_each_token_id() {
    let e = |v: Value| tokens(check_embeddings(&v, Some("e")));
    // 11 + 18 bytes: 29 / 4 rounded up.
    assert_eq!(
        e(json!({"input": ["hello world", "the image of a cat"]})),
        8
    );
    assert_eq!(e(json!({"input": "abcd"})), 1);
    assert_eq!(e(json!({"input": "abcde"})), 2);
    // "é" is two bytes, "👋" four.
    assert_eq!(e(json!({"input": "é👋"})), 2);
    assert_eq!(e(json!({"input": [1, 2, 3]})), 3);
    assert_eq!(e(json!({"input": [[1, 2, 3], [40000, 5]]})), 5);
    assert_eq!(
        param(check_embeddings(&json!({"input": [[1], []]}), Some("e"))),
        Some("input".into())
    );
}

#[test]
fn moderation_counts_text_and_image_parts_only() {
    let m = |v: Value| tokens(check_moderation(&v));
    // Row 2's input: 28 bytes of text, whatever words it holds.
    assert_eq!(m(json!({"input": "an image, an image, an image"})), 7);
    assert_eq!(m(json!({"input": ["abc", "de"]})), 2);
    let parts = json!({"input": [
        {"type": "text", "text": "an image of a cat"},
        {"type": "image_url", "image_url": {"url": "https://img.example/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]});
    assert_eq!(m(parts), 5 + 2 * 3_000);
    for (body, p) in [
        (json!({"input": [{"type": "text"}]}), "input[0].text"),
        (
            json!({"input": [{"type": "text", "text": "a"}, {"text": "b"}]}),
            "input[1].type",
        ),
        (
            json!({"input": [{"type": "image_url", "image_url": "u"}]}),
            "input[0].image_url",
        ),
        (
            json!({"input": ["a", {"type": "text", "text": "b"}]}),
            "input",
        ),
        (json!({"input": []}), "input"),
    ] {
        assert_eq!(param(check_moderation(&body)), Some(p.into()), "{body}");
    }
}

#[test]
fn rerank_counts_the_query_and_the_documents_text() {
    let job = check_rerank(&json!({"model": "r", "query": "What is the capital of the country?",
        "documents": ["Carson City is the capital of Nevada.", {"text": "Washington, D.C. is the capital of the US.", "id": "d2"}]}))
    .unwrap();
    // 35 + 37 + 42 bytes.
    assert_eq!(job.counted.tokens(), 29);
    assert_eq!(
        job.documents,
        Some(Documents {
            count: 2,
            max_chunks: 10
        })
    );
    // Cohere v1's `rank_fields`: those members are ranked, and counted.
    let job = check_rerank(&json!({"model": "r", "query": "qq", "rank_fields": ["title", "body"],
        "documents": [{"title": "ab", "body": "cdef", "text": "not ranked"}], "max_chunks_per_doc": 3}))
    .unwrap();
    assert_eq!(job.counted.tokens(), 2);
    assert_eq!(job.documents.unwrap().max_chunks, 3);
    for (body, p) in [
        (
            json!({"model": "r", "query": "q", "documents": ["a"], "rank_fields": "text"}),
            "rank_fields",
        ),
        (
            json!({"model": "r", "query": "q", "documents": ["a"], "max_chunks_per_doc": 0}),
            "max_chunks_per_doc",
        ),
    ] {
        assert_eq!(param(check_rerank(&body)), Some(p.into()), "{body}");
    }
}

#[test]
fn search_units_per_cohere_s_hundred_documents() {
    let d = |count, max_chunks| Documents { count, max_chunks };
    assert_eq!(d(1, 10).search_units_bound(), 1);
    assert_eq!(d(150, 10).search_units_bound(), 15);
    assert_eq!(d(150, 1).search_units_bound(), 2);
    assert_eq!(d(100, 10).search_units_estimate(), 1);
    assert_eq!(d(101, 10).search_units_estimate(), 2);
}

#[test]
fn an_answer_is_billed_in_the_unit_it_reports_or_else_estimated() {
    let rerank =
        check_rerank(&json!({"model": "r", "query": "abcd", "documents": ["efgh", "ij"]})).unwrap();
    let cohere = br#"{"id": "x", "results": [], "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}}}"#;
    let jina = br#"{"results": [], "usage": {"total_tokens": 30}}"#;
    let tokens = price("{input: 100}");
    let units = price("{per_search_unit: 0.002}");
    let both = price("{input: 100, per_search_unit: 0.002}");
    let t = |n| {
        Billed::Tokens(Usage {
            input_tokens: n,
            ..Usage::default()
        })
    };
    assert_eq!(
        billed(&rerank, &units, cohere),
        (Billed::SearchUnits(1), true)
    );
    assert_eq!(
        billed(&rerank, &both, cohere),
        (Billed::SearchUnits(1), true)
    );
    assert_eq!(billed(&rerank, &tokens, jina), (t(30), true));
    assert_eq!(billed(&rerank, &both, jina), (t(30), true));
    // Search units a model has no price for: four bytes a token of 10 bytes.
    assert_eq!(billed(&rerank, &tokens, cohere), (t(3), false));
    // Tokens a model has no price for: one search unit per 100 documents.
    assert_eq!(
        billed(&rerank, &units, jina),
        (Billed::SearchUnits(1), false)
    );
    assert_eq!(
        billed(&rerank, &units, b"not json"),
        (Billed::SearchUnits(1), false)
    );
    let moderation = check_moderation(&json!({"input": "is this fine?"})).unwrap();
    let openai = br#"{"id": "modr-1", "results": [{"flagged": false}]}"#;
    assert_eq!(billed(&moderation, &tokens, openai), (t(4), false));
    let fraction = br#"{"meta": {"billed_units": {"search_units": 1.5}}}"#;
    assert_eq!(
        reported_search_units(&serde_json::from_slice(fraction).unwrap()),
        Some(2)
    );
}

//! A chat answer's `usage` read straight from its raw text through its typed view
//! ([`CompletionUsage`]): the same figures as [`super::usage_of`] on the parsed value,
//! without building that value (a map of owned strings, for a handful of numbers). Every
//! answer and the last event of every stream pass through here.

use super::super::Usage;
use super::wire::usage::CompletionUsage;
use serde_json::value::RawValue;

/// `usage` from its raw JSON; zeros for what is not an object, and for each figure that
/// is absent or not a whole number (as `usage_of` reads them).
pub fn usage_raw(raw: &RawValue) -> Usage {
    usage_text(raw.get())
}

/// As [`usage_raw`], from the usage object's text.
pub(crate) fn usage_text(text: &str) -> Usage {
    serde_json::from_str::<CompletionUsage>(text)
        .map_or_else(|_| Usage::default(), |u| u.to_usage())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The figures as lookups in the parsed tree give them: what the gateway read before
    /// the typed view, kept as the reference the view is held to.
    fn looked_up(u: &Value) -> Usage {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let prompt = &u["prompt_tokens_details"];
        let completion = &u["completion_tokens_details"];
        Usage {
            input_tokens: n(&u["prompt_tokens"]),
            output_tokens: n(&u["completion_tokens"]),
            cached_input_tokens: n(&prompt["cached_tokens"]),
            audio_input_tokens: n(&prompt["audio_tokens"]),
            reasoning_tokens: n(&completion["reasoning_tokens"]),
            audio_output_tokens: n(&completion["audio_tokens"]),
            ..Usage::default()
        }
    }

    /// Every shape of `usage` reads as the parsed value reads: numbers of every kind,
    /// members missing, repeated, escaped or of another type, details of every type,
    /// and what is not an object at all.
    #[test]
    fn the_raw_reading_matches_the_parsed_one() {
        let cases = [
            r#"{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}"#,
            r#"{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1,"x":[1,{"a":2}]}}"#,
            r#"{"prompt_tokens":-1,"completion_tokens":2.5,"prompt_tokens_details":null,"completion_tokens_details":[1]}"#,
            r#"{"prompt_tokens":"7","completion_tokens":true,"prompt_tokens_details":"x","completion_tokens_details":{"reasoning_tokens":"2"}}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":9,"completion_tokens":{"n":1},"completion_tokens":[2]}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":4,"cached_tokens":5},"prompt_tokens_details":{"other":1}}"#,
            r#"{"prompt\u005ftokens":11,"completion_tokens":18446744073709551615,"extra":{"deep":[[[]]]}}"#,
            r#"{"prompt_tokens":1e3,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":-3}}"#,
            r#"{"prompt_tokens":90,"completion_tokens":40,"prompt_tokens_details":{"audio_tokens":30,"cached_tokens":8,"audio_tokens":31},"completion_tokens_details":{"audio_tokens":20,"reasoning_tokens":5,"accepted_prediction_tokens":2}}"#,
            r#"{"prompt_tokens_details":{"audio_tokens":"3","reasoning_tokens":4},"completion_tokens_details":{"cached_tokens":6,"audio_tokens":null}}"#,
            r#"{}"#,
            r#"null"#,
            r#"[1,2]"#,
            r#""usage""#,
            r#"42"#,
        ];
        for case in cases {
            let raw: Box<RawValue> = serde_json::from_str(case).unwrap();
            let parsed: Value = serde_json::from_str(case).unwrap();
            assert_eq!(usage_raw(&raw), super::super::usage_of(&parsed), "{case}");
            assert_eq!(usage_raw(&raw), looked_up(&parsed), "{case}");
        }
        let raw: Box<RawValue> = serde_json::from_str(cases[8]).unwrap();
        let u = usage_raw(&raw);
        let want = Usage {
            input_tokens: 90,
            output_tokens: 40,
            cached_input_tokens: 8,
            audio_input_tokens: 31,
            reasoning_tokens: 5,
            audio_output_tokens: 20,
            ..Usage::default()
        };
        assert_eq!(u, want);
    }
}

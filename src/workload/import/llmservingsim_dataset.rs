//! `llmservingsim-dataset`: LLMServingSim's request datasets (its
//! `dataset/*.jsonl`, e.g. the ISPASS'26 artifact's
//! `sharegpt_req300_rate10_{llama,mixtral}.jsonl`), one JSON object per
//! line in arrival order: `arrival_time_ns` (ns from the run's start),
//! `input_toks`, `output_toks`, `input_tok_ids` (the prompt's token ids, no
//! BOS) and `output_tok_ids` (the dataset's reference answer, not what the
//! model produced: only its length is meaningful, and `output_toks` says it).
//!
//! Mapping: request `i` (0-based line order) arrives at `arrival_time_ns /
//! 1e9` s (rounded to the µs) with one llm call whose prompt is
//! `input_tok_ids` — the real ids, so the prefix cache sees the real shared
//! prefixes (a later turn of a conversation repeats the earlier ones) — and
//! whose output is pinned to `output_toks` tokens, as a replay with
//! `min_tokens = max_tokens = output_toks` and `ignore_eos` would run it.
//! `input_toks` must equal the number of ids; arrival times must not
//! decrease.

use std::path::Path;

use super::common::{ImportError, Requests, json_lines, one_call, tokens};
use crate::workload::types::LlmCall;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    arrival_time_ns: f64,
    input_toks: i64,
    output_toks: i64,
    input_tok_ids: Vec<u32>,
    /// The reference answer's ids: not what the model generated, unused.
    #[serde(default)]
    #[allow(dead_code)]
    output_tok_ids: Option<serde::de::IgnoredAny>,
}

/// The fields a row must have.
const FIELDS: [&str; 4] = ["arrival_time_ns", "input_toks", "output_toks", "input_tok_ids"];

/// Streams `path`.
pub(super) fn open(path: &Path) -> Result<Requests, ImportError> {
    let mut index = 0u64;
    let mut last_ns = 0.0f64;
    json_lines(path, move |file, line, text| {
        let r = row(file, line, index, text, &mut last_ns);
        index += 1;
        r
    })
}

/// Line `line` (request `index`) as a request.
fn row(
    file: &str,
    line: u64,
    index: u64,
    text: &str,
    last_ns: &mut f64,
) -> Result<crate::workload::Request, ImportError> {
    let bad = |column: &str, reason: String| ImportError::new(file, line, column, reason);
    let r: Row = serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        // serde names a missing field in its message; an unknown one is the
        // row's fault, not a column's, and a mistyped value names no field.
        let named = |k: &&&str| !msg.starts_with("unknown field") && msg.contains(&format!("`{k}`"));
        bad(FIELDS.iter().find(named).unwrap_or(&"json"), msg)
    })?;
    if !(r.arrival_time_ns.is_finite() && r.arrival_time_ns >= 0.0) {
        return Err(bad("arrival_time_ns", format!("{} is not a time in ns", r.arrival_time_ns)));
    }
    if r.arrival_time_ns < *last_ns {
        return Err(bad(
            "arrival_time_ns",
            format!("{} ns is before the previous row's {} ns", r.arrival_time_ns, last_ns),
        ));
    }
    *last_ns = r.arrival_time_ns;
    let arrival_s = r.arrival_time_ns / 1e9;
    crate::workload::checked_seconds_to_us(arrival_s).map_err(|e| bad("arrival_time_ns", e))?;
    let input = tokens(r.input_toks, 1).map_err(|e| bad("input_toks", e))?;
    let output = tokens(r.output_toks, 1).map_err(|e| bad("output_toks", e))?;
    if r.input_tok_ids.len() != input as usize {
        return Err(bad("input_tok_ids", format!("{} ids for input_toks {input}", r.input_tok_ids.len())));
    }
    let call = LlmCall::new(input, output).with_input_ids(r.input_tok_ids);
    Ok(one_call(index, arrival_s, call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::NodeKind;

    #[test]
    fn rows_keep_their_token_ids_and_pinned_output() {
        let mut last = 0.0;
        let r = row(
            "t",
            1,
            0,
            r#"{"input_toks": 3, "output_toks": 416, "arrival_time_ns": 46926808, "input_tok_ids": [40, 1390, 499], "output_tok_ids": [1, 2]}"#,
            &mut last,
        )
        .unwrap();
        assert_eq!(r.arrival_time, 0.046927);
        let NodeKind::Llm(call) = &r.sub_requests[0].kind else { panic!() };
        assert_eq!((call.input_tokens, call.output_tokens), (3, 416));
        assert_eq!(call.input_token_ids.as_deref(), Some(&[40, 1390, 499][..]));
        // The reference answer is optional and only its absence is fine.
        let r = row(
            "t",
            2,
            1,
            r#"{"input_toks": 1, "output_toks": 1, "arrival_time_ns": 5e7, "input_tok_ids": [7]}"#,
            &mut last,
        );
        assert_eq!(r.unwrap().request_id, crate::workload::types::RequestId::Int(1));
    }

    #[test]
    fn bad_rows_name_their_line_and_field() {
        let mut last = 1e9;
        for (text, column) in [
            (r#"{"input_toks": 1, "output_toks": 2, "arrival_time_ns": 5, "input_tok_ids": [1]}"#, "arrival_time_ns"),
            (
                r#"{"input_toks": 1, "output_toks": 2, "arrival_time_ns": -1e10, "input_tok_ids": [1]}"#,
                "arrival_time_ns",
            ),
            (r#"{"input_toks": 2, "output_toks": 2, "arrival_time_ns": 2e9, "input_tok_ids": [1]}"#, "input_tok_ids"),
            (r#"{"input_toks": 0, "output_toks": 2, "arrival_time_ns": 2e9, "input_tok_ids": []}"#, "input_toks"),
            (r#"{"input_toks": 1, "output_toks": 0, "arrival_time_ns": 2e9, "input_tok_ids": [1]}"#, "output_toks"),
            (r#"{"input_toks": 1, "arrival_time_ns": 2e9, "input_tok_ids": [1]}"#, "output_toks"),
            (r#"{"input_toks": 1, "output_toks": 1, "arrival_time_ns": 2e9, "input_tok_ids": [-3]}"#, "json"),
            (r#"{"input_toks": 1, "output_toks": 1, "arrival_time_ns": 2e9, "input_tok_ids": [1], "x": 0}"#, "json"),
            ("not json", "json"),
        ] {
            let e = row("w.jsonl", 7, 0, text, &mut last).unwrap_err();
            assert_eq!((e.line, e.column.as_str()), (7, column), "{text}: {e}");
            assert!(e.to_string().starts_with("w.jsonl:7: "), "{e}");
        }
    }
}

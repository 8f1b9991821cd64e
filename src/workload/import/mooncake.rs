//! `mooncake`: the FAST'25 traces of Mooncake (Kimi), one JSON object per
//! line: `timestamp` (ms from the trace start), `input_length`,
//! `output_length` (tokens) and `hash_ids`, the prefix-block identities of the
//! prompt in 512-token blocks (equal ids at equal positions = shareable KV).
//!
//! Mapping: request `i` (0-based line order) arrives at `timestamp / 1000` s
//! with one llm call of `input_length` / `output_length` tokens whose prompt
//! is kept as its block identities ([`PromptBlocks`]), never as 512 token ids
//! a block: the prefix cache sees equal blocks exactly where the trace has
//! equal ids. `hash_ids` must hold `ceil(input_length / 512)` ids and
//! timestamps must not decrease.

use std::path::Path;

use super::common::{ImportError, Requests, json_lines, one_call, tokens};
use crate::workload::types::{LlmCall, PromptBlocks};

/// Tokens per `hash_ids` block (Mooncake's `block_size`, FAST'25 traces README).
pub const BLOCK_TOKENS: u32 = 512;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    timestamp: f64,
    input_length: i64,
    output_length: i64,
    hash_ids: Vec<u64>,
}

/// Streams `path`.
pub(super) fn open(path: &Path) -> Result<Requests, ImportError> {
    let mut last_ms = 0.0f64;
    json_lines(path, move |file, line, text| row(file, line, text, &mut last_ms))
}

fn row(file: &str, line: u64, text: &str, last_ms: &mut f64) -> Result<crate::workload::Request, ImportError> {
    let bad = |column: &str, reason: String| ImportError::new(file, line, column, reason);
    let r: Row = serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        // serde names a missing or mistyped field first in its message; an
        // unknown one is the row's fault, not a column's.
        let column = match msg.split('`').nth(1) {
            Some(k) if !msg.starts_with("unknown field") => k.to_owned(),
            _ => "json".to_owned(),
        };
        bad(&column, msg)
    })?;
    if !(r.timestamp.is_finite() && r.timestamp >= 0.0) {
        return Err(bad("timestamp", format!("{} is not a time in ms", r.timestamp)));
    }
    if r.timestamp < *last_ms {
        return Err(bad("timestamp", format!("{} ms is before the previous row's {} ms", r.timestamp, last_ms)));
    }
    *last_ms = r.timestamp;
    let arrival_s = r.timestamp / 1e3;
    crate::workload::checked_seconds_to_us(arrival_s).map_err(|e| bad("timestamp", e))?;
    let input = tokens(r.input_length, 1).map_err(|e| bad("input_length", e))?;
    let output = tokens(r.output_length, 1).map_err(|e| bad("output_length", e))?;
    let blocks = input.div_ceil(BLOCK_TOKENS) as usize;
    if r.hash_ids.len() != blocks {
        return Err(bad(
            "hash_ids",
            format!("{} ids for {input} tokens; blocks of {BLOCK_TOKENS} need {blocks}", r.hash_ids.len()),
        ));
    }
    let call =
        LlmCall::new(input, output).with_prompt_blocks(PromptBlocks { block_tokens: BLOCK_TOKENS, ids: r.hash_ids });
    Ok(one_call(line - 1, arrival_s, call))
}

/// Share of `hash_ids` (block positions) whose id an earlier row already
/// had: the prefix-cache hit rate an unbounded cache would reach, in blocks.
pub fn block_reuse(path: &Path) -> Result<f64, ImportError> {
    let mut seen = std::collections::HashSet::new();
    let (mut total, mut reused) = (0u64, 0u64);
    for r in open(path)? {
        let r = r?;
        let crate::workload::NodeKind::Llm(call) = &r.sub_requests[0].kind else { continue };
        for &id in &call.prompt_blocks.as_ref().expect("mooncake prompts are blocks").ids {
            total += 1;
            if !seen.insert(id) {
                reused += 1;
            }
        }
    }
    Ok(if total == 0 { 0.0 } else { reused as f64 / total as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_map_to_block_prompts_and_bad_rows_name_their_column() {
        let mut last = 0.0;
        let r = row(
            "t",
            1,
            r#"{"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [7, 9]}"#,
            &mut last,
        )
        .unwrap();
        assert_eq!(r.arrival_time, 1.5);
        let crate::workload::NodeKind::Llm(call) = &r.sub_requests[0].kind else { panic!() };
        assert_eq!((call.input_tokens, call.output_tokens), (600, 3));
        assert_eq!(call.prompt_blocks.as_ref().unwrap().ids, vec![7, 9]);
        for (text, column) in [
            (r#"{"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [7, 9]}"#, "timestamp"),
            (r#"{"timestamp": 2000, "input_length": 600, "output_length": 3, "hash_ids": [7]}"#, "hash_ids"),
            (r#"{"timestamp": 2000, "input_length": 0, "output_length": 3, "hash_ids": []}"#, "input_length"),
            (r#"{"timestamp": 2000, "input_length": 5, "output_length": 0, "hash_ids": [1]}"#, "output_length"),
            (r#"{"timestamp": 2000, "input_length": 5, "hash_ids": [1]}"#, "output_length"),
            (r#"{"timestamp": 2000, "input_length": 5, "output_length": 1, "hash_ids": [1], "x": 1}"#, "json"),
        ] {
            let e = row("t", 4, text, &mut last).unwrap_err();
            assert_eq!((e.line, e.column.as_str()), (4, column), "{text}: {e}");
        }
    }

    #[test]
    fn equal_ids_at_equal_positions_are_equal_tokens() {
        let a = PromptBlocks { block_tokens: 512, ids: vec![1, 2, 3] };
        let b = PromptBlocks { block_tokens: 512, ids: vec![1, 2, 4] };
        let (ta, tb): (Vec<u32>, Vec<u32>) = (a.tokens(1100).collect(), b.tokens(1100).collect());
        assert_eq!(ta[..1024], tb[..1024]);
        assert!(ta[1024..].iter().zip(&tb[1024..]).all(|(x, y)| x != y));
        // Offsets inside a block differ, so a block is not one repeated token.
        assert_ne!(ta[0], ta[1]);
    }
}

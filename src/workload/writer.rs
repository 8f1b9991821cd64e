//! The one place workload and result JSONL rows are written. A result row
//! repeats the request's DAG field by field and adds `token_latency` (seconds)
//! to every llm node, plus `error` where a node could not (fully) run.
//!
//! Rows are written by hand rather than through serde: result files are the
//! simulator's bulk output, and formatting token latencies from integer
//! microseconds as fixed-point decimals is several times faster than general
//! float formatting. Every latency is an exact multiple of 1 µs and reads back
//! as the same `f64` a float formatter would have produced.

use std::io::Write;

use super::traffic::{SloClass, Traffic};
use super::types::{NodeKind, Request, RequestId};

/// What the simulator knows of one llm node when the request is written.
#[derive(Debug, Clone, Copy)]
pub struct NodeTokens<'a> {
    /// When the node entered the scheduler, µs.
    pub start_us: u64,
    /// Absolute emission time of each output token, µs, ascending.
    pub token_times_us: &'a [u64],
    /// The replica that served it, in a cluster of more than one.
    pub replica: Option<u32>,
    /// Why the node did not (fully) run.
    pub error: Option<&'a str>,
}

/// Appends `request` as a workload row (no results), newline-terminated.
/// A prompt given as block identities ([`super::PromptBlocks`]) is written as
/// the token ids that stand in for it, the format's only way to say it.
pub fn write_workload_row(out: &mut Vec<u8>, request: &Request) {
    write_row(out, request, request.arrival_time, true, &mut |_| None);
}

/// Appends `request` as a result row. `tokens(i)` gives node `i`'s outcome;
/// it is asked for llm nodes only. Rows go to a `Vec` (the caller flushes it
/// to its file in large writes): appending small pieces to memory is much
/// cheaper than pushing each through `io::Write`.
pub fn write_result_row<'a>(
    out: &mut Vec<u8>,
    request: &Request,
    tokens: &mut dyn FnMut(usize) -> Option<NodeTokens<'a>>,
) {
    write_row(out, request, request.arrival_time, false, tokens);
}

/// [`write_result_row`] with `arrival_time` in place of the request's own
/// (the time a held-back request was sent). A prompt given as block
/// identities is not expanded in result rows (an imported trace's prompts
/// would dwarf its latencies).
pub fn write_result_row_at<'a>(
    out: &mut Vec<u8>,
    request: &Request,
    arrival_time: f64,
    tokens: &mut dyn FnMut(usize) -> Option<NodeTokens<'a>>,
) {
    write_row(out, request, arrival_time, false, tokens);
}

fn write_row<'a>(
    out: &mut Vec<u8>,
    request: &Request,
    arrival_time: f64,
    expand_blocks: bool,
    tokens: &mut dyn FnMut(usize) -> Option<NodeTokens<'a>>,
) {
    out.extend_from_slice(b"{\"request_id\":");
    match &request.request_id {
        RequestId::Int(n) => push_uint(out, *n),
        RequestId::Str(s) => json_string(out, s),
    }
    out.extend_from_slice(b",\"arrival_time\":");
    json_f64(out, arrival_time);
    out.extend_from_slice(b",\"initial\":");
    json_u32s(out, &request.initial);
    out.extend_from_slice(b",\"sub_requests\":[");
    // A call's priority is written where it is not the one its class gives.
    let class_priority = request.traffic.slo_class.map_or(0, SloClass::vllm_priority);
    for (i, sub) in request.sub_requests.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        let call = match &sub.kind {
            NodeKind::Llm(call) => Some(call),
            NodeKind::ToolCall { .. } => None,
        };
        let (input, output) = call.map_or((0, 0), |c| (c.input_tokens, c.output_tokens));
        out.extend_from_slice(if call.is_some() { b"{\"kind\":\"llm\"" } else { b"{\"kind\":\"tool_call\"" });
        out.extend_from_slice(b",\"input_tokens\":");
        push_uint(out, u64::from(input));
        out.extend_from_slice(b",\"output_tokens\":");
        push_uint(out, u64::from(output));
        out.extend_from_slice(b",\"next\":");
        json_u32s(out, &sub.next);
        out.extend_from_slice(b",\"interval\":");
        json_f64(out, sub.interval);
        match &sub.kind {
            NodeKind::ToolCall { duration } => {
                out.extend_from_slice(b",\"duration\":");
                json_f64(out, *duration);
            }
            NodeKind::Llm(call) => {
                if let Some(ids) = &call.input_token_ids {
                    out.extend_from_slice(b",\"input_token_ids\":");
                    json_u32s(out, ids);
                } else if let (Some(blocks), true) = (&call.prompt_blocks, expand_blocks) {
                    out.extend_from_slice(b",\"input_token_ids\":[");
                    for (k, id) in blocks.tokens(call.input_tokens).enumerate() {
                        if k > 0 {
                            out.push(b',');
                        }
                        push_uint(out, u64::from(id));
                    }
                    out.push(b']');
                }
                if let Some(ids) = &call.output_token_ids {
                    out.extend_from_slice(b",\"output_token_ids\":");
                    json_u32s(out, ids);
                }
                if let Some(s) = call.seeded {
                    write!(out, ",\"known_tokens\":{},\"kv_tokens\":{}", s.known_tokens, s.kv_tokens)
                        .expect("writing to a Vec cannot fail");
                }
                if let Some(model) = &call.model {
                    out.extend_from_slice(b",\"model\":");
                    json_string(out, model);
                }
                if let Some(lora) = &call.lora {
                    out.extend_from_slice(b",\"lora\":");
                    json_string(out, lora);
                }
                // Only when set: a workload without priorities is written as before.
                if call.priority != class_priority {
                    write!(out, ",\"priority\":{}", call.priority).expect("writing to a Vec cannot fail");
                }
                if let Some(result) = tokens(i) {
                    if let Some(replica) = result.replica {
                        write!(out, ",\"replica\":{replica}").expect("writing to a Vec cannot fail");
                    }
                    out.extend_from_slice(b",\"token_latency\":[");
                    token_latencies(out, result.start_us, result.token_times_us);
                    out.extend_from_slice(b"]");
                    if let Some(error) = result.error {
                        out.extend_from_slice(b",\"error\":");
                        json_string(out, error);
                    }
                }
            }
        }
        out.extend_from_slice(b"}");
    }
    out.extend_from_slice(b"]");
    write_traffic(out, &request.traffic);
    out.extend_from_slice(b"}\n");
}

/// The request's `slo_class`, `tenant` and `slo_target` (seconds), those given.
fn write_traffic(out: &mut Vec<u8>, traffic: &Traffic) {
    if let Some(class) = traffic.slo_class {
        out.extend_from_slice(b",\"slo_class\":");
        json_string(out, class.name());
    }
    if let Some(tenant) = &traffic.tenant {
        out.extend_from_slice(b",\"tenant\":");
        json_string(out, tenant);
    }
    if let Some(us) = traffic.slo_target_us {
        out.extend_from_slice(b",\"slo_target\":");
        json_f64(out, us as f64 / 1e6);
    }
}

fn json_string(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing to a Vec cannot fail");
}

fn json_f64(out: &mut Vec<u8>, x: f64) {
    serde_json::to_writer(out, &x).expect("writing to a Vec cannot fail");
}

fn json_u32s(out: &mut Vec<u8>, values: &[u32]) {
    out.extend_from_slice(b"[");
    for (k, &v) in values.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(b",");
        }
        push_uint(out, u64::from(v));
    }
    out.extend_from_slice(b"]");
}

/// An unsigned integer in decimal, without `core::fmt`'s machinery (rows
/// hold several per node; token id lists thousands).
fn push_uint(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while v >= 100 {
        let pair = (v % 100) as usize;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[2 * pair..2 * pair + 2]);
    }
    if v >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[2 * v as usize..2 * v as usize + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// Two-digit strings `00`..`99`.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
                            2021222324252627282930313233343536373839\
                            4041424344454647484950515253545556575859\
                            6061626364656667686970717273747576777879\
                            8081828384858687888990919293949596979899";

/// The gaps between `start_us` and each token time, comma-separated, as
/// [`seconds_from_us`] writes them. Each usual gap (under 10 s) is built as
/// a 16-byte word pair, stored whole at a cursor in a stack chunk and the
/// cursor moved past the digits kept; the chunk is appended to the row after
/// each block of [`BLOCK`] tokens, which it always has room for, so a token
/// costs plain stores: no capacity check or length update (cachegrind, 20k
/// chat requests: `write_row` 60 instructions a token with a `Vec` push per
/// byte, 48 with the chunk checked per token, 38 by blocks).
fn token_latencies(out: &mut Vec<u8>, start_us: u64, times: &[u64]) {
    let Some((&first, rest)) = times.split_first() else { return };
    out.reserve(times.len() * 10);
    seconds_from_us(out, first - start_us);
    let mut previous = first;
    let mut chunk = [0u8; CHUNK_BYTES];
    for block in rest.chunks(BLOCK) {
        let mut at = 0;
        for &t in block {
            let us = t - previous;
            previous = t;
            if us >= 10_000_000 {
                // Rare, and may not fit 16 bytes: written to the row itself.
                out.extend_from_slice(&chunk[..at]);
                at = 0;
                out.push(b',');
                seconds_from_us(out, us);
                continue;
            }
            // `,S.` then six fraction digits from two table entries, trailing
            // zeros cut by the entries' digit counts: no division left but by
            // constants, no loop over digits. Most gaps are under a second.
            let us = us as u32;
            let (whole, frac) = if us < 1_000_000 { (0, us) } else { (us / 1_000_000, us % 1_000_000) };
            let (high, low) = (TRIPLES[(frac / 1000) as usize], TRIPLES[(frac % 1000) as usize]);
            let low_digits = low >> 24;
            let digits = if low_digits == 0 { (high >> 24).max(1) } else { 3 + low_digits };
            let word = u64::from(b',')
                | u64::from(b'0' + whole as u8) << 8
                | u64::from(b'.') << 16
                | u64::from(high & 0xff_ffff) << 24
                | u64::from(low & 0xff_ffff) << 48;
            let slot = &mut chunk[at..at + 16];
            slot[..8].copy_from_slice(&word.to_le_bytes());
            slot[8] = (low >> 16) as u8;
            at += 3 + digits as usize;
        }
        out.extend_from_slice(&chunk[..at]);
    }
}

/// Tokens written to the stack chunk between two appends to the row.
const BLOCK: usize = 64;

/// Room for a block: each token moves the cursor at most 9 bytes (`,S.` and
/// six digits) and stores 16 from it.
const CHUNK_BYTES: usize = (BLOCK - 1) * 9 + 16;

/// For `0..1000`: three ASCII digits in the low bytes, and in the top byte
/// how many of them are left once trailing zeros are cut (0 for `000`).
const TRIPLES: [u32; 1000] = {
    let mut table = [0u32; 1000];
    let mut n = 0;
    while n < 1000 {
        let d = [(n / 100) as u32, (n / 10 % 10) as u32, (n % 10) as u32];
        let significant = if d[2] != 0 {
            3
        } else if d[1] != 0 {
            2
        } else if d[0] != 0 {
            1
        } else {
            0
        };
        table[n] = (b'0' as u32 + d[0]) | (b'0' as u32 + d[1]) << 8 | (b'0' as u32 + d[2]) << 16 | significant << 24;
        n += 1;
    }
    table
};

/// Microseconds as a decimal number of seconds, shortest exact form
/// (`1200` → `0.0012`, `2000000` → `2.0`).
fn seconds_from_us(out: &mut Vec<u8>, us: u64) {
    let (whole, frac) = (us / 1_000_000, (us % 1_000_000) as usize);
    if whole < 10 {
        out.push(b'0' + whole as u8);
    } else {
        write!(out, "{whole}").expect("writing to a Vec cannot fail");
    }
    out.push(b'.');
    let mut digits = [0u8; 6];
    for (k, pair) in [frac / 10_000, frac / 100 % 100, frac % 100].into_iter().enumerate() {
        digits[2 * k..2 * k + 2].copy_from_slice(&PAIRS[2 * pair..2 * pair + 2]);
    }
    // Keep at least one digit ("2.0"), drop the other trailing zeros. (A
    // fixed-size copy then a truncate compiles to plain moves, where a
    // variable-length copy calls memcpy.)
    let len = digits.iter().rposition(|&d| d != b'0').map_or(1, |i| i + 1);
    out.extend_from_slice(&digits);
    out.truncate(out.len() - (6 - len));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::reader::{Format, Reader};

    const LINE: &str = r#"{"request_id":"a","arrival_time":1.5,"initial":[0],"sub_requests":[{"kind":"llm","input_tokens":4,"output_tokens":2,"next":[1],"interval":0.0,"input_token_ids":[1,2,3,4],"known_tokens":3,"kv_tokens":1,"model":"m\"x"},{"kind":"tool_call","input_tokens":0,"output_tokens":0,"next":[],"interval":0.25,"duration":0.5}]}"#;

    #[test]
    fn workload_rows_round_trip() {
        let request = Reader::new(LINE.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let mut out = Vec::new();
        write_workload_row(&mut out, &request);
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), LINE);
    }

    #[test]
    fn a_priority_round_trips_and_zero_is_not_written() {
        let line = r#"{"request_id":1,"arrival_time":0.0,"initial":[0],"sub_requests":[{"kind":"llm","input_tokens":4,"output_tokens":1,"next":[],"interval":0.0,"priority":-3}]}"#;
        let request = Reader::new(line.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let crate::workload::NodeKind::Llm(call) = &request.sub_requests[0].kind else { panic!("llm node") };
        assert_eq!(call.priority, -3);
        let mut out = Vec::new();
        write_workload_row(&mut out, &request);
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), line);
        let zero = line.replace("-3", "0");
        let request = Reader::new(zero.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let mut out = Vec::new();
        write_workload_row(&mut out, &request);
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), zero.replace(",\"priority\":0", ""));
    }

    #[test]
    fn traffic_round_trips_and_a_class_gives_its_calls_vllm_priority() {
        let line = r#"{"request_id":1,"arrival_time":0.0,"initial":[0,1],"sub_requests":[{"kind":"llm","input_tokens":4,"output_tokens":1,"next":[],"interval":0.0},{"kind":"llm","input_tokens":4,"output_tokens":1,"next":[],"interval":0.0,"priority":-3}],"slo_class":"batch","tenant":"team-a","slo_target":2.5}"#;
        let request = Reader::new(line.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        assert_eq!(request.traffic.class(), crate::workload::SloClass::Batch);
        assert_eq!(
            (request.traffic.tenant.as_deref(), request.traffic.slo_target_us),
            (Some("team-a"), Some(2_500_000))
        );
        let priorities: Vec<i32> = request
            .sub_requests
            .iter()
            .map(|s| match &s.kind {
                crate::workload::NodeKind::Llm(c) => c.priority,
                _ => panic!("llm nodes"),
            })
            .collect();
        assert_eq!(priorities, [5, -3], "batch's vLLM priority unless the call names its own");
        let mut out = Vec::new();
        write_workload_row(&mut out, &request);
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), line);
        let mut out = Vec::new();
        write_result_row(&mut out, &request, &mut |_| {
            Some(NodeTokens { start_us: 0, token_times_us: &[10], replica: None, error: None })
        });
        let back = Reader::new(out.as_slice(), "t", Format::Results).next().unwrap().unwrap();
        assert_eq!(back.traffic, request.traffic, "results echo the traffic attributes");
    }

    #[test]
    fn bad_traffic_names_its_field() {
        for (extra, field) in [
            (r#","slo_class":"urgent""#, "slo_class"),
            (r#","tenant":"""#, "tenant"),
            (r#","slo_target":0"#, "slo_target"),
            (r#","slo_target":-1"#, "slo_target"),
        ] {
            let line = format!(
                r#"{{"request_id":1,"arrival_time":0.0,"initial":[0],"sub_requests":[{{"kind":"llm","input_tokens":4,"output_tokens":1,"next":[],"interval":0.0}}]{extra}}}"#
            );
            let e = Reader::new(line.as_bytes(), "t", Format::Workload).next().unwrap().unwrap_err().to_string();
            assert!(e.contains(field), "{extra}: {e}");
        }
    }

    #[test]
    fn a_lora_adapter_round_trips_and_is_echoed_in_results() {
        let line = r#"{"request_id":1,"arrival_time":0.0,"initial":[0],"sub_requests":[{"kind":"llm","input_tokens":4,"output_tokens":1,"next":[],"interval":0.0,"model":"m","lora":"sql-lora"}]}"#;
        let request = Reader::new(line.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let crate::workload::NodeKind::Llm(call) = &request.sub_requests[0].kind else { panic!("llm node") };
        assert_eq!(call.lora.as_deref(), Some("sql-lora"));
        let mut out = Vec::new();
        write_workload_row(&mut out, &request);
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), line);
        let mut out = Vec::new();
        write_result_row(&mut out, &request, &mut |_| {
            Some(NodeTokens { start_us: 0, token_times_us: &[10], replica: None, error: None })
        });
        let back = Reader::new(out.as_slice(), "t", Format::Results).next().unwrap().unwrap();
        assert_eq!(back.sub_requests[0].kind, request.sub_requests[0].kind);
    }

    #[test]
    fn result_rows_carry_latencies_and_read_back() {
        let request = Reader::new(LINE.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let times = [1_512_000, 1_520_500];
        let mut out = Vec::new();
        write_result_row(&mut out, &request, &mut |_| {
            Some(NodeTokens { start_us: 1_500_000, token_times_us: &times, replica: None, error: Some("e") })
        });
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""token_latency":[0.012,0.0085],"error":"e""#), "{text}");
        let back = Reader::new(text.as_bytes(), "t", Format::Results).next().unwrap().unwrap();
        assert_eq!(back.sub_requests[0].result.as_ref().unwrap().token_latency, vec![0.012, 0.0085]);
    }

    #[test]
    fn integers_format_as_display_does() {
        for v in [0u64, 7, 10, 99, 100, 12_345, 4_294_967_295, u64::MAX] {
            let mut out = Vec::new();
            push_uint(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap(), v.to_string());
        }
    }

    #[test]
    fn token_latencies_match_one_by_one_formatting() {
        let mut times = vec![5, 1_000_005, 1_001_205, 12_001_205, 12_001_206, 21_999_999, 22_000_000];
        // Every trailing-zero count and digit position, under 10 s.
        let mut t = 22_000_000u64;
        for gap in (0..10_000_000u64).step_by(997).chain([1, 10, 100, 1000, 10_000, 100_000, 9_999_999, 1_000_010]) {
            t += gap;
            times.push(t);
        }
        // Gaps too long for a token's 16 bytes, one after another at the end.
        for _ in 0..3 {
            t += 86_400_000_001;
            times.push(t);
        }
        let mut fast = b"row so far".to_vec();
        token_latencies(&mut fast, 0, &times);
        let mut slow = b"row so far".to_vec();
        let mut previous = 0;
        for (k, &t) in times.iter().enumerate() {
            if k > 0 {
                slow.push(b',');
            }
            seconds_from_us(&mut slow, t - previous);
            previous = t;
        }
        assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(slow).unwrap());
    }

    #[test]
    fn microseconds_format_as_the_same_f64() {
        for us in [0u64, 1, 10, 1200, 999_999, 1_000_000, 2_000_000, 12_345_678, 86_400_000_001] {
            let mut out = Vec::new();
            seconds_from_us(&mut out, us);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.parse::<f64>().unwrap(), us as f64 / 1e6, "{us} -> {text}");
        }
        let mut out = Vec::new();
        seconds_from_us(&mut out, 1200);
        assert_eq!(out, b"0.0012");
    }
}

//! `azure`: the Azure LLM inference traces of 2023 (Splitwise, ISCA'24;
//! `AzureLLMInferenceTrace_conv.csv`, `…_code.csv`): `TIMESTAMP`
//! (`YYYY-MM-DD HH:MM:SS.fffffff`, sorted), `ContextTokens`, `GeneratedTokens`.
//!
//! Mapping: request `i` (0-based row order) arrives at `TIMESTAMP` − the
//! first row's `TIMESTAMP` with one llm call of `ContextTokens` prompt and
//! `GeneratedTokens` output tokens; the trace has no prompt content, so no
//! token ids and no prefix-cache hits. Timestamps must not decrease.

use std::path::Path;

use super::common::{ImportError, Requests, one_call, open_file, tokens};
use crate::workload::LlmCall;

/// Streams `path`.
pub(super) fn open(path: &Path) -> Result<Requests, ImportError> {
    let file = path.display().to_string();
    let mut reader = csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h.trim() == name).ok_or_else(|| ImportError::new(&file, 1, name, "missing column"))
    };
    let (c_time, c_in, c_out) = (column("TIMESTAMP")?, column("ContextTokens")?, column("GeneratedTokens")?);
    let mut records = reader.into_records();
    let mut index = 0u64;
    let mut first_us: Option<i64> = None;
    let mut last_us = i64::MIN;
    Ok(Box::new(std::iter::from_fn(move || {
        let record = records.next()?;
        let line = index + 2;
        let at = |column: &str, reason: String| ImportError::new(&file, line, column, reason);
        let result = (|| {
            let record = record.map_err(|e| at("csv", e.to_string()))?;
            let field = |c: usize| record.get(c).unwrap_or("").trim();
            let t = timestamp_us(field(c_time)).map_err(|e| at("TIMESTAMP", e))?;
            if t < last_us {
                return Err(at("TIMESTAMP", format!("`{}` is before the previous row's", field(c_time))));
            }
            last_us = t;
            let start = *first_us.get_or_insert(t);
            let count = |c: usize, name: &str, min: i64| {
                let v: i64 = field(c).parse().map_err(|_| at(name, format!("`{}` is not a count", field(c))))?;
                tokens(v, min).map_err(|e| at(name, e))
            };
            let input = count(c_in, "ContextTokens", 1)?;
            let output = count(c_out, "GeneratedTokens", 1)?;
            let arrival_s = (t - start) as f64 / 1e6;
            crate::workload::checked_seconds_to_us(arrival_s).map_err(|e| at("TIMESTAMP", e))?;
            Ok(one_call(index, arrival_s, LlmCall::new(input, output)))
        })();
        index += 1;
        Some(result)
    })))
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` as µs since 1970-01-01 (the trace's
/// clock has no zone; only differences are used).
fn timestamp_us(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not YYYY-MM-DD HH:MM:SS.fffffff");
    let (date, time) = text.split_once(' ').ok_or_else(bad)?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().map_err(|_| bad()));
    let (y, m, day) = (d.next().ok_or_else(bad)??, d.next().ok_or_else(bad)??, d.next().ok_or_else(bad)??);
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().map_err(|_| bad()));
    let (hh, mm, ss) = (t.next().ok_or_else(bad)??, t.next().ok_or_else(bad)??, t.next().ok_or_else(bad)??);
    if t.next().is_some() || !(0..24).contains(&hh) || !(0..60).contains(&mm) || !(0..61).contains(&ss) {
        return Err(bad());
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // Microseconds from the first six fraction digits, rounded by the seventh.
    let digits: Vec<i64> = frac.bytes().map(|b| i64::from(b - b'0')).chain(std::iter::repeat(0)).take(7).collect();
    let micros = digits[..6].iter().fold(0, |acc, d| acc * 10 + d) + i64::from(digits[6] >= 5);
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + hh) * 60 + mm) * 60_000_000 + ss * 1_000_000 + micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_microseconds_since_the_epoch() {
        assert_eq!(timestamp_us("1970-01-01 00:00:00").unwrap(), 0);
        assert_eq!(timestamp_us("1970-01-02 00:00:01.5").unwrap(), 86_401_500_000);
        let a = timestamp_us("2023-11-16 18:15:46.6805900").unwrap();
        let b = timestamp_us("2023-11-16 18:15:50.9951690").unwrap();
        assert_eq!(b - a, 4_314_579);
        // 2023-11-16 is day 19,677 since 1970-01-01.
        assert_eq!(a.div_euclid(86_400_000_000), 19_677);
        for bad in ["2023-11-16", "2023-13-01 00:00:00", "2023-11-16 25:00:00", "2023-11-16 18:15:46.x"] {
            assert!(timestamp_us(bad).is_err(), "{bad}");
        }
    }
}

//! `csv`: a plain CSV with a header row, for traces that come from nowhere
//! in particular. Columns (any order; any other is an error naming it):
//! - `arrival`: seconds from the run's start (a decimal number ≥ 0), kept as
//!   given; rows may come in any order.
//! - `input_tokens`, `output_tokens`: the prompt's full length and the
//!   tokens generated, each ≥ 1.
//! - `session` (optional): rows with the same non-empty value are one
//!   conversation, in file order, their arrivals not decreasing. A row of a
//!   session sends the conversation so far: its prompt starts with the
//!   previous row's prompt then output (as much of them as its
//!   `input_tokens` holds), so the prefix cache finds them; new tokens fill
//!   the rest.
//! - `prefix` and `prefix_tokens` (optional, together): rows naming the same
//!   non-empty `prefix` group start their prompts with the same
//!   `prefix_tokens` tokens (a shared system prompt: the group's token ids,
//!   as far as each row's count goes). A later row of a session already
//!   starts with its session's prefix, so it may name only that one.
//!
//! Sessions (`--session-mode`): `closed-loop` (default) makes each session
//! one request DAG at its first row's arrival whose calls chain: row `j`
//! waits, after row `j − 1`'s reply, the gap between their recorded arrivals
//! (the whole gap is taken as think time: the file has no service times, so
//! a simulated session lasts its calls' service times longer than
//! recorded). `fixed-accumulate` sends every row at its own arrival, with
//! the same prompts. A row without a session is a one-call request at its
//! arrival in either mode; with no `prefix` either it carries no token ids
//! (nothing could share them). Requests are numbered from 0 in arrival
//! order (file order among equal arrivals).

use std::collections::HashMap;
use std::path::Path;

use super::common::{
    ImportError, ImportOptions, Input, Requests, SessionMode, csv_records, fresh_tokens, open_file, tokens,
};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// The columns this format reads, required first.
const COLUMNS: [&str; 6] = ["arrival", "input_tokens", "output_tokens", "session", "prefix", "prefix_tokens"];

/// One row.
#[derive(Debug, Clone)]
struct Row {
    line: u64,
    arrival_s: f64,
    input: u32,
    output: u32,
    /// The prefix group's key and its token count.
    prefix: Option<(String, u32)>,
}

/// Reads `path`: streamed, row by row, when it has no sessions or prefix
/// groups and its rows are in arrival order (one column read ahead tells);
/// else whole (rows grouped by session, then sorted by arrival).
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let file = path.display().to_string();
    let mode = options.session_mode.unwrap_or(SessionMode::ClosedLoop);
    if mode == SessionMode::Fixed {
        return Err(ImportError::new(
            &file,
            0,
            "session_mode",
            "csv sessions grow their context: replay them closed-loop (the default) or fixed-accumulate",
        ));
    }
    let (mut reader, columns) = header(path)?;
    if columns[3].is_none() && columns[4].is_none() && arrivals_sorted(path, columns[0]) {
        // Every row its own request, already in arrival order: streamed,
        // nothing kept (the whole-file path below held ~0.5 KB a row).
        let mut k = 0;
        return Ok(csv_records(reader, path, move |file, line, record| {
            let (row, _) = parse_row(file, line, record, &columns)?;
            let mut built = Vec::with_capacity(1);
            unit_requests(k, &[row], mode, &mut built);
            let (_, mut request) = built.pop().expect("a row is a request");
            request.request_id = RequestId::Int(k);
            k += 1;
            Ok(request)
        }));
    }
    let units = read(&mut reader, &columns, &file)?;
    let mut requests: Vec<(u64, Request)> = Vec::new();
    for (k, rows) in units.iter().enumerate() {
        unit_requests(k as u64, rows, mode, &mut requests);
    }
    requests.sort_by(|a, b| a.1.arrival_time.total_cmp(&b.1.arrival_time).then(a.0.cmp(&b.0)));
    Ok(Box::new(requests.into_iter().enumerate().map(|(i, (_, mut r))| {
        r.request_id = RequestId::Int(i as u64);
        Ok(r)
    })))
}

/// Unit `k`'s requests (a session's one, or a lone row's), each with the
/// line it sorts by, onto `out`.
fn unit_requests(k: u64, rows: &[Row], mode: SessionMode, out: &mut Vec<(u64, Request)>) {
    // A lone row outside any prefix group shares nothing: fresh ids
    // would be hashed by the prefix cache, never found, and written
    // into its result row (2 KB of a chat row's 2.5): it has none.
    let lone = rows.len() == 1 && rows[0].prefix.is_none();
    let (prompts, outputs) = if lone { (vec![None], vec![None]) } else { token_ids(k, rows) };
    let calls = rows
        .iter()
        .zip(prompts.into_iter().zip(outputs))
        .map(|(r, (prompt, output))| LlmCall::new(r.input, r.output).with_input_ids(prompt).with_output_ids(output));
    if mode == SessionMode::ClosedLoop {
        let nodes: Vec<SubRequest> = calls
            .enumerate()
            .map(|(j, call)| SubRequest {
                next: if j + 1 < rows.len() { vec![j as u32 + 1] } else { vec![] },
                interval: if j == 0 { 0.0 } else { gap_s(&rows[j - 1], &rows[j]) },
                kind: NodeKind::Llm(call),
                result: None,
            })
            .collect();
        let request = Request {
            traffic: Default::default(),
            request_id: RequestId::Int(0),
            arrival_time: rows[0].arrival_s,
            initial: vec![0],
            sub_requests: nodes,
        };
        out.push((rows[0].line, request));
    } else {
        for (r, call) in rows.iter().zip(calls) {
            out.push((r.line, super::common::one_call(0, r.arrival_s, call)));
        }
    }
}

/// Whether every row's `arrival` (column `c`) parses as a number ≥ 0 and
/// none is earlier than the one before: then file order is arrival order
/// and the rows can be streamed. A read of that one column ahead of the
/// run (any doubt, a bad row included, answers no: the whole-file path
/// then reads as before and names it).
fn arrivals_sorted(path: &Path, c: Option<usize>) -> bool {
    let (Some(c), Ok(input)) = (c, open_file(path)) else { return false };
    let mut reader = ::csv::Reader::from_reader(input);
    let mut record = ::csv::ByteRecord::new();
    let mut previous = 0.0;
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => return true,
            Ok(true) => {}
            Err(_) => return false,
        }
        let arrival =
            record.get(c).and_then(|f| std::str::from_utf8(f).ok()).and_then(|f| f.trim().parse::<f64>().ok());
        match arrival {
            Some(a) if a.is_finite() && a >= previous => previous = a,
            _ => return false,
        }
    }
}

/// The recorded gap between two rows of a session, s, to the µs.
fn gap_s(before: &Row, after: &Row) -> f64 {
    ((after.arrival_s - before.arrival_s) * 1e6).round() / 1e6
}

/// The reader of `path` past its header row, and the header's column
/// index of each of [`COLUMNS`], checked.
fn header(path: &Path) -> Result<(::csv::Reader<Input>, Columns), ImportError> {
    let file = path.display().to_string();
    let mut reader = ::csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let mut at_column: Columns = [None; 6];
    for (c, name) in headers.iter().enumerate() {
        let name = name.trim();
        let Some(k) = COLUMNS.iter().position(|&known| known == name) else {
            return Err(ImportError::new(
                &file,
                1,
                name,
                format!("unknown column; the columns are {}", COLUMNS.join(", ")),
            ));
        };
        if at_column[k].replace(c).is_some() {
            return Err(ImportError::new(&file, 1, name, "named twice"));
        }
    }
    for (k, name) in COLUMNS.iter().enumerate().take(3) {
        if at_column[k].is_none() {
            return Err(ImportError::new(&file, 1, name, "missing column"));
        }
    }
    match (at_column[4], at_column[5]) {
        (Some(_), None) => return Err(ImportError::new(&file, 1, "prefix", "needs a prefix_tokens column")),
        (None, Some(_)) => return Err(ImportError::new(&file, 1, "prefix_tokens", "needs a prefix column")),
        _ => {}
    }
    Ok((reader, at_column))
}

/// Where each of [`COLUMNS`] is in the file, if it is.
type Columns = [Option<usize>; 6];

/// The row on `line`, checked, and its session (empty: none).
fn parse_row<'r>(
    file: &str,
    line: u64,
    record: &'r ::csv::StringRecord,
    at_column: &Columns,
) -> Result<(Row, &'r str), ImportError> {
    let at = |column: &str, reason: String| ImportError::new(file, line, column, reason);
    let field = |k: usize| at_column[k].map_or("", |c| record.get(c).unwrap_or("").trim());
    let count = |k: usize, min: i64| -> Result<u32, ImportError> {
        let v: i64 = field(k).parse().map_err(|_| at(COLUMNS[k], format!("`{}` is not a count", field(k))))?;
        tokens(v, min).map_err(|e| at(COLUMNS[k], e))
    };
    let arrival_s: f64 =
        field(0).parse().map_err(|_| at("arrival", format!("`{}` is not a number of seconds", field(0))))?;
    if arrival_s < 0.0 {
        return Err(at("arrival", format!("{arrival_s} is negative")));
    }
    crate::workload::checked_seconds_to_us(arrival_s).map_err(|e| at("arrival", e))?;
    let input = count(1, 1)?;
    let output = count(2, 1)?;
    let prefix = match field(4) {
        "" if field(5).is_empty() || field(5) == "0" => None,
        "" => return Err(at("prefix_tokens", format!("{} given without a prefix group", field(5)))),
        group => {
            let n = count(5, 1)?;
            if n > input {
                return Err(at("prefix_tokens", format!("{n} is more than the row's {input} input tokens")));
            }
            Some((group.to_owned(), n))
        }
    };
    Ok((Row { line, arrival_s, input, output, prefix }, field(3)))
}

/// The rows after the header: each session's rows together (sessions in
/// order of their first row), a row without a session alone.
fn read(reader: &mut ::csv::Reader<Input>, at_column: &Columns, file: &str) -> Result<Vec<Vec<Row>>, ImportError> {
    let mut units: Vec<Vec<Row>> = Vec::new();
    let mut session_unit: HashMap<String, usize> = HashMap::new();
    for (i, record) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let at = |column: &str, reason: String| ImportError::new(file, line, column, reason);
        let record = record.map_err(|e| at("csv", e.to_string()))?;
        let (row, session) = parse_row(file, line, &record, at_column)?;
        let arrival_s = row.arrival_s;
        if session.is_empty() {
            units.push(vec![row]);
            continue;
        }
        let Some(&k) = session_unit.get(session) else {
            session_unit.insert(session.to_owned(), units.len());
            units.push(vec![row]);
            continue;
        };
        let (first, last) = (&units[k][0], units[k].last().expect("a session has a row"));
        if arrival_s < last.arrival_s {
            return Err(at(
                "arrival",
                format!(
                    "{arrival_s} is before session {session}'s previous row (line {}, {})",
                    last.line, last.arrival_s
                ),
            ));
        }
        if let Some((group, _)) = &row.prefix
            && first.prefix.as_ref().map(|p| &p.0) != Some(group)
        {
            return Err(at(
                "prefix",
                format!(
                    "{group}: a later row of session {session} starts with the session's context (line {}'s prefix \
                     group, if any), so it names that group or none",
                    first.line
                ),
            ));
        }
        units[k].push(row);
    }
    Ok(units)
}

/// A stream of token ids for prefix group `name`: FNV-1a of its bytes with
/// the top bit set, so no group shares a stream with a unit (numbered from 0).
fn group_stream(name: &str) -> u64 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    hash | 1 << 63
}

/// A call's token ids, where it has them.
type Ids = Option<Vec<u32>>;

/// Every row's prompt and output token ids for unit `k` (a session or a
/// lone row).
fn token_ids(k: u64, rows: &[Row]) -> (Vec<Ids>, Vec<Ids>) {
    let mut drawn = 0u64;
    let mut draw = |n: usize| -> Vec<u32> {
        let ids: Vec<u32> = fresh_tokens(k, drawn, n).collect();
        drawn += n as u64;
        ids
    };
    let mut prompts: Vec<Vec<u32>> = Vec::with_capacity(rows.len());
    let mut outputs: Vec<Vec<u32>> = Vec::with_capacity(rows.len());
    for (j, r) in rows.iter().enumerate() {
        let len = r.input as usize;
        let mut prompt: Vec<u32> = if j == 0 {
            r.prefix
                .as_ref()
                .map_or_else(Vec::new, |(group, n)| fresh_tokens(group_stream(group), 0, *n as usize).collect())
        } else {
            prompts[j - 1].iter().chain(&outputs[j - 1]).take(len).copied().collect()
        };
        let rest = len - prompt.len();
        prompt.extend(draw(rest));
        prompts.push(prompt);
        outputs.push(draw(r.output as usize));
    }
    (prompts.into_iter().map(Some).collect(), outputs.into_iter().map(Some).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../../tests/data/import/csv/trace.csv");

    fn open_str(text: &str, mode: Option<SessionMode>) -> Result<Vec<Request>, ImportError> {
        let options = ImportOptions { session_mode: mode, ..Default::default() };
        super::super::common::tests::open_text(open, text, &options)
    }

    use super::super::common::tests::llm_calls as calls;

    #[test]
    fn a_sorted_sessionless_file_streams_to_the_same_requests_as_the_whole_file_path() {
        let rows = "0.5,10,2\n0.5,11,3\n1.25,12,4\n7,13,5\n";
        for mode in [None, Some(SessionMode::FixedAccumulate)] {
            assert!(arrivals_sorted_text(&format!("arrival,input_tokens,output_tokens\n{rows}")));
            let streamed = open_str(&format!("arrival,input_tokens,output_tokens\n{rows}"), mode).unwrap();
            // A session column, every value empty: read whole, the same rows.
            let with_sessions: String = rows.lines().map(|l| format!("{l},\n")).collect();
            let whole =
                open_str(&format!("arrival,input_tokens,output_tokens,session\n{with_sessions}"), mode).unwrap();
            assert_eq!(format!("{streamed:?}"), format!("{whole:?}"));
            assert_eq!(streamed.len(), 4);
        }
        // Out of order: read whole and sorted, as before.
        let unsorted = "arrival,input_tokens,output_tokens\n2,10,2\n1,11,3\n";
        assert!(!arrivals_sorted_text(unsorted));
        let r = open_str(unsorted, None).unwrap();
        assert_eq!(calls(&r[0])[0].input_tokens, 11);
        // A bad row after good ones is named alike on either path.
        let bad = "arrival,input_tokens,output_tokens\n0,10,2\n1,x,3\n";
        assert!(arrivals_sorted_text(bad));
        let e = open_str(bad, None).unwrap_err().to_string();
        assert!(e.ends_with(":3: input_tokens: `x` is not a count"), "{e}");
    }

    fn arrivals_sorted_text(text: &str) -> bool {
        let path = std::env::temp_dir().join(format!("blis-csv-sorted-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let sorted = arrivals_sorted(&path, Some(0));
        let _ = std::fs::remove_file(&path);
        sorted
    }

    #[test]
    fn the_fixture_groups_sessions_and_prefixes() {
        let requests = open_str(FIXTURE, None).unwrap();
        // Rows (line: arrival, in, out, session, prefix/tokens):
        //  2: 0.0  100 20 a  sys/64     3: 0.5  50 10 -  sys/32
        //  4: 2.0  150 30 a  -          5: 1.0  40 5  b  -
        //  6: 3.5  200 10 b  -          7: 0.25 30 3  -  -
        // Requests by arrival: a (0.0), row 7 (0.25), row 3 (0.5), b (1.0).
        let arrivals: Vec<f64> = requests.iter().map(|r| r.arrival_time).collect();
        assert_eq!(arrivals, [0.0, 0.25, 0.5, 1.0]);
        let shape: Vec<Vec<(u32, u32)>> =
            requests.iter().map(|r| calls(r).iter().map(|c| (c.input_tokens, c.output_tokens)).collect()).collect();
        assert_eq!(shape, [vec![(100, 20), (150, 30)], vec![(30, 3)], vec![(50, 10)], vec![(40, 5), (200, 10)]]);
        // Think time: the recorded gap between a session's rows.
        assert_eq!(requests[0].sub_requests[1].interval, 2.0);
        assert_eq!(requests[3].sub_requests[1].interval, 2.5);
        assert_eq!(requests[0].sub_requests[0].next, vec![1]);
        let ids = |r: usize, n: usize| calls(&requests[r])[n].input_token_ids.clone().unwrap();
        let out = |r: usize, n: usize| calls(&requests[r])[n].output_token_ids.clone().unwrap();
        // Session a's second prompt: its first prompt, its first output, new.
        assert_eq!(&ids(0, 1)[..100], &ids(0, 0)[..]);
        assert_eq!(&ids(0, 1)[100..120], &out(0, 0)[..]);
        // Group sys: rows 2 and 3 share the shorter count, 32 tokens, only.
        assert_eq!(ids(0, 0)[..32], ids(2, 0)[..32]);
        assert_ne!(ids(0, 0)[32..50], ids(2, 0)[32..]);
        // Row 7, alone and in no group, shares nothing: it has no ids.
        assert_eq!(calls(&requests[1])[0].input_token_ids, None);
        assert_eq!(calls(&requests[1])[0].output_token_ids, None);
    }

    #[test]
    fn fixed_accumulate_sends_each_row_at_its_arrival() {
        let requests = open_str(FIXTURE, Some(SessionMode::FixedAccumulate)).unwrap();
        let arrivals: Vec<f64> = requests.iter().map(|r| r.arrival_time).collect();
        assert_eq!(arrivals, [0.0, 0.25, 0.5, 1.0, 2.0, 3.5]);
        let dag = open_str(FIXTURE, None).unwrap();
        // Row 4 (session a's second call): the same prompt either way.
        assert_eq!(calls(&requests[4])[0].input_token_ids, calls(&dag[0])[1].input_token_ids);
        assert!(open_str(FIXTURE, Some(SessionMode::Fixed)).is_err());
    }

    #[test]
    fn bad_headers_and_rows_are_named() {
        let e = open_str("arrival,input_tokens\n0,1\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str(), e.reason.as_str()), (1, "output_tokens", "missing column"));
        let e = open_str("arrival,input_tokens,output_tokens,model\n0,1,1,x\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "model"), "{e}");
        let e = open_str("arrival,input_tokens,output_tokens\n0,1,1\n1,0,1\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (3, "input_tokens"), "{e}");
        let e = open_str("arrival,input_tokens,output_tokens,session\n1,1,1,s\n0.5,1,1,s\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (3, "arrival"), "{e}");
        let e = open_str("arrival,input_tokens,output_tokens,prefix,prefix_tokens\n0,10,1,p,11\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (2, "prefix_tokens"), "{e}");
        let e = open_str("arrival,input_tokens,output_tokens,prefix\n0,10,1,p\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "prefix"), "{e}");
        let e = open_str("arrival,input_tokens,output_tokens\n-1,10,1\n", None).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (2, "arrival"), "{e}");
    }
}

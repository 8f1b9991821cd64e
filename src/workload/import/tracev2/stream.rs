//! TraceV2's streamed path. A trace whose records are each a request of
//! their own — open loop (`--session-mode fixed`, no pool), no accumulate
//! corpus, no `prefix_parent` or `dag` — with no send times recorded, no
//! Unix-epoch arrivals (nothing to rebase) and its requests in arrival
//! order is read record by record as the run asks: nothing is kept but each
//! prefix group's length (and prompt, once drawn) and the ids seen, as
//! ranges. One read of the few columns that decide it goes first
//! ([`scan`]); any doubt, a bad record included, keeps the whole-file path,
//! which names it. The whole-file path held every record and built every
//! request before the run started: ~0.8 KB a request, 806 MiB for 1M.

use std::collections::HashMap;
use std::path::Path;

use super::super::common::{ImportError, ImportOptions, Input, Requests, csv_records, fresh_tokens, open_file, tokens};
use super::{Columns, EPOCH_US, as_served, parse_record, single, standalone_tokens, stream_of};
use crate::workload::RequestId;
use crate::workload::reader::IdSet;

/// At most this many prefix groups are held for a streamed trace (more:
/// the whole-file path).
const MAX_GROUPS: usize = 4096;

/// What [`scan`] found: each prefix group's length (its first positive
/// `prefix_length`, in file order, as the whole-file path takes it).
pub(super) struct Scan {
    group_len: HashMap<String, u32>,
}

/// Reads the columns that decide whether the data at `path` can be
/// streamed; `None` where it cannot, or where anything is in doubt.
pub(super) fn scan(path: &Path, c: &Columns) -> Option<Scan> {
    let mut reader = csv::Reader::from_reader(open_file(path).ok()?);
    let mut record = csv::ByteRecord::new();
    let mut group_len: HashMap<String, u32> = HashMap::new();
    let mut previous = 0u64;
    loop {
        if !reader.read_byte_record(&mut record).ok()? {
            return Some(Scan { group_len });
        }
        let text = |c: Option<usize>| -> Option<&str> {
            match c.and_then(|c| record.get(c)) {
                None => Some(""),
                Some(f) => std::str::from_utf8(f).ok().map(str::trim),
            }
        };
        // As the record's own parse reads a count: empty is 0, else a
        // non-negative integer.
        let int = |c: Option<usize>| -> Option<u64> {
            match text(c)? {
                "" => Some(0),
                v => u64::try_from(v.parse::<i64>().ok()?).ok(),
            }
        };
        if !text(c.parent)?.is_empty() || !text(c.dag)?.is_empty() || int(c.send)? != 0 {
            return None;
        }
        let arrival = int(Some(c.arrival))?;
        if arrival >= EPOCH_US {
            return None;
        }
        // The request's arrival: less a first round's think time (`root_wait`).
        let wait = if int(c.round)? == 0 { int(c.think)?.min(arrival) } else { 0 };
        if arrival - wait < previous {
            return None;
        }
        previous = arrival - wait;
        let group = text(c.group)?;
        let len = tokens(i64::try_from(int(c.prefix)?).ok()?, 0).ok()?;
        if !group.is_empty() && len > 0 && !group_len.contains_key(group) {
            if group_len.len() >= MAX_GROUPS {
                return None;
            }
            group_len.insert(group.to_owned(), len);
        }
    }
}

/// The records of the data at `path` (`reader` past its header, columns
/// `cols`) as requests, one at a time (see the module doc; [`scan`] said
/// yes).
pub(super) fn requests(
    reader: csv::Reader<Input>,
    cols: Columns,
    path: &Path,
    options: &ImportOptions,
    scan: Scan,
) -> Requests {
    let mut groups: HashMap<String, (u32, Vec<u32>)> =
        scan.group_len.into_iter().map(|(g, n)| (g, (n, Vec::new()))).collect();
    let mut ids = IdSet::default();
    let options = options.clone();
    let data = path.to_owned();
    csv_records(reader, path, move |file, line, record| {
        let mut new_id = |id: u64| {
            if ids.insert(&RequestId::Int(id)) {
                Ok(())
            } else {
                Err(format!("{id} repeats the id of line {}", first_line(&data, cols.id, id)))
            }
        };
        let (mut r, _) = parse_record(file, line, record, &cols, &mut new_id)?;
        as_served(&mut r, &options, file)?;
        // No send time (the scan saw none): it arrives at its arrival.
        r.arrival_us = r.arrival_time_us;
        crate::workload::checked_seconds_to_us(r.arrival_us as f64 / 1e6)
            .map_err(|e| ImportError::new(file, line, "arrival_time_us", e))?;
        // The group's prompt is drawn once the first record the engine is
        // given ids for needs it; lengths alone until then.
        let (group_len, group): (u32, &[u32]) = match groups.get_mut(r.group.as_str()) {
            None => (0, &[]),
            Some((n, prompt)) => {
                if prompt.is_empty() && r.ids.0 {
                    *prompt = fresh_tokens(stream_of(&r.group), 0, *n as usize).collect();
                }
                (*n, prompt)
            }
        };
        Ok(single(&r, standalone_tokens(&r, group_len, group, 0)).1)
    })
}

/// The line of the first record of `path` whose `request_id` (column `c`)
/// is `id`: for the message naming a repeat, the only place the streamed
/// path needs it.
fn first_line(path: &Path, c: usize, id: u64) -> u64 {
    let Ok(input) = open_file(path) else { return 0 };
    let mut reader = csv::Reader::from_reader(input);
    let mut record = csv::ByteRecord::new();
    let mut line = 1;
    while let Ok(true) = reader.read_byte_record(&mut record) {
        line += 1;
        let this = record.get(c).and_then(|f| std::str::from_utf8(f).ok()).and_then(|f| f.trim().parse::<u64>().ok());
        if this == Some(id) {
            return line;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::super::super::common::ImportOptions;
    use crate::workload::Request;

    const HEADER: &str = "trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n";
    const COLUMNS: &str = "request_id,session_id,round_index,prefix_group,prefix_length,input_tokens,output_tokens,\
                           arrival_time_us,think_time_us,token_ids,adapter,vllm_priority,slo_class";
    /// (id, group, prefix length, arrival µs, think µs, token_ids, priority): arrivals
    /// distinct once a first round's think time is taken off.
    const ROWS: [&str; 6] = [
        "0,s0,0,sys,64,100,5,1000,0,,a,,",
        "1,,0,sys,64,30,4,2000,500,none,,3,batch",
        "2,s1,0,,0,40,3,4000,0,prompt,,,",
        "3,s0,1,sys,64,10,2,5000,0,,,,",
        "4,,0,other,16,20,6,9000,100,,,-1,",
        "5,,0,,0,50,7,12000,0,none,,,",
    ];

    /// The requests the pair (header, `rows` under [`COLUMNS`]) opens to, and
    /// whether it was streamed.
    fn open(rows: &[&str], tag: &str) -> (Result<Vec<Request>, String>, bool) {
        let dir = std::env::temp_dir().join(format!("blis-tracev2-stream-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (header, data) = (dir.join("t.yaml"), dir.join("t.csv"));
        std::fs::write(&header, HEADER).unwrap();
        std::fs::write(&data, format!("{COLUMNS}\n{}\n", rows.join("\n"))).unwrap();
        let options = ImportOptions { trace_data: Some(data.clone()), priorities: true, ..Default::default() };
        let (_, cols) = super::super::data_columns(&data).unwrap();
        let streamed = super::scan(&data, &cols).is_some();
        let requests = super::super::open(&header, &options)
            .and_then(|r| r.collect::<Result<Vec<_>, _>>())
            .map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        (requests, streamed)
    }

    #[test]
    fn a_sorted_trace_streams_to_the_requests_the_whole_file_path_builds() {
        let (streamed, was) = open(&ROWS, "sorted");
        assert!(was);
        // The same records backwards: read whole, sorted back by arrival.
        let reversed: Vec<&str> = ROWS.iter().rev().copied().collect();
        let (whole, was) = open(&reversed, "reversed");
        assert!(!was);
        let (streamed, whole) = (streamed.unwrap(), whole.unwrap());
        assert_eq!(streamed.len(), 6);
        assert_eq!(format!("{streamed:?}"), format!("{whole:?}"));
    }

    #[test]
    fn a_streamed_trace_names_a_repeated_id_and_a_bad_priority_by_line() {
        let mut rows = ROWS.to_vec();
        rows[4] = "1,,0,other,16,20,6,9000,100,,,-1,";
        let e = open(&rows, "repeat").0.unwrap_err();
        assert!(e.ends_with("t.csv:6: request_id: 1 repeats the id of line 3"), "{e}");
        rows[4] = "4,,0,other,16,20,6,9000,100,,,x,";
        let e = open(&rows, "priority").0.unwrap_err();
        assert!(e.ends_with(":6: vllm_priority: `x` is not a 32-bit integer"), "{e}");
    }
}

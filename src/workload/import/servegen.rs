//! `servegen`: ServeGen's client data (alibaba/ServeGen, `data/<category>/<model>/`),
//! generated into requests as ServeGen's own `generate_workload` does
//! (`servegen/construct.py`, `servegen/clientpool.py`) at the recorded rates.
//!
//! Read: a folder of clients, `chunk-<id>-trace.csv` with
//! `chunk-<id>-dataset.json` beside it, or one trace file (its dataset
//! beside it). A trace row, no header: `timestamp` (s, a window's start),
//! `rate` (req/s), `cv`, `pattern` (`Gamma`, `Weibull`, or empty: no
//! requests), and the pattern's `shape, scale`. Every client has the same
//! window starts. A dataset is a JSON object from a window start to its
//! fields, each a Python dict literal `{tokens: probability, …}` (a PMF);
//! an empty `{}` means no data there. A window uses the dataset of the
//! latest start at or before its own; fields `input_tokens` and
//! `output_tokens` (language and reasoning models; `reason_ratio` is read
//! and ignored). Multimodal data (`text_tokens`, images…) is refused by
//! name.
//!
//! Mapping, window by window, client by client (numeric id order), from one
//! generator seeded by the run's seed:
//! - `n = ceil(rate × window)` inter-arrival times from the window's pattern
//!   (Gamma(shape, scale) or Weibull(shape, scale)), rescaled to sum to the
//!   window, added up from its start; those before its end are sent (so
//!   mostly n − 1). A window lasts to the next start; the last one as long
//!   as the one before it (600 s, ServeGen's windows, when there is one).
//! - Each request's lengths: one uniform draw `u`, and for each field the
//!   first token count whose cumulative probability reaches `u` (numpy's
//!   `searchsorted`, on one draw for all fields as ServeGen does, so input
//!   and output lengths rise together). A count of 0 is sent as 1.
//! - Requests are in arrival order across clients (ties: client order).
//!   Prompts carry no token ids (ServeGen records no content): no prefix
//!   sharing. The draws are this crate's (Xoshiro, rand_distr), not numpy's:
//!   the same process, not ServeGen's byte-identical requests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Gamma, Weibull};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::common::{ImportError, ImportOptions, Requests, one_call};
use crate::workload::types::LlmCall;

/// The last window's length when a trace has a single row: ServeGen's
/// traces are in 600 s windows (every `data/*/*/chunk-*-trace.csv`).
const DEFAULT_WINDOW_S: u64 = 600;
/// The most requests one client's window may ask for (`rate × window`): the
/// window's times are drawn at once.
const MAX_WINDOW_REQUESTS: f64 = (1u64 << 20) as f64;
/// How far a PMF may sum from 1 (ServeGen's own check, `np.isclose(sum, 1,
/// atol=1e-6)`).
const PMF_TOLERANCE: f64 = 1e-6;

/// An arrival pattern.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    Gamma(f64, f64),
    Weibull(f64, f64),
}

/// A window of one client's trace.
#[derive(Debug, Clone)]
struct Window {
    line: u64,
    start: u64,
    rate: f64,
    pattern: Option<Pattern>,
}

/// A PMF as its support and cumulative probabilities (zero-probability
/// counts left out: they are never the first to reach a draw above 0).
#[derive(Debug, Clone, Default)]
struct Cdf {
    values: Vec<u32>,
    cumulative: Vec<f64>,
}

impl Cdf {
    /// The first count whose cumulative probability reaches `u`; past the
    /// last (a sum a rounding below 1), one beyond the largest, as numpy's
    /// `searchsorted` on the dense PMF.
    fn sample(&self, u: f64) -> u32 {
        let i = self.cumulative.partition_point(|&c| c < u);
        match self.values.get(i) {
            Some(&v) => v,
            None => self.values.last().map_or(0, |&v| v.saturating_add(1)),
        }
    }
}

#[derive(Debug, Clone)]
struct Data {
    input: Cdf,
    output: Cdf,
}

#[derive(Debug)]
struct Client {
    id: u64,
    trace: PathBuf,
    windows: Vec<Window>,
    /// Window start → its data (empty entries left out).
    data: BTreeMap<u64, Data>,
}

/// Reads the clients of `path` and generates their requests window by
/// window as the stream is consumed.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let clients = read(path)?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(options.seed);
    let windows = clients[0].windows.len();
    let mut w = 0usize;
    let mut pending = std::collections::VecDeque::new();
    let mut next_id = 0u64;
    let mut failed = false;
    Ok(Box::new(std::iter::from_fn(move || {
        loop {
            if failed {
                return None;
            }
            if let Some(r) = pending.pop_front() {
                return Some(Ok(r));
            }
            if w == windows {
                return None;
            }
            let mut sent: Vec<(f64, u32, u32)> = Vec::new();
            for c in &clients {
                if let Err(e) = window(c, w, &mut rng, &mut sent) {
                    failed = true;
                    return Some(Err(e));
                }
            }
            // Stable: client order among equal times.
            sent.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (t, input, output) in sent {
                pending.push_back(one_call(next_id, t, LlmCall::new(input, output)));
                next_id += 1;
            }
            w += 1;
        }
    })))
}

/// Window `w` of client `c`: its requests as (arrival, input, output).
fn window(
    c: &Client,
    w: usize,
    rng: &mut Xoshiro256PlusPlus,
    out: &mut Vec<(f64, u32, u32)>,
) -> Result<(), ImportError> {
    let win = &c.windows[w];
    let Some(pattern) = win.pattern else { return Ok(()) };
    let size = match c.windows.get(w + 1) {
        Some(next) => next.start - win.start,
        None if w > 0 => win.start - c.windows[w - 1].start,
        None => DEFAULT_WINDOW_S,
    } as f64;
    let n = (win.rate * size).ceil();
    if n < 1.0 {
        return Ok(());
    }
    let bad = |column: &str, reason: String| ImportError::new(&c.trace.display().to_string(), win.line, column, reason);
    if win.start as f64 + size > crate::workload::types::MAX_TIME_S {
        return Err(bad(
            "timestamp",
            format!("the window {} s + {size} s ends beyond the simulator's clock", win.start),
        ));
    }
    let Some((_, data)) = c.data.range(..=win.start).next_back() else {
        return Err(bad("timestamp", format!("client {}: no dataset at or before {} s", c.id, win.start)));
    };
    let mut iats: Vec<f64> = match pattern {
        Pattern::Gamma(shape, scale) => {
            let d = Gamma::new(shape, scale).map_err(|e| bad("pattern", format!("Gamma({shape}, {scale}): {e}")))?;
            (0..n as usize).map(|_| d.sample(rng)).collect()
        }
        Pattern::Weibull(shape, scale) => {
            let d =
                Weibull::new(scale, shape).map_err(|e| bad("pattern", format!("Weibull({shape}, {scale}): {e}")))?;
            (0..n as usize).map(|_| d.sample(rng)).collect()
        }
    };
    let total: f64 = iats.iter().sum();
    if !(total.is_finite() && total > 0.0) {
        // Every gap drawn as 0 (a tiny Gamma shape underflows): the window's
        // requests all at its start.
        iats.iter_mut().for_each(|g| *g = 0.0);
    } else {
        // Each gap's share of the total first: `size / total` overflows to
        // infinity when the gaps are subnormal (a scale of 5e-324).
        iats.iter_mut().for_each(|g| *g = *g / total * size);
    }
    let mut t = 0.0;
    let from = out.len();
    for g in iats {
        t += g;
        // On the µs clock: a time that rounds to the window's end is past it.
        let at = ((win.start as f64 + t) * 1e6).round() / 1e6;
        if at >= win.start as f64 + size {
            break;
        }
        out.push((at, 0, 0));
    }
    for r in &mut out[from..] {
        let u: f64 = rng.random();
        r.1 = data.input.sample(u).max(1);
        r.2 = data.output.sample(u).max(1);
    }
    Ok(())
}

/// The clients of `path`, checked.
fn read(path: &Path) -> Result<Vec<Client>, ImportError> {
    let shown = path.display().to_string();
    let traces: Vec<(u64, PathBuf)> = if path.is_dir() {
        let entries =
            std::fs::read_dir(path).map_err(|e| ImportError::new(&shown, 0, "file", format!("cannot list: {e}")))?;
        let mut traces = Vec::new();
        for e in entries {
            let p = e.map_err(|e| ImportError::new(&shown, 0, "file", format!("cannot list: {e}")))?.path();
            if let Some(id) = client_id(&p) {
                traces.push((id, p));
            }
        }
        traces.sort();
        if traces.is_empty() {
            return Err(ImportError::new(&shown, 0, "file", "no chunk-<id>-trace.csv in the folder"));
        }
        traces
    } else {
        vec![(client_id(path).unwrap_or(0), path.to_owned())]
    };
    let mut clients: Vec<Client> = Vec::with_capacity(traces.len());
    for (id, trace) in traces {
        let windows = read_trace(&trace)?;
        if let Some(first) = clients.first() {
            let differs = first.windows.len() != windows.len()
                || first.windows.iter().zip(&windows).any(|(a, b)| a.start != b.start);
            if differs {
                let line = first
                    .windows
                    .iter()
                    .zip(&windows)
                    .find(|(a, b)| a.start != b.start)
                    .map_or(windows.len().min(first.windows.len()) as u64 + 1, |(_, b)| b.line);
                return Err(ImportError::new(
                    &trace.display().to_string(),
                    line,
                    "timestamp",
                    format!("the window starts differ from client {}'s ({})", first.id, first.trace.display()),
                ));
            }
        }
        let name = trace.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let dataset = trace.with_file_name(name.strip_suffix("-trace.csv").map_or_else(
            || format!("{}.dataset.json", trace.file_stem().and_then(|s| s.to_str()).unwrap_or("trace")),
            |stem| format!("{stem}-dataset.json"),
        ));
        let data = read_dataset(&dataset)?;
        clients.push(Client { id, trace, windows, data });
    }
    Ok(clients)
}

/// `<id>` of a `chunk-<id>-trace.csv`.
fn client_id(p: &Path) -> Option<u64> {
    let name = p.file_name()?.to_str()?;
    name.strip_prefix("chunk-")?.strip_suffix("-trace.csv")?.parse().ok()
}

fn read_trace(path: &Path) -> Result<Vec<Window>, ImportError> {
    use std::io::BufRead;
    let file = path.display().to_string();
    let mut windows: Vec<Window> = Vec::new();
    for (i, text) in super::common::open_file(path)?.lines().enumerate() {
        let line = i as u64 + 1;
        let at = |column: &str, reason: String| ImportError::new(&file, line, column, reason);
        let text = text.map_err(|e| at("file", e.to_string()))?;
        if text.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = text.split(',').map(str::trim).collect();
        if f.len() != 6 {
            return Err(at(
                "row",
                format!("{} fields; a trace row has 6 (timestamp,rate,cv,pattern,shape,scale)", f.len()),
            ));
        }
        let start: u64 = f[0].parse().map_err(|_| at("timestamp", format!("`{}` is not whole seconds", f[0])))?;
        crate::workload::checked_seconds_to_us(start as f64).map_err(|e| at("timestamp", e))?;
        if let Some(prev) = windows.last()
            && start <= prev.start
        {
            return Err(at("timestamp", format!("{start} does not follow the previous window's {}", prev.start)));
        }
        let number = |k: usize, column: &str| -> Result<f64, ImportError> {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| at(column, format!("`{}` is not a non-negative number", f[k])))
        };
        let rate = number(1, "rate")?;
        number(2, "cv")?;
        let (shape, scale) = (number(4, "shape")?, number(5, "scale")?);
        let pattern = match f[3] {
            "" => None,
            "Gamma" | "Weibull" if !(shape > 0.0 && scale > 0.0) => {
                return Err(at("shape", format!("{} needs a positive shape and scale ({shape}, {scale})", f[3])));
            }
            "Gamma" => Some(Pattern::Gamma(shape, scale)),
            "Weibull" => Some(Pattern::Weibull(shape, scale)),
            other => return Err(at("pattern", format!("`{other}` is not Gamma, Weibull or empty"))),
        };
        if pattern.is_some() {
            let size = windows.last().map_or(DEFAULT_WINDOW_S, |p| start - p.start).max(DEFAULT_WINDOW_S);
            if rate * size as f64 > MAX_WINDOW_REQUESTS {
                return Err(at(
                    "rate",
                    format!("{rate} req/s asks for more than {MAX_WINDOW_REQUESTS} requests in a window"),
                ));
            }
        }
        windows.push(Window { line, start, rate, pattern });
    }
    if windows.is_empty() {
        return Err(ImportError::new(&file, 0, "file", "no trace rows"));
    }
    Ok(windows)
}

fn read_dataset(path: &Path) -> Result<BTreeMap<u64, Data>, ImportError> {
    use std::io::Read;
    let file = path.display().to_string();
    let mut text = String::new();
    super::common::open_file(path)?
        .read_to_string(&mut text)
        .map_err(|e| ImportError::new(&file, 0, "file", format!("cannot read: {e}")))?;
    let doc: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| ImportError::new(&file, e.line() as u64, "json", e.to_string()))?;
    let mut out = BTreeMap::new();
    for (ts, fields) in &doc {
        let line = text
            .find(&format!("\"{ts}\""))
            .map_or(0, |i| text.as_bytes()[..i].iter().filter(|&&b| b == b'\n').count() as u64 + 1);
        let at = |column: &str, reason: String| ImportError::new(&file, line, column, reason);
        let start: u64 = ts.parse().map_err(|_| at("timestamp", format!("`{ts}` is not whole seconds")))?;
        let fields = fields.as_object().ok_or_else(|| at(ts, "not an object of fields".to_owned()))?;
        for multimodal in ["text_tokens", "image_tokens", "audio_tokens", "video_tokens"] {
            if fields.contains_key(multimodal) {
                return Err(at(
                    multimodal,
                    "multimodal data is not replayed (language and reasoning data are)".to_owned(),
                ));
            }
        }
        let pmf = |key: &str| -> Result<Option<Cdf>, ImportError> {
            let v = fields.get(key).ok_or_else(|| at(key, "missing".to_owned()))?;
            let s = v.as_str().ok_or_else(|| at(key, "not a string of a PMF".to_owned()))?;
            parse_pmf(s).map_err(|reason| at(key, reason))
        };
        // ServeGen skips a window with an empty field.
        if let (Some(input), Some(output)) = (pmf("input_tokens")?, pmf("output_tokens")?) {
            out.insert(start, Data { input, output });
        }
    }
    Ok(out)
}

/// A Python dict literal `{count: probability, …}` as a CDF; `None` when
/// empty.
fn parse_pmf(s: &str) -> Result<Option<Cdf>, String> {
    let inner = s
        .trim()
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| "not a {count: probability} literal".to_owned())?;
    if inner.trim().is_empty() {
        return Ok(None);
    }
    let mut pairs: Vec<(u32, f64)> = Vec::new();
    for item in inner.split(',') {
        let (k, p) = item.split_once(':').ok_or_else(|| format!("`{}` is not count: probability", item.trim()))?;
        let k: u32 = k
            .trim()
            .parse()
            .ok()
            .filter(|&k| k <= super::common::MAX_TOKENS)
            .ok_or_else(|| format!("`{}` is not a token count", k.trim()))?;
        let p: f64 = p
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| format!("`{}` is not a probability", p.trim()))?;
        pairs.push((k, p));
    }
    // numpy's cumsum runs over the dense PMF in count order.
    pairs.sort_by_key(|&(k, _)| k);
    if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("a token count appears twice".to_owned());
    }
    let mut cdf = Cdf::default();
    let mut sum = 0.0;
    for (k, p) in pairs {
        sum += p;
        if p > 0.0 {
            cdf.values.push(k);
            cdf.cumulative.push(sum);
        }
    }
    if (sum - 1.0).abs() > PMF_TOLERANCE {
        return Err(format!("the probabilities sum to {sum}, not 1"));
    }
    Ok(Some(cdf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::types::{NodeKind, Request};

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/servegen").join(name)
    }

    fn lengths(r: &Request) -> (u32, u32) {
        match &r.sub_requests[0].kind {
            NodeKind::Llm(c) => (c.input_tokens, c.output_tokens),
            _ => unreachable!(),
        }
    }

    fn all(path: &Path, seed: u64) -> Vec<Request> {
        open(path, &ImportOptions { seed, ..Default::default() }).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn subnormal_gaps_still_spread_over_the_window() {
        // Found by the fuzz harness: a Weibull scale of 5e-324 drew subnormal
        // gaps whose total made `size / total` infinite, and the arrivals NaN.
        let dir = std::env::temp_dir().join(format!("blis-servegen-subnormal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = std::fs::read(fixture("hand/chunk-1-dataset.json")).unwrap();
        std::fs::write(dir.join("chunk-1-dataset.json"), data).unwrap();
        std::fs::write(dir.join("chunk-1-trace.csv"), "0,0.05,1.0,Gamma,1.0,20.0\n600,0.02,1.0,Weibull,0.8,5e-324\n")
            .unwrap();
        let r = all(&dir.join("chunk-1-trace.csv"), 1);
        assert!(r.iter().all(|r| r.arrival_time.is_finite() && r.arrival_time < 1200.0), "{r:?}");
        assert!(r.iter().any(|r| r.arrival_time >= 600.0), "the second window sends");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pmfs_sample_as_numpy_searchsorted() {
        let c = parse_pmf("{2: 0.25, 0: 0.0, 5: 0.75}").unwrap().unwrap();
        assert_eq!((c.sample(0.0), c.sample(0.25), c.sample(0.2500001), c.sample(1.0)), (2, 2, 5, 5));
        assert!(parse_pmf("{}").unwrap().is_none());
        assert!(parse_pmf("{1: 0.5}").unwrap_err().contains("sum to 0.5"));
        assert!(parse_pmf("{1.5: 1.0}").is_err());
    }

    #[test]
    fn a_real_client_sends_its_windows_at_their_rates() {
        // ServeGen's m-small client 23 (rows 607200–610200 s): 607800 at 0.02
        // req/s (n = 12) and 610200, the last window, 600 s like the one
        // before, at 3.1967 req/s (n = 1918); each sends n − 1 or n. Lengths
        // from the dataset of 604800 s: input 193–262 (mean 210.4), output
        // 7–80 (mean 48.3).
        let r = all(&fixture("m-small"), 1);
        let first: Vec<&Request> = r.iter().filter(|r| r.arrival_time < 608_400.0).collect();
        assert!((11..=12).contains(&first.len()), "{}", first.len());
        assert!(first.iter().all(|r| r.arrival_time >= 607_800.0));
        let last = r.iter().filter(|r| r.arrival_time >= 610_200.0).count();
        assert!((1917..=1918).contains(&last), "{last}");
        assert_eq!(r.len(), first.len() + last);
        assert!(r.iter().all(|r| r.arrival_time < 610_800.0));
        assert!(r.windows(2).all(|w| w[0].arrival_time <= w[1].arrival_time));
        let (ins, outs): (Vec<u32>, Vec<u32>) = r.iter().map(lengths).unzip();
        assert!(ins.iter().all(|&i| (193..=262).contains(&i)) && outs.iter().all(|&o| (7..=80).contains(&o)));
        let mean = |v: &[u32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!((mean(&ins) - 210.4).abs() < 3.0, "{}", mean(&ins));
        assert!((mean(&outs) - 48.3).abs() < 2.0, "{}", mean(&outs));
        // Seeded: the same seed, the same requests; another, others.
        assert_eq!(r, all(&fixture("m-small"), 1));
        assert_ne!(r, all(&fixture("m-small"), 2));
    }

    #[test]
    fn clients_merge_by_time_and_share_one_draw_per_request() {
        // Hand-written (hand/): client 1 at 0.05 req/s in window 0 (n = 30),
        // none in 600; client 2 at 0.01 (n = 6) in both; its window 600 uses
        // its dataset of 600. Inputs {10, 20} and outputs {3, 7} at 1/2 each,
        // drawn with one u: (10, 3) or (20, 7) only; client 2's second
        // dataset is all 100 in, 9 out.
        let r = all(&fixture("hand"), 5);
        let w0 = r.iter().filter(|r| r.arrival_time < 600.0).count();
        assert!((34..=36).contains(&w0), "{w0}");
        let w1: Vec<&Request> = r.iter().filter(|r| r.arrival_time >= 600.0).collect();
        assert!((5..=6).contains(&w1.len()), "{}", w1.len());
        assert!(w1.iter().all(|r| lengths(r) == (100, 9)));
        assert!(r.iter().filter(|r| r.arrival_time < 600.0).all(|r| matches!(lengths(r), (10, 3) | (20, 7))));
        let ids: Vec<String> = r.iter().map(|r| r.request_id.to_string()).collect();
        assert_eq!(ids, (0..r.len()).map(|i| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn bad_rows_name_their_file_line_and_column() {
        let dir = std::env::temp_dir().join(format!("servegen-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = r#"{"0": {"input_tokens": "{5: 1.0}", "output_tokens": "{2: 1.0}"}}"#;
        for (trace, dataset, file, line, column) in [
            ("0,1,1,Gamma,1,1\n600,1,1,Poisson,1,1\n", data, "trace", 2, "pattern"),
            ("0,1,1,Gamma,1,1\n0,1,1,Gamma,1,1\n", data, "trace", 2, "timestamp"),
            ("0,x,1,Gamma,1,1\n", data, "trace", 1, "rate"),
            ("0,1,1,Gamma,0,1\n", data, "trace", 1, "shape"),
            ("0,1,1\n", data, "trace", 1, "row"),
            (
                "0,1,1,Gamma,1,1\n",
                "{\n\"0\": {\"input_tokens\": \"{5: 0.5}\", \"output_tokens\": \"{2: 1.0}\"}}",
                "dataset",
                2,
                "input_tokens",
            ),
            ("0,1,1,Gamma,1,1\n", "{\"0\": {\"text_tokens\": \"{5: 1.0}\"}}", "dataset", 1, "text_tokens"),
            (
                "600,1,1,Gamma,1,1\n",
                "{\"700\": {\"input_tokens\": \"{5: 1.0}\", \"output_tokens\": \"{2: 1.0}\"}}",
                "trace",
                1,
                "timestamp",
            ),
        ] {
            std::fs::write(dir.join("chunk-1-trace.csv"), trace).unwrap();
            std::fs::write(dir.join("chunk-1-dataset.json"), dataset).unwrap();
            let e = match open(&dir, &ImportOptions::default()) {
                Err(e) => e,
                Ok(mut it) => it.find_map(Result::err).unwrap_or_else(|| panic!("{trace} {dataset}: accepted")),
            };
            assert!(
                e.file.ends_with(&format!("chunk-1-{file}.{}", if file == "trace" { "csv" } else { "json" })),
                "{e}"
            );
            assert_eq!((e.line, e.column.as_str()), (line, column), "{trace} {dataset}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

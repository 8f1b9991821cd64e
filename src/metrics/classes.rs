//! Metrics by SLO class and by tenant, and per-class SLO targets.
//!
//! Targets: `slo.classes.<class>` gives a class its own `ttft_p99_ms`,
//! `itl_p99_ms`, `tpot_p99_ms`, `e2e_p99_ms`; a dimension a class leaves out
//! is the top-level one. A request is good (BLIS's goodput, `blis-features.md`
//! §3.6) when it completed and meets every configured dimension of its class
//! (TTFT and TPOT per llm call, E2E) and its own `slo_target` (an E2E
//! bound, send to end).
//!
//! Blocks (`per_class`, `per_tenant`, `fairness`) are written only when the
//! run's requests carry a class or a tenant, or the SLO has per-class
//! targets, so every other run's metrics are what they were. Their
//! latencies are defined as the run's (over completed requests; ITL token
//! weighted); attainment and goodput, as the run's, over the requests sent
//! in the measurement window, and only with an SLO.
//!
//! Cost when no request carries a class or tenant: three counters per
//! request (no allocation, nothing per node or token). The rest starts
//! when the first request with a class or tenant arrives: every request
//! before it was `standard` without a tenant, so `standard`'s histograms
//! and output tokens start as copies of the run's. Tenants: [`MAX_TENANTS`] of them get their own block (about
//! 1 MiB of histograms each at most for latencies up to 100 s); the rest are
//! pooled under [`OTHER_TENANTS`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::histogram::Histogram;
use crate::sim::{FinishedRequest, RequestStatus};
use crate::workload::{NodeKind, SloClass};

/// One class's own targets, ms (any of them; the others are the SLO's).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTargets {
    /// Target TTFT, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p99_ms: Option<f64>,
    /// Target mean inter-token latency of a call (its TPOT), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p99_ms: Option<f64>,
    /// Target TPOT of a call, ms: the same per request as `itl_p99_ms`
    /// (a call's TPOT is its mean ITL), named as vLLM's benchmark names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p99_ms: Option<f64>,
    /// Target E2E, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_p99_ms: Option<f64>,
}

/// `slo.classes`: targets per class, by the class names of
/// [`SloClass::name`] (any other name is an unknown key).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ClassSlos {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical: Option<ClassTargets>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standard: Option<ClassTargets>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<ClassTargets>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sheddable: Option<ClassTargets>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background: Option<ClassTargets>,
}

impl ClassSlos {
    /// The targets `class` is given, if any.
    pub fn get(&self, class: SloClass) -> Option<&ClassTargets> {
        match class {
            SloClass::Critical => self.critical.as_ref(),
            SloClass::Standard => self.standard.as_ref(),
            SloClass::Batch => self.batch.as_ref(),
            SloClass::Sheddable => self.sheddable.as_ref(),
            SloClass::Background => self.background.as_ref(),
        }
    }

    /// Checks the values: each class given at least one positive target.
    /// The error names the key below `slo.` (`classes.critical.ttft_p99_ms`).
    pub fn validate(&self) -> Result<(), (String, String)> {
        for class in SloClass::ALL {
            let Some(t) = self.get(class) else { continue };
            let targets = [
                ("ttft_p99_ms", t.ttft_p99_ms),
                ("itl_p99_ms", t.itl_p99_ms),
                ("tpot_p99_ms", t.tpot_p99_ms),
                ("e2e_p99_ms", t.e2e_p99_ms),
            ];
            for (key, v) in targets {
                if let Some(v) = v
                    && !(v.is_finite() && v > 0.0)
                {
                    return Err((format!("classes.{class}.{key}"), format!("{v} must be a positive number of ms")));
                }
            }
            if targets.iter().all(|(_, v)| v.is_none()) {
                let reason = "give at least one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms, e2e_p99_ms".to_owned();
                return Err((format!("classes.{class}"), reason));
            }
        }
        Ok(())
    }
}

/// Tenants with a block of their own; the rest share [`OTHER_TENANTS`]'s.
/// A bound on memory (each holds three histograms), not a modelling choice.
pub const MAX_TENANTS: usize = 64;
/// The block of the tenants past [`MAX_TENANTS`] (in the order their first
/// request finished).
pub const OTHER_TENANTS: &str = "(other tenants)";

/// Where a status is counted (an array index: no string compared per request).
fn status_index(s: RequestStatus) -> usize {
    s as usize
}

/// Counts of a group (a class or a tenant): its requests' statuses kept
/// for every request, its tokens once on.
#[derive(Debug, Default, Clone)]
struct Counts {
    requests: u64,
    /// Requests by how they ended, by [`status_index`].
    statuses: [u64; RequestStatus::ALL.len()],
    output_tokens: u64,
    /// Output tokens its llm calls asked for (the tenant's demand).
    asked_tokens: u64,
    window_requests: u64,
    window_good: u64,
}

/// What one request adds to its groups, worked out once.
pub(super) struct Seen {
    pub(super) good: bool,
    pub(super) in_window: bool,
}

impl Counts {
    /// Counts `r` but its tokens.
    fn count(&mut self, r: &FinishedRequest, seen: &Seen) {
        self.requests += 1;
        self.statuses[status_index(r.status)] += 1;
        if seen.in_window {
            self.window_requests += 1;
            self.window_good += u64::from(seen.good);
        }
    }
}

/// A group's latencies (once the groups are on).
#[derive(Debug, Default, Clone)]
struct Latencies {
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl Latencies {
    fn record(&mut self, r: &FinishedRequest) {
        if r.status == RequestStatus::Completed {
            for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
                if !matches!(sub.kind, NodeKind::Llm(_)) {
                    continue;
                }
                let (Some(start), Some(&first)) = (node.start_us, node.token_times_us.first()) else { continue };
                self.ttft.record(first - start);
                self.itl.record_gaps(&node.token_times_us);
            }
        }
        if let Some(finish) = r.finish_us {
            self.e2e.record(finish - r.send_us);
        }
    }
}

/// Per class and per tenant, over a run.
#[derive(Debug, Default)]
pub(super) struct ClassCollector {
    classes: [Counts; 5],
    /// Per class, once on ([`ClassCollector::on`]).
    latencies: Option<Box<[Latencies; 5]>>,
    tenants: BTreeMap<String, (Counts, Latencies)>,
    other_tenants: Option<Box<(Counts, Latencies)>>,
}

fn index(c: SloClass) -> usize {
    SloClass::ALL.iter().position(|&x| x == c).unwrap_or(0)
}

impl ClassCollector {
    /// Whether the blocks will be written.
    pub(super) fn on(&self) -> bool {
        self.latencies.is_some()
    }

    /// Turns the blocks on; `run` holds the run's latencies so far (the
    /// requests before were all `standard`, without a tenant) and its
    /// output tokens: `(ttft, itl, e2e, output tokens)`.
    pub(super) fn start(&mut self, run: (&Histogram, &Histogram, &Histogram, u64)) {
        if self.on() {
            return;
        }
        let standard = index(SloClass::Standard);
        let mut l: Box<[Latencies; 5]> = Box::default();
        l[standard] = Latencies { ttft: run.0.clone(), itl: run.1.clone(), e2e: run.2.clone() };
        self.latencies = Some(l);
        self.classes[standard].output_tokens = run.3;
    }

    /// Takes one request into account: off, only its status (the rest the
    /// run's own numbers hold, [`ClassCollector::start`]); on, everything.
    pub(super) fn observe(&mut self, r: &FinishedRequest, seen: &Seen) {
        let class = index(r.request.traffic.class());
        self.classes[class].count(r, seen);
        let Some(l) = &mut self.latencies else { return };
        l[class].record(r);
        let (mut output, mut asked) = (0, 0);
        for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
            if let NodeKind::Llm(call) = &sub.kind {
                output += node.token_times_us.len() as u64;
                asked += u64::from(call.output_tokens);
            }
        }
        self.classes[class].output_tokens += output;
        let Some(tenant) = &r.request.traffic.tenant else { return };
        if self.tenants.len() < MAX_TENANTS && !self.tenants.contains_key(tenant.as_str()) {
            self.tenants.insert(tenant.clone(), Default::default());
        }
        let group = match self.tenants.get_mut(tenant.as_str()) {
            Some(g) => g,
            None => self.other_tenants.get_or_insert_default(),
        };
        group.0.count(r, seen);
        group.0.output_tokens += output;
        group.0.asked_tokens += asked;
        group.1.record(r);
    }

    /// The blocks, given the run's length and the window's (s) and whether
    /// the run has an SLO; `None` when off.
    pub(super) fn finish(&self, run_s: f64, window_s: f64, slo: bool) -> Option<ClassBlocks> {
        let latencies = self.latencies.as_ref()?;
        let group = |c: &Counts, l: &Latencies| GroupMetrics::of(c, l, run_s, window_s, slo);
        let per_class = SloClass::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| self.classes[*i].requests > 0)
            .map(|(i, c)| (c.name().to_owned(), group(&self.classes[i], &latencies[i])))
            .collect();
        let mut per_tenant: Vec<(String, GroupMetrics)> =
            self.tenants.iter().map(|(name, (c, l))| (name.clone(), group(c, l))).collect();
        if let Some(g) = &self.other_tenants {
            per_tenant.push((OTHER_TENANTS.to_owned(), group(&g.0, &g.1)));
        }
        // Each tenant's served share of what it asked for (Jain et al. 1984's
        // x_i = T_i / O_i with the demand as the fair allocation O_i).
        let shares: Vec<f64> = self
            .tenants
            .values()
            .map(|(c, _)| c)
            .chain(self.other_tenants.as_deref().map(|g| &g.0))
            .filter(|c| c.asked_tokens > 0)
            .map(|c| c.output_tokens as f64 / c.asked_tokens as f64)
            .collect();
        let fairness = (!shares.is_empty()).then(|| Fairness { jain_tenants: jain(&shares) });
        Some(ClassBlocks { per_class: Groups(per_class), per_tenant: Groups(per_tenant), fairness })
    }
}

/// Jain's fairness index (Jain, Chiu and Hawe, DEC-TR-301, 1984):
/// (Σx)² / (n · Σx²); 1 when every x is equal, 1/n when one takes all. An
/// empty or all-zero set is 1 (nothing is unequal).
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares > 0.0 { sum * sum / (x.len() as f64 * squares) } else { 1.0 }
}

/// What [`ClassCollector::finish`] gives.
pub(super) struct ClassBlocks {
    pub(super) per_class: Groups,
    pub(super) per_tenant: Groups,
    pub(super) fairness: Option<Fairness>,
}

/// Groups by name, in order: a JSON object keyed by the names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Groups(pub Vec<(String, GroupMetrics)>);

impl Groups {
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Groups {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map from names to group metrics")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Groups, A::Error> {
                let mut v = Vec::new();
                while let Some(entry) = m.next_entry()? {
                    v.push(entry);
                }
                Ok(Groups(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// p50, p90, p99 and mean of a latency, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Summary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Summary {
    fn of(h: &Histogram) -> Summary {
        let ms = |p: f64| h.percentile(p) / 1e3;
        Summary { p50: ms(50.0), p90: ms(90.0), p99: ms(99.0), mean: h.mean() / 1e3 }
    }
}

/// One class's or tenant's metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupMetrics {
    /// Requests simulated.
    pub requests: u64,
    /// Of those, completed.
    pub completed: u64,
    /// The others, by how they ended (`rejected`, `timed_out`, …): each
    /// status that occurred, by name.
    #[serde(flatten)]
    pub statuses: BTreeMap<String, u64>,
    /// Output tokens emitted.
    pub output_tokens: u64,
    /// TTFT per llm call, ms.
    pub ttft_ms: Summary,
    /// Inter-token latency (token weighted), ms.
    pub itl_ms: Summary,
    /// E2E per request, ms.
    pub e2e_ms: Summary,
    /// Output tokens per simulated second of the run.
    pub throughput_tok_s: f64,
    /// With an SLO: the window's requests that met every target of the class.
    pub slo_attainment: Option<f64>,
    /// With an SLO: good requests per second of the window.
    pub goodput_rps: Option<f64>,
}

impl GroupMetrics {
    fn of(c: &Counts, l: &Latencies, run_s: f64, window_s: f64, slo: bool) -> GroupMetrics {
        let per_s = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let attainment = if c.window_requests > 0 { c.window_good as f64 / c.window_requests as f64 } else { 0.0 };
        GroupMetrics {
            requests: c.requests,
            completed: c.statuses[status_index(RequestStatus::Completed)],
            statuses: RequestStatus::ALL
                .iter()
                .zip(c.statuses)
                .filter(|&(&st, k)| k > 0 && st != RequestStatus::Completed)
                .map(|(st, k)| (st.name().to_owned(), k))
                .collect(),
            output_tokens: c.output_tokens,
            ttft_ms: Summary::of(&l.ttft),
            itl_ms: Summary::of(&l.itl),
            e2e_ms: Summary::of(&l.e2e),
            throughput_tok_s: per_s(c.output_tokens, run_s),
            slo_attainment: slo.then_some(attainment),
            goodput_rps: slo.then(|| per_s(c.window_good, window_s)),
        }
    }
}

/// Fairness over tenants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// Jain's index over tenants of each one's served share (output tokens
    /// emitted / output tokens its llm calls asked for): 1 when every
    /// tenant got the same share of its demand, 1/n when one got all.
    pub jain_tenants: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{MetricsCollector, Slo};
    use crate::sim::{NodeOutcome, RunSummary, Window};
    use crate::workload::{LlmCall, Request, RequestId, SubRequest, Traffic};

    /// A request of one llm call of 3 tokens: TTFT `ttft_ms`, then one
    /// token every `tpot_ms`; sent at 0, finished with its last token.
    fn request(
        ttft_ms: u64,
        tpot_ms: u64,
        class: Option<SloClass>,
        tenant: &str,
        own_ms: Option<u64>,
    ) -> FinishedRequest {
        let call = LlmCall::new(10, 3);
        let first = ttft_ms * 1000;
        let times = vec![first, first + tpot_ms * 1000, first + 2 * tpot_ms * 1000];
        let traffic = Traffic {
            slo_class: class,
            tenant: (!tenant.is_empty()).then(|| tenant.to_owned()),
            slo_target_us: own_ms.map(|ms| ms * 1000),
        };
        FinishedRequest {
            index: 0,
            request: Request {
                request_id: RequestId::Int(0),
                arrival_time: 0.0,
                initial: vec![0],
                sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
                traffic,
            },
            nodes: vec![NodeOutcome {
                start_us: Some(0),
                scheduled_us: Some(0),
                finish_us: times.last().copied(),
                token_times_us: times.clone(),
                ..NodeOutcome::default()
            }],
            arrival_us: 0,
            send_us: 0,
            finish_us: times.last().copied(),
            status: RequestStatus::Completed,
            in_window: true,
        }
    }

    fn summary() -> RunSummary {
        let window = Window { start_us: Some(0), end_us: 2_000_000, requests: 0, completed: 0, explicit: false };
        RunSummary {
            requests: 0,
            sim_end_us: 4_000_000,
            stats: Default::default(),
            replicas: Vec::new(),
            window,
            autoscale: None,
            gateway: None,
        }
    }

    #[test]
    fn a_class_takes_its_own_targets_and_the_slos_for_the_rest() {
        let critical = ClassTargets { ttft_p99_ms: Some(50.0), ..ClassTargets::default() };
        let classes = ClassSlos { critical: Some(critical), ..ClassSlos::default() };
        let slo = Slo { ttft_p99_ms: Some(200.0), itl_p99_ms: Some(20.0), classes: Some(classes), ..Slo::default() };
        assert!(slo.validate().is_ok());
        let c = Some(SloClass::Critical);
        // Critical: its own TTFT target, the SLO's ITL target.
        assert!(slo.good(&request(40, 10, c, "", None)));
        assert!(!slo.good(&request(60, 10, c, "", None)));
        assert!(!slo.good(&request(40, 30, c, "", None)));
        // Batch (no targets of its own) and a request without a class: the SLO's.
        assert!(slo.good(&request(150, 10, Some(SloClass::Batch), "", None)));
        assert!(slo.good(&request(150, 10, None, "", None)));
        assert!(!slo.good(&request(250, 10, None, "", None)));
        // A request's own target bounds its E2E (150 + 2 × 10 = 170 ms).
        assert!(slo.good(&request(150, 10, None, "", Some(170))));
        assert!(!slo.good(&request(150, 10, None, "", Some(169))));
        // Without per-class targets, the SLO's for every class.
        let plain = Slo { classes: None, ..slo };
        assert!(plain.good(&request(60, 10, c, "", None)));
    }

    #[test]
    fn a_request_whose_tpot_misses_the_target_is_not_goodput() {
        // TPOT = (last − first) / (3 − 1) = the gap `request` spaces tokens by.
        let slo = Slo { tpot_p99_ms: Some(20.0), ..Slo::default() };
        assert!(slo.validate().is_ok());
        assert!(slo.good(&request(500, 20, None, "", None)), "at the target: good");
        assert!(!slo.good(&request(5, 21, None, "", None)), "past it: not, whatever the TTFT");
        // A class's own TPOT target over the SLO's.
        let batch = ClassTargets { tpot_p99_ms: Some(40.0), ..ClassTargets::default() };
        let classes = ClassSlos { batch: Some(batch), ..ClassSlos::default() };
        let slo = Slo { classes: Some(classes), ..slo };
        assert!(slo.good(&request(5, 30, Some(SloClass::Batch), "", None)));
        assert!(!slo.good(&request(5, 30, Some(SloClass::Critical), "", None)));
        assert!(!slo.good(&request(5, 41, Some(SloClass::Batch), "", None)));
        // Goodput and attainment count it: one good request of two.
        let mut c = MetricsCollector::with_slo(Some(Slo { classes: None, ..slo }));
        c.observe(&request(5, 10, None, "", None));
        c.observe(&request(5, 30, None, "", None));
        let m = c.finish(&summary());
        assert_eq!((m.slo_attainment, m.goodput_rps), (Some(0.5), Some(0.5)));
    }

    #[test]
    fn slo_met_flips_at_the_tpot_target_and_tpot_binds() {
        // 100 requests, TPOT 4 ms (kept to the µs below 4.096 ms): at p99, 4 ms.
        let run = |target: f64| {
            let slo = Slo { ttft_p99_ms: Some(1000.0), tpot_p99_ms: Some(target), ..Slo::default() };
            let mut c = MetricsCollector::with_slo(Some(slo));
            for _ in 0..100 {
                c.observe(&request(5, 4, None, "", None));
            }
            c.finish(&summary())
        };
        let met = run(4.0);
        assert_eq!(met.slo_met, Some(true));
        let w = met.window.as_ref().unwrap();
        assert_eq!(w.tpot_p99_ms, Some(4.0));
        // TPOT at 100 % of its target binds over TTFT at 0.5 %.
        let b = w.binding.as_ref().unwrap();
        assert_eq!((b.metric.as_str(), b.value_ms, b.target_ms, b.margin()), ("tpot_p99_ms", 4.0, 4.0, 0.0));
        let missed = run(3.999);
        assert_eq!(missed.slo_met, Some(false));
        assert_eq!(missed.window.as_ref().unwrap().binding.as_ref().unwrap().metric, "tpot_p99_ms");
        // Without a TPOT target, TTFT binds; the window still reports TPOT.
        let slo = Slo { ttft_p99_ms: Some(1000.0), ..Slo::default() };
        let mut c = MetricsCollector::with_slo(Some(slo));
        c.observe(&request(5, 4, None, "", None));
        let w = c.finish(&summary()).window.unwrap();
        assert_eq!(w.binding.unwrap().metric, "ttft_p99_ms");
        assert_eq!(w.tpot_p99_ms, Some(4.0));
    }

    #[test]
    fn tpot_targets_are_checked_and_old_slos_read_without_one() {
        let slo = Slo { tpot_p99_ms: Some(-1.0), ..Slo::default() };
        assert_eq!(slo.validate().unwrap_err().0, "tpot_p99_ms");
        let nan = ClassTargets { tpot_p99_ms: Some(f64::NAN), ..ClassTargets::default() };
        let classes = ClassSlos { critical: Some(nan), ..ClassSlos::default() };
        assert_eq!(classes.validate().unwrap_err().0, "classes.critical.tpot_p99_ms");
        let old: Slo = crate::yaml::parse("{ttft_p99_ms: 1000, itl_p99_ms: 50}").unwrap();
        assert_eq!(old.tpot_p99_ms, None);
        // Written as before: no key for an absent target.
        assert!(!serde_json::to_string(&old).unwrap().contains("tpot"));
    }

    #[test]
    fn bad_class_targets_are_named_by_key() {
        let zero = ClassTargets { e2e_p99_ms: Some(0.0), ..ClassTargets::default() };
        let slo = Slo {
            ttft_p99_ms: Some(1.0),
            classes: Some(ClassSlos { batch: Some(zero), ..ClassSlos::default() }),
            ..Slo::default()
        };
        assert_eq!(slo.validate().unwrap_err().0, "classes.batch.e2e_p99_ms");
        let none = ClassSlos { background: Some(ClassTargets::default()), ..ClassSlos::default() };
        assert_eq!(none.validate().unwrap_err().0, "classes.background");
        let err = crate::yaml::parse::<Slo>("{ttft_p99_ms: 1, classes: {gold: {ttft_p99_ms: 1}}}").unwrap_err();
        assert!(err.message.contains("unknown field `gold`"), "{}", err.message);
    }

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[0.5, 0.5, 0.5]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        // Jain et al.'s example shape: two at 1, two at 0.5 → 9 / (4 × 2.5).
        assert!((jain(&[1.0, 1.0, 0.5, 0.5]) - 0.9).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }

    #[test]
    fn blocks_appear_only_with_classes_or_tenants_and_count_earlier_requests_as_standard() {
        let slo = Some(Slo { ttft_p99_ms: Some(100.0), ..Slo::default() });
        let mut plain = MetricsCollector::with_slo(slo);
        plain.observe(&request(10, 5, None, "", None));
        // Its own target alone is no class: judged, not split.
        plain.observe(&request(10, 5, None, "", Some(1)));
        let m = plain.finish(&summary());
        assert_eq!(m.slo_attainment, Some(0.5));
        assert!(m.per_class.is_empty() && m.per_tenant.is_empty() && m.fairness.is_none());
        let json = serde_json::to_string(&m).unwrap();
        assert!(!json.contains("per_class") && !json.contains("fairness"), "{json}");

        let mut c = MetricsCollector::with_slo(slo);
        // Two untagged requests before the first with a class: standard.
        c.observe(&request(10, 5, None, "", None));
        c.observe(&request(300, 5, None, "", None));
        c.observe(&request(20, 5, Some(SloClass::Critical), "a", None));
        c.observe(&request(30, 5, Some(SloClass::Critical), "b", None));
        let m = c.finish(&summary());
        let names: Vec<&str> = m.per_class.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["critical", "standard"]);
        let standard = &m.per_class.0[1].1;
        assert_eq!((standard.requests, standard.completed, standard.output_tokens), (2, 2, 6));
        // The median of 10 and 300 ms (histogram resolution 0.025 %).
        assert!((standard.ttft_ms.p50 - 155.0).abs() < 0.1, "{}", standard.ttft_ms.p50);
        assert_eq!(standard.slo_attainment, Some(0.5));
        // Good requests per second of the 2 s window.
        assert_eq!(m.per_class.0[0].1.goodput_rps, Some(1.0));
        assert_eq!(m.per_class.0[0].1.throughput_tok_s, 1.5);
        let tenants: Vec<&str> = m.per_tenant.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(tenants, ["a", "b"]);
        assert_eq!(m.fairness.map(|f| f.jain_tenants), Some(1.0));
        // The JSON reads back, order kept (floats to serde_json's parsing).
        let back: crate::metrics::Metrics = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        let names = |g: &Groups| g.0.iter().map(|(n, g)| (n.clone(), g.requests, g.completed)).collect::<Vec<_>>();
        assert_eq!((names(&back.per_class), names(&back.per_tenant)), (names(&m.per_class), names(&m.per_tenant)));
        assert_eq!(back.fairness, m.fairness);
    }

    #[test]
    fn other_statuses_are_counted_by_name_and_tenants_past_the_cap_pooled() {
        let mut c = MetricsCollector::with_slo(None);
        for t in 0..MAX_TENANTS + 2 {
            let mut r = request(10, 5, Some(SloClass::Batch), &format!("t{t:03}"), None);
            if t == 0 {
                r.status = RequestStatus::Rejected;
                r.finish_us = None;
                r.nodes[0].token_times_us.clear();
            }
            c.observe(&r);
        }
        let m = c.finish(&summary());
        let batch = &m.per_class.0[0].1;
        assert_eq!((batch.requests, batch.completed, batch.statuses.get("rejected")), (66, 65, Some(&1)));
        assert_eq!((batch.slo_attainment, batch.goodput_rps), (None, None));
        assert_eq!(m.per_tenant.0.len(), MAX_TENANTS + 1);
        let (last, pooled) = m.per_tenant.0.last().unwrap();
        assert_eq!((last.as_str(), pooled.requests), (OTHER_TENANTS, 2));
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["per_class"]["batch"]["rejected"], 1);
        // One tenant of 65 (64, then the pooled rest) got nothing of what it asked for.
        let mut shares = vec![1.0; MAX_TENANTS + 1];
        shares[0] = 0.0;
        assert!((m.fairness.unwrap().jain_tenants - jain(&shares)).abs() < 1e-12);
    }
}

//! Capacity search over deployments with `pools:`: GPUs and cost summed over
//! the pools (each at its own GPU's price), the `pools` column, the printed
//! comparison of aggregated and disaggregated deployments at the same GPU
//! count, and pool sizes as a grid axis (`pools.decode.replicas`).

use crate::parquet_util::{read_columns, read_table};
use crate::util::{Dir, TestCommand};

/// Llama-3.1-8B on one H100 per engine, 400 requests of 2048 prompt tokens
/// and 16 output tokens at 10 req/s: a search of a few probes per
/// deployment, each a fraction of a second.
const WORKLOAD: &str = "workload:\n  generate: {rate: 10, num_requests: 400, input: {kind: constant, value: 2048}, \
                        output: {kind: constant, value: 16}}\n";

/// A wide precision: the test is about the rows, not the capacities.
const SEARCH: &str = "search:\n  slo: {ttft_p99_ms: 500, itl_p99_ms: 50}\n  range: [1, 200]\n  precision: 0.2\n";

const AGG: &str = "  - {name: agg, model: Llama-3.1-8B, hardware: H100, replicas: 2}\n";
const PD: &str =
    "  - {name: pd, model: Llama-3.1-8B, hardware: H100, pools: {prefill: {replicas: 1}, decode: {replicas: 1}}}\n";
/// Prefill on an H200, decode on an H100 (their KV moves over RDMA).
const PD_MIXED_GPUS: &str =
    "  - {name: pd-h200, model: Llama-3.1-8B, hardware: H100, pools: {prefill: {hardware: H200}, decode: {}}}\n";

fn plan(scenarios: &[&str], rest: &str) -> String {
    format!("name: c\n{WORKLOAD}scenarios:\n{}{rest}output: out\n", scenarios.concat())
}

fn f(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

#[test]
fn pooled_deployments_sum_gpus_and_cost_over_their_pools_and_compare_with_aggregated_ones() {
    let dir = Dir::new("capacity-pools");
    dir.create(
        "plan.yaml",
        &plan(&[AGG, PD, PD_MIXED_GPUS], &format!("{SEARCH}  gpu_hour_usd: {{H100: 2, H200: 3}}\n")),
    );
    let table = TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    let rows = read_columns(
        &dir.join("out/capacity.parquet"),
        &["scenario", "gpus", "pools", "verdict", "cost_per_mtok", "tokens_per_sec"],
    );
    let by = |name: &str| rows.iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("{name}: {rows:?}"));
    let (agg, pd, pd_h200) = (by("agg"), by("pd"), by("pd-h200"));
    for r in [agg, pd, pd_h200] {
        assert_eq!((r[1].as_str(), r[3].as_str()), ("2", "capacity"), "{r:?}");
    }
    assert_eq!(agg[2], "null");
    assert_eq!(pd[2], "prefill 1×TP1 H100 + decode 1×TP1 H100");
    assert_eq!(pd_h200[2], "prefill 1×TP1 H200 + decode 1×TP1 H100");
    // $/M output tokens: each pool's GPUs at its GPU's price an hour.
    for (r, usd_per_hour) in [(agg, 2.0 * 2.0), (pd, 2.0 + 2.0), (pd_h200, 3.0 + 2.0)] {
        let (cost, tps) = (f(&r[4]), f(&r[5]));
        assert!((cost - usd_per_hour / 3600.0 / tps * 1e6).abs() < 1e-9, "{r:?}");
    }
    // The printed table says the pools; the comparison pairs the best of
    // each kind at 2 GPUs (pd over pd-h200: the same capacity bracket at a
    // lower cost, or a higher capacity).
    assert!(table.lines().next().unwrap().ends_with("verdict          pools"), "{table}");
    assert!(table.contains("prefill 1×TP1 H200 + decode 1×TP1 H100"), "{table}");
    let section = table.split("aggregated vs disaggregated, the best of each at the same GPU count:\n").nth(1);
    let section = section.unwrap_or_else(|| panic!("no comparison:\n{table}"));
    let lines: Vec<&str> = section.lines().collect();
    assert_eq!(lines.len(), 4, "{section}");
    assert!(lines[1].trim_start().starts_with("2  aggregated      agg "), "{section}");
    assert!(lines[1].contains("2×TP1 H100"), "{section}");
    let caps = read_columns(&dir.join("out/capacity.parquet"), &["scenario", "max_rate"]);
    let cap = |name: &str| f(&caps.iter().find(|r| r[0] == name).unwrap()[1]);
    // The best: the higher capacity, then the lower cost.
    let h200_better = cap("pd-h200") > cap("pd") || (cap("pd-h200") == cap("pd") && f(&pd_h200[4]) < f(&pd[4]));
    let best = if h200_better { "pd-h200" } else { "pd" };
    assert!(lines[2].trim_start().starts_with(&format!("disaggregated   {best} ")), "{section}");
    // The ratio row: disaggregated capacity and cost over aggregated.
    let ratio = |s: &str| f(s.trim_end_matches('×'));
    let words: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(words[..3], ["disaggregated", "/", "aggregated"], "{section}");
    assert!((ratio(words[3]) - cap(best) / cap("agg")).abs() < 0.006, "{section}");
    assert!((ratio(words[4]) - f(&by(best)[4]) / f(&agg[4])).abs() < 0.006, "{section}");
}

#[test]
fn a_pool_without_a_price_leaves_the_cost_out_and_says_why() {
    let dir = Dir::new("capacity-pools-unpriced");
    dir.create("plan.yaml", &plan(&[PD_MIXED_GPUS], &format!("{SEARCH}  gpu_hour_usd: {{H100: 2}}\n")));
    let table = TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    let rows = read_columns(&dir.join("out/capacity.parquet"), &["cost_per_mtok", "note"]);
    assert_eq!(rows[0][0], "null");
    assert!(rows[0][1].contains("no cost: search.gpu_hour_usd has no price for H200"), "{rows:?}");
    assert!(table.contains("no price for H200"), "{table}");
    // Only disaggregated deployments: no comparison.
    assert!(!table.contains("aggregated vs disaggregated"), "{table}");
}

#[test]
fn pool_sizes_are_a_grid_axis() {
    let dir = Dir::new("capacity-pools-grid");
    dir.create(
        "plan.yaml",
        &plan(
            &[PD],
            &format!("grid:\n  overrides:\n    pools.decode.replicas: [1, 2]\n{SEARCH}  gpu_hour_usd: {{H100: 2}}\n"),
        ),
    );
    let table = TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    let rows = read_columns(&dir.join("out/capacity.parquet"), &["overrides", "gpus", "pools", "replicas"]);
    assert_eq!(
        rows,
        [
            ["{\"pools_decode_replicas\":1}", "2", "prefill 1×TP1 H100 + decode 1×TP1 H100", "1"],
            ["{\"pools_decode_replicas\":2}", "3", "prefill 1×TP1 H100 + decode 2×TP1 H100", "2"],
        ]
    );
    assert!(table.contains("pd pools.decode.replicas=2"), "{table}");
    // Every probe ran the deployment it names: 3 GPUs in the runs table.
    let runs = read_columns(&dir.join("out/runs.parquet"), &["overrides", "gpus"]);
    assert!(!runs.is_empty());
    for r in &runs {
        let want = if r[0].contains(":2") { "3" } else { "2" };
        assert_eq!(r[1], want, "{runs:?}");
    }
}

#[test]
fn an_override_of_a_pool_the_scenario_lacks_is_an_error_not_a_new_pool() {
    let dir = Dir::new("capacity-pools-missing");
    // Without `pools:` the override would make a pool `decode` beside the
    // scenario's replicas; with other pools, a third pool of no role.
    for (scenario, has) in [(AGG, "it has no `pools:`"), (PD, "")] {
        let key = if has.is_empty() { "pools.mixed.replicas" } else { "pools.decode.replicas" };
        dir.create("plan.yaml", &plan(&[scenario], &format!("grid:\n  overrides:\n    {key}: [1, 2]\n{SEARCH}")));
        let err = TestCommand::new(&dir.path, &["capacity", "plan.yaml"]).fails();
        let name = if has.is_empty() { "pd" } else { "agg" };
        let pool = key.split('.').nth(1).unwrap();
        let has = if has.is_empty() { "its pools are decode, prefill" } else { has };
        assert_eq!(
            err,
            format!(
                "blis-sweep: plan.yaml:8: grid.overrides.{key}: scenario `{name}` has no pool `{pool}` ({has}); \
                 an override changes a pool, it does not add one\n"
            )
        );
        assert!(!dir.join("out").exists());
    }
}

#[test]
fn a_plan_without_pools_has_no_pools_column_and_no_comparison() {
    let dir = Dir::new("capacity-pools-none");
    dir.create("plan.yaml", &plan(&[AGG], &format!("{SEARCH}  gpu_hour_usd: {{H100: 2}}\n")));
    let table = TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    assert_eq!(
        table.lines().next().unwrap(),
        "deployment                        GPUs    max req/s   TTFT p99    ITL p99    goodput   $/M tokens  verdict"
    );
    assert!(!table.contains("aggregated vs"), "{table}");
    let (schema, _) = read_table(&dir.join("out/capacity.parquet"));
    assert!(!schema.split(';').any(|f| f.starts_with("pools:")), "{schema}");
}

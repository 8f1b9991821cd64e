//! The report's charts as Vega-Lite specs (drawn by the vendored Vega in
//! the browser, `page.rs`): each carries its data inline, in long form,
//! with the column names the tables use, so a spec copied from the page's
//! menu works on the same columns from a DuckDB query. Units are the
//! tables': ms for latency, req/s for rates; load is absolute (req/s
//! offered, or users). A latency axis is logarithmic when its values span a
//! decade or more; SLO targets are drawn as a band over the values that
//! miss them.

use serde_json::{Value, json};

const SCHEMA: &str = "https://vega.github.io/schema/vega-lite/v6.json";

/// A latency axis turns logarithmic at this ratio of its largest to its
/// smallest value: past a decade a linear axis squashes the low values
/// (an ITL axis to 870 ms flattened a 40–50 ms SLO band: issue 29).
const LOG_RATIO: f64 = 10.0;

/// Facets per row of small multiples (the page is ~1,180 px wide).
const COLUMNS: usize = 3;

/// Every chart's look: axis labels that would overlap are thinned (a log
/// axis labels 1–9 of each decade), titles left-aligned.
fn config() -> Value {
    json!({"axis": {"labelOverlap": "greedy", "labelSeparation": 6}, "title": {"anchor": "start", "fontSize": 13}})
}

/// A whole spec: the schema, the look, `title`, `rows` inline, then
/// `body`'s keys (size, layers, facets).
fn spec(title: &str, rows: Vec<Value>, body: Value) -> Value {
    let mut spec = json!({"$schema": SCHEMA, "config": config(), "title": title, "data": {"values": rows}});
    if let (Some(spec), Value::Object(body)) = (spec.as_object_mut(), body) {
        spec.extend(body);
    }
    spec
}

/// The colour of what misses an SLO.
const MISS: &str = "#d62728";

/// A log scale when `values` (all positive) span `LOG_RATIO`, else linear
/// (from zero when `zero`).
pub(super) fn scale_for(values: impl Iterator<Item = f64>, zero: bool) -> Value {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite()) {
        if v <= 0.0 {
            return json!({"type": "linear", "zero": zero});
        }
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi / lo >= LOG_RATIO { json!({"type": "log"}) } else { json!({"type": "linear", "zero": zero}) }
}

/// A legend whose entries filter the chart: clicking one fades the others
/// (shift-click adds), the parameter `name` over `field`.
fn legend_filter(name: &str, field: &str) -> Value {
    json!({"name": name, "select": {"type": "point", "fields": [field]}, "bind": "legend"})
}

fn faded_unless(name: &str) -> Value {
    json!({"condition": {"param": name, "value": 1}, "value": 0.12})
}

/// An SLO target at `ms` drawn as a band from the target up (where values
/// miss it) and a dashed rule, labelled. In a faceted spec the layers
/// aggregate to one row per facet first (a rule per data row would draw
/// the same band many times over).
fn slo_band(label: &str, ms: f64) -> [Value; 2] {
    let one = json!([{"aggregate": [{"op": "count", "as": "rows"}]}]);
    [
        json!({"transform": one, "mark": {"type": "rect", "color": MISS, "opacity": 0.08},
               "encoding": {"y": {"datum": ms, "type": "quantitative"}, "y2": {"value": 0}}}),
        json!({"transform": one,
               "mark": {"type": "rule", "color": MISS, "strokeDash": [5, 3]},
               "encoding": {"y": {"datum": ms, "type": "quantitative"},
                            "tooltip": {"value": label}}}),
    ]
}

/// One metric against load, a small multiple per deployment: rows are
/// `{deployment, series, stat, line, load, value, lo, hi, seeds}` (the line
/// at `value`, the worst seed; the band `lo`–`hi`, the seeds' spread); a
/// series (a client: a cap, open loop; or, alone, the statistic) a colour,
/// `line` `solid` (p99, served) or `dashed` (p50, goodput). Each facet keeps its own load axis (a
/// capacity search probes each deployment where it saturates); the metric
/// axis is shared so facets compare.
pub(super) struct AgainstLoad<'a> {
    pub(super) title: &'a str,
    pub(super) x_title: &'a str,
    pub(super) y_title: &'a str,
    pub(super) y_scale: Value,
    pub(super) rows: Vec<Value>,
    /// The deployments in grid order.
    pub(super) facets: Vec<String>,
    /// The series in the order of the legend.
    pub(super) series: Vec<String>,
    /// The SLO target's label and value.
    pub(super) target: Option<(String, f64)>,
    /// Some point has more than one seed: draw the band.
    pub(super) band: bool,
}

pub(super) fn against_load(c: AgainstLoad<'_>) -> Value {
    let x =
        json!({"field": "load", "type": "quantitative", "title": c.x_title, "scale": {"zero": false, "nice": true}});
    let y = json!({"field": "value", "type": "quantitative", "title": c.y_title, "scale": c.y_scale,
                   "axis": {"format": ",~r"}});
    let color = json!({"field": "series", "type": "nominal", "sort": c.series, "title": null,
                       "scale": {"scheme": "tableau10"}, "legend": {"orient": "top", "labelLimit": 480, "symbolLimit": 0}});
    let mut layers = Vec::new();
    if let Some((label, ms)) = &c.target {
        layers.extend(slo_band(label, *ms));
    }
    if c.band {
        layers.push(json!({
            "mark": {"type": "area", "opacity": 0.18},
            "encoding": {"x": x, "y": {"field": "lo", "type": "quantitative"}, "y2": {"field": "hi"},
                         "color": color}
        }));
    }
    layers.push(json!({
        "params": [legend_filter("pick", "series")],
        "mark": {"type": "line", "point": true, "strokeWidth": 1.8},
        "encoding": {
            "x": x, "y": y, "color": color,
            "strokeDash": {"field": "line", "type": "nominal", "sort": ["solid", "dashed"], "legend": null},
            "opacity": faded_unless("pick"),
            "tooltip": [
                {"field": "deployment"}, {"field": "series"}, {"field": "stat"},
                {"field": "load", "title": c.x_title, "format": ",.3~r"},
                {"field": "value", "title": format!("{} (worst seed)", c.y_title), "format": ",.4~r"},
                {"field": "lo", "title": "lowest seed", "format": ",.4~r"},
                {"field": "hi", "title": "highest seed", "format": ",.4~r"},
                {"field": "seeds"}
            ]
        }
    }));
    let width = if c.facets.len() == 1 { 640 } else { 320 };
    spec(
        c.title,
        c.rows,
        json!({
            "facet": {"field": "deployment", "type": "nominal", "sort": c.facets, "title": null,
                      "header": {"labelLimit": 360, "labelFontSize": 11}},
            "columns": COLUMNS.min(c.facets.len()),
            "resolve": {"scale": {"x": "independent"}},
            "spec": {"width": width, "height": 200, "layer": layers}
        }),
    )
}

/// Output tokens/s per GPU (`y`) against `x` for every grid point (rows
/// `{deployment, load, x, y, slo, frontier, gpus, …}`), the frontier joined
/// in x order; shape and fill say whether a point met the SLO.
pub(super) fn tradeoff(title: &str, x_title: &str, x_scale: Value, tooltip: Value, rows: Vec<Value>) -> Value {
    // The legend names the SLO outcomes the points have.
    let shapes: Vec<(&str, &str)> =
        [("meets the SLO", "circle"), ("misses the SLO", "triangle-down"), ("no SLO", "square")]
            .into_iter()
            .filter(|s| rows.iter().any(|r| r["slo"] == s.0))
            .collect();
    let x =
        json!({"field": "x", "type": "quantitative", "title": x_title, "scale": x_scale, "axis": {"format": ",~r"}});
    let y = json!({"field": "y", "type": "quantitative", "title": "output tokens/s per GPU", "scale": {"zero": false},
                   "axis": {"format": ",~r"}});
    spec(
        title,
        rows,
        json!({
            "width": 520,
            "height": 320,
            "layer": [
                {"transform": [{"filter": "datum.frontier"}],
                 "mark": {"type": "line", "color": "#444", "strokeDash": [4, 3]},
                 "encoding": {"x": x, "y": y, "order": {"field": "x"}}},
                {"params": [legend_filter("pick", "deployment")],
                 "mark": {"type": "point", "size": 70, "strokeWidth": 2, "filled": true},
                 "encoding": {
                     "x": x, "y": y,
                     "color": {"field": "deployment", "type": "nominal", "sort": null, "title": null,
                               "scale": {"scheme": "tableau20"}, "legend": {"orient": "bottom", "columns": 2, "labelLimit": 420, "symbolLimit": 0}},
                     "shape": {"field": "slo", "type": "nominal", "title": null,
                               "scale": {"domain": shapes.iter().map(|s| s.0).collect::<Vec<_>>(),
                                         "range": shapes.iter().map(|s| s.1).collect::<Vec<_>>()}},
                     "fillOpacity": {"condition": {"test": "datum.slo !== 'misses the SLO'", "value": 0.85}, "value": 0.1},
                     "opacity": faded_unless("pick"),
                     "tooltip": tooltip
                 }}
            ]
        }),
    )
}

/// The bars' colours, by verdict: against a target, or the search's own
/// verdict without one (`capacity.parquet`'s, underscores as spaces).
const VERDICTS: [(&str, &str); 8] = [
    ("meets the target", "#2ca02c"),
    ("below the target", "#9e9e9e"),
    ("capacity", "#1f77b4"),
    ("at least", "#17becf"),
    ("below range", "#bcbd22"),
    ("too short", "#ff7f0e"),
    ("requests failed", "#8c564b"),
    ("failed", MISS),
];

/// Each deployment's capacity as a bar (rows `{deployment, capacity,
/// label, verdict}`), its label beside it, the target a dashed rule.
pub(super) fn capacity_bars(unit: &str, target: Option<f64>, rows: Vec<Value>) -> Value {
    // The legend names the verdicts the rows have, each its own colour.
    let present: Vec<(&str, &str)> =
        VERDICTS.iter().copied().filter(|v| rows.iter().any(|r| r["verdict"] == v.0)).collect();
    let y = json!({"field": "deployment", "type": "nominal", "sort": null, "title": null, "axis": {"labelLimit": 360}});
    let x =
        json!({"field": "capacity", "type": "quantitative", "title": format!("highest load within the SLO ({unit})")});
    let mut layers = vec![
        json!({"mark": {"type": "bar", "height": {"band": 0.7}},
               "encoding": {"y": y, "x": x,
                            "color": {"field": "verdict", "type": "nominal", "title": null,
                                      "scale": {"domain": present.iter().map(|v| v.0).collect::<Vec<_>>(),
                                                "range": present.iter().map(|v| v.1).collect::<Vec<_>>()},
                                      "legend": {"orient": "top"}},
                            "tooltip": [{"field": "deployment"}, {"field": "label", "title": "capacity"},
                                        {"field": "verdict"}]}}),
        json!({"mark": {"type": "text", "align": "left", "dx": 4, "fontSize": 11},
               "encoding": {"y": y, "x": x, "text": {"field": "label"}}}),
    ];
    if let Some(t) = target {
        layers.push(json!({
            "data": {"values": [{"target": t}]},
            "mark": {"type": "rule", "color": MISS, "strokeDash": [5, 3], "strokeWidth": 2},
            "encoding": {"x": {"field": "target", "type": "quantitative"},
                         "tooltip": {"value": format!("target {t} {unit}")}}
        }));
    }
    spec(
        "Highest load within the SLO, per deployment",
        rows,
        json!({"width": 520, "height": {"step": 26}, "layer": layers}),
    )
}

/// Replicas over simulated time per run (rows `{run, t, replicas}`, steps
/// held until the next change); more than a few runs: a small multiple
/// each.
pub(super) fn replicas(rows: Vec<Value>, runs: Vec<String>) -> Value {
    let encoding = |color: bool| {
        let mut e = json!({
            "x": {"field": "t", "type": "quantitative", "title": "simulated time (s)"},
            "y": {"field": "replicas", "type": "quantitative", "title": "routable replicas", "axis": {"tickMinStep": 1}},
            "tooltip": [{"field": "run"}, {"field": "t", "title": "s", "format": ",.1f"}, {"field": "replicas"}]
        });
        if color {
            e["color"] = json!({"field": "run", "type": "nominal", "sort": runs, "title": null,
                                "legend": {"orient": "bottom", "labelLimit": 520, "symbolLimit": 0}});
        }
        e
    };
    let mark = json!({"type": "line", "interpolate": "step-after", "point": true});
    if runs.len() <= 6 {
        spec("Routable replicas", rows, json!({"width": 900, "height": 240, "mark": mark, "encoding": encoding(true)}))
    } else {
        spec(
            "Routable replicas",
            rows,
            json!({"facet": {"field": "run", "type": "nominal", "sort": runs, "title": null, "header": {"labelLimit": 360}},
                   "columns": COLUMNS, "spec": {"width": 320, "height": 160, "mark": mark, "encoding": encoding(false)}}),
        )
    }
}

/// sim / real − 1 per metric, every real run a dot, ours beside BLIS's
/// published error (rows `{run, metric, simulator, error}`): where each
/// simulator's errors fall. Errors past ±100 % sit at the edge (their
/// value in the tooltip).
pub(super) fn calibration_errors(rows: Vec<Value>, metrics: Vec<String>) -> Value {
    spec(
        "Calibration: sim / real − 1 per metric, each real run a dot",
        rows,
        json!({
            "width": 640,
            "height": {"step": 34},
            "layer": [
                {"data": {"values": [{"zero": 0}]}, "mark": {"type": "rule", "color": "#888"},
                 "encoding": {"x": {"field": "zero", "type": "quantitative"}}},
                {"params": [legend_filter("pick", "simulator")],
                 "mark": {"type": "tick", "thickness": 2, "size": 12},
                 "encoding": {
                     "y": {"field": "metric", "type": "nominal", "sort": metrics, "title": null},
                     "yOffset": {"field": "simulator", "type": "nominal", "sort": ["blis-sweep", "BLIS (published)"]},
                     "x": {"field": "error", "type": "quantitative", "title": "sim / real − 1",
                           "scale": {"domain": [-1, 1], "clamp": true}, "axis": {"format": "+.0%"}},
                     "color": {"field": "simulator", "type": "nominal", "title": null,
                               "sort": ["blis-sweep", "BLIS (published)"], "legend": {"orient": "top"}},
                     "opacity": faded_unless("pick"),
                     "tooltip": [{"field": "run"}, {"field": "metric"}, {"field": "simulator"},
                                 {"field": "error", "title": "sim / real − 1", "format": "+.1%"}]
                 }}
            ]
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_axes_turn_logarithmic_past_a_decade() {
        assert_eq!(scale_for([40.0, 45.0, 400.0].into_iter(), true)["type"], "log");
        assert_eq!(scale_for([40.0, 45.0, 400.0 / 1.1].into_iter(), true)["type"], "linear");
        // Zero has no logarithm.
        assert_eq!(scale_for([0.0, 45.0, 870.0].into_iter(), true)["type"], "linear");
    }

    #[test]
    fn a_target_band_is_one_mark_per_facet() {
        let [band, rule] = slo_band("SLO ITL p99 40 ms", 40.0);
        for layer in [band, rule] {
            assert_eq!(layer["transform"][0]["aggregate"][0]["op"], "count");
            assert_eq!(layer["encoding"]["y"]["datum"], 40.0);
        }
    }
}

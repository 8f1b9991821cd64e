//! Inline SVG charts, written by hand: a line chart of series against a
//! shared x axis (log y when the values span more than two decades) with
//! optional horizontal target lines, and a horizontal bar chart. No script,
//! no external resource.

use std::fmt::Write as _;

/// Colours of successive series (Okabe–Ito, distinguishable by most
/// colour-blind readers).
const COLOURS: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"];

const W: f64 = 1000.0;
const H: f64 = 320.0;
const LEFT: f64 = 64.0;
/// Room for the legend.
const RIGHT: f64 = 400.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 44.0;

/// One line of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// Drawn dashed (a second statistic of the same deployment).
    pub(crate) dashed: bool,
    /// A shaded band under the line: at each x, the lowest and highest
    /// value (the spread over seeds); empty: none.
    pub(crate) band: Vec<(f64, f64, f64)>,
}

/// Text for SVG and HTML.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn tick(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A line chart; `id` names it in the page. `x_ticks` are the x axis's
/// ticks, each a value and its text; none: five evenly spaced numbers.
pub(crate) fn line_chart(
    id: &str,
    title: &str,
    x_label: &str,
    x_ticks: &[(f64, String)],
    y_label: &str,
    series: &[Series],
    targets: &[(String, f64)],
) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.band.iter().flat_map(|b| [b.1, b.2])))
        .chain(targets.iter().map(|t| t.1));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (y_min, y_max) = ys.filter(|y| y.is_finite()).fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    // Tall enough for a legend line per series.
    let height = H.max(TOP + BOTTOM + 13.0 * series.len() as f64);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<figure id="{id}"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = escape(title)
    );
    if x0 > x1 || y_min > y_max {
        out.push_str(r#"<text x="20" y="40">no data</text></svg></figure>"#);
        return out;
    }
    let log = y_min > 0.0 && y_max / y_min > 100.0;
    let (y0, y1) = if log { (y_min.log10().floor(), y_max.log10().ceil()) } else { (0.0_f64.min(y_min), y_max * 1.05) };
    // Loads that span decades (a capacity search's probes) on a log axis.
    let log_x = x0 > 0.0 && x1 / x0 > 20.0;
    let (x0, x1) = if log_x { (x0.log10(), x1.log10()) } else { (x0, x1) };
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 - 1.0, x1 + 1.0) };
    let (y0, y1) = if y1 > y0 { (y0, y1) } else { (y0 - 1.0, y1 + 1.0) };
    let px = |x: f64| {
        let v = if log_x { x.max(1e-12).log10() } else { x };
        LEFT + (v - x0) / (x1 - x0) * (W - LEFT - RIGHT)
    };
    let py = |y: f64| {
        let v = if log { y.max(1e-12).log10() } else { y };
        height - BOTTOM - (v - y0) / (y1 - y0) * (height - TOP - BOTTOM)
    };
    // Axes, ticks and labels.
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
        W - LEFT - RIGHT,
        height - TOP - BOTTOM
    );
    let evenly = (0..=4).map(|k| {
        let v = x0 + (x1 - x0) * f64::from(k) / 4.0;
        let x = if log_x { 10f64.powf(v) } else { v };
        (x, tick(x))
    });
    let x_ticks: Vec<(f64, String)> = if x_ticks.is_empty() { evenly.collect() } else { x_ticks.to_vec() };
    for (x, text) in x_ticks {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            px(x),
            height - BOTTOM + 16.0,
            escape(&text)
        );
    }
    let y_ticks: Vec<f64> = if log {
        (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=4).map(|k| y0 + (y1 - y0) * f64::from(k) / 4.0).collect()
    };
    for y in y_ticks {
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            py(y) + 4.0,
            tick(y),
            y = py(y)
        );
    }
    let y_title = format!("{y_label}{}", if log { " (log)" } else { "" });
    axis_titles(&mut out, (LEFT + W - RIGHT) / 2.0, height, x_label, log_x, &y_title);
    let _ = write!(out, r#"<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{}</text>"#, escape(title));
    for (name, y) in targets {
        let _ = write!(
            out,
            r##"<line class="target" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" font-size="11" fill="#c00">{}</text>"##,
            W - RIGHT,
            LEFT + 4.0,
            py(*y) - 4.0,
            escape(name),
            y = py(*y)
        );
    }
    // A solid series takes the next colour; a dashed one (a second statistic
    // of the same deployment: p50 after p99, goodput after served) keeps it.
    let mut colour_index = 0;
    for (i, s) in series.iter().enumerate() {
        if i > 0 && !s.dashed {
            colour_index += 1;
        }
        let colour = COLOURS[colour_index % COLOURS.len()];
        let mut points = s.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let dash = if s.dashed { r#" stroke-dasharray="3 3""# } else { "" };
        if !s.band.is_empty() {
            let mut band = s.band.clone();
            band.sort_by(|a, b| a.0.total_cmp(&b.0));
            let upper = band.iter().map(|&(x, _, hi)| format!("{:.1},{:.1}", px(x), py(hi)));
            let lower = band.iter().rev().map(|&(x, lo, _)| format!("{:.1},{:.1}", px(x), py(lo)));
            let _ = write!(
                out,
                r#"<polygon class="band" fill="{colour}" fill-opacity="0.15" stroke="none" points="{}"/>"#,
                upper.chain(lower).collect::<Vec<_>>().join(" ")
            );
        }
        let _ = write!(
            out,
            r#"<polyline class="series" fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"><title>{}</title></polyline>"#,
            path.join(" "),
            escape(&s.name)
        );
        for (x, y) in &points {
            let _ = write!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#, px(*x), py(*y));
        }
        let ly = TOP + 13.0 * i as f64 + 8.0;
        let _ = write!(
            out,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}" font-size="10">{}</text>"#,
            W - RIGHT + 8.0,
            W - RIGHT + 24.0,
            W - RIGHT + 28.0,
            ly + 3.0,
            escape(&s.name)
        );
    }
    out.push_str("</svg></figure>");
    out
}

/// Horizontal bars, one per label, with a note at each bar's end.
pub(crate) fn bar_chart(
    id: &str,
    title: &str,
    x_label: &str,
    bars: &[(String, f64, String)],
    target: Option<f64>,
) -> String {
    let row = 22.0;
    let h = TOP + BOTTOM + row * bars.len() as f64;
    let label_w = 420.0;
    let max = bars.iter().map(|b| b.1).chain(target).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let px = |v: f64| label_w + v / max * (W - label_w - 90.0);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<figure id="{id}"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{t}"><title>{t}</title><text x="8" y="18" font-size="13" font-weight="bold">{t}</text>"#,
        t = escape(title)
    );
    for (i, (label, v, note)) in bars.iter().enumerate() {
        let y = TOP + row * i as f64;
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text><rect class="bar" x="{label_w}" y="{}" width="{:.1}" height="{}" fill="#0072B2"/><text x="{:.1}" y="{}" font-size="11">{}</text>"##,
            label_w - 6.0,
            y + 14.0,
            escape(label),
            y + 3.0,
            px(*v) - label_w,
            row - 6.0,
            px(*v) + 4.0,
            y + 14.0,
            escape(note)
        );
    }
    if let Some(t) = target {
        let _ = write!(
            out,
            r##"<line class="target" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}" stroke="#c00" stroke-dasharray="6 4"/><text x="{x:.1}" y="{}" font-size="11" fill="#c00" text-anchor="middle">target {}</text>"##,
            h - BOTTOM,
            h - BOTTOM + 14.0,
            tick(t),
            x = px(t)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text></svg></figure>"#,
        (label_w + W) / 2.0,
        h - 8.0,
        escape(x_label)
    );
    out
}

/// One mark of a scatter chart.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub(crate) x: f64,
    pub(crate) y: f64,
    /// Met the SLO (filled), missed it (hollow), or no SLO (filled grey).
    pub(crate) met: Option<bool>,
    /// On the frontier: joined by the frontier's line, drawn larger.
    pub(crate) frontier: bool,
    /// What hovering it shows.
    pub(crate) title: String,
}

/// A scatter chart of `marks`, the frontier's marks joined by a line
/// (log x when the values span more than a decade and a half, as for
/// [`line_chart`]'s loads). The legend says what filled and hollow mean.
pub(crate) fn scatter_chart(id: &str, title: &str, x_label: &str, y_label: &str, marks: &[Mark]) -> String {
    let width = W - RIGHT + 200.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<figure id="{id}"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {H}" width="{width}" height="{H}" role="img" aria-label="{t}"><title>{t}</title><text x="{LEFT}" y="18" font-size="13" font-weight="bold">{t}</text>"#,
        t = escape(title)
    );
    let marks: Vec<&Mark> = marks.iter().filter(|m| m.x.is_finite() && m.y.is_finite()).collect();
    if marks.is_empty() {
        out.push_str(r#"<text x="20" y="40">no data</text></svg></figure>"#);
        return out;
    }
    let (x0, x1) = marks.iter().fold((f64::MAX, f64::MIN), |(a, b), m| (a.min(m.x), b.max(m.x)));
    let y1 = marks.iter().fold(0.0f64, |a, m| a.max(m.y)) * 1.05;
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    let log_x = x0 > 0.0 && x1 / x0 > 30.0;
    let (a, b) = if log_x { (x0.log10(), x1.log10()) } else { (0.0f64.min(x0), x1 * 1.05) };
    let (a, b) = if b > a { (a, b) } else { (a - 1.0, b + 1.0) };
    let plot_right = width - 200.0;
    let px = |x: f64| LEFT + ((if log_x { x.max(1e-12).log10() } else { x }) - a) / (b - a) * (plot_right - LEFT);
    let py = |y: f64| H - BOTTOM - y / y1 * (H - TOP - BOTTOM);
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
        plot_right - LEFT,
        H - TOP - BOTTOM
    );
    for k in 0..=4 {
        let v = a + (b - a) * f64::from(k) / 4.0;
        let x = if log_x { 10f64.powf(v) } else { v };
        let y = y1 * f64::from(k) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text><line x1="{LEFT}" x2="{plot_right}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            px(x),
            H - BOTTOM + 16.0,
            tick(x),
            LEFT - 4.0,
            py(y) + 4.0,
            tick(y),
            yy = py(y)
        );
    }
    axis_titles(&mut out, (LEFT + plot_right) / 2.0, H, x_label, log_x, y_label);
    let mut line: Vec<&&Mark> = marks.iter().filter(|m| m.frontier).collect();
    line.sort_by(|p, q| p.x.total_cmp(&q.x));
    let path: Vec<String> = line.iter().map(|m| format!("{:.1},{:.1}", px(m.x), py(m.y))).collect();
    let _ = write!(
        out,
        r##"<polyline class="frontier" fill="none" stroke="#000" stroke-width="1.5" points="{}"/>"##,
        path.join(" ")
    );
    for m in &marks {
        let (fill, stroke) = match m.met {
            Some(true) => ("#009E73", "#009E73"),
            Some(false) => ("none", "#D55E00"),
            None => ("#777", "#777"),
        };
        let r = if m.frontier { 5.0 } else { 3.0 };
        let _ = write!(
            out,
            r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="{r}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{}</title></circle>"#,
            px(m.x),
            py(m.y),
            escape(&m.title)
        );
    }
    let lx = plot_right + 12.0;
    // Without an SLO no mark met or missed one: the legend says so.
    let legend: &[(&str, &str, &str)] = if marks.iter().all(|m| m.met.is_none()) {
        &[("#777", "#777", "a grid point (no SLO)")]
    } else {
        &[("#009E73", "#009E73", "meets the SLO (every seed)"), ("none", "#D55E00", "misses it")]
    };
    let mut y = TOP + 8.0;
    for (fill, stroke, text) in legend {
        let _ = write!(
            out,
            r#"<circle cx="{lx}" cy="{y}" r="4" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/><text x="{}" y="{}" font-size="10">{text}</text>"#,
            lx + 8.0,
            y + 3.0
        );
        y += 16.0;
    }
    let _ = write!(
        out,
        r##"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="#000" stroke-width="1.5"/><text x="{}" y="{}" font-size="10">Pareto frontier</text></svg></figure>"##,
        lx - 4.0,
        lx + 4.0,
        lx + 8.0,
        y + 3.0
    );
    out
}

/// The axes' titles of a chart `height` tall: the x axis's under the plot,
/// centred at `x_center` (" (log)" on a log axis), the y axis's turned
/// along its left edge.
fn axis_titles(out: &mut String, x_center: f64, height: f64, x_label: &str, log_x: bool, y_label: &str) {
    let mid = (TOP + height - BOTTOM) / 2.0;
    let _ = write!(
        out,
        r#"<text x="{x_center:.1}" y="{}" font-size="12" text-anchor="middle">{}</text><text x="14" y="{mid:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {mid:.1})">{}</text>"#,
        height - 8.0,
        escape(&format!("{x_label}{}", if log_x { " (log)" } else { "" })),
        escape(y_label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg_with_their_parts() {
        let s = vec![
            Series {
                name: "a<b".to_owned(),
                points: vec![(1.0, 10.0), (2.0, 5000.0)],
                dashed: false,
                band: vec![(1.0, 8.0, 10.0), (2.0, 4000.0, 5000.0)],
            },
            Series { name: "c".to_owned(), points: vec![(1.0, 20.0)], dashed: true, band: Vec::new() },
        ];
        let svg = line_chart("f", "TTFT", "load", &[], "ms", &s, &[("SLO".to_owned(), 1000.0)]);
        assert!(svg.starts_with(r#"<figure id="f"><svg"#) && svg.ends_with("</svg></figure>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches(r#"class="band""#).count(), 1);
        assert_eq!(svg.matches(r#"class="target""#).count(), 1);
        assert!(svg.contains("a&lt;b") && svg.contains("(log)"));
        let bars = bar_chart("b", "capacity", "req/s", &[("x".to_owned(), 3.0, "2 GPUs".to_owned())], Some(10.0));
        assert_eq!(bars.matches(r#"class="bar""#).count(), 1);
        assert!(line_chart("e", "t", "x", &[], "y", &[], &[]).contains("no data"));
        let named = line_chart("n", "t", "x", &[(1.0, "8".to_owned()), (2.0, "open".to_owned())], "y", &s, &[]);
        assert!(named.contains(">8</text>") && named.contains(">open</text>") && !named.contains(">1.5</text>"));
        let mark =
            |x: f64, frontier: bool| Mark { x, y: 2.0 * x, met: Some(frontier), frontier, title: "p".to_owned() };
        let scatter = scatter_chart("p", "t", "x", "y", &[mark(1.0, false), mark(2.0, true), mark(f64::NAN, true)]);
        assert_eq!(scatter.matches(r#"class="point""#).count(), 2);
        assert_eq!(scatter.matches(r##"fill="none" stroke="#D55E00""##).count(), 2, "a hollow mark and its legend");
        assert!(scatter_chart("e", "t", "x", "y", &[]).contains("no data"));
    }
}

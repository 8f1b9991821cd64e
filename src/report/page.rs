//! The report's page: one self-contained HTML file. Its charts are
//! Vega-Lite specs drawn in the browser by Vega, Vega-Lite and vega-embed,
//! vendored into the binary (`assets/vega/`, BSD-3-Clause, fetched and
//! checked by `scripts/vendor-vega.sh`): nothing is fetched, the file opens
//! offline. Each chart is a `<figure class="chart">` holding its spec as
//! JSON (`script.spec`: copy it and point its `data` at your own DuckDB
//! query); the page's script renders each one to SVG with tooltips and the
//! export menu, then writes on the figure how many data marks it drew
//! (`data-marks`) and into `#report-errors` anything the libraries logged as
//! a warning or an error — what CI's headless Chromium reads
//! (`scripts/check-report.py`).

use serde_json::Value;

const VEGA: &str = include_str!("../../assets/vega/vega.min.js");
const VEGA_LITE: &str = include_str!("../../assets/vega/vega-lite.min.js");
const VEGA_EMBED: &str = include_str!("../../assets/vega/vega-embed.min.js");

/// Runs first, before the libraries: what anything on the page logs as a
/// warning or an error, and any uncaught error, is kept (`report-errors`).
const CAPTURE: &str = r#"
(function () {
  var notes = window.reportNotes = [];
  ['error', 'warn'].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      notes.push(level + ': ' + Array.prototype.map.call(arguments, String).join(' '));
      original.apply(console, arguments);
    };
  });
  window.addEventListener('error', function (e) { notes.push('error: ' + e.message); });
  window.addEventListener('unhandledrejection', function (e) { notes.push('error: ' + e.reason); });
})();
"#;

/// Renders every chart; counts the data marks each drew (items of marks
/// whose role is `mark`, groups excepted: axes, legends and facet cells
/// are not data); when every chart is done, writes what was logged into
/// `#report-errors`, the page's height on `body[data-height]` (for a
/// screenshot of the whole page) and the count of charts on
/// `body[data-rendered]`.
const RENDER: &str = r#"
(function () {
  function marks(mark) {
    var n = 0;
    (mark.items || []).forEach(function (item) {
      if (mark.role === 'mark' && mark.marktype !== 'group') n += 1;
      (item.items || []).forEach(function (child) { n += marks(child); });
    });
    return n;
  }
  var figures = document.querySelectorAll('figure.chart');
  var pending = figures.length;
  function done() {
    if (--pending > 0) return;
    var log = document.getElementById('report-errors');
    log.textContent = window.reportNotes.join('\n');
    log.hidden = window.reportNotes.length === 0;
    document.body.setAttribute('data-height', String(document.documentElement.scrollHeight));
    document.body.setAttribute('data-rendered', String(figures.length));
  }
  pending += 1;
  figures.forEach(function (figure) {
    var spec = JSON.parse(figure.querySelector('script.spec').textContent);
    var options = { renderer: 'svg', actions: { export: true, source: true, compiled: false, editor: false } };
    vegaEmbed(figure.querySelector('div.vega'), spec, options).then(function (result) {
      figure.setAttribute('data-marks', String(marks(result.view.scenegraph().root)));
      done();
    }).catch(function (e) {
      figure.setAttribute('data-marks', '0');
      window.reportNotes.push('error: ' + figure.id + ': ' + e);
      done();
    });
  });
  done();
})();
"#;

/// Text for HTML.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// JSON inside a `<script>` element: `</` would end the element, and JSON
/// allows `\/` for `/`.
pub(super) fn script_json(v: &Value) -> String {
    v.to_string().replace("</", "<\\/")
}

/// A chart: its figure, named `id` in the page, holding `spec` (Vega-Lite).
pub(super) fn chart(id: &str, spec: &Value) -> String {
    format!(
        "<figure class=\"chart\" id=\"{}\"><div class=\"vega\"></div><script type=\"application/json\" \
         class=\"spec\">{}</script></figure>",
        escape(id),
        script_json(spec)
    )
}

/// The page: `title`, then `body`; the libraries and the renderer inline.
pub(super) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;max-width:1180px;margin:2em auto;color:#222}}figure{{margin:1em 0}}\
         table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         th{{background:#f4f4f4}}td.l{{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:8px}}\
         #report-errors{{color:#a00}}</style>\n\
         <!-- Vega 6.4.0, Vega-Lite 6.5.0, vega-embed 7.3.0: BSD-3-Clause, (c) University of Washington \
         Interactive Data Lab; see https://github.com/vega (licences in the blis-sweep repository's assets/vega/) -->\n\
         <script>{CAPTURE}</script>\n<script>{VEGA}</script>\n<script>{VEGA_LITE}</script>\n<script>{VEGA_EMBED}</script>\n</head>\
         <body><h1>{t}</h1>\n{body}<pre id=\"report-errors\" hidden></pre>\n<script>{RENDER}</script></body></html>\n",
        t = escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_cannot_end_its_script_element() {
        let figure = chart("x", &serde_json::json!({"title": "</script><b>"}));
        assert_eq!(figure.matches("</script>").count(), 1, "{figure}");
        assert!(figure.contains(r#""<\/script><b>""#));
    }

    #[test]
    fn the_page_holds_the_libraries_and_no_address_to_fetch() {
        let html = page("t", "");
        assert!(html.contains(VEGA) && html.contains(VEGA_LITE) && html.contains(VEGA_EMBED));
        assert!(!html.contains("<script src") && !html.contains("<link"));
    }
}

//! A small parser for the Prometheus text exposition format (version 0.0.4),
//! the body of vLLM's `/metrics`. Only what a scraper needs: each sample line
//! becomes a name, its labels and its value; `# HELP` / `# TYPE` comments and
//! blank lines are skipped. Written here rather than taken as a dependency:
//! the format is line-based and the whole grammar fits in a page
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSample {
    /// The metric name with any `_total`/`_bucket`/... suffix.
    pub name: String,
    /// In the order they appear on the line.
    pub labels: Labels,
    /// The sample value (NaN and ±Inf allowed).
    pub value: f64,
}

impl PromSample {
    /// The value of label `key`, if the sample carries it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// A line the parser could not read: 1-based line number and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics line {line}: {reason}")]
pub struct PromError {
    /// 1-based line number in the body.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

/// Parses a whole exposition body into its samples, in order.
pub fn parse(text: &str) -> Result<Vec<PromSample>, PromError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_line(line).map_err(|reason| PromError { line: i + 1, reason })?;
        out.push(sample);
    }
    Ok(out)
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn parse_line(line: &str) -> Result<PromSample, String> {
    let name_end = line.char_indices().find(|&(i, c)| !is_name_char(c, i == 0)).map_or(line.len(), |(i, _)| i);
    if name_end == 0 {
        return Err(format!("expected a metric name, found {:?}", first_chars(line)));
    }
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value_text = fields.next().ok_or_else(|| format!("{name}: no value after the name"))?;
    let value = parse_value(value_text).ok_or_else(|| format!("{name}: value {value_text:?} is not a number"))?;
    // An optional integer timestamp (ms) may follow; vLLM writes none.
    if let Some(ts) = fields.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(format!("{name}: timestamp {ts:?} is not an integer"));
    }
    if let Some(extra) = fields.next() {
        return Err(format!("{name}: unexpected {extra:?} after the value"));
    }
    Ok(PromSample { name, labels, value })
}

/// Label name/value pairs in line order.
type Labels = Vec<(String, String)>;

/// Reads `key="value",...}` (the text after `{`); returns the labels and the
/// text after the closing brace.
fn parse_labels(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let key_end = s
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(s.len(), |(i, _)| i);
        if key_end == 0 {
            return Err(format!("expected a label name, found {:?}", first_chars(s)));
        }
        let key = s[..key_end].to_string();
        s = s[key_end..].trim_start();
        s = s.strip_prefix('=').ok_or_else(|| format!("label {key}: expected '='"))?.trim_start();
        s = s.strip_prefix('"').ok_or_else(|| format!("label {key}: expected a quoted value"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("label {key}: unterminated value")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, c)) => return Err(format!("label {key}: unknown escape \\{c}")),
                    None => return Err(format!("label {key}: unterminated value")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key, value));
        s = s[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(format!("expected ',' or '}}' after a label, found {:?}", first_chars(s)));
        }
    }
}

/// Go's `strconv.ParseFloat` forms that Prometheus writes: decimals,
/// exponents, `NaN`, `+Inf`, `-Inf`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

fn first_chars(s: &str) -> String {
    s.chars().take(20).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_labels_values_and_skips_comments() {
        let text = "# HELP x help\n# TYPE x gauge\n\nx 1\nvllm:a_total{engine=\"0\",model_name=\"tiny\"} 2620.0\n\
                    h_bucket{le=\"+Inf\"} 3 1700000000000\nn NaN\ni -Inf\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0], PromSample { name: "x".into(), labels: vec![], value: 1.0 });
        assert_eq!(s[1].name, "vllm:a_total");
        assert_eq!(s[1].label("engine"), Some("0"));
        assert_eq!(s[1].label("model_name"), Some("tiny"));
        assert_eq!(s[1].value, 2620.0);
        assert_eq!(s[2].label("le"), Some("+Inf"));
        assert!(s[3].value.is_nan());
        assert_eq!(s[4].value, f64::NEG_INFINITY);
    }

    #[test]
    fn label_values_unescape_and_may_hold_commas_and_braces() {
        let s = parse("m{a=\"x,}y\",b=\"q\\\"\\\\\\n\",} 1e3\n").unwrap();
        assert_eq!(s[0].labels, vec![("a".into(), "x,}y".into()), ("b".into(), "q\"\\\n".into())]);
        assert_eq!(s[0].value, 1000.0);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        for (text, want) in [
            ("ok 1\n{a=\"b\"} 1\n", "metrics line 2: expected a metric name"),
            ("m{a=\"b} 1\n", "metrics line 1: label a: unterminated value"),
            ("m{a=b} 1\n", "metrics line 1: label a: expected a quoted value"),
            ("m{a=\"b\" c=\"d\"} 1\n", "metrics line 1: expected ',' or '}'"),
            ("m\n", "metrics line 1: m: no value"),
            ("m one\n", "metrics line 1: m: value \"one\" is not a number"),
            ("m 1 2 3\n", "metrics line 1: m: unexpected \"3\""),
            ("m 1 x\n", "metrics line 1: m: timestamp \"x\""),
            ("<html>\n", "metrics line 1: expected a metric name"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }
}

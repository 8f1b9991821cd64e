//! The distributions a spec draws numbers from (`constant`, `uniform`,
//! `normal`, `lognormal`, `exponential`, `empirical` from a file), resolved
//! and checked once, each with its `min`/`max` clamps, and sampled as counts
//! or seconds within the simulator's bounds.

use rand::RngExt;
use rand_distr::{Distribution, Exp, LogNormal, Normal};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::spec::{DistSpec, GenerateError, bad};

/// A resolved distribution.
#[derive(Debug, Clone)]
enum Dist {
    Constant(f64),
    Uniform(f64, f64),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Exponential(Exp<f64>),
    Empirical(Vec<f64>),
}

/// A resolved distribution with its clamps.
#[derive(Debug, Clone)]
pub(super) struct Clamped {
    dist: Dist,
    min: f64,
    max: f64,
}

impl Clamped {
    /// `s` at `field`, checked; `base` is where an `empirical` path starts.
    pub(super) fn resolve(field: &str, s: &DistSpec, base: &std::path::Path) -> Result<Clamped, GenerateError> {
        let need = |name: &str, v: Option<f64>| match v {
            Some(x) if x.is_finite() => Ok(x),
            Some(x) => bad(&format!("{field}.{name}"), format!("{x} is not a finite number")),
            None => bad(&format!("{field}.{name}"), format!("missing (needed by kind {})", s.kind)),
        };
        let dist = match s.kind.as_str() {
            "constant" => Dist::Constant(need("value", s.value)?),
            "uniform" => {
                let (lo, hi) = (need("min", s.min)?, need("max", s.max)?);
                if lo > hi {
                    return bad(&format!("{field}.min"), format!("{lo} exceeds max {hi}"));
                }
                Dist::Uniform(lo, hi)
            }
            "normal" => Dist::Normal(
                Normal::new(need("mean", s.mean)?, need("std", s.std)?)
                    .map_err(|e| GenerateError { field: format!("{field}.std"), reason: e.to_string() })?,
            ),
            "lognormal" => {
                let median = need("median", s.median)?;
                if median <= 0.0 {
                    return bad(&format!("{field}.median"), "must be positive");
                }
                Dist::LogNormal(
                    LogNormal::new(median.ln(), need("sigma", s.sigma)?)
                        .map_err(|e| GenerateError { field: format!("{field}.sigma"), reason: e.to_string() })?,
                )
            }
            "exponential" => {
                let mean = need("mean", s.mean)?;
                if mean <= 0.0 {
                    return bad(&format!("{field}.mean"), "must be positive");
                }
                Dist::Exponential(
                    Exp::new(1.0 / mean)
                        .map_err(|e| GenerateError { field: format!("{field}.mean"), reason: e.to_string() })?,
                )
            }
            "empirical" => {
                let Some(path) = &s.path else {
                    return bad(&format!("{field}.path"), "missing (needed by kind empirical)");
                };
                let full = base.join(path);
                let text = std::fs::read_to_string(&full).map_err(|e| GenerateError {
                    field: format!("{field}.path"),
                    reason: format!("{}: {e}", full.display()),
                })?;
                let mut values = Vec::new();
                for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                    match line.trim().parse::<f64>() {
                        Ok(v) if v.is_finite() => values.push(v),
                        _ => {
                            return bad(
                                &format!("{field}.path"),
                                format!("{}:{}: `{}` is not a number", full.display(), i + 1, line.trim()),
                            );
                        }
                    }
                }
                if values.is_empty() {
                    return bad(&format!("{field}.path"), format!("{}: no values", full.display()));
                }
                Dist::Empirical(values)
            }
            other => {
                return bad(
                    &format!("{field}.kind"),
                    format!(
                        "unknown kind `{other}`; use constant, uniform, normal, lognormal, exponential or empirical"
                    ),
                );
            }
        };
        for (name, v) in [("min", s.min), ("max", s.max)] {
            if let Some(x) = v
                && x.is_nan()
            {
                return bad(&format!("{field}.{name}"), "is not a number");
            }
        }
        let (min, max) = (s.min.unwrap_or(f64::NEG_INFINITY), s.max.unwrap_or(f64::INFINITY));
        if min > max {
            return bad(&format!("{field}.min"), format!("{min} exceeds max {max}"));
        }
        Ok(Clamped { dist, min, max })
    }

    /// One draw, clamped.
    pub(super) fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        let x = match &self.dist {
            Dist::Constant(v) => *v,
            Dist::Uniform(lo, hi) => lo + (hi - lo) * rng.random::<f64>(),
            Dist::Normal(d) => d.sample(rng),
            Dist::LogNormal(d) => d.sample(rng),
            Dist::Exponential(d) => d.sample(rng),
            Dist::Empirical(v) => v[rng.random_range(0..v.len())],
        };
        x.clamp(self.min, self.max)
    }

    /// A count: rounded, at least `floor`, at most `limit`, or an error
    /// naming `field` (checked before anything that size is allocated).
    pub(super) fn count(
        &self,
        rng: &mut Xoshiro256PlusPlus,
        floor: u32,
        limit: u32,
        field: &str,
    ) -> Result<u32, GenerateError> {
        let x = self.sample(rng).round().max(f64::from(floor));
        if x > f64::from(limit) {
            return bad(field, format!("drew {x}, more than {limit}; set a lower `max`"));
        }
        Ok(x as u32)
    }

    /// Seconds, never negative, within the simulator's clock.
    pub(super) fn seconds(&self, rng: &mut Xoshiro256PlusPlus, field: &str) -> Result<f64, GenerateError> {
        let x = (self.sample(rng).max(0.0) * 1e6).round() / 1e6;
        crate::workload::types::checked_seconds_to_us(x)
            .or_else(|reason| bad(field, format!("drew {reason}; set a lower `max`")))?;
        Ok(x)
    }
}

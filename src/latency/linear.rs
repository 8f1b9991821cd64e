//! BLIS-style linear step model: users with coefficients fitted on their own
//! measurements price a step as a line in the batch's token counts. Its
//! coefficients are named constants, so `blis-sweep fit` fits them like the
//! roofline's — the model for a server no datasheet describes (`hardware:
//! custom`, e.g. vLLM on a CPU).

use serde::{Deserialize, Serialize};

use super::batch::{LatencyModel, StepBatch};

/// `step_us = step_us + prefill_token_us·prefill_tokens +
/// decode_token_us·decode_tokens + decode_context_token_us·decode_context`,
/// where `decode_context` is the summed context length of the decodes (the
/// KV that decode attention reads); `request_overhead_us` is each request's
/// time in the HTTP front end before the engine sees it. All µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearConstants {
    /// Fixed time of a step (β0).
    pub step_us: f64,
    /// Per prefill token computed (β1).
    pub prefill_token_us: f64,
    /// Per decode token (β2; a speculative decode counts its drafts).
    pub decode_token_us: f64,
    /// Per token of the decodes' context (β3).
    #[serde(default)]
    pub decode_context_token_us: f64,
    /// Per request, before its first step.
    #[serde(default)]
    pub request_overhead_us: f64,
}

impl LinearConstants {
    /// The constants of BLIS's `beta: [b0, b1, b2(, b3)]`.
    pub fn from_beta(beta: &[f64]) -> Result<LinearConstants, String> {
        if !(3..=4).contains(&beta.len()) {
            return Err(format!("expected 3 or 4 coefficients [b0, b1, b2(, b3)], got {}", beta.len()));
        }
        Ok(LinearConstants {
            step_us: beta[0],
            prefill_token_us: beta[1],
            decode_token_us: beta[2],
            decode_context_token_us: beta.get(3).copied().unwrap_or(0.0),
            request_overhead_us: 0.0,
        })
    }

    /// The first constant that is negative, NaN or infinite, and why.
    pub fn validate(&self) -> Result<(), String> {
        let all = [
            ("step_us", self.step_us),
            ("prefill_token_us", self.prefill_token_us),
            ("decode_token_us", self.decode_token_us),
            ("decode_context_token_us", self.decode_context_token_us),
            ("request_overhead_us", self.request_overhead_us),
        ];
        for (name, v) in all {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name}: {v} is not a finite, non-negative number of microseconds"));
            }
        }
        Ok(())
    }
}

/// The linear model with its constants.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    c: LinearConstants,
}

impl Linear {
    /// A linear model from BLIS's `beta` (µs per step, per prefill token,
    /// per decode token, and optionally per decode-context token).
    pub fn new(beta: &[f64]) -> Result<Linear, String> {
        Linear::from_constants(LinearConstants::from_beta(beta)?)
    }

    /// A linear model of checked constants.
    pub fn from_constants(c: LinearConstants) -> Result<Linear, String> {
        c.validate()?;
        Ok(Linear { c })
    }

    /// Its constants.
    pub fn constants(&self) -> LinearConstants {
        self.c
    }
}

impl LatencyModel for Linear {
    fn step_time_us(&self, batch: &StepBatch) -> u64 {
        let prefill: u64 = batch.prefills.iter().map(|c| u64::from(c.new_tokens)).sum();
        // Speculative drafts widen the decodes: each verifies 1 + its drafts.
        let decode = u64::from(batch.decodes) + u64::from(batch.spec_tokens);
        let context = batch.decode_context_tokens;
        let c = &self.c;
        let us = c.step_us
            + c.prefill_token_us * prefill as f64
            + c.decode_token_us * decode as f64
            + c.decode_context_token_us * context as f64;
        (us.round() as u64).max(1)
    }

    fn request_overhead_us(&self) -> u64 {
        self.c.request_overhead_us.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::PrefillChunk;

    #[test]
    fn prices_prefill_and_decode_separately() {
        let m = Linear::new(&[1000.0, 2.0, 10.0]).unwrap();
        let batch = StepBatch {
            prefills: vec![PrefillChunk { new_tokens: 100, context_tokens: 0, samples: true }],
            decodes: 1,
            decode_context_tokens: 50,
            ..StepBatch::default()
        };
        assert_eq!(m.step_time_us(&batch), 1210);
        assert_eq!(m.request_overhead_us(), 0);
        assert!(Linear::new(&[1.0]).is_err());
        assert!(Linear::new(&[1.0, -1.0, 0.0]).is_err());
    }

    /// The context term and the front end's time, as named constants.
    #[test]
    fn context_and_request_overhead_are_priced() {
        let c = LinearConstants {
            step_us: 100.0,
            decode_token_us: 1.0,
            decode_context_token_us: 0.5,
            request_overhead_us: 2500.4,
            ..LinearConstants::default()
        };
        let m = Linear::from_constants(c).unwrap();
        let batch = StepBatch { decodes: 2, decode_context_tokens: 40, ..StepBatch::default() };
        assert_eq!(m.step_time_us(&batch), 122);
        assert_eq!(m.request_overhead_us(), 2500);
        assert_eq!(m.constants(), c);
        let bad = LinearConstants { request_overhead_us: f64::NAN, ..c };
        assert!(Linear::from_constants(bad).unwrap_err().starts_with("request_overhead_us"));
    }
}

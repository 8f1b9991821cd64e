//! BLIS-style linear step model: users with coefficients fitted on their own
//! measurements price a step as a line in the batch's token counts.

use super::batch::{LatencyModel, StepBatch};

/// `step_us = β0 + β1·prefill_tokens + β2·decode_tokens + β3·decode_context`,
/// where `decode_context` is the summed context length of the decodes (the KV
/// that decode attention reads). β3 defaults to 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    beta: [f64; 4],
}

/// Coefficients that cannot price a step. Fatal for the scenario.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinearError {
    /// Not 3 or 4 coefficients.
    #[error("expected 3 or 4 coefficients [b0, b1, b2(, b3)], got {0}")]
    Count(usize),
    /// A coefficient is negative, NaN or infinite.
    #[error("beta[{0}] = {1} is not a finite, non-negative number of microseconds")]
    Value(usize, f64),
}

impl Linear {
    /// A linear model from `beta` (µs per step, per prefill token, per decode
    /// token, and optionally per decode-context token).
    pub fn new(beta: &[f64]) -> Result<Linear, LinearError> {
        if !(3..=4).contains(&beta.len()) {
            return Err(LinearError::Count(beta.len()));
        }
        let mut b = [0.0; 4];
        for (i, &v) in beta.iter().enumerate() {
            if !v.is_finite() || v < 0.0 {
                return Err(LinearError::Value(i, v));
            }
            b[i] = v;
        }
        Ok(Linear { beta: b })
    }
}

impl LatencyModel for Linear {
    fn step_time_us(&self, batch: &StepBatch) -> u64 {
        let prefill: u64 = batch.prefills.iter().map(|c| u64::from(c.new_tokens)).sum();
        // Speculative drafts widen the decodes: each verifies 1 + its drafts.
        let decode = u64::from(batch.decodes) + u64::from(batch.spec_tokens);
        let context = batch.decode_context_tokens;
        let [b0, b1, b2, b3] = self.beta;
        let us = b0 + b1 * prefill as f64 + b2 * decode as f64 + b3 * context as f64;
        (us.round() as u64).max(1)
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
        assert!(Linear::new(&[1.0]).is_err());
        assert!(Linear::new(&[1.0, -1.0, 0.0]).is_err());
    }
}

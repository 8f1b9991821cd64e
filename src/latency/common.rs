//! What every latency model shares: how a step's CPU side and GPU side
//! combine, the measured CPU side, the sampler's sort, and how well a
//! kernel that streams memory uses the HBM.

use super::batch::StepBatch;

/// Skinny GEMMs (m ≤ 16) that stream ≥ 4096×11008 weights reach a median
/// 2.85 of 3.35 TB/s in `h100_sxm_vllm0.24_gemm_bf16.csv`.
pub(super) const MEMORY_EFFICIENCY: f64 = 0.85;

/// A step's duration from its GPU side and its CPU side, µs: their sum when
/// they take turns, the longer when async scheduling overlaps them.
///
/// The CPU side is the host work on the path from one step's GPU work to the
/// next: the engine core's `Scheduler.schedule()`, the executor's broadcast
/// of the `SchedulerOutput` (a pickle, vllm/distributed/device_communicators/
/// shm_broadcast.py `MessageQueue.enqueue`), the GPU worker's input
/// preparation (vllm/v1/worker/gpu_model_runner.py `_update_states`,
/// `_prepare_inputs`) and `Scheduler.update_from_output()`. The front end
/// (detokenization, `OutputProcessor.process_outputs`) runs in the API
/// server's process and the output encoding in the engine core's output
/// thread (vllm/v1/engine/core.py `process_output_sockets`), while the busy
/// loop waits on the GPU: neither is on that path in either mode.
///
/// Without async scheduling (vllm/v1/engine/core.py `EngineCore.step`) a
/// step is schedule → execute → wait → update_from_output: the GPU idles
/// through the whole CPU side, and a step lasts the sum. With it (vLLM 0.14+,
/// `EngineCore.step_with_batch_queue`, a batch queue of 2:
/// vllm/v1/executor/multiproc_executor.py `max_concurrent_batches`), when the
/// GPU finishes step N the busy loop runs update_from_output(N), then
/// schedule(N+2) and its broadcast, and the worker prepares N+2, all while
/// the GPU runs N+1 (already scheduled and prepared; the worker takes N+1's
/// sampled tokens on the GPU, `AsyncScheduler` counting them as
/// placeholders): the whole CPU side is one serial chain hidden behind one
/// step's GPU time, and the GPU idles only for what the chain exceeds it by.
pub(super) fn overlap(gpu_us: f64, cpu_us: f64, async_scheduling: bool) -> f64 {
    if async_scheduling { gpu_us.max(cpu_us) } else { gpu_us + cpu_us }
}

/// The CPU side of a step of `batch` (see [`overlap`]), µs: measured terms
/// per step, per scheduled sequence and per scheduled token, times one
/// factor from the measuring host to the real runs' hosts.
pub(super) fn cpu_side_us(step_us: f64, per_sequence_us: f64, per_token_us: f64, scale: f64, batch: &StepBatch) -> f64 {
    let sequences = batch.prefills.len() as f64 + f64::from(batch.decodes);
    let tokens = f64::from(batch.decodes)
        + f64::from(batch.spec_tokens)
        + batch.prefills.iter().map(|c| f64::from(c.new_tokens)).sum::<f64>();
    scale * (step_us + per_sequence_us * sequences + per_token_us * tokens)
}

/// Serde's default for a factor: 1.
pub(super) fn one() -> f64 {
    1.0
}

/// vLLM's PyTorch top-k/top-p path (`apply_top_k_top_p`: a sort of every
/// sampling row over the whole vocabulary, then a cumulative softmax), µs
/// per logit: 3.812 ms for a batch of 256 rows × a vocabulary of 131,072
/// (vllm-project/vllm#32558, "Triton-based top-p/top-k masking", PyTorch
/// column, `topk_whole`; the same thread's smaller batches, about 1.07 ms at
/// 64 and 2.1–2.4 ms at 128, sit 11–21 % above this line). The sampler runs
/// on every TP rank over the full vocabulary, so TP does not shrink it.
pub(crate) const SORT_SAMPLER_US_PER_LOGIT: f64 = 3812.0 / (256.0 * 131_072.0);

/// GPU time of vLLM's sort-based top-k/top-p sampler for `sequences`
/// sampling rows over a vocabulary of `vocab`, µs: proportional to the
/// logits sorted ([`SORT_SAMPLER_US_PER_LOGIT`]). Only releases that run
/// this path pay it (see [`crate::scenario::Sampling`]); greedy requests take
/// the argmax path and skip it.
pub(crate) fn sort_sampler_us(sequences: f64, vocab: f64) -> f64 {
    sequences * vocab * SORT_SAMPLER_US_PER_LOGIT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::PrefillChunk;

    /// 3 decodes and chunks of 100 and 20 tokens: 5 sequences, 123 tokens.
    /// 1.5 × (40 + 5 × 2 + 123 × 0.25) = 1.5 × 80.75 = 121.125 µs.
    #[test]
    fn the_cpu_side_counts_sequences_and_tokens() {
        let chunk = |new_tokens| PrefillChunk { new_tokens, context_tokens: 0, samples: false };
        let batch = StepBatch {
            prefills: vec![chunk(100), chunk(20)],
            decodes: 3,
            decode_context_tokens: 300,
            ..StepBatch::default()
        };
        assert_eq!(cpu_side_us(40.0, 2.0, 0.25, 1.5, &batch), 121.125);
        assert_eq!(cpu_side_us(40.0, 2.0, 0.25, 1.0, &StepBatch::EMPTY), 40.0);
        // Taking turns the sides add; overlapped the longer one shows.
        assert_eq!(overlap(1000.0, 121.125, false), 1121.125);
        assert_eq!(overlap(1000.0, 121.125, true), 1000.0);
        assert_eq!(overlap(100.0, 121.125, true), 121.125);
    }
}

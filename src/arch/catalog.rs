//! The embedded model catalog: public HuggingFace `config.json` files compiled
//! into the binary (no network at run time). `catalog/models/SOURCES.md` says
//! where each file came from; `scripts/import-model-configs.sh` re-copies the
//! ones that ship in `../shared`.

/// (catalog id, other names users type, config.json text)
const MODELS: &[(&str, &[&str], &str)] = &[
    (
        "Llama-2-7b",
        &["meta-llama/Llama-2-7b-hf", "Llama-2-7b-hf", "llama2-7b"],
        include_str!("catalog/models/Llama-2-7b.json"),
    ),
    (
        "Llama-2-70b",
        &["meta-llama/Llama-2-70b-hf", "Llama-2-70b-hf", "llama2-70b"],
        include_str!("catalog/models/Llama-2-70b.json"),
    ),
    (
        "CodeLlama-34b",
        &["codellama/CodeLlama-34b-Instruct-hf", "CodeLlama-34b-Instruct-hf", "codellama-34b-instruct"],
        include_str!("catalog/models/CodeLlama-34b.json"),
    ),
    (
        "Llama-3.1-8B",
        &[
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B",
            "Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct",
            "nvidia/Llama-3.1-8B-Instruct-FP8",
        ],
        include_str!("catalog/models/Llama-3.1-8B.json"),
    ),
    (
        "Llama-3.1-70B",
        &[
            "meta-llama/Llama-3.1-70B",
            "meta-llama/Meta-Llama-3.1-70B",
            "Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-70B-Instruct",
        ],
        include_str!("catalog/models/Llama-3.1-70B.json"),
    ),
    (
        "Mixtral-8x7B",
        &["mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"],
        include_str!("catalog/models/Mixtral-8x7B.json"),
    ),
    (
        "Mixtral-8x22B",
        &["mistralai/Mixtral-8x22B-v0.1", "Mixtral-8x22B-v0.1", "mistralai/Mixtral-8x22B-Instruct-v0.1"],
        include_str!("catalog/models/Mixtral-8x22B.json"),
    ),
    ("Qwen2.5-7B", &["Qwen/Qwen2.5-7B"], include_str!("catalog/models/Qwen2.5-7B.json")),
    (
        "Qwen2.5-7B-Instruct",
        &["Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct"],
        include_str!("catalog/models/Qwen2.5-7B-Instruct.json"),
    ),
    ("Qwen3-14B", &["Qwen/Qwen3-14B"], include_str!("catalog/models/Qwen3-14B.json")),
    ("Qwen3-32B", &["Qwen/Qwen3-32B"], include_str!("catalog/models/Qwen3-32B.json")),
    (
        "Qwen3-30B-A3B",
        &["Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B"],
        include_str!("catalog/models/Qwen3-30B-A3B.json"),
    ),
    (
        "Qwen3-235B-A22B",
        // The -FP8 release is the same model with 128 × 128 block-scaled FP8
        // weights: serve it with `dtype: fp8_block`.
        &["Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B-FP8"],
        include_str!("catalog/models/Qwen3-235B-A22B.json"),
    ),
    (
        "DeepSeek-V2-Lite",
        &["deepseek-ai/DeepSeek-V2-Lite", "deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite-Chat"],
        include_str!("catalog/models/DeepSeek-V2-Lite.json"),
    ),
    (
        "Mistral-Nemo-12B",
        &["mistralai/Mistral-Nemo-Instruct-2407", "Mistral-Nemo-Instruct-2407", "mistral-nemo-instruct-2407"],
        include_str!("catalog/models/Mistral-Nemo-12B.json"),
    ),
    ("Yi-34B", &["01-ai/Yi-34B", "yi-34b"], include_str!("catalog/models/Yi-34B.json")),
    ("gpt-oss-20b", &["openai/gpt-oss-20b"], include_str!("catalog/models/gpt-oss-20b.json")),
    ("gpt-oss-120b", &["openai/gpt-oss-120b"], include_str!("catalog/models/gpt-oss-120b.json")),
    (
        "gemma-3-4b-it",
        &["google/gemma-3-4b-it", "gemma-3-4b", "google/gemma-3-4b-pt"],
        include_str!("catalog/models/gemma-3-4b-it.json"),
    ),
    (
        "gemma-3-12b-it",
        &["google/gemma-3-12b-it", "gemma-3-12b", "google/gemma-3-12b-pt"],
        include_str!("catalog/models/gemma-3-12b-it.json"),
    ),
    (
        "gemma-3-27b-it",
        &["google/gemma-3-27b-it", "gemma-3-27b", "google/gemma-3-27b-pt"],
        include_str!("catalog/models/gemma-3-27b-it.json"),
    ),
    (
        "Mistral-7B-v0.1",
        &["mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b"],
        include_str!("catalog/models/Mistral-7B-v0.1.json"),
    ),
    (
        "Llama-4-Scout-17B-16E-Instruct",
        // RedHat's FP8-dynamic release (per-channel FP8 weights): `dtype: fp8`.
        &[
            "meta-llama/Llama-4-Scout-17B-16E-Instruct",
            "meta-llama/Llama-4-Scout-17B-16E",
            "llama-4-scout",
            "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        ],
        include_str!("catalog/models/Llama-4-Scout-17B-16E-Instruct.json"),
    ),
    (
        "Llama-4-Maverick-17B-128E-Instruct",
        &["meta-llama/Llama-4-Maverick-17B-128E-Instruct", "meta-llama/Llama-4-Maverick-17B-128E", "llama-4-maverick"],
        include_str!("catalog/models/Llama-4-Maverick-17B-128E-Instruct.json"),
    ),
    (
        "Qwen3-Next-80B-A3B-Instruct",
        &["Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"],
        include_str!("catalog/models/Qwen3-Next-80B-A3B-Instruct.json"),
    ),
    (
        "MiniMax-M2.5",
        // 128 × 128 block-scaled FP8 weights: serve with `dtype: fp8_block`.
        &["MiniMaxAI/MiniMax-M2.5", "minimax-m2.5"],
        include_str!("catalog/models/MiniMax-M2.5.json"),
    ),
    (
        "Kimi-K2.5",
        // INT4 routed experts (compressed-tensors, group 32), the rest 16-bit.
        &["moonshotai/Kimi-K2.5", "kimi-k2.5"],
        include_str!("catalog/models/Kimi-K2.5.json"),
    ),
    (
        "DeepSeek-V3",
        // The checkpoint is 128 × 128 block-scaled FP8: serve with `dtype: fp8_block`.
        &["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"],
        include_str!("catalog/models/DeepSeek-V3.json"),
    ),
];

/// Checkpoints whose FP8 weights carry 128 × 128 block scales (their
/// `quantization_config.weight_block_size`): served as `dtype: fp8_block`.
const BLOCK_FP8_CHECKPOINTS: [&str; 2] = ["Qwen/Qwen3-235B-A22B-FP8", "MiniMaxAI/MiniMax-M2.5"];

/// Whether `name` is a block-scaled FP8 checkpoint.
pub fn block_fp8_checkpoint(name: &str) -> bool {
    BLOCK_FP8_CHECKPOINTS.iter().any(|c| c.eq_ignore_ascii_case(name))
}

/// The sampling keys of each model's published `generation_config.json`
/// that vLLM applies to requests without their own (see `SOURCES.md`);
/// models not listed have not been checked.
const GENERATION_CONFIGS: &[(&str, &str)] = &[
    ("Llama-2-7b", include_str!("catalog/models/Llama-2-7b.generation_config.json")),
    ("CodeLlama-34b", include_str!("catalog/models/CodeLlama-34b.generation_config.json")),
    ("Llama-3.1-8B", include_str!("catalog/models/Llama-3.1-8B.generation_config.json")),
    ("Llama-3.1-70B", include_str!("catalog/models/Llama-3.1-70B.generation_config.json")),
    ("Qwen2.5-7B-Instruct", include_str!("catalog/models/Qwen2.5-7B-Instruct.generation_config.json")),
    ("Qwen3-14B", include_str!("catalog/models/Qwen3-14B.generation_config.json")),
    ("Qwen3-32B", include_str!("catalog/models/Qwen3-32B.generation_config.json")),
    ("Qwen3-235B-A22B", include_str!("catalog/models/Qwen3-235B-A22B.generation_config.json")),
    ("Mistral-Nemo-12B", include_str!("catalog/models/Mistral-Nemo-12B.generation_config.json")),
    ("Yi-34B", include_str!("catalog/models/Yi-34B.generation_config.json")),
];

/// A model's default sampling parameters, from its `generation_config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Deserialize)]
pub struct SamplingDefaults {
    /// `top_k` (absent, 0 or −1: off).
    pub top_k: Option<i64>,
    /// `top_p` (absent or 1: off).
    pub top_p: Option<f64>,
    /// `repetition_penalty` (absent or 1: off).
    pub repetition_penalty: Option<f64>,
}

impl SamplingDefaults {
    /// Whether the defaults filter the logits by top-k or top-p (vLLM's
    /// `apply_top_k_top_p` runs), over a vocabulary of `vocab`.
    pub fn filters(&self, vocab: u64) -> bool {
        let k = self.top_k.is_some_and(|k| k > 0 && (k as u64) < vocab);
        let p = self.top_p.is_some_and(|p| p < 1.0);
        k || p
    }
}

/// A catalog model's published sampling defaults, by catalog id; `None`
/// where they have not been checked.
pub fn sampling_defaults(id: &str) -> Option<SamplingDefaults> {
    GENERATION_CONFIGS
        .iter()
        .find(|(m, _)| *m == id)
        .map(|(_, text)| serde_json::from_str(text).expect("embedded generation configs parse"))
}

/// The catalog id and `config.json` text of a model, by id or alias
/// (case-insensitive).
pub fn model_config(name: &str) -> Option<(&'static str, &'static str)> {
    MODELS
        .iter()
        .find(|(id, aliases, _)| id.eq_ignore_ascii_case(name) || aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
        .map(|(id, _, text)| (*id, *text))
}

/// Catalog ids, for error messages.
pub fn model_ids() -> Vec<&'static str> {
    MODELS.iter().map(|(id, _, _)| *id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::model::ModelArch;

    #[test]
    fn every_catalog_model_parses() {
        for id in model_ids() {
            let (_, text) = model_config(id).unwrap();
            ModelArch::from_config_json(id, text).unwrap_or_else(|e| panic!("{id}: {e}"));
        }
        assert_eq!(model_config("meta-llama/llama-2-7b-hf").unwrap().0, "Llama-2-7b");
    }

    /// Every generation config names a catalog model and parses; top-p or
    /// top-k turns the filter on, an empty one leaves it off.
    #[test]
    fn sampling_defaults_parse_and_filter() {
        for (id, _) in GENERATION_CONFIGS {
            assert!(model_ids().contains(id), "{id}");
            sampling_defaults(id).unwrap();
        }
        assert!(sampling_defaults("Llama-2-7b").unwrap().filters(32000));
        assert!(sampling_defaults("Qwen2.5-7B-Instruct").unwrap().filters(152064));
        assert!(!sampling_defaults("CodeLlama-34b").unwrap().filters(32000));
        assert_eq!(sampling_defaults("Mixtral-8x7B"), None);
        let k_only = SamplingDefaults { top_k: Some(50), ..SamplingDefaults::default() };
        assert!(k_only.filters(32000) && !k_only.filters(50));
        assert!(!SamplingDefaults { top_p: Some(1.0), ..SamplingDefaults::default() }.filters(32000));
    }
}

//! Model architecture from a HuggingFace `config.json`: the numbers the KV
//! cache and the latency models need, and nothing else. The embedded catalog
//! holds the public `config.json` of each supported model (see
//! `catalog/models/SOURCES.md`), parsed by the same code as a user's file.

use serde_json::{Map, Value};

pub use super::config_error::ModelConfigError;
use super::config_error::bad;
use super::layers::{KvLayout, LayerKind, LinearAttention, kv_layout, layer_kinds};

/// Mixture-of-experts layer shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub num_experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate_size: u64,
    /// Intermediate size of the shared expert(s), 0 if none.
    pub shared_intermediate_size: u64,
    /// Layers with a dense MLP instead, each of `intermediate_size`: the
    /// leading `first_k_dense_replace` (DeepSeek), or all but every
    /// `interleave_moe_layer_step`-th (Llama 4 Maverick).
    pub dense_layers: u64,
    /// The routed experts' weights are packed below 8 bits in the
    /// checkpoint, which vLLM serves as they are; `None`: the model's dtype.
    pub packed_experts: Option<PackedExperts>,
}

/// 4-bit routed experts of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedExperts {
    /// MXFP4 (gpt-oss: `quantization_config.quant_method` "mxfp4"): 4-bit
    /// values and one 8-bit scale per 32.
    Mxfp4,
    /// Integer weights of `num_bits` 4 with a 16-bit scale per group
    /// (Kimi-K2.5: compressed-tensors `pack-quantized`, group 32, the
    /// attention, shared experts and dense MLPs left out).
    Int4 {
        /// Weights sharing one scale.
        group_size: u64,
    },
}

impl PackedExperts {
    /// Bytes a weight streams, its scale's share included.
    pub fn bytes_per_weight(self) -> f64 {
        match self {
            PackedExperts::Mxfp4 => 4.25 / 8.0,
            PackedExperts::Int4 { group_size } => (4.0 + 16.0 / group_size.max(1) as f64) / 8.0,
        }
    }
}

/// How a layer's attention keeps its KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    /// Multi-head or grouped-query attention: a key and a value of
    /// `head_dim` for each of `num_key_value_heads` heads, split over the
    /// tensor-parallel GPUs.
    Grouped,
    /// Multi-head latent attention (DeepSeek-V2/V3): one compressed latent
    /// of `kv_lora_rank + qk_rope_head_dim` a token, the same on every
    /// tensor-parallel GPU (vLLM's `MLAAttentionSpec`: one KV head of that
    /// size, no separate value).
    Latent {
        /// `kv_lora_rank`.
        kv_lora_rank: u64,
        /// `q_lora_rank` (`None`: queries projected directly).
        q_lora_rank: Option<u64>,
        /// `qk_nope_head_dim`.
        qk_nope_head_dim: u64,
        /// `qk_rope_head_dim`.
        qk_rope_head_dim: u64,
        /// `v_head_dim`.
        v_head_dim: u64,
    },
}

/// The architecture numbers of a decoder-only transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelArch {
    /// Display name (catalog id or the config's path).
    pub name: String,
    /// `hidden_size`.
    pub hidden_size: u64,
    /// `num_hidden_layers`.
    pub num_layers: u64,
    /// `num_attention_heads`.
    pub num_heads: u64,
    /// `num_key_value_heads` (equal to heads for MHA).
    pub num_kv_heads: u64,
    /// `head_dim`, or hidden_size / heads.
    pub head_dim: u64,
    /// Dense MLP `intermediate_size` (used by every layer of a dense model).
    pub intermediate_size: u64,
    /// `vocab_size`.
    pub vocab_size: u64,
    /// Longest context the model supports, after RoPE scaling.
    pub max_model_len: u64,
    /// `tie_word_embeddings`: the LM head shares the embedding weights.
    pub tie_word_embeddings: bool,
    /// Bytes per weight of the checkpoint's dtype (2 for fp16/bf16).
    pub checkpoint_bytes: u64,
    /// MoE shape, for mixture-of-experts models.
    pub moe: Option<Moe>,
    /// Grouped or latent attention.
    pub attention: Attention,
    /// Each decoder layer's kind: full, sliding-window, chunked local or
    /// linear attention (`layers.rs`).
    pub layers: Vec<LayerKind>,
    /// The linear-attention layers' shape, where there are any.
    pub linear: Option<LinearAttention>,
    /// The attention output is gated by a second query-sized projection
    /// (Qwen3-Next's full-attention layers).
    pub attention_output_gate: bool,
    /// A vision encoder's parameters (and its projector's) that vLLM loads
    /// with a multimodal checkpoint (`vision_config`): weights, not priced
    /// per token.
    pub vision_params: u64,
}

// Bounds on a config's sizes: each is at least 8× the largest published
// model's (DeepSeek-V3: hidden 7168, 61 layers, 256 experts; Llama-3.1-405B:
// 128 heads, 126 layers, intermediate 53248; Gemma: vocab 262144), and small
// enough that parameter and byte counts cannot overflow 64 bits.
const MAX_WIDTH: u64 = 1 << 17;
const MAX_COUNT: u64 = 1 << 10;
const MAX_HEADS: u64 = 1 << 12;
const MAX_INTERMEDIATE: u64 = 1 << 20;
const MAX_VOCAB: u64 = 1 << 22;

fn at_most(field: &str, value: u64, max: u64) -> Result<u64, ModelConfigError> {
    if value > max {
        return Err(bad(field, format!("{value} is beyond any model this simulator prices (at most {max})")));
    }
    Ok(value)
}

impl ModelArch {
    /// Parses a HuggingFace `config.json`. Multimodal configs keep the language
    /// model under `text_config`; its keys override the top level.
    pub fn from_config_json(name: &str, text: &str) -> Result<ModelArch, ModelConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| bad("json", e.to_string()))?;
        let Value::Object(mut map) = value else {
            return Err(bad("json", "the config is not a JSON object"));
        };
        let vision = map.remove("vision_config");
        if let Some(Value::Object(text_config)) = map.remove("text_config") {
            map.extend(text_config);
        }
        gemma3_defaults(&mut map);
        let get = |key: &str| map.get(key).filter(|v| !v.is_null());
        let uint = |key: &str| -> Result<Option<u64>, ModelConfigError> {
            match get(key) {
                None => Ok(None),
                Some(v) => {
                    v.as_u64().map(Some).ok_or_else(|| bad(key, format!("expected a non-negative integer, got {v}")))
                }
            }
        };
        let required = |key: &str| -> Result<u64, ModelConfigError> {
            match uint(key)? {
                Some(0) => Err(bad(key, "must be positive")),
                Some(v) => Ok(v),
                None => Err(bad(key, "missing")),
            }
        };
        let hidden_size = at_most("hidden_size", required("hidden_size")?, MAX_WIDTH)?;
        let num_layers = at_most("num_hidden_layers", required("num_hidden_layers")?, MAX_COUNT)?;
        let num_heads = at_most("num_attention_heads", required("num_attention_heads")?, MAX_HEADS)?;
        let num_kv_heads = uint("num_key_value_heads")?.filter(|&v| v > 0).unwrap_or(num_heads);
        // Grouped-query attention shares each KV head among a whole number
        // of query heads (HuggingFace checks the same).
        if num_kv_heads > num_heads || !num_heads.is_multiple_of(num_kv_heads) {
            return Err(bad(
                "num_key_value_heads",
                format!("{num_kv_heads} must divide num_attention_heads = {num_heads}"),
            ));
        }
        let head_dim = uint("head_dim")?.filter(|&v| v > 0).unwrap_or(hidden_size / num_heads);
        let head_dim = at_most("head_dim", head_dim.max(1), MAX_HEADS)?;
        let vocab_size = at_most("vocab_size", required("vocab_size")?, MAX_VOCAB)?;
        let num_experts = match uint("num_local_experts")?.or(uint("num_experts")?).or(uint("n_routed_experts")?) {
            Some(n) if n >= 2 => Some(at_most("num_experts", n, MAX_COUNT)?),
            _ => None,
        };
        // What would be priced or sized wrongly is refused, by name.
        refuse_unsupported(&map)?;
        let moe = match num_experts {
            None => None,
            Some(num_experts) => Some(Moe {
                num_experts,
                top_k: match required("num_experts_per_tok")? {
                    k if k > num_experts => {
                        return Err(bad("num_experts_per_tok", format!("{k} exceeds the {num_experts} experts")));
                    }
                    k => k,
                },
                expert_intermediate_size: match uint("moe_intermediate_size")? {
                    Some(v) if v > 0 => at_most("moe_intermediate_size", v, MAX_INTERMEDIATE)?,
                    _ => at_most("intermediate_size", required("intermediate_size")?, MAX_INTERMEDIATE)?,
                },
                shared_intermediate_size: match (uint("shared_expert_intermediate_size")?, uint("n_shared_experts")?) {
                    (Some(v), _) => at_most("shared_expert_intermediate_size", v, MAX_INTERMEDIATE)?,
                    // Llama 4: one shared expert the size of a routed one
                    // (`intermediate_size`; dense layers use `intermediate_size_mlp`).
                    (None, None) if get("intermediate_size_mlp").is_some() => {
                        at_most("intermediate_size", required("intermediate_size")?, MAX_INTERMEDIATE)?
                    }
                    // DeepSeek: n_shared_experts experts of moe_intermediate_size.
                    (None, Some(n)) => {
                        at_most("n_shared_experts", n * uint("moe_intermediate_size")?.unwrap_or(0), MAX_INTERMEDIATE)?
                    }
                    (None, None) => 0,
                },
                dense_layers: {
                    let leading =
                        at_most("first_k_dense_replace", uint("first_k_dense_replace")?.unwrap_or(0), num_layers)?;
                    match uint("interleave_moe_layer_step")?.filter(|&s| s > 1) {
                        // Layers i with (i + 1) a multiple of the step are MoE.
                        Some(step) => leading.max(num_layers - num_layers / step),
                        None => leading,
                    }
                },
                packed_experts: packed_experts(map.get("quantization_config")),
            }),
        };
        let attention = match uint("kv_lora_rank")? {
            None | Some(0) => Attention::Grouped,
            Some(kv_lora_rank) => {
                let dim = |key: &str| -> Result<u64, ModelConfigError> { at_most(key, required(key)?, MAX_HEADS) };
                Attention::Latent {
                    kv_lora_rank: at_most("kv_lora_rank", kv_lora_rank, MAX_HEADS)?,
                    q_lora_rank: uint("q_lora_rank")?
                        .filter(|&r| r > 0)
                        .map(|r| at_most("q_lora_rank", r, MAX_WIDTH))
                        .transpose()?,
                    qk_nope_head_dim: dim("qk_nope_head_dim")?,
                    qk_rope_head_dim: dim("qk_rope_head_dim")?,
                    v_head_dim: dim("v_head_dim")?,
                }
            }
        };
        // Llama 4's dense layers: `intermediate_size_mlp` (its
        // `intermediate_size` is an expert's).
        let intermediate_size = match uint("intermediate_size_mlp")? {
            Some(v) if v > 0 => at_most("intermediate_size_mlp", v, MAX_INTERMEDIATE)?,
            _ => at_most("intermediate_size", required("intermediate_size")?, MAX_INTERMEDIATE)?,
        };
        let layers = layer_kinds(&map, num_layers)?;
        let linear = if layers.contains(&LayerKind::Linear) {
            let dim = |key: &str| -> Result<u64, ModelConfigError> { at_most(key, required(key)?, MAX_WIDTH) };
            let linear = LinearAttention {
                num_key_heads: dim("linear_num_key_heads")?,
                num_value_heads: dim("linear_num_value_heads")?,
                key_head_dim: dim("linear_key_head_dim")?,
                value_head_dim: dim("linear_value_head_dim")?,
                conv_kernel: dim("linear_conv_kernel_dim")?,
            };
            if !linear.num_value_heads.is_multiple_of(linear.num_key_heads) {
                return Err(bad("linear_num_value_heads", "must be a multiple of linear_num_key_heads"));
            }
            Some(linear)
        } else {
            None
        };
        let model_type = get("model_type").and_then(Value::as_str).unwrap_or("");
        let checkpoint_bytes = match get("torch_dtype").or(get("dtype")).and_then(Value::as_str) {
            None | Some("float16" | "bfloat16") => 2,
            Some("float32") => 4,
            Some(other) => return Err(bad("torch_dtype", format!("unsupported dtype `{other}`"))),
        };
        let max_model_len = derived_max_model_len(&map, required("max_position_embeddings")?);
        Ok(ModelArch {
            name: name.to_owned(),
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            max_model_len,
            tie_word_embeddings: get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
            checkpoint_bytes,
            moe,
            attention,
            layers,
            linear,
            attention_output_gate: model_type == "qwen3_next",
            vision_params: vision.as_ref().map_or(0, |v| vision_params(v, hidden_size)),
        })
    }

    /// Parameters of one decoder layer's attention projections (Q, K, V, O;
    /// for latent attention the down- and up-projections of queries and of
    /// the KV latent, with their norms).
    pub fn attention_params_per_layer(&self) -> u64 {
        let (d, h) = (self.hidden_size, self.num_heads);
        match self.attention {
            Attention::Grouped => {
                let q = h * self.head_dim;
                let kv = self.num_kv_heads * self.head_dim;
                let gate = if self.attention_output_gate { d * q } else { 0 };
                d * (q + 2 * kv) + q * d + gate
            }
            Attention::Latent { kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim } => {
                let q_out = h * (qk_nope_head_dim + qk_rope_head_dim);
                let q = match q_lora_rank {
                    Some(r) => d * r + r + r * q_out,
                    None => d * q_out,
                };
                let kv_a = d * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank;
                let kv_b = kv_lora_rank * h * (qk_nope_head_dim + v_head_dim);
                q + kv_a + kv_b + h * v_head_dim * d
            }
        }
    }

    /// Layers with a dense MLP: all of a dense model's, an MoE model's
    /// leading `first_k_dense_replace`.
    pub fn dense_layers(&self) -> u64 {
        self.moe.as_ref().map_or(self.num_layers, |m| m.dense_layers)
    }

    /// Parameters of one dense gated MLP (gate, up and down projections).
    pub fn dense_mlp_params(&self) -> u64 {
        3 * self.hidden_size * self.intermediate_size
    }

    /// Total parameters, counted from the architecture (embeddings, layers,
    /// norms and LM head). Llama-2-7b gives 6.74 B, as published;
    /// DeepSeek-V3 671.0 B, as published for its main model. Its
    /// multi-token-prediction layers (`num_nextn_predict_layers`, the 14 B
    /// that make the 685 B of the Hugging Face checkpoint) are not counted:
    /// vLLM loads them only as a speculative-decoding draft
    /// (`--speculative-config` method `deepseek_mtp`; without it
    /// `DeepseekV2ForCausalLM.load_weights` skips them), and this simulator
    /// does not model speculative decoding.
    pub fn param_count(&self) -> u64 {
        let d = self.hidden_size;
        let embed = self.vocab_size * d;
        let lm_head = if self.tie_word_embeddings { 0 } else { embed };
        let moe_mlp = match &self.moe {
            None => 0,
            Some(m) => {
                d * m.num_experts
                    + m.num_experts * 3 * d * m.expert_intermediate_size
                    + 3 * d * m.shared_intermediate_size
            }
        };
        let dense = self.dense_layers();
        let attention = self.attention_layers() * self.attention_params_per_layer()
            + self.linear.map_or(0, |l| (self.num_layers - self.attention_layers()) * l.params(d));
        embed
            + lm_head
            + attention
            + self.num_layers * 2 * d
            + dense * self.dense_mlp_params()
            + (self.num_layers - dense) * moe_mlp
            + d
            + self.vision_params
    }

    /// Layers with attention over tokens (all but linear-attention ones).
    pub fn attention_layers(&self) -> u64 {
        self.layers.iter().filter(|&&k| k != LayerKind::Linear).count() as u64
    }

    /// Bytes of one linear-attention layer's state for one request on one
    /// of `tp` GPUs (0 without linear attention): in the KV cache's dtype,
    /// as vLLM sizes a `MambaSpec` page by default.
    pub fn linear_state_bytes(&self, tp: u64, kv_dtype_bytes: u64) -> u64 {
        self.linear.map_or(0, |l| l.state_elements(tp) * kv_dtype_bytes)
    }

    /// The KV cache as vLLM lays it out for this model on one of `tp` GPUs
    /// (`layers.rs`): its groups, block size and bytes a block.
    pub fn kv_layout(&self, tp: u64, kv_dtype_bytes: u64, block_size: u32, hybrid: bool) -> KvLayout {
        let per_token = self.kv_elements_per_token_per_layer(tp) * kv_dtype_bytes;
        kv_layout(&self.layers, per_token, self.linear_state_bytes(tp, kv_dtype_bytes), block_size, hybrid)
    }

    /// KV-cache bytes one token takes on one GPU under tensor parallelism `tp`
    /// (K and V, every layer). KV heads are split across GPUs, and replicated
    /// when there are fewer heads than GPUs, as vLLM does.
    /// With latent attention, each GPU keeps the whole latent.
    pub fn kv_bytes_per_token(&self, tp: u64, kv_dtype_bytes: u64) -> u64 {
        self.attention_layers() * self.kv_elements_per_token_per_layer(tp) * kv_dtype_bytes
    }

    /// KV-cache elements one token takes in one layer on one GPU.
    pub fn kv_elements_per_token_per_layer(&self, tp: u64) -> u64 {
        match self.attention {
            Attention::Grouped => 2 * self.num_kv_heads.div_ceil(tp) * self.head_dim,
            Attention::Latent { kv_lora_rank, qk_rope_head_dim, .. } => kv_lora_rank + qk_rope_head_dim,
        }
    }
}

/// The routed experts' packing a `quantization_config` names: MXFP4, or
/// compressed-tensors 4-bit integer groups that leave attention out (its
/// `ignore` list: routed experts only).
fn packed_experts(q: Option<&Value>) -> Option<PackedExperts> {
    let q = q?;
    match q.get("quant_method").and_then(Value::as_str)? {
        "mxfp4" => Some(PackedExperts::Mxfp4),
        "compressed-tensors" => {
            let ignores_attention = q
                .get("ignore")
                .and_then(Value::as_array)
                .is_some_and(|list| list.iter().filter_map(Value::as_str).any(|m| m.contains("self_attn")));
            let weights = q.get("config_groups")?.as_object()?.values().next()?.get("weights")?;
            let int4 = weights.get("num_bits").and_then(Value::as_u64) == Some(4)
                && weights.get("type").and_then(Value::as_str) == Some("int");
            let group_size = weights.get("group_size").and_then(Value::as_u64)?;
            (int4 && ignores_attention).then_some(PackedExperts::Int4 { group_size })
        }
        _ => None,
    }
}

/// Gemma 3's `text_config` leaves out the keys at their defaults
/// (transformers' `Gemma3TextConfig`): filled in where absent. Gemma ties
/// its LM head to the embeddings.
fn gemma3_defaults(map: &mut Map<String, Value>) {
    if map.get("model_type").and_then(Value::as_str) != Some("gemma3_text") {
        return;
    }
    let defaults: [(&str, Value); 9] = [
        ("vocab_size", 262_208.into()),
        ("hidden_size", 2304.into()),
        ("intermediate_size", 9216.into()),
        ("num_hidden_layers", 26.into()),
        ("num_attention_heads", 8.into()),
        ("num_key_value_heads", 4.into()),
        ("head_dim", 256.into()),
        ("max_position_embeddings", 131_072.into()),
        ("sliding_window", 4096.into()),
    ];
    for (key, value) in defaults {
        map.entry(key).or_insert(value);
    }
    map.entry("sliding_window_pattern").or_insert(6.into());
    map.entry("tie_word_embeddings").or_insert(true.into());
}

/// Parameters of a multimodal checkpoint's vision encoder (a ViT of
/// `num_hidden_layers` blocks of attention and a two-matrix MLP, its patch
/// and position embeddings) and of the projector into the language model's
/// `hidden` width.
fn vision_params(v: &Value, hidden: u64) -> u64 {
    // (Kimi-K2.5's MoonViT names them `vt_*`.)
    let n = |key: &str| [key, &format!("vt_{key}")].iter().find_map(|k| v.get(*k).and_then(Value::as_u64)).unwrap_or(0);
    let (h, i, layers) = (n("hidden_size"), n("intermediate_size"), n("num_hidden_layers"));
    let patch = n("patch_size").max(1);
    let channels = v.get("num_channels").and_then(Value::as_u64).unwrap_or(3);
    let patches = (n("image_size") / patch).pow(2);
    let block = 4 * h * h + 2 * h * i + 9 * h;
    let projected = n("projector_output_dim").max(n("vision_output_dim")).max(h);
    layers * block + patch * patch * channels * h + patches * h + projected * hidden
}

/// Refuses what this simulator would size or price wrongly: MoE on only
/// some layers by DeepSeek's rule, sparse attention. (Sliding-window,
/// chunked local and linear attention layers are read by `layers.rs`.)
fn refuse_unsupported(map: &Map<String, Value>) -> Result<(), ModelConfigError> {
    if let Some(f) = map.get("moe_layer_freq").and_then(Value::as_u64).filter(|&f| f > 1) {
        return Err(bad(
            "moe_layer_freq",
            format!("MoE on one layer in {f} is not modelled; only on every layer after first_k_dense_replace"),
        ));
    }
    if let Some(n) = map.get("index_topk").filter(|v| !v.is_null()) {
        return Err(bad(
            "index_topk",
            format!("sparse attention over the top {n} tokens (DeepSeek-V3.2's indexer) is not modelled"),
        ));
    }
    Ok(())
}

/// vLLM's derived `max_model_len`: `max_position_embeddings`, scaled by a RoPE
/// scaling factor except for the types whose `max_position_embeddings` already
/// is the scaled length (llama3, longrope, su, mrope, default). YaRN scales the
/// original length.
fn derived_max_model_len(map: &Map<String, Value>, max_position_embeddings: u64) -> u64 {
    let Some(Value::Object(rope)) = map.get("rope_scaling") else {
        return max_position_embeddings;
    };
    // Gemma 3's max_position_embeddings is already the scaled length
    // (vLLM `_get_and_verify_max_len` skips its linear factor).
    if map.get("model_type").and_then(Value::as_str).is_some_and(|t| t.starts_with("gemma3")) {
        return max_position_embeddings;
    }
    let kind = rope.get("rope_type").or(rope.get("type")).and_then(Value::as_str).unwrap_or("default");
    let factor = rope.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
    if factor <= 1.0 || matches!(kind, "llama3" | "longrope" | "su" | "mrope" | "default") {
        return max_position_embeddings;
    }
    let base = match kind {
        "yarn" => {
            rope.get("original_max_position_embeddings").and_then(Value::as_u64).unwrap_or(max_position_embeddings)
        }
        _ => max_position_embeddings,
    };
    (base as f64 * factor) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-layer config of `max_position_embeddings` with `extra` keys.
    fn tiny_config(max_position: u32, extra: &str) -> String {
        format!(
            r#"{{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8, "intermediate_size": 128,
                "vocab_size": 100, "max_position_embeddings": {max_position}{extra}}}"#
        )
    }

    #[test]
    fn llama_2_7b_has_its_published_size() {
        let text = include_str!("catalog/models/Llama-2-7b.json");
        let arch = ModelArch::from_config_json("Llama-2-7b", text).unwrap();
        assert_eq!(arch.param_count(), 6_738_415_616);
        assert_eq!(arch.kv_bytes_per_token(1, 2), 524_288);
        assert_eq!(arch.max_model_len, 4096);
    }

    #[test]
    fn moe_and_head_dim_are_read() {
        let text = include_str!("catalog/models/Qwen3-30B-A3B.json");
        let arch = ModelArch::from_config_json("q", text).unwrap();
        let moe = arch.moe.unwrap();
        assert_eq!((moe.num_experts, moe.top_k, moe.expert_intermediate_size), (128, 8, 768));
        assert_eq!(arch.head_dim, 128);
    }

    #[test]
    fn sizes_that_would_hang_or_overflow_are_refused() {
        // Defect 9.8: a huge num_key_value_heads made the attention fit try
        // every divisor.
        let config = |extra: &str| tiny_config(512, extra);
        let err = |extra: &str| ModelArch::from_config_json("m", &config(extra)).unwrap_err().field;
        assert_eq!(err(r#", "num_key_value_heads": 18446744073709551615"#), "num_key_value_heads");
        assert_eq!(err(r#", "num_key_value_heads": 3"#), "num_key_value_heads");
        assert_eq!(err(r#", "head_dim": 4294967296"#), "head_dim");
        assert_eq!(err(r#", "num_local_experts": 8, "num_experts_per_tok": 9"#), "num_experts_per_tok");
        assert!(ModelArch::from_config_json("m", &config(r#", "num_key_value_heads": 2"#)).is_ok());
    }

    #[test]
    fn latent_attention_keeps_one_latent_a_token_on_every_gpu() {
        let text = include_str!("catalog/models/DeepSeek-V2-Lite.json");
        let arch = ModelArch::from_config_json("DeepSeek-V2-Lite", text).unwrap();
        assert!(matches!(arch.attention, Attention::Latent { kv_lora_rank: 512, qk_rope_head_dim: 64, .. }));
        // 27 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes,
        // whatever the TP degree (vLLM's MLAAttentionSpec: one 576-wide head).
        assert_eq!(arch.kv_bytes_per_token(1, 2), 27 * 576 * 2);
        assert_eq!(arch.kv_bytes_per_token(2, 2), 31_104);
        assert_eq!(arch.kv_bytes_per_token(4, 1), 15_552);
        // Published: 15.7 B parameters. By hand: embeddings and LM head
        // 2 × 102400 × 2048; per layer q_proj 2048 × 16 × 192, kv_a 2048 × 576
        // + 512, kv_b 512 × 16 × 256, o 2048 × 2048, two norms; layer 0 a
        // dense MLP of 10944, layers 1–26 a router of 64, 64 experts and 2
        // shared ones of 1408.
        let attention = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048;
        assert_eq!(arch.attention_params_per_layer(), attention);
        let moe_layer = 2048 * 64 + 64 * 3 * 2048 * 1408 + 3 * 2048 * 2816;
        let expected = 2 * 102_400 * 2048 + 27 * (attention + 2 * 2048) + 3 * 2048 * 10_944 + 26 * moe_layer + 2048;
        assert_eq!(arch.param_count(), expected);
        assert_eq!(expected, 15_706_484_224);
        let moe = arch.moe.unwrap();
        assert_eq!((moe.dense_layers, moe.shared_intermediate_size), (1, 2816));
    }

    /// DeepSeek-V3's published config.json: 671 B parameters (37 B
    /// activated a token). By hand: untied 129,280 × 7168 embeddings; 61
    /// layers of latent attention (q down 7168 × 1536 with its norm, q up
    /// 1536 × 128 × 192, kv down 7168 × 576 with its norm of 512, kv up
    /// 512 × 128 × 256, o 128 × 128 × 7168) and two norms; 3 dense MLPs of
    /// 18,432 (first_k_dense_replace), then 58 MoE layers of a 256-way
    /// router, 256 routed and 1 shared expert of 2048. Its MTP layer is not
    /// counted (see `param_count`).
    #[test]
    fn deepseek_v3_has_its_published_size() {
        let text = include_str!("../../tests/data/defects/16-deepseek-v3-size/dsv3-config.json");
        let arch = ModelArch::from_config_json("DeepSeek-V3", text).unwrap();
        let (d, v) = (7168u64, 129_280u64);
        let attention = d * 1536 + 1536 + 1536 * 128 * 192 + d * 576 + 512 + 512 * 128 * 256 + 128 * 128 * d;
        assert_eq!(arch.attention_params_per_layer(), attention);
        let moe_layer = d * 256 + 256 * 3 * d * 2048 + 3 * d * 2048;
        let expected = 2 * v * d + 61 * (attention + 2 * d) + 3 * 3 * d * 18_432 + 58 * moe_layer + d;
        assert_eq!(arch.param_count(), expected);
        assert_eq!(expected, 671_026_404_352);
        let moe = arch.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.top_k, moe.dense_layers, moe.shared_intermediate_size), (256, 8, 3, 2048));
        // Activated: the routed experts a token does not touch left out.
        let active = expected - 58 * (256 - 8) * 3 * d * 2048;
        assert!((active as f64 / 1e9 - 37.55).abs() < 0.01, "{active}");
    }

    #[test]
    fn other_catalog_models_have_their_published_sizes() {
        let size = |text: &str| ModelArch::from_config_json("m", text).unwrap().param_count() as f64 / 1e9;
        // Published: Yi-34B 34.4 B, Mistral-NeMo 12.2 B.
        assert!((size(include_str!("catalog/models/Yi-34B.json")) - 34.39).abs() < 0.01);
        assert!((size(include_str!("catalog/models/Mistral-Nemo-12B.json")) - 12.25).abs() < 0.01);
        // Qwen3-235B-A22B: 235 B in all (94 layers of 128 experts of 3 × 4096
        // × 1536, attention 64 + 2 × 4 heads of 128, untied 151,936 × 4096
        // embeddings).
        assert!((size(include_str!("catalog/models/Qwen3-235B-A22B.json")) - 235.09).abs() < 0.05);
        // Mixtral-8x22B: 141 B published (Mistral's announcement); by hand 56
        // layers of 8 experts of 3 × 6144 × 16384, attention 48 + 2 × 8 heads
        // of 128, untied 32,000 × 6144 embeddings: 140.62 B.
        assert!((size(include_str!("catalog/models/Mixtral-8x22B.json")) - 140.62).abs() < 0.05);
    }

    #[test]
    fn attention_this_simulator_does_not_model_is_refused_by_name() {
        let config = |extra: &str| tiny_config(32768, extra);
        let err = |extra: &str| ModelArch::from_config_json("m", &config(extra)).unwrap_err().to_string();
        assert!(
            err(r#", "layer_types": ["full_attention", "mla_sparse"]"#)
                .starts_with(r#"layer_types: layers of kind "mla_sparse" are not modelled"#)
        );
        assert!(err(r#", "layer_types": ["full_attention"]"#).starts_with("layer_types: 1 entries for 2 layers"));
        assert!(
            err(r#", "layer_types": ["full_attention", "linear_attention"]"#)
                .starts_with("linear_num_key_heads: missing")
        );
        assert!(err(r#", "moe_layer_freq": 2"#).starts_with("moe_layer_freq: MoE on one layer in 2"));
        assert!(err(r#", "index_topk": 2048"#).starts_with("index_topk: sparse attention over the top 2048"));
        // A window as long as the context, or switched off, is full attention.
        for ok in [
            r#", "sliding_window": 32768"#,
            r#", "sliding_window": 4096, "use_sliding_window": false"#,
            r#", "sliding_window": null"#,
        ] {
            let arch = ModelArch::from_config_json("m", &config(ok)).unwrap();
            assert!(arch.layers.iter().all(|&k| k == LayerKind::Full), "{ok}");
        }
        let arch = ModelArch::from_config_json("m", &config(r#", "sliding_window": 4096"#)).unwrap();
        assert_eq!(arch.layers, [LayerKind::SlidingWindow(4096); 2]);
    }

    #[test]
    fn missing_fields_are_named() {
        let e = ModelArch::from_config_json("x", r#"{"hidden_size": 8}"#).unwrap_err();
        assert_eq!(e.field, "num_hidden_layers");
    }

    #[test]
    fn yarn_scales_the_original_length() {
        let text = r#"{"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":8,
            "intermediate_size":8,"max_position_embeddings":32768,
            "rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768}}"#;
        assert_eq!(ModelArch::from_config_json("y", text).unwrap().max_model_len, 131072);
    }
}

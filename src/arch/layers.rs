//! What each decoder layer attends to, read from a `config.json` the way
//! vLLM's model files read it, and the KV cache groups vLLM's hybrid KV cache
//! manager forms from those layers (`vllm/v1/core/kv_cache_utils.py`,
//! `_get_kv_cache_groups_uniform_page_size`).
//!
//! - `layer_types` (gpt-oss, Gemma 3, Qwen3-Next): `full_attention`,
//!   `sliding_attention` (of `sliding_window`), `chunked_attention` (of
//!   `attention_chunk_size`), `linear_attention`.
//! - Without it: Qwen3-Next's `full_attention_interval` (layer i is full when
//!   (i + 1) is a multiple, else linear); Llama 4's `attention_chunk_size`
//!   with `no_rope_layers` (a layer with RoPE attends within its chunk, a
//!   NoPE layer, 0 there, globally; by default every 4th layer is NoPE);
//!   `sliding_window` with `sliding_window_pattern` p (layer i slides unless
//!   (i + 1) is a multiple of p; Gemma 2: p = 2, Gemma 3: p = 6) or on every
//!   layer (Mistral-7B-v0.1), unless `use_sliding_window` is false or the
//!   window covers the whole context.

use serde_json::{Map, Value};

use super::config_error::{ModelConfigError, bad};

/// How one decoder layer attends, and so keeps its KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Every earlier token.
    Full,
    /// The last `0` tokens (the token itself included).
    SlidingWindow(u32),
    /// The tokens of its own `0`-token chunk of the sequence (Llama 4).
    ChunkedLocal(u32),
    /// A linear-attention (Gated DeltaNet, Mamba) layer: a fixed-size state.
    Linear,
}

/// A linear-attention layer's shape (Qwen3-Next's Gated DeltaNet:
/// `linear_num_key_heads`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttention {
    /// `linear_num_key_heads`.
    pub num_key_heads: u64,
    /// `linear_num_value_heads`.
    pub num_value_heads: u64,
    /// `linear_key_head_dim`.
    pub key_head_dim: u64,
    /// `linear_value_head_dim`.
    pub value_head_dim: u64,
    /// `linear_conv_kernel_dim`.
    pub conv_kernel: u64,
}

impl LinearAttention {
    /// Parameters of one layer: the fused QKVZ and BA input projections,
    /// the short convolution over Q, K and V, the per-head decay and step
    /// (`A_log`, `dt_bias`), the gated norm and the output projection
    /// (vLLM `qwen3_next.py` `Qwen3NextGatedDeltaNet`).
    pub fn params(&self, hidden: u64) -> u64 {
        let key = self.num_key_heads * self.key_head_dim;
        let value = self.num_value_heads * self.value_head_dim;
        let conv = 2 * key + value;
        hidden * (2 * key + 2 * value)
            + hidden * 2 * self.num_value_heads
            + conv * self.conv_kernel
            + 2 * self.num_value_heads
            + self.value_head_dim
            + value * hidden
    }

    /// State elements one request keeps per layer on one of `tp` GPUs:
    /// the convolution's last `conv_kernel − 1` inputs over Q, K and V, and
    /// the recurrent state, a key × value matrix per value head (vLLM
    /// `mamba_utils.py` `gated_delta_net_state_shape`).
    pub fn state_elements(&self, tp: u64) -> u64 {
        let key = self.num_key_heads * self.key_head_dim;
        let value = self.num_value_heads * self.value_head_dim;
        let conv = (self.conv_kernel - 1) * (2 * key + value) / tp;
        let recurrent = self.num_value_heads / tp * self.key_head_dim * self.value_head_dim;
        conv + recurrent
    }
}

/// Each layer's kind, `num_layers` of them.
pub(super) fn layer_kinds(map: &Map<String, Value>, num_layers: u64) -> Result<Vec<LayerKind>, ModelConfigError> {
    let n = num_layers as usize;
    let uint = |key: &str| map.get(key).and_then(Value::as_u64).filter(|&v| v > 0);
    let max_position = map.get("max_position_embeddings").and_then(Value::as_u64).unwrap_or(u64::MAX);
    let window = || -> Result<u32, ModelConfigError> {
        match uint("sliding_window") {
            Some(w) if w <= u64::from(u32::MAX) => Ok(w as u32),
            _ => Err(bad("sliding_window", "a positive window is needed for sliding_attention layers")),
        }
    };
    let chunk = || -> Result<u32, ModelConfigError> {
        match uint("attention_chunk_size") {
            Some(c) if c <= u64::from(u32::MAX) => Ok(c as u32),
            _ => Err(bad("attention_chunk_size", "a positive chunk is needed for chunked_attention layers")),
        }
    };
    if let Some(Value::Array(kinds)) = map.get("layer_types") {
        if kinds.len() != n {
            return Err(bad("layer_types", format!("{} entries for {n} layers", kinds.len())));
        }
        return kinds
            .iter()
            .map(|k| match k.as_str() {
                Some("full_attention") => Ok(LayerKind::Full),
                Some("sliding_attention") => Ok(LayerKind::SlidingWindow(window()?)),
                Some("chunked_attention") => Ok(LayerKind::ChunkedLocal(chunk()?)),
                Some("linear_attention") => Ok(LayerKind::Linear),
                _ => Err(bad(
                    "layer_types",
                    format!(
                        "layers of kind {k} are not modelled (full_attention, sliding_attention, chunked_attention, linear_attention)"
                    ),
                )),
            })
            .collect();
    }
    if let Some(interval) = uint("full_attention_interval") {
        return Ok((0..n)
            .map(|i| if (i as u64 + 1).is_multiple_of(interval) { LayerKind::Full } else { LayerKind::Linear })
            .collect());
    }
    if let Some(c) = uint("attention_chunk_size").filter(|&c| c < max_position) {
        let c = chunk().map(|_| c as u32)?;
        let nope: Vec<bool> = match map.get("no_rope_layers") {
            Some(Value::Array(v)) if v.len() == n => v.iter().map(|x| x.as_u64() == Some(0)).collect(),
            Some(Value::Array(v)) if !v.is_empty() => {
                return Err(bad("no_rope_layers", format!("{} entries for {n} layers", v.len())));
            }
            // Llama4TextConfig's default: every 4th layer without RoPE.
            _ => (0..n).map(|i| (i + 1) % 4 == 0).collect(),
        };
        return Ok(nope
            .into_iter()
            .map(|global| if global { LayerKind::Full } else { LayerKind::ChunkedLocal(c) })
            .collect());
    }
    let enabled = map.get("use_sliding_window").and_then(Value::as_bool).unwrap_or(true);
    if let (Some(w), true) = (uint("sliding_window").filter(|&w| w < max_position), enabled) {
        let w = window().map(|_| w as u32)?;
        let model_type = map.get("model_type").and_then(Value::as_str).unwrap_or("");
        let pattern = uint("sliding_window_pattern").or(if model_type.starts_with("gemma3") {
            Some(6)
        } else if model_type.starts_with("gemma2") {
            Some(2)
        } else {
            None
        });
        return Ok((0..n)
            .map(|i| match pattern {
                Some(p) if (i as u64 + 1).is_multiple_of(p) => LayerKind::Full,
                _ => LayerKind::SlidingWindow(w),
            })
            .collect());
    }
    Ok(vec![LayerKind::Full; n])
}

/// The KV cache as vLLM lays it out for a model: its groups (one kind of
/// layer each, equal layer counts), the block size (raised for a linear
/// hybrid so an attention page holds a linear state), and what one block
/// of the pool takes on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    /// The groups, in vLLM's order (kinds by first layer, then split).
    pub groups: Vec<LayerKind>,
    /// Tokens per block.
    pub block_size: u32,
    /// Bytes of one block: one page for each layer of a group.
    pub block_bytes: u64,
    /// Layers a group holds (`group_size`; padded where a kind's layers are
    /// not a multiple).
    pub group_layers: u64,
}

/// vLLM's FlashAttention kernel block alignment: a raised block size is a
/// multiple of 16 tokens (`HybridAttentionMambaModelConfig`).
const KERNEL_BLOCK_ALIGNMENT: u64 = 16;

/// The layout of `kinds` (each layer's) with attention pages of
/// `attn_bytes_per_token` a layer and linear states of `state_bytes` a layer,
/// at `block_size` tokens. Without `hybrid` (vLLM's
/// `--disable-hybrid-kv-cache-manager`) every attention layer keeps full KV.
pub fn kv_layout(
    kinds: &[LayerKind],
    attn_bytes_per_token: u64,
    state_bytes: u64,
    block_size: u32,
    hybrid: bool,
) -> KvLayout {
    let kinds: Vec<LayerKind> =
        kinds.iter().map(|&k| if hybrid || k == LayerKind::Linear { k } else { LayerKind::Full }).collect();
    let mut block_size = u64::from(block_size);
    if kinds.contains(&LayerKind::Linear) && block_size * attn_bytes_per_token < state_bytes {
        block_size = KERNEL_BLOCK_ALIGNMENT * state_bytes.div_ceil(KERNEL_BLOCK_ALIGNMENT * attn_bytes_per_token);
    }
    let page = (block_size * attn_bytes_per_token).max(state_bytes);
    // Layers of each kind, kinds in order of their first layer.
    let mut by_kind: Vec<(LayerKind, u64)> = Vec::new();
    for &k in &kinds {
        match by_kind.iter_mut().find(|(kind, _)| *kind == k) {
            Some((_, count)) => *count += 1,
            None => by_kind.push((k, 1)),
        }
    }
    let fewest = by_kind.iter().map(|&(_, c)| c).min().unwrap_or(1);
    let most = by_kind.iter().map(|&(_, c)| c).max().unwrap_or(1);
    // Close counts share one group size (less padding than splitting).
    let group_layers = if (most as f64) < fewest as f64 * 1.25 { most } else { fewest };
    let mut groups = Vec::new();
    for &(k, count) in &by_kind {
        groups.extend(std::iter::repeat_n(k, count.div_ceil(group_layers) as usize));
    }
    KvLayout { groups, block_size: block_size as u32, block_bytes: page * group_layers, group_layers }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(json: &str, n: u64) -> Vec<LayerKind> {
        let Value::Object(map) = serde_json::from_str(json).unwrap() else { panic!() };
        layer_kinds(&map, n).unwrap()
    }

    #[test]
    fn each_convention_names_the_layers_vllm_names() {
        // Gemma 3: a 5:1 pattern, the 6th layer global.
        let g =
            kinds(r#"{"model_type": "gemma3_text", "sliding_window": 1024, "max_position_embeddings": 131072}"#, 12);
        assert_eq!(g.iter().filter(|&&k| k == LayerKind::Full).count(), 2);
        assert_eq!((g[5], g[0]), (LayerKind::Full, LayerKind::SlidingWindow(1024)));
        // Mistral-7B-v0.1: every layer slides.
        let m = kinds(r#"{"sliding_window": 4096, "max_position_embeddings": 32768}"#, 4);
        assert!(m.iter().all(|&k| k == LayerKind::SlidingWindow(4096)));
        // Qwen2's window is off.
        let q = kinds(r#"{"sliding_window": 4096, "use_sliding_window": false, "max_position_embeddings": 32768}"#, 2);
        assert!(q.iter().all(|&k| k == LayerKind::Full));
        // Llama 4: every 4th layer NoPE, global.
        let l = kinds(r#"{"attention_chunk_size": 8192, "max_position_embeddings": 10485760}"#, 8);
        assert_eq!(l[3], LayerKind::Full);
        assert_eq!(l[0], LayerKind::ChunkedLocal(8192));
        // Qwen3-Next: one full layer in four.
        let n = kinds(r#"{"full_attention_interval": 4}"#, 8);
        assert_eq!(
            n,
            [[LayerKind::Linear; 3].as_slice(), &[LayerKind::Full], &[LayerKind::Linear; 3], &[LayerKind::Full]]
                .concat()
        );
    }

    /// gpt-oss: 12 sliding and 12 full layers, 2 groups of 12; Gemma 3 27B:
    /// 52 sliding and 10 full, group size 10, the sliding layers in 6 groups.
    #[test]
    fn layers_are_grouped_as_vllm_groups_them() {
        let gpt_oss: Vec<LayerKind> =
            (0..24).map(|i| if i % 2 == 0 { LayerKind::SlidingWindow(128) } else { LayerKind::Full }).collect();
        let l = kv_layout(&gpt_oss, 2048, 0, 16, true);
        assert_eq!(l.groups, [LayerKind::SlidingWindow(128), LayerKind::Full]);
        assert_eq!((l.group_layers, l.block_bytes), (12, 12 * 16 * 2048));
        let gemma: Vec<LayerKind> =
            (0..62).map(|i| if (i + 1) % 6 == 0 { LayerKind::Full } else { LayerKind::SlidingWindow(1024) }).collect();
        let l = kv_layout(&gemma, 1000, 0, 16, true);
        assert_eq!(l.group_layers, 10);
        assert_eq!(l.groups.iter().filter(|&&k| k == LayerKind::Full).count(), 1);
        assert_eq!(l.groups.len(), 7);
        // The hybrid manager off: one full-attention group of all 62.
        let l = kv_layout(&gemma, 1000, 0, 16, false);
        assert_eq!((l.groups.as_slice(), l.group_layers), ([LayerKind::Full].as_slice(), 62));
    }

    /// Qwen3-Next at TP 1: 2 KV heads × 256 × K and V × 2 bytes = 2048 bytes
    /// a token a layer; a Gated DeltaNet state of 3 × 8192 + 32 × 128 × 128
    /// elements, 1,097,728 bytes in bf16, so blocks of 16 × ⌈1,097,728 /
    /// (16 × 2048)⌉ = 544 tokens (vLLM logs the same), 12 full layers and
    /// 36 linear in 4 groups of 12.
    #[test]
    fn a_linear_hybrid_raises_the_block_size_to_hold_a_state() {
        let linear = LinearAttention {
            num_key_heads: 16,
            num_value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel: 4,
        };
        let state = linear.state_elements(1) * 2;
        assert_eq!(state, 1_097_728);
        let kinds: Vec<LayerKind> =
            (0..48).map(|i| if (i + 1) % 4 == 0 { LayerKind::Full } else { LayerKind::Linear }).collect();
        let l = kv_layout(&kinds, 2048, state, 16, true);
        assert_eq!(l.block_size, 544);
        assert_eq!(l.groups, [LayerKind::Linear, LayerKind::Linear, LayerKind::Linear, LayerKind::Full]);
        assert_eq!(l.block_bytes, 544 * 2048 * 12);
    }
}

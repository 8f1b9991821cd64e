//! The ground floor: what a model and a GPU are. A model's architecture
//! ([`model`], from its HuggingFace `config.json`, with the embedded
//! [`catalog`] of public configs), a GPU's datasheet ([`hardware`]) and the
//! number formats it serves in ([`dtype`]). Plain facts with no behaviour of
//! a run: the latency models price them, a scenario names them, the
//! importers check names against them; this module imports nothing above it.

pub mod catalog;
mod config_error;
pub mod dtype;
pub mod hardware;
pub mod layers;
pub mod model;

pub use dtype::{Dtype, KvCacheDtype, MoeRouting};
pub use hardware::Gpu;
pub use layers::{KvLayout, LayerKind};
pub use model::{Attention, ModelArch, PackedExperts};

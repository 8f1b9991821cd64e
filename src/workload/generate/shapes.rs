//! The shapes a generated request takes (one llm call; a multi-turn
//! session; an agentic loop of llm steps fanning out to tool calls) and the
//! bounds every request is held to, checked before anything that size is
//! allocated.

use std::path::Path;

use super::distributions::Clamped;
use super::spec::{AgenticSpec, GenerateError, SessionSpec, bad};

/// Token ids one generated request may hold, over all its calls: 4 Mi, so
/// its JSONL line (≤ 6 bytes an id) stays under the reader's 32 MiB limit.
pub(super) const MAX_REQUEST_TOKENS: usize = 1 << 22;
/// Nodes one generated request may have (≈ 90 bytes each in JSONL).
pub(super) const MAX_REQUEST_NODES: usize = 1 << 18;
/// Token ids held for every shared prefix together (64 MiB of ids).
pub(super) const MAX_PREFIX_TOKENS: u64 = 1 << 24;

/// A request's shape, its distributions resolved.
#[derive(Debug, Clone)]
pub(super) enum Shape {
    /// One llm call.
    Single,
    /// A chain of `turns` calls, `think` seconds apart.
    Sessions { turns: Clamped, think: Option<Clamped> },
    /// `steps` calls, `tools` tool calls after each but the last.
    Agentic { steps: Clamped, tools: Clamped, duration: Clamped, result_tokens: Clamped },
}

impl Shape {
    /// The shape `sessions:` or `agentic:` (at most one) asks for.
    pub(super) fn resolve(
        sessions: Option<&SessionSpec>,
        agentic: Option<&AgenticSpec>,
        base: &Path,
    ) -> Result<Shape, GenerateError> {
        Ok(match (sessions, agentic) {
            (Some(_), Some(_)) => return bad("agentic", "give sessions or agentic, not both"),
            (None, None) => Shape::Single,
            (Some(s), None) => Shape::Sessions {
                turns: Clamped::resolve("sessions.turns", &s.turns, base)?,
                think: s.think_time.as_ref().map(|t| Clamped::resolve("sessions.think_time", t, base)).transpose()?,
            },
            (None, Some(a)) => Shape::Agentic {
                steps: Clamped::resolve("agentic.steps", &a.steps, base)?,
                tools: Clamped::resolve("agentic.tools", &a.tools, base)?,
                duration: Clamped::resolve("agentic.tool_duration", &a.tool_duration, base)?,
                result_tokens: Clamped::resolve("agentic.tool_result_tokens", &a.tool_result_tokens, base)?,
            },
        })
    }
}

/// What one generated request has used of its bounds.
pub(super) struct Budget {
    /// The request.
    pub(super) id: u64,
    /// Token ids written so far.
    pub(super) ids: usize,
    /// Nodes so far.
    pub(super) nodes: usize,
}

impl Budget {
    /// Adds `ids` token ids and `nodes` nodes, or says which bound they break.
    pub(super) fn take(&mut self, ids: usize, nodes: usize) -> Result<(), GenerateError> {
        self.ids = self.ids.saturating_add(ids);
        self.nodes = self.nodes.saturating_add(nodes);
        if self.ids > MAX_REQUEST_TOKENS {
            return bad(
                "input",
                format!(
                    "request {} would hold more than {MAX_REQUEST_TOKENS} token ids over its calls; lower the lengths, turns or steps",
                    self.id
                ),
            );
        }
        if self.nodes > MAX_REQUEST_NODES {
            return bad(
                "agentic.tools",
                format!("request {} would have more than {MAX_REQUEST_NODES} sub-requests", self.id),
            );
        }
        Ok(())
    }
}

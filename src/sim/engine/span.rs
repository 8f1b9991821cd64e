//! How far back each layer's attention reads, for pricing a step: a
//! sliding-window layer reads at most its window of cached KV, a chunked
//! local layer only its chunk's, a linear-attention layer a state of fixed
//! size, whatever the context. The latency models price one context length a
//! request, for every layer; [`AttentionSpan::attended`] is the context every
//! layer would read to move the same KV bytes (the layers' mean).
//!
//! Not modelled: within a prefill chunk, a sliding-window layer's causal
//! attention is over the whole chunk (bounded by the window only across the
//! cached context).

/// What one layer reads of a request's context of `c` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// All of it.
    Full,
    /// At most the last `0` tokens.
    Window(u32),
    /// The tokens of its current `0`-token chunk.
    Chunk(u32),
    /// A fixed state, as many bytes as `0` tokens of KV.
    State(u32),
}

impl Reach {
    fn of(self, c: u32) -> u64 {
        u64::from(match self {
            Reach::Full => c,
            Reach::Window(w) => c.min(w),
            Reach::Chunk(k) => c % k,
            Reach::State(s) => s,
        })
    }
}

/// Every layer's [`Reach`], counted by kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttentionSpan {
    /// Each reach other than full and its layer count; empty: every layer
    /// reads the whole context.
    reaches: Vec<(Reach, u32)>,
    layers: u32,
}

impl AttentionSpan {
    /// The span of layers reaching as `layers` say.
    pub fn new(layers: impl IntoIterator<Item = Reach>) -> AttentionSpan {
        let mut span = AttentionSpan::default();
        for r in layers {
            span.layers += 1;
            match span.reaches.iter_mut().find(|(k, _)| *k == r) {
                Some((_, n)) => *n += 1,
                None => span.reaches.push((r, 1)),
            }
        }
        if span.reaches.iter().all(|&(r, _)| r == Reach::Full) {
            return AttentionSpan::default();
        }
        span
    }

    /// Every layer reads the whole context.
    pub fn is_full(&self) -> bool {
        self.reaches.is_empty()
    }

    /// The context length that, read by every layer, moves the KV bytes the
    /// layers read of a `context`-token context (rounded down).
    #[inline]
    pub(crate) fn attended(&self, context: u32) -> u32 {
        if self.reaches.is_empty() {
            return context;
        }
        let total: u64 = self.reaches.iter().map(|&(r, n)| r.of(context) * u64::from(n)).sum();
        (total / u64::from(self.layers)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gpt-oss: half the layers slide over 128 tokens. At 10,000 tokens of
    /// context the layers read (10,000 + 128) / 2 a layer on average.
    #[test]
    fn windowed_layers_read_at_most_their_window() {
        let span = AttentionSpan::new((0..24).map(|i| if i % 2 == 0 { Reach::Window(128) } else { Reach::Full }));
        assert_eq!(span.attended(10_000), 5064);
        assert_eq!(span.attended(100), 100);
        // Llama 4: 3 of 4 layers within an 8192-token chunk.
        let span = AttentionSpan::new((0..4).map(|i| if i == 3 { Reach::Full } else { Reach::Chunk(8192) }));
        assert_eq!(span.attended(8192 + 100), (3 * 100 + 8292) / 4);
        // Linear layers read a constant state.
        let span = AttentionSpan::new([Reach::State(536), Reach::Full]);
        assert_eq!(span.attended(0), 268);
        assert_eq!(span.attended(100_000), (536 + 100_000) / 2);
        assert!(AttentionSpan::new([Reach::Full; 3]).is_full());
    }
}

//! FNV-1a, 64 bits, whole or streaming: what run ids, plan hashes and RNG
//! stream names are made of; and SplitMix64's finaliser ([`mix`]), what KV
//! block hashes and speculative decoding's acceptance draws are made of. Stable across platforms and releases, which is
//! all an id needs; not a defence against anyone crafting collisions. Pure:
//! the files hashed are read by the sweep ([`hash64`] fed in pieces).

/// FNV-1a, 64 bits: stable across platforms and releases, which is all an id
/// (or an RNG stream name) needs.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h = Fnv64::new();
    h.update(bytes);
    h.finish()
}

/// SplitMix64's finaliser (Steele, Lea, Flood 2014; Vigna's
/// `splitmix64.c`): a cheap, well-distributed, platform-independent mix of
/// 64 bits.
pub fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// [`hash64`] fed in pieces, for files read streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Fnv64 {
    /// The hash of nothing yet.
    pub const fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    /// Continues with `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    }

    /// The hash of everything fed so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64::new()
    }
}

/// A map keyed by KV block hashes, which are already SplitMix64 outputs
/// (`sim::kv_cache::block_hashes`): hashing them again (std's SipHash) only
/// costs time — 7 % of a Mooncake run's instructions in the KV cache's
/// lookups. Never iterated for output, so the hasher changes no result.
pub(crate) type BlockMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<Identity>>;

/// The key itself as its hash (see [`BlockMap`]).
#[derive(Debug, Default)]
pub(crate) struct Identity(u64);

impl std::hash::Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64's published first outputs from state 0 are mix(0),
    /// mix(γ), … : 0xE220A8397B1DCDAF is its first (Vigna's splitmix64.c).
    #[test]
    fn mix_is_splitmix64() {
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(hash64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv64::new();
        h.update(b"ab");
        h.update(b"c");
        assert_eq!(h.finish(), hash64(b"abc"));
    }
}

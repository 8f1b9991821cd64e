//! A Weka session as a request DAG: the main turns' chain, subagent chains
//! rebuilt from their hash ids and spawned and joined where the recorded
//! times say (tiered: each chain gates the first main turn that started
//! after it ended), prompts as session-scoped block identities. Also what
//! an AgentX play needs of it: a fresh identity namespace per play, a start
//! part-way (a snapshot), warm-up calls and a cap on idle gaps. The file
//! format is read in [`super::weka`].

use crate::workload::types::{LlmCall, NodeKind, PromptBlocks, Request, RequestId, SubRequest};

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Sent at, s from the session start.
    pub t: f64,
    /// Recorded end: `t + api_time` (`t` without one), s.
    pub end: f64,
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens (≥ 1).
    pub output: u32,
    /// Prefix-block hashes (session-scoped).
    pub hash_ids: Vec<i64>,
    /// The recorded model (chains continue only on the same model).
    pub model: String,
}

/// A subagent entry: its calls, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentEntry {
    /// Spawned at, s.
    pub t: f64,
    /// Its id in the file.
    pub agent_id: String,
    /// Its calls.
    pub calls: Vec<Call>,
}

/// An entry of a session's `requests`, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A main-agent turn.
    Main(Call),
    /// A subagent.
    Subagent(SubagentEntry),
}

/// A checked session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Its id (the request id).
    pub id: String,
    /// Where it was read: file and line, for messages.
    pub file: String,
    /// The line (1 for a `.json` file).
    pub line: u64,
    /// Tokens per hash-id block.
    pub block_tokens: u32,
    /// Its entries, in file order.
    pub entries: Vec<Entry>,
}

impl Session {
    /// Its main turns.
    pub fn main_turns(&self) -> usize {
        self.entries.iter().filter(|e| matches!(e, Entry::Main(_))).count()
    }

    /// When main turn `k` was sent, s.
    pub fn main_turn_t(&self, k: usize) -> Option<f64> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Main(c) => Some(c.t),
                Entry::Subagent(_) => None,
            })
            .nth(k)
    }

    /// Its recorded length, s: from the first call sent to the last end.
    pub fn duration(&self) -> f64 {
        let calls = self.entries.iter().flat_map(|e| match e {
            Entry::Main(c) => std::slice::from_ref(c),
            Entry::Subagent(s) => &s.calls[..],
        });
        let (mut first, mut last) = (f64::INFINITY, 0.0f64);
        for c in calls {
            first = first.min(c.t);
            last = last.max(c.end);
        }
        if first.is_finite() { last - first } else { 0.0 }
    }
}

/// How a session becomes a request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Build {
    /// The identity namespace of its blocks: sessions (and AgentX plays of
    /// one session) with different salts share no block.
    pub salt: u64,
    /// The main agent alone.
    pub drop_subagents: bool,
    /// Idle gaps (the interval before a node) capped at this, µs.
    pub max_think_us: Option<u64>,
    /// Start at this main turn (an AgentX snapshot): earlier turns and the
    /// subagents spawned before it are history, not sent.
    pub start_turn: usize,
    /// The first this many main turns sent (from `start_turn`), and the
    /// subagent calls they spawn, are warm-up: one output token, no idle gap
    /// before them.
    pub warmup_calls: u32,
}

/// Node `i` of the DAG being built.
struct Node {
    call: usize,
    /// Spawned by a warm-up turn (or one itself): one token, no gap.
    warmup: bool,
    preds_end: f64,
    next: Vec<u32>,
    interval_s: f64,
    root: bool,
}

/// `session` as one request arriving at `arrival_s`. Main turns are nodes
/// `0..` in order (so warm-up calls come first), subagent chains after.
pub fn build(session: &Session, arrival_s: f64, b: &Build) -> Request {
    let mut calls: Vec<&Call> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    // Main turns kept, each with its entry position.
    let mut main: Vec<(usize, u32)> = Vec::new();
    let mut seen_main = 0usize;
    let mut first_kept_pos = None;
    for (pos, e) in session.entries.iter().enumerate() {
        if let Entry::Main(c) = e {
            if seen_main >= b.start_turn {
                first_kept_pos.get_or_insert(pos);
                let warmup = main.len() < b.warmup_calls as usize;
                main.push((pos, nodes.len() as u32));
                nodes.push(Node {
                    call: calls.len(),
                    warmup,
                    preds_end: f64::NEG_INFINITY,
                    next: vec![],
                    interval_s: 0.0,
                    root: false,
                });
                calls.push(c);
            }
            seen_main += 1;
        }
    }
    let base = session
        .entries
        .iter()
        .skip(first_kept_pos.unwrap_or(0))
        .flat_map(|e| match e {
            Entry::Main(c) => std::slice::from_ref(c),
            Entry::Subagent(s) => &s.calls[..],
        })
        .map(|c| c.t)
        .fold(f64::INFINITY, f64::min);
    let base = if base.is_finite() { base } else { 0.0 };
    // The main chain.
    for w in 0..main.len() {
        let node = main[w].1 as usize;
        if w == 0 {
            nodes[node].root = true;
            nodes[node].interval_s = calls[nodes[node].call].t - base;
        } else {
            let prev = main[w - 1].1 as usize;
            nodes[prev].next.push(node as u32);
            let prev_end = calls[nodes[prev].call].end;
            nodes[node].preds_end = nodes[node].preds_end.max(prev_end);
        }
    }
    if !b.drop_subagents {
        for (pos, e) in session.entries.iter().enumerate() {
            let Entry::Subagent(sub) = e else { continue };
            if first_kept_pos.is_some_and(|f| pos < f) || (first_kept_pos.is_none() && b.start_turn > 0) {
                continue; // history of a snapshot
            }
            let anchor = main.iter().rev().find(|(p, _)| *p < pos).map(|&(_, n)| n as usize);
            let warmup = anchor.is_some_and(|a| nodes[a].warmup);
            for chain in chains(&sub.calls) {
                let mut prev: Option<usize> = None;
                for &ci in &chain {
                    let c = &sub.calls[ci];
                    let node = nodes.len();
                    let (interval_s, root) = match (prev, anchor) {
                        (Some(p), _) => {
                            nodes[p].next.push(node as u32);
                            (c.t - calls[nodes[p].call].end, false)
                        }
                        (None, Some(a)) => {
                            nodes[a].next.push(node as u32);
                            (c.t - calls[nodes[a].call].end, false)
                        }
                        (None, None) => (c.t - base, true),
                    };
                    nodes.push(Node {
                        call: calls.len(),
                        warmup,
                        preds_end: f64::NEG_INFINITY,
                        next: vec![],
                        interval_s,
                        root,
                    });
                    calls.push(c);
                    prev = Some(node);
                }
                // Join the first later main turn sent after the chain ended.
                let last = prev.expect("chains are never empty");
                let end = calls[nodes[last].call].end;
                if let Some(&(_, m)) = main.iter().find(|&&(p, m)| p > pos && calls[nodes[m as usize].call].t >= end) {
                    nodes[last].next.push(m);
                    let m = m as usize;
                    nodes[m].preds_end = nodes[m].preds_end.max(end);
                }
            }
        }
    }
    // Main turns after the first wait for every predecessor's recorded end.
    for &(_, m) in main.iter().skip(1) {
        let m = m as usize;
        nodes[m].interval_s = calls[nodes[m].call].t - nodes[m].preds_end;
    }
    let mut tail_no = 0u64;
    let sub_requests: Vec<SubRequest> = nodes
        .iter()
        .map(|n| {
            let c = calls[n.call];
            let mut interval_us = crate::workload::seconds_to_us(n.interval_s.max(0.0));
            if let Some(cap) = b.max_think_us {
                interval_us = interval_us.min(cap);
            }
            // The primer keeps its place; the warm-up after it runs back to back.
            if n.warmup && !n.root {
                interval_us = 0;
            }
            let mut next = n.next.clone();
            next.sort_unstable();
            next.dedup();
            tail_no += 1;
            let output = if n.warmup { 1 } else { c.output };
            SubRequest {
                next,
                interval: interval_us as f64 / 1e6,
                kind: NodeKind::Llm(LlmCall::new(c.input, output).with_prompt_blocks(blocks(
                    c,
                    session.block_tokens,
                    b.salt,
                    tail_no,
                ))),
                result: None,
            }
        })
        .collect();
    let initial = nodes.iter().enumerate().filter(|(_, n)| n.root).map(|(i, _)| i as u32).collect();
    Request {
        request_id: RequestId::Str(session.id.clone()),
        arrival_time: arrival_s,
        initial,
        sub_requests,
        traffic: Default::default(),
    }
}

/// `calls` (one subagent's) split into chains, each a list of call indices
/// in time order: a call continues a chain that has ended by its send, on
/// the same model, whose last prompt it extends (the longest such), else
/// the one it shares the longest prefix with (a compaction), else — when
/// it carries no hash ids — the first free chain; otherwise it forks a new
/// chain. No chain holds two calls that overlap in time.
fn chains(calls: &[Call]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by(|&a, &b| calls[a].t.total_cmp(&calls[b].t));
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for i in order {
        let c = &calls[i];
        let free = |ch: &&Vec<usize>| {
            let tail = &calls[*ch.last().expect("non-empty")];
            tail.end <= c.t && tail.model == c.model
        };
        let lcp = |ch: &Vec<usize>| {
            let tail = &calls[*ch.last().expect("non-empty")];
            tail.hash_ids.iter().zip(&c.hash_ids).take_while(|(a, b)| a == b).count()
        };
        let extends = |ch: &Vec<usize>| {
            let tail = &calls[*ch.last().expect("non-empty")];
            !tail.hash_ids.is_empty() && lcp(ch) == tail.hash_ids.len()
        };
        let pick = chains
            .iter()
            .enumerate()
            .filter(|(_, ch)| free(ch) && extends(ch))
            .max_by_key(|(k, ch)| (lcp(ch), std::cmp::Reverse(*k)))
            .or_else(|| {
                chains
                    .iter()
                    .enumerate()
                    .filter(|(_, ch)| free(ch) && lcp(ch) > 0)
                    .max_by_key(|(k, ch)| (lcp(ch), std::cmp::Reverse(*k)))
            })
            .or_else(|| if c.hash_ids.is_empty() { chains.iter().enumerate().find(|(_, ch)| free(ch)) } else { None })
            .map(|(k, _)| k);
        match pick {
            Some(k) => chains[k].push(i),
            None => chains.push(vec![i]),
        }
    }
    chains
}

/// A session-scoped identity for block id `id` in namespace `salt`.
fn identity(salt: u64, id: u64) -> u64 {
    let mut z = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id.wrapping_add(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Marks the identities of a call's unhashed tail (ids the file never
/// uses: recorded hash ids are small counters).
const TAIL: u64 = 1 << 62;

/// A call's prompt as blocks: its hash ids (as many as its prompt has
/// blocks) in the session's namespace, then blocks of its own.
fn blocks(c: &Call, block_tokens: u32, salt: u64, call_no: u64) -> PromptBlocks {
    let n = c.input.div_ceil(block_tokens) as usize;
    let mut ids: Vec<u64> = c.hash_ids.iter().take(n).map(|&h| identity(salt, h as u64 & !TAIL)).collect();
    let own = ids.len();
    ids.extend((own..n).map(|j| identity(salt, TAIL | (call_no << 24) | j as u64)));
    PromptBlocks { block_tokens, ids }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(t: f64, end: f64, input: u32, ids: &[i64]) -> Call {
        Call { t, end, input, output: 5, hash_ids: ids.to_vec(), model: "m".into() }
    }

    fn session(entries: Vec<Entry>) -> Session {
        Session { id: "s".into(), file: "f".into(), line: 1, block_tokens: 64, entries }
    }

    fn sub(t: f64, calls: Vec<Call>) -> Entry {
        Entry::Subagent(SubagentEntry { t, agent_id: "a".into(), calls })
    }

    #[test]
    fn a_subagent_spawns_from_the_turn_before_and_joins_the_turn_it_gates() {
        let s = session(vec![
            Entry::Main(call(0.0, 1.0, 200, &[1, 2, 3])),
            sub(2.0, vec![call(2.0, 2.5, 100, &[10, 11])]),
            Entry::Main(call(6.0, 7.5, 400, &[1, 2, 3, 4, 5])),
        ]);
        let r = build(&s, 3.0, &Build::default());
        assert_eq!(r.initial, vec![0]);
        let next: Vec<Vec<u32>> = r.sub_requests.iter().map(|n| n.next.clone()).collect();
        assert_eq!(next, vec![vec![1, 2], vec![], vec![1]]);
        // Spawned 1 s after turn 0 ended; turn 1 starts 3.5 s after the
        // subagent's end (its latest predecessor).
        let iv: Vec<f64> = r.sub_requests.iter().map(|n| n.interval).collect();
        assert_eq!(iv, vec![0.0, 3.5, 1.0]);
        let dropped = build(&s, 0.0, &Build { drop_subagents: true, ..Build::default() });
        assert_eq!(dropped.sub_requests.len(), 2);
        // The subagent's wall time folds into the gap: 6 − 1.
        assert_eq!(dropped.sub_requests[1].interval, 5.0);
    }

    #[test]
    fn chains_are_tiered_by_their_recorded_ends() {
        // One subagent with a short chain and a long disjoint one.
        let s = session(vec![
            Entry::Main(call(0.0, 1.0, 64, &[1])),
            sub(1.0, vec![call(1.0, 2.0, 64, &[10]), call(1.5, 30.0, 64, &[20])]),
            Entry::Main(call(3.0, 4.0, 128, &[1, 2])),
            Entry::Main(call(40.0, 41.0, 192, &[1, 2, 3])),
            sub(41.0, vec![call(42.0, 500.0, 64, &[30])]),
        ]);
        let r = build(&s, 0.0, &Build::default());
        // main 0,1,2 = nodes 0,1,2; chains: [10] node 3, [20] node 4, [30] node 5.
        assert_eq!(r.sub_requests[3].next, vec![1], "the short chain gates the next turn");
        assert_eq!(r.sub_requests[4].next, vec![2], "the long one gates a later turn");
        assert!(r.sub_requests[5].next.is_empty(), "one that outlives the session runs in the background");
        assert_eq!(r.sub_requests[2].next, vec![5]);
    }

    #[test]
    fn a_chain_continues_where_a_prompt_extends_and_forks_where_calls_overlap() {
        let calls = vec![
            call(0.0, 1.0, 64, &[1]),
            call(0.5, 2.0, 64, &[1, 7]),  // overlaps call 0: a fork
            call(1.5, 3.0, 128, &[1, 2]), // extends call 0's prompt, which has ended
            call(4.0, 5.0, 64, &[1]),     // a compaction of call 2's
            call(6.0, 7.0, 64, &[99]),    // disjoint: its own chain
        ];
        assert_eq!(chains(&calls), vec![vec![0, 2, 3], vec![1], vec![4]]);
    }

    #[test]
    fn a_snapshot_starts_part_way_with_warm_up_calls_and_fresh_identities() {
        let s = session(vec![
            Entry::Main(call(0.0, 1.0, 64, &[1])),
            sub(1.0, vec![call(1.0, 2.0, 64, &[10])]),
            Entry::Main(call(3.0, 4.0, 128, &[1, 2])),
            Entry::Main(call(9.0, 10.0, 192, &[1, 2, 3])),
            Entry::Main(call(20.0, 21.0, 256, &[1, 2, 3, 4])),
        ]);
        let b = Build { start_turn: 1, warmup_calls: 2, salt: 7, ..Build::default() };
        let r = build(&s, 0.0, &b);
        assert_eq!(r.sub_requests.len(), 3, "turn 0 and its subagent are history");
        let out: Vec<u32> = r
            .sub_requests
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Llm(c) => c.output_tokens,
                NodeKind::ToolCall { .. } => 0,
            })
            .collect();
        assert_eq!(out, vec![1, 1, 5]);
        let iv: Vec<f64> = r.sub_requests.iter().map(|n| n.interval).collect();
        assert_eq!(iv, vec![0.0, 0.0, 10.0]);
        let ids = |r: &Request, k: usize| match &r.sub_requests[k].kind {
            NodeKind::Llm(c) => c.prompt_blocks.clone().unwrap().ids,
            NodeKind::ToolCall { .. } => vec![],
        };
        let other = build(&s, 0.0, &Build { salt: 8, ..b });
        assert_eq!(ids(&r, 0)[0], ids(&r, 1)[0], "one play shares its blocks");
        assert_ne!(ids(&r, 0)[0], ids(&other, 0)[0], "another play shares none");
        // A cap on idle gaps.
        let capped = build(&s, 0.0, &Build { max_think_us: Some(2_000_000), ..b });
        assert_eq!(capped.sub_requests[2].interval, 2.0);
    }

    #[test]
    fn prompts_past_the_hash_ids_are_the_calls_own() {
        let a = blocks(&call(0.0, 1.0, 200, &[1, 2, 3]), 64, 0, 1);
        let b = blocks(&call(0.0, 1.0, 200, &[1, 2, 3]), 64, 0, 2);
        assert_eq!((a.ids.len(), a.ids[..3] == b.ids[..3], a.ids[3] == b.ids[3]), (4, true, false));
        // More ids than blocks: the prompt's own count wins.
        assert_eq!(blocks(&call(0.0, 1.0, 64, &[1, 2, 3]), 64, 0, 1).ids.len(), 1);
    }
}

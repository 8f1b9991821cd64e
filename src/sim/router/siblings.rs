//! Sibling groups of a request DAG, for `router.affinity: sibling-group`
//! (AISimulate's AgentX routing; inference-perf #769 argues each subagent
//! stream should carry its own session): a node continues its first
//! predecessor's group when it is that predecessor's first successor (the
//! next turn of the same agent); the other successors of one node (the
//! subagents it spawned) share a group of their own. In a Weka play the
//! main agent is one group and the subagents spawned at one turn another.

use crate::workload::SubRequest;

/// Each node's group, and how many groups there are.
pub(crate) fn sibling_groups(nodes: &[SubRequest]) -> (Vec<u32>, u32) {
    let n = nodes.len();
    let mut first_pred = vec![u32::MAX; n];
    let mut indegree = vec![0u32; n];
    for (i, node) in nodes.iter().enumerate() {
        for &j in &node.next {
            let j = j as usize;
            first_pred[j] = first_pred[j].min(i as u32);
            indegree[j] += 1;
        }
    }
    let first_succ = |i: usize| nodes[i].next.iter().copied().min();
    let mut group = vec![u32::MAX; n];
    let mut spawned = vec![u32::MAX; n];
    let mut groups = 0u32;
    let mut other_roots = u32::MAX;
    // Kahn's order: a node's first predecessor has its group before it.
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).rev().collect();
    while let Some(i) = ready.pop() {
        group[i] = if first_pred[i] == u32::MAX {
            if groups == 0 {
                groups = 1;
                0
            } else {
                if other_roots == u32::MAX {
                    other_roots = groups;
                    groups += 1;
                }
                other_roots
            }
        } else {
            let p = first_pred[i] as usize;
            if first_succ(p) == Some(i as u32) {
                group[p]
            } else {
                if spawned[p] == u32::MAX {
                    spawned[p] = groups;
                    groups += 1;
                }
                spawned[p]
            }
        };
        for &j in nodes[i].next.iter().rev() {
            let j = j as usize;
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(j);
            }
        }
    }
    (group, groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{LlmCall, NodeKind};

    fn dag(next: &[&[u32]]) -> Vec<SubRequest> {
        next.iter()
            .map(|n| SubRequest {
                next: n.to_vec(),
                interval: 0.0,
                kind: NodeKind::Llm(LlmCall::new(1, 1)),
                result: None,
            })
            .collect()
    }

    #[test]
    fn the_main_chain_is_one_group_and_each_turns_subagents_another() {
        // Main turns 0, 1, 2; turn 0 spawns chains [3, 4] and [5]; turn 1
        // spawns [6]; 4 and 5 join turn 1, 6 joins turn 2.
        let nodes = dag(&[&[1, 3, 5], &[2, 6], &[], &[4], &[1], &[1], &[2]]);
        let (g, n) = sibling_groups(&nodes);
        assert_eq!(g, vec![0, 0, 0, 1, 1, 1, 2]);
        assert_eq!(n, 3);
        // Roots after the first share a group.
        let (g, n) = sibling_groups(&dag(&[&[1], &[], &[], &[]]));
        assert_eq!((g, n), (vec![0, 0, 1, 1], 2));
    }
}

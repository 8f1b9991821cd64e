//! What the simulation's queue holds: every event, naming a request by its
//! slot and the slot's generation.

/// Events name a request by its slot and the slot's generation: a request
/// that timed out leaves events behind, and they must not touch the request
/// that reuses its slot.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    NodeStart {
        slot: u32,
        generation: u32,
        node: u32,
    },
    /// An llm node reaches replica `replica`'s engine, after the server's
    /// front end.
    EngineEnter {
        slot: u32,
        generation: u32,
        node: u32,
        replica: u32,
    },
    ToolDone {
        slot: u32,
        generation: u32,
        node: u32,
    },
    /// The client stops waiting for the request.
    Timeout {
        slot: u32,
        generation: u32,
    },
    /// The gateway queue's periodic dispatch and expiry (flow control).
    GatewayTick,
    /// Replica `replica`'s executing step ends.
    StepEnd {
        replica: u32,
    },
    /// `router.env`: the request reaches the router's admission.
    Admit {
        slot: u32,
        generation: u32,
    },
    /// `router.env`: llm node `node`, routed to replica `replica`, reaches
    /// its front end after the routing hop.
    RouterHop {
        slot: u32,
        generation: u32,
        node: u32,
        replica: u32,
    },
    /// A prompt's KV, read from its prefill replica, has landed in replica
    /// `replica`'s engine slot `engine_slot`.
    KvLanded {
        slot: u32,
        generation: u32,
        node: u32,
        replica: u32,
        engine_slot: u32,
    },
}

//! `run` on scenarios with `pools:`.

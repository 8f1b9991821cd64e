//! The measurement window: the part of a run in steady state, which every
//! SLO, goodput and capacity verdict is judged on (the run's other metrics
//! cover every request).
//!
//! As real benchmark clients do (vLLM's benchmark_serving warm-up,
//! inference-perf's and guidellm's warm-up stages), the window leaves out
//! - the warm-up: a closed loop's users all start at once (or over a ramp),
//!   so their first requests meet an empty server and then a burst; the
//!   window opens when the first `users` requests sent have all left (every
//!   user's first request, when they start together) and, with a ramp, not
//!   before the ramp ends. An open loop has no warm-up unless one is set.
//!   A plan can set it: the first `n` requests (the window opens when they
//!   have all left) or the first `s` seconds;
//! - the drain: the window closes at the last send. Requests sent in the
//!   window are measured to their end; throughput and goodput are counted
//!   per second of the window, not of the drain after it.
//!
//! Whether a request is in the window is decided when it is sent, from what
//! has happened by then, so it needs no look-ahead and no buffering.

/// What a run leaves out as warm-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Warmup {
    /// Closed loop: until the first `users` requests have left (and the ramp
    /// has ended). Open loop: none.
    #[default]
    Auto,
    /// Until the first `n` requests sent have all left.
    Requests(u64),
    /// The first this many µs.
    Micros(u64),
}

/// How a run's measurement window is set up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measurement {
    /// What is left out at the start.
    pub warmup: Warmup,
    /// Closed loop: users start spread evenly over this many µs instead of
    /// all at time 0 (user `i` of `n` at `i · ramp / n`).
    pub ramp_us: u64,
}

impl Measurement {
    /// Whether anything is set beyond the defaults.
    pub fn is_default(&self) -> bool {
        *self == Measurement::default()
    }
}

/// How a run's window came out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// When the warm-up ended, µs; `None` when it never did (every request
    /// sent was warm-up).
    pub start_us: Option<u64>,
    /// The last send, µs.
    pub end_us: u64,
    /// Requests sent in the window.
    pub requests: u64,
    /// Requests (sent in the window or before) that completed within it.
    pub completed: u64,
    /// The measurement was set explicitly (a warm-up or a ramp).
    pub explicit: bool,
}

impl Window {
    /// Its length, µs (0 when it never opened).
    pub fn duration_us(&self) -> u64 {
        self.start_us.map_or(0, |s| self.end_us.saturating_sub(s))
    }
}

/// The window as the run goes.
#[derive(Debug, Clone, Default)]
pub(super) struct WindowState {
    /// The rule, resolved against the client.
    rule: Rule,
    /// Requests-rule: warm-up requests not left yet.
    pending: u64,
    /// The window opened at (requests rule), or opens at (seconds rule).
    start_us: Option<u64>,
    /// The window does not open before this, µs (the ramp's end).
    not_before_us: u64,
    last_send_us: u64,
    requests: u64,
    completed_since_start: u64,
    completed_at_last_send: u64,
    explicit: bool,
}

#[derive(Debug, Clone, Copy, Default)]
enum Rule {
    #[default]
    Always,
    /// The first `n` requests (by send order).
    Requests(u64),
}

impl WindowState {
    /// The window of `measurement` for a client of `closed_users` users
    /// (a closed loop), or an open one (`None`).
    pub(super) fn new(measurement: Measurement, closed_users: Option<u64>) -> WindowState {
        let mut s = WindowState { explicit: !measurement.is_default(), ..WindowState::default() };
        match (measurement.warmup, closed_users) {
            (Warmup::Auto, Some(users)) => {
                s.rule = Rule::Requests(users);
                s.pending = users;
                s.not_before_us = measurement.ramp_us;
            }
            (Warmup::Auto, None) | (Warmup::Requests(0), _) => s.start_us = Some(0),
            (Warmup::Requests(n), _) => {
                s.rule = Rule::Requests(n);
                s.pending = n;
            }
            (Warmup::Micros(us), _) => s.start_us = Some(us),
        }
        s
    }

    fn is_open(&self, t: u64) -> bool {
        self.start_us.is_some_and(|s| t >= s)
    }

    /// Request `index` is sent at `send_us`: whether it is in the window.
    pub(super) fn on_send(&mut self, send_us: u64) -> bool {
        let inside = self.is_open(send_us);
        self.last_send_us = self.last_send_us.max(send_us);
        if inside {
            self.requests += 1;
        }
        self.completed_at_last_send = self.completed_since_start;
        inside
    }

    /// Request `index` leaves at `now`, `completed` or not.
    pub(super) fn on_leave(&mut self, index: u64, now: u64, completed: bool) {
        if let Rule::Requests(n) = self.rule
            && index < n
        {
            self.pending -= 1;
            if self.pending == 0 {
                self.start_us = Some(now.max(self.not_before_us));
            }
        }
        if completed && self.is_open(now) {
            self.completed_since_start += 1;
        }
    }

    /// How it came out.
    pub(super) fn summary(&self) -> Window {
        Window {
            start_us: self.start_us.filter(|&s| s <= self.last_send_us),
            end_us: self.last_send_us,
            requests: self.requests,
            completed: self.completed_at_last_send,
            explicit: self.explicit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_loop_opens_when_every_first_request_has_left() {
        let mut w = WindowState::new(Measurement::default(), Some(2));
        assert!(!w.on_send(0) && !w.on_send(0));
        w.on_leave(0, 10, true);
        assert!(!w.on_send(10), "user 2's first request is still out");
        w.on_leave(1, 20, true);
        assert!(w.on_send(20));
        w.on_leave(2, 30, true);
        assert!(w.on_send(30));
        let s = w.summary();
        // (The completion that opens the window is its first.)
        assert_eq!((s.start_us, s.end_us, s.requests, s.completed), (Some(20), 30, 2, 2));
        assert!(!s.explicit);
    }

    #[test]
    fn an_open_loop_measures_everything_unless_told() {
        let mut w = WindowState::new(Measurement::default(), None);
        assert!(w.on_send(0));
        let mut w = WindowState::new(Measurement { warmup: Warmup::Micros(5), ramp_us: 0 }, None);
        assert!(!w.on_send(4) && w.on_send(5));
        assert_eq!(w.summary().start_us, Some(5));
        // Never reached: no window.
        let mut w = WindowState::new(Measurement { warmup: Warmup::Micros(50), ramp_us: 0 }, None);
        assert!(!w.on_send(4));
        assert_eq!(w.summary().start_us, None);
        assert_eq!(w.summary().duration_us(), 0);
    }

    #[test]
    fn a_ramp_holds_the_window_until_it_ends() {
        let m = Measurement { warmup: Warmup::Auto, ramp_us: 100 };
        let mut w = WindowState::new(m, Some(1));
        w.on_send(0);
        w.on_leave(0, 10, true);
        assert!(!w.on_send(50) && w.on_send(100));
    }
}

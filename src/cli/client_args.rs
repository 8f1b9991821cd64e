//! How the client sends requests — the flags `run` and `observe` share:
//! open loop at the arrival times, a concurrency cap, or closed-loop users
//! with a think time; and the rate scale.

use anyhow::bail;

use crate::sim::Client;

#[derive(Debug, clap::Args)]
pub(crate) struct ClientArgs {
    /// At most N requests (whole DAGs) in flight: later arrivals wait in the
    /// client, first come first sent. E2E counts from the send. With
    /// --closed-loop: the users.
    #[arg(long, visible_alias = "users", value_name = "N")]
    pub(crate) concurrency: Option<u32>,
    /// Ignore arrival times: --concurrency N users each send their next
    /// request when their previous one finishes (plus --think-time).
    #[arg(long, requires = "concurrency")]
    pub(crate) closed_loop: bool,
    /// Closed loop: pause between a user's response and its next request.
    #[arg(long, value_name = "SECONDS", requires = "closed_loop")]
    think_time: Option<f64>,
    /// Divide every arrival time by this (2 = twice the request rate).
    #[arg(long, value_name = "X")]
    rate_scale: Option<f64>,
}

impl ClientArgs {
    /// The client the flags describe.
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        Ok(match (self.concurrency, self.closed_loop) {
            (Some(0), _) => bail!("--concurrency: must be at least 1"),
            (None, _) => Client::OpenLoop,
            (Some(limit), false) => Client::Capped { limit },
            (Some(users), true) => Client::ClosedLoop {
                users,
                think_time_us: crate::workload::checked_seconds_to_us(self.think_time.unwrap_or(0.0))
                    .map_err(|reason| anyhow::anyhow!("--think-time: {reason}"))?,
            },
        })
    }

    /// `--rate-scale` (default 1), checked.
    pub(crate) fn rate_scale(&self) -> anyhow::Result<f64> {
        let rate_scale = self.rate_scale.unwrap_or(1.0);
        if !(rate_scale.is_finite() && rate_scale > 0.0) {
            bail!("--rate-scale: {rate_scale} must be a positive number");
        }
        Ok(rate_scale)
    }
}

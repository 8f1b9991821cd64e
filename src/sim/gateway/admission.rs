//! Admission at the gateway, decided once per request when the client sends
//! it (BLIS's admission policies, llm-d's GIE "legacy" saturation shedding):
//! `always`, a token bucket (cost = prompt tokens, starts full, refilled
//! continuously), or shedding of sheddable classes while the cluster is
//! saturated; per-tenant budgets on top of any of them.

use crate::workload::{NodeKind, Request};

/// Micro-tokens per token: the bucket's level is kept in millionths of a
/// token so that a refill of `r` tokens/s adds exactly `r` per µs (integer
/// arithmetic, no rounding drift over a run).
const MICRO: u128 = 1_000_000;

/// Which requests the gateway admits.
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionPolicy {
    /// Every request (tenant budgets still apply).
    Always,
    /// A request costs its prompt tokens; admitted while the bucket holds them.
    TokenBucket {
        /// Tokens the bucket holds when full (it starts full).
        capacity: u64,
        /// Tokens added per second, continuously.
        refill_per_s: u64,
    },
    /// A sheddable request (class priority < 0) is rejected while the
    /// saturation is at or above `threshold` (GIE: 1.0).
    ShedByClass {
        /// Saturation from which sheddable requests are rejected.
        threshold: f64,
    },
}

/// `router.admission`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionConfig {
    /// The policy.
    pub policy: AdmissionPolicy,
    /// Per tenant, its share of the cluster's sequences (`replicas ×
    /// max_num_seqs`): a sheddable request of that tenant is rejected while
    /// the tenant has more requests in flight than that. Sorted by tenant.
    pub tenant_budgets: Vec<(String, f64)>,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The token bucket held fewer tokens than the request's prompt.
    TokenBucket,
    /// Sheddable, and the cluster was saturated.
    Saturation,
    /// Sheddable, and its tenant was over its budget.
    TenantBudget,
}

/// A token bucket in integer micro-tokens.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    capacity: u128,
    refill_per_s: u128,
    level: u128,
    last_us: u64,
}

impl TokenBucket {
    /// Full at time 0.
    pub(crate) fn new(capacity: u64, refill_per_s: u64) -> TokenBucket {
        let capacity = u128::from(capacity) * MICRO;
        TokenBucket { capacity, refill_per_s: u128::from(refill_per_s), level: capacity, last_us: 0 }
    }

    /// Takes `cost` tokens at `now` if the bucket holds them.
    pub(crate) fn try_take(&mut self, now: u64, cost: u64) -> bool {
        let elapsed = u128::from(now.saturating_sub(self.last_us));
        self.last_us = self.last_us.max(now);
        // `refill_per_s` tokens a second = that many micro-tokens a µs.
        self.level = (self.level + elapsed.saturating_mul(self.refill_per_s)).min(self.capacity);
        let cost = u128::from(cost) * MICRO;
        if self.level >= cost {
            self.level -= cost;
            true
        } else {
            false
        }
    }
}

/// What a request costs the bucket: the prompt tokens of its first llm
/// node(s) — its llm roots, or, when every root is a tool call, its first
/// llm node (what the gateway sees of it when it arrives).
pub(crate) fn prompt_cost(request: &Request) -> u64 {
    let llm = |i: usize| match &request.sub_requests[i].kind {
        NodeKind::Llm(call) => Some(u64::from(call.input_tokens)),
        NodeKind::ToolCall { .. } => None,
    };
    let roots: Vec<u64> = request.initial.iter().filter_map(|&r| llm(r as usize)).collect();
    if roots.is_empty() { (0..request.sub_requests.len()).find_map(llm).unwrap_or(0) } else { roots.iter().sum() }
}

/// The gateway's admission state over a run.
#[derive(Debug)]
pub(crate) struct Admission {
    config: AdmissionConfig,
    bucket: Option<TokenBucket>,
    /// Requests in flight per tenant of `config.tenant_budgets` (same order).
    tenant_in_flight: Vec<u64>,
    /// `replicas × max_num_seqs` of the serving pools.
    sequences: u64,
}

impl Admission {
    pub(crate) fn new(config: AdmissionConfig, sequences: u64) -> Admission {
        let bucket = match config.policy {
            AdmissionPolicy::TokenBucket { capacity, refill_per_s } => Some(TokenBucket::new(capacity, refill_per_s)),
            _ => None,
        };
        let tenant_in_flight = vec![0; config.tenant_budgets.len()];
        Admission { config, bucket, tenant_in_flight, sequences }
    }

    /// The budgeted tenant of `request`, as an index.
    fn tenant(&self, request: &Request) -> Option<usize> {
        let t = request.traffic.tenant.as_deref()?;
        self.config.tenant_budgets.binary_search_by(|(name, _)| name.as_str().cmp(t)).ok()
    }

    /// Admits `request` at `now` or says why not (a token-bucket admission
    /// takes its tokens). `saturation` is asked only when the policy needs it.
    pub(crate) fn admit(
        &mut self,
        now: u64,
        request: &Request,
        saturation: impl FnOnce() -> f64,
    ) -> Result<(), Rejection> {
        let sheddable = request.traffic.class().is_sheddable();
        let tenant = self.tenant(request);
        if let Some(t) = tenant.filter(|_| sheddable) {
            let budget = self.config.tenant_budgets[t].1 * self.sequences as f64;
            if self.tenant_in_flight[t] as f64 > budget {
                return Err(Rejection::TenantBudget);
            }
        }
        match self.config.policy {
            AdmissionPolicy::Always => {}
            AdmissionPolicy::TokenBucket { .. } => {
                let bucket = self.bucket.as_mut().expect("a token bucket");
                if !bucket.try_take(now, prompt_cost(request)) {
                    return Err(Rejection::TokenBucket);
                }
            }
            AdmissionPolicy::ShedByClass { threshold } => {
                if sheddable && saturation() >= threshold {
                    return Err(Rejection::Saturation);
                }
            }
        }
        Ok(())
    }

    /// A request entered the system (it counts in its tenant's in-flight).
    pub(crate) fn on_enter(&mut self, request: &Request) {
        if let Some(t) = self.tenant(request) {
            self.tenant_in_flight[t] += 1;
        }
    }

    /// A request that entered left.
    pub(crate) fn on_leave(&mut self, request: &Request) {
        if let Some(t) = self.tenant(request) {
            self.tenant_in_flight[t] -= 1;
        }
    }

    pub(crate) fn config(&self) -> &AdmissionConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{LlmCall, RequestId, SloClass, SubRequest, Traffic};

    fn request(prompt: u32, class: Option<SloClass>, tenant: Option<&str>) -> Request {
        Request {
            traffic: Traffic { slo_class: class, tenant: tenant.map(str::to_owned), slo_target_us: None },
            request_id: RequestId::Int(0),
            arrival_time: 0.0,
            initial: vec![0],
            sub_requests: vec![SubRequest {
                next: vec![],
                interval: 0.0,
                kind: NodeKind::Llm(LlmCall::new(prompt, 4)),
                result: None,
            }],
        }
    }

    fn bucket(capacity: u64, refill_per_s: u64) -> Admission {
        let policy = AdmissionPolicy::TokenBucket { capacity, refill_per_s };
        Admission::new(AdmissionConfig { policy, tenant_budgets: vec![] }, 8)
    }

    #[test]
    fn a_full_bucket_admits_exactly_its_capacity_then_refills_by_the_microsecond() {
        let mut a = bucket(100, 1000);
        assert_eq!(a.admit(0, &request(100, None, None), || 0.0), Ok(()));
        // Empty: one token more is refused.
        assert_eq!(a.admit(0, &request(1, None, None), || 0.0), Err(Rejection::TokenBucket));
        // 1,000 tokens/s: one token a ms; 999 µs is not enough.
        assert_eq!(a.admit(999, &request(1, None, None), || 0.0), Err(Rejection::TokenBucket));
        assert_eq!(a.admit(1000, &request(1, None, None), || 0.0), Ok(()));
        // Refill stops at the capacity: after an hour, 100 and not 101.
        assert_eq!(a.admit(3_600_000_000, &request(101, None, None), || 0.0), Err(Rejection::TokenBucket));
        assert_eq!(a.admit(3_600_000_000, &request(100, None, None), || 0.0), Ok(()));
    }

    #[test]
    fn a_request_more_expensive_than_the_capacity_is_never_admitted() {
        let mut a = bucket(10, 1_000_000);
        assert_eq!(a.admit(0, &request(11, None, None), || 0.0), Err(Rejection::TokenBucket));
        assert_eq!(a.admit(10_000_000, &request(11, None, None), || 0.0), Err(Rejection::TokenBucket));
    }

    #[test]
    fn shed_by_class_rejects_sheddable_classes_from_the_threshold_on() {
        let policy = AdmissionPolicy::ShedByClass { threshold: 1.0 };
        let mut a = Admission::new(AdmissionConfig { policy, tenant_budgets: vec![] }, 8);
        for class in SloClass::ALL {
            let r = request(10, Some(class), None);
            assert_eq!(a.admit(0, &r, || 0.999), Ok(()), "{class} below the threshold");
            let at = a.admit(0, &r, || 1.0);
            if class.is_sheddable() {
                assert_eq!(at, Err(Rejection::Saturation), "{class}");
            } else {
                assert_eq!(at, Ok(()), "{class} is never shed");
            }
        }
        // No class given: standard, not sheddable.
        assert_eq!(a.admit(0, &request(10, None, None), || 9.0), Ok(()));
    }

    #[test]
    fn a_tenant_over_its_budget_loses_only_its_sheddable_requests() {
        // Share 0.25 of 8 sequences: 2; rejected while more than 2 are in flight.
        let config = AdmissionConfig { policy: AdmissionPolicy::Always, tenant_budgets: vec![("a".into(), 0.25)] };
        let mut a = Admission::new(config, 8);
        let batch = request(10, Some(SloClass::Batch), Some("a"));
        for _ in 0..3 {
            assert_eq!(a.admit(0, &batch, || 0.0), Ok(()));
            a.on_enter(&batch);
        }
        assert_eq!(a.admit(0, &batch, || 0.0), Err(Rejection::TenantBudget));
        assert_eq!(a.admit(0, &request(10, Some(SloClass::Critical), Some("a")), || 0.0), Ok(()));
        assert_eq!(a.admit(0, &request(10, Some(SloClass::Batch), Some("b")), || 0.0), Ok(()));
        a.on_leave(&batch);
        assert_eq!(a.admit(0, &batch, || 0.0), Ok(()));
    }

    #[test]
    fn the_cost_is_the_prompt_of_the_llm_roots_or_the_first_llm_node() {
        let mut r = request(30, None, None);
        r.sub_requests.push(r.sub_requests[0].clone());
        r.initial = vec![0, 1];
        assert_eq!(prompt_cost(&r), 60);
        r.sub_requests[0].kind = NodeKind::ToolCall { duration: 1.0 };
        r.initial = vec![0];
        r.sub_requests[0].next = vec![1];
        assert_eq!(prompt_cost(&r), 30);
    }
}

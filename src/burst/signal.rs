//! Which work requests ask for a completion, and the per-QP send window that follows from it.
//!
//! Why this matters: an RC send queue frees an entry only when a *signaled* completion covering it
//! is polled (completions are in order, so one CQE retires every WR up to it). Signaling every WR
//! costs a CQE each; signaling too few can leave the window full of unsignaled WRs, and the
//! engine then waits forever for a completion nobody asked for. The rule (docs/architecture.md,
//! "ib_write_bw semantics"; 1 and 3 are perftest's) is to signal a WR when
//! 1. it is every `cq_mod`-th WR of its QP (`index % cq_mod == cq_mod − 1`, as perftest), or
//! 2. posting it leaves room for fewer than `post_list` more WRs (the window is about to fill), or
//! 3. it is the last WR of the burst.
//!
//! Rule 2 is what makes the window always drain: whenever the engine cannot post a chain of up
//! to `post_list` WRs, the most recently posted WR was signaled when posted (the room has only
//! grown since) and is still outstanding, so a completion is on its way. In duration mode the
//! last WR is only known when the clock runs out; if the last posted WR was not signaled,
//! [`SendWindow::drain_needed`] says so and the engine posts one more, signaled, WR — there is
//! always room for it, because an unsignaled post left room for at least `post_list` WRs.

use std::collections::VecDeque;

/// Highest WR index per QP that [`wr_id`] can encode (2^48 − 1): at 10^9 messages per second
/// that is more than three days of one burst; [`super::plan::BurstPlan`] stays far below it.
pub const MAX_WR_INDEX: u64 = (1 << 48) - 1;

/// Packs a QP index and a per-QP WR index into an `ibv_send_wr.wr_id` (QP in the top 16 bits,
/// like perftest's `(qp_index << 32) | wr_index` but with room for longer bursts).
pub fn wr_id(qp: u16, index: u64) -> u64 {
    (u64::from(qp) << 48) | (index & MAX_WR_INDEX)
}

/// Inverse of [`wr_id`]: `(qp, index)`.
pub fn split_wr_id(id: u64) -> (u16, u64) {
    ((id >> 48) as u16, id & MAX_WR_INDEX)
}

/// Why a signaling policy was refused or a window operation was invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error(
        "invalid signaling policy: tx_depth {tx_depth}, cq_mod {cq_mod}, post_list {post_list} \
         (need tx_depth >= 1, 1 <= cq_mod <= tx_depth, 1 <= post_list <= tx_depth)"
    )]
    InvalidPolicy {
        tx_depth: u32,
        cq_mod: u32,
        post_list: u32,
    },
    #[error("send window full: {outstanding} of {tx_depth} WRs outstanding")]
    Full { outstanding: u32, tx_depth: u32 },
    #[error(
        "WR {index} must be signaled: it leaves room for fewer than post_list WRs, and unsignaled \
         it could fill the window with no completion requested"
    )]
    MustSignal { index: u64 },
    #[error("too many WRs on one QP (index {index} > {MAX_WR_INDEX})")]
    IndexOverflow { index: u64 },
    #[error(
        "completion for WR {wr_index} was not expected (next signaled WR outstanding: \
         {expected:?}); completions on one RC QP arrive in order and only for signaled WRs"
    )]
    UnexpectedCompletion {
        wr_index: u64,
        expected: Option<u64>,
    },
}

/// The signaling rule for one QP; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SignalPolicy {
    tx_depth: u32,
    cq_mod: u32,
    post_list: u32,
}

impl SignalPolicy {
    /// Checks `1 <= cq_mod <= tx_depth` and `1 <= post_list <= tx_depth`.
    pub fn new(tx_depth: u32, cq_mod: u32, post_list: u32) -> Result<Self, WindowError> {
        if tx_depth == 0
            || !(1..=tx_depth).contains(&cq_mod)
            || !(1..=tx_depth).contains(&post_list)
        {
            return Err(WindowError::InvalidPolicy {
                tx_depth,
                cq_mod,
                post_list,
            });
        }
        Ok(Self {
            tx_depth,
            cq_mod,
            post_list,
        })
    }

    pub fn tx_depth(&self) -> u32 {
        self.tx_depth
    }

    pub fn cq_mod(&self) -> u32 {
        self.cq_mod
    }

    pub fn post_list(&self) -> u32 {
        self.post_list
    }

    /// Whether WR `index` (0-based, per QP) must be signaled, given the WRs outstanding before
    /// it is posted and whether it is the last WR of the burst.
    pub fn should_signal(&self, index: u64, outstanding_before: u32, is_last: bool) -> bool {
        is_last || self.every_cq_mod(index) || self.fills_window(outstanding_before)
    }

    fn every_cq_mod(&self, index: u64) -> bool {
        index % u64::from(self.cq_mod) == u64::from(self.cq_mod) - 1
    }

    /// Posting one more WR leaves room for fewer than `post_list` WRs.
    fn fills_window(&self, outstanding_before: u32) -> bool {
        let room_after = self
            .tx_depth
            .saturating_sub(outstanding_before.saturating_add(1));
        room_after < self.post_list
    }
}

/// A WR as recorded by [`SendWindow::post`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedWr {
    /// Per-QP index, 0-based.
    pub index: u64,
    /// Whether to set `IBV_SEND_SIGNALED`.
    pub signaled: bool,
}

/// The send window of one QP: what is posted, what is known complete, which completions are
/// still to come. Pure bookkeeping; the engine does the verbs calls.
///
/// Memory is bounded by tx_depth (the signaled WRs that can be outstanding at once).
#[derive(Debug, Clone)]
pub struct SendWindow {
    policy: SignalPolicy,
    posted: u64,
    /// WRs retired by signaled completions (every WR with index < `completed`).
    completed: u64,
    /// Indexes of signaled WRs not yet completed, ascending.
    signaled_outstanding: VecDeque<u64>,
    /// Index + 1 of the most recent signaled WR (0 if none yet).
    last_signaled_end: u64,
}

impl SendWindow {
    pub fn new(policy: SignalPolicy) -> Self {
        Self {
            policy,
            posted: 0,
            completed: 0,
            signaled_outstanding: VecDeque::new(),
            last_signaled_end: 0,
        }
    }

    pub fn policy(&self) -> &SignalPolicy {
        &self.policy
    }

    /// WRs posted so far.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// WRs known complete (retired by a signaled completion).
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// WRs posted but not known complete; at most tx_depth.
    pub fn outstanding(&self) -> u32 {
        // Never above tx_depth (a u32) by construction.
        u32::try_from(self.posted - self.completed).unwrap_or(u32::MAX)
    }

    /// Free entries in the send queue.
    pub fn room(&self) -> u32 {
        self.policy.tx_depth.saturating_sub(self.outstanding())
    }

    /// WRs posted after the most recent signaled one: no completion will ever cover them unless
    /// a later WR is signaled.
    pub fn unsignaled_since_last_signal(&self) -> u64 {
        self.posted - self.last_signaled_end
    }

    /// Signaled completions still to come.
    pub fn signaled_outstanding(&self) -> usize {
        self.signaled_outstanding.len()
    }

    /// Whether `n` more WRs fit now.
    pub fn can_post(&self, n: u32) -> bool {
        n <= self.room()
    }

    /// Whether the next WR must be signaled (`is_last`: it ends the burst on this QP).
    pub fn next_needs_signal(&self, is_last: bool) -> bool {
        self.policy
            .should_signal(self.posted, self.outstanding(), is_last)
    }

    /// Records the next WR, deciding its signaling by the policy. Use this for every WR of a
    /// chain after checking [`SendWindow::can_post`] for the whole chain.
    pub fn post(&mut self, is_last: bool) -> Result<PostedWr, WindowError> {
        let signaled = self.next_needs_signal(is_last);
        let index = self.on_post(signaled)?;
        Ok(PostedWr { index, signaled })
    }

    /// Records a WR whose signaling the caller chose (e.g. extra signals). Refuses a post into a
    /// full window and an unsignaled WR where the window rule requires a signal; the cq_mod and
    /// last-WR rules are the caller's business here. Returns the WR's index.
    pub fn on_post(&mut self, signaled: bool) -> Result<u64, WindowError> {
        let index = self.posted;
        if index > MAX_WR_INDEX {
            return Err(WindowError::IndexOverflow { index });
        }
        let outstanding = self.outstanding();
        if outstanding >= self.policy.tx_depth {
            return Err(WindowError::Full {
                outstanding,
                tx_depth: self.policy.tx_depth,
            });
        }
        if !signaled && self.policy.fills_window(outstanding) {
            return Err(WindowError::MustSignal { index });
        }
        self.posted += 1;
        if signaled {
            self.signaled_outstanding.push_back(index);
            self.last_signaled_end = index + 1;
        }
        Ok(index)
    }

    /// Records a successful completion of signaled WR `wr_index`; it retires every WR up to it.
    /// Returns how many WRs it covered. An out-of-order or unsignaled index is an error: on RC
    /// that means a provider bug (rxe's extended-CQ poller with rdma-core < 55 produced fake
    /// completions with wrong wr_ids: lab/README.md), and must not be counted as data.
    pub fn on_completion(&mut self, wr_index: u64) -> Result<u64, WindowError> {
        let expected = self.signaled_outstanding.front().copied();
        if expected != Some(wr_index) {
            return Err(WindowError::UnexpectedCompletion { wr_index, expected });
        }
        self.signaled_outstanding.pop_front();
        let covered = wr_index + 1 - self.completed;
        self.completed = wr_index + 1;
        Ok(covered)
    }

    /// In duration mode, after the clock ran out: the last posted WR was unsignaled, so one more
    /// signaled WR must be posted for the window to drain. [`SendWindow::can_post`]`(1)` is then
    /// always true.
    pub fn drain_needed(&self) -> bool {
        self.unsignaled_since_last_signal() > 0
    }

    /// Everything posted is known complete.
    pub fn is_drained(&self) -> bool {
        self.posted == self.completed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn window(tx_depth: u32, cq_mod: u32, post_list: u32) -> SendWindow {
        SendWindow::new(SignalPolicy::new(tx_depth, cq_mod, post_list).unwrap())
    }

    #[test]
    fn policy_validation() {
        assert!(SignalPolicy::new(0, 1, 1).is_err());
        assert!(SignalPolicy::new(128, 0, 1).is_err());
        assert!(SignalPolicy::new(128, 129, 1).is_err());
        assert!(SignalPolicy::new(128, 1, 0).is_err());
        assert!(SignalPolicy::new(128, 1, 129).is_err());
        assert!(SignalPolicy::new(128, 128, 128).is_ok());
        let msg = SignalPolicy::new(128, 0, 1).unwrap_err().to_string();
        assert!(msg.contains("cq_mod 0"), "{msg}");
    }

    #[test]
    fn perftest_default_signals_every_wr_for_large_messages() {
        let mut w = window(128, 1, 1);
        for i in 0..10 {
            assert_eq!(
                w.post(false).unwrap(),
                PostedWr {
                    index: i,
                    signaled: true
                }
            );
        }
    }

    #[test]
    fn cq_mod_and_window_fill_and_last() {
        // tx_depth 8, cq_mod 100 (capped by the plan, but the window rule must cope anyway).
        let mut w = window(8, 8, 1);
        let flags: Vec<bool> = (0..8).map(|_| w.post(false).unwrap().signaled).collect();
        assert_eq!(
            flags,
            [false, false, false, false, false, false, false, true]
        );
        assert!(!w.can_post(1));
        assert_eq!(
            w.on_post(true),
            Err(WindowError::Full {
                outstanding: 8,
                tx_depth: 8
            })
        );
        assert_eq!(w.on_completion(7), Ok(8));
        assert!(w.is_drained());

        let mut w = window(128, 4, 1);
        let flags: Vec<bool> = (0..6).map(|i| w.post(i == 5).unwrap().signaled).collect();
        assert_eq!(flags, [false, false, false, true, false, true]);
        assert_eq!(w.on_completion(3), Ok(4));
        assert_eq!(w.on_completion(5), Ok(2));
        assert!(w.is_drained());
    }

    #[test]
    fn window_rule_respects_post_list() {
        // tx_depth 10, post_list 4, cq_mod 10: the WR that leaves room < 4 is signaled.
        let mut w = window(10, 10, 4);
        let flags: Vec<bool> = (0..8).map(|_| w.post(false).unwrap().signaled).collect();
        assert_eq!(
            flags,
            [false, false, false, false, false, false, true, true]
        );
        assert!(!w.can_post(4));
        assert_eq!(w.signaled_outstanding(), 2);
    }

    #[test]
    fn unsignaled_where_window_requires_a_signal_is_refused() {
        let mut w = window(2, 2, 1);
        assert_eq!(w.on_post(false), Ok(0));
        assert_eq!(w.on_post(false), Err(WindowError::MustSignal { index: 1 }));
        assert_eq!(w.on_post(true), Ok(1));
    }

    #[test]
    fn unexpected_completions_are_errors() {
        let mut w = window(16, 4, 1);
        for _ in 0..8 {
            w.post(false).unwrap();
        }
        assert!(matches!(
            w.on_completion(2),
            Err(WindowError::UnexpectedCompletion {
                wr_index: 2,
                expected: Some(3)
            })
        ));
        assert!(w.on_completion(7).is_err(), "out of order");
        assert_eq!(w.on_completion(3), Ok(4));
        assert_eq!(w.on_completion(7), Ok(4));
        assert!(w.on_completion(7).is_err(), "duplicate");
        assert!(w.on_completion(u64::MAX).is_err());
    }

    #[test]
    fn duration_mode_drain() {
        let mut w = window(128, 100, 1);
        for _ in 0..10 {
            w.post(false).unwrap();
        }
        assert!(w.drain_needed());
        assert!(w.can_post(1));
        let last = w.post(true).unwrap();
        assert!(last.signaled);
        assert!(!w.drain_needed());
        assert_eq!(w.on_completion(last.index), Ok(11));
        assert!(w.is_drained());
    }

    #[test]
    fn wr_id_round_trip() {
        assert_eq!(split_wr_id(wr_id(3, 12345)), (3, 12345));
        assert_eq!(
            split_wr_id(wr_id(u16::MAX, MAX_WR_INDEX)),
            (u16::MAX, MAX_WR_INDEX)
        );
        assert_eq!(wr_id(0, 5), 5);
    }

    /// Drives a window like an engine would: post chains of up to post_list WRs when they fit
    /// (random choice between posting and polling), and otherwise deliver the oldest pending
    /// signaled completion — only signaled WRs ever complete. If the engine can neither post nor
    /// receive a completion, it is deadlocked. `stop_after` simulates duration mode: the last WR
    /// is unknown and the clock runs out after that many posts.
    fn drive(
        tx_depth: u32,
        cq_mod: u32,
        post_list: u32,
        total: u64,
        stop_after: Option<u64>,
        choices: &[bool],
    ) -> Result<SendWindow, String> {
        let mut w = window(tx_depth, cq_mod, post_list);
        let mut pending: VecDeque<u64> = VecDeque::new();
        let mut choice = choices.iter().copied().cycle();
        let target = stop_after.map_or(total, |s| s.min(total));
        loop {
            let remaining = target.saturating_sub(w.posted());
            let chain = u64::from(post_list).min(remaining) as u32;
            let want_post = chain > 0 && w.can_post(chain);
            if want_post && (pending.is_empty() || choice.next().unwrap_or(true)) {
                for _ in 0..chain {
                    let is_last = stop_after.is_none() && w.posted() + 1 == total;
                    let wr = w.post(is_last).map_err(|e| e.to_string())?;
                    if wr.signaled {
                        pending.push_back(wr.index);
                    }
                    if w.outstanding() > tx_depth {
                        return Err("window exceeded tx_depth".into());
                    }
                }
                continue;
            }
            if let Some(idx) = pending.pop_front() {
                w.on_completion(idx).map_err(|e| e.to_string())?;
                continue;
            }
            if remaining > 0 {
                return Err(format!(
                    "deadlock: posted {}, completed {}, outstanding {}, cannot post {chain}",
                    w.posted(),
                    w.completed(),
                    w.outstanding()
                ));
            }
            // Nothing left to post and nothing pending.
            if w.drain_needed() {
                if stop_after.is_none() {
                    return Err("last WR was not signaled".into());
                }
                if !w.can_post(1) {
                    return Err("no room for the drain WR".into());
                }
                let wr = w.post(true).map_err(|e| e.to_string())?;
                pending.push_back(wr.index);
                continue;
            }
            return Ok(w);
        }
    }

    proptest! {
        #[test]
        fn window_bounded_and_always_drains(
            (tx_depth, cq_mod, post_list) in (1u32..300).prop_flat_map(|d| (Just(d), 1..=d, 1..=d)),
            total in 1u64..3000,
            choices in proptest::collection::vec(any::<bool>(), 1..64),
        ) {
            let w = drive(tx_depth, cq_mod, post_list, total, None, &choices)
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(w.posted(), total);
            prop_assert_eq!(w.completed(), total);
            prop_assert!(w.is_drained());
        }

        #[test]
        fn duration_mode_always_drains(
            (tx_depth, cq_mod, post_list) in (1u32..300).prop_flat_map(|d| (Just(d), 1..=d, 1..=d)),
            stop in 1u64..3000,
            choices in proptest::collection::vec(any::<bool>(), 1..64),
        ) {
            let w = drive(tx_depth, cq_mod, post_list, u64::MAX, Some(stop), &choices)
                .map_err(TestCaseError::fail)?;
            // The drain WR adds at most one.
            prop_assert!(w.posted() == stop || w.posted() == stop + 1);
            prop_assert!(w.is_drained());
        }

        #[test]
        fn signals_at_least_every_cq_mod(
            (tx_depth, cq_mod) in (1u32..200).prop_flat_map(|d| (Just(d), 1..=d)),
            n in 1u64..2000,
        ) {
            // Completing every signaled WR at once keeps the window empty: then only cq_mod and
            // last decide, exactly perftest's pattern.
            let mut w = window(tx_depth, cq_mod, 1);
            for i in 0..n {
                let wr = w.post(i + 1 == n).unwrap();
                let expect = i + 1 == n
                    || i % u64::from(cq_mod) == u64::from(cq_mod) - 1
                    || w.outstanding() == tx_depth;
                prop_assert_eq!(wr.signaled, expect, "i {}", i);
                if wr.signaled {
                    w.on_completion(wr.index).unwrap();
                }
            }
        }
    }
}

//! When the etcd source may log in, and with which password: a pure state
//! machine fed the time, no IO. etcd hashes every login with bcrypt, a few
//! dozen milliseconds of a core each, and logs two warnings per refusal: a
//! sidecar that retried a wrong password at its sampling pace kept a core
//! of every member busy. So:
//!
//! - **A refused password waits** before it is tried again: 1 s after its
//!   first refusal, doubling to [`MAX_BACKOFF`], each wait shortened by up
//!   to a quarter at random (the members' sidecars, which all saw the same
//!   Secret, drift apart), never below [`FIRST_BACKOFF`].
//! - **No two refused logins less than [`FIRST_BACKOFF`] apart**, whatever
//!   the password file does: a new password is tried at once after a
//!   change (its own backoff starts afresh), but a file rewritten ten
//!   times a second costs etcd at most one refused login a second.
//! - **The password etcd last accepted is the fallback**: a login tries the
//!   newest password first, then the accepted one if it differs. A Secret
//!   updated before etcd's password therefore costs no outage: the session
//!   that works is kept, and when it must log in again, the old password
//!   still serves while etcd has it.
//! - **A login etcd did not answer** (unreachable, timed out) is not a
//!   refusal: it waits only the connection's retry period.
//! - **At most [`BURST`] logins at once, then one a [`FIRST_BACKOFF`]**,
//!   accepted or not (a token bucket): a few auth changes in a row (a user
//!   added, then granted a role: each refuses every older token) are
//!   followed at once, and an etcd that refuses every new token at once
//!   costs one login a second.
//!
//! Passwords are named by their generation (the password file's reload
//! count, [`crate::sources::etcd_auth::Current::generation`]).

use std::time::{Duration, Instant};

/// The wait after a password's first refusal, and the least time between
/// any two refused logins. A call budget (ARCHITECTURE.md).
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait after a password's refusals. A call budget.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How many logins may follow each other at once; the bucket refills by
/// one every [`FIRST_BACKOFF`]. A call budget.
pub const BURST: u32 = 3;

/// Which password: its generation.
pub type Generation = u64;

/// The logins' memory.
#[derive(Debug, Default)]
pub struct Logins {
    /// The password etcd last accepted.
    accepted: Option<Generation>,
    /// The refusals of the passwords still tried (the newest, the
    /// accepted one): at most two.
    refused: Vec<Refused>,
    /// No login before this instant (a refusal's spacing, an unanswered
    /// login's retry).
    not_before: Option<Instant>,
    /// The logins spent from the bucket as of `spent_at` (the bucket holds
    /// [`BURST`] less this).
    spent: f64,
    spent_at: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Refused {
    generation: Generation,
    /// Refusals in a row.
    count: u32,
    /// Not tried again before this.
    until: Instant,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Try these passwords in this order; stop at the first accepted.
    Try(Vec<Generation>),
    /// No login until `until`; the newest password was refused `refusals`
    /// times in a row (0: only the spacing or a retry holds it).
    Wait { until: Instant, refusals: u32 },
}

impl Logins {
    /// What to try at `now`, `newest` being the password file's current
    /// generation.
    pub fn plan(&mut self, now: Instant, newest: Generation) -> Plan {
        let keep = [Some(newest), self.accepted];
        self.refused.retain(|r| keep.contains(&Some(r.generation)));
        let refusals = self.refusals_of(newest);
        let mut order = vec![newest];
        if let Some(a) = self.accepted.filter(|a| *a != newest) {
            order.push(a);
        }
        let waiting = |g: &Generation| self.refused_until(*g).filter(|u| *u > now);
        // Every candidate waiting: until the first is free.
        let all_wait = order.iter().map(waiting).collect::<Option<Vec<_>>>();
        let free_at = all_wait.and_then(|w| w.into_iter().min());
        order.retain(|g| waiting(g).is_none());
        let bucket = self.bucket_free_at(now);
        match free_at
            .max(self.not_before.filter(|t| *t > now))
            .max(bucket)
        {
            Some(until) => Plan::Wait { until, refusals },
            None => Plan::Try(order),
        }
    }

    /// etcd accepted `generation` at `now`: it is the fallback from now on.
    pub fn accepted(&mut self, now: Instant, generation: Generation) {
        self.spend(now);
        self.accepted = Some(generation);
        self.refused.retain(|r| r.generation != generation);
        self.not_before = None;
    }

    /// The bucket's logins spent as of `now`, refilled since.
    fn spent_at(&self, now: Instant) -> f64 {
        let refilled = self.spent_at.map_or(0.0, |at| {
            now.saturating_duration_since(at).as_secs_f64() / FIRST_BACKOFF.as_secs_f64()
        });
        (self.spent - refilled).max(0.0)
    }

    fn spend(&mut self, now: Instant) {
        self.spent = self.spent_at(now) + 1.0;
        self.spent_at = Some(now);
    }

    /// When the bucket holds a login again, if it is empty at `now`.
    fn bucket_free_at(&self, now: Instant) -> Option<Instant> {
        let over = self.spent_at(now) - (f64::from(BURST) - 1.0);
        (over > 0.0).then(|| now + FIRST_BACKOFF.mul_f64(over))
    }

    /// etcd refused `generation` at `now`; `jitter` in `[0, 1)` shortens the
    /// wait by up to a quarter.
    pub fn refused(&mut self, now: Instant, generation: Generation, jitter: f64) {
        self.spend(now);
        let count = self.refusals_of(generation).saturating_add(1);
        let until = now + backoff(count, jitter);
        self.refused.retain(|r| r.generation != generation);
        self.refused.push(Refused {
            generation,
            count,
            until,
        });
        if self.accepted == Some(generation) {
            self.accepted = None;
        }
        self.not_before = Some(now + FIRST_BACKOFF);
    }

    /// A login at `now` got no answer (etcd unreachable, or too slow): not
    /// tried again before `retry` has passed.
    pub fn unanswered(&mut self, now: Instant, retry: Duration) {
        self.spend(now);
        let t = now + retry;
        self.not_before = Some(self.not_before.map_or(t, |n| n.max(t)));
    }

    /// How long until a login of `newest` may be tried (zero: now).
    pub fn wait(&mut self, now: Instant, newest: Generation) -> Duration {
        match self.plan(now, newest) {
            Plan::Try(_) => Duration::ZERO,
            Plan::Wait { until, .. } => until - now,
        }
    }

    /// How many times in a row etcd refused `generation`.
    pub fn refusals_of(&self, generation: Generation) -> u32 {
        self.refused
            .iter()
            .find(|r| r.generation == generation)
            .map_or(0, |r| r.count)
    }

    fn refused_until(&self, generation: Generation) -> Option<Instant> {
        self.refused
            .iter()
            .find(|r| r.generation == generation)
            .map(|r| r.until)
    }
}

/// The wait after `count` refusals in a row: [`FIRST_BACKOFF`] doubled per
/// refusal up to [`MAX_BACKOFF`], less up to a quarter by `jitter`, never
/// below [`FIRST_BACKOFF`].
pub fn backoff(count: u32, jitter: f64) -> Duration {
    let doublings = count.saturating_sub(1).min(16);
    let full = FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    full.mul_f64(1.0 - jitter / 4.0).max(FIRST_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + MS * ms as u32
    }

    #[test]
    fn the_backoff_doubles_from_one_second_to_its_cap_and_jitter_only_shortens_it() {
        let secs: Vec<u64> = (1..=7).map(|n| backoff(n, 0.0).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff(u32::MAX, 0.0), MAX_BACKOFF);
        assert_eq!(backoff(5, 0.999_999).as_millis(), 12_000);
        assert_eq!(backoff(1, 0.9), FIRST_BACKOFF, "never below the first");
        assert_eq!(backoff(3, f64::NAN), backoff(3, 0.0));
        assert_eq!(backoff(3, 7.0), backoff(3, 1.0));
    }

    /// A wrong password, tried whenever the plan allows for 30 s on virtual
    /// time: etcd sees few refusals, growing further apart.
    #[test]
    fn a_wrong_password_costs_etcd_at_most_six_logins_in_thirty_seconds() {
        for jitter in [0.0, 0.5, 0.999] {
            let t0 = Instant::now();
            let mut l = Logins::default();
            let mut tries = Vec::new();
            for ms in (0..30_000).step_by(10) {
                let now = at(t0, ms);
                if let Plan::Try(order) = l.plan(now, 1) {
                    assert_eq!(order, [1]);
                    tries.push(ms);
                    l.refused(now, 1, jitter);
                }
            }
            assert!(tries.len() <= 6, "jitter {jitter}: {tries:?}");
            assert!(tries.len() >= 5, "jitter {jitter}: {tries:?}");
            let gaps: Vec<u64> = tries.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(gaps.windows(2).all(|g| g[1] > g[0]), "{gaps:?}");
        }
    }

    #[test]
    fn a_new_password_is_tried_at_once_but_never_sooner_than_a_second_after_a_refusal() {
        let t0 = Instant::now();
        let mut l = Logins::default();
        for n in 0..5 {
            let now = at(t0, n * 40_000);
            assert_eq!(l.plan(now, 1), Plan::Try(vec![1]));
            l.refused(now, 1, 0.0);
        }
        let last = at(t0, 160_000);
        assert_eq!(
            l.plan(at(t0, 160_500), 1),
            Plan::Wait {
                until: last + Duration::from_secs(16),
                refusals: 5
            }
        );
        // The file changed: generation 2, tried once the spacing is over.
        assert_eq!(
            l.plan(at(t0, 160_500), 2),
            Plan::Wait {
                until: last + FIRST_BACKOFF,
                refusals: 0
            }
        );
        assert_eq!(l.plan(at(t0, 161_000), 2), Plan::Try(vec![2]));
        // A file rewritten every 100 ms: at most one refusal a second.
        let mut refusals = 0;
        for (i, ms) in (161_000..171_000).step_by(100).enumerate() {
            let now = at(t0, ms);
            let g = 3 + i as u64;
            if let Plan::Try(order) = l.plan(now, g) {
                assert_eq!(order, [g]);
                l.refused(now, g, 0.0);
                refusals += 1;
            }
        }
        assert_eq!(refusals, 10);
    }

    /// The Secret was updated before etcd's password: the new one is tried
    /// first and refused, the accepted one still serves.
    #[test]
    fn the_accepted_password_is_the_fallback_while_etcd_still_has_it() {
        let t0 = Instant::now();
        let mut l = Logins::default();
        assert_eq!(l.plan(t0, 1), Plan::Try(vec![1]));
        l.accepted(t0, 1);
        assert_eq!(l.plan(at(t0, 1_000), 2), Plan::Try(vec![2, 1]));
        l.refused(at(t0, 1_000), 2, 0.0);
        l.accepted(at(t0, 1_000), 1);
        assert_eq!(l.plan(at(t0, 3_000), 2), Plan::Try(vec![2, 1]));
        l.refused(at(t0, 3_000), 2, 0.0);
        l.accepted(at(t0, 3_000), 1);
        // The new one waits its backoff (2 s now): the accepted one alone.
        assert_eq!(l.plan(at(t0, 4_000), 2), Plan::Try(vec![1]));
        l.accepted(at(t0, 4_000), 1);
        assert_eq!(l.plan(at(t0, 6_000), 2), Plan::Try(vec![2, 1]));
        // etcd's password changed: the new one is accepted, the old one
        // forgotten.
        l.accepted(at(t0, 6_000), 2);
        assert_eq!(l.plan(at(t0, 8_000), 2), Plan::Try(vec![2]));
    }

    /// A few auth changes in a row are followed at once; a token refused
    /// again after every login costs etcd one login a second.
    #[test]
    fn accepted_logins_come_in_a_burst_of_three_then_one_a_second() {
        let t0 = Instant::now();
        let mut l = Logins::default();
        for ms in [0, 10, 20] {
            assert_eq!(l.plan(at(t0, ms), 1), Plan::Try(vec![1]), "at {ms} ms");
            l.accepted(at(t0, ms), 1);
        }
        assert_eq!(
            l.plan(at(t0, 30), 1),
            Plan::Wait {
                until: at(t0, 1_000),
                refusals: 0
            }
        );
        let mut logins = 0;
        for ms in (1_000..11_000).step_by(10) {
            if let Plan::Try(_) = l.plan(at(t0, ms), 1) {
                l.accepted(at(t0, ms), 1);
                logins += 1;
            }
        }
        assert_eq!(logins, 10);
    }

    /// etcd's password changed first: both are refused, and the accepted one
    /// is not the fallback any more.
    #[test]
    fn a_refused_fallback_is_forgotten_and_both_wait() {
        let t0 = Instant::now();
        let mut l = Logins::default();
        l.accepted(t0, 1);
        let t0 = at(t0, 1_000);
        assert_eq!(l.plan(t0, 1), Plan::Try(vec![1]));
        l.refused(t0, 1, 0.0);
        assert_eq!(
            l.plan(at(t0, 999), 1),
            Plan::Wait {
                until: at(t0, 1_000),
                refusals: 1
            }
        );
        // The file follows: the new password once the spacing is over.
        assert_eq!(l.plan(at(t0, 1_000), 2), Plan::Try(vec![2]));
    }

    #[test]
    fn an_unanswered_login_waits_only_the_retry_and_is_no_refusal() {
        let t0 = Instant::now();
        let mut l = Logins::default();
        l.unanswered(t0, 100 * MS);
        assert_eq!(
            l.plan(at(t0, 50), 1),
            Plan::Wait {
                until: at(t0, 100),
                refusals: 0
            }
        );
        assert_eq!(l.wait(at(t0, 50), 1), 50 * MS);
        assert_eq!(l.plan(at(t0, 100), 1), Plan::Try(vec![1]));
        assert_eq!(l.wait(at(t0, 100), 1), Duration::ZERO);
    }
}

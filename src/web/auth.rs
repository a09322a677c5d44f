//! Basic authentication against `basic_auth_users` (bcrypt hashes), built to
//! degrade gracefully under a flood of wrong passwords:
//!
//! - **Known-good credentials first.** Successes live in a cache of their
//!   own ([`CACHE_SIZE`] entries), looked up before any queue: a scraper
//!   whose credentials were verified once is answered at once, however many
//!   bcrypts are waiting. Failures go to a separate bounded cache
//!   ([`FAILURE_CACHE_SIZE`]), so wrong passwords never evict a success.
//!   Both are keyed by a SHA-256 of (user, stored hash, presented password)
//!   — never the password itself — and emptied when `basic_auth_users`
//!   changes.
//! - **Bounded bcrypt work.** One bcrypt runs at a time, on the blocking
//!   pool (never on the server's one worker thread). At most
//!   [`MAX_PENDING_PER_CLIENT`] checks per source address and
//!   [`MAX_PENDING`] overall may wait for or run a bcrypt; a check beyond
//!   either is refused at once ([`AuthOutcome::Busy`], answered 429) instead
//!   of queueing, so a flood from one address cannot make another address's
//!   first login wait behind more than a bounded queue.
//! - **Timing does not tell which users exist.** An unknown user is checked
//!   against a dummy hash of the *highest* cost among the configured users,
//!   and a wrong password for a cheaper user is padded to the median time
//!   of the last checks at that cost (at most 10 s old; otherwise it runs
//!   one), so every failed check takes about as long as the costliest one
//!   (docs/BENCHMARKS.md, "Basic auth under a wrong-password flood").

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::config::WebConfig;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::sync::TolerantLock;

/// Most cached successes (exporter-toolkit keeps 100 results in all).
pub const CACHE_SIZE: usize = 100;
/// Most cached failures, in a cache of their own.
pub const FAILURE_CACHE_SIZE: usize = 100;
/// Most checks of one source address waiting for or running a bcrypt.
pub const MAX_PENDING_PER_CLIENT: usize = 2;
/// Most checks waiting for or running a bcrypt, over all addresses.
pub const MAX_PENDING: usize = 32;
/// The longest `Authorization` header decoded.
const MAX_HEADER: usize = 4096;

type Key = [u8; 32];

/// A first-in-first-out set of keys with a bound.
#[derive(Default)]
struct Fifo {
    keys: HashMap<Key, ()>,
    order: VecDeque<Key>,
}

impl Fifo {
    fn contains(&self, k: &Key) -> bool {
        self.keys.contains_key(k)
    }

    fn insert(&mut self, k: Key, bound: usize) {
        if self.keys.insert(k, ()).is_none() {
            self.order.push_back(k);
        }
        while self.order.len() > bound {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }
}

#[derive(Default)]
struct Caches {
    good: Fifo,
    bad: Fifo,
}

impl Caches {
    fn lookup(&self, k: &Key) -> Option<bool> {
        if self.good.contains(k) {
            Some(true)
        } else if self.bad.contains(k) {
            Some(false)
        } else {
            None
        }
    }
}

/// Checks at the highest configured cost kept for the padding target.
const TOP_SAMPLES: usize = 9;
/// How long those durations stay a good estimate (the load changes).
const TOP_FRESH: Duration = Duration::from_secs(10);

/// Recent durations of checks at the highest configured cost: a cheaper
/// user's failure is padded to their median, so one check slowed by a
/// burst of load does not set the padding for good.
#[derive(Debug, Default)]
struct TopCost {
    cost: u32,
    samples: VecDeque<Duration>,
    last: Option<Instant>,
}

impl TopCost {
    fn record(&mut self, cost: u32, took: Duration, now: Instant) {
        if cost != self.cost {
            self.samples.clear();
            self.cost = cost;
        }
        self.samples.push_back(took);
        while self.samples.len() > TOP_SAMPLES {
            self.samples.pop_front();
        }
        self.last = Some(now);
    }

    /// The median of the recent durations at `cost`, unless they are stale.
    fn target(&self, cost: u32, now: Instant) -> Option<Duration> {
        if self.cost != cost
            || self
                .last
                .is_none_or(|t| now.saturating_duration_since(t) >= TOP_FRESH)
        {
            return None;
        }
        let mut v: Vec<Duration> = self.samples.iter().copied().collect();
        v.sort();
        v.get(v.len() / 2).copied()
    }
}

/// What a check decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthOutcome {
    /// The credentials of a configured user.
    Ok,
    /// No, malformed or wrong credentials (401).
    Denied,
    /// Not checked: too many checks of this address, or in all, are waiting
    /// for a bcrypt (429).
    Busy,
}

/// The basic-auth checker of the main listener.
pub struct BasicAuth {
    caches: Mutex<Caches>,
    bcrypt: Semaphore,
    pending: AtomicUsize,
    per_client: Mutex<HashMap<Option<IpAddr>, usize>>,
    /// How long recent checks at the highest configured cost took: what
    /// a failed check at a lower cost is padded to.
    slowest: Mutex<TopCost>,
    /// The runtime's clock: how long checks take, how fresh that is.
    clock: Clock,
}

impl BasicAuth {
    pub fn new(clock: Clock) -> Self {
        BasicAuth {
            caches: Mutex::new(Caches::default()),
            bcrypt: Semaphore::new(1),
            pending: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
            slowest: Mutex::new(TopCost::default()),
            clock,
        }
    }
}

#[cfg(test)]
impl Default for BasicAuth {
    fn default() -> Self {
        BasicAuth::new(Clock::node())
    }
}

/// A hash no password matches, of bcrypt cost `cost`: an unknown user's
/// password is checked against it, so that it costs what the costliest
/// configured user's does. A hash of cost 4 made once, with the cost field
/// rewritten (bcrypt reads the cost from the string).
fn dummy_hash(cost: u32) -> String {
    static BASE: OnceLock<String> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        // Cannot fail at cost 4; an empty hash would only fail every check.
        bcrypt::hash("etcd-readiness-exporter: no such user", 4).unwrap_or_default()
    });
    // "$2b$04$...": the cost is the two digits after the second '$'.
    match base.get(..4) {
        Some(prefix) if base.len() > 7 => format!("{prefix}{cost:02}{}", &base[6..]),
        _ => base.clone(),
    }
}

/// The bcrypt cost of `hash` (configured hashes were checked at load).
fn cost_of(hash: &str) -> u32 {
    hash.parse::<bcrypt::HashParts>()
        .map(|p| p.get_cost())
        .unwrap_or(10)
}

/// The highest cost among `config`'s users (10 without users).
pub fn max_cost(config: &WebConfig) -> u32 {
    config
        .users
        .values()
        .map(|h| cost_of(h))
        .max()
        .unwrap_or(10)
}

/// User and password of a `Basic` `Authorization` header.
pub fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?.as_bytes();
    if v.len() > MAX_HEADER {
        return None;
    }
    let v = std::str::from_utf8(v).ok()?;
    let (scheme, b64) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (user, pass) = raw.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

fn key(user: &str, hash: &str, pass: &str) -> Key {
    let mut h = Sha256::new();
    for part in [user, hash, pass] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// A check's place in the bcrypt queue: released on every exit.
struct Pending<'a> {
    auth: &'a BasicAuth,
    client: Option<IpAddr>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.auth.pending.fetch_sub(1, Ordering::AcqRel);
        let mut m = self.auth.per_client.locked();
        if let Some(n) = m.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.client);
            }
        }
    }
}

impl BasicAuth {
    /// Forget every cached result (the users changed).
    pub fn clear(&self) {
        *self.caches.locked() = Caches::default();
        *self.slowest.locked() = TopCost::default();
    }

    /// Cached results held now: (successes, failures).
    pub fn cached(&self) -> (usize, usize) {
        let c = self.caches.locked();
        (c.good.len(), c.bad.len())
    }

    /// Checks waiting for or running a bcrypt now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    fn lookup(&self, k: &Key) -> Option<bool> {
        self.caches.locked().lookup(k)
    }

    /// Take a place in the bcrypt queue for `client`, or None when its
    /// share or the whole queue is full.
    fn admit(&self, client: Option<IpAddr>) -> Option<Pending<'_>> {
        let mut m = self.per_client.locked();
        let mine = m.get(&client).copied().unwrap_or(0);
        if mine >= MAX_PENDING_PER_CLIENT || self.pending.load(Ordering::Acquire) >= MAX_PENDING {
            return None;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        *m.entry(client).or_insert(0) += 1;
        Some(Pending { auth: self, client })
    }

    /// Whether `headers` carry the credentials of one of `config`'s users;
    /// `client` is the request's source address (None: unknown, one share).
    pub async fn check(
        &self,
        config: &WebConfig,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> AuthOutcome {
        let Some((user, pass)) = credentials(headers) else {
            return AuthOutcome::Denied;
        };
        let top = max_cost(config);
        let (hash, known) = match config.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (dummy_hash(top), false),
        };
        let verdict = |ok: bool| {
            if ok && known {
                AuthOutcome::Ok
            } else {
                AuthOutcome::Denied
            }
        };
        let k = key(&user, &hash, &pass);
        // The cache before any queue: a known-good credential never waits.
        if let Some(ok) = self.lookup(&k) {
            return verdict(ok);
        }
        let Some(_place) = self.admit(client) else {
            return AuthOutcome::Busy;
        };
        let started;
        let cost = cost_of(&hash);
        let ok = {
            // One bcrypt at a time: it is CPU-bound by design.
            let Ok(_permit) = self.bcrypt.acquire().await else {
                return AuthOutcome::Denied;
            };
            // A check waiting for the permit may find the answer cached now.
            if let Some(ok) = self.lookup(&k) {
                return verdict(ok);
            }
            started = self.clock.now();
            let verified = tokio::task::spawn_blocking(move || bcrypt::verify(pass, &hash))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(false);
            let ok = verified && known;
            let now = self.clock.now();
            let took = now.saturating_duration_since(started);
            if cost >= top {
                self.slowest.locked().record(top, took, now);
            }
            self.remember(k, ok);
            ok
        };
        if !ok && cost < top {
            self.pad_failure(started, top).await;
        }
        verdict(ok)
    }

    /// Cache a verified credential's result, good or bad.
    fn remember(&self, k: Key, ok: bool) {
        let mut c = self.caches.locked();
        if ok {
            c.good.insert(k, CACHE_SIZE);
        } else {
            c.bad.insert(k, FAILURE_CACHE_SIZE);
        }
    }

    /// Pad a cheaper user's failure, whose check began at `started`, to the
    /// time of a check at the `top` cost, outside the permit (sleeping costs
    /// no CPU).
    async fn pad_failure(&self, started: Instant, top: u32) {
        let pad = self.slowest.locked().target(top, self.clock.now());
        match pad {
            Some(took) => {
                tokio::time::sleep_until((started + took).into()).await;
            }
            None => {
                // No recent check at the top cost (none yet, or the
                // load may have changed): make one, so this failure
                // costs what an unknown user's does now.
                if let Ok(_permit) = self.bcrypt.acquire().await {
                    let dummy = dummy_hash(top);
                    let t = self.clock.now();
                    let _ = tokio::task::spawn_blocking(move || bcrypt::verify("", &dummy)).await;
                    let now = self.clock.now();
                    self.slowest
                        .locked()
                        .record(top, now.saturating_duration_since(t), now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::sync::Arc;

    fn basic(user: &str, pass: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {v}")).unwrap(),
        );
        h
    }

    fn config_with(users: &[(&str, &str, u32)]) -> WebConfig {
        let mut text = "basic_auth_users:\n".to_string();
        for (u, p, cost) in users {
            text.push_str(&format!("  {u}: '{}'\n", bcrypt::hash(p, *cost).unwrap()));
        }
        WebConfig::from_text(std::path::Path::new("w.yml"), &text, &|_, _| unreachable!()).unwrap()
    }

    fn config() -> WebConfig {
        config_with(&[("alice", "s3cret", 4)])
    }

    const LOCAL: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[tokio::test]
    async fn right_wrong_and_unknown_credentials_and_the_caches() {
        let c = config();
        let a = BasicAuth::default();
        assert_eq!(
            a.check(&c, &basic("alice", "s3cret"), LOCAL).await,
            AuthOutcome::Ok
        );
        assert_eq!(a.cached(), (1, 0));
        // Served from the cache the second time (nothing new cached).
        assert_eq!(
            a.check(&c, &basic("alice", "s3cret"), LOCAL).await,
            AuthOutcome::Ok
        );
        assert_eq!(a.cached(), (1, 0));
        assert_eq!(
            a.check(&c, &basic("alice", "wrong"), LOCAL).await,
            AuthOutcome::Denied
        );
        assert_eq!(
            a.check(&c, &basic("mallory", "s3cret"), LOCAL).await,
            AuthOutcome::Denied
        );
        assert_eq!(
            a.check(&c, &HeaderMap::new(), LOCAL).await,
            AuthOutcome::Denied
        );
        assert_eq!(a.cached(), (1, 2));
        a.clear();
        assert_eq!(a.cached(), (0, 0));
    }

    /// Regression: about 100 wrong passwords pushed the good entry out of the
    /// one FIFO cache that held successes and failures alike.
    #[tokio::test]
    async fn wrong_passwords_never_evict_a_cached_success() {
        let c = config();
        let a = BasicAuth::default();
        assert_eq!(
            a.check(&c, &basic("alice", "s3cret"), LOCAL).await,
            AuthOutcome::Ok
        );
        for i in 0..(FAILURE_CACHE_SIZE * 3) {
            let r = a
                .check(&c, &basic("alice", &format!("wrong{i}")), LOCAL)
                .await;
            assert_eq!(r, AuthOutcome::Denied);
        }
        assert_eq!(a.cached(), (1, FAILURE_CACHE_SIZE));
        // Still a cache hit: nothing is pending, and the permit is not even
        // free, yet the good credential is answered.
        let _held = a.bcrypt.acquire().await.unwrap();
        assert_eq!(
            a.check(&c, &basic("alice", "s3cret"), LOCAL).await,
            AuthOutcome::Ok
        );
    }

    /// Regression: a good credential queued behind every waiting bcrypt. Now
    /// one address may hold at most MAX_PENDING_PER_CLIENT places and the
    /// whole queue MAX_PENDING; beyond that a check is refused at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bcrypt_work_is_bounded_per_client_and_overall() {
        let c = Arc::new(config());
        let a = Arc::new(BasicAuth::default());
        // Hold the permit so every check that gets a place waits.
        let held = a.bcrypt.acquire().await.unwrap();
        let flood: Option<IpAddr> = Some("127.0.0.2".parse().unwrap());
        let mut waiting = Vec::new();
        for i in 0..MAX_PENDING_PER_CLIENT {
            let (a, c) = (a.clone(), c.clone());
            waiting.push(tokio::spawn(async move {
                a.check(&c, &basic("alice", &format!("w{i}")), flood).await
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.pending() < MAX_PENDING_PER_CLIENT {
            assert!(Instant::now() < deadline, "pending {}", a.pending());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The same address is refused at once; another address gets a place.
        assert_eq!(
            a.check(&c, &basic("alice", "w-extra"), flood).await,
            AuthOutcome::Busy
        );
        let other = {
            let (a, c) = (a.clone(), c.clone());
            tokio::spawn(async move { a.check(&c, &basic("alice", "s3cret"), LOCAL).await })
        };
        // It has its place before the rest of the queue is filled (else the
        // fill may take every place first and it is refused as busy).
        while a.pending() < MAX_PENDING_PER_CLIENT + 1 {
            assert!(Instant::now() < deadline, "pending {}", a.pending());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Fill the rest of the queue from many addresses.
        let mut fill = Vec::new();
        for i in 0..MAX_PENDING {
            let ip: Option<IpAddr> =
                Some(format!("10.0.{}.{}", i / 200, i % 200 + 1).parse().unwrap());
            let (a, c) = (a.clone(), c.clone());
            fill.push(tokio::spawn(async move {
                a.check(&c, &basic("alice", &format!("f{i}")), ip).await
            }));
        }
        while a.pending() < MAX_PENDING {
            assert!(Instant::now() < deadline, "pending {}", a.pending());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let fresh: Option<IpAddr> = Some("192.0.2.1".parse().unwrap());
        assert_eq!(
            a.check(&c, &basic("alice", "x"), fresh).await,
            AuthOutcome::Busy
        );
        drop(held);
        assert_eq!(other.await.unwrap(), AuthOutcome::Ok);
        let mut busy = 0;
        for t in waiting.into_iter().chain(fill) {
            match t.await.unwrap() {
                AuthOutcome::Denied => {}
                AuthOutcome::Busy => busy += 1,
                AuthOutcome::Ok => panic!("a wrong password passed"),
            }
        }
        assert!(busy <= MAX_PENDING, "{busy}");
        assert_eq!(a.pending(), 0, "every place released");
        assert!(a.per_client.lock().unwrap().is_empty());
    }

    #[test]
    fn the_dummy_hash_has_the_highest_configured_cost() {
        let c = config_with(&[("a", "x", 4), ("b", "y", 6), ("c", "z", 5)]);
        assert_eq!(max_cost(&c), 6);
        let d = dummy_hash(6);
        assert_eq!(cost_of(&d), 6, "{d}");
        assert_eq!(bcrypt::verify("", &d).ok(), Some(false));
        assert_eq!(cost_of(&dummy_hash(12)), 12);
    }

    /// Regression: an unknown user was checked against a fixed cost-10 hash,
    /// so a cost-5 user answered in 3 ms, a cost-12 one in 287 ms and an
    /// unknown one in 76 ms. Now an unknown user is checked at the highest
    /// configured cost, and a cheaper user's failure is padded to the
    /// median time of the last checks at that cost (what is asserted: the
    /// padding, not a speed; the figures are in docs/BENCHMARKS.md).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_password_for_a_cheap_user_costs_what_an_unknown_user_does() {
        let c = config_with(&[("cheap", "x", 4), ("dear", "y", 9)]);
        let a = BasicAuth::default();
        let t = Instant::now();
        assert_eq!(
            a.check(&c, &basic("nobody", "p1"), LOCAL).await,
            AuthOutcome::Denied
        );
        let unknown = t.elapsed();
        let top = a
            .slowest
            .lock()
            .unwrap()
            .target(9, Instant::now())
            .expect("an unknown user is checked at the top cost");
        assert!(unknown >= top);
        let t = Instant::now();
        assert_eq!(
            a.check(&c, &basic("cheap", "p2"), LOCAL).await,
            AuthOutcome::Denied
        );
        let cheap = t.elapsed();
        assert!(
            cheap >= top,
            "a cost-4 user's failure took {cheap:?}, less than the cost-9 check's {top:?}"
        );
        // Without a check at the top cost yet, a cheap failure makes one.
        let b = BasicAuth::default();
        assert_eq!(
            b.check(&c, &basic("cheap", "p3"), LOCAL).await,
            AuthOutcome::Denied
        );
        let made = b.slowest.lock().unwrap();
        assert_eq!((made.cost, made.samples.len()), (9, 1));
    }
}

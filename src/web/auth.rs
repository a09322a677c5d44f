//! Basic authentication against `basic_auth_users` (bcrypt hashes), as
//! exporter-toolkit does it: an unknown user is checked against a fixed
//! hash so that timing does not tell which users exist; bcrypt compares in
//! constant time; one bcrypt runs at a time, on the blocking pool (never on
//! the server's one worker thread); and results are cached so a scrape does
//! not pay a bcrypt per request. The cache is keyed by a SHA-256 of (user,
//! stored hash, presented password) — never the password itself — holds at
//! most [`CACHE_SIZE`] entries (oldest out first) and is emptied whenever
//! the configuration changes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

use axum::http::HeaderMap;
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::config::WebConfig;

/// Most cached results (exporter-toolkit keeps 100 too).
pub const CACHE_SIZE: usize = 100;
/// The longest `Authorization` header decoded.
const MAX_HEADER: usize = 4096;

type Key = [u8; 32];

#[derive(Default)]
struct Cache {
    results: HashMap<Key, bool>,
    order: VecDeque<Key>,
}

impl Cache {
    fn get(&self, k: &Key) -> Option<bool> {
        self.results.get(k).copied()
    }

    fn insert(&mut self, k: Key, ok: bool) {
        if self.results.insert(k, ok).is_none() {
            self.order.push_back(k);
        }
        while self.order.len() > CACHE_SIZE {
            if let Some(old) = self.order.pop_front() {
                self.results.remove(&old);
            }
        }
    }
}

/// The basic-auth checker of the main listener.
pub struct BasicAuth {
    cache: Mutex<Cache>,
    bcrypt: Semaphore,
}

impl Default for BasicAuth {
    fn default() -> Self {
        BasicAuth {
            cache: Mutex::new(Cache::default()),
            bcrypt: Semaphore::new(1),
        }
    }
}

/// The hash an unknown user's password is checked against: same cost as a
/// typical configured hash (10), made once.
fn unknown_user_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        // Cannot fail at cost 10; an empty hash would only fail every check.
        bcrypt::hash("etcd-readiness-exporter: no such user", 10).unwrap_or_default()
    })
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

impl BasicAuth {
    /// Forget every cached result (the configuration changed).
    pub fn clear(&self) {
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = Cache::default();
    }

    /// Cached results held now.
    pub fn cached(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .results
            .len()
    }

    fn lookup(&self, k: &Key) -> Option<bool> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(k)
    }

    /// Whether `headers` carry the credentials of one of `config`'s users.
    pub async fn check(&self, config: &WebConfig, headers: &HeaderMap) -> bool {
        let Some((user, pass)) = credentials(headers) else {
            return false;
        };
        let (hash, known) = match config.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (unknown_user_hash().to_string(), false),
        };
        let k = key(&user, &hash, &pass);
        if let Some(ok) = self.lookup(&k) {
            return ok && known;
        }
        // One bcrypt at a time: it is CPU-bound by design.
        let Ok(_permit) = self.bcrypt.acquire().await else {
            return false;
        };
        // A request waiting for the permit may find the answer cached now.
        if let Some(ok) = self.lookup(&k) {
            return ok && known;
        }
        let verified = tokio::task::spawn_blocking(move || bcrypt::verify(pass, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        let ok = verified && known;
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k, ok);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn basic(user: &str, pass: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {v}")).unwrap(),
        );
        h
    }

    fn config() -> WebConfig {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        WebConfig::from_text(
            std::path::Path::new("w.yml"),
            &format!("basic_auth_users:\n  alice: '{hash}'\n"),
            &|_, _| unreachable!(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn right_wrong_and_unknown_credentials_and_the_cache() {
        let c = config();
        let a = BasicAuth::default();
        assert!(a.check(&c, &basic("alice", "s3cret")).await);
        assert_eq!(a.cached(), 1);
        // Served from the cache the second time (nothing new cached).
        assert!(a.check(&c, &basic("alice", "s3cret")).await);
        assert_eq!(a.cached(), 1);
        assert!(!a.check(&c, &basic("alice", "wrong")).await);
        assert!(!a.check(&c, &basic("mallory", "s3cret")).await);
        assert!(!a.check(&c, &HeaderMap::new()).await);
        assert_eq!(a.cached(), 3);
        a.clear();
        assert_eq!(a.cached(), 0);
    }

    #[test]
    fn the_cache_is_bounded_and_drops_the_oldest() {
        let mut c = Cache::default();
        for i in 0..(CACHE_SIZE + 10) {
            c.insert(key("u", "h", &i.to_string()), true);
        }
        assert_eq!(c.results.len(), CACHE_SIZE);
        assert_eq!(c.get(&key("u", "h", "0")), None);
        assert_eq!(
            c.get(&key("u", "h", &(CACHE_SIZE + 9).to_string())),
            Some(true)
        );
    }

    #[test]
    fn malformed_headers_are_no_credentials() {
        let mut h = HeaderMap::new();
        for v in ["Bearer abc", "Basic !!!", "Basic", "Basic dXNlcg=="] {
            h.insert(
                axum::http::header::AUTHORIZATION,
                HeaderValue::from_static(v),
            );
            assert_eq!(credentials(&h), None, "{v}");
        }
    }
}

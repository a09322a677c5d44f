//! Access control on the main listener, configured by `--web.config.file`
//! in Prometheus exporter-toolkit's format (see [`config`]): TLS with
//! optional client certificates ([`tls`]), basic auth with bcrypt hashes
//! ([`auth`]), extra response headers and a rate limit.
//!
//! [`WebState`] holds the configuration in force and swaps it atomically on
//! a reload: [`WebFile`] is the file's [`Load`] for the one reloader,
//! [`crate::reload::LastGood`] (re-read the file and every certificate, key
//! and CA it names; apply only when their combined SHA-256 changed and
//! everything loads; otherwise keep the last good configuration, log why and
//! count it in [`WebMetrics`]' reload families). The TLS acceptor asks for the
//! rustls configuration at each accept, so a rotated certificate serves the
//! next connection. [`guard`] is the axum middleware of the main listener;
//! the probe listener has none. The one reload watcher re-reads on file
//! changes, SIGHUP and periodically; `POST /-/reload` (with
//! `--web.enable-lifecycle`) too.

pub mod auth;
pub mod config;
pub mod metrics;
pub mod tls;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use etcd_readiness_policy::sync::TolerantLock;

pub use auth::{AuthOutcome, BasicAuth};
pub use config::{WebConfig, WebConfigError};
pub use metrics::{Refusal, WebMetrics};

use crate::reload::{Change, LastGood, Load, Names, Problem, ReloadStatus, ReloadTrigger};
use crate::runtime::clock::Clock;

/// Why the web config's loader refused a file (the reading, deadline and
/// panic failures are [`crate::reload::LoadError`]'s).
#[derive(Debug, thiserror::Error)]
pub enum WebReloadError {
    #[error("{0}")]
    Config(#[from] WebConfigError),
    #[error(
        "{path}: turning TLS {} needs a restart",
        if *.tls_now { "on" } else { "off" }
    )]
    TlsToggled { path: PathBuf, tls_now: bool },
}

impl Problem for WebReloadError {}

const NAMES: Names = Names {
    what: "web config",
    kept: "the previous web configuration stays in force",
};

/// `--web.config.file` as a [`Load`]: the file and every file it names,
/// built into a [`WebConfig`] and swapped into a [`WebState`].
#[derive(Debug)]
pub struct WebFile(pub Arc<WebState>);

/// The web config's reloader.
pub type WebReloader = LastGood<WebFile>;

impl Load for WebFile {
    type Value = WebConfig;
    type Error = WebReloadError;

    fn limit(&self) -> u64 {
        config::MAX_WEB_CONFIG_BYTES
    }

    fn build(&self, path: &Path, text: String) -> Result<WebConfig, WebReloadError> {
        Ok(WebConfig::from_file_text(path, &text)?)
    }

    /// The hash of the file and of every certificate, key and CA it names.
    fn identity(&self, value: &WebConfig) -> Option<String> {
        Some(value.sha256.clone())
    }

    fn reads_other_files(&self) -> bool {
        true
    }

    fn apply(&self, value: WebConfig, change: &Change<'_>) -> Result<String, WebReloadError> {
        self.0.apply(value, change.trigger)
    }

    fn status(&self) -> &ReloadStatus {
        self.0.metrics.status()
    }

    fn other_files(&self) -> Vec<PathBuf> {
        self.0.current().files.clone()
    }
}

impl WebFile {
    /// The reloader of `web`'s file, with what `web` holds in force.
    pub fn reloader(web: Arc<WebState>) -> Arc<WebReloader> {
        let (path, sha) = (web.path.clone(), web.current().sha256.clone());
        let clock = web.clock.clone();
        Arc::new(LastGood::new(path, NAMES, WebFile(web), Some(sha), clock))
    }
}

/// Most client addresses with a bucket of their own under
/// `rate_limit.per_client`; beyond it, buckets refilled to full (idle
/// clients) are dropped, and if none is, all are (a client whose bucket is
/// dropped starts full again, as a new one would).
pub const MAX_CLIENT_BUCKETS: usize = 4096;

/// A token bucket (`rate_limit`), full at start as Go's `rate.Limiter`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(limit: &config::RateLimit, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    /// Refill for the time since the last take, then take a token if any.
    fn take(&mut self, limit: &config::RateLimit, now: Instant) -> bool {
        let refill = now.duration_since(self.last).as_secs_f64() / limit.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(f64::from(limit.burst));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether it would be full by `now` (nothing taken lately).
    fn refilled(&self, limit: &config::RateLimit, now: Instant) -> bool {
        let refill = now.duration_since(self.last).as_secs_f64() / limit.interval.as_secs_f64();
        self.tokens + refill >= f64::from(limit.burst)
    }
}

/// The web configuration in force and what enforces it.
pub struct WebState {
    path: PathBuf,
    current: ArcSwap<WebConfig>,
    /// Set when TLS is on (decided at start: switching needs a restart).
    tls: Option<ArcSwap<rustls::ServerConfig>>,
    auth: BasicAuth,
    metrics: WebMetrics,
    bucket: Mutex<Bucket>,
    /// One bucket per source address, with `rate_limit.per_client`.
    clients: Mutex<HashMap<Option<IpAddr>, Bucket>>,
    /// The runtime's clock: the buckets' refill, the certificate's validity.
    clock: Clock,
}

impl std::fmt::Debug for WebState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebState")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl WebState {
    /// Put `initial` (loaded at start) in force.
    /// Its reloader ([`WebFile::reloader`]) marks the start-up load in the
    /// reload status families.
    pub fn new(initial: WebConfig, metrics: WebMetrics, clock: Clock) -> Arc<WebState> {
        note_certificate(&initial, &metrics, "start", clock.wall());
        let burst = initial.rate_limit.map_or(0.0, |r| f64::from(r.burst));
        Arc::new(WebState {
            path: initial.path.clone(),
            tls: initial.tls.clone().map(ArcSwap::new),
            current: ArcSwap::from_pointee(initial),
            auth: BasicAuth::new(clock.clone()),
            metrics,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                last: clock.now(),
            }),
            clients: Mutex::new(HashMap::new()),
            clock,
        })
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<WebConfig> {
        self.current.load_full()
    }

    pub fn metrics(&self) -> &WebMetrics {
        &self.metrics
    }

    pub fn auth(&self) -> &BasicAuth {
        &self.auth
    }

    /// The rustls configuration for the next connection, when TLS is on.
    pub fn tls_config(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls.as_ref().map(|t| t.load_full())
    }

    /// Put `new` in force (the reloader's [`Load::apply`], once it built):
    /// all or nothing. Turning TLS on or off is refused (it needs a
    /// restart: the listener's transport is chosen at start).
    fn apply(&self, new: WebConfig, trigger: ReloadTrigger) -> Result<String, WebReloadError> {
        if new.tls_enabled() != self.tls.is_some() {
            return Err(WebReloadError::TlsToggled {
                path: self.path.clone(),
                tls_now: new.tls_enabled(),
            });
        }
        let old = self.current();
        if let (Some(slot), Some(tls)) = (&self.tls, &new.tls) {
            slot.store(tls.clone());
        }
        if old.rate_limit != new.rate_limit {
            let mut b = self.bucket.locked();
            b.tokens = new.rate_limit.map_or(0.0, |r| f64::from(r.burst));
            b.last = self.clock.now();
            self.clients.locked().clear();
        }
        let users_changed = old.users != new.users;
        let summary = new.summary();
        note_certificate(&new, &self.metrics, trigger.as_str(), self.clock.wall());
        self.current.store(Arc::new(new));
        if users_changed {
            // Only then: a rotated certificate must not make every scraper
            // pay a bcrypt again (the cache key holds the stored hash, so
            // a changed or removed user can never match an old entry).
            self.auth.clear();
        }
        Ok(summary)
    }

    /// Take a token from the `rate_limit` bucket, the one of `client` with
    /// `per_client` (always true without a limit).
    fn allow(&self, config: &WebConfig, client: Option<IpAddr>) -> bool {
        let Some(limit) = config.rate_limit else {
            return true;
        };
        let now = self.clock.now();
        if !limit.per_client {
            return self.bucket.locked().take(&limit, now);
        }
        let mut clients = self.clients.locked();
        if !clients.contains_key(&client) && clients.len() >= MAX_CLIENT_BUCKETS {
            clients.retain(|_, b| !b.refilled(&limit, now));
            if clients.len() >= MAX_CLIENT_BUCKETS {
                clients.clear();
            }
        }
        clients
            .entry(client)
            .or_insert_with(|| Bucket::full(&limit, now))
            .take(&limit, now)
    }
}

/// Export the validity of `config`'s serving certificate and warn when it
/// is expired or not yet valid (regression: an expired certificate was taken
/// at reload without a word). It is still served: refusing it would turn a
/// late rotation into an outage of the scrape, and clients refuse it anyway.
fn note_certificate(config: &WebConfig, metrics: &WebMetrics, trigger: &str, wall: SystemTime) {
    metrics.certificate(config.cert_validity);
    let now = wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    if let Some(problem) = config.cert_validity.and_then(|v| v.problem(now)) {
        tracing::warn!(path = %config.path.display(), %trigger, "the serving certificate {problem}: clients will refuse it; rotate it");
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The main listener's middleware: rate limit (429), basic auth (401 with
/// `WWW-Authenticate: Basic`; 429 with `Retry-After: 1` when the bcrypt
/// queue has no place for this client, see [`auth`]), then the configured response headers on
/// every answer — exporter-toolkit's order.
pub async fn guard(State(web): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let config = web.current();
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let mut resp = if !web.allow(&config, client) {
        web.metrics.refused(Refusal::RateLimited);
        plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n")
    } else if config.users.is_empty() {
        next.run(req).await
    } else {
        match web.auth.check(&config, req.headers(), client).await {
            AuthOutcome::Ok => next.run(req).await,
            AuthOutcome::Busy => {
                web.metrics.refused(Refusal::AuthBusy);
                let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }
            AuthOutcome::Denied => {
                web.metrics.refused(Refusal::Unauthorized);
                let mut r = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                r
            }
        }
    };
    for (name, value) in &config.headers {
        resp.headers_mut().insert(name.clone(), value.clone());
    }
    resp
}

/// `router` behind [`guard`].
pub fn protect(router: Router, web: Arc<WebState>) -> Router {
    router.layer(middleware::from_fn_with_state(web, guard))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn state(text: &str) -> Arc<WebState> {
        let c = WebConfig::from_text(Path::new("w.yml"), text, &|_, _| unreachable!()).unwrap();
        WebState::new(c, WebMetrics::default(), Clock::node())
    }

    fn inline_tls(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> WebConfig {
        let mut p = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        let indent = |pem: String| {
            pem.lines()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        };
        let text = format!(
            "tls_server_config:\n  cert: |\n{}  key: |\n{}",
            indent(cert.pem()),
            indent(key.serialize_pem())
        );
        WebConfig::from_text(Path::new("w.yml"), &text, &|_, _| unreachable!()).unwrap()
    }

    /// Regression: an expired serving certificate was accepted at reload
    /// without a warning. Its validity is now exported (and a warning
    /// logged at start and at every reload that applies it).
    #[test]
    fn an_expired_or_not_yet_valid_certificate_is_exported_and_named() {
        let c = inline_tls((2000, 1, 1), (2001, 1, 1));
        let v = c
            .cert_validity
            .expect("validity of the serving certificate");
        assert_eq!((v.not_before, v.not_after), (946_684_800, 978_307_200));
        let metrics = WebMetrics::default();
        let _w = WebState::new(c, metrics.clone(), Clock::node());
        assert_eq!(metrics.certificate_not_after(), 978_307_200);
        let now = 1_700_000_000;
        assert_eq!(
            v.problem(now).as_deref(),
            Some("expired at 2001-01-01T00:00:00Z (notAfter)")
        );
        let future = inline_tls((2999, 1, 1), (3000, 1, 1))
            .cert_validity
            .unwrap();
        assert!(
            future
                .problem(now)
                .unwrap()
                .starts_with("not valid before 2999-01-01")
        );
        let good = inline_tls((2000, 1, 1), (2999, 1, 1))
            .cert_validity
            .unwrap();
        assert_eq!(good.problem(now), None);
        let plain = WebMetrics::default();
        let _w = WebState::new(
            WebConfig::from_text(Path::new("w.yml"), "", &|_, _| unreachable!()).unwrap(),
            plain.clone(),
            Clock::node(),
        );
        assert_eq!(plain.certificate_not_after(), 0);
    }

    #[test]
    fn the_rate_limit_allows_a_burst_then_refuses() {
        let w = state("rate_limit:\n  interval: 1h\n  burst: 2\n");
        let c = w.current();
        let (a, b): (Option<IpAddr>, Option<IpAddr>) = (
            Some("10.0.0.1".parse().unwrap()),
            Some("10.0.0.2".parse().unwrap()),
        );
        assert!(w.allow(&c, a));
        assert!(w.allow(&c, b));
        assert!(!w.allow(&c, a), "the third request within the hour");
        let open = state("");
        assert!((0..100).all(|_| open.allow(&open.current(), a)));
    }

    /// Regression: one global bucket turned a flood from one address into
    /// 429s for the legitimate scraper (15 of 15). With `per_client` each
    /// source address has its own.
    #[test]
    fn a_per_client_rate_limit_keeps_a_flooder_out_of_others_buckets() {
        let w = state("rate_limit:\n  interval: 1h\n  burst: 2\n  per_client: true\n");
        let c = w.current();
        let flood: Option<IpAddr> = Some("10.0.0.66".parse().unwrap());
        let scraper: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let allowed = (0..1000).filter(|_| w.allow(&c, flood)).count();
        assert_eq!(allowed, 2, "the flooder gets its burst only");
        assert!(w.allow(&c, scraper));
        assert!(w.allow(&c, scraper));
        assert!(!w.allow(&c, scraper));
        // Bounded: many addresses never hold more than MAX_CLIENT_BUCKETS.
        for i in 0..(MAX_CLIENT_BUCKETS as u32 + 100) {
            let ip = Some(IpAddr::V4(std::net::Ipv4Addr::from(0x0a01_0000 + i)));
            let _ = w.allow(&c, ip);
        }
        assert!(w.clients.lock().unwrap().len() <= MAX_CLIENT_BUCKETS);
    }
}

//! The `--web.config.file` format: Prometheus exporter-toolkit's web
//! configuration (`tls_server_config`, `http_server_config`,
//! `basic_auth_users`, `rate_limit`), with its keys, defaults and checks, so
//! a file written for node_exporter works here unchanged. Reading is strict
//! like exporter-toolkit's `yaml.UnmarshalStrict`: an unknown key or a
//! duplicate key is an error naming `file:line:col`. Relative paths are
//! relative to the file's directory. [`WebConfig::load`] reads the file and
//! every file it names (bounded in size) and builds everything a connection
//! needs — the rustls configuration included — so a file that loads is a
//! file that works; [`WebConfig::from_text`] does the same from text with an
//! injected file reader, for tests.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::tls;
use crate::outside::bounded_read::{ReadError, read_bounded};

/// The largest web configuration file read.
pub const MAX_WEB_CONFIG_BYTES: u64 = 1024 * 1024;
/// The largest certificate, key or CA file read.
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;
/// The highest bcrypt cost accepted. exporter-toolkit's own test files use
/// up to 18; each step doubles the time of a check, and a cost of 31 would
/// take days, wedging every authenticated request behind it.
pub const MAX_BCRYPT_COST: u32 = 18;

/// Why a web configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: ReadError,
    },
    #[error("{path} is not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("{0}")]
    Yaml(#[from] etcd_readiness_policy::yaml::YamlError),
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Reads a file the configuration names: `(what, path)` → its bytes.
pub type FileReader<'a> = &'a dyn Fn(&'static str, &Path) -> Result<Vec<u8>, WebConfigError>;

/// The file as written (exporter-toolkit's keys, every one optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    tls_server_config: Option<tls::TlsShape>,
    http_server_config: Option<HttpShape>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RateLimitShape>,
}

/// `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpShape {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// `rate_limit`: a token bucket over all requests of the main listener
/// (exporter-toolkit), or one per client address with `per_client: true`
/// (our extension).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitShape {
    interval: Option<String>,
    burst: Option<i64>,
    per_client: Option<bool>,
}

/// The response headers exporter-toolkit lets a file set, with the values
/// it accepts (`None`: any value).
const EXTRA_HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

/// `rate_limit` in force: at most `burst` requests at once, one more per
/// `interval`; over all clients, or for each source address when
/// `per_client` (an extension of exporter-toolkit's format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub interval: Duration,
    pub burst: u32,
    pub per_client: bool,
}

/// A loaded, checked web configuration: what the main listener enforces.
#[derive(Clone)]
pub struct WebConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// The rustls configuration, when the file turns TLS on.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// What `tls` requires of clients, for logs and docs ("RequireAndVerifyClientCert").
    pub client_auth: Option<String>,
    /// Basic-auth users and their bcrypt hashes; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// Extra response headers (`http_server_config.headers`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The serving certificate's validity, when TLS is on.
    pub cert_validity: Option<crate::outside::certificate::Validity>,
    /// `http_server_config.http2` (default true): offer h2 in TLS's ALPN.
    pub http2: bool,
    pub rate_limit: Option<RateLimit>,
    /// SHA-256 of the file and of every file it names, in order: a change
    /// in any of them (a rotated certificate) is a change of configuration.
    pub sha256: String,
    /// Every file read (the configuration first), for the watcher.
    pub files: Vec<PathBuf>,
}

impl fmt::Debug for WebConfig {
    /// Hashes and keys stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .field("http2", &self.http2)
            .field("rate_limit", &self.rate_limit)
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl WebConfig {
    /// Read `path` and every file it names (each non-blocking, regular files
    /// only, bounded in size) and build the configuration. Blocking.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let bytes =
            read_bounded(path, MAX_WEB_CONFIG_BYTES).map_err(|source| WebConfigError::Read {
                what: "--web.config.file",
                path: path.to_path_buf(),
                source,
            })?;
        let text = String::from_utf8(bytes).map_err(|e| WebConfigError::NotUtf8 {
            path: path.to_path_buf(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        WebConfig::from_file_text(path, &text)
    }

    /// Build from the file's `text` as read from `path`, reading the
    /// certificates, keys and CAs it names from disk (each bounded like the
    /// file). Blocking: the reloader runs it under its deadline.
    pub fn from_file_text(path: &Path, text: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::from_text(path, text, &|what, p| {
            read_bounded(p, MAX_PEM_BYTES).map_err(|source| WebConfigError::Read {
                what,
                path: p.to_path_buf(),
                source,
            })
        })
    }

    /// Build from the file's `text`; `read(what, path)` reads the files it
    /// names (paths already made relative to `path`'s directory).
    pub fn from_text(
        path: &Path,
        text: &str,
        read: FileReader<'_>,
    ) -> Result<WebConfig, WebConfigError> {
        let invalid = |message: String| WebConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        // An empty file (or only comments) is a valid, empty configuration,
        // as in exporter-toolkit.
        let shape: FileShape = etcd_readiness_policy::yaml::from_str::<Option<FileShape>>(
            &path.display().to_string(),
            text,
        )?
        .unwrap_or_default();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut hasher = Sha256::new();
        hash_part(&mut hasher, text.as_bytes());
        let mut files = vec![path.to_path_buf()];

        let users = shape.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            check_bcrypt(hash).map_err(|e| {
                invalid(format!(
                    "basic_auth_users: the password of {user:?} is not a bcrypt hash ({e}); \
                     hash it with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                ))
            })?;
        }
        let http = shape.http_server_config.unwrap_or_default();
        let headers =
            headers(http.headers.unwrap_or_default()).map_err(|e| invalid(e.to_string()))?;
        let http2 = http.http2.unwrap_or(true);
        let rate_limit = match shape.rate_limit {
            None => None,
            Some(r) => rate_limit(r).map_err(|e| invalid(e.to_string()))?,
        };
        let (tls, client_auth) = match shape.tls_server_config {
            Some(t) if t.is_enabled() => {
                let mut reader = |what: &'static str, p: &str| -> Result<Vec<u8>, WebConfigError> {
                    let full = join(&dir, p);
                    let bytes = read(what, &full)?;
                    hash_part(&mut hasher, &bytes);
                    files.push(full);
                    Ok(bytes)
                };
                let settings =
                    tls::settings(&t).map_err(|m| invalid(format!("tls_server_config: {m}")))?;
                let built = tls::build(settings, http2, &mut reader).map_err(|e| match e {
                    tls::BuildError::Read(e) => e,
                    tls::BuildError::Invalid(m) => invalid(format!("tls_server_config: {m}")),
                })?;
                (
                    Some(built.config),
                    Some((built.client_auth, built.validity)),
                )
            }
            _ => (None, None),
        };
        let (client_auth, cert_validity) = match client_auth {
            Some((auth, validity)) => (Some(auth), validity),
            None => (None, None),
        };
        Ok(WebConfig {
            path: path.to_path_buf(),
            tls,
            client_auth,
            users,
            headers,
            cert_validity,
            http2,
            rate_limit,
            sha256: hex::encode(hasher.finalize()),
            files,
        })
    }

    /// Whether the main listener speaks TLS.
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    /// One line for logs: what the file requires of clients.
    pub fn summary(&self) -> String {
        let tls = match (&self.tls, &self.client_auth) {
            (Some(_), Some(a)) => format!("TLS ({a})"),
            (Some(_), None) => "TLS".to_string(),
            (None, _) => "plain HTTP".to_string(),
        };
        let auth = if self.users.is_empty() {
            "no basic auth".to_string()
        } else {
            format!("basic auth ({} users)", self.users.len())
        };
        format!("{tls}, {auth}")
    }
}

/// Length-prefixed, so moving bytes between parts changes the hash.
fn hash_part(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

fn join(dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// Why a basic-auth password is refused.
#[derive(Debug, thiserror::Error)]
enum BcryptProblem {
    #[error("{0}")]
    NotAHash(#[from] bcrypt::BcryptError),
    #[error(
        "its cost {0} is above the limit of {MAX_BCRYPT_COST}: every check would take minutes or more"
    )]
    TooCostly(u32),
}

/// A bcrypt hash of a cost we are willing to pay.
fn check_bcrypt(hash: &str) -> Result<(), BcryptProblem> {
    let parts: bcrypt::HashParts = hash.parse()?;
    let cost = parts.get_cost();
    if cost > MAX_BCRYPT_COST {
        return Err(BcryptProblem::TooCostly(cost));
    }
    Ok(())
}

/// Why `http_server_config.headers` is refused.
#[derive(Debug, thiserror::Error)]
enum HeaderProblem {
    #[error(
        "http_server_config.headers: HTTP header {0:?} can not be configured (allowed: {allowed})",
        allowed = EXTRA_HEADERS.map(|(n, _)| n).join(", ")
    )]
    NotConfigurable(String),
    #[error(
        "http_server_config.headers: invalid value for {name}. Expected one of: {allowed:?}, but got: {value:?}"
    )]
    ValueNotAllowed {
        name: String,
        allowed: &'static [&'static str],
        value: String,
    },
    #[error("http_server_config.headers: the value of {0} is not a valid header value")]
    InvalidValue(String),
    #[error("{0}")]
    InvalidName(#[from] axum::http::header::InvalidHeaderName),
}

fn headers(
    configured: BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, HeaderProblem> {
    let mut out = Vec::new();
    for (name, value) in configured {
        let Some((_, allowed)) = EXTRA_HEADERS.iter().find(|(n, _)| *n == name) else {
            return Err(HeaderProblem::NotConfigurable(name));
        };
        if let Some(allowed) = *allowed
            && !allowed.contains(&value.as_str())
        {
            return Err(HeaderProblem::ValueNotAllowed {
                name,
                allowed,
                value,
            });
        }
        // "Unset if blank."
        if value.is_empty() {
            continue;
        }
        let Ok(v) = HeaderValue::from_str(&value) else {
            return Err(HeaderProblem::InvalidValue(name));
        };
        let n = HeaderName::from_bytes(name.as_bytes())?;
        out.push((n, v));
    }
    Ok(out)
}

/// The longest `rate_limit.interval` accepted.
const MAX_RATE_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// Why `rate_limit` is refused.
#[derive(Debug, thiserror::Error)]
enum RateLimitProblem {
    #[error("rate_limit.interval {text:?}: {error}")]
    Interval {
        text: String,
        error: etcd_readiness_policy::duration::DurationError,
    },
    #[error("rate_limit.burst {0} is out of range: allowed 0 to 1000000")]
    Burst(i64),
}

fn rate_limit(r: RateLimitShape) -> Result<Option<RateLimit>, RateLimitProblem> {
    let interval = match r.interval.as_deref() {
        None | Some("") | Some("0") => Duration::ZERO,
        Some(s) => {
            etcd_readiness_policy::duration::parse(s, MAX_RATE_INTERVAL).map_err(|error| {
                RateLimitProblem::Interval {
                    text: s.to_string(),
                    error,
                }
            })?
        }
    };
    if interval.is_zero() {
        return Ok(None);
    }
    let burst = r.burst.unwrap_or(0);
    let burst = u32::try_from(burst)
        .ok()
        .filter(|b| *b <= 1_000_000)
        .ok_or(RateLimitProblem::Burst(burst))?;
    Ok(Some(RateLimit {
        interval,
        burst,
        per_client: r.per_client.unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(_: &'static str, p: &Path) -> Result<Vec<u8>, WebConfigError> {
        panic!("no file should be read, asked for {}", p.display())
    }

    fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::from_text(Path::new("/etc/web.yml"), text, &no_files)
    }

    /// A bcrypt hash of "hello" at cost 4 (cheap to make in tests).
    fn hello() -> String {
        bcrypt::hash("hello", 4).unwrap()
    }

    #[test]
    fn empty_and_comment_only_files_are_empty_configurations() {
        for text in ["", "\n", "# nothing here\n", "---\n"] {
            let c = parse(text).unwrap();
            assert!(c.tls.is_none() && c.users.is_empty() && c.headers.is_empty());
            assert!(c.http2);
        }
    }

    #[test]
    fn unknown_and_duplicate_keys_are_errors_with_the_position() {
        let e = parse("tls_server_config:\n  cert_filse: server.crt\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/web.yml:2:3"), "{e}");
        assert!(e.contains("cert_filse"), "{e}");
        let h = hello();
        let e = parse(&format!(
            "basic_auth_users:\n  alice: '{h}'\n  alice: '{h}'\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("duplicate"), "{e}");
    }

    #[test]
    fn users_need_bcrypt_hashes_of_a_bounded_cost() {
        let h = hello();
        let c = parse(&format!("basic_auth_users:\n  alice: '{h}'\n")).unwrap();
        assert_eq!(c.users.len(), 1);
        let e = parse("basic_auth_users:\n  john: doe\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"john\" is not a bcrypt hash"), "{e}");
        let costly = h.replacen("$04$", "$31$", 1);
        let e = parse(&format!("basic_auth_users:\n  alice: '{costly}'\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cost 31 is above the limit of 18"), "{e}");
    }

    #[test]
    fn headers_are_limited_to_exporter_toolkits_list_and_values() {
        let c = parse(
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000; includeSubDomains\n    X-Content-Type-Options: nosniff\n    X-XSS-Protection: 1\n    Content-Security-Policy: \"default-src 'self'\"\n",
        )
        .unwrap();
        assert_eq!(c.headers.len(), 5);
        let e = parse("http_server_config:\n  headers:\n    Content-Type: foo\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("HTTP header \"Content-Type\" can not be configured"),
            "{e}"
        );
        let e = parse("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid value for X-Frame-Options"), "{e}");
    }

    #[test]
    fn an_empty_tls_section_is_plain_http() {
        let c = parse("tls_server_config: {}\n").unwrap();
        assert!(c.tls.is_none());
        let e = parse("tls_server_config:\n  key_file: k.pem\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing one of cert or cert_file"), "{e}");
    }

    #[test]
    fn rate_limits_parse_and_zero_disables() {
        let c = parse("rate_limit:\n  interval: 1s\n  burst: 20\n").unwrap();
        assert_eq!(
            c.rate_limit,
            Some(RateLimit {
                interval: Duration::from_secs(1),
                burst: 20,
                per_client: false,
            })
        );
        let c = parse("rate_limit:\n  interval: 1s\n  burst: 2\n  per_client: true\n").unwrap();
        assert!(c.rate_limit.unwrap().per_client);
        assert_eq!(
            parse("rate_limit:\n  interval: 0\n").unwrap().rate_limit,
            None
        );
        assert!(parse("rate_limit:\n  interval: 1s\n  burst: -1\n").is_err());
    }
}

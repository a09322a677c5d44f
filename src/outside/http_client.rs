//! The HTTP client shared by the backup and scrape sources: optional TLS from
//! PEM files (rustls with the ring provider), a timeout on every request, the
//! one bounded body reader every source uses ([`get`]: at most `max_body`
//! bytes are ever buffered, checked while streaming, no decompression), and
//! the mapping of request failures to bounded [`SampleError`] reasons; and
//! [`get_at`], the same bounded GET of a plain-HTTP server at an address,
//! for the demo and the tests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use super::failure::{Reason, SampleError};
use crate::outside::bounded_read::ReadError;
use crate::outside::redacted_url::RedactedUrl;

/// PEM files for talking HTTPS: a CA bundle to verify the server, and a client
/// certificate and key for mutual TLS. All optional; cert and key go together.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    #[serde(default)]
    pub ca: Option<PathBuf>,
    #[serde(default)]
    pub cert: Option<PathBuf>,
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// Setting up a source failed (bad flags or files); reported at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Tls(#[from] MaterialError),
    /// Boxed: the largest of the variants, and rare.
    #[error(transparent)]
    CannotStart(Box<CannotStart>),
    #[error("invalid {what}: {source}")]
    Pem {
        what: &'static str,
        source: reqwest::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("cannot set up the DNS resolver: {0}")]
    Resolver(String),
}

/// Install rustls' ring provider as the process default, once. reqwest is
/// built without a provider of its own; another part of the program may have
/// installed one already, which is fine.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Whom a client trusts to serve TLS.
#[derive(Clone, Copy, Debug)]
pub enum Trust<'a> {
    /// The system's CA bundle; where the system has none (an image without
    /// one), no CA, with a warning: a plain `http://` peer needs none, and
    /// an `https://` one is refused at its handshake, naming the missing CA.
    System,
    /// Only the CA certificates of this PEM bundle.
    Only(&'a [u8]),
    /// No CA: for plain `http://` (no root store is loaded, which costs
    /// about 20 ms on a client made per call).
    Nothing,
}

/// The one place a reqwest client is built, for every outbound HTTP call
/// (the sources, `replay`, the demo and tests through [`get_at`]): no proxy,
/// no redirect, `trust`, `identity` (a client certificate chain and its
/// key, PEM), `timeout` on every request and its connect (`None`: the caller
/// bounds each request), and `pooled` connections or one per request.
pub fn client(
    trust: Trust<'_>,
    identity: Option<(&[u8], &[u8])>,
    timeout: Option<Duration>,
    pooled: bool,
) -> Result<reqwest::Client, SourceError> {
    install_crypto_provider();
    let builder = |trust: Trust<'_>| -> Result<reqwest::ClientBuilder, SourceError> {
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        if let Some(t) = timeout {
            b = b.timeout(t).connect_timeout(t);
        }
        if !pooled {
            b = b.pool_max_idle_per_host(0);
        }
        match trust {
            Trust::System => {}
            Trust::Only(ca) => {
                let certs = reqwest::Certificate::from_pem_bundle(ca).map_err(|source| {
                    SourceError::Pem {
                        what: "CA certificate",
                        source,
                    }
                })?;
                b = b.tls_certs_only(certs);
            }
            Trust::Nothing => b = b.tls_certs_only([]),
        }
        if let Some((cert, key)) = identity {
            let mut pem = cert.to_vec();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let id = reqwest::Identity::from_pem(&pem).map_err(|source| SourceError::Pem {
                what: "client certificate or key",
                source,
            })?;
            b = b.identity(id);
        }
        Ok(b)
    };
    match builder(trust)?.build() {
        Ok(c) => Ok(c),
        Err(e) if matches!(trust, Trust::System) => {
            let why = causes(Some(&e))
                .last()
                .map_or_else(|| e.to_string(), |c| c.to_string());
            tracing::warn!(
                "the system's CA bundle cannot be loaded ({why}): an https:// source needs its \
                 --*.cacert"
            );
            builder(Trust::Nothing)?
                .build()
                .map_err(SourceError::Client)
        }
        Err(e) => Err(SourceError::Client(e)),
    }
}

/// A client certificate and its key go together: both or neither. `what`
/// names the pair in the error (e.g. the two flags). The one place this rule
/// lives, for etcd's mTLS flags and for every HTTP source.
pub fn cert_key_pair<'a, T: ?Sized>(
    cert: Option<&'a T>,
    key: Option<&'a T>,
    what: &'static str,
) -> Result<Option<(&'a T, &'a T)>, HalfPair> {
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        _ => Err(HalfPair(what)),
    }
}

/// A certificate without its key or a key without its certificate; names
/// the pair (e.g. the two flags).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} must be given together")]
pub struct HalfPair(pub &'static str);

/// Why a set of TLS files cannot be used: at start-up the exporter does
/// not start ([`CannotStart`]); on a reload the last good set stays (the
/// reloader says so).
#[derive(Debug, thiserror::Error)]
pub enum MaterialError {
    #[error("cannot read the {what} file {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: ReadError,
    },
    #[error("the {what} file {} {problem}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error(
        "the client certificate {} does not match the key {} (a pair half-written?)",
        cert.display(), key.display()
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error(transparent)]
    Pair(#[from] HalfPair),
}

impl MaterialError {
    /// The file it is about (the key, for a pair that does not match).
    pub fn file(&self) -> Option<&Path> {
        match self {
            MaterialError::Read { path, .. } | MaterialError::Invalid { path, .. } => Some(path),
            MaterialError::KeyMismatch { key, .. } => Some(key),
            MaterialError::Pair(_) => None,
        }
    }
}

impl From<CannotStart> for SourceError {
    fn from(e: CannotStart) -> Self {
        SourceError::CannotStart(Box::new(e))
    }
}

/// TLS files that cannot be used when the exporter starts: there is no
/// last good set to keep, so it does not start. `flags` names the files.
#[derive(Debug, thiserror::Error)]
#[error("the exporter cannot start: {flags}: {error}")]
pub struct CannotStart {
    pub flags: &'static str,
    pub error: MaterialError,
}

/// Over TLS 1.3 the client's half of the handshake is done before the
/// server has checked the client's certificate; a server that refuses it
/// closes the connection then, which the client may see only as a
/// connection closed or canceled (hyper) right after the handshake.
pub fn closed_after_handshake(causes: &[&(dyn std::error::Error + 'static)]) -> bool {
    causes.iter().any(|c| {
        c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_canceled())
    })
}

/// What a failed handshake says of the certificates, in words for the
/// explanation: the peer's certificate not trusted by our CA, or ours
/// refused by the peer (its alert, or a close right after the handshake).
pub fn certificate_hint(
    causes: &[&(dyn std::error::Error + 'static)],
    tls_endpoint: bool,
) -> Option<&'static str> {
    use rustls::AlertDescription as A;
    for c in causes {
        match c.downcast_ref::<rustls::Error>() {
            Some(rustls::Error::InvalidCertificate(_)) => {
                return Some(
                    "the server's certificate is not signed by a CA the exporter trusts \
                     (its CA file; a CA rotation not yet in that file?)",
                );
            }
            Some(rustls::Error::AlertReceived(
                A::BadCertificate
                | A::UnknownCA
                | A::CertificateRequired
                | A::CertificateExpired
                | A::CertificateRevoked
                | A::CertificateUnknown
                | A::AccessDenied,
            )) => {
                return Some(
                    "the server refused the exporter's client certificate (signed by a CA \
                     it no longer trusts, expired, or missing?)",
                );
            }
            _ => {}
        }
    }
    (tls_endpoint && closed_after_handshake(causes)).then_some(REFUSED_AFTER_HANDSHAKE)
}

/// The words added to a close right after the handshake.
pub const REFUSED_AFTER_HANDSHAKE: &str = "the server closed the connection right after the TLS \
     handshake, which is how a server refuses a missing or unaccepted client certificate";

/// Check that `url` is an absolute http(s) URL; returns it without a trailing `/`.
pub fn base_url(url: &RedactedUrl) -> Result<RedactedUrl, SourceError> {
    url.parse_http()
        .map_err(|e| SourceError::Invalid(format!("invalid URL `{url}`: {e}")))?;
    Ok(url.without_trailing_slash())
}

/// Default of `--source.max-body-bytes`: a real etcd or sidecar `/metrics`
/// is tens of KiB; 4 MiB leaves room for a big one while a hostile or broken
/// endpoint cannot push the exporter past its 64 MiB container limit.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;

/// A response: its status and (when asked for) its body.
pub struct Fetched {
    pub status: reqwest::StatusCode,
    pub body: String,
}

/// GET `url`, bounded by `timeout` overall (headers and body) and by
/// `max_body` bytes: a body announced or found to be longer fails the round
/// after reading at most `max_body` bytes. Bodies are never decompressed
/// (reqwest is built without it and we send no `Accept-Encoding`); a
/// compressed answer is refused, so a gzip bomb costs at most `max_body`.
///
/// Credentials in `url` (`user:pass@`) are redacted in every error message:
/// messages name it by its `Display`, and library texts are scrubbed.
pub async fn get(
    client: &reqwest::Client,
    url: &RedactedUrl,
    timeout: Duration,
    max_body: u64,
) -> Result<Fetched, SampleError> {
    let mut body = Vec::new();
    let status = get_into(client, url, timeout, max_body, &mut body).await?;
    let body = String::from_utf8(body).map_err(|e| not_utf8(url, e.utf8_error()))?;
    Ok(Fetched { status, body })
}

/// A compressed body is refused: it is never decompressed.
fn refuse_compressed(resp: &reqwest::Response, url: &RedactedUrl) -> Result<(), SampleError> {
    match resp.headers().get(reqwest::header::CONTENT_ENCODING) {
        Some(enc) if !enc.as_bytes().eq_ignore_ascii_case(b"identity") => Err(SampleError::new(
            Reason::Parse,
            format!(
                "GET {url}: the body is compressed (Content-Encoding: {}); the exporter asks \
                     for and reads only uncompressed bodies",
                String::from_utf8_lossy(enc.as_bytes())
            ),
        )),
        _ => Ok(()),
    }
}

/// [`get`] into `body` (cleared first, its capacity kept): a caller that
/// fetches answer after answer reuses one buffer instead of leaving the
/// allocator one freed buffer per answer. The body is not checked to be
/// UTF-8: the caller checks it once where it reads it ([`not_utf8`] says
/// why not), not twice.
pub async fn get_into(
    client: &reqwest::Client,
    url: &RedactedUrl,
    timeout: Duration,
    max_body: u64,
    body: &mut Vec<u8>,
) -> Result<reqwest::StatusCode, SampleError> {
    let request = client.get(url.expose_for_request());
    let (status, ()) = exchange(request, url, timeout, max_body, body, |_| ()).await?;
    Ok(status)
}

/// Send `request` (a GET of `url`) and read its answer into `body`, bounded
/// by `timeout` overall and by `max_body` bytes; `keep` takes what the
/// caller wants of the head (nothing, or its headers) before the body is
/// read. Every message has `url`'s credentials scrubbed.
async fn exchange<T>(
    request: reqwest::RequestBuilder,
    url: &RedactedUrl,
    timeout: Duration,
    max_body: u64,
    body: &mut Vec<u8>,
    keep: impl FnOnce(&reqwest::Response) -> T,
) -> Result<(reqwest::StatusCode, T), SampleError> {
    body.clear();
    let fut = async {
        let mut resp = request.send().await.map_err(|e| classify(url, &e))?;
        let status = resp.status();
        refuse_compressed(&resp, url)?;
        let kept = keep(&resp);
        read_body(&mut resp, url, max_body, body).await?;
        Ok((status, kept))
    };
    let r = match tokio::time::timeout(timeout, fut).await {
        Err(_) => Err(SampleError {
            reason: Reason::Timeout,
            message: format!("GET {url}: no answer within {timeout:?}"),
        }),
        Ok(r) => r,
    };
    r.map_err(|mut e| {
        e.message = url.scrub(&e.message).into_owned();
        e
    })
}

/// An answer with its headers, for a caller that looks at them (e.g. its
/// content type).
#[derive(Debug)]
pub struct Answer {
    pub status: reqwest::StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

/// `GET path` of the plain-HTTP server at `addr`: how the demo and the
/// tests talk to the exporter, to etcd's metrics listener and to
/// Prometheus. Bounded like every [`get`]: by `timeout` overall (per call:
/// a long poll passes one longer than its wait) and by
/// [`DEFAULT_MAX_BODY_BYTES`]; `accept` is sent when given (else reqwest's
/// `*/*`). No proxy, no redirect, and a connection of its own, closed after
/// the answer, as a prober's: a client per call, since a pooled connection
/// would outlive the tokio runtime that made it.
pub async fn get_at(
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
    timeout: Duration,
) -> Result<Answer, SampleError> {
    let url = RedactedUrl::new(format!("http://{addr}{path}"));
    // Plain HTTP only: no root store; a connection of its own.
    let client = client(Trust::Nothing, None, None, false)
        .map_err(|e| SampleError::new(Reason::Connect, e.to_string()))?;
    let mut request = client.get(url.expose_for_request());
    if let Some(accept) = accept {
        request = request.header(reqwest::header::ACCEPT, accept);
    }
    let mut body = Vec::new();
    let keep = |r: &reqwest::Response| r.headers().clone();
    let (status, headers) = exchange(
        request,
        &url,
        timeout,
        DEFAULT_MAX_BODY_BYTES,
        &mut body,
        keep,
    )
    .await?;
    let body = String::from_utf8(body).map_err(|e| not_utf8(&url, e.utf8_error()))?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A body from `url` that is not UTF-8.
pub fn not_utf8(url: &RedactedUrl, e: std::str::Utf8Error) -> SampleError {
    SampleError::new(
        Reason::Parse,
        format!(
            "GET {url}: the body is not UTF-8 (first bad byte at offset {})",
            e.valid_up_to()
        ),
    )
}

/// Read the body chunk by chunk into `body`, never holding more than `max`
/// bytes.
async fn read_body(
    resp: &mut reqwest::Response,
    url: &RedactedUrl,
    max: u64,
    body: &mut Vec<u8>,
) -> Result<(), SampleError> {
    let too_large = |what: String| {
        SampleError::new(
            Reason::TooLarge,
            format!(
                "GET {url}: {what}, more than the limit of {max} bytes (--source.max-body-bytes)"
            ),
        )
    };
    if let Some(len) = resp.content_length()
        && len > max
    {
        return Err(too_large(format!("the body is {len} bytes long")));
    }
    let hint = resp.content_length().unwrap_or(0).min(max);
    body.reserve_exact(usize::try_from(hint).unwrap_or(0));
    while let Some(chunk) = resp.chunk().await.map_err(|e| classify(url, &e))? {
        if (body.len() + chunk.len()) as u64 > max {
            return Err(too_large(format!(
                "the body goes on past {} bytes",
                body.len() + chunk.len()
            )));
        }
        // Grow by doubling, but never past the limit: a body near the limit
        // must not cost twice the limit in capacity.
        let needed = body.len() + chunk.len();
        if needed > body.capacity() {
            let target = (body.capacity() * 2).max(needed).min(max as usize);
            body.reserve_exact(target - body.len());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(())
}

/// GET `url` and require a 2xx status.
pub async fn get_ok(
    client: &reqwest::Client,
    url: &RedactedUrl,
    timeout: Duration,
    max_body: u64,
) -> Result<String, SampleError> {
    let f = get(client, url, timeout, max_body).await?;
    if !f.status.is_success() {
        return Err(SampleError {
            reason: Reason::Status,
            message: format!("GET {url}: status {}", f.status),
        });
    }
    Ok(f.body)
}

/// Every error in the cause chain from `first`, following io::Error's
/// wrapped inner error too: hyper, tokio-rustls and hyper-rustls wrap errors
/// in io::Errors whose `source()` skips them, so the plain chain never shows
/// a rustls or hyper error. At most 16 links. The one chain walker of the
/// HTTP and etcd error classifiers.
pub fn causes<'a>(
    first: Option<&'a (dyn std::error::Error + 'static)>,
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut cur = first;
    while let Some(err) = cur {
        if out.len() >= 16 {
            break;
        }
        out.push(err);
        cur = err.source().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static))
        });
    }
    out
}

/// Map a reqwest error to a bounded reason, with the whole cause chain as message.
pub fn classify(url: &RedactedUrl, e: &reqwest::Error) -> SampleError {
    let mut chain = String::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&err.to_string());
        cur = err.source();
    }
    let all = causes(Some(e));
    let tls = all.iter().any(|c| c.is::<rustls::Error>());
    // Over TLS 1.3 the client's handshake is done before the server has
    // checked the client's certificate; a server that refuses it closes the
    // connection then, and whether the client reads its alert or only sees
    // the connection gone before the request was sent is a race. The second
    // reads "canceled: connection was not ready" — the same refusal.
    let hint = certificate_hint(&all, url.starts_with("https://"));
    if let Some(hint) = hint {
        chain.push_str(&format!(" ({hint})"));
    }
    let reason = if e.is_timeout() {
        Reason::Timeout
    } else if tls || hint.is_some() {
        Reason::Tls
    } else if e.is_connect() {
        Reason::Connect
    } else if e.is_decode() || e.is_body() {
        Reason::Parse
    } else {
        Reason::Connect
    };
    SampleError {
        reason,
        message: url.scrub(&format!("GET {url}: {chain}")).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_wants_http_or_https() {
        let base = |s: &str| base_url(&RedactedUrl::new(s));
        assert_eq!(
            base("http://127.0.0.1:8080/").unwrap().expose_for_request(),
            "http://127.0.0.1:8080"
        );
        assert!(base("127.0.0.1:8080").is_err());
        assert!(base("unix:///run/x.sock").is_err());
        let e = base("http://u:S3cret@127.0.0.1:bad/")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid URL `http://<redacted>@127.0.0.1:bad/`: invalid port number"
        );
    }
}

//! How an etcd call failed, in words an operator can act on: the error
//! chain classified by its types (gRPC status codes, io error kinds,
//! rustls, hyper and h2), never by its text, and a failure that looks like
//! the wrong protocol diagnosed by one probe of the endpoint (HTTP/1 at a
//! gRPC port, TLS against plain text).

use std::error::Error as _;
use std::time::Duration;

use super::super::{Reason, SampleError};
use crate::outside::redacted_url::RedactedUrl;
use etcd_readiness_policy::text::fmt_secs_or_ms;

/// The first error of the chain below `e` (etcd-client's own `source()`
/// stops at its wrapper; the tonic `Status` keeps the transport error).
fn first_source(e: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    match e {
        etcd_client::Error::GRpcStatus(st) => st.source(),
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::IoError(io) => Some(io),
        other => other.source(),
    }
}

/// Every error in the chain below `e` (see [`crate::outside::http_client::causes`]).
fn causes(e: &etcd_client::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    crate::outside::http_client::causes(first_source(e))
}

/// A compact description: the gRPC status message (or the error itself) and
/// the root cause, without tonic's debug dumps.
pub(super) fn chain(e: &etcd_client::Error) -> String {
    let head = match e {
        etcd_client::Error::GRpcStatus(st) => st.message().to_string(),
        other => other.to_string(),
    };
    let root = causes(e).last().map(|r| r.to_string());
    match root {
        Some(r) if !head.contains(&r) && !r.is_empty() => {
            if head.is_empty() {
                r
            } else {
                format!("{head}: {r}")
            }
        }
        _ => head,
    }
}

/// etcd's `ErrGRPCLeaderChanged`: a request that waited while the member's
/// leader changed, which the caller may send again.
pub(super) fn leader_changed(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(st)
        if st.code() == tonic::Code::Unavailable && st.message() == "etcdserver: leader changed")
}

/// etcd refused the token a call carried, on the errors etcd's own Go
/// client logs in again on: the token expired or was revoked (a password
/// changed, a user deleted: `Unauthenticated`, "invalid auth token"), or
/// was issued before a change of users, roles or passwords ("revision of
/// auth store is old", which no call carrying it passes again); and a call
/// made without one after authentication was turned on ("user name is
/// empty").
pub(super) fn token_refused(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(st)
        if st.code() == tonic::Code::Unauthenticated
            || st.message() == "etcdserver: invalid auth token"
            || st.message() == "etcdserver: revision of auth store is old"
            || st.message() == "etcdserver: user name is empty")
}

/// A login etcd answered with a refusal (a wrong user or password, its
/// authentication off, …), not one it did not answer: a status code only
/// etcd's own answer carries.
pub(super) fn login_refused(e: &etcd_client::Error) -> bool {
    use tonic::Code as C;
    matches!(e, etcd_client::Error::GRpcStatus(st)
        if matches!(st.code(), C::InvalidArgument | C::FailedPrecondition | C::PermissionDenied
            | C::NotFound | C::Unauthenticated))
}

/// Classify by the types in the error chain: the gRPC status code, io error
/// kinds, rustls, hyper and h2 errors. `protocol` means the peer does not
/// speak what we expect (HTTP/1, TLS vs plain text); [`explain`] then probes.
pub(super) fn classify(what: &str, e: &etcd_client::Error, timeout: Duration) -> SampleError {
    use std::io::ErrorKind as K;
    let text = chain(e);
    let code = match e {
        etcd_client::Error::GRpcStatus(st) => Some(st.code()),
        _ => None,
    };
    let causes = causes(e);
    let io_kind = causes
        .iter()
        .find_map(|c| c.downcast_ref::<std::io::Error>().map(|io| io.kind()));
    let tls = causes.iter().any(|c| c.is::<rustls::Error>());
    let h2 = causes.iter().any(|c| c.is::<h2::Error>());
    let hyper_parse = causes.iter().any(|c| {
        c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_parse())
    });
    let transport = causes.iter().any(|c| c.is::<tonic::transport::Error>());
    // tonic turns its own request timeout (`TimeoutExpired`) into a bare
    // `Cancelled` status carrying that error's text and no source.
    let tonic_timeout = causes.iter().any(|c| c.is::<tonic::TimeoutExpired>())
        || matches!(e, etcd_client::Error::GRpcStatus(st)
            if st.code() == tonic::Code::Cancelled
                && st.message() == tonic::TimeoutExpired(()).to_string());
    let reason = if tls {
        Reason::Tls
    } else if tonic_timeout
        || matches!(io_kind, Some(K::TimedOut))
        || code == Some(tonic::Code::DeadlineExceeded)
    {
        Reason::Timeout
    } else if matches!(
        io_kind,
        Some(K::ConnectionRefused | K::AddrNotAvailable | K::NotFound | K::HostUnreachable)
    ) {
        Reason::Connect
    } else if h2
        || hyper_parse
        || (transport
            && matches!(
                io_kind,
                Some(K::BrokenPipe | K::ConnectionReset | K::UnexpectedEof | K::ConnectionAborted)
            ))
    {
        Reason::Protocol
    } else if transport || code == Some(tonic::Code::Unavailable) {
        Reason::Connect
    } else {
        Reason::Rpc
    };
    let message = match reason {
        Reason::Timeout => format!(
            "{what}: request timed out after {} ({text})",
            fmt_secs_or_ms(timeout)
        ),
        _ if text.is_empty() => format!("{what}: failed"),
        Reason::Connect if io_kind == Some(K::ConnectionRefused) => {
            format!("{what}: connection refused ({text})")
        }
        Reason::Tls => format!("{what}: TLS error: {text}"),
        _ => format!("{what}: {text}"),
    };
    SampleError::new(reason, message)
}

/// The [`SampleError`] of a failed call `what` to `endpoint`: classified
/// ([`classify`]; `timeout` is the client's own request timeout), and where
/// it looks like the wrong protocol, diagnosed by one probe within `left`.
pub(super) async fn explain(
    what: &str,
    e: &etcd_client::Error,
    endpoint: &RedactedUrl,
    timeout: Duration,
    left: Duration,
) -> SampleError {
    let mut err = classify(what, e, timeout);
    // A handshake refused for a certificate says so, and counts as TLS.
    let https = endpoint.starts_with("https://");
    if let Some(hint) = crate::outside::http_client::certificate_hint(&causes(e), https) {
        err = SampleError::new(
            Reason::Tls,
            format!("{what}: TLS error: {} ({hint})", chain(e)),
        );
    }
    if err.reason == Reason::Protocol
        && let Some(hint) = diagnose(endpoint, left).await
    {
        err.message = format!("{what}: {hint} ({})", chain(e));
    }
    err.message = endpoint.scrub(&err.message).into_owned();
    err
}

/// What answered at the endpoint, by the first bytes it sends back to a
/// plain-text HTTP/2 connection preface.
#[derive(Debug, PartialEq, Eq)]
enum Peer {
    /// An HTTP/2 SETTINGS frame: plain-text HTTP/2 (gRPC) is spoken here.
    PlainHttp2,
    /// Text such as `HTTP/1.1 400` or an HTML page: an HTTP/1 server.
    Http1,
    /// A TLS record (alert or handshake), or a close without a word, which
    /// is what a TLS port does with plain text.
    TlsOrSilent,
}

fn peer_from_reply(reply: &[u8]) -> Peer {
    match reply {
        [] => Peer::TlsOrSilent,
        [0x15 | 0x16, 0x03, ..] => Peer::TlsOrSilent,
        [_, _, _, 0x04, ..] => Peer::PlainHttp2,
        _ => Peer::Http1,
    }
}

/// Connect to `endpoint` in plain text, send the HTTP/2 preface and an
/// empty SETTINGS frame, and look at the first bytes of the answer. Sends
/// nothing etcd would act on. `None` if the probe itself fails.
async fn probe(endpoint: &RedactedUrl, within: Duration) -> Option<Peer> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (host, port) = endpoint.parse_http().ok()?.host_and_port()?;
    let work = async move {
        let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        // A peer that closes at once may reset the write: that is an answer too.
        let _ = s.write_all(&hello).await;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.unwrap_or(0);
        Some(peer_from_reply(&buf[..n]))
    };
    tokio::time::timeout(within, work).await.ok().flatten()
}

/// A sentence naming what is wrong, from a probe of `endpoint`.
async fn diagnose(endpoint: &RedactedUrl, within: Duration) -> Option<String> {
    let https = endpoint.starts_with("https://");
    match (probe(endpoint, within).await?, https) {
        (Peer::Http1, _) => Some(format!(
            "the endpoint answered HTTP/1.x, not gRPC: is {endpoint} etcd's client port?"
        )),
        (Peer::PlainHttp2, true) => Some(format!(
            "TLS handshake to a plain-text endpoint: {endpoint} speaks plain-text HTTP/2; \
             use http:// (without --etcd.cacert), or enable TLS on etcd"
        )),
        (Peer::TlsOrSilent, false) => Some(format!(
            "plain-text to a TLS port: {endpoint} closed the connection on plain-text HTTP/2, \
             as a TLS port does; use https:// and --etcd.cacert"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(st: tonic::Status) -> Reason {
        classify(
            "Status",
            &etcd_client::Error::GRpcStatus(st),
            Duration::from_millis(500),
        )
        .reason
    }

    #[test]
    fn only_etcds_leader_changed_status_is_retried() {
        let st = |s: tonic::Status| etcd_client::Error::GRpcStatus(s);
        assert!(leader_changed(&st(tonic::Status::unavailable(
            "etcdserver: leader changed"
        ))));
        // The same words with another code, or another Unavailable, are not it.
        assert!(!leader_changed(&st(tonic::Status::internal(
            "etcdserver: leader changed"
        ))));
        assert!(!leader_changed(&st(tonic::Status::unavailable(
            "etcdserver: no leader"
        ))));
    }

    #[test]
    fn statuses_are_classified_by_code_not_text() {
        // tonic's own request timeout: Cancelled with TimeoutExpired's text.
        let expired = tonic::TimeoutExpired(()).to_string();
        assert_eq!(reason(tonic::Status::cancelled(expired)), Reason::Timeout);
        assert_eq!(
            reason(tonic::Status::deadline_exceeded("x")),
            Reason::Timeout
        );
        assert_eq!(reason(tonic::Status::unavailable("x")), Reason::Connect);
        // Words in a message do not decide: "timeout" in an rpc error is an rpc error.
        assert_eq!(
            reason(tonic::Status::invalid_argument("timeout certificate tls")),
            Reason::Rpc
        );
    }

    #[test]
    fn probe_replies_name_the_peer() {
        assert_eq!(peer_from_reply(b""), Peer::TlsOrSilent);
        assert_eq!(
            peer_from_reply(&[0x15, 0x03, 0x03, 0, 2]),
            Peer::TlsOrSilent
        );
        assert_eq!(
            peer_from_reply(&[0, 0, 0x0c, 0x04, 0, 0, 0, 0, 0]),
            Peer::PlainHttp2
        );
        assert_eq!(peer_from_reply(b"HTTP/1.1 400 Bad"), Peer::Http1);
        assert_eq!(peer_from_reply(b"<!DOCTYPE HTML>"), Peer::Http1);
    }
}

//! Why a read from outside failed, as a bounded set: [`Reason`] (the
//! `reason` label of `etcd_readiness_sample_errors_total`, and what code
//! matches on) and [`SampleError`] (a reason and a message for humans). The
//! one HTTP client returns them, every source records them.

/// Why a sample round failed, as a bounded set: the `reason` label of
/// `etcd_readiness_sample_errors_total` and what code matches on. The words
/// are in the dashboard's description of that panel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    Timeout,
    Connect,
    Tls,
    /// The peer spoke another protocol (HTTP/1 at a gRPC port, TLS vs plain).
    Protocol,
    /// An HTTP status other than 2xx.
    Status,
    Parse,
    /// A body over `--source.max-body-bytes`.
    TooLarge,
    /// An etcd RPC error that is none of the above.
    Rpc,
    Dns,
    Nxdomain,
    Servfail,
    /// A scrape source's selector matched no series or too many.
    Mismatch,
    /// etcd refused the exporter's login, which waits its backoff.
    Login,
}

impl Reason {
    /// Every reason, for the zero-valued error series a source starts with.
    pub const ALL: [Reason; 13] = [
        Reason::Timeout,
        Reason::Connect,
        Reason::Tls,
        Reason::Protocol,
        Reason::Status,
        Reason::Parse,
        Reason::TooLarge,
        Reason::Rpc,
        Reason::Dns,
        Reason::Nxdomain,
        Reason::Servfail,
        Reason::Mismatch,
        Reason::Login,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Timeout => "timeout",
            Reason::Connect => "connect",
            Reason::Tls => "tls",
            Reason::Protocol => "protocol",
            Reason::Status => "status",
            Reason::Parse => "parse",
            Reason::TooLarge => "too_large",
            Reason::Rpc => "rpc",
            Reason::Dns => "dns",
            Reason::Nxdomain => "nxdomain",
            Reason::Servfail => "servfail",
            Reason::Mismatch => "mismatch",
            Reason::Login => "login",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a sample round failed: a [`Reason`] for metrics and code, a
/// `message` for humans (it goes into the store and logs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct SampleError {
    pub reason: Reason,
    pub message: String,
}

impl SampleError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        SampleError {
            reason,
            message: message.into(),
        }
    }
}

//! The server's limits (the `--web.*` flags) and the connection cap, kept
//! below the soft `RLIMIT_NOFILE` with descriptors in reserve, so `accept`
//! never runs out of file descriptors.

use std::io;
use std::time::Duration;

/// HTTP/2 streams a client may have open at once on one connection
/// (`SETTINGS_MAX_CONCURRENT_STREAMS`; hyper's default is 200). Our clients
/// (kubelet, Prometheus) use HTTP/1 and one request at a time.
pub const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 16;
/// Largest HTTP/1 read buffer, which bounds a request head and the pipelined
/// requests buffered behind the one being answered (hyper answers pipelined
/// requests one at a time).
pub const HTTP1_MAX_BUF: usize = 64 * 1024;

/// Limits of the server, from the `--web.*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most connections held open at once (before clamping to the fd limit).
    pub max_connections: usize,
    /// A request head must arrive within this time from its first byte (from
    /// the accept for the first request of a connection, from the end of the
    /// previous request for a head that arrived while it was answered).
    pub read_header_timeout: Duration,
    /// A connection without a request in flight is closed after this time.
    pub idle_timeout: Duration,
    /// After the shutdown signal, in-flight requests get this long to finish;
    /// then every connection is closed.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            read_header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

/// File descriptors left for everything but client connections (the etcd
/// and sidecar clients, DNS, inotify, the policy file, logs): a quarter of
/// the soft limit, between 16 and 128.
pub fn fd_reserve(nofile_soft: u64) -> u64 {
    (nofile_soft / 4).clamp(16, 128)
}

/// The connection cap for `requested` under a soft `RLIMIT_NOFILE` of
/// `nofile_soft`: never more than the limit minus [`fd_reserve`], at least 1.
pub fn effective_cap(requested: usize, nofile_soft: u64) -> usize {
    let room = nofile_soft.saturating_sub(fd_reserve(nofile_soft)).max(1);
    requested
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (where the kernel allows);
/// returns the soft limit now in force.
pub fn raise_nofile_limit() -> io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// The soft `RLIMIT_NOFILE` in force (`u64::MAX` when unlimited or unknown).
pub fn nofile_soft_limit() -> u64 {
    rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

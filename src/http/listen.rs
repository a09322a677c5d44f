//! Listen addresses (`--web.listen-address`, `--web.probe-listen-address`)
//! and binding them. `:PORT` (an empty host) listens on both address
//! families, as Go's exporters do: one IPv6 socket with `IPV6_V6ONLY` off,
//! which also accepts IPv4 (as `::ffff:a.b.c.d`), so that the kubelet's
//! probe and Prometheus reach the exporter on an IPv6 single-stack or
//! dual-stack cluster; where the kernel has no IPv6 it falls back to IPv4
//! only, and says so in the log. `[::]:PORT` is that socket without the
//! fallback, `0.0.0.0:PORT` IPv4 only, any other address exactly itself.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

/// What a listen flag asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// `:PORT`: every interface of both families (IPv4 only without IPv6).
    AnyFamily(u16),
    /// `HOST:PORT` with an IP address; `[::]` also takes IPv4.
    Exact(SocketAddr),
}

impl ListenAddr {
    /// `HOST:PORT` with an IP address (IPv6 in brackets), or `:PORT`.
    pub fn parse(s: &str) -> Result<Self, std::net::AddrParseError> {
        match s.strip_prefix(':') {
            Some(port) if !port.contains(':') => {
                // The port's own errors, in the standard library's words.
                let addr: SocketAddr = format!("0.0.0.0:{port}").parse()?;
                Ok(ListenAddr::AnyFamily(addr.port()))
            }
            _ => s.parse().map(ListenAddr::Exact),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            ListenAddr::AnyFamily(p) => *p,
            ListenAddr::Exact(a) => a.port(),
        }
    }

    /// Bind and listen (non-blocking, for tokio).
    pub fn bind(&self) -> io::Result<std::net::TcpListener> {
        match *self {
            ListenAddr::Exact(a) if a.ip() == Ipv6Addr::UNSPECIFIED => bind(a, Some(false)),
            ListenAddr::Exact(a) => bind(a, None),
            ListenAddr::AnyFamily(port) => {
                let dual = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
                match bind(dual, Some(false)) {
                    Err(e) if no_ipv6(&e) => {
                        tracing::warn!(
                            port,
                            error = %e,
                            "this kernel has no IPv6: :{port} listens on IPv4 only"
                        );
                        bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), None)
                    }
                    r => r,
                }
            }
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::AnyFamily(p) => write!(f, ":{p}"),
            ListenAddr::Exact(a) => write!(f, "{a}"),
        }
    }
}

/// The errors of a kernel (or a container) without IPv6.
fn no_ipv6(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EADDRNOTAVAIL)
    )
}

/// A listening socket on `addr`; for IPv6, `only_v6` sets `IPV6_V6ONLY`
/// (else the kernel's default, `net.ipv6.bindv6only`). `SO_REUSEADDR` and
/// the backlog as tokio's `TcpListener::bind`.
fn bind(addr: SocketAddr, only_v6: Option<bool>) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let (SocketAddr::V6(_), Some(v6)) = (addr, only_v6) {
        socket.set_only_v6(v6)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_both_families_and_addresses_are_themselves() {
        assert_eq!(
            ListenAddr::parse(":9379").unwrap(),
            ListenAddr::AnyFamily(9379)
        );
        assert_eq!(
            ListenAddr::parse("[::1]:9380").unwrap(),
            ListenAddr::Exact("[::1]:9380".parse().unwrap())
        );
        assert_eq!(
            ListenAddr::parse("0.0.0.0:1").unwrap(),
            ListenAddr::Exact("0.0.0.0:1".parse().unwrap())
        );
        for bad in [":", "::9379", ":99999", ":x", "localhost:1", ""] {
            assert!(ListenAddr::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ListenAddr::AnyFamily(9379).to_string(), ":9379");
    }

    /// `:0` accepts on 127.0.0.1 and on ::1 (where the kernel has IPv6).
    #[test]
    fn a_bare_port_accepts_ipv4_and_ipv6_on_loopback() {
        let l = ListenAddr::AnyFamily(0).bind().unwrap();
        let port = l.local_addr().unwrap().port();
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("IPv4");
        if l.local_addr().unwrap().is_ipv6() {
            std::net::TcpStream::connect(("::1", port)).expect("IPv6");
        }
    }
}

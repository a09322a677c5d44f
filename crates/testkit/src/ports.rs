//! Free loopback ports, the one way the tests get them.
//!
//! A server that runs in this process binds `127.0.0.1:0` and reads its
//! address back (the in-process exporter, the hostile servers, the backup
//! sidecar stand-in): no race at all, and no helper here is needed. A child
//! process (etcd, Prometheus, dnsmasq, the exporter binary) must be told its
//! port on the command line, so the port is found here by binding and then
//! released for the child to bind. [`free_ports`] (the library's
//! `localcluster` helper) holds every listener until all `n` ports are
//! chosen and takes them below the kernel's ephemeral range, where no
//! outgoing connection's source port can take one between the release and
//! the child's bind; a child that still loses a race fails to bind and
//! says so in its log (every launcher prints it).

use std::net::UdpSocket;

/// `n` distinct free loopback TCP ports (the library's `localcluster`
/// helper).
pub use etcd_readiness_exporter::cmd::localcluster::free_ports;

/// One free loopback TCP port, for a child to bind.
pub fn free_tcp_port() -> u16 {
    free_ports(1).expect("a free 127.0.0.1 port")[0]
}

/// A port free for both UDP and TCP on 127.0.0.1 (dnsmasq binds both).
pub fn free_udp_tcp_port() -> u16 {
    for _ in 0..50 {
        let port = free_tcp_port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free for both UDP and TCP");
}

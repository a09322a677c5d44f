//! A real dnsmasq answering TXT records on a free loopback port, for the
//! DNS owner source: `/usr/sbin/dnsmasq` (Debian package dnsmasq-base).

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::ports::free_udp_tcp_port;
use crate::process::ChildGuard;
use crate::wait::poll;

/// dnsmasq on 127.0.0.1:`port` answering for `example.test` only (other names
/// there are NXDOMAIN), with the given TXT records. Killed on drop.
pub struct Dnsmasq {
    pub addr: SocketAddr,
    pub guard: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    pub async fn start(txt: &[(&str, &str)]) -> Dnsmasq {
        Dnsmasq::start_on(free_udp_tcp_port(), txt).await
    }

    /// Start on a given port (e.g. again after a kill, with other records).
    pub async fn start_on(port: u16, txt: &[(&str, &str)]) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("/usr/sbin/dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--local=/example.test/",
            "--user=root",
            "--log-facility=-",
        ])
        .arg(format!("--port={port}"))
        .arg(format!(
            "--pid-file={}",
            dir.path().join("dnsmasq.pid").display()
        ));
        for (name, value) in txt {
            // No shell here: quotes would reach dnsmasq and become part of the text.
            cmd.arg(format!("--txt-record={name},{value}"));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start /usr/sbin/dnsmasq (Debian package dnsmasq-base)");
        let mut guard = ChildGuard::new(child, "dnsmasq");
        // Ready when its UDP port is taken.
        let bound = poll(Duration::from_secs(10), Duration::from_millis(20), || {
            let exited = guard.try_wait();
            let free = UdpSocket::bind(("127.0.0.1", port)).is_ok();
            async move {
                if let Some(status) = exited {
                    panic!("dnsmasq exited early: {status}");
                }
                if free { Err(()) } else { Ok(()) }
            }
        })
        .await;
        assert!(bound.is_ok(), "dnsmasq did not bind 127.0.0.1:{port}");
        Dnsmasq {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            guard,
            _dir: dir,
        }
    }
}

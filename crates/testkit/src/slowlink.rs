//! A slow link on loopback: a TCP relay that holds every chunk it carries
//! for a fixed delay, in each direction, before passing it on — a one-way
//! latency of that delay, as between distant zones, without a kernel
//! qdisc (this kernel has no netem). Chunks are pipelined, not serialised:
//! the delay adds latency, not a throughput limit. [`slow_cluster`] puts
//! one in front of every member's peer port, so raft's traffic crosses it
//! while clients reach the members directly.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::etcd::EtcdCluster;
use etcd_readiness_policy::sync::TolerantLock;

/// Chunks in flight one way on one connection before reading waits (a
/// bound on what a relay holds: 64 × 64 KiB).
const IN_FLIGHT: usize = 64;
const CHUNK: usize = 64 * 1024;

/// A relay listening on a loopback port of its own; connections are
/// accepted once [`SlowLink::forward`] gave it a destination. Dropping it
/// stops it and every connection it carries.
pub struct SlowLink {
    listener: Option<TcpListener>,
    port: u16,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl SlowLink {
    /// Bind a loopback port for the relay.
    pub async fn bind() -> std::io::Result<SlowLink> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        Ok(SlowLink {
            listener: Some(listener),
            port,
            tasks: Arc::default(),
        })
    }

    /// The port to dial.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Relay every connection to `to`, each chunk held for `delay` each way.
    pub fn forward(&mut self, to: SocketAddr, delay: Duration) {
        let Some(listener) = self.listener.take() else {
            return;
        };
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let conn = tokio::spawn(relay(client, to, delay));
                let mut t = tasks.locked();
                t.retain(|h| !h.is_finished());
                t.push(conn);
            }
        });
        self.tasks.locked().push(accept);
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        for t in self.tasks.locked().iter() {
            t.abort();
        }
    }
}

async fn relay(client: TcpStream, to: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(to).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(one_way(cr, sw, delay), one_way(sr, cw, delay));
}

/// Read chunks from `from` and write each to `to` `delay` after it was read.
async fn one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = tokio::time::Instant::now() + delay;
                    if tx.send((due, buf[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

/// A cluster of `n` whose peer traffic crosses a [`SlowLink`] of `delay`
/// one way in front of each member's peer port, with etcd's default timings
/// (100 ms heartbeat, 1 s election timeout: a slow link needs them more than
/// the test timings' fast failover). The links live as long as the cluster
/// they are returned with.
pub async fn slow_cluster(n: usize, delay: Duration) -> (EtcdCluster, Vec<SlowLink>) {
    let mut links = Vec::with_capacity(n);
    for _ in 0..n {
        links.push(SlowLink::bind().await.expect("bind a slow link"));
    }
    let ports = links.iter().map(SlowLink::port).collect();
    let cluster = EtcdCluster::builder(n)
        .timings(100, 1000)
        .advertise_peers(ports)
        .start();
    for (link, m) in links.iter_mut().zip(&cluster.members) {
        link.forward(SocketAddr::from(([127, 0, 0, 1], m.peer_port)), delay);
    }
    (cluster, links)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_link_carries_bytes_both_ways_in_order_after_its_delay() {
        let echo = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let to = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                }
            }
        });
        let mut link = SlowLink::bind().await.unwrap();
        link.forward(to, Duration::from_millis(30));
        let mut c = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        let sent = tokio::time::Instant::now();
        c.write_all(b"ping").await.unwrap();
        c.write_all(b"pong").await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < 8 {
            let n = c.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"pingpong");
        // Held each way: a round trip of at least twice the delay.
        assert!(sent.elapsed() >= Duration::from_millis(60));
    }
}

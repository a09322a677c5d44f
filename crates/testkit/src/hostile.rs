//! A hostile HTTP/1.1 server for the robustness tests: per path it answers a
//! fixed body, a body with a huge declared length streamed on the fly, an
//! endless chunked body, or a compressed body, and counts the bytes it wrote
//! on each connection (an upper bound of what the client read). Nothing big
//! is ever allocated: bodies are generated chunk by chunk. Also: the RSS of
//! this process, a gzip bomb, and [`Silent`], a server that accepts and
//! never answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one path answers.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// 200 with this body and its length.
    Fixed(Vec<u8>),
    /// 200 declaring `Content-Length: n`, then Prometheus comment lines
    /// generated on the fly until `n` bytes or the client goes away.
    Declared(u64),
    /// 200, `Transfer-Encoding: chunked`, comment lines forever.
    EndlessChunked,
    /// 200 with `Content-Encoding: gzip` and these (compressed) bytes.
    Gzip(Vec<u8>),
}

#[derive(Default)]
struct Shared {
    paths: Mutex<HashMap<String, Behaviour>>,
    /// Most bytes written on a single connection.
    max_conn_bytes: AtomicU64,
    total_bytes: AtomicU64,
    connections: AtomicU64,
}

pub struct HostileServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl HostileServer {
    pub async fn start() -> HostileServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let sh = sh.clone();
                tokio::spawn(async move {
                    sh.connections.fetch_add(1, Ordering::Relaxed);
                    let n = serve(conn, &sh).await;
                    sh.max_conn_bytes.fetch_max(n, Ordering::Relaxed);
                    sh.total_bytes.fetch_add(n, Ordering::Relaxed);
                });
            }
        });
        HostileServer { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set(&self, path: &str, b: Behaviour) {
        self.shared
            .paths
            .lock()
            .unwrap()
            .insert(path.to_string(), b);
    }

    /// Most bytes written on one connection so far.
    pub fn max_conn_bytes(&self) -> u64 {
        self.shared.max_conn_bytes.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request, one answer, close. Returns the bytes written.
async fn serve(mut conn: tokio::net::TcpStream, sh: &Shared) -> u64 {
    let Some(path) = request_path(&mut conn).await else {
        return 0;
    };
    let behaviour = sh.paths.lock().unwrap().get(&path).cloned();
    let mut out = Counted {
        conn: &mut conn,
        written: 0,
    };
    match behaviour {
        None => {
            out.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
        }
        Some(Behaviour::Fixed(body)) => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if out.send(h.as_bytes()).await {
                out.send(&body).await;
            }
        }
        Some(Behaviour::Gzip(body)) => {
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if out.send(h.as_bytes()).await {
                out.send(&body).await;
            }
        }
        Some(Behaviour::Declared(n)) => out.declared(n).await,
        Some(Behaviour::EndlessChunked) => out.endless_chunked().await,
    }
    let written = out.written;
    let _ = conn.shutdown().await;
    written
}

/// The path of the request on `conn` (its head read up to 16 KiB), or
/// `None` when the client closed or failed first.
async fn request_path(conn: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    Some(text.split_whitespace().nth(1).unwrap_or("/").to_string())
}

/// 64 KiB of `# xxxx...\n` lines: valid Prometheus text, no samples.
fn filler() -> Vec<u8> {
    let mut chunk = Vec::with_capacity(64 * 1024);
    while chunk.len() < 64 * 1024 {
        chunk.extend_from_slice(b"# ");
        chunk.extend_from_slice(&[b'x'; 125]);
        chunk.push(b'\n');
    }
    chunk
}

/// A connection that counts the bytes written to it.
struct Counted<'c> {
    conn: &'c mut tokio::net::TcpStream,
    written: u64,
}

impl Counted<'_> {
    /// Write all of `bytes`; false once the client is gone.
    async fn send(&mut self, bytes: &[u8]) -> bool {
        if self.conn.write_all(bytes).await.is_err() {
            return false;
        }
        self.written += bytes.len() as u64;
        true
    }

    /// `Content-Length: n`, then up to `n` bytes of filler.
    async fn declared(&mut self, n: u64) {
        let h = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
        );
        if !self.send(h.as_bytes()).await {
            return;
        }
        let chunk = filler();
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len() as u64) as usize;
            if !self.send(&chunk[..k]).await {
                break;
            }
            left -= k as u64;
        }
    }

    /// Chunks of filler without end: bounded only by the client, which must
    /// stop reading.
    async fn endless_chunked(&mut self) {
        let h = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        if !self.send(h.as_bytes()).await {
            return;
        }
        let chunk = filler();
        let size = format!("{:x}\r\n", chunk.len());
        loop {
            if !self.send(size.as_bytes()).await
                || !self.send(&chunk).await
                || !self.send(b"\r\n").await
            {
                break;
            }
        }
    }
}

/// This process's resident set size in KiB (`VmRSS` of /proc/self/status).
pub fn rss_kib() -> u64 {
    rss_kib_of("self")
}

/// `VmRSS` of /proc/<pid>/status in KiB.
pub fn rss_kib_of(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// A real gzip bomb made by the system's `gzip`: `mib` MiB of zeros
/// compressed (about 1 KiB per MiB).
pub fn gzip_bomb(mib: u64) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let zeros = vec![0u8; 1024 * 1024];
        for _ in 0..mib {
            stdin.write_all(&zeros).unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    out.stdout
}
/// A TCP server that accepts connections and never answers. Stops on drop.
pub struct Silent {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    pub async fn start() -> Silent {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        Silent { url, task }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

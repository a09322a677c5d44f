//! How an accepted connection's bytes are read: plain, or TLS with the
//! configuration in force at the accept; the handshake, and the `400` a
//! plain HTTP request to a TLS port gets.

use std::sync::Arc;

use tokio::net::TcpStream;

use super::super::metrics::ConnectionMetrics;

/// The rustls configuration for the next connection (read at each accept).
pub type TlsConfigSource = Arc<dyn Fn() -> Option<Arc<rustls::ServerConfig>> + Send + Sync>;

/// How the bytes of an accepted connection are read.
#[derive(Clone, Default)]
pub enum Transport {
    /// HTTP/1 or h2c directly on the socket.
    #[default]
    Plain,
    /// TLS first, with the configuration the source gives at accept time
    /// (`None` closes the connection).
    Tls(TlsConfigSource),
}

/// What a plain HTTP request to a TLS port gets back before the close (the
/// words Go's server uses, so users recognise them).
const PLAIN_HTTP_TO_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The TLS handshake of one accepted connection with `config`. A client
/// whose first byte is not a TLS handshake record but an ASCII letter is
/// speaking plain HTTP: it gets a short `400` and the close.
pub(super) async fn tls_handshake(
    tcp: TcpStream,
    config: Option<Arc<rustls::ServerConfig>>,
    metrics: ConnectionMetrics,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let config = config?;
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(1) if first[0].is_ascii_alphabetic() => {
            use tokio::io::AsyncWriteExt;
            metrics.tls_handshake_failed();
            let mut tcp = tcp;
            let _ = tcp.write_all(PLAIN_HTTP_TO_TLS).await;
            let _ = tcp.shutdown().await;
            return None;
        }
        Ok(1) => {}
        _ => return None,
    }
    match tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
        Ok(s) => Some(s),
        Err(e) => {
            metrics.tls_handshake_failed();
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
    }
}

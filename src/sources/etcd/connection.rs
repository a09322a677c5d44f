//! The one gRPC client of this member ([`Shared::client`]: made again only
//! when the TLS files or the password changed or a handshake was refused,
//! kept after other errors as tonic reconnects by itself),
//! the Watch stream that stands for the connection, and what a loss of it
//! does to the store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::{LABEL, Shared};
use crate::sources::{Reason, SampleError};
use etcd_readiness_policy::signals::Value;
use etcd_readiness_policy::sync::TolerantLock;

impl Shared {
    /// The client for the next call: built again when the TLS files or the
    /// password changed, or after a handshake failed (a refused certificate).
    pub(super) async fn client(&self) -> Result<Client, SampleError> {
        let mut slot = self.client.lock().await;
        let material = self.config.tls.as_ref().map(|t| t.current());
        let password = self.config.auth.as_ref().map(|a| a.current());
        let generation = (
            material.as_ref().map_or(0, |m| m.generation),
            password.as_ref().map_or(0, |p| p.generation),
        );
        let refused = self.tls_refused.swap(false, Ordering::Relaxed);
        if let Some((built, c)) = &*slot
            && *built == generation
            && !refused
        {
            return Ok(c.clone());
        }
        let cfg = &self.config;
        // The client's own request timeout leaves room for the contention
        // credit: the call's own deadline decides when it has taken too long.
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.client_timeout())
            .with_connect_timeout(cfg.connect_timeout());
        if let Some(tls) = &material {
            let mut t = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                t = t.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(t);
        }
        if let (Some(auth), Some(p)) = (&cfg.auth, &password) {
            // etcd-client authenticates at connect, and on "invalid auth
            // token" (a simple token unused for 5 minutes expires) gets a new
            // token and sends the call once more.
            opts = opts
                .with_user(auth.user(), p.password.expose())
                .with_auto_token_refresh(true);
        }
        let endpoint = cfg.endpoint.expose_for_request().to_string();
        let client = self
            // Boxed: tonic's connect future is large, and every future that
            // may connect (all of them) would carry it inline.
            .bounded(
                "connect",
                Box::pin(async move { Client::connect([endpoint], Some(opts)).await }),
            )
            .await?;
        // Keep the client even after errors but TLS ones: tonic reconnects
        // by itself, and a fresh client would not help a member that does
        // not answer.
        *slot = Some((generation, client.clone()));
        Ok(client)
    }

    /// `r` of a call: a TLS failure has the files re-read and the next call
    /// build a new client; etcd's refusals for want of a user or a
    /// permission are explained.
    pub(super) fn after<T>(&self, mut r: Result<T, SampleError>) -> Result<T, SampleError> {
        if let (Err(e), Some(tls)) = (&r, &self.config.tls)
            && e.reason == Reason::Tls
        {
            self.tls_refused.store(true, Ordering::Relaxed);
            tls.refused(self.clock.now());
        }
        if let Err(e) = &mut r
            && let Some(hint) =
                crate::sources::etcd_auth::hint(&e.message, self.config.auth.is_some())
        {
            e.message = format!("{} ({hint})", e.message);
        }
        r
    }

    /// The connection broke: every signal is unknown now, with `why`.
    pub(super) fn lost(&self, why: &str) {
        let why = self.config.endpoint.scrub(why);
        let at = self.clock.now();
        {
            let mut epoch = self.epoch.locked();
            *epoch += 1;
            let msg: Arc<str> = Arc::from(format!("connection to etcd lost: {why}"));
            for id in self.ids.all() {
                self.store.record_err(id, msg.clone(), at);
            }
            // The member cannot be reached: that is known, not unknown.
            self.store
                .record_ok(self.ids.etcd_up, Value::Bool(false), at);
        }
        self.metrics.error(LABEL, Reason::Connect);
        tracing::info!(endpoint = %self.config.endpoint, "connection to etcd lost: {why}");
        self.round_finished();
    }

    /// Open a watch on the probe key and wait for etcd's "created" answer.
    pub(super) async fn open_watch(&self) -> Result<etcd_client::WatchStream, SampleError> {
        let cfg = &self.config;
        let mut c = self.after(self.client().await)?;
        let key = cfg.probe_key.clone();
        self.metrics.request(LABEL, "watch");
        let opened = self
            .bounded("watch", async move { c.watch(key, None).await })
            .await;
        let mut stream = self.after(opened)?;
        match self.bounded("watch", stream.message()).await? {
            Some(r) if r.created() => Ok(stream),
            _ => Err(SampleError::new(
                Reason::Rpc,
                "watch: the member did not create the watch",
            )),
        }
    }
}

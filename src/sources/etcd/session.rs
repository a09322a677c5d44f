//! The member's one gRPC client and the login it carries, the session
//! every call of the source is made in ([`Shared::session`]).
//!
//! The client is made again only when the TLS files changed or a handshake
//! was refused, and kept after other errors, as tonic reconnects by
//! itself. Where etcd's authentication is on, the exporter logs in itself
//! (etcd-client's own refresh, which logged in again on every refused
//! call with no pause, is off), at most as [`super::login::Logins`] allows:
//!
//! - the session that works is kept when the password file changes;
//! - a call whose token etcd refuses (expired, revoked by a password
//!   change, older than an auth change: the errors on which etcd's own Go
//!   client logs in again) logs in again and is sent once more, so a
//!   rotation is not seen as a failed call;
//! - a login tries the newest password, then the one etcd last accepted;
//! - a refused login waits its backoff: meanwhile a call fails at once,
//!   naming the refusal and when the next login is tried, and costs etcd
//!   nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::deadlines::Failed;
use super::errors::{login_refused, token_refused};
use super::login::{FIRST_BACKOFF, Logins, Plan};
use super::{LABEL, Shared};
use crate::sources::etcd_auth::{Current, EtcdAuth, LoginMetrics, LoginResult, Who};
use crate::sources::tls_material::Material;
use crate::sources::{Reason, SampleError};
use etcd_readiness_policy::text::fmt_duration;

/// The client and its login, behind the source's one async lock.
#[derive(Default)]
pub(super) struct Slot {
    session: Option<Session>,
    logins: Logins,
    /// The user and password etcd last accepted: the fallback.
    accepted: Option<Arc<Current>>,
    /// Counts the logins accepted (0: none yet).
    logged_in: u64,
    /// etcd refused the last login, saying this.
    refusal: Option<String>,
}

struct Session {
    /// The generation of the TLS material the client was built with.
    tls: u64,
    client: Client,
    /// The login in force on this client; `None` until one is accepted
    /// (or etcd said its authentication is off).
    login: Option<u64>,
}

/// A client ready for a call, and the login it carries.
pub(super) struct Ready {
    pub client: Client,
    login: u64,
}

impl Shared {
    /// The client for the next call, logged in where authentication is on.
    pub(super) async fn client(&self) -> Result<Client, SampleError> {
        Box::pin(self.session(None)).await.map(|r| r.client)
    }

    /// The session for the next call: [`Shared::session`], its failure
    /// explained.
    pub(super) async fn ready(&self) -> Result<Ready, SampleError> {
        // Boxed, as every call awaits it: connecting and logging in would
        // make each call's future (and its stack) as large as theirs.
        self.after(Box::pin(self.session(None)).await)
    }

    /// `call` on this member's client ([`Shared::in_session`]).
    pub(super) async fn with_session<T, F, Fut>(&self, call: F) -> Result<T, Failed>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let ready = self.ready().await?;
        self.in_session(ready, call).await
    }

    /// `call` on `ready`'s client; when etcd refuses its token, a new login
    /// (under the backoff) and `call` once more.
    pub(super) async fn in_session<T, F, Fut>(&self, ready: Ready, call: F) -> Result<T, Failed>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        match call(ready.client).await {
            Err(e) if self.config.auth.is_some() && token_refused(&e) => {
                tracing::debug!("etcd refused the session's token ({e}): logging in again");
                // The login is the exporter's pause, not the member's: the
                // calls waiting for it are sent again, pending from then and
                // trusted while the login may take.
                self.resent(self.config.timeout);
                let again = self.after(Box::pin(self.session(Some(ready.login))).await)?;
                self.resent(std::time::Duration::ZERO);
                Ok(call(again.client).await?)
            }
            r => Ok(r?),
        }
    }

    /// Every call of this source in flight is sent again now, its last
    /// answer trusted for at least `at_least`
    /// ([`etcd_readiness_policy::signals::SignalStore::resend_pending`]).
    fn resent(&self, at_least: std::time::Duration) {
        let now = self.clock.now();
        for id in self.ids.all() {
            self.store.resend_pending(id, now, at_least);
        }
    }

    /// The session: a client built when there is none or the TLS material
    /// changed or was refused, and logged in when it is not; `refused`: the
    /// login whose token etcd just refused, given up unless a newer one is
    /// in force already.
    async fn session(&self, refused: Option<u64>) -> Result<Ready, SampleError> {
        let mut slot = self.client.lock().await;
        let material = self.config.tls.as_ref().map(|t| t.current());
        let tls = material.as_ref().map_or(0, |m| m.generation);
        let tls_refused = self.tls_refused.swap(false, Ordering::Relaxed);
        if tls_refused || !matches!(&slot.session, Some(s) if s.tls == tls) {
            let client = self.connect(material.as_deref()).await?;
            slot.session = Some(Session {
                tls,
                client,
                login: None,
            });
        }
        let session = slot.session.as_mut().expect("made above");
        if refused.is_some() && session.login == refused {
            session.login = None;
        }
        match (&self.config.auth, session.login) {
            (Some(auth), None) => self.log_in(&mut slot, auth).await,
            (_, login) => Ok(Ready {
                client: session.client.clone(),
                login: login.unwrap_or(0),
            }),
        }
    }

    /// A client with no login: tonic connects when the first call is made.
    async fn connect(&self, tls: Option<&Material>) -> Result<Client, SampleError> {
        let cfg = &self.config;
        // The client's own request timeout leaves room for the contention
        // credit: the call's own deadline decides when it has taken too long.
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.client_timeout())
            .with_connect_timeout(cfg.connect_timeout());
        if let Some(tls) = tls {
            let mut t = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                t = t.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(t);
        }
        let endpoint = cfg.endpoint.expose_for_request().to_string();
        // Boxed: tonic's connect future is large, and every future that may
        // connect (all of them) would carry it inline.
        self.bounded(
            "connect",
            Box::pin(async move { Client::connect([endpoint], Some(opts)).await }),
        )
        .await
    }

    /// Log the session's client in, as the backoff allows: the newest pair,
    /// then the one etcd last accepted.
    async fn log_in(&self, slot: &mut Slot, auth: &EtcdAuth) -> Result<Ready, SampleError> {
        let newest = auth.current();
        let now = self.clock.now();
        let order = match slot.logins.plan(now, newest.generation) {
            Plan::Try(order) => order,
            Plan::Wait { until, refusals } => {
                return Err(slot.waiting(&newest, until - now, refusals));
            }
        };
        let client = slot.session.as_ref().expect("a session").client.clone();
        let mut last = None;
        for generation in order {
            let pair = match &slot.accepted {
                Some(a) if a.generation == generation => a.clone(),
                _ => newest.clone(),
            };
            let now = self.clock.now();
            match self.attempt(&client, &pair).await {
                Ok(()) => {
                    slot.logins.accepted(now, generation);
                    slot.accepted = Some(pair);
                    slot.refusal = None;
                    slot.logged_in += 1;
                    let login = slot.logged_in;
                    slot.session.as_mut().expect("a session").login = Some(login);
                    self.logins().login(LoginResult::Accepted);
                    self.logins().backoff(0, None);
                    return Ok(Ready { client, login });
                }
                Err((true, e)) => {
                    slot.logins.refused(now, generation, fastrand::f64());
                    self.logins().login(LoginResult::Refused);
                    let why = e.message.strip_prefix("login: ").unwrap_or(&e.message);
                    slot.refusal = Some(why.to_string());
                    last = Some(e);
                }
                Err((false, e)) => {
                    let retry = match e.reason {
                        Reason::Timeout => FIRST_BACKOFF,
                        _ => self.config.retry(),
                    };
                    slot.logins.unanswered(now, retry);
                    self.logins().login(LoginResult::Unanswered);
                    return Err(e);
                }
            }
        }
        let refusals = slot.logins.refusals_of(newest.generation);
        let wait = slot.logins.wait(self.clock.now(), newest.generation);
        self.logins()
            .backoff(refusals, Some(self.clock.wall() + wait));
        Err(last.expect("a plan tries at least one password"))
    }

    /// One login of `pair` on `client`: `Err((refused, why))`, `refused`
    /// when etcd answered no.
    async fn attempt(&self, client: &Client, pair: &Current) -> Result<(), (bool, SampleError)> {
        let mut c = client.clone();
        let creds = (pair.user.clone(), pair.password.expose().to_string());
        self.metrics.request(LABEL, "authenticate");
        let mut refused = false;
        let mut off = false;
        let r = self
            .bounded("login", async {
                match c.update_user(Some(creds)).await {
                    // etcd's authentication is off: the calls need no token.
                    Err(etcd_client::Error::GRpcStatus(st))
                        if st.message().contains("authentication is not enabled") =>
                    {
                        off = true;
                        Ok(())
                    }
                    Err(e) => {
                        refused = login_refused(&e);
                        Err(e)
                    }
                    Ok(()) => Ok(()),
                }
            })
            .await;
        if off {
            tracing::info!(
                "etcd's authentication is off: calling without a login (--etcd.user is used \
                 once it is turned on)"
            );
        }
        // Explained by the caller (`ready`), hint included, once.
        r.map_err(|e| (refused, e))
    }

    fn logins(&self) -> &LoginMetrics {
        &self.login_metrics
    }

    /// Who etcd sees make this source's calls, for its refusals' hints.
    pub(super) fn who(&self) -> Who {
        if let Some(auth) = &self.config.auth {
            return Who::User {
                name: auth.current().user.clone(),
                flag: auth.user_flag(),
            };
        }
        let cn = self.config.tls.as_ref().and_then(|t| {
            let m = t.current();
            let (cert, _) = m.identity.as_ref()?;
            crate::outside::certificate::common_name(cert)
        });
        cn.map_or(Who::Anonymous, |cn| Who::Certificate { cn })
    }
}

impl Slot {
    /// A call while the backoff holds logins: says why and until when.
    fn waiting(&self, newest: &Current, wait: std::time::Duration, refusals: u32) -> SampleError {
        let wait = fmt_duration(wait.as_secs_f64());
        let message = match (refusals, self.refusal.as_deref()) {
            (0, _) | (_, None) => format!("login: the next login in {wait}"),
            (1, Some(why)) => format!(
                "login: etcd refused user {:?} ({why}); the next login in {wait}",
                newest.user
            ),
            (n, Some(why)) => format!(
                "login: etcd refused user {:?} {n} times in a row ({why}); the next login in \
                 {wait}",
                newest.user
            ),
        };
        SampleError::new(Reason::Login, message)
    }
}

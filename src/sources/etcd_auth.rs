//! etcd's own authentication: the user (`--etcd.user`, or `--etcd.user-file`
//! beside the password in the same Secret) and the password in
//! `--etcd.password-file`, held by an [`EtcdAuth`] handle the etcd source
//! logs in with, and kept current by the one reloader, [`LastGood`] of
//! [`PasswordFile`] (inotify on its directory, `..data` swaps included,
//! SIGHUP, the periodic re-read). The user file and the password file are
//! read together, so a Secret swapped to another user is one change, never
//! a new user with the old password. A change carries a generation; the
//! etcd source keeps the session that works and tries the newest pair
//! when etcd next refuses its token or a login (`sources::etcd::login`,
//! `sources::etcd::session`): a Secret updated before etcd costs no outage.
//! [`LoginMetrics`] count the logins and show a backoff.
//!
//! The password is never written out: not in `Debug`, logs or errors, and
//! the reloader's hash of the files is salted per process (an unsalted
//! SHA-256 of a password is a verifier for an offline guess).

use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

use crate::outside::bounded_read::{ReadError, read_bounded};
use crate::reload::{Change, LastGood, Load, Names, Problem, ReloadStatus};

/// The largest password (or user) file read.
pub const MAX_PASSWORD_BYTES: u64 = 4096;

const NAMES: Names = Names {
    what: "etcd password",
    kept: "the previous user and password stay in use",
};

/// Why a password or user file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: ReadError,
    },
    #[error("{flag} {} is not UTF-8", path.display())]
    NotUtf8 { flag: &'static str, path: PathBuf },
    #[error("{flag} {} is empty", path.display())]
    Empty { flag: &'static str, path: PathBuf },
}

impl Problem for PasswordError {}

const PASSWORD_FLAG: &str = "--etcd.password-file";
const USER_FLAG: &str = "--etcd.user-file";

/// A password, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Password {
    /// The one place the password is read: where the client logs in.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The file's text without one trailing newline (as `echo` writes it
    /// and `kubectl create secret --from-file` keeps it).
    fn from_text(path: &Path, text: &str) -> Result<Password, PasswordError> {
        without_newline(PASSWORD_FLAG, path, text).map(Password)
    }
}

/// `text` without one trailing newline (`\n` or `\r\n`); empty is refused.
fn without_newline(flag: &'static str, path: &Path, text: &str) -> Result<String, PasswordError> {
    let t = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(text);
    if t.is_empty() {
        return Err(PasswordError::Empty {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(t.to_string())
}

/// The user and password in use and their generation (bumped by every
/// change of either).
#[derive(Debug)]
pub struct Current {
    pub user: String,
    pub password: Password,
    pub generation: u64,
}

/// Where the user name comes from.
#[derive(Clone, Debug)]
pub enum User {
    /// `--etcd.user`.
    Name(String),
    /// `--etcd.user-file`, read with the password file.
    File(PathBuf),
}

/// The user and password the etcd source authenticates with. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdAuth(Arc<Held>);

#[derive(Debug)]
struct Held {
    user: User,
    file: PathBuf,
    current: ArcSwap<Current>,
}

/// A user and password as read, before they are put in force.
#[derive(Debug)]
pub struct Pair {
    user: String,
    password: Password,
}

impl EtcdAuth {
    /// Read the files now (at start: a problem is an error).
    pub fn load(user: User, file: &Path) -> Result<EtcdAuth, PasswordError> {
        let text = read_text(PASSWORD_FLAG, file)?;
        let pair = pair(&user, file, &text)?;
        Ok(EtcdAuth(Arc::new(Held {
            user,
            file: file.to_path_buf(),
            current: ArcSwap::from_pointee(Current {
                user: pair.user,
                password: pair.password,
                generation: 1,
            }),
        })))
    }

    /// The files read: the user file, if the user comes from one, and the
    /// password file.
    pub fn paths(&self) -> Vec<PathBuf> {
        let user = match &self.0.user {
            User::File(f) => Some(f.clone()),
            User::Name(_) => None,
        };
        user.into_iter().chain([self.0.file.clone()]).collect()
    }

    /// The user and password for the next login.
    pub fn current(&self) -> Arc<Current> {
        self.0.current.load_full()
    }

    /// The flag that names the user, for hints.
    pub fn user_flag(&self) -> &'static str {
        match self.0.user {
            User::Name(_) => "--etcd.user",
            User::File(_) => USER_FLAG,
        }
    }
}

fn read_text(flag: &'static str, path: &Path) -> Result<String, PasswordError> {
    let bytes = read_bounded(path, MAX_PASSWORD_BYTES).map_err(|source| PasswordError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|_| PasswordError::NotUtf8 {
        flag,
        path: path.to_path_buf(),
    })
}

/// The password file's `text` and the user it goes with (read now from
/// its file, when it has one).
fn pair(user: &User, path: &Path, text: &str) -> Result<Pair, PasswordError> {
    let password = Password::from_text(path, text)?;
    let user = match user {
        User::Name(name) => name.clone(),
        User::File(file) => without_newline(USER_FLAG, file, &read_text(USER_FLAG, file)?)?,
    };
    Ok(Pair { user, password })
}

/// A per-process salt for the password's identity.
fn salt() -> &'static [u8; 16] {
    static SALT: OnceLock<[u8; 16]> = OnceLock::new();
    SALT.get_or_init(|| {
        // RandomState is seeded from the OS's randomness.
        let mut out = [0u8; 16];
        for half in out.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        out
    })
}

fn identity(user: &str, p: &Password) -> String {
    let mut sha = Sha256::new();
    sha.update(salt());
    sha.update((user.len() as u64).to_le_bytes());
    sha.update(user.as_bytes());
    sha.update(p.expose().as_bytes());
    hex::encode(sha.finalize())
}

/// `--etcd.password-file` (with `--etcd.user-file`) as a [`Load`].
#[derive(Debug)]
pub struct PasswordFile {
    auth: EtcdAuth,
    status: ReloadStatus,
}

/// The password file's reloader.
pub type PasswordReloader = LastGood<PasswordFile>;

impl PasswordFile {
    pub fn reloader(
        auth: EtcdAuth,
        status: ReloadStatus,
        clock: crate::runtime::clock::Clock,
    ) -> Arc<PasswordReloader> {
        let current = auth.current();
        let in_force = identity(&current.user, &current.password);
        let path = auth.0.file.clone();
        Arc::new(LastGood::new(
            path,
            NAMES,
            PasswordFile { auth, status },
            Some(in_force),
            clock,
        ))
    }
}

impl Load for PasswordFile {
    type Value = Pair;
    type Error = PasswordError;

    fn limit(&self) -> u64 {
        MAX_PASSWORD_BYTES
    }

    fn build(&self, path: &Path, text: String) -> Result<Pair, PasswordError> {
        pair(&self.auth.0.user, path, &text)
    }

    /// Salted: the file's plain SHA-256 would be shown in logs and reload
    /// answers. Covers the user file too.
    fn identity(&self, value: &Pair) -> Option<String> {
        Some(identity(&value.user, &value.password))
    }

    fn reads_other_files(&self) -> bool {
        matches!(self.auth.0.user, User::File(_))
    }

    fn other_files(&self) -> Vec<PathBuf> {
        match &self.auth.0.user {
            User::File(f) => vec![f.clone()],
            User::Name(_) => Vec::new(),
        }
    }

    fn apply(&self, pair: Pair, _: &Change<'_>) -> Result<String, PasswordError> {
        let generation = self.auth.current().generation + 1;
        self.auth.0.current.store(Arc::new(Current {
            user: pair.user,
            password: pair.password,
            generation,
        }));
        Ok(format!(
            "generation {generation}: the session that works is kept; tried when etcd next \
             refuses its token or a login, before the previous pair"
        ))
    }

    fn status(&self) -> &ReloadStatus {
        &self.status
    }
}

/// How a login ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoginLabels {
    pub result: LoginResult,
}

/// `accepted`, `refused` (etcd answered no: a wrong user or password, or
/// authentication off), `unanswered` (unreachable, timed out).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum LoginResult {
    Accepted,
    Refused,
    Unanswered,
}

impl prometheus_client::encoding::EncodeLabelValue for LoginResult {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        encoder.write_str(match self {
            LoginResult::Accepted => "accepted",
            LoginResult::Refused => "refused",
            LoginResult::Unanswered => "unanswered",
        })
    }
}

/// `etcd_readiness_etcd_logins_total`, `…_login_refusals`,
/// `…_login_next_attempt_timestamp_seconds`: what the logins cost etcd and
/// what the backoff is doing.
#[derive(Clone, Debug, Default)]
pub struct LoginMetrics {
    logins: Family<LoginLabels, Counter>,
    refusals: Gauge,
    next: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl LoginMetrics {
    pub fn register(registry: &mut Registry) -> LoginMetrics {
        let m = LoginMetrics::default();
        registry.register(
            "etcd_readiness_etcd_logins",
            "Logins to etcd as --etcd.user, by result (each costs etcd a bcrypt hash)",
            m.logins.clone(),
        );
        registry.register(
            "etcd_readiness_etcd_login_refusals",
            "Logins etcd refused in a row with the password now in --etcd.password-file (0 once one is accepted)",
            m.refusals.clone(),
        );
        registry.register(
            "etcd_readiness_etcd_login_next_attempt_timestamp_seconds",
            "Unix time before which no login is tried, after a refused or unanswered one (0: none waits)",
            m.next.clone(),
        );
        m
    }

    /// A login ended with `result`.
    pub fn login(&self, result: LoginResult) {
        self.logins.get_or_create(&LoginLabels { result }).inc();
    }

    /// After a login: `refusals` of the newest password in a row, and the
    /// wall time before which no other is tried (`None`: at once).
    pub fn backoff(&self, refusals: u32, until: Option<SystemTime>) {
        self.refusals.set(i64::from(refusals));
        let t = until
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        self.next.set(t);
    }
}

/// `etcd_readiness_etcd_password_file_*`, the password file's reload status.
pub fn register_status(registry: &mut Registry) -> ReloadStatus {
    ReloadStatus::register(
        registry,
        "etcd_readiness_etcd_password_file",
        crate::metrics::reload_status::Help {
            successful: "Whether the last re-read of --etcd.password-file succeeded (1) or failed (0)",
            timestamp: "Unix time of the last successful load or re-read of --etcd.password-file",
            reloads: "Re-reads of --etcd.password-file that changed or failed to change the password in use, by result",
        },
    )
}

/// Who etcd saw make a call: what its refusals are explained with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    /// A user that logged in, and the flag naming it.
    User { name: String, flag: &'static str },
    /// No login, a client certificate: with `--client-cert-auth`, etcd
    /// takes its CN as the user.
    Certificate { cn: String },
    /// Neither.
    Anonymous,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::User { name, flag } => write!(f, "user {name:?} ({flag})"),
            Who::Certificate { cn } => write!(
                f,
                "user {cn:?}, the CN of the client certificate (--etcd.cert; etcd takes it as \
                 the user with --client-cert-auth when no user logs in)"
            ),
            Who::Anonymous => f.write_str("no user"),
        }
    }
}

const STATUS_ROOT_ONLY: &str = "etcd answers Maintenance.Status only to the root role on \
    3.4.42 and later 3.4, 3.5.28-3.5.31 and 3.6.0-3.6.11 (to any authenticated user on 3.5 \
    before 3.5.28, 3.5.32 and later, 3.6.12 and later, and 3.7); the exporter reads its \
    stand-ins instead, the member's /metrics and /health (docs/connecting.md)";

/// What etcd's refusal of a call made as `who` means for the operator, by
/// its message.
pub fn hint(message: &str, who: &Who) -> Option<String> {
    let lacks_read = || match who {
        Who::Certificate { cn } => format!(
            "etcd saw {who}: a user {cn:?} must exist in etcd (`etcdctl user add {cn} \
             --no-password`) with a role reading --etcd.probe-key (docs/connecting.md)"
        ),
        _ => format!(
            "etcd saw {who}, whose roles lack read on --etcd.probe-key: grant a role with read \
             on it (docs/connecting.md)"
        ),
    };
    if message.contains("etcdserver: user name is empty") {
        Some(match who {
            Who::Anonymous => "etcd has authentication on and the exporter has no user: set \
                 --etcd.user (or --etcd.user-file) and --etcd.password-file, or give it a client \
                 certificate whose CN is the user where etcd runs with --client-cert-auth \
                 (docs/connecting.md)"
                .to_string(),
            Who::Certificate { cn } => format!(
                "etcd has authentication on and did not take the client certificate's CN {cn:?} \
                 as the user: etcd does so only with --client-cert-auth; else set --etcd.user and \
                 --etcd.password-file"
            ),
            Who::User { .. } => {
                "etcd refused the call as anonymous: its authentication was turned on \
                 after the login; the exporter logs in again"
                    .to_string()
            }
        })
    } else if message.contains("authentication failed, invalid user ID or password") {
        Some(format!(
            "check {who} and the password in --etcd.password-file; a refused login is tried \
             again after a backoff, 1 s doubling to 30 s, and at once when the files change"
        ))
    } else if message.contains("etcdserver: user name not found") {
        Some(format!(
            "etcd knows no {who}: create it with a role reading --etcd.probe-key \
             (docs/connecting.md)"
        ))
    } else if message.contains("etcdserver: permission denied") && message.starts_with("Status") {
        Some(STATUS_ROOT_ONLY.to_string())
    } else if message.contains("etcdserver: permission denied") {
        Some(lacks_read())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_newline_is_not_part_of_the_password_and_empty_is_refused() {
        let p = Path::new("pw");
        assert_eq!(
            Password::from_text(p, "s3cret\n").unwrap().expose(),
            "s3cret"
        );
        assert_eq!(
            Password::from_text(p, "s3cret\r\n").unwrap().expose(),
            "s3cret"
        );
        assert_eq!(
            Password::from_text(p, "s3 cret ").unwrap().expose(),
            "s3 cret "
        );
        for empty in ["", "\n"] {
            let e = Password::from_text(p, empty).unwrap_err();
            assert_eq!(e.to_string(), "--etcd.password-file pw is empty");
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        let p = Password::from_text(Path::new("pw"), "S3cretPassw0rd").unwrap();
        let current = Current {
            user: "probe".into(),
            password: p.clone(),
            generation: 1,
        };
        assert!(!format!("{current:?}").contains("S3cret"));
        let id = identity("probe", &p);
        assert_ne!(id, hex::encode(Sha256::digest(b"S3cretPassw0rd")));
        assert_eq!(id, identity("probe", &p), "stable within the process");
        assert_ne!(id, identity("probe2", &p), "the user is part of it");
        assert_ne!(
            identity("ab", &p),
            identity("a", &Password("bS3cretPassw0rd".into()))
        );
    }

    #[test]
    fn the_user_file_is_read_with_the_password_and_both_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (user, pw) = (dir.path().join("username"), dir.path().join("password"));
        std::fs::write(&user, "probe2\n").unwrap();
        std::fs::write(&pw, "S3cret\n").unwrap();
        let auth = EtcdAuth::load(User::File(user.clone()), &pw).unwrap();
        let c = auth.current();
        assert_eq!((c.user.as_str(), c.password.expose()), ("probe2", "S3cret"));
        assert_eq!(auth.user_flag(), "--etcd.user-file");
        std::fs::write(&user, "").unwrap();
        let e = EtcdAuth::load(User::File(user.clone()), &pw).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("--etcd.user-file {} is empty", user.display())
        );
        std::fs::remove_file(&user).unwrap();
        let e = EtcdAuth::load(User::File(user.clone()), &pw).unwrap_err();
        assert!(
            e.to_string().starts_with("cannot read --etcd.user-file"),
            "{e}"
        );
    }

    #[test]
    fn refusals_say_which_identity_etcd_saw_and_what_it_lacks() {
        let user = Who::User {
            name: "probe".into(),
            flag: "--etcd.user",
        };
        let cn = Who::Certificate {
            cn: "kube-etcd-healthcheck-client".into(),
        };
        let h = |m: &str, who: &Who| hint(m, who).unwrap_or_default();
        let anon = h(
            "linearizable read: etcdserver: user name is empty",
            &Who::Anonymous,
        );
        assert!(
            anon.contains("authentication on") && anon.contains("--etcd.user"),
            "{anon}"
        );
        assert!(anon.contains("CN"), "{anon}");
        let denied = h("linearizable read: etcdserver: permission denied", &user);
        assert!(denied.contains("user \"probe\" (--etcd.user)") && denied.contains("probe-key"));
        let denied = h("linearizable read: etcdserver: permission denied", &cn);
        assert!(
            denied.contains("kube-etcd-healthcheck-client") && denied.contains("CN"),
            "{denied}"
        );
        let status = h("Status: etcdserver: permission denied", &user);
        assert!(
            status.contains("3.5.28-3.5.31") && status.contains("3.5.32"),
            "{status}"
        );
        let login = h(
            "login: etcdserver: authentication failed, invalid user ID or password",
            &user,
        );
        assert!(
            login.contains("backoff") && login.contains("check user \"probe\""),
            "{login}"
        );
        assert!(h("linearizable read: etcdserver: user name not found", &cn).contains("knows no"));
        assert_eq!(hint("etcdserver: no leader", &user), None);
    }
}

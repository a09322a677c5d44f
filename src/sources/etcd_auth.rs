//! etcd's own authentication: `--etcd.user` and the password in
//! `--etcd.password-file` (a Secret mount), held by an [`EtcdAuth`] handle
//! the etcd source builds its client with, and kept current by the one
//! reloader, [`LastGood`] of [`PasswordFile`] (inotify on its directory,
//! `..data` swaps included, SIGHUP, the periodic re-read). A changed
//! password is used for the next connection: it carries a generation, and
//! the etcd source builds a new client when it changed. etcd's token is
//! refreshed by etcd-client when etcd refuses it as expired ("invalid auth
//! token"; a simple token expires after 5 minutes unused), and the call is
//! sent once more.
//!
//! The password is never written out: not in `Debug`, logs or errors, and
//! the reloader's hash of the file is salted per process (an unsalted
//! SHA-256 of a password is a verifier for an offline guess).

use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

use crate::outside::bounded_read::{ReadError, read_bounded};
use crate::reload::{Change, LastGood, Load, Names, Problem, ReloadStatus};

/// The largest password file read.
pub const MAX_PASSWORD_BYTES: u64 = 4096;

const NAMES: Names = Names {
    what: "etcd password file",
    kept: "the previous password stays in use",
};

/// Why a password file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("cannot read --etcd.password-file {}: {source}", path.display())]
    Read { path: PathBuf, source: ReadError },
    #[error("--etcd.password-file {} is not UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("--etcd.password-file {} is empty", path.display())]
    Empty { path: PathBuf },
}

impl Problem for PasswordError {}

/// A password, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Password {
    /// The one place the password is read: where the client is built.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The file's text without one trailing newline (as `echo` writes it
    /// and `kubectl create secret --from-file` keeps it).
    fn from_text(path: &Path, text: &str) -> Result<Password, PasswordError> {
        let p = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(text);
        if p.is_empty() {
            return Err(PasswordError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Password(p.to_string()))
    }
}

/// The password in use and its generation.
#[derive(Debug)]
pub struct Current {
    pub password: Password,
    pub generation: u64,
}

/// The user and password the etcd source authenticates with. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdAuth(Arc<Held>);

#[derive(Debug)]
struct Held {
    user: String,
    file: PathBuf,
    current: ArcSwap<Current>,
}

impl EtcdAuth {
    /// Read `file` now (at start: a problem is an error).
    pub fn load(user: &str, file: &Path) -> Result<EtcdAuth, PasswordError> {
        let password = read(file)?;
        Ok(EtcdAuth(Arc::new(Held {
            user: user.to_string(),
            file: file.to_path_buf(),
            current: ArcSwap::from_pointee(Current {
                password,
                generation: 1,
            }),
        })))
    }

    pub fn user(&self) -> &str {
        &self.0.user
    }

    /// The password for the next connection.
    pub fn current(&self) -> Arc<Current> {
        self.0.current.load_full()
    }
}

fn read(path: &Path) -> Result<Password, PasswordError> {
    let bytes = read_bounded(path, MAX_PASSWORD_BYTES).map_err(|source| PasswordError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| PasswordError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    Password::from_text(path, &text)
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

fn identity(p: &Password) -> String {
    let mut sha = Sha256::new();
    sha.update(salt());
    sha.update(p.expose().as_bytes());
    hex::encode(sha.finalize())
}

/// `--etcd.password-file` as a [`Load`].
#[derive(Debug)]
pub struct PasswordFile {
    auth: EtcdAuth,
    status: ReloadStatus,
}

/// The password file's reloader.
pub type PasswordReloader = LastGood<PasswordFile>;

impl PasswordFile {
    pub fn reloader(auth: EtcdAuth, status: ReloadStatus) -> Arc<PasswordReloader> {
        let in_force = identity(&auth.current().password);
        let path = auth.0.file.clone();
        Arc::new(LastGood::new(
            path,
            NAMES,
            PasswordFile { auth, status },
            Some(in_force),
        ))
    }
}

impl Load for PasswordFile {
    type Value = Password;
    type Error = PasswordError;

    fn limit(&self) -> u64 {
        MAX_PASSWORD_BYTES
    }

    fn build(&self, path: &Path, text: String) -> Result<Password, PasswordError> {
        Password::from_text(path, &text)
    }

    /// Salted: the file's plain SHA-256 would be shown in logs and reload answers.
    fn identity(&self, value: &Password) -> Option<String> {
        Some(identity(value))
    }

    fn apply(&self, password: Password, _: &Change<'_>) -> Result<String, PasswordError> {
        let generation = self.auth.current().generation + 1;
        self.auth.0.current.store(Arc::new(Current {
            password,
            generation,
        }));
        Ok(format!(
            "generation {generation}, used for the next connection"
        ))
    }

    fn status(&self) -> &ReloadStatus {
        &self.status
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

/// What etcd's refusal of a call means for the operator, by its message.
pub fn hint(message: &str, user_given: bool) -> Option<&'static str> {
    if message.contains("etcdserver: user name is empty") {
        Some(if user_given {
            "etcd refused the call as anonymous: its authentication is on"
        } else {
            "etcd has authentication on and the exporter has no user: set --etcd.user and \
             --etcd.password-file (a user whose role reads the probe key, docs/sources.md)"
        })
    } else if message.contains("authentication failed, invalid user ID or password") {
        Some("check --etcd.user and the password in --etcd.password-file")
    } else if message.contains("etcdserver: permission denied") && message.starts_with("Status") {
        Some(
            "etcd 3.5 answers Maintenance.Status only to a user with the root role (3.4 to any \
             user); the exporter reads its stand-ins instead, the member's /metrics and /health \
             (docs/sources.md, \"etcd's authentication\")",
        )
    } else if message.contains("etcdserver: permission denied") {
        Some(
            "the user's role lacks read on --etcd.probe-key (docs/sources.md, \"etcd's \
             authentication\")",
        )
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
            password: p.clone(),
            generation: 1,
        };
        assert!(!format!("{current:?}").contains("S3cret"));
        let id = identity(&p);
        assert_ne!(id, hex::encode(Sha256::digest(b"S3cretPassw0rd")));
        assert_eq!(id, identity(&p), "stable within the process");
    }

    #[test]
    fn refusals_are_explained() {
        let anon = hint("linearizable read: etcdserver: user name is empty", false).unwrap();
        assert!(
            anon.contains("authentication on") && anon.contains("--etcd.user"),
            "{anon}"
        );
        assert!(
            hint("linearizable read: etcdserver: permission denied", true)
                .unwrap()
                .contains("probe-key")
        );
        assert!(
            hint("Status: etcdserver: permission denied", true)
                .unwrap()
                .contains("root role")
        );
        assert_eq!(hint("etcdserver: no leader", true), None);
    }
}

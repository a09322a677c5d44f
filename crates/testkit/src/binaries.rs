//! Real binaries from Debian's newer suites, as the tests get them: through
//! `.ci/fetch-binaries NAME`, which downloads and caches them once and
//! prints `NAME DIR`. The one way a test asks for, e.g., etcd 3.5.30.

use std::path::PathBuf;
use std::process::Command;

/// Why a fetched binary could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("bash {script}: {error}")]
    NoBash {
        script: String,
        error: std::io::Error,
    },
    /// The script printed no `NAME DIR` line: its whole output.
    #[error(".ci/fetch-binaries {name}: {output:?}")]
    NotFetched {
        name: String,
        output: std::process::Output,
    },
}

/// `usr/bin/BIN` of the fetched package `name` (e.g. `etcd-3.5.30`,
/// `etcd`), or why it could not be had.
pub fn fetched(name: &str, bin: &str) -> Result<PathBuf, FetchError> {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!("{root}/../../.ci/fetch-binaries");
    let out = Command::new("bash")
        .arg(&script)
        .arg(name)
        .output()
        .map_err(|error| FetchError::NoBash {
            script: script.clone(),
            error,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|dir| PathBuf::from(dir.trim()).join("usr/bin").join(bin))
        .ok_or_else(|| FetchError::NotFetched {
            name: name.to_string(),
            output: out.clone(),
        })
}

//! Real binaries from Debian's newer suites, as the tests get them: through
//! `.ci/fetch-binaries NAME`, which downloads and caches them once and
//! prints `NAME DIR`. The one way a test asks for, e.g., etcd 3.5.30.

use std::path::PathBuf;
use std::process::Command;

/// `usr/bin/BIN` of the fetched package `name` (e.g. `etcd-3.5.30`,
/// `etcd`), or why it could not be had (the script's whole output).
pub fn fetched(name: &str, bin: &str) -> Result<PathBuf, String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!("{root}/../../.ci/fetch-binaries");
    let out = Command::new("bash")
        .arg(&script)
        .arg(name)
        .output()
        .map_err(|e| format!("bash {script}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|dir| PathBuf::from(dir.trim()).join("usr/bin").join(bin))
        .ok_or_else(|| format!(".ci/fetch-binaries {name}: {out:?}"))
}

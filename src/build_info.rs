//! What this binary is: version, git revision and branch, build date, rustc
//! and target, as recorded by `build.rs` (`unknown` where the build had no
//! git). One source for `--version`, `etcd_readiness_build_info` and, through
//! `--version`, the image's OCI labels (`.ci/image-build` reads them from the
//! binary), so the three cannot disagree.

/// The crate version (`version` in Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `git rev-parse --short=12 HEAD`, `-dirty` when tracked files differed; or `unknown`.
pub const REVISION: &str = env!("ERE_BUILD_REVISION");
/// The checked-out branch (`HEAD` when detached), or `unknown`.
pub const BRANCH: &str = env!("ERE_BUILD_BRANCH");
/// RFC 3339 UTC: `SOURCE_DATE_EPOCH` when the build set it, else the build's time.
pub const BUILD_DATE: &str = env!("ERE_BUILD_DATE");
/// The compiler's version (`rustc --version`'s second word).
pub const RUSTC: &str = env!("ERE_RUSTC_VERSION");
/// The target triple the binary was compiled for.
pub const TARGET: &str = env!("ERE_BUILD_TARGET");

/// The text `--version` prints after the program name, in the layout of
/// Prometheus' `prometheus --version`.
pub fn long_version() -> &'static str {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (branch: ",
        env!("ERE_BUILD_BRANCH"),
        ", revision: ",
        env!("ERE_BUILD_REVISION"),
        ")\n  build date:       ",
        env!("ERE_BUILD_DATE"),
        "\n  rustc version:    ",
        env!("ERE_RUSTC_VERSION"),
        "\n  platform:         ",
        env!("ERE_BUILD_TARGET"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_names_every_field() {
        let v = long_version();
        assert!(
            v.starts_with(&format!(
                "{VERSION} (branch: {BRANCH}, revision: {REVISION})\n"
            )),
            "{v}"
        );
        for field in [BUILD_DATE, RUSTC, TARGET] {
            assert!(v.contains(field), "{field} missing from {v}");
        }
    }

    #[test]
    fn build_date_is_rfc3339_utc() {
        let d = BUILD_DATE.as_bytes();
        assert_eq!(d.len(), 20, "{BUILD_DATE}");
        assert!(
            BUILD_DATE.ends_with('Z') && d[4] == b'-' && d[7] == b'-' && d[10] == b'T',
            "{BUILD_DATE}"
        );
        BUILD_DATE.parse::<jiff::Timestamp>().expect(BUILD_DATE);
    }

    #[test]
    fn revision_is_twelve_hex_digits_or_unknown() {
        let r = REVISION.strip_suffix("-dirty").unwrap_or(REVISION);
        assert!(
            r == "unknown" || (r.len() == 12 && r.bytes().all(|b| b.is_ascii_hexdigit())),
            "{REVISION}"
        );
    }
}

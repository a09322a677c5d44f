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

/// `build.rs`'s reader of `.git`, compiled here too for its tests.
#[cfg(test)]
#[path = "../../build/git_dir.rs"]
mod git_dir;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "fedcba9876543210fedcba9876543210fedcba98";

    #[test]
    fn the_revision_is_read_from_git_files_without_a_git_binary() {
        let top = tempfile::tempdir().unwrap();
        let g = top.path().join(".git");
        fs::create_dir_all(g.join("refs/heads")).unwrap();
        // A loose ref.
        fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(g.join("refs/heads/main"), format!("{A}\n")).unwrap();
        let h = git_dir::head(top.path()).unwrap();
        assert_eq!((h.commit.as_str(), h.branch.as_str()), (A, "main"));
        assert!(h.watched.contains(&g.join("refs/heads/main")), "{h:?}");
        // Only in packed-refs (after `git gc`), with a peeled tag line.
        fs::remove_file(g.join("refs/heads/main")).unwrap();
        let packed = format!(
            "# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/main\n{A} refs/tags/v1\n^{B}\n"
        );
        fs::write(g.join("packed-refs"), packed).unwrap();
        let h = git_dir::head(top.path()).unwrap();
        assert_eq!((h.commit.as_str(), h.branch.as_str()), (B, "main"));
        // Detached.
        fs::write(g.join("HEAD"), format!("{A}\n")).unwrap();
        let h = git_dir::head(top.path()).unwrap();
        assert_eq!((h.commit.as_str(), h.branch.as_str()), (A, "HEAD"));
        // A branch that is in neither, or garbage: unknown, not a panic.
        fs::write(g.join("HEAD"), "ref: refs/heads/gone\n").unwrap();
        assert_eq!(git_dir::head(top.path()), None);
        fs::write(g.join("HEAD"), "ref: refs/../../etc/passwd\n").unwrap();
        assert_eq!(git_dir::head(top.path()), None);
        fs::write(g.join("HEAD"), "not a commit\n").unwrap();
        assert_eq!(git_dir::head(top.path()), None);
        assert_eq!(git_dir::head(&top.path().join("no-checkout")), None);
    }

    #[test]
    fn a_worktrees_head_is_its_own_and_its_refs_the_common_ones() {
        let root = tempfile::tempdir().unwrap();
        let common = root.path().join("main/.git");
        let wt_git = common.join("worktrees/wt");
        fs::create_dir_all(common.join("refs/heads")).unwrap();
        fs::create_dir_all(&wt_git).unwrap();
        fs::write(common.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(common.join("refs/heads/main"), format!("{A}\n")).unwrap();
        fs::write(common.join("refs/heads/topic"), format!("{B}\n")).unwrap();
        fs::write(wt_git.join("HEAD"), "ref: refs/heads/topic\n").unwrap();
        fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        let top = root.path().join("wt");
        fs::create_dir_all(&top).unwrap();
        fs::write(top.join(".git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        let h = git_dir::head(&top).unwrap();
        assert_eq!((h.commit.as_str(), h.branch.as_str()), (B, "topic"));
        assert!(h.watched.contains(&wt_git.join("HEAD")), "{h:?}");
    }
}

//! Build script: records what `--version` and `etcd_readiness_build_info`
//! report about the build — git revision and branch, build date, rustc
//! version and target — as `ERE_BUILD_*` environment variables for
//! `src/metrics/build_info.rs`.
//!
//! - Revision: the first 12 hex digits of the commit `HEAD` names, read
//!   from the files of `.git` (`build/git_dir.rs`: HEAD, the loose ref,
//!   packed-refs; worktrees too), so no git binary is needed; with
//!   `-dirty` appended when git is installed and tracked files differ from
//!   it (`git status --porcelain --untracked-files=no`), as
//!   `.ci/image-build` always did for its label. Without git the dirty
//!   flag cannot be told and is left off.
//! - Branch: the short name of the ref `HEAD` names (`HEAD` when
//!   detached, as `git rev-parse --abbrev-ref HEAD` says and Prometheus'
//!   release builds show).
//! - Build date: `SOURCE_DATE_EPOCH` when set (reproducible builds; the image
//!   build sets it to the commit time), else the time of this build; RFC 3339
//!   in UTC.
//!
//! Without this crate's own `.git` (a source tarball, also one unpacked
//! inside someone else's checkout), revision and branch are `unknown`: the
//! build never fails for want of git.
//! A builder without the checkout (the Containerfile, whose context has no
//! `.git`) can say them instead: `ERE_BUILD_REVISION` and `ERE_BUILD_BRANCH`
//! in the environment take precedence over git.
//! The script re-runs when HEAD, the branch it names, the index or the
//! crate's sources change, so the revision and the dirty flag follow commits
//! and edits of what is compiled.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/git_dir.rs"]
mod git_dir;
#[path = "build/link_order.rs"]
mod link_order;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let rustc_version = output(&rustc, &["--version"], &manifest_dir)
        .and_then(|s| s.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    let (mut revision, mut branch) = git_identity(&manifest_dir);
    for (var, value) in [
        ("ERE_BUILD_REVISION", &mut revision),
        ("ERE_BUILD_BRANCH", &mut branch),
    ] {
        println!("cargo:rerun-if-env-changed={var}");
        if let Ok(v) = std::env::var(var)
            && !v.trim().is_empty()
        {
            *value = v.trim().to_string();
        }
    }
    let date = build_date();
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());

    println!("cargo:rustc-env=ERE_RUSTC_VERSION={rustc_version}");
    println!("cargo:rustc-env=ERE_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=ERE_BUILD_BRANCH={branch}");
    println!("cargo:rustc-env=ERE_BUILD_DATE={date}");
    println!("cargo:rustc-env=ERE_BUILD_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/git_dir.rs");
    println!("cargo:rerun-if-changed=build/link_order.rs");
    link_order::emit(&manifest_dir);
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // What is compiled into the binary: an edit there may change the dirty flag.
    for p in ["src", "crates/policy/src", "Cargo.toml", "Cargo.lock"] {
        if manifest_dir.join(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}

/// `(revision, branch)`, or `("unknown", "unknown")` without this crate's
/// own `.git`.
fn git_identity(dir: &Path) -> (String, String) {
    let Some(head) = git_dir::head(dir) else {
        return ("unknown".to_string(), "unknown".to_string());
    };
    let mut revision = head.commit[..12].to_string();
    // --no-optional-locks: do not refresh (rewrite) the index, which this
    // script watches; a rewrite would make every build re-run it.
    let status = [
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ];
    if let Some(s) = output("git", &status, dir)
        && !s.trim().is_empty()
    {
        revision.push_str("-dirty");
    }
    // Re-run on a commit, a checkout or a staged change.
    for w in head.watched.iter().filter(|w| w.exists()) {
        println!("cargo:rerun-if-changed={}", w.display());
    }
    (revision, head.branch)
}

/// Standard output of a successful command, or None (not found, failed, not UTF-8).
fn output(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let o = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    String::from_utf8(o.stdout).ok()
}

/// RFC 3339 UTC time of `SOURCE_DATE_EPOCH`, or of now.
fn build_date() -> String {
    let secs = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => match v.trim().parse::<i64>() {
            Ok(s) => s,
            Err(_) => panic!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds"),
        },
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    };
    rfc3339(secs)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic
/// Gregorian; Howard Hinnant's civil_from_days).
fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

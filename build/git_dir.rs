//! The checkout's revision and branch read from the files of its `.git`,
//! without a git binary (a minbase root has none): `HEAD`, the loose ref it
//! names, else `packed-refs`. Both a plain `.git` directory and a worktree's
//! or submodule's `.git` file (`gitdir: …`, with `commondir` for the refs)
//! are followed. Pure reading, no writes, bounded: shared by `build.rs` and
//! its unit tests in `src/metrics/build_info.rs`.

use std::path::{Path, PathBuf};

/// What `HEAD` resolves to, and the files that change when it moves.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// The full hex object name of the checked-out commit.
    pub commit: String,
    /// The branch's short name, or `HEAD` when detached (as `git rev-parse
    /// --abbrev-ref HEAD` says).
    pub branch: String,
    /// The files whose change means another commit or branch (for
    /// `cargo:rerun-if-changed`): HEAD, the index, the ref, packed-refs.
    pub watched: Vec<PathBuf>,
}

/// A git file larger than this is not one git wrote (refs and HEAD are one
/// line; packed-refs of a large repository stays well below).
const MAX_FILE: u64 = 16 << 20;

/// The `HEAD` of the checkout whose top directory is `top` (it holds
/// `.git`), or None when there is none or it cannot be read.
pub fn head(top: &Path) -> Option<Head> {
    let dot_git = top.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git
    } else {
        let text = read(&dot_git)?;
        let target = text.trim().strip_prefix("gitdir:")?.trim();
        top.join(target)
    };
    // A worktree's refs live in the common directory it names.
    let common = match read(&git_dir.join("commondir")) {
        Some(c) => git_dir.join(c.trim()),
        None => git_dir.clone(),
    };
    let head_text = read(&git_dir.join("HEAD"))?;
    let head_text = head_text.trim();
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("index")];
    let (commit, branch) = match head_text.strip_prefix("ref:") {
        None => (head_text.to_string(), "HEAD".to_string()),
        Some(r) => {
            let r = r.trim();
            // A ref name never climbs out of the git directory.
            if r.split('/').any(|c| c == ".." || c.is_empty()) {
                return None;
            }
            let loose = common.join(r);
            watched.push(loose.clone());
            watched.push(common.join("packed-refs"));
            let commit = match read(&loose) {
                Some(c) => c.trim().to_string(),
                None => packed(&read(&common.join("packed-refs"))?, r)?,
            };
            let branch = r.strip_prefix("refs/heads/").unwrap_or(r).to_string();
            (commit, branch)
        }
    };
    let hex = commit.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || !(commit.len() == 40 || commit.len() == 64) {
        return None;
    }
    Some(Head {
        commit: commit.to_ascii_lowercase(),
        branch,
        watched,
    })
}

/// The object name `packed-refs` gives `name` (`<hex> <name>` lines; `#`
/// comments and `^` peeled lines skipped).
fn packed(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .find_map(|l| {
            let (hex, n) = l.split_once(' ')?;
            (n.trim() == name).then(|| hex.to_string())
        })
}

/// A small regular file as UTF-8, or None.
fn read(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

//! The kubelet's AtomicWriter sequence, as it updates a ConfigMap volume:
//! write `..<timestamp>/policy`, point a new `..data_tmp` symlink at it, rename
//! that over `..data`, and remove the previous `..<timestamp>` directory; the
//! visible `policy` is a symlink to `..data/policy`. Used by the reload tests
//! to reproduce exactly what a pod sees; handy for operators testing a
//! watcher too. A volume may hold several keys, swapped together as a
//! Secret's `ca.crt`, `tls.crt` and `tls.key` are. Test support only: it is
//! not part of the library.

use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A directory laid out and updated like a ConfigMap volume with one key.
#[derive(Debug)]
pub struct AtomicWriterVolume {
    dir: PathBuf,
    key: String,
    /// Every key, `key` first.
    keys: Vec<String>,
    current: Option<PathBuf>,
    generation: u64,
}

impl AtomicWriterVolume {
    /// Lay out `dir` with `key` holding `content`.
    pub fn create(dir: &Path, key: &str, content: &str) -> io::Result<AtomicWriterVolume> {
        AtomicWriterVolume::create_keys(dir, &[(key, content)])
    }

    /// Lay out `dir` with each `(key, content)` (a Secret's keys).
    pub fn create_keys(dir: &Path, keys: &[(&str, &str)]) -> io::Result<AtomicWriterVolume> {
        let mut v = AtomicWriterVolume {
            dir: dir.to_path_buf(),
            key: keys.first().map_or_else(String::new, |k| k.0.to_string()),
            keys: keys.iter().map(|k| k.0.to_string()).collect(),
            current: None,
            generation: 0,
        };
        v.update_keys(keys)?;
        for (key, _) in keys {
            symlink(format!("..data/{key}"), dir.join(key))?;
        }
        Ok(v)
    }

    /// The visible path of `key`.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// One update of every key at once (keys not given are written empty).
    pub fn update_keys(&mut self, keys: &[(&str, &str)]) -> io::Result<Instant> {
        let all = self.keys.clone();
        self.swap(|ts| {
            for key in &all {
                let content = keys.iter().find(|k| k.0 == key).map_or("", |k| k.1);
                std::fs::write(ts.join(key), content)?;
            }
            Ok(())
        })
    }

    /// The visible path of the key (what `--policy` points at).
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.key)
    }

    /// One update; returns the instant of the `..data` rename, the moment
    /// the new content becomes visible.
    pub fn update(&mut self, content: &str) -> io::Result<Instant> {
        self.update_with(|path| std::fs::write(path, content))
    }

    /// One update where `make` creates the key's entry at the given path
    /// (for tests: a FIFO, a symlink to a device, ...) instead of a file.
    pub fn update_with(
        &mut self,
        make: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<Instant> {
        let key = self.key.clone();
        self.swap(|ts| make(&ts.join(&key)))
    }

    /// Fill a new timestamped directory with `fill`, then swap `..data` to it.
    fn swap(&mut self, fill: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<Instant> {
        self.generation += 1;
        let name = format!("..2026_11_30_00_00_00.{:09}", self.generation);
        let ts = self.dir.join(&name);
        std::fs::create_dir(&ts)?;
        fill(&ts)?;
        let tmp = self.dir.join("..data_tmp");
        symlink(&name, &tmp)?;
        let renamed_at = Instant::now();
        std::fs::rename(&tmp, self.dir.join("..data"))?;
        if let Some(old) = self.current.replace(ts) {
            std::fs::remove_dir_all(old)?;
        }
        Ok(renamed_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_visible_file_follows_updates_and_old_dirs_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = AtomicWriterVolume::create(dir.path(), "policy", "a").unwrap();
        assert_eq!(std::fs::read_to_string(v.path()).unwrap(), "a");
        v.update("b").unwrap();
        assert_eq!(std::fs::read_to_string(v.path()).unwrap(), "b");
        let dirs: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..2026"))
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
    }
}

//! Reading files named by flags (the policy, `--config`) so that no file can
//! wedge or bloat the exporter: the file is opened non-blocking (a FIFO does
//! not block the open), refused unless the opened descriptor is a regular
//! file (symlinks, such as a ConfigMap's `..data` ones, are followed; a
//! symlink to `/dev/zero` or a FIFO is refused), and at most `limit + 1`
//! bytes are read. [`read_with_deadline`] adds a deadline by reading on a
//! helper thread, so a read stuck in the kernel (a hung network filesystem)
//! costs one parked thread, never the caller.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("it is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the read did not finish within {after:?} (is the file on a hung filesystem?)")]
    TimedOut { after: Duration },
    #[error("an earlier read of this file is still stuck; not starting another")]
    Busy,
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Read the regular file at `path` (following symlinks), at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    // The metadata of the opened descriptor (fstat), not of the path: what we
    // checked is what we read, even if the path is swapped meanwhile.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular {
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge { limit });
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(buf)
}

/// One file's reads with a deadline; at most one read of it is in flight.
#[derive(Debug, Default)]
pub struct DeadlineReader {
    in_flight: Arc<AtomicBool>,
}

impl DeadlineReader {
    /// [`read_bounded`] on a helper thread, waiting at most `deadline`. After
    /// a timeout the thread finishes (or stays stuck) on its own; until it
    /// does, further reads fail at once with [`ReadError::Busy`].
    pub fn read(&self, path: &Path, limit: u64, deadline: Duration) -> Result<Vec<u8>, ReadError> {
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return Err(ReadError::Busy);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let flag = self.in_flight.clone();
        let owned: PathBuf = path.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("bounded-read".to_string())
            .spawn(move || {
                let r = read_bounded(&owned, limit);
                flag.store(false, Ordering::Release);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            self.in_flight.store(false, Ordering::Release);
            return Err(ReadError::Io(e));
        }
        match rx.recv_timeout(deadline) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(ReadError::TimedOut { after: deadline })
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(ReadError::Io(
                std::io::Error::other("the reading thread ended without an answer"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_directories_and_long_files() {
        let e = read_bounded(Path::new("/dev/zero"), 1024).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is a character device, not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = read_bounded(dir.path(), 1024).unwrap_err();
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
        let f = dir.path().join("f");
        std::fs::write(&f, vec![b'x'; 2000]).unwrap();
        assert!(matches!(
            read_bounded(&f, 1999),
            Err(ReadError::TooLarge { limit: 1999 })
        ));
        assert_eq!(read_bounded(&f, 2000).unwrap().len(), 2000);
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_bounded(&link, 1024),
            Err(ReadError::NotRegular { .. })
        ));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let r = DeadlineReader::default().read(&fifo, 1024, Duration::from_secs(30));
        assert_eq!(
            r.unwrap_err().to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
    }
}

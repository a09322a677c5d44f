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

use crate::outside::blocking::{DeadlineError, run_with_deadline};

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
        let owned: PathBuf = path.to_path_buf();
        self.run(deadline, move || read_bounded(&owned, limit))
    }

    /// Run one read-like `work` under the one-in-flight rule and `deadline`.
    fn run(
        &self,
        deadline: Duration,
        work: impl FnOnce() -> Result<Vec<u8>, ReadError> + Send + 'static,
    ) -> Result<Vec<u8>, ReadError> {
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return Err(ReadError::Busy);
        }
        let flag = self.in_flight.clone();
        let r = run_with_deadline("bounded-read", deadline, move || {
            let r = work();
            flag.store(false, Ordering::Release);
            r
        });
        match r {
            Ok(r) => r,
            Err(DeadlineError::TimedOut { after }) => Err(ReadError::TimedOut { after }),
            Err(e) => {
                // The thread is gone (it panicked or never started).
                self.in_flight.store(false, Ordering::Release);
                Err(ReadError::Io(std::io::Error::other(e.to_string())))
            }
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
    fn a_stuck_read_times_out_and_later_reads_fail_fast_until_it_ends() {
        let reader = DeadlineReader::default();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let e = reader
            .run(Duration::from_millis(50), move || {
                let _ = wait.recv();
                let _ = done_tx.send(());
                Ok(Vec::new())
            })
            .unwrap_err();
        assert!(matches!(e, ReadError::TimedOut { .. }), "{e}");
        // Still stuck: no second thread, an answer at once.
        let e = reader
            .run(Duration::from_secs(30), || Ok(b"x".to_vec()))
            .unwrap_err();
        assert!(matches!(e, ReadError::Busy), "{e}");
        release.send(()).unwrap();
        done.recv().unwrap();
        // The flag is cleared just after the work returns; wait for it (bounded).
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while reader.in_flight.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < end);
            std::thread::yield_now();
        }
        assert_eq!(
            reader
                .run(Duration::from_secs(30), || Ok(b"x".to_vec()))
                .unwrap(),
            b"x"
        );
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

//! One piece of blocking work (a file read on a mount that may hang, a
//! policy compile) on a helper thread: its panic caught, the caller's wait
//! bounded by a deadline, so nothing from outside can hold a caller longer.

use std::time::Duration;

/// Why [`run_with_deadline`] has no result.
#[derive(Debug, thiserror::Error)]
pub enum DeadlineError {
    #[error("did not finish within {after:?}")]
    TimedOut { after: Duration },
    #[error("panicked: {message}")]
    Panicked { message: String },
    #[error("cannot start a thread: {0}")]
    Spawn(std::io::Error),
}

/// Run blocking `work` on a new thread named `name` and wait at most
/// `deadline` for it. A panic in `work` is caught and returned as
/// [`DeadlineError::Panicked`]. After a timeout the thread is left to finish
/// on its own (its result is dropped): the caller is never held longer.
pub fn run_with_deadline<T: Send + 'static>(
    name: &str,
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, DeadlineError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(r);
        })
        .map_err(DeadlineError::Spawn)?;
    match rx.recv_timeout(deadline) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(payload)) => Err(DeadlineError::Panicked {
            message: panic_message(payload.as_ref()),
        }),
        Err(_) => Err(DeadlineError::TimedOut { after: deadline }),
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_work_returns_panics_or_times_out_without_holding_the_caller() {
        assert_eq!(
            run_with_deadline("t", Duration::from_secs(30), || 7).unwrap(),
            7
        );
        let e = run_with_deadline("t", Duration::from_secs(30), || -> u8 {
            panic!("compile blew up")
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "panicked: compile blew up");
        // Work that waits for a release we only give after the deadline.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let e = run_with_deadline("t", Duration::from_millis(50), move || {
            let _ = wait.recv();
        })
        .unwrap_err();
        assert!(matches!(e, DeadlineError::TimedOut { .. }), "{e}");
        release.send(()).unwrap();
    }
}

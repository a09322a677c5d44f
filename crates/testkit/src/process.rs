//! Children of a test, killed (and reaped) when their guard drops, so a
//! failing test leaves no process behind.

use std::process::Child;

/// A child process killed (and reaped) on drop.
pub struct ChildGuard {
    child: Option<Child>,
    pub name: &'static str,
}

impl ChildGuard {
    pub fn new(child: Child, name: &'static str) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            name,
        }
    }

    /// The child's exit status if it has exited (it is reaped then).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

//! The one way the project takes a `std::sync::Mutex`: poison-tolerant.
//! Every mutex here guards a value that each holder leaves consistent at
//! every step (a counter, a map, a cache slot), so a panic of another holder
//! (caught by the supervisor, which restarts the task) is no reason to fail
//! every later caller too: the guard is taken as it was left.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// [`Mutex::lock`] that takes the guard whether or not a holder panicked.
pub trait TolerantLock<T: ?Sized> {
    /// The guard, poisoned or not.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> TolerantLock<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_is_still_taken_as_it_was_left() {
        let m = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let mut g = m.lock().unwrap();
            *g = 2;
            panic!("a holder panics");
        });
        assert!(m.is_poisoned());
        assert_eq!(*m.locked(), 2);
        *m.locked() = 3;
        assert_eq!(*m.locked(), 3);
    }
}

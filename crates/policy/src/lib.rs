//! The readiness policy language of etcd-readiness-exporter, as a crate of
//! its own so that the data flow is enforced by Cargo: this crate knows the
//! [`signals`] catalogue and readings, the [`policy`] language (parse →
//! check → evaluate + explain) and the [`verdict`] it produces, and the
//! [`policytest`] runner behind the `test` command, and how all of it is
//! written for people ([`text`]), and the project's one poison-tolerant
//! lock ([`sync`]), which the runtime uses too. It depends on no async
//! runtime, HTTP stack or clock: time is passed in as `Instant`s, so the same
//! evaluator runs in `serve`, in `test` and in the conformance tables.

#![forbid(unsafe_code)]

pub mod duration;
pub mod policy;
pub mod policytest;
pub mod signals;
pub mod simulation;
pub mod sync;
pub mod text;
pub mod verdict;
pub mod yaml;

/// The crate reads no clock and opens nothing: every `Instant`, wall time
/// and file's text comes in from the caller (tests excepted, which start
/// their virtual clocks at now).
#[cfg(test)]
mod purity {
    fn sources(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.display().to_string(), text));
            }
        }
    }

    /// `needle` does not occur in the crate's code outside its test modules
    /// (which come last in every file).
    fn assert_absent(needles: &[&str], what: &str) {
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        assert!(files.len() > 10, "{files:?}");
        for (path, text) in &files {
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for needle in needles {
                assert!(!code.contains(needle), "{path} {what}: {needle}");
            }
        }
    }

    #[test]
    fn no_clock_is_read_outside_tests() {
        assert_absent(
            &["Instant::now", "SystemTime::now", "UNIX_EPOCH.elapsed"],
            "reads a clock",
        );
    }

    #[test]
    fn no_file_or_network_is_opened_outside_tests() {
        assert_absent(
            &[
                "std::fs",
                "File::open",
                "std::net",
                "std::process",
                "std::env::var",
            ],
            "does IO",
        );
    }
}

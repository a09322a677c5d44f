//! `POST /-/reload`: reload every reloadable file now, as Prometheus does for
//! its configuration, and answer one typed [`Report`] of them. The HTTP
//! surface mounts the endpoint (behind `--web.enable-lifecycle`) over the
//! exporter's [`Reloadables`]; [`reload_handler`] serves one policy file on
//! its own. This module writes no router.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{LastGood, Load, ReloadOutcome, ReloadTrigger};

/// A reloaded file as `POST /-/reload` sees it: whatever its [`Load`].
pub trait Reloadable: Send + Sync + 'static {
    /// Reload now (blocking, bounded by the reload deadline).
    fn reload(&self, trigger: ReloadTrigger) -> FileReport;
}

impl<L: Load> Reloadable for LastGood<L> {
    fn reload(&self, trigger: ReloadTrigger) -> FileReport {
        let names = self.names();
        FileReport {
            what: names.what,
            kept: names.kept,
            result: self
                .reload_now(trigger)
                .map_err(|e| ReloadFailure::Refused(e.full_text())),
        }
    }
}

/// What one file's reload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileReport {
    /// `policy`, `candidate policy`, `web config`, `scrape config`.
    pub what: &'static str,
    /// What a failure leaves in force, in words.
    pub kept: &'static str,
    /// The outcome, or why it failed.
    pub result: Result<ReloadOutcome, ReloadFailure>,
}

/// Why one file's reload failed; what was in force stays.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadFailure {
    /// The file was refused: the full text a human needs (for a policy,
    /// every problem with its source line and carets).
    #[error("{0}")]
    Refused(String),
    /// The blocking reload task died before it reported (its panic text).
    #[error("the reload task failed: {0}")]
    TaskDied(String),
}

impl FileReport {
    fn text(&self) -> String {
        match &self.result {
            Ok(ReloadOutcome::Applied { sha256 }) => {
                format!("{} reloaded (sha256 {sha256})\n", self.what)
            }
            Ok(ReloadOutcome::Unchanged { sha256 }) => {
                format!("{} unchanged (sha256 {sha256})\n", self.what)
            }
            Err(failure) => format!(
                "{} reload failed; {}\n\n{}\n",
                self.what,
                self.kept,
                failure.to_string().trim_end()
            ),
        }
    }
}

/// Every file one `POST /-/reload` reloaded, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub files: Vec<FileReport>,
}

impl Report {
    /// 200 when every file reloaded or was unchanged, 500 when one failed
    /// (the others were still reloaded), 409 when there is nothing to reload.
    pub fn status(&self) -> StatusCode {
        if self.files.is_empty() {
            StatusCode::CONFLICT
        } else if self.files.iter().any(|f| f.result.is_err()) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    }

    /// The answer's body: one line per file, and a failure's full text.
    pub fn text(&self) -> String {
        if self.files.is_empty() {
            return "no policy file to reload: the built-in default policy is in use \
                    (start with --policy FILE)\n"
                .to_string();
        }
        self.files.iter().map(FileReport::text).collect()
    }
}

/// The reloadable files of one exporter, in the order `POST /-/reload`
/// reloads and reports them: the web config, the scrape config, the policy,
/// the candidate policy.
#[derive(Clone, Default)]
pub struct Reloadables {
    files: Vec<Arc<dyn Reloadable>>,
}

impl std::fmt::Debug for Reloadables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloadables")
            .field("files", &self.files.len())
            .finish()
    }
}

impl Reloadables {
    pub fn push(&mut self, file: Arc<dyn Reloadable>) {
        self.files.push(file);
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Reload every file, one after the other, on tokio's blocking pool. A
    /// reload task that died (it cannot panic: panics are failed reloads)
    /// is reported as that file's failure.
    pub async fn reload_all(&self, trigger: ReloadTrigger) -> Report {
        let mut report = Report::default();
        for file in &self.files {
            let f = file.clone();
            let r = tokio::task::spawn_blocking(move || f.reload(trigger)).await;
            report.files.push(r.unwrap_or_else(|e| FileReport {
                what: "file",
                kept: "what was in force stays",
                result: Err(ReloadFailure::TaskDied(e.to_string())),
            }));
        }
        report
    }
}

/// Re-read one policy file. 200 `policy reloaded` or `policy unchanged`; 500
/// with the full diagnostics (carets and `file:line:col`) when the file is
/// invalid or unreadable, in which case the previous policy stays in force.
///
/// Mount with a state that yields `Arc<Reloader>` (directly, or through
/// `FromRef` on the application state):
/// `Router::new().route("/-/reload", post(reload_handler))`.
pub async fn reload_handler<L: Load>(State(reloader): State<Arc<LastGood<L>>>) -> Response {
    let mut all = Reloadables::default();
    all.push(reloader);
    respond(&all.reload_all(ReloadTrigger::Http).await)
}

/// A report as the plain-text answer.
pub fn respond(report: &Report) -> Response {
    (
        report.status(),
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        report.text(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(what: &'static str, result: Result<ReloadOutcome, ReloadFailure>) -> FileReport {
        FileReport {
            what,
            kept: "the previous one stays",
            result,
        }
    }

    #[test]
    fn one_line_per_file_in_order_and_a_failure_makes_it_500_without_hiding_the_others() {
        let report = Report {
            files: vec![
                file(
                    "web config",
                    Err(ReloadFailure::Refused("w.yml: bad".to_string())),
                ),
                file(
                    "policy",
                    Ok(ReloadOutcome::Applied {
                        sha256: "ab".to_string(),
                    }),
                ),
                file(
                    "candidate policy",
                    Ok(ReloadOutcome::Unchanged {
                        sha256: "cd".to_string(),
                    }),
                ),
            ],
        };
        assert_eq!(report.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            report.text(),
            "web config reload failed; the previous one stays\n\nw.yml: bad\n\
             policy reloaded (sha256 ab)\n\
             candidate policy unchanged (sha256 cd)\n"
        );
        let ok = Report {
            files: report.files[1..].to_vec(),
        };
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(Report::default().status(), StatusCode::CONFLICT);
        assert!(
            Report::default()
                .text()
                .starts_with("no policy file to reload")
        );
    }
}

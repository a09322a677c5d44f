//! The tests without etcd in one binary: the command line and its
//! conventions, the policy diagnostics (snapshots in `tests/snapshots/`,
//! named as when each file was its own binary), the HTTP layer without a
//! socket and docs/http.md's examples checked against it, hot reload on real files, and `replay` against a hostile
//! stand-in Prometheus, and the docs' command samples against what the binary
//! prints. Each module was its own binary `tests/NAME.rs`;
//! test paths stay `NAME::test` (e.g. `cargo test --test offline reload::`).
//! `reload::sighup_triggers_a_reload` sends this process SIGHUP: nothing
//! else here listens for it (no in-process exporter runs in this binary).

mod cli_conventions;
mod diagnostics;
mod http_api;
mod http_doc;
mod reload;
mod replay_hostile;
mod samples;
mod secrets;

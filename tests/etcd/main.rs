//! The etcd-facing tests in one binary: each starts real etcd members
//! (3.4 from PATH, or the one `ERE_ETCD` names) and the exporter against
//! them. CI runs this binary again on etcd 3.5.30 in full and on 3.5.16 as a
//! smoke test (`--test etcd etcd_cluster::`, `.ci/test`). Each module was
//! its own binary `tests/NAME.rs`; test paths stay `NAME::test` (e.g.
//! `cargo test --test etcd defrag::`). Support code is the testkit crate
//! (`crates/testkit`); heavy tests share its slots (`heavy`), so grouping
//! them does not run more clusters at once.

mod card_e2e;
mod credentials;
mod defrag;
mod etcd_auth;
mod etcd_cluster;
mod etcd_events;
mod etcd_mismatch;
mod member_info;
mod readme_sample;
mod slow_link;
mod status_page;

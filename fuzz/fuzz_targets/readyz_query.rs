//! Fuzz target: the `/readyz` query-string parser (`ReadyzQuery::parse`), on
//! arbitrary text as a client could send it, with and without a JSON
//! `Accept` header.
#![no_main]

use etcd_readiness_exporter::http::readyz::ReadyzQuery;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let q = ReadyzQuery::parse(Some(text), data.len().is_multiple_of(2));
    // Every excluded name comes from the query, so it is no longer than it.
    assert!(q.exclude.iter().map(String::len).sum::<usize>() <= text.len());
});

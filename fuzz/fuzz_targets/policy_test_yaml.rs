//! Fuzz target: the `test` command's YAML (`policytest::run_text`), parsed
//! and simulated against the shipped policies. The YAML's `policy:` picks one
//! of them by file name; any other name is a read error, as for a missing file.
#![no_main]

use std::path::Path;

use etcd_readiness_policy::policytest;
use etcd_readiness_policy::signals::Catalogue;
use libfuzzer_sys::fuzz_target;

const POLICIES: &[(&str, &str)] = &[
    ("card.policy", include_str!("../../policies/card.policy")),
    (
        "default.policy",
        include_str!("../../policies/default.policy"),
    ),
    (
        "gardener.policy",
        include_str!("../../policies/gardener.policy"),
    ),
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let catalogue = Catalogue::builtin();
    let origin = std::time::Instant::now();
    let _ = policytest::run_text(Path::new("fuzz.test.yaml"), text, &catalogue, origin, |p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        POLICIES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, src)| src.to_string())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    });
});

//! Fuzz target: the Prometheus text-format parser used by the backup and
//! scrape sources (`sources::promtext::parse`) on arbitrary text. It must
//! return samples or an error, never panic or hang.
#![no_main]

use etcd_readiness_exporter::sources::promtext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(samples) = promtext::parse(text) {
        for s in &samples {
            let _ = s.label("job");
        }
    }
});

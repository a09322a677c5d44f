//! Fuzz target: the `--config` sources file (`sources::config::Config::parse`)
//! and, when it is valid, adding its signals to the built-in catalogue.
#![no_main]

use etcd_readiness_policy::signals::Catalogue;
use etcd_readiness_exporter::sources::config::{Config, extend_catalogue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::parse("fuzz.yaml", text) {
        let mut catalogue = Catalogue::builtin();
        let _ = extend_catalogue(&config, &mut catalogue);
    }
});

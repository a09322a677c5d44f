//! Where the release binary's code goes (issue 48, item 6): the kernel maps
//! a binary's code 64 KiB at a time around each page that runs, so code that
//! runs, scattered over the whole `.text`, made nearly every code page
//! resident. `build/text-order.txt` lists the functions the probe benchmark
//! runs (made by `benches/text_order.sh`); the linker (rust-lld, rustc's
//! default on x86_64 Linux) puts them first, next to each other.
//!
//! Names the build does not have (a stale list after a dependency or rustc
//! update) are skipped without a warning: the binary is the same code, only
//! less packed, which `benches/rss_10min.sh` reports. `ERE_LINK_MAP=FILE`
//! also writes the linker's map (what `benches/text_order.sh` reads).

use std::path::Path;

/// The exporter binary's link arguments for its code order, in a release
/// build for x86_64 Linux (other targets may not link with lld).
pub fn emit(manifest_dir: &Path) {
    let order = manifest_dir.join("build/text-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=ERE_LINK_MAP");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") != "release" || var("TARGET") != "x86_64-unknown-linux-gnu" {
        return;
    }
    let arg = |a: String| println!("cargo:rustc-link-arg-bin=etcd-readiness-exporter={a}");
    if order.exists() {
        arg(format!("-Wl,--symbol-ordering-file={}", order.display()));
        arg("-Wl,--no-warn-symbol-ordering".to_string());
    }
    let map = var("ERE_LINK_MAP");
    if !map.is_empty() {
        arg(format!("-Wl,-Map={map}"));
    }
}

//! The `etcd-readiness-exporter` binary: a thin shell over the library.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    etcd_readiness_exporter::cmd::cli::run()
}

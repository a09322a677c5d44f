//! `fake-backup-sidecar PORT`: the backup sidecar stand-in as a process, for
//! the shell-driven monitoring test and benchmarks. Serves, on 127.0.0.1
//! only, a full and an incremental snapshot at revision 1 taken at start, so
//! a fresh etcd has a small `rev_lag`. Runs until killed.

use std::net::SocketAddr;
use std::process::ExitCode;

use etcd_readiness_testkit::backup::{Sidecar, SidecarState};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(port), None) = (args.next(), args.next()) else {
        eprintln!("usage: fake-backup-sidecar PORT");
        return ExitCode::from(2);
    };
    let Ok(port) = port.parse::<u16>() else {
        eprintln!("fake-backup-sidecar: PORT must be 0-65535, got {port:?}");
        return ExitCode::from(2);
    };
    let now = jiff::Timestamp::now().as_second() as f64;
    let state = SidecarState {
        full_revision: 1,
        full_timestamp: now,
        incr_revision: 1,
        incr_timestamp: now,
        ..SidecarState::default()
    };
    match Sidecar::start_on(SocketAddr::from(([127, 0, 0, 1], port)), state).await {
        Ok(s) => {
            println!("fake-backup-sidecar serving {}", s.url);
            std::future::pending::<()>().await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fake-backup-sidecar: cannot listen on 127.0.0.1:{port}: {e}");
            ExitCode::FAILURE
        }
    }
}

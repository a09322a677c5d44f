//! etcd's own timing settings, which the source's timing is derived from:
//! the member's heartbeat interval and election timeout. etcd reports
//! neither over its API (not in Status, not in `/metrics`), so they are
//! read where etcd reads them: `--etcd.heartbeat-interval` and
//! `--etcd.election-timeout` take etcd's own environment variables
//! (`ETCD_HEARTBEAT_INTERVAL`, `ETCD_ELECTION_TIMEOUT`, integer
//! milliseconds), so the env entry that configures the etcd container
//! configures the sidecar too; unset, etcd's defaults (100 ms, 1000 ms).
//! Checked as etcd checks them: an absurd value is a clear error at start,
//! never a panic.

use std::time::Duration;

/// etcd's `--heartbeat-interval` default.
pub const ETCD_HEARTBEAT: Duration = Duration::from_millis(100);
/// etcd's `--election-timeout` default.
pub const ETCD_ELECTION: Duration = Duration::from_millis(1000);
/// etcd's own upper bound on `--election-timeout` (embed's validation).
const ETCD_MAX_ELECTION_MS: u64 = 50_000;
/// How many times its setting an election timeout etcd draws can last:
/// raft draws each one between one and two times the setting
/// (`randomizedElectionTimeout`). Not a tunable: raft's rule.
pub const ELECTION_DRAW_MAX: u32 = 2;

/// The member's heartbeat interval and election timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    pub heartbeat: Duration,
    pub election: Duration,
}

impl Default for EtcdSettings {
    fn default() -> Self {
        EtcdSettings {
            heartbeat: ETCD_HEARTBEAT,
            election: ETCD_ELECTION,
        }
    }
}

/// Why the settings are unusable: etcd itself refuses to start with them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--etcd.heartbeat-interval must be at least 1 (milliseconds, as etcd's)")]
    ZeroHeartbeat,
    #[error(
        "--etcd.election-timeout {election} must be at least 5 times --etcd.heartbeat-interval \
         {heartbeat} (milliseconds; etcd refuses to start otherwise)"
    )]
    ElectionTooShort { heartbeat: u64, election: u64 },
    #[error(
        "--etcd.election-timeout {0} is over etcd's maximum of {ETCD_MAX_ELECTION_MS} (milliseconds)"
    )]
    ElectionTooLong(u64),
}

impl EtcdSettings {
    /// The settings in milliseconds, as etcd's flags and variables give
    /// them, checked by etcd's own rules.
    pub fn from_millis(heartbeat: u64, election: u64) -> Result<Self, SettingsError> {
        if heartbeat == 0 {
            return Err(SettingsError::ZeroHeartbeat);
        }
        if election > ETCD_MAX_ELECTION_MS {
            return Err(SettingsError::ElectionTooLong(election));
        }
        if election < heartbeat.saturating_mul(5) {
            return Err(SettingsError::ElectionTooShort {
                heartbeat,
                election,
            });
        }
        Ok(EtcdSettings {
            heartbeat: Duration::from_millis(heartbeat),
            election: Duration::from_millis(election),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_defaults_and_its_own_rules() {
        assert_eq!(
            EtcdSettings::from_millis(100, 1000),
            Ok(EtcdSettings::default())
        );
        assert_eq!(
            EtcdSettings::from_millis(0, 1000),
            Err(SettingsError::ZeroHeartbeat)
        );
        assert_eq!(
            EtcdSettings::from_millis(300, 1000),
            Err(SettingsError::ElectionTooShort {
                heartbeat: 300,
                election: 1000
            })
        );
        assert_eq!(
            EtcdSettings::from_millis(100, 50_001),
            Err(SettingsError::ElectionTooLong(50_001))
        );
        // An absurd heartbeat cannot overflow the check.
        assert!(EtcdSettings::from_millis(u64::MAX, 50_000).is_err());
        assert!(EtcdSettings::from_millis(10_000, 50_000).is_ok());
    }
}

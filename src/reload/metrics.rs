//! Reload metrics: whether the last reload worked, when one last did, how many
//! succeeded and failed, and which policy (by SHA-256) is in force.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::reload_status::{Help, ReloadStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShaLabels {
    sha256: String,
}

/// The reload metrics. Cheap to clone (handles to shared atomics).
#[derive(Clone, Debug)]
pub struct ReloadMetrics {
    status: ReloadStatus,
    info: Family<ShaLabels, Gauge>,
}

impl ReloadMetrics {
    /// Register in `registry` under their full names
    /// (`etcd_readiness_policy_*`): pass the root registry, not one with a
    /// prefix.
    pub fn register(registry: &mut Registry) -> ReloadMetrics {
        let status = ReloadStatus::register(
            registry,
            "etcd_readiness_policy",
            Help {
                successful: "Whether the last policy reload attempt succeeded (1) or failed (0)",
                timestamp: "Unix time of the last successful policy load or reload",
                reloads: "Policy reload attempts that changed or failed to change the policy, by result",
            },
        );
        let info = Family::<ShaLabels, Gauge>::default();
        registry.register(
            "etcd_readiness_policy_info",
            "The policy in force, by SHA-256 of its file content (value 1)",
            info.clone(),
        );
        ReloadMetrics { status, info }
    }

    /// The same families for the candidate policy's reloader
    /// (`--policy.candidate`), as `etcd_readiness_candidate_policy_*`: a
    /// second instance under names of their own, so that a broken candidate
    /// neither fires the alerts on `etcd_readiness_policy_last_reload_successful`
    /// nor counts as policy drift on `etcd_readiness_policy_info`.
    pub fn register_candidate(registry: &mut Registry) -> ReloadMetrics {
        let status = ReloadStatus::register(
            registry,
            "etcd_readiness_candidate_policy",
            Help {
                successful: "Whether the last candidate policy reload attempt succeeded (1) or failed (0)",
                timestamp: "Unix time of the last successful candidate policy load or reload",
                reloads: "Candidate policy reload attempts that changed or failed to change the candidate, by result",
            },
        );
        let info = Family::<ShaLabels, Gauge>::default();
        registry.register(
            "etcd_readiness_candidate_policy_info",
            "The candidate policy in force, by SHA-256 of its file content (value 1)",
            info.clone(),
        );
        ReloadMetrics { status, info }
    }

    /// A policy with `sha256` is now in force, replacing the one with `old`.
    pub(super) fn set_in_force(&self, old: Option<&str>, sha256: &str) {
        if let Some(old) = old.filter(|o| *o != sha256) {
            self.info.remove(&ShaLabels {
                sha256: old.to_string(),
            });
        }
        self.info
            .get_or_create(&ShaLabels {
                sha256: sha256.to_string(),
            })
            .set(1);
    }

    /// The status families ([`super::LastGood`] marks them).
    pub fn status(&self) -> &ReloadStatus {
        &self.status
    }

    /// The policy in force came from no file (the built-in default): show
    /// it as loaded at `wall`, as a file's start-up load is. Explicit, so no
    /// reloader exists only to initialise these families.
    pub fn loaded(&self, sha256: &str, wall: std::time::SystemTime) {
        self.set_in_force(None, sha256);
        self.status.mark_success(false, wall);
    }

    /// Whether the last reload attempt succeeded.
    pub fn last_reload_successful(&self) -> bool {
        self.status.last_reload_successful()
    }

    /// Reloads counted with `result` `"success"` or `"failure"`.
    pub fn reloads(&self, success: bool) -> u64 {
        self.status.reloads(success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use std::time::SystemTime;

    fn scrape(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    /// Sample lines only (no `# HELP`/`# TYPE`), sorted, timestamp gauge masked.
    fn samples(registry: &Registry) -> Vec<String> {
        let mut lines = scrape(registry)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                if l.starts_with("etcd_readiness_policy_last_reload_success_timestamp_seconds ") {
                    "etcd_readiness_policy_last_reload_success_timestamp_seconds T".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>();
        // Series within a family come in no fixed order.
        lines.sort();
        lines
    }

    #[test]
    fn exposition_before_any_load() {
        let mut r = Registry::default();
        let _m = ReloadMetrics::register(&mut r);
        let types: Vec<String> = scrape(&r)
            .lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(str::to_string)
            .collect();
        assert_eq!(
            types,
            [
                "# TYPE etcd_readiness_policy_last_reload_successful gauge",
                "# TYPE etcd_readiness_policy_last_reload_success_timestamp_seconds gauge",
                "# TYPE etcd_readiness_policy_reloads counter",
                // An empty family is not exposed: no policy in force, no info.
            ]
        );
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_policy_last_reload_success_timestamp_seconds T",
                "etcd_readiness_policy_last_reload_successful 0",
                "etcd_readiness_policy_reloads_total{result=\"failure\"} 0",
                "etcd_readiness_policy_reloads_total{result=\"success\"} 0",
            ]
        );
    }

    #[test]
    fn the_candidates_instance_has_names_of_its_own() {
        let mut r = Registry::default();
        let live = ReloadMetrics::register(&mut r);
        let candidate = ReloadMetrics::register_candidate(&mut r);
        live.set_in_force(None, "aaa");
        live.status()
            .mark_success(false, std::time::SystemTime::now());
        candidate.status().mark_failure();
        let lines: Vec<String> = samples(&r)
            .into_iter()
            .filter(|l| !l.contains("timestamp"))
            .collect();
        assert_eq!(
            lines,
            [
                "etcd_readiness_candidate_policy_last_reload_successful 0",
                "etcd_readiness_candidate_policy_reloads_total{result=\"failure\"} 1",
                "etcd_readiness_candidate_policy_reloads_total{result=\"success\"} 0",
                "etcd_readiness_policy_info{sha256=\"aaa\"} 1",
                "etcd_readiness_policy_last_reload_successful 1",
                "etcd_readiness_policy_reloads_total{result=\"failure\"} 0",
                "etcd_readiness_policy_reloads_total{result=\"success\"} 0",
            ]
        );
    }

    #[test]
    fn info_follows_the_policy_in_force_and_drops_the_old_sha() {
        let mut r = Registry::default();
        let m = ReloadMetrics::register(&mut r);
        m.set_in_force(None, "aaa");
        m.status().mark_success(false, std::time::SystemTime::now());
        m.status().mark_failure();
        m.set_in_force(Some("aaa"), "bbb");
        m.status().mark_success(true, std::time::SystemTime::now());
        assert_eq!(
            samples(&r),
            [
                "etcd_readiness_policy_info{sha256=\"bbb\"} 1",
                "etcd_readiness_policy_last_reload_success_timestamp_seconds T",
                "etcd_readiness_policy_last_reload_successful 1",
                "etcd_readiness_policy_reloads_total{result=\"failure\"} 1",
                "etcd_readiness_policy_reloads_total{result=\"success\"} 1",
            ]
        );
        assert!(m.last_reload_successful());
    }

    #[test]
    fn success_timestamp_is_unix_seconds_now() {
        let mut r = Registry::default();
        let m = ReloadMetrics::register(&mut r);
        let before = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        m.status().mark_success(true, std::time::SystemTime::now());
        let after = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let text = scrape(&r);
        let value: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("etcd_readiness_policy_last_reload_success_timestamp_seconds ")
            })
            .expect("timestamp line")
            .parse()
            .unwrap();
        assert!(value >= before.as_secs_f64() - 0.001 && value <= after.as_secs_f64() + 0.001);
    }
}

// The mixin's settings. Override any of them when you import the mixin:
//
//   (import 'mixin/mixin.libsonnet') + { _config+:: { clusterLabel: '', revLagThreshold: 20000 } }
//
// Every shipped file (dashboards/alerts.yaml, dashboards/etcd-readiness.json,
// dashboards/prometheusrule.yaml, dashboards/grafana-dashboard-configmap.yaml,
// docs/alertmanager-example.yaml) is rendered from the defaults below by
// .ci/mixin.
{
  _config+:: {
    // Label matchers selecting the exporter's scrape targets in `up` (the only
    // series the exporter does not name itself). The default does not depend
    // on the job name: the Prometheus Operator labels every target of a
    // PodMonitor or ServiceMonitor with the container it scrapes, and the
    // shipped StatefulSet names the sidecar `etcd-readiness-exporter`. A
    // ServiceMonitor on the etcd Service names the job `etcd`; etcd's own
    // port is another container, so `up` of etcd never matches. With plain
    // static_configs set it to your job, e.g. 'job="etcd-readiness"'.
    exporterSelector: 'container="etcd-readiness-exporter"',

    // Also fire EtcdReadinessExporterDown when no target matches
    // exporterSelector at all (absent()). Turn it off where this Prometheus
    // does not scrape etcd clusters everywhere it evaluates the rules.
    exporterAbsentAlert: true,

    // The label that names the Kubernetes cluster (or environment) in a
    // Prometheus that sees several, as kube-prometheus' `cluster`. Cluster
    // alerts aggregate by (namespace, <clusterLabel>, cluster_id) so that they
    // route like the member alerts; the dashboard gets a variable for it.
    // '' for a single-cluster Prometheus: no such label anywhere.
    clusterLabel: 'cluster',

    // Thresholds. rev_lag: revisions not in any backup, the threshold of the
    // backup_lag check in policies/gardener.policy.
    revLagThreshold: 5000,
    // More than this many readiness flips within flappingWindow.
    flappingThreshold: 4,
    flappingWindow: '15m',

    // How long each alert's condition must hold (`for:`).
    alertFor: {
      EtcdMemberNotReady: '5m',
      EtcdReadinessFlapping: '0s',
      EtcdReadinessPolicyReloadFailing: '2m',
      EtcdReadinessSignalStale: '5m',
      EtcdRevisionLagHigh: '10m',
      EtcdOwnerCheckFailing: '5m',
      EtcdReadinessExporterDown: '5m',
      EtcdClusterReadyMembersBelowQuorum: '2m',
      EtcdClusterAllMembersNotReady: '1m',
      EtcdClusterPolicyDrift: '10m',
      EtcdClusterCandidatePolicyBelowQuorum: '2m',
    },

    // How long a target that went down keeps the cluster_id of the member it
    // sampled, for EtcdReadinessExporterDown (its member_info is stale once
    // the scrapes fail).
    memberInfoLookback: '1h',

    // runbook_url = runbookURLBase + '#' + the alert's anchor in
    // docs/runbooks.md. Point it at where your on-call reads that file (your
    // copy of the repository, a wiki); the default is the path in the repository.
    runbookURLBase: 'docs/runbooks.md',

    // The dashboard.
    dashboardUid: 'etcd-readiness',
    dashboardTitle: 'etcd readiness',
    dashboardTags: ['etcd', 'etcd-readiness'],
    dashboardRefresh: '30s',
    // The ConfigMap for Grafana's dashboard sidecar (kube-prometheus-stack,
    // the grafana Helm chart), which loads every ConfigMap with this label.
    dashboardConfigMap: {
      name: 'etcd-readiness-dashboard',
      labels: { grafana_dashboard: '1' },
    },

    // The PrometheusRule object.
    prometheusRule: {
      name: 'etcd-readiness',
      labels: { 'app.kubernetes.io/name': 'etcd' },
    },
  },
}

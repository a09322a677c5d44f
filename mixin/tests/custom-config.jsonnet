// A non-default _config for the mixin's tests (.ci/mixin --check renders the
// rules with it and runs mixin/tests/custom.test.yaml): a static_configs job
// selected by job and endpoint, another cluster label, other thresholds and
// holds, an absolute runbook base URL, and no absent() alert.
{
  exporterSelector: 'job="etcd-readiness", endpoint="ere-metrics"',
  exporterAbsentAlert: false,
  clusterLabel: 'k8s_cluster',
  revLagThreshold: 1000,
  flappingThreshold: 2,
  flappingWindow: '10m',
  runbookURLBase: 'https://runbooks.example.invalid/etcd-readiness/runbooks.md',
  alertFor+: {
    EtcdMemberNotReady: '2m',
    EtcdRevisionLagHigh: '3m',
    EtcdReadinessExporterDown: '1m',
    EtcdClusterReadyMembersBelowQuorum: '1m',
  },
}

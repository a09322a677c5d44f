// An example Alertmanager configuration for the mixin's alerts
// (alertmanagerExample), rendered to docs/alertmanager-example.yaml and used,
// with the test's receiver and timings, by tests/monitoring/prometheus_it.sh.
//
// Routing: alerts are grouped per etcd cluster (namespace, the cluster
// label, cluster_id), so one notification tells about one cluster.
// Inhibition: while a cluster alert says the cluster as a whole is not
// serving, the member alerts that are its consequence (a member not ready,
// flapping, a stale signal) of the same cluster are suppressed, and "all
// members not ready" suppresses "below quorum". `equal` names the labels
// both must have the same value of; an alert without cluster_id (a member
// whose exporter never reached etcd) is never inhibited.
{
  local c = self._config,
  local clusterLabels = (if c.clusterLabel == '' then [] else [c.clusterLabel]),

  alertmanagerInhibitRules+:: [
    {
      source_matchers: ['alertname=~"EtcdClusterReadyMembersBelowQuorum|EtcdClusterAllMembersNotReady"'],
      target_matchers: ['alertname=~"EtcdMemberNotReady|EtcdReadinessFlapping|EtcdReadinessSignalStale"'],
      equal: ['namespace'] + clusterLabels + ['cluster_id'],
    },
    {
      source_matchers: ['alertname="EtcdClusterAllMembersNotReady"'],
      target_matchers: ['alertname="EtcdClusterReadyMembersBelowQuorum"'],
      equal: ['namespace'] + clusterLabels + ['cluster_id'],
    },
  ],

  // receiver: an Alertmanager receiver object; timing: group_wait,
  // group_interval and repeat_interval of the route.
  alertmanagerExample(receiver, timing={ group_wait: '30s', group_interval: '5m', repeat_interval: '4h' }):: {
    route: {
      receiver: receiver.name,
      group_by: ['alertname', 'namespace'] + clusterLabels + ['cluster_id'],
    } + timing,
    receivers: [receiver],
    inhibit_rules: $.alertmanagerInhibitRules,
  },
}

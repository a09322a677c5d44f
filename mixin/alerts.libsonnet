// The alerting rules (prometheusAlerts). Member alerts are one per exporter
// and carry the target's labels (namespace, pod, the cluster label) plus
// `cluster_id` joined from etcd_readiness_member_info; cluster alerts
// aggregate by (namespace, <clusterLabel>, cluster_id). So Alertmanager can
// route both by namespace and cluster, and a cluster alert can inhibit the
// member alerts of the same cluster (docs/alertmanager-example.yaml).
// Every alert links its section of docs/runbooks.md (runbook_url).
{
  local c = self._config,
  local cl = c.clusterLabel,
  local clusterLabels = if cl == '' then [] else [cl],
  // The labels a cluster alert keeps.
  local clusterBy = std.join(', ', ['namespace'] + clusterLabels + ['cluster_id']),

  // `expr` with the cluster_id of its member joined on; an exporter that has
  // not reached etcd since it started has no member_info and keeps its
  // series without cluster_id (the `unless` half), so it still alerts.
  local withClusterId(expr, info='etcd_readiness_member_info') = |||
    (
      %(e)s
    ) * on (job, instance) group_left (cluster_id) %(info)s
      or
    (
      %(e)s
    ) unless on (job, instance) %(info)s
  ||| % { e: std.strReplace(std.stripChars(expr, '\n'), '\n', '\n  '), info: info },

  // Templates shared by the annotations.
  local member = '{{ with $labels.pod }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}',
  local place = '{{ with $labels.namespace }} in namespace {{ . }}{{ end }}'
                + (if cl == '' then '' else '{{ with index $labels "%s" }} on %s {{ . }}{{ end }}' % [cl, cl]),
  local ofCluster = '{{ with $labels.cluster_id }} of etcd cluster {{ . }}{{ end }}',
  local cluster = 'etcd cluster {{ $labels.cluster_id }}' + place,
  // The names of the members of the alert's cluster for which `filter`
  // (PromQL, joined on job and instance) holds, comma-separated.
  local membersWhere(filter) =
    '{{ range $i, $m := printf "etcd_readiness_member_info{cluster_id=%%q} and on (job, instance) (%s)" $labels.cluster_id | query | sortByLabel "name" }}{{ if $i }}, {{ end }}{{ with $m.Labels.name }}{{ . }}{{ else }}{{ $m.Labels.instance }}{{ end }}{{ end }}' % filter,

  local alert(name, severity, expr, summary, description) = {
    alert: name,
    expr: expr,
    labels: { severity: severity },
    annotations: {
      summary: summary,
      // One line: the text blocks above are wrapped for reading only.
      description: std.strReplace(std.stripChars(description, '\n'), '\n', ' '),
      runbook_url: c.runbookURLBase + '#' + std.asciiLower(name),
    },
  } + (if c.alertFor[name] == '0s' then {} else { 'for': c.alertFor[name] }),

  prometheusAlerts+:: {
    groups+: [
      {
        name: 'etcd-readiness',
        rules: [
          // The exporter's verdict is what the kubelet's readinessProbe sees, so
          // a member that stays unready has been out of its Service this long.
          alert(
            'EtcdMemberNotReady',
            'warning',
            withClusterId('etcd_readiness_ready == 0'),
            'etcd member %s%s%s is not ready' % [member, ofCluster, place],
            |||
              The readiness policy has judged etcd member %s ({{ $labels.instance }}) not
              ready for %s. `kubectl port-forward pod/<pod> 9380` and
              `curl -s localhost:9380/readyz?verbose` list the failing checks (the plain
              probe port); the "Failing checks" table of the etcd readiness dashboard
              shows them too.
            ||| % [member, c.alertFor.EtcdMemberNotReady],
          ),
          // Readiness flips make the Service endpoints churn and clients
          // reconnect. Counted by the exporter, so flips between scrapes count.
          alert(
            'EtcdReadinessFlapping',
            'warning',
            withClusterId('increase(etcd_readiness_transitions_total[%s]) > %d' % [c.flappingWindow, c.flappingThreshold]),
            'etcd member %s%s%s readiness is flapping' % [member, ofCluster, place],
            |||
              Readiness of etcd member %s ({{ $labels.instance }}) changed about
              {{ $value | printf "%%.0f" }} times in the last %s. Look at
              etcd_readiness_check_transitions_total to see which check flaps; a check
              near its threshold may need a `for` hold-down in the policy.
            ||| % [member, c.flappingWindow],
          ),
          // A bad policy edit is rejected and the last good policy stays in
          // force: nothing breaks at once, but the edit is not active.
          alert(
            'EtcdReadinessPolicyReloadFailing',
            'warning',
            withClusterId('etcd_readiness_policy_last_reload_successful == 0'),
            'etcd readiness policy reload failing on %s%s%s' % [member, ofCluster, place],
            |||
              The last reload of the readiness policy on %s ({{ $labels.instance }})
              failed; the previous policy is still in force. Run
              `etcd-readiness-exporter check <file>` on the ConfigMap's policy to see the
              diagnostics, or read the exporter's log.
            ||| % member,
          ),
          // A signal nobody can measure makes every check that uses it unknown.
          // Only sources with a running sampler count (the sample-duration
          // histogram has observations): an unconfigured source pages nobody.
          alert(
            'EtcdReadinessSignalStale',
            'warning',
            withClusterId(|||
              (etcd_readiness_signal_known == 0)
                and on (job, instance, source)
              (sum by (job, instance, source) (etcd_readiness_sample_duration_seconds_count) > 0)
            |||),
            'signal {{ $labels.signal }} unknown on etcd member %s%s%s' % [member, ofCluster, place],
            |||
              The signal {{ $labels.signal }} from source {{ $labels.source }} on %s
              ({{ $labels.instance }}) has been unknown for %s: its source fails or
              times out (see etcd_readiness_sample_errors_total by reason). Checks that
              use it are not passing.
            ||| % [member, c.alertFor.EtcdReadinessSignalStale],
          ),
          // Revisions not yet in any backup: data that a restore would lose.
          alert(
            'EtcdRevisionLagHigh',
            'warning',
            withClusterId('etcd_readiness_signal_value{signal="rev_lag"} > %d' % c.revLagThreshold),
            'etcd member %s%s%s is {{ $value }} revisions ahead of its last backup' % [member, ofCluster, place],
            |||
              etcd member %s ({{ $labels.instance }}) has been more than %d revisions
              ahead of the newest snapshot for %s ({{ $value }} now). Backups are
              failing or lagging; check the backup sidecar.
            ||| % [member, c.revLagThreshold, c.alertFor.EtcdRevisionLagHigh],
          ),
          // A confirmed owner mismatch: the DNS TXT record names another owner.
          // DNS errors leave owner_ok unknown (absent), they do not fire this.
          alert(
            'EtcdOwnerCheckFailing',
            'critical',
            withClusterId('etcd_readiness_signal_value{signal="owner_ok"} == 0'),
            'etcd member %s%s%s is not the owner of its DNS name' % [member, ofCluster, place],
            |||
              The owner check of %s ({{ $labels.instance }}) has failed for %s: the
              first TXT string of the owner name does not equal this cluster's owner id.
              Another cluster may be serving the same data.
            ||| % [member, c.alertFor.EtcdOwnerCheckFailing],
          ),
          // Without the exporter the kubelet's readinessProbe fails and the
          // member leaves its Service: the exporter being down is an etcd outage.
          // A target that went down keeps the cluster_id it last exported for
          // memberInfoLookback (topk: one identity per target, should it have
          // changed within that time).
          alert(
            'EtcdReadinessExporterDown',
            'critical',
            withClusterId(
              'up{%s} == 0' % c.exporterSelector,
              'topk by (job, instance) (1, last_over_time(etcd_readiness_member_info[%s]))' % c.memberInfoLookback,
            ) + (if c.exporterAbsentAlert then '  or\nabsent(up{%s})\n' % c.exporterSelector else ''),
            'etcd readiness exporter is down{{ with $labels.instance }} on {{ . }}{{ end }}%s%s' % [ofCluster, place],
            |||
              Prometheus cannot scrape the etcd readiness exporter
              {{ with $labels.instance }}{{ . }}{{ else }}(no target matches %s at all){{ end }}
              for %s. Its /readyz is what the etcd readinessProbe asks, so the member
              is probably out of service too.
            ||| % [c.exporterSelector, c.alertFor.EtcdReadinessExporterDown],
          ),

          // --- Cluster level ---------------------------------------------------
          // Members are grouped by etcd_readiness_member_info{cluster_id}, which
          // each exporter reads from its member's Status answer; members are the
          // distinct member_id of a cluster, and an exporter keeps its member's
          // identity while etcd does not answer, so a member that is down counts.
          alert(
            'EtcdClusterReadyMembersBelowQuorum',
            'critical',
            |||
              sum by (%(by)s) (max by (%(by)s, member_id) (
                etcd_readiness_ready
                  * on (job, instance) group_left (cluster_id, member_id)
                etcd_readiness_member_info
              ))
                <
              floor(count by (%(by)s) (count by (%(by)s, member_id) (etcd_readiness_member_info)) / 2) + 1
            ||| % { by: clusterBy },
            '%s has {{ $value }} ready members, fewer than its quorum' % cluster,
            |||
              Only {{ $value }} member(s) of %s have been ready for %s, fewer than its
              quorum. Not ready: %s. The cluster cannot commit writes through its ready
              members; the "etcd cluster" row of the etcd readiness dashboard shows
              which members fail and why.
            ||| % [cluster, c.alertFor.EtcdClusterReadyMembersBelowQuorum, membersWhere('etcd_readiness_ready == 0')],
          ),
          // Every member not ready at once: the Service has no endpoint at all.
          alert(
            'EtcdClusterAllMembersNotReady',
            'critical',
            |||
              max by (%s) (
                etcd_readiness_ready
                  * on (job, instance) group_left (cluster_id)
                etcd_readiness_member_info
              ) == 0
            ||| % clusterBy,
            'no member of %s is ready' % cluster,
            |||
              Every member of %s (%s) has been not ready for %s: its client Service has
              no endpoint. If the same check fails on all members after a policy change,
              the policy may be wrong (`etcd-readiness-exporter test`); otherwise quorum
              is probably lost.
            ||| % [cluster, membersWhere('etcd_readiness_ready == 0'), c.alertFor.EtcdClusterAllMembersNotReady],
          ),
          // The candidate policy (--policy.candidate) would have left fewer
          // ready members than the quorum while the policy in force did not:
          // promoting it as it is would have been an outage. Members without
          // a candidate count with their live verdict. Information for
          // whoever is rolling the candidate out, not a page.
          alert(
            'EtcdClusterCandidatePolicyBelowQuorum',
            'info',
            |||
              (
                sum by (%(by)s) (max by (%(by)s, member_id) (
                  (etcd_readiness_candidate_ready or on (job, instance) etcd_readiness_ready)
                    * on (job, instance) group_left (cluster_id, member_id)
                  etcd_readiness_member_info
                ))
                  <
                floor(count by (%(by)s) (count by (%(by)s, member_id) (etcd_readiness_member_info)) / 2) + 1
              )
                and on (%(by)s)
              (
                sum by (%(by)s) (max by (%(by)s, member_id) (
                  etcd_readiness_ready
                    * on (job, instance) group_left (cluster_id, member_id)
                  etcd_readiness_member_info
                ))
                  >=
                floor(count by (%(by)s) (count by (%(by)s, member_id) (etcd_readiness_member_info)) / 2) + 1
              )
            ||| % { by: clusterBy },
            'the candidate readiness policy would leave %s with {{ $value }} ready members, fewer than its quorum' % cluster,
            |||
              The candidate policy (--policy.candidate) would have made %s lose its quorum
              of ready members for %s: it would have left {{ $value }} ready while the
              policy in force keeps a quorum. Would be unready: %s. Do not promote this
              candidate as it is; `curl -s localhost:9380/readyz?policy=candidate&verbose`
              on those members names the checks that would fail.
            ||| % [cluster, c.alertFor.EtcdClusterCandidatePolicyBelowQuorum, membersWhere('etcd_readiness_candidate_ready == 0')],
          ),
          // Two policy versions in one cluster are normal for a minute or two
          // after an edit (each kubelet updates its pod's mount at its own time).
          alert(
            'EtcdClusterPolicyDrift',
            'warning',
            |||
              count by (%(by)s) (count by (%(by)s, sha256) (
                etcd_readiness_policy_info
                  * on (job, instance) group_left (cluster_id)
                etcd_readiness_member_info
              )) > 1
            ||| % { by: clusterBy },
            'members of %s run {{ $value }} different readiness policies' % cluster,
            |||
              The members of %s have evaluated {{ $value }} different readiness
              policies (by sha256 of etcd_readiness_policy_info) for %s. Compare the
              "Active policy" table of the etcd readiness dashboard; a member whose last
              reload failed also fires EtcdReadinessPolicyReloadFailing.
            ||| % [cluster, c.alertFor.EtcdClusterPolicyDrift],
          ),
        ],
      },
    ],
  },
}

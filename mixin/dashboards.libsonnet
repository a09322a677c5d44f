// The Grafana dashboard (grafanaDashboards['etcd-readiness.json']). Panels
// and their presentation are in panels.libsonnet; this file builds every
// query from _config through `q`, the template variables and the
// annotations.
//
// Variables: data source, the cluster label (when _config.clusterLabel is
// set), namespace, etcd cluster (cluster_id), pod and instance, each chained
// into the next. Every member panel follows the cluster label, namespace and
// cluster_id too: its series are joined on (job, instance) with
// etcd_readiness_member_info of the selected clusters; an exporter that has
// not reached etcd since it started has no member_info, and its series are
// shown whatever cluster is selected (it cannot tell which it belongs to).
{
  local c = self._config,
  local cl = c.clusterLabel,
  local ds = { type: 'prometheus', uid: '${datasource}' },
  local clusterMatch = if cl == '' then '' else '%s=~"$%s", ' % [cl, cl],
  local info = 'etcd_readiness_member_info{%snamespace=~"$namespace", cluster_id=~"$cluster_id"}' % clusterMatch,
  local memberSel = clusterMatch + 'namespace=~"$namespace", pod=~"$pod", instance=~"$instance"',

  local q = {
    datasource: ds,
    info: info,
    memberSel: memberSel,
    // The labels the cluster row aggregates by, as the cluster alerts do.
    by: std.join(', ', ['namespace'] + (if cl == '' then [] else [cl]) + ['cluster_id']),
    // ... and the member panels that sum (pod, instance and more are added).
    memberBy: std.join(', ', ['namespace'] + (if cl == '' then [] else [cl])),
    signal(name): 'etcd_readiness_signal_value{%s, signal="%s"}' % [memberSel, name],
    inCluster(x): '(%(x)s and on (job, instance) %(info)s)\n  or\n(%(x)s unless on (job, instance) etcd_readiness_member_info)' % { x: x, info: info },
    clusterNote: ' Follows the etcd cluster selector (cluster_id, joined from etcd_readiness_member_info); an exporter that has not reached etcd yet is shown for every cluster.',
    target(refId, expr, extra): { datasource: ds, refId: refId, expr: expr, editorMode: 'code' } + extra,
  },

  local variable(name, label, query, extra={}) = {
    type: 'query',
    name: name,
    label: label,
    datasource: ds,
    definition: query,
    query: { query: query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
    includeAll: true,
    allValue: '.*',
    multi: true,
    refresh: 2,
    sort: 1,
    current: { selected: true, text: ['All'], value: ['$__all'] },
    options: [],
    hide: 0,
    regex: '',
    skipUrlSync: false,
  } + extra,

  local annotation(name, color, expr, title, text, tags) = {
    name: name,
    datasource: ds,
    enable: true,
    hide: false,
    iconColor: color,
    expr: expr,
    step: '$__interval',
    titleFormat: title,
    textFormat: text,
    tagKeys: tags,
    useValueForTime: false,
  },

  grafanaDashboards+:: {
    'etcd-readiness.json': {
      uid: c.dashboardUid,
      title: c.dashboardTitle,
      description: 'Readiness of etcd clusters (ready members vs quorum, policy versions) and of their members as decided by etcd-readiness-exporter: verdict, failing checks, etcd, backup and owner signals, policy reloads and the exporter itself.',
      tags: c.dashboardTags,
      schemaVersion: 39,
      version: 1,
      editable: true,
      graphTooltip: 1,
      refresh: c.dashboardRefresh,
      time: { from: 'now-6h', to: 'now' },
      timepicker: {},
      timezone: '',
      fiscalYearStartMonth: 0,
      liveNow: false,
      links: [],
      annotations: {
        list: [
          {
            builtIn: 1,
            datasource: { type: 'grafana', uid: '-- Grafana --' },
            enable: true,
            hide: true,
            iconColor: 'rgba(0, 211, 255, 1)',
            name: 'Annotations & Alerts',
            type: 'dashboard',
          },
          // A member's verdict changed (counted by the exporter, so a flip
          // between two scrapes is seen), and its verdict now.
          annotation(
            'Readiness transitions',
            'orange',
            q.inCluster('increase(etcd_readiness_transitions_total{%s}[$__rate_interval]) > 0' % memberSel),
            'readiness changed on {{pod}} {{instance}}',
            'etcd_readiness_transitions_total rose by {{value}}',
            'namespace,pod',
          ),
          // A policy reload (a ConfigMap edit reaching the pod, SIGHUP, POST
          // /-/reload), successful or not.
          annotation(
            'Policy reloads',
            'purple',
            'sum by (%s, pod, instance, result) (%s) > 0' % [q.memberBy, q.inCluster('increase(etcd_readiness_policy_reloads_total{%s}[$__rate_interval])' % memberSel)],
            'policy reload {{result}} on {{pod}} {{instance}}',
            '{{value}} reload(s) with result {{result}}',
            'namespace,pod,result',
          ),
        ],
      },
      templating: {
        list: [
          {
            type: 'datasource',
            name: 'datasource',
            label: 'Data source',
            query: 'prometheus',
            current: {},
            hide: 0,
            includeAll: false,
            multi: false,
            options: [],
            refresh: 1,
            regex: '',
            skipUrlSync: false,
          },
        ] + (if cl == '' then [] else [
               variable(cl, 'Cluster', 'label_values(etcd_readiness_ready, %s)' % cl),
             ]) + [
          variable('namespace', 'Namespace', 'label_values(etcd_readiness_ready{%s}, namespace)' % std.stripChars(clusterMatch, ', ')),
          variable('cluster_id', 'etcd cluster', 'label_values(%s, cluster_id)' % ('etcd_readiness_member_info{%snamespace=~"$namespace"}' % clusterMatch)),
          variable('pod', 'Pod', 'label_values(%s, pod)' % info),
          variable('instance', 'Instance', 'label_values(%s, instance)' % ('etcd_readiness_member_info{%snamespace=~"$namespace", cluster_id=~"$cluster_id", pod=~"$pod"}' % clusterMatch)),
        ],
      },
      panels: (import 'panels.libsonnet')(q),
    },
  },
}

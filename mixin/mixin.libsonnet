// etcd-readiness-exporter monitoring mixin (monitoring-mixins convention):
// `_config` (config.libsonnet), `prometheusAlerts` (alerts.libsonnet),
// `prometheusRules` (none: every alert works on the raw series),
// `grafanaDashboards` (dashboards.libsonnet), and an example Alertmanager
// inhibition (alertmanager.libsonnet). Use it as any mixin:
//
//   local mixin = (import 'mixin.libsonnet') + { _config+:: { clusterLabel: '' } };
//   { 'alerts.yaml': std.manifestYamlDoc(mixin.prometheusAlerts) }
//
// .ci/mixin renders the repository's shipped files from it (render.jsonnet).
(import 'config.libsonnet')
+ (import 'alerts.libsonnet')
+ (import 'dashboards.libsonnet')
+ (import 'alertmanager.libsonnet')
+ { prometheusRules+:: { groups+: [] } }

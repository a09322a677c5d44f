// The dashboard's panels: layout, descriptions and field configs, with every
// query built by `q` (dashboards.libsonnet) from the mixin's _config.
// Panels are listed in dashboard order; ids and gridPos are fixed so links
// to a panel (viewPanel=ID) stay valid across versions.
function(q) [
  {
    "type": "row",
    "title": "etcd cluster $cluster_id",
    "id": 24,
    "collapsed": false,
    "description": "One row per etcd cluster (repeated over the cluster_id variable): members are grouped by etcd_readiness_member_info{cluster_id}, read by each exporter from its member's Status answer.",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 0
    },
    "panels": [],
    "repeat": "cluster_id",
    "repeatDirection": "h",
  },
  {
    "type": "timeseries",
    "title": "Ready members vs quorum",
    "id": 25,
    "description": "Members of this etcd cluster that the exporter judges ready (sum of etcd_readiness_ready per member), against the quorum size floor(members/2)+1, where members are the distinct member_id of etcd_readiness_member_info. Ready below quorum means clients cannot be served by enough members: the EtcdClusterReadyMembersBelowQuorum alert fires after 2 minutes. A member whose exporter has never reached etcd since it started has no member_info and is not counted.",
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 10,
      "x": 0,
      "y": 1
    },
    targets: [
      q.target("A", 'sum by (%s) (max by (%s, member_id) (\n  etcd_readiness_ready\n    * on (job, instance) group_left (cluster_id, member_id)\n  %s\n))' % [q.by, q.by, q.info], {
        "legendFormat": "ready members",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", 'floor(count by (%s) (count by (%s, member_id) (%s)) / 2) + 1' % [q.by, q.by, q.info], {
        "legendFormat": "quorum size",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("C", 'count by (%s) (count by (%s, member_id) (%s))' % [q.by, q.by, q.info], {
        "legendFormat": "members",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "min": 0,
        "decimals": 0,
        "custom": {
          "lineWidth": 2,
          "fillOpacity": 0
        }
      },
      "overrides": [
        {
          "matcher": {
            "id": "byFrameRefID",
            "options": "A"
          },
          "properties": [
            {
              "id": "color",
              "value": {
                "mode": "fixed",
                "fixedColor": "green"
              }
            },
            {
              "id": "custom.fillOpacity",
              "value": 20
            }
          ]
        },
        {
          "matcher": {
            "id": "byFrameRefID",
            "options": "B"
          },
          "properties": [
            {
              "id": "color",
              "value": {
                "mode": "fixed",
                "fixedColor": "red"
              }
            },
            {
              "id": "custom.lineStyle",
              "value": {
                "fill": "dash",
                "dash": [
                  10,
                  10
                ]
              }
            }
          ]
        },
        {
          "matcher": {
            "id": "byFrameRefID",
            "options": "C"
          },
          "properties": [
            {
              "id": "color",
              "value": {
                "mode": "fixed",
                "fixedColor": "blue"
              }
            }
          ]
        }
      ]
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Members per policy version",
    "id": 26,
    "description": "How many members of this etcd cluster evaluate each policy version (sha256 of etcd_readiness_policy_info). After a ConfigMap edit two versions for a minute or two are normal (the kubelet updates each pod's mount at its own time); two versions for more than 10 minutes fire EtcdClusterPolicyDrift.",
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 7,
      "x": 10,
      "y": 1
    },
    targets: [
      q.target("A", 'count by (%s, sha256) (\n  etcd_readiness_policy_info\n    * on (job, instance) group_left (cluster_id)\n  %s\n)' % [q.by, q.info], {
        "legendFormat": "{{sha256}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "min": 0,
        "decimals": 0,
        "custom": {
          "drawStyle": "line",
          "lineInterpolation": "stepAfter",
          "fillOpacity": 10
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "table",
    "title": "Members of the cluster",
    "id": 27,
    "description": "Each member of this etcd cluster now: its name and member ID (hex, as etcdctl prints them, from etcd_readiness_member_info) and the exporter's verdict (etcd_readiness_ready, 1 ready, 0 not ready).",
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 7,
      "x": 17,
      "y": 1
    },
    targets: [
      q.target("A", 'etcd_readiness_ready\n  * on (job, instance) group_left (cluster_id, member_id, name)\n%s' % q.info, {
        "legendFormat": "",
        "range": false,
        "instant": true,
        "format": "table"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "mappings": [
          {
            "type": "value",
            "options": {
              "0": {
                "text": "not ready",
                "color": "red",
                "index": 0
              },
              "1": {
                "text": "ready",
                "color": "green",
                "index": 1
              }
            }
          }
        ]
      },
      "overrides": []
    },
    "options": {},
    "transformations": [
      {
        "id": "organize",
        "options": {
          "excludeByName": {
            "Time": true,
            "__name__": true,
            "job": true,
            "cluster_id": true
          },
          "indexByName": {
            "name": 0,
            "member_id": 1,
            "namespace": 2,
            "pod": 3,
            "instance": 4,
            "Value": 5
          },
          "renameByName": {
            "Value": "ready"
          }
        }
      }
    ],
  },
  {
    "type": "row",
    "title": "Readiness",
    "id": 1,
    "collapsed": false,
    "description": "The exporter's verdict per member, what fails now, and how often it changes.",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 9
    },
    "panels": [],
  },
  {
    "type": "state-timeline",
    "title": "Readiness per member",
    description: "etcd_readiness_ready per member over time: the answer /readyz gives the kubelet's readinessProbe (green ready, red not ready, empty when the exporter was not scraped)." + q.clusterNote,
    "id": 2,
    datasource: q.datasource,
    "gridPos": {
      "h": 7,
      "w": 24,
      "x": 0,
      "y": 10
    },
    targets: [
      q.target("A", q.inCluster('etcd_readiness_ready{%s}' % q.memberSel), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "mappings": [
          {
            "type": "value",
            "options": {
              "0": {
                "text": "not ready",
                "color": "red",
                "index": 0
              },
              "1": {
                "text": "ready",
                "color": "green",
                "index": 1
              }
            }
          }
        ],
        "color": {
          "mode": "thresholds"
        },
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "red",
              "value": null
            },
            {
              "color": "green",
              "value": 1
            }
          ]
        }
      },
      "overrides": []
    },
    "options": {
      "showValue": "never",
      "mergeValues": true,
      "rowHeight": 0.9,
      "alignValue": "left",
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": false
      },
      "tooltip": {
        "mode": "single"
      }
    },
  },
  {
    "type": "table",
    "title": "Failing checks now",
    description: "Checks (and warnings) of the policy that are not passing right now (state fail or unknown), with how long each has been in that state (etcd_readiness_check_state{state!=\"pass\"} == 1 joined with etcd_readiness_check_in_state_seconds). Empty when everything passes." + q.clusterNote,
    "id": 3,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 0,
      "y": 17
    },
    targets: [
      q.target("A", q.inCluster('etcd_readiness_check_in_state_seconds{%s}\n  * on (job, instance, check) group_left (state)\n(etcd_readiness_check_state{%s, state!="pass"} == 1)' % [q.memberSel, q.memberSel]), {
        "legendFormat": "",
        "range": false,
        "instant": true,
        "format": "table"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "s"
      },
      "overrides": []
    },
    "options": {
      "showHeader": true,
      "sortBy": [
        {
          "displayName": "for",
          "desc": true
        }
      ]
    },
    "transformations": [
      {
        "id": "organize",
        "options": {
          "excludeByName": {
            "Time": true,
            "__name__": true,
            "job": true
          },
          "indexByName": {
            "namespace": 0,
            "pod": 1,
            "instance": 2,
            "check": 3,
            "state": 4,
            "Value": 5
          },
          "renameByName": {
            "Value": "for"
          }
        }
      }
    ],
  },
  {
    "type": "timeseries",
    "title": "Check transitions",
    description: "How often each check changed state (increase of etcd_readiness_check_transitions_total) and how often the member's readiness flipped (etcd_readiness_transitions_total). A check that flaps near its threshold may need a `for` hold-down in the policy." + q.clusterNote,
    "id": 4,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 12,
      "y": 17
    },
    targets: [
      q.target("A", 'sum by (%s, pod, instance, check) (%s)' % [q.memberBy, q.inCluster('increase(etcd_readiness_check_transitions_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{check}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", 'sum by (%s, pod, instance) (%s)' % [q.memberBy, q.inCluster('increase(etcd_readiness_transitions_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} readiness",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "custom": {
          "drawStyle": "bars",
          "fillOpacity": 60
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "row",
    "title": "etcd member",
    "id": 5,
    "collapsed": false,
    "description": "Signals sampled from this etcd member over gRPC (source etcd).",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 25
    },
    "panels": [],
  },
  {
    "type": "timeseries",
    "title": "Quorum read latency (qget)",
    description: "Latency of a linearizable single-key read through this member (signal qget_ms, milliseconds). The line at 1000 ms is the budget of the linearizable_read check in the shipped policies. Gaps mean the read failed or timed out (the signal is unknown)." + q.clusterNote,
    "id": 6,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 0,
      "y": 26
    },
    targets: [
      q.target("A", q.inCluster(q.signal('qget_ms')), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "ms",
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "green",
              "value": null
            },
            {
              "color": "red",
              "value": 1000
            }
          ]
        },
        "custom": {
          "thresholdsStyle": {
            "mode": "line"
          }
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Leader present and leader changes",
    description: "Whether this member knows a leader (signal leader, 1 = yes) and the leader changes it has seen per interval (increase of signal leader_changes). No leader means no write commits and no quorum read answers." + q.clusterNote,
    "id": 7,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 8,
      "y": 26
    },
    targets: [
      q.target("A", q.inCluster(q.signal('leader')), {
        "legendFormat": "{{pod}} leader present",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", q.inCluster('increase(%s[$__rate_interval])' % q.signal('leader_changes')), {
        "legendFormat": "{{pod}} leader changes",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "min": 0
      },
      "overrides": [
        {
          "matcher": {
            "id": "byFrameRefID",
            "options": "B"
          },
          "properties": [
            {
              "id": "custom.drawStyle",
              "value": "bars"
            },
            {
              "id": "custom.axisPlacement",
              "value": "right"
            }
          ]
        }
      ]
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Database size",
    description: "Size of the backend database file (db_size_bytes) and the part of it in use (db_in_use_bytes). A large gap between the two is reclaimable by defragmentation; the quota (etcd --quota-backend-bytes) raises NOSPACE when the file reaches it." + q.clusterNote,
    "id": 8,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 16,
      "y": 26
    },
    targets: [
      q.target("A", q.inCluster(q.signal('db_size_bytes')), {
        "legendFormat": "{{pod}} size",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", q.inCluster(q.signal('db_in_use_bytes')), {
        "legendFormat": "{{pod}} in use",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "bytes"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "row",
    "title": "Backup and ownership",
    "id": 9,
    "collapsed": false,
    "description": "Signals from the backup sidecar (source backup) and the DNS owner check (source owner). Empty when those sources are not configured.",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 34
    },
    "panels": [],
  },
  {
    "type": "timeseries",
    "title": "Revisions not in any backup (rev_lag)",
    description: "This member's revision minus the newest snapshot's (signal rev_lag). The red line is 5000, the threshold of the backup_lag check in policies/gardener.policy and of the EtcdRevisionLagHigh alert. Empty without --backup.url." + q.clusterNote,
    "id": 10,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 0,
      "y": 35
    },
    targets: [
      q.target("A", q.inCluster(q.signal('rev_lag')), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "green",
              "value": null
            },
            {
              "color": "red",
              "value": 5000
            }
          ]
        },
        "custom": {
          "thresholdsStyle": {
            "mode": "line"
          }
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Snapshot age",
    description: "Time since the newest snapshot (full or incremental, signal snapshot_age) and since the newest full snapshot (full_snapshot_age). The line at 25 h is the full_snapshot_fresh warning of policies/gardener.policy. Empty without --backup.url." + q.clusterNote,
    "id": 11,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 8,
      "y": 35
    },
    targets: [
      q.target("A", q.inCluster(q.signal('snapshot_age')), {
        "legendFormat": "{{pod}} any",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", q.inCluster(q.signal('full_snapshot_age')), {
        "legendFormat": "{{pod}} full",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "s",
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "green",
              "value": null
            },
            {
              "color": "orange",
              "value": 90000
            }
          ]
        },
        "custom": {
          "thresholdsStyle": {
            "mode": "line"
          }
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "state-timeline",
    "title": "Owner check",
    description: "The DNS owner check (signal owner_ok): green when the first TXT string of --owner.name equals --owner.id, red on a confirmed mismatch, empty while unknown (DNS errors) or when the owner source is not configured." + q.clusterNote,
    "id": 12,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 16,
      "y": 35
    },
    targets: [
      q.target("A", q.inCluster(q.signal('owner_ok')), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "mappings": [
          {
            "type": "value",
            "options": {
              "0": {
                "text": "mismatch",
                "color": "red",
                "index": 0
              },
              "1": {
                "text": "owner",
                "color": "green",
                "index": 1
              }
            }
          }
        ],
        "color": {
          "mode": "thresholds"
        },
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "red",
              "value": null
            },
            {
              "color": "green",
              "value": 1
            }
          ]
        }
      },
      "overrides": []
    },
    "options": {
      "showValue": "never",
      "mergeValues": true,
      "rowHeight": 0.9,
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": false
      },
      "tooltip": {
        "mode": "single"
      }
    },
  },
  {
    "type": "row",
    "title": "Policy",
    "id": 13,
    "collapsed": false,
    "description": "The readiness policy file: whether the last reload worked, when the last good one was loaded, and which policy is active (its sha256).",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 43
    },
    "panels": [],
  },
  {
    "type": "stat",
    "title": "Last policy reload",
    description: "etcd_readiness_policy_last_reload_successful per member: OK when the last reload of the policy file succeeded, FAILED when it was rejected (the previous policy stays in force)." + q.clusterNote,
    "id": 14,
    datasource: q.datasource,
    "gridPos": {
      "h": 6,
      "w": 6,
      "x": 0,
      "y": 44
    },
    targets: [
      q.target("A", q.inCluster('etcd_readiness_policy_last_reload_successful{%s}' % q.memberSel), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": false,
        "instant": true,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "mappings": [
          {
            "type": "value",
            "options": {
              "0": {
                "text": "FAILED",
                "color": "red",
                "index": 0
              },
              "1": {
                "text": "OK",
                "color": "green",
                "index": 1
              }
            }
          }
        ],
        "color": {
          "mode": "thresholds"
        },
        "thresholds": {
          "mode": "absolute",
          "steps": [
            {
              "color": "red",
              "value": null
            },
            {
              "color": "green",
              "value": 1
            }
          ]
        }
      },
      "overrides": []
    },
    "options": {
      "reduceOptions": {
        "calcs": [
          "lastNotNull"
        ],
        "fields": "",
        "values": false
      },
      "colorMode": "background",
      "graphMode": "none",
      "textMode": "value_and_name",
      "justifyMode": "auto",
      "orientation": "auto"
    },
  },
  {
    "type": "stat",
    "title": "Last successful reload",
    description: "When each member last loaded a policy successfully (etcd_readiness_policy_last_reload_success_timestamp_seconds). ConfigMap edits reach pods 1-2 minutes after the edit." + q.clusterNote,
    "id": 15,
    datasource: q.datasource,
    "gridPos": {
      "h": 6,
      "w": 6,
      "x": 6,
      "y": 44
    },
    targets: [
      q.target("A", q.inCluster('etcd_readiness_policy_last_reload_success_timestamp_seconds{%s} * 1000' % q.memberSel), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": false,
        "instant": true,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "dateTimeFromNow"
      },
      "overrides": []
    },
    "options": {
      "reduceOptions": {
        "calcs": [
          "lastNotNull"
        ],
        "fields": "",
        "values": false
      },
      "colorMode": "none",
      "graphMode": "none",
      "textMode": "value_and_name",
      "justifyMode": "auto",
      "orientation": "auto"
    },
  },
  {
    "type": "timeseries",
    "title": "Policy reloads by result",
    description: "Policy reloads per interval by result (success or failure), from etcd_readiness_policy_reloads_total. The watcher reloads on ConfigMap updates and re-reads every --policy.reload-interval as a safety net (only a changed hash counts as a reload)." + q.clusterNote,
    "id": 16,
    datasource: q.datasource,
    "gridPos": {
      "h": 6,
      "w": 6,
      "x": 12,
      "y": 44
    },
    targets: [
      q.target("A", 'sum by (%s, pod, instance, result) (%s)' % [q.memberBy, q.inCluster('increase(etcd_readiness_policy_reloads_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{result}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "custom": {
          "drawStyle": "bars",
          "fillOpacity": 60
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "table",
    "title": "Active policy",
    description: "The sha256 of the policy each member evaluates now (etcd_readiness_policy_info). All members should show the same hash once a ConfigMap update has reached every pod." + q.clusterNote,
    "id": 17,
    datasource: q.datasource,
    "gridPos": {
      "h": 6,
      "w": 6,
      "x": 18,
      "y": 44
    },
    targets: [
      q.target("A", q.inCluster('etcd_readiness_policy_info{%s}' % q.memberSel), {
        "legendFormat": "",
        "range": false,
        "instant": true,
        "format": "table"
      }),
    ],
    "fieldConfig": {
      "defaults": {},
      "overrides": []
    },
    "options": {},
    "transformations": [
      {
        "id": "organize",
        "options": {
          "excludeByName": {
            "Time": true,
            "__name__": true,
            "job": true,
            "Value": true
          },
          "indexByName": {
            "namespace": 0,
            "pod": 1,
            "instance": 2,
            "sha256": 3
          }
        }
      }
    ],
  },
  {
    "type": "row",
    "title": "Exporter",
    "id": 18,
    "collapsed": false,
    "description": "The exporter itself: its samples, the probe traffic it answers, and its memory.",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 50
    },
    "panels": [],
  },
  {
    "type": "timeseries",
    "title": "Sample errors per source",
    description: "Failed samples per second by source and reason (rate of etcd_readiness_sample_errors_total): rounds for the sidecar, DNS and scrape sources; calls for etcd, whose Status and quorum read run every tenth of --sample.interval. Reasons are bounded: timeout, connect, tls, status, parse, too_large, protocol, rpc, dns, nxdomain, servfail, mismatch." + q.clusterNote,
    "id": 19,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 0,
      "y": 51
    },
    targets: [
      q.target("A", 'sum by (%s, pod, instance, source, reason) (%s)' % [q.memberBy, q.inCluster('rate(etcd_readiness_sample_errors_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{source}} {{reason}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "ops"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Sample duration p99 per source",
    description: "99th percentile of the time one sample takes, by source (etcd_readiness_sample_duration_seconds): a round for the sidecar, DNS and scrape sources, one call (Status, or the reads) for etcd. A sample is bounded by --sample.timeout (etcd) or --owner.timeout (owner); p99 near that bound means timeouts." + q.clusterNote,
    "id": 20,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 8,
      "y": 51
    },
    targets: [
      q.target("A", 'histogram_quantile(0.99, sum by (%s, pod, instance, source, le) (%s))' % [q.memberBy, q.inCluster('rate(etcd_readiness_sample_duration_seconds_bucket{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{source}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "s"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Exporter memory (RSS)",
    description: "Resident memory of the exporter process (process_resident_memory_bytes, only of targets that expose etcd_readiness_build_info, so etcd's own process metrics are left out)." + q.clusterNote,
    "id": 21,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 8,
      "x": 16,
      "y": 51
    },
    targets: [
      q.target("A", q.inCluster('process_resident_memory_bytes{%s}\n  and on (job, instance)\netcd_readiness_build_info{%s}' % [q.memberSel, q.memberSel]), {
        "legendFormat": "{{pod}} {{instance}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "bytes"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Probe requests by handler",
    description: "HTTP requests per second served by the exporter by handler and status code (rate of etcd_readiness_http_requests_total): the kubelet's /readyz and /livez probes and Prometheus' /metrics scrapes. /readyz answers 503 while the member is not ready." + q.clusterNote,
    "id": 22,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 0,
      "y": 59
    },
    targets: [
      q.target("A", 'sum by (%s, pod, instance, handler, code) (%s)' % [q.memberBy, q.inCluster('rate(etcd_readiness_http_requests_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{handler}} {{code}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "reqps"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Probe latency p99 by handler",
    description: "99th percentile of the time the exporter takes to answer, by handler (etcd_readiness_http_request_duration_seconds). /readyz answers from the cached verdict and never waits on etcd, so it should stay far below the kubelet's 1 s probe timeout." + q.clusterNote,
    "id": 23,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 12,
      "y": 59
    },
    targets: [
      q.target("A", 'histogram_quantile(0.99, sum by (%s, pod, instance, handler, le) (%s))' % [q.memberBy, q.inCluster('rate(etcd_readiness_http_request_duration_seconds_bucket{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} {{handler}}",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "s"
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "row",
    "title": "Candidate policy",
    "id": 28,
    "collapsed": false,
    "description": "With --policy.candidate: how often the candidate policy, evaluated beside the policy in force on the same readings, would have answered otherwise. Empty without a candidate. The candidate decides nothing; see docs/candidate.md for the rollout.",
    "gridPos": {
      "h": 1,
      "w": 24,
      "x": 0,
      "y": 67
    },
    "panels": [],
  },
  {
    "type": "timeseries",
    "title": "Candidate disagreement by cluster",
    "id": 29,
    "description": "Per etcd cluster, how many members' worth of time the candidate policy disagreed with the policy in force (the sum over members of the rate of etcd_readiness_candidate_would_fail_while_ready_seconds_total and ..._would_pass_while_unready_seconds_total): 1 means one member disagreeing all the time. \"would fail\" is what promoting the candidate would have taken out of service. EtcdClusterCandidatePolicyBelowQuorum fires when the candidate would have left fewer ready members than the quorum.",
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 0,
      "y": 68
    },
    targets: [
      q.target("A", 'sum by (%s) (\n  rate(etcd_readiness_candidate_would_fail_while_ready_seconds_total[$__rate_interval])\n    * on (job, instance) group_left (cluster_id)\n  %s\n)' % [q.by, q.info], {
        "legendFormat": "{{cluster_id}} would fail while ready",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", 'sum by (%s) (\n  rate(etcd_readiness_candidate_would_pass_while_unready_seconds_total[$__rate_interval])\n    * on (job, instance) group_left (cluster_id)\n  %s\n)' % [q.by, q.info], {
        "legendFormat": "{{cluster_id}} would pass while unready",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "short",
        "min": 0,
        "custom": {
          "drawStyle": "line",
          "lineInterpolation": "stepAfter",
          "fillOpacity": 10
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
  {
    "type": "timeseries",
    "title": "Candidate disagreement by member",
    "id": 30,
    description: "Per member, the share of time the candidate policy disagreed with the policy in force, by direction (rate of etcd_readiness_candidate_would_fail_while_ready_seconds_total and ..._would_pass_while_unready_seconds_total). `curl -s localhost:9380/readyz?policy=candidate&verbose` on the member says which of the candidate's checks fail; its status page draws the candidate's lanes under the live ones." + q.clusterNote,
    datasource: q.datasource,
    "gridPos": {
      "h": 8,
      "w": 12,
      "x": 12,
      "y": 68
    },
    targets: [
      q.target("A", 'sum by (%s, pod, instance) (%s)' % [q.memberBy, q.inCluster('rate(etcd_readiness_candidate_would_fail_while_ready_seconds_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} would fail while ready",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
      q.target("B", 'sum by (%s, pod, instance) (%s)' % [q.memberBy, q.inCluster('rate(etcd_readiness_candidate_would_pass_while_unready_seconds_total{%s}[$__rate_interval])' % q.memberSel)], {
        "legendFormat": "{{pod}} would pass while unready",
        "range": true,
        "instant": false,
        "format": "time_series"
      }),
    ],
    "fieldConfig": {
      "defaults": {
        "unit": "percentunit",
        "min": 0,
        "max": 1,
        "custom": {
          "drawStyle": "line",
          "lineInterpolation": "stepAfter",
          "fillOpacity": 10
        }
      },
      "overrides": []
    },
    "options": {
      "legend": {
        "displayMode": "list",
        "placement": "bottom",
        "showLegend": true
      },
      "tooltip": {
        "mode": "multi",
        "sort": "desc"
      }
    },
  },
]

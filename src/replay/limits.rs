//! The query stores' limits that `replay` knows by the words of their
//! refusals (Prometheus', VictoriaMetrics', Thanos' and Mimir's): what each
//! limits, the store's flag that changes it, and how replay meets it by
//! asking for less at a time ([`limit_of`], [`limit_hint`]).

/// A limit of the store's that a refusal names ([`limit_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// What is limited, in words.
    pub what: &'static str,
    /// The store's flag that changes it.
    pub flag: &'static str,
    /// How replay meets it: smaller requests of fewer members, shorter
    /// time chunks, or not at all.
    pub split: Split,
}

/// How replay meets a store's limit by asking for less at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Members,
    Time,
    No,
}

/// The store limits replay knows by the words of their refusals:
/// Prometheus', VictoriaMetrics' (whose messages name the flag), Thanos'
/// and Mimir's. `(needle, limit)`, the first match wins.
const LIMITS: [(&str, Limit); 14] = [
    (
        "11,000 points",
        Limit {
            what: "11,000 points per series",
            flag: "none (fixed in Prometheus)",
            split: Split::Time,
        },
    ),
    (
        "maxPointsPerTimeseries",
        Limit {
            what: "points per series",
            flag: "-search.maxPointsPerTimeseries",
            split: Split::Time,
        },
    ),
    (
        "maxSamplesPerSeries",
        Limit {
            what: "samples per series",
            flag: "-search.maxSamplesPerSeries",
            split: Split::Time,
        },
    ),
    (
        "too many samples",
        Limit {
            what: "samples one query may load",
            flag: "--query.max-samples",
            split: Split::Members,
        },
    ),
    (
        "maxSamplesPerQuery",
        Limit {
            what: "samples one query may load",
            flag: "-search.maxSamplesPerQuery",
            split: Split::Members,
        },
    ),
    (
        "maxUniqueTimeseries",
        Limit {
            what: "series one query may select",
            flag: "-search.maxUniqueTimeseries",
            split: Split::Members,
        },
    ),
    (
        "maxResponseSeries",
        Limit {
            what: "series one query may return",
            flag: "-search.maxResponseSeries",
            split: Split::Members,
        },
    ),
    (
        "maxQueryLen",
        Limit {
            what: "the length of a query",
            flag: "-search.maxQueryLen",
            split: Split::Members,
        },
    ),
    (
        "maxQueryDuration",
        Limit {
            what: "query time",
            flag: "-search.maxQueryDuration",
            split: Split::Members,
        },
    ),
    (
        "query timed out",
        Limit {
            what: "query time",
            flag: "--query.timeout",
            split: Split::Members,
        },
    ),
    (
        "max-fetched-series-per-query",
        Limit {
            what: "series one query may fetch",
            flag: "-querier.max-fetched-series-per-query",
            split: Split::Members,
        },
    ),
    (
        "max-series-per-query",
        Limit {
            what: "series one query may fetch",
            flag: "-querier.max-fetched-series-per-query",
            split: Split::Members,
        },
    ),
    (
        "exceeded series limit",
        Limit {
            what: "series one request may select",
            flag: "--store.limits.request-series",
            split: Split::Members,
        },
    ),
    (
        "maxSeries",
        Limit {
            what: "series /api/v1/series may return",
            flag: "-search.maxSeries",
            split: Split::No,
        },
    ),
];

/// The limit a refusal's text names, if replay knows it.
pub fn limit_of(text: &str) -> Option<Limit> {
    LIMITS
        .iter()
        .find(|(needle, _)| text.contains(needle))
        .map(|(_, l)| *l)
}

/// What a refusal's message adds when it names a limit replay knows.
pub(super) fn limit_hint(limit: &Option<Limit>) -> String {
    match limit {
        None => String::new(),
        Some(l) => {
            let how = match l.split {
                Split::Members => {
                    "replay already split the request down to one member, so raise the limit"
                }
                Split::Time => {
                    "replay already split the request down to its shortest time chunk, so raise the limit"
                }
                Split::No => "replay the fleet a --selector at a time, or raise the limit",
            };
            format!(
                " — the store's limit on {} (its flag: {}); {how}",
                l.what, l.flag
            )
        }
    }
}

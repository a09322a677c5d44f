//! A thin client of Prometheus' HTTP API for `replay`: `query_range` over a
//! [`Grid`], split into chunks of at most [`MAX_POINTS_PER_QUERY`] steps
//! (Prometheus refuses more than 11,000 points per series), each request
//! bounded in time and in the size of its answer; chunks of one series are
//! joined by their labels. Only plain series come back: what the history
//! means is [`super::timeline`]'s business.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::timeline::Grid;
use crate::sources::client::{self, TlsFiles};
use crate::sources::{Reason, SampleError};

/// Steps per `query_range` request: under Prometheus' 11,000 points per series.
pub const MAX_POINTS_PER_QUERY: usize = 10_000;

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error("--prometheus.url: {0}")]
    Url(String),
    #[error("cannot query Prometheus: {0}")]
    Client(String),
    #[error("Prometheus at {url} did not answer: {message}")]
    Unreachable { url: String, message: String },
    #[error(
        "Prometheus' answer to `{query}` is larger than --prometheus.max-bytes ({max} bytes): \
         narrow --selector or the time range, or raise the limit"
    )]
    TooLarge { query: String, max: u64 },
    #[error("Prometheus refused `{query}` (status {status}): {error}")]
    Refused {
        query: String,
        status: u16,
        error: String,
    },
    #[error("Prometheus' answer to `{query}` is not a query_range result: {why}")]
    Parse { query: String, why: String },
}

/// One series over the whole grid: its labels and `(Unix ms, value)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(i64, f64)>,
}

/// A Prometheus server.
pub struct Prometheus {
    base: String,
    http: reqwest::Client,
    timeout: Duration,
    max_bytes: u64,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<RawSeries>,
}

#[derive(Deserialize)]
struct RawSeries {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

impl Prometheus {
    /// A client for the server at `url` (http or https), with `timeout` per
    /// request and at most `max_bytes` per answer.
    pub fn new(url: &str, timeout: Duration, max_bytes: u64) -> Result<Self, PromError> {
        let base = client::base_url(url).map_err(|e| PromError::Url(e.to_string()))?;
        let http = client::build_client(&TlsFiles::default(), timeout)
            .map_err(|e| PromError::Client(e.to_string()))?;
        Ok(Prometheus {
            base,
            http,
            timeout,
            max_bytes,
        })
    }

    /// `query` evaluated at every step of `grid`, one request per chunk of at
    /// most [`MAX_POINTS_PER_QUERY`] steps.
    pub async fn query_range(&self, query: &str, grid: &Grid) -> Result<Vec<Series>, PromError> {
        let mut by_labels: BTreeMap<BTreeMap<String, String>, Vec<(i64, f64)>> = BTreeMap::new();
        let mut first = 0;
        while first < grid.steps {
            let last = (first + MAX_POINTS_PER_QUERY).min(grid.steps) - 1;
            for raw in self
                .chunk(query, grid.at(first), grid.at(last), grid.step_ms)
                .await?
            {
                let points = by_labels.entry(raw.metric).or_default();
                for (ts, v) in raw.values {
                    if !ts.is_finite() {
                        continue;
                    }
                    // Prometheus' own text of a float; "NaN" and "+Inf" parse too.
                    let v: f64 = v.parse().unwrap_or(f64::NAN);
                    points.push(((ts * 1000.0).round() as i64, v));
                }
            }
            first = last + 1;
        }
        Ok(by_labels
            .into_iter()
            .map(|(labels, points)| Series { labels, points })
            .collect())
    }

    async fn chunk(
        &self,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<Vec<RawSeries>, PromError> {
        let secs = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        let params = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .append_pair("start", &secs(start_ms))
            .append_pair("end", &secs(end_ms))
            .append_pair("step", &secs(step_ms))
            .finish();
        let url = format!("{}/api/v1/query_range?{params}", self.base);
        let fetched = client::get(&self.http, &url, self.timeout, self.max_bytes)
            .await
            .map_err(|e: SampleError| match e.reason {
                Reason::TooLarge => PromError::TooLarge {
                    query: query.to_string(),
                    max: self.max_bytes,
                },
                _ => PromError::Unreachable {
                    url: self.base.clone(),
                    message: e.message,
                },
            })?;
        let status = fetched.status.as_u16();
        let parse = |why: String| PromError::Parse {
            query: query.to_string(),
            why,
        };
        let env: Envelope = match serde_json::from_str(&fetched.body) {
            Ok(env) => env,
            Err(e) if fetched.status.is_success() => return Err(parse(e.to_string())),
            Err(_) => {
                let mut body: String = fetched.body.chars().take(200).collect();
                if body.is_empty() {
                    body = "(empty body)".to_string();
                }
                return Err(PromError::Refused {
                    query: query.to_string(),
                    status,
                    error: body,
                });
            }
        };
        if env.status != "success" || !fetched.status.is_success() {
            return Err(PromError::Refused {
                query: query.to_string(),
                status,
                error: format!(
                    "{}: {}",
                    env.error_type.as_deref().unwrap_or("error"),
                    env.error.as_deref().unwrap_or("(no message)")
                ),
            });
        }
        let data = env.data.ok_or_else(|| parse("no `data`".to_string()))?;
        if data.result_type != "matrix" {
            return Err(parse(format!(
                "resultType is `{}`, not `matrix`",
                data.result_type
            )));
        }
        Ok(data.result)
    }
}

/// `metric` with the matchers of `selector` (`{namespace="prod"}`, or empty)
/// and `extra` matchers, as one PromQL selector.
pub fn selector_query(metric: &str, selector: &str, extra: &[String]) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let inner = selector_inner(selector);
    if !inner.is_empty() {
        parts.push(inner);
    }
    parts.extend(extra.iter().map(String::as_str));
    format!("{metric}{{{}}}", parts.join(","))
}

/// The matchers inside `{…}`, without a trailing comma.
fn selector_inner(selector: &str) -> &str {
    let s = selector.trim();
    let s = s.strip_prefix('{').unwrap_or(s);
    let s = s.strip_suffix('}').unwrap_or(s);
    s.trim().trim_end_matches(',').trim()
}

/// Check the shape of `--selector`: `{…}` (Prometheus checks the matchers).
pub fn check_selector(selector: &str) -> Result<(), String> {
    let s = selector.trim();
    if s.is_empty() {
        return Ok(());
    }
    if !(s.starts_with('{') && s.ends_with('}')) {
        return Err(format!(
            "--selector `{selector}` must be label matchers in braces, e.g. \
             '{{namespace=\"prod\",pod=~\"etcd-.*\"}}'"
        ));
    }
    if s.len() > 4096 {
        return Err("--selector is longer than 4096 bytes".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_combine_with_extra_matchers() {
        let sig = vec!["signal=~\"leader|qget_ms\"".to_string()];
        assert_eq!(
            selector_query("m", "{namespace=\"prod\",}", &sig),
            "m{namespace=\"prod\",signal=~\"leader|qget_ms\"}"
        );
        assert_eq!(
            selector_query("m", "", &sig),
            "m{signal=~\"leader|qget_ms\"}"
        );
        assert_eq!(selector_query("m", " { } ", &[]), "m{}");
        assert!(check_selector("{a=\"b\"}").is_ok());
        assert!(check_selector("").is_ok());
        assert!(check_selector("a=\"b\"").is_err());
    }
}

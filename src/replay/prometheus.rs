//! A thin client of Prometheus' HTTP API for `replay`: `query_range` over a
//! [`Grid`], split into chunks of at most [`MAX_POINTS_PER_QUERY`] steps
//! (Prometheus refuses more than 11,000 points per series), each request
//! bounded in time and in the size of its answer; chunks of one series are
//! joined by their labels. Only plain series come back: what the history
//! means is [`super::timeline`]'s business.
//!
//! Memory is bounded by what is read: each answer is at most
//! `--prometheus.max-bytes`, and every series is charged, as it is parsed,
//! what it will cost in memory (its labels, its points and the per-step
//! row [`super::timeline`] builds for it, see [`series_cost`]; a new member
//! also its report, [`MEMBER_COST`]) against one
//! budget of `--prometheus.max-bytes` for the whole replay. The first series
//! over it stops the parse with [`PromError::OverBudget`]: an answer of a
//! million series fails after the few thousand that fit, not after
//! building them all. Text Prometheus sends back (its `error`, a body) is
//! made printable ([`super::render::printable`]) before it reaches an
//! error message.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::render::printable;
use super::timeline::Grid;
use crate::redacted_url::RedactedUrl;
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
    #[error(
        "the history Prometheus returned for `{query}` ({series} series so far over {steps} steps) \
         needs more memory than --prometheus.max-bytes ({max} bytes) allows replay to hold: \
         narrow --selector or the time range, lengthen --step, or raise the limit"
    )]
    OverBudget {
        query: String,
        series: u64,
        steps: usize,
        max: u64,
    },
}

/// What a series costs in memory once read and replayed: its labels (with
/// the map's overhead), 24 bytes a point as read and 18 bytes a step for
/// the row it becomes in the per-member tables (a value, a known flag).
pub fn series_cost(labels: &BTreeMap<String, String>, points: usize, steps: usize) -> u64 {
    let labels: usize = labels.iter().map(|(k, v)| k.len() + v.len() + 64).sum();
    (96 + labels + 24 * points + 18 * steps) as u64
}

/// What a member costs besides its series: its report (intervals, check
/// spans) and its share of the rendered output. Measured with
/// benches/replay_many_series.sh: about 21 KB a member at 241 steps, with
/// no per-step growth to speak of at 5,761.
pub const MEMBER_COST: u64 = 24 * 1024;

/// The labels that tell one signal's series of a member from another's;
/// the rest identify the member.
pub const PER_SIGNAL_LABELS: [&str; 3] = ["__name__", "signal", "source"];

/// A hash of the labels that identify `labels`' member.
fn member_hash(labels: &BTreeMap<String, String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (k, v) in labels {
        if !PER_SIGNAL_LABELS.contains(&k.as_str()) {
            k.hash(&mut h);
            v.hash(&mut h);
        }
    }
    h.finish()
}

/// One series over the whole grid: its labels and `(Unix ms, value)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(i64, f64)>,
}

/// A Prometheus server.
pub struct Prometheus {
    base: RedactedUrl,
    http: reqwest::Client,
    timeout: Duration,
    max_bytes: u64,
    /// Memory charged so far for series read (see [`series_cost`]).
    used: AtomicU64,
    /// Series read so far.
    series: AtomicU64,
    /// The members seen so far (by [`member_hash`]), each charged
    /// [`MEMBER_COST`] once.
    members: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// A `query_range` answer, parsed with the budget (see [`EnvelopeSeed`]).
#[derive(Default)]
struct Envelope {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
}

struct Data {
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
    pub fn new(url: &RedactedUrl, timeout: Duration, max_bytes: u64) -> Result<Self, PromError> {
        let base = client::base_url(url).map_err(|e| PromError::Url(e.to_string()))?;
        let http = client::build_client(&TlsFiles::default(), timeout)
            .map_err(|e| PromError::Client(e.to_string()))?;
        Ok(Prometheus {
            base,
            http,
            timeout,
            max_bytes,
            used: AtomicU64::new(0),
            series: AtomicU64::new(0),
            members: std::sync::Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Memory charged so far for the series read, in bytes.
    pub fn charged(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// `query` evaluated at every step of `grid`, one request per chunk of at
    /// most [`MAX_POINTS_PER_QUERY`] steps.
    pub async fn query_range(&self, query: &str, grid: &Grid) -> Result<Vec<Series>, PromError> {
        let mut by_labels: BTreeMap<BTreeMap<String, String>, Vec<(i64, f64)>> = BTreeMap::new();
        let mut first = 0;
        while first < grid.steps {
            let last = (first + MAX_POINTS_PER_QUERY).min(grid.steps) - 1;
            for raw in self
                .chunk(query, grid, grid.at(first), grid.at(last))
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
        grid: &Grid,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<RawSeries>, PromError> {
        let step_ms = grid.step_ms;
        let secs = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        let params = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .append_pair("start", &secs(start_ms))
            .append_pair("end", &secs(end_ms))
            .append_pair("step", &secs(step_ms))
            .finish();
        let url = self.base.join(&format!("/api/v1/query_range?{params}"));
        let fetched = client::get(&self.http, &url, self.timeout, self.max_bytes)
            .await
            .map_err(|e: SampleError| match e.reason {
                Reason::TooLarge => PromError::TooLarge {
                    query: query.to_string(),
                    max: self.max_bytes,
                },
                _ => PromError::Unreachable {
                    url: self.base.to_string(),
                    message: e.message,
                },
            })?;
        let status = fetched.status.as_u16();
        let parse = |why: String| PromError::Parse {
            query: query.to_string(),
            why: printable(&why).into_owned(),
        };
        let over = std::cell::Cell::new(false);
        let seed = EnvelopeSeed {
            charge: &|raw: &RawSeries| self.charge(raw, grid.steps),
            over: &over,
        };
        let mut de = serde_json::Deserializer::from_str(&fetched.body);
        let parsed = seed
            .deserialize(&mut de)
            .and_then(|env| de.end().map(|()| env));
        let env: Envelope = match parsed {
            Ok(env) => env,
            Err(_) if over.get() => {
                return Err(PromError::OverBudget {
                    query: query.to_string(),
                    series: self.series.load(Ordering::Relaxed),
                    steps: grid.steps,
                    max: self.max_bytes,
                });
            }
            Err(e) if fetched.status.is_success() => return Err(parse(e.to_string())),
            Err(_) => {
                let mut body: String = fetched.body.chars().take(200).collect();
                if body.is_empty() {
                    body = "(empty body)".to_string();
                }
                return Err(PromError::Refused {
                    query: query.to_string(),
                    status,
                    error: printable(&body).into_owned(),
                });
            }
        };
        if env.status != "success" || !fetched.status.is_success() {
            let text = format!(
                "{}: {}",
                env.error_type.as_deref().unwrap_or("error"),
                env.error.as_deref().unwrap_or("(no message)")
            );
            return Err(PromError::Refused {
                query: query.to_string(),
                status,
                error: printable(&text).into_owned(),
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

impl Prometheus {
    /// Charge `raw` against the budget; false when it does not fit.
    fn charge(&self, raw: &RawSeries, steps: usize) -> bool {
        let mut cost = series_cost(&raw.metric, raw.values.len(), steps);
        let new_member = self
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(member_hash(&raw.metric));
        if new_member {
            cost += MEMBER_COST + 16;
        }
        self.series.fetch_add(1, Ordering::Relaxed);
        let used = self.used.fetch_add(cost, Ordering::Relaxed) + cost;
        used <= self.max_bytes
    }
}

/// Parses an answer's envelope, handing `data.result` to [`ResultSeed`].
struct EnvelopeSeed<'a> {
    charge: &'a dyn Fn(&RawSeries) -> bool,
    /// Set when a series did not fit: the parse error that follows is that.
    over: &'a std::cell::Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Envelope, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeSeed<'_> {
    type Value = Envelope;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Prometheus API answer (an object with `status`)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut env = Envelope::default();
        let mut status = None;
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "status" => status = Some(map.next_value::<String>()?),
                "errorType" => env.error_type = map.next_value()?,
                "error" => env.error = map.next_value()?,
                "data" => {
                    env.data = map.next_value_seed(DataSeed {
                        charge: self.charge,
                        over: self.over,
                    })?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        env.status = status.ok_or_else(|| de::Error::missing_field("status"))?;
        Ok(env)
    }
}

/// `data`: `resultType` and the `result` series, each charged as parsed.
struct DataSeed<'a> {
    charge: &'a dyn Fn(&RawSeries) -> bool,
    over: &'a std::cell::Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Option<Data>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Data>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Option<Data>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("`data` with `resultType` and `result`")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<Data>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Data>, E> {
        Ok(None)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Data>, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Data>, A::Error> {
        let (mut result_type, mut result) = (None, None);
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "resultType" => result_type = Some(map.next_value::<String>()?),
                "result" => {
                    result = Some(map.next_value_seed(ResultSeed {
                        charge: self.charge,
                        over: self.over,
                    })?)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(Data {
            result_type: result_type.ok_or_else(|| de::Error::missing_field("resultType"))?,
            result: result.ok_or_else(|| de::Error::missing_field("result"))?,
        }))
    }
}

/// `result`: the series, each charged before the next is parsed.
struct ResultSeed<'a> {
    charge: &'a dyn Fn(&RawSeries) -> bool,
    over: &'a std::cell::Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for ResultSeed<'_> {
    type Value = Vec<RawSeries>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<RawSeries>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed<'_> {
    type Value = Vec<RawSeries>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of series")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<RawSeries>, A::Error> {
        let mut out = Vec::new();
        while let Some(raw) = seq.next_element::<RawSeries>()? {
            if !(self.charge)(&raw) {
                self.over.set(true);
                return Err(de::Error::custom("over the memory budget"));
            }
            out.push(raw);
        }
        Ok(out)
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

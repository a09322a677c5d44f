//! A thin client of the Prometheus HTTP query API for `replay` (any store
//! that answers it: Prometheus, VictoriaMetrics, Thanos, Mimir): the index
//! queries that find a fleet (`/api/v1/series`, `/api/v1/label/…/values`)
//! and `query_range` over a [`Grid`], split into chunks of at most
//! [`MAX_POINTS_PER_QUERY`] steps (Prometheus refuses more than 11,000
//! points per series; fewer after a store refused that many), each request
//! bounded in time and in the size of its answer; chunks of one series are
//! joined by their labels. Only plain series come back: what the history
//! means is [`super::timeline`]'s business. A refusal that names a limit
//! the store has ([`limit_of`]) says which and the store's flag for it.
//!
//! Memory is bounded by what is held: each answer is at most
//! `--prometheus.max-bytes`, read into a buffer reused answer after answer
//! (a fresh one per answer left the allocator a trail of freed buffers,
//! RSS growing with the fleet), and every series is charged, as it is
//! parsed, what it will cost in memory (its labels and the per-step row its
//! points are scanned into, [`super::matrix`], see [`series_cost`]) against one
//! budget of `--prometheus.max-bytes`; the members found are charged for
//! the whole run, a batch's series and reports ([`MEMBER_COST`]) until the
//! batch is written ([`Prometheus::release`]). The first series over it
//! stops the parse with [`PromError::OverBudget`]: an answer of a million
//! series fails after the few thousand that fit, not after building them
//! all. Series of members outside the batch asked for are dropped as they
//! are parsed, uncharged. Text a store sends back (its `error`, a body) is
//! made printable ([`super::render::printable`]) before it reaches an
//! error message.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::de::DeserializeSeed;

use super::envelope::{Envelope, EnvelopeSeed, ListSeed, OptionSeed, Take};
use super::limits::limit_hint;
pub use super::limits::{Limit, Split, limit_of};
use super::matrix::{self, Failure};
pub use super::promql::{SelectorError, check_selector, member_matchers, selector_query};
use super::render::{label_set, printable};
use super::timeline::Grid;
use super::values::{NOT_A_NUMBER, ShapeError};
use crate::outside::http_client::{self, Trust};
use crate::outside::redacted_url::RedactedUrl;
use crate::sources::{Reason, SampleError};
use etcd_readiness_policy::sync::TolerantLock;

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
    Unreachable {
        url: String,
        message: String,
        /// It was --prometheus.timeout that ran out.
        timed_out: bool,
    },
    #[error(
        "Prometheus' answer to `{query}` is larger than --prometheus.max-bytes ({max} bytes): \
         narrow --selector or the time range, or raise the limit"
    )]
    TooLarge { query: String, max: u64 },
    #[error(
        "Prometheus refused `{query}` (status {status}): {error}{}",
        limit_hint(limit)
    )]
    Refused {
        query: String,
        status: u16,
        error: String,
        /// The store's limit the refusal names, if replay knows it.
        limit: Option<Limit>,
    },
    #[error("Prometheus' answer to `{query}` (/api/v1/{endpoint}) cannot be read: {why}")]
    Parse {
        query: String,
        endpoint: String,
        why: String,
    },
    #[error(
        "Prometheus' answer to `{query}` has the series {series} twice: replay cannot tell \
         which one to believe, so it refuses the answer; check the store (HA replicas not \
         deduplicated, two stores merged)"
    )]
    DuplicateSeries { query: String, series: String },
    #[error("Prometheus' answer to `{query}` cannot be replayed: in the series {series}, {why}")]
    BadValues {
        query: String,
        /// The series' labels, or what stands for them.
        series: String,
        /// What is wrong, where, and the text there.
        why: String,
    },
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
/// the map's overhead) and 17 bytes a step: the row its points are read
/// into (16 bytes a step, a value or none) and the per-member table's known
/// flag (known and recorded rows shrink to that byte once assembled).
pub fn series_cost(labels: &BTreeMap<String, String>, steps: usize) -> u64 {
    96 + label_cost(labels) + 17 * steps as u64
}

/// Capacity of an answer buffer kept for the next answer: what the
/// default batch's answers need, with room to spare; a larger one (a large
/// `--batch`) is freed after its answer.
pub const KEEP_BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// What a label set costs held in a map.
pub fn label_cost(labels: &BTreeMap<String, String>) -> u64 {
    labels
        .iter()
        .map(|(k, v)| k.len() + v.len() + 64)
        .sum::<usize>() as u64
}

/// What a member costs besides its series: its report (intervals, check
/// spans) and its share of the rendered output. Measured with
/// benches/replay_many_series.sh: about 21 KB a member at 241 steps, with
/// no per-step growth to speak of at 5,761.
pub const MEMBER_COST: u64 = 24 * 1024;

/// What a label set held for the whole replay costs besides its text: a
/// map's leaf node (11 keys and values, 528 bytes) and the allocations'
/// overhead.
pub const LABEL_SET_COST: u64 = 640;

/// The labels that tell one signal's series of a member from another's;
/// the rest identify the member.
pub const PER_SIGNAL_LABELS: [&str; 3] = ["__name__", "signal", "source"];

/// The labels `etcd_readiness_member_info` adds to the member's own.
pub const INFO_LABELS: [&str; 4] = ["__name__", "cluster_id", "member_id", "name"];

/// A series' labels.
type Labels = BTreeMap<String, String>;

/// The series of a `query_range` read so far: each one's row over the
/// whole grid, and the first step of the chunk whose answer last sent it.
type Rows = BTreeMap<Labels, (usize, Vec<Option<f64>>)>;

/// One series over the whole grid: its labels and its value at each step
/// (none where the answer has no point).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub row: Vec<Option<f64>>,
}

/// A Prometheus server (or any store answering its HTTP query API).
pub struct Prometheus {
    base: RedactedUrl,
    http: reqwest::Client,
    timeout: Duration,
    max_bytes: u64,
    /// Memory charged for what replay holds now (see [`series_cost`]).
    used: AtomicU64,
    /// Series read so far.
    series: AtomicU64,
    /// Steps per `query_range` request: [`MAX_POINTS_PER_QUERY`], halved
    /// when the store refuses that many points per series.
    chunk_steps: AtomicUsize,
    /// Answer buffers not in use, one per request that was in flight at
    /// once, each at most [`KEEP_BUFFER_BYTES`].
    buffers: Mutex<Vec<Vec<u8>>>,
}

/// Why an answer was not parsed.
enum Unparsed {
    /// Over the memory budget.
    Over,
    /// Not such an answer: why.
    Bad(String),
    /// The same series twice in one answer.
    Duplicate(Labels),
    /// A series' `values` are not `[time, value]` pairs of numbers.
    Values {
        series: Option<Labels>,
        error: ShapeError,
        near: String,
    },
}

/// Why a series was refused while its answer was read.
enum Refusal {
    /// Over the memory budget (it did not fit).
    Over,
    /// Already in this answer: a store sends each series once.
    Duplicate(Labels),
}

/// Seconds with milliseconds, as the API takes times.
fn api_secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

impl Prometheus {
    /// A client for the server at `url` (http or https), with `timeout` per
    /// request and at most `max_bytes` per answer.
    pub fn new(url: &RedactedUrl, timeout: Duration, max_bytes: u64) -> Result<Self, PromError> {
        let base = http_client::base_url(url).map_err(|e| PromError::Url(e.to_string()))?;
        let http = http_client::client(Trust::System, None, Some(timeout), true)
            .map_err(|e| PromError::Client(e.to_string()))?;
        Ok(Prometheus {
            base,
            http,
            timeout,
            max_bytes,
            used: AtomicU64::new(0),
            series: AtomicU64::new(0),
            chunk_steps: AtomicUsize::new(MAX_POINTS_PER_QUERY),
            buffers: Mutex::new(Vec::new()),
        })
    }

    /// Memory charged now for what replay holds, in bytes.
    pub fn charged(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Charge `cost` bytes against the budget; false when it does not fit
    /// (the charge stays, the run ends).
    pub fn charge(&self, cost: u64) -> bool {
        self.used.fetch_add(cost, Ordering::Relaxed) + cost <= self.max_bytes
    }

    /// What a finished batch held is free again.
    pub fn release(&self, cost: u64) {
        self.used
            .fetch_sub(cost.min(self.charged()), Ordering::Relaxed);
    }

    /// The budget error for `query` (what did not fit, over `steps` steps).
    pub fn over_budget(&self, query: &str, steps: usize) -> PromError {
        PromError::OverBudget {
            query: query.to_string(),
            series: self.series.load(Ordering::Relaxed),
            steps,
            max: self.max_bytes,
        }
    }

    /// The label sets of the series `matches` selects with samples between
    /// `grid`'s start and end (`/api/v1/series`, the store's index only),
    /// each handed to `each` as it is parsed and not kept: what the caller
    /// keeps of it is charged to the budget for as long as replay runs.
    pub async fn series(
        &self,
        matches: &[String],
        grid: &Grid,
        each: &dyn Fn(&BTreeMap<String, String>),
    ) -> Result<(), PromError> {
        let mut params: Vec<(&str, String)> =
            matches.iter().map(|m| ("match[]", m.clone())).collect();
        params.push(("start", api_secs(grid.start_ms)));
        params.push(("end", api_secs(grid.end_ms)));
        let take = |labels: &BTreeMap<String, String>| {
            if self.charge(label_cost(labels) + LABEL_SET_COST) {
                each(labels);
                Take::Skip
            } else {
                Take::Over
            }
        };
        let what = matches.join(" or ");
        let over = Cell::new(false);
        let seed = OptionSeed(ListSeed {
            take: &take,
            over: &over,
        });
        self.api("series", &params, &what, grid.steps, by_seed(seed, &over))
            .await?;
        Ok(())
    }

    /// The values of `label` on the series `matches` selects between
    /// `grid`'s start and end (`/api/v1/label/NAME/values`).
    pub async fn label_values(
        &self,
        label: &str,
        matches: &[String],
        grid: &Grid,
    ) -> Result<Vec<String>, PromError> {
        let mut params: Vec<(&str, String)> =
            matches.iter().map(|m| ("match[]", m.clone())).collect();
        params.push(("start", api_secs(grid.start_ms)));
        params.push(("end", api_secs(grid.end_ms)));
        let take = |v: &String| {
            if self.charge(v.len() as u64 + 32) {
                Take::Keep
            } else {
                Take::Over
            }
        };
        let what = matches.join(" or ");
        let over = Cell::new(false);
        let seed = OptionSeed(ListSeed {
            take: &take,
            over: &over,
        });
        let endpoint = format!("label/{label}/values");
        let data = self
            .api(&endpoint, &params, &what, grid.steps, by_seed(seed, &over))
            .await?;
        Ok(data.unwrap_or_default())
    }

    /// `query` evaluated at every step of `grid`, one request per chunk of at
    /// most [`MAX_POINTS_PER_QUERY`] steps (fewer after the store refused
    /// that many points per series); only the series `keep` accepts are
    /// read, and charged. Returns the series and what they were charged.
    pub async fn query_range(
        &self,
        query: &str,
        grid: &Grid,
        keep: &(dyn Fn(&BTreeMap<String, String>) -> bool + Sync),
    ) -> Result<(Vec<Series>, u64), PromError> {
        loop {
            let steps = self.chunk_steps.load(Ordering::Relaxed);
            match self.query_range_in(query, grid, keep, steps).await {
                Err(PromError::Refused { limit: Some(l), .. })
                    if l.split == Split::Time && steps > MIN_CHUNK_STEPS =>
                {
                    // Another request may have halved it meanwhile.
                    let _ = self.chunk_steps.compare_exchange(
                        steps,
                        (steps / 2).max(MIN_CHUNK_STEPS),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                other => return other,
            }
        }
    }

    async fn query_range_in(
        &self,
        query: &str,
        grid: &Grid,
        keep: &(dyn Fn(&BTreeMap<String, String>) -> bool + Sync),
        chunk_steps: usize,
    ) -> Result<(Vec<Series>, u64), PromError> {
        let rows: RefCell<Rows> = RefCell::new(BTreeMap::new());
        let charged = AtomicU64::new(0);
        let mut first = 0;
        let result = loop {
            if first >= grid.steps {
                break Ok(());
            }
            let last = (first + chunk_steps).min(grid.steps) - 1;
            let params = [
                ("query", query.to_string()),
                ("start", api_secs(grid.at(first))),
                ("end", api_secs(grid.at(last))),
                ("step", api_secs(grid.step_ms)),
            ];
            let read = |text: &str| {
                let series = |metric| self.take_series(metric, first, grid, keep, &rows, &charged);
                match matrix::read(text, series, place(grid)) {
                    Ok(a) => Ok(Envelope {
                        status: a
                            .status
                            .ok_or(Unparsed::Bad("missing field `status`".into()))?,
                        data: a.data.then_some(a.result_type),
                        error_type: a.error_type,
                        error: a.error,
                    }),
                    Err(Failure::Refused(Refusal::Over)) => Err(Unparsed::Over),
                    Err(Failure::Refused(Refusal::Duplicate(l))) => Err(Unparsed::Duplicate(l)),
                    Err(Failure::Syntax(e)) => Err(Unparsed::Bad(e.to_string())),
                    Err(Failure::Values {
                        labels,
                        error,
                        near,
                    }) => Err(Unparsed::Values {
                        series: labels,
                        error,
                        near,
                    }),
                }
            };
            let result_type = match self
                .api("query_range", &params, query, grid.steps, read)
                .await
            {
                Ok(d) => d,
                Err(e) => break Err(e),
            };
            let parse = |why: String| PromError::Parse {
                query: query.to_string(),
                endpoint: "query_range".to_string(),
                why,
            };
            match result_type.as_deref() {
                Some("matrix") => {}
                None => break Err(parse("`data` has no `resultType`".to_string())),
                Some(other) => {
                    break Err(parse(format!(
                        "resultType is `{}`, not `matrix`",
                        printable(other)
                    )));
                }
            }
            first = last + 1;
        };
        let charged = charged.into_inner();
        if let Err(e) = result {
            self.release(charged);
            return Err(e);
        }
        let series = (rows.into_inner().into_iter())
            .map(|(labels, (_, row))| Series { labels, row })
            .collect();
        Ok((series, charged))
    }

    /// The row of the series labelled `metric` in the answer to the chunk
    /// that starts at step `chunk`, if `keep` wants it: charged when first
    /// seen (its row is made then, for the whole grid); its points in this
    /// and later chunks go into the row. A series the same answer sent
    /// already is refused: its points would overwrite the first's, and
    /// which of the two is right no one can tell.
    fn take_series<'r>(
        &self,
        metric: Labels,
        chunk: usize,
        grid: &Grid,
        keep: &(dyn Fn(&Labels) -> bool + Sync),
        rows: &'r RefCell<Rows>,
        charged: &AtomicU64,
    ) -> Result<Option<RefMut<'r, Vec<Option<f64>>>>, Refusal> {
        if !keep(&metric) {
            return Ok(None);
        }
        let mut rows = rows.borrow_mut();
        match rows.get_mut(&metric) {
            Some((seen_in, _)) if *seen_in == chunk => return Err(Refusal::Duplicate(metric)),
            Some((seen_in, _)) => *seen_in = chunk,
            None => {
                let cost = series_cost(&metric, grid.steps);
                self.series.fetch_add(1, Ordering::Relaxed);
                charged.fetch_add(cost, Ordering::Relaxed);
                if !self.charge(cost) {
                    return Err(Refusal::Over);
                }
            }
        }
        Ok(Some(RefMut::map(rows, |rows| {
            &mut rows
                .entry(metric)
                .or_insert_with(|| (chunk, vec![None; grid.steps]))
                .1
        })))
    }

    /// GET `/api/v1/{endpoint}?{params}` and parse the answer with `parse`
    /// (its envelope, and its `data` as the request needs:
    /// [`by_seed`], [`matrix::read`]); `what` names the request in errors.
    async fn api<T>(
        &self,
        endpoint: &str,
        params: &[(&str, String)],
        what: &str,
        steps: usize,
        parse: impl FnOnce(&str) -> Result<Envelope<T>, Unparsed>,
    ) -> Result<T, PromError> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in params {
            query.append_pair(k, v);
        }
        let url = self
            .base
            .join(&format!("/api/v1/{endpoint}?{}", query.finish()));
        let mut body = self.take_buffer();
        let answer = self
            .answer(&url, &mut body, (endpoint, what), steps, parse)
            .await;
        self.keep_buffer(body);
        answer
    }

    /// An answer buffer: one kept from an earlier answer, or a new one.
    fn take_buffer(&self) -> Vec<u8> {
        self.buffers.locked().pop().unwrap_or_default()
    }

    /// Keep `body` for the next answer, unless it grew too large to keep.
    fn keep_buffer(&self, mut body: Vec<u8>) {
        if body.capacity() <= KEEP_BUFFER_BYTES {
            body.clear();
            self.buffers.locked().push(body);
        }
    }

    /// GET `url` into `body` and parse it as [`Self::api`] says.
    async fn answer<T>(
        &self,
        url: &RedactedUrl,
        body: &mut Vec<u8>,
        (endpoint, what): (&str, &str),
        steps: usize,
        parse_answer: impl FnOnce(&str) -> Result<Envelope<T>, Unparsed>,
    ) -> Result<T, PromError> {
        let unreachable = |e: SampleError| match e.reason {
            Reason::TooLarge => PromError::TooLarge {
                query: what.to_string(),
                max: self.max_bytes,
            },
            reason => PromError::Unreachable {
                url: self.base.to_string(),
                message: e.message,
                timed_out: reason == Reason::Timeout,
            },
        };
        let status = http_client::get_into(&self.http, url, self.timeout, self.max_bytes, body)
            .await
            .map_err(unreachable)?;
        let text =
            std::str::from_utf8(body).map_err(|e| unreachable(http_client::not_utf8(url, e)))?;
        let ok = status.is_success();
        let status = status.as_u16();
        let parse = |why: String| PromError::Parse {
            query: what.to_string(),
            endpoint: endpoint.to_string(),
            why: printable(&why).into_owned(),
        };
        let refused = |text: String| PromError::Refused {
            query: what.to_string(),
            status,
            limit: limit_of(&text),
            error: printable(&text).into_owned(),
        };
        let env = match parse_answer(text) {
            Ok(env) => env,
            Err(Unparsed::Over) => return Err(self.over_budget(what, steps)),
            Err(Unparsed::Duplicate(labels)) => {
                return Err(PromError::DuplicateSeries {
                    query: what.to_string(),
                    series: label_set(&labels),
                });
            }
            Err(Unparsed::Values {
                series,
                error,
                near,
            }) => return Err(bad_values(what, series.as_ref(), &error, &near)),
            Err(Unparsed::Bad(e)) if ok => return Err(parse(e)),
            Err(_) => {
                let mut body: String = text.chars().take(300).collect();
                if body.is_empty() {
                    body = "(empty body)".to_string();
                }
                return Err(refused(body));
            }
        };
        if env.status != "success" || !ok {
            return Err(refused(format!(
                "{}: {}",
                env.error_type.as_deref().unwrap_or("error"),
                env.error.as_deref().unwrap_or("(no message)")
            )));
        }
        env.data.ok_or_else(|| parse("no `data`".to_string()))
    }
}

/// The error of a series' `values` that are not `[time, value]` pairs of
/// numbers, in the answer to `query`: the series (`None`: its `values` came
/// before its labels), what is wrong and where, the text there.
fn bad_values(query: &str, series: Option<&Labels>, error: &ShapeError, near: &str) -> PromError {
    let series = series.map_or_else(
        || "whose `values` come before its `metric`".to_string(),
        label_set,
    );
    let more = if near.chars().count() < matrix::NEAR_CHARS {
        ""
    } else {
        "…"
    };
    let hint = if error.what == NOT_A_NUMBER {
        "; replay reads every sample value as a number (\"NaN\", \"+Inf\" and \"-Inf\" among \
         them) and refuses an answer it would have to guess"
    } else {
        ""
    };
    PromError::BadValues {
        query: query.to_string(),
        series,
        why: format!("{error}: `{}`{more}{hint}", printable(near)),
    }
}

/// An answer parsed by serde, `data` by `seed` (which sets `over` when it
/// stops for the memory budget).
fn by_seed<'o, S, T>(
    seed: S,
    over: &'o Cell<bool>,
) -> impl FnOnce(&str) -> Result<Envelope<T>, Unparsed> + 'o
where
    S: for<'de> DeserializeSeed<'de, Value = T> + 'o,
{
    move |text| {
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = EnvelopeSeed { data: seed }
            .deserialize(&mut de)
            .and_then(|env| de.end().map(|()| env));
        parsed.map_err(|e| {
            if over.get() {
                Unparsed::Over
            } else {
                Unparsed::Bad(e.to_string())
            }
        })
    }
}

/// Put a point into its series' row at its step of `grid`; a point at no
/// step is dropped. Points come step after step: the next one is most
/// likely at the step after the last (`next`), which saves
/// [`Grid::index_of`]'s division.
fn place(grid: &Grid) -> impl FnMut(&mut RefMut<'_, Vec<Option<f64>>>, i64, f64, &mut usize) + '_ {
    move |row, t, v, next| {
        let at = if *next < grid.steps && grid.at(*next) == t {
            Some(*next)
        } else {
            grid.index_of(t)
        };
        if let Some(i) = at {
            *next = i + 1;
            if let Some(slot) = row.get_mut(i) {
                *slot = Some(v);
            }
        }
    }
}

/// Fewest steps per request when halving for a store's points limit.
const MIN_CHUNK_STEPS: usize = 60;

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
        assert_eq!(
            check_selector("a=\"b\"").unwrap_err().to_string(),
            "--selector `a=\"b\"` must be label matchers in braces, e.g. \
             '{namespace=\"prod\",pod=~\"etcd-.*\"}'"
        );
        let long = format!("{{a=\"{}\"}}", "x".repeat(4096));
        assert_eq!(
            check_selector(&long).unwrap_err().to_string(),
            "--selector is longer than 4096 bytes"
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_batch_is_selected_by_its_labels_values_escaped_twice() {
        let batch = [
            labels(&[("job", "ere"), ("namespace", "a"), ("pod", "etcd-0")]),
            labels(&[("job", "ere"), ("namespace", "a"), ("pod", "etcd-1")]),
            labels(&[("job", "ere"), ("pod", "x.y|\"\\\n")]),
        ];
        assert_eq!(
            member_matchers(&batch),
            [
                "job=\"ere\"",
                "namespace=~\"a|\"",
                r#"pod=~"etcd-0|etcd-1|x\\.y\\|\"\\\\\n""#,
            ]
        );
        assert_eq!(
            member_matchers(&batch[..1]),
            ["job=\"ere\"", "namespace=\"a\"", "pod=\"etcd-0\""]
        );
    }

    #[test]
    fn refusals_name_the_stores_limit_and_how_replay_meets_it() {
        let vm = "error when executing query=\"x\": cannot select more than -search.maxUniqueTimeseries=10 time series";
        assert_eq!(
            limit_of(vm).map(|l| (l.flag, l.split)),
            Some(("-search.maxUniqueTimeseries", Split::Members))
        );
        let prom = "execution: query processing would load too many samples into memory in query execution";
        assert_eq!(limit_of(prom).map(|l| l.flag), Some("--query.max-samples"));
        let res = "bad_data: exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)";
        assert_eq!(limit_of(res).map(|l| l.split), Some(Split::Time));
        assert_eq!(limit_of("parse error at char 5"), None);
    }
}

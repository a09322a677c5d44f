//! Generic scrape sources (from `--config`): GET a Prometheus endpoint each
//! round, and for each configured signal pick the series of one metric whose
//! labels match exactly, folded with single/sum/max/min into one number.

use std::sync::Arc;

use super::config::{Aggregate, ScrapeConfig, SignalSpec, selector};
use super::promtext::{self, Sample};
use super::{Pace, Reason, SampleError, Sampler};
use crate::outside::http_client::{self, SourceError};
use crate::runtime::clock::Clock;
use etcd_readiness_policy::signals::{Catalogue, SignalId, SignalStore, Source, Value};

/// Samples one scrape source.
pub struct ScrapeSampler {
    cfg: ScrapeConfig,
    client: reqwest::Client,
    /// SHA-256 of the TLS files its client was built with.
    tls_sha256: Option<String>,
    signals: Vec<(SignalId, SignalSpec)>,
}

impl ScrapeSampler {
    /// `catalogue` must already hold this source's signals (see
    /// [`extend_catalogue`](super::config::extend_catalogue)).
    pub fn new(cfg: ScrapeConfig, catalogue: &Catalogue) -> Result<Self, SourceError> {
        http_client::base_url(&cfg.url)?;
        let material = if cfg.tls == Default::default() {
            None
        } else {
            Some(super::tls_material::Material::read(&cfg.tls)?)
        };
        let client = super::tls_material::http_client(material.as_ref(), cfg.timeout)?;
        let tls_sha256 = material.map(|m| m.sha256);
        let mut signals = Vec::new();
        for (name, spec) in &cfg.signals {
            let id = catalogue.lookup(name).ok_or_else(|| {
                SourceError::Invalid(format!(
                    "signal `{name}` of scrape source `{}` is not in the catalogue",
                    cfg.name
                ))
            })?;
            signals.push((id, spec.clone()));
        }
        Ok(ScrapeSampler {
            cfg,
            client,
            tls_sha256,
            signals,
        })
    }

    /// The source's configuration.
    pub fn config(&self) -> &ScrapeConfig {
        &self.cfg
    }

    /// SHA-256 of the TLS files its client was built with, if any.
    pub fn tls_sha256(&self) -> Option<&str> {
        self.tls_sha256.as_deref()
    }

    /// One sampler per source of the config file.
    pub fn all(
        config: &super::config::Config,
        catalogue: &Catalogue,
    ) -> Result<Vec<ScrapeSampler>, SourceError> {
        config
            .sources
            .iter()
            .map(|s| ScrapeSampler::new(s.clone(), catalogue))
            .collect()
    }
}

/// The value of one signal from a scrape.
pub fn extract(samples: &[Sample], spec: &SignalSpec) -> Result<f64, SampleError> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| {
            s.name == spec.metric
                && s.matches(spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        })
        .map(|s| s.value)
        .collect();
    if matching.is_empty() {
        return Err(SampleError {
            reason: Reason::Mismatch,
            message: format!("no series matches {}", selector(spec)),
        });
    }
    Ok(match spec.aggregate {
        Aggregate::Single => {
            if matching.len() > 1 {
                return Err(SampleError {
                    reason: Reason::Mismatch,
                    message: format!(
                        "{} series match {} (aggregate: single); add label matchers or set aggregate: sum, max or min",
                        matching.len(),
                        selector(spec)
                    ),
                });
            }
            matching[0]
        }
        Aggregate::Sum => matching.iter().sum(),
        Aggregate::Max => matching.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Aggregate::Min => matching.iter().copied().fold(f64::INFINITY, f64::min),
    })
}

impl Sampler for ScrapeSampler {
    fn pace(&self) -> Pace {
        Pace {
            source: Source::Scrape(self.cfg.name.clone()),
            interval: self.cfg.interval,
            timeout: self.cfg.timeout,
        }
    }

    fn signals(&self) -> Vec<SignalId> {
        self.signals.iter().map(|(id, _)| *id).collect()
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let fetched = http_client::get_ok(
            &self.client,
            &self.cfg.url,
            self.cfg.timeout,
            self.cfg.max_body_bytes,
        )
        .await
        .and_then(|body| {
            promtext::parse(&body).map_err(|e| SampleError {
                reason: Reason::Parse,
                message: self
                    .cfg
                    .url
                    .scrub(&format!("{}: {e}", self.cfg.url))
                    .into_owned(),
            })
        });
        let at = clock.now();
        let samples = match fetched {
            Ok(s) => s,
            Err(e) => {
                let msg: Arc<str> = Arc::from(e.message.as_str());
                for (id, _) in &self.signals {
                    store.record_err(*id, msg.clone(), at);
                }
                return Err(e);
            }
        };
        let mut first_err = None;
        for (id, spec) in &self.signals {
            match extract(&samples, spec) {
                Ok(v) => store.record_ok(*id, Value::Num(v), at),
                Err(e) => {
                    let msg = self
                        .cfg
                        .url
                        .scrub(&format!("{}: {}", self.cfg.url, e.message))
                        .into_owned();
                    store.record_err(*id, Arc::from(msg.as_str()), at);
                    first_err.get_or_insert(SampleError {
                        reason: e.reason,
                        message: msg,
                    });
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(metric: &str, labels: &[(&str, &str)], aggregate: Aggregate) -> SignalSpec {
        SignalSpec {
            metric: metric.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            aggregate,
        }
    }

    const TEXT: &str = "m{peer=\"a\",kind=\"x\"} 1\nm{peer=\"b\",kind=\"x\"} 5\nm{peer=\"c\",kind=\"y\"} 2\nother 7\n";

    #[test]
    fn aggregates_and_matchers() {
        let s = promtext::parse(TEXT).unwrap();
        assert_eq!(
            extract(&s, &spec("other", &[], Aggregate::Single)).unwrap(),
            7.0
        );
        assert_eq!(extract(&s, &spec("m", &[], Aggregate::Sum)).unwrap(), 8.0);
        assert_eq!(
            extract(&s, &spec("m", &[("kind", "x")], Aggregate::Max)).unwrap(),
            5.0
        );
        assert_eq!(
            extract(&s, &spec("m", &[("kind", "x")], Aggregate::Min)).unwrap(),
            1.0
        );
        assert_eq!(
            extract(&s, &spec("m", &[("peer", "c")], Aggregate::Single)).unwrap(),
            2.0
        );
    }

    #[test]
    fn single_with_several_series_and_no_match_are_errors() {
        let s = promtext::parse(TEXT).unwrap();
        let e = extract(&s, &spec("m", &[("kind", "x")], Aggregate::Single)).unwrap_err();
        assert_eq!(e.reason, Reason::Mismatch);
        assert!(
            e.message.starts_with("2 series match m{kind=\"x\"}"),
            "{}",
            e.message
        );
        let e = extract(&s, &spec("m", &[("kind", "z")], Aggregate::Sum)).unwrap_err();
        assert_eq!(e.message, "no series matches m{kind=\"z\"}");
    }
}

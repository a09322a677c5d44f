//! The backup, owner and scrape sources against real parts: a real etcd 3.4,
//! a real dnsmasq, and an in-test HTTP server playing the backup sidecar.
//! Policies are compiled and evaluated on the store's readings as `serve` does,
//! and every built-in signal is written by the source the catalogue names.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_exporter::runtime::Runtime;
use etcd_readiness_exporter::runtime::clock::Clock;
use etcd_readiness_exporter::sources::backup::{BackupConfig, BackupMode, BackupSampler};
use etcd_readiness_exporter::sources::config::{BuiltinSources, Config, configure_catalogue};
use etcd_readiness_exporter::sources::etcd::{self as etcd_source, EtcdConfig};
use etcd_readiness_exporter::sources::etcd_metrics::{
    EtcdMetricsConfig, EtcdMetricsSampler, metrics_url,
};
use etcd_readiness_exporter::sources::owner::{OwnerConfig, OwnerSampler};
use etcd_readiness_exporter::sources::scrape::ScrapeSampler;
use etcd_readiness_exporter::sources::{Reason, Sampler};
use etcd_readiness_exporter::sources::{RoundNotifier, Sampling, SourceMetrics};
use etcd_readiness_policy::policy::{Evaluator, Policy};
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalStore, Source, Unknown, Value};
use etcd_readiness_policy::verdict::{CheckReport, CheckState};
use etcd_readiness_testkit::backup::Sidecar;
use etcd_readiness_testkit::clock::now_unix;
use etcd_readiness_testkit::dns::Dnsmasq;
use etcd_readiness_testkit::etcd::{Etcd, read_revision, write_until_revision};
use etcd_readiness_testkit::hostile::Silent;
use etcd_readiness_testkit::pki;
use prometheus_client::registry::Registry;

/// The known value of a signal, or a panic showing why it is unknown.
fn value(cat: &Catalogue, store: &SignalStore, name: &str) -> Value {
    let r = store.reading(cat.id(name), Instant::now());
    r.value
        .unwrap_or_else(|why| panic!("{name} is unknown: {why:?}"))
}

fn num(cat: &Catalogue, store: &SignalStore, name: &str) -> f64 {
    match value(cat, store, name) {
        Value::Num(n) => n,
        other => panic!("{name} = {other:?}, not a number"),
    }
}

fn boolean(cat: &Catalogue, store: &SignalStore, name: &str) -> bool {
    match value(cat, store, name) {
        Value::Bool(b) => b,
        other => panic!("{name} = {other:?}, not a bool"),
    }
}

/// The error that makes a signal unknown (panics if it is known).
fn unknown_error(cat: &Catalogue, store: &SignalStore, name: &str) -> String {
    let r = store.reading(cat.id(name), Instant::now());
    match r.value {
        Err(Unknown::Failed { error, .. }) => error.to_string(),
        other => panic!("{name}: expected a failed reading, got {other:?}"),
    }
}

/// Evaluate `policy` on the store's current readings: (ready, reports).
fn evaluate(ev: &mut Evaluator, store: &SignalStore) -> (bool, Vec<CheckReport>) {
    let now = Instant::now();
    let mut readings = Vec::new();
    store.read_into(now, &mut readings);
    ev.evaluate(&readings, now);
    (ev.ready(), ev.report(&readings, now, SystemTime::now()))
}

fn compile(path: &str, src: &str, cat: &Catalogue) -> Arc<Policy> {
    Arc::new(Policy::compile(path, src, cat).unwrap_or_else(|d| panic!("{d}")))
}

/// The etcd source running as `serve` runs it (`sources::etcd::spawn`) on
/// `etcd`, writing into `store`; aborted when dropped.
struct EtcdSource(tokio::task::JoinHandle<()>);

impl Drop for EtcdSource {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Start the etcd source on `store` and wait (bounded) until it has recorded
/// a revision of at least `at_least` and a quorum-read latency. Returns the
/// running source and the revision.
async fn sample_etcd(
    etcd: &Etcd,
    cat: &Catalogue,
    store: &Arc<SignalStore>,
    at_least: i64,
) -> (EtcdSource, i64) {
    let task = etcd_source::spawn(
        EtcdConfig {
            endpoint: etcd.client_url.clone().into(),
            tls: None,
            auth: None,
            probe_key: "/etcd-readiness-probe".to_string(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            freeze: Duration::ZERO,
            member_http: None,
            etcd: Default::default(),
        },
        cat,
        Sampling {
            store: store.clone(),
            notifier: RoundNotifier::new(),
            metrics: SourceMetrics::register(&mut Registry::default()),
            runtime: Runtime::new(Clock::node()),
        },
        Default::default(),
        Default::default(),
    );
    let source = EtcdSource(task);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = Instant::now();
        let rev = store.reading(cat.id("revision"), now).get();
        let qget = store.reading(cat.id("qget_ms"), now).get();
        if let (Some(Value::Num(rev)), Some(Value::Num(_))) = (rev, qget)
            && rev as i64 >= at_least
        {
            return (source, rev as i64);
        }
        assert!(
            now < deadline,
            "the etcd source recorded no revision >= {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait (bounded) until the source of every built-in signal has written
/// it — a value, or a failure with its reason — and name those it never
/// wrote. `sources` must be every built-in source.
async fn assert_every_builtin_signal_is_written(store: &SignalStore, sources: &[Source]) {
    for b in Builtin::ALL {
        assert!(
            sources.contains(&b.source()),
            "{b:?}'s source is not sampled here"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = Instant::now();
        let never: Vec<(&str, String)> = Builtin::ALL
            .iter()
            .filter(|b| store.reading(b.id(), now).value == Err(Unknown::NeverSampled))
            .map(|b| (b.name(), b.source().label()))
            .collect();
        if never.is_empty() {
            return;
        }
        assert!(
            now < deadline,
            "signals their source never wrote (signal, source): {never:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `owner_ok` as `serve` samples it: the real [`OwnerSampler`] asking a real
/// dnsmasq whose TXT record names this cluster.
async fn sample_owner(dns: &Dnsmasq, cat: &Catalogue, store: &SignalStore) {
    OwnerSampler::new(
        OwnerConfig {
            name: "owner.example.test".to_string(),
            id: "cluster-a".to_string(),
            interval: Duration::from_secs(30),
            timeout: Duration::from_millis(1500),
            nameserver: Some(dns.addr),
        },
        cat,
    )
    .unwrap()
    .sample(store, &Clock::node())
    .await
    .unwrap();
}

// Long because: one etcd, one backup stand-in and the card policy through each of its terms in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_rev_lag_gates_the_card_policy_against_a_real_etcd() {
    let (etcd, sidecar, dns) = tokio::join!(
        Etcd::start(),
        Sidecar::start(),
        Dnsmasq::start(&[("owner.example.test", "cluster-a")])
    );
    let cat = Catalogue::builtin();
    let store = Arc::new(SignalStore::new(&cat));
    let mut client = etcd.client().await;

    // The sidecar has not snapshotted yet: its gauges are all 0.
    let cfg = BackupConfig {
        url: sidecar.url.clone().into(),
        tls: Default::default(),
        mode: BackupMode::Metrics,
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        max_body_bytes: etcd_readiness_exporter::outside::http_client::DEFAULT_MAX_BODY_BYTES,
    };
    let mut backup = BackupSampler::new(cfg.clone(), &cat).unwrap();
    backup.sample(&store, &Clock::node()).await.unwrap();
    assert!(boolean(&cat, &store, "backup_up"));
    assert!(boolean(&cat, &store, "backup_healthy"));
    for name in [
        "full_snapshot_revision",
        "snapshot_revision",
        "snapshot_age",
        "rev_lag",
    ] {
        let e = unknown_error(&cat, &store, name);
        assert!(
            e.contains("no") && e.contains("snapshot yet"),
            "{name}: {e}"
        );
    }

    // A full snapshot at the current revision, then more than 5000 writes.
    let (rev0, _) = read_revision(&mut client).await;
    let served = rev0.max(1);
    let taken = now_unix() - 120.0;
    sidecar.set(|s| {
        s.full_revision = served;
        s.full_timestamp = taken;
    });
    write_until_revision(&client, served + 5001).await;
    let (_etcd_source, rev) = sample_etcd(&etcd, &cat, &store, served + 5001).await;
    sample_owner(&dns, &cat, &store).await;
    assert!(boolean(&cat, &store, "owner_ok"));

    backup.sample(&store, &Clock::node()).await.unwrap();
    // With the member's own metrics too, every built-in source has sampled
    // this store: each of its signals has a value or a reason.
    EtcdMetricsSampler::new(
        EtcdMetricsConfig {
            url: metrics_url(&etcd.metrics_url.as_str().into()).unwrap(),
            tls: Default::default(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            max_body_bytes: etcd_readiness_exporter::outside::http_client::DEFAULT_MAX_BODY_BYTES,
        },
        &cat,
    )
    .unwrap()
    .sample(&store, &Clock::node())
    .await
    .unwrap();
    let sources = [
        Source::Etcd,
        Source::EtcdMetrics,
        Source::Backup,
        Source::Owner,
    ];
    assert_every_builtin_signal_is_written(&store, &sources).await;
    assert_eq!(num(&cat, &store, "full_snapshot_revision"), served as f64);
    assert_eq!(num(&cat, &store, "snapshot_revision"), served as f64);
    assert_eq!(num(&cat, &store, "rev_lag"), (rev - served) as f64);
    let age = num(&cat, &store, "full_snapshot_age");
    assert!((119.0..600.0).contains(&age), "full_snapshot_age {age}");

    let card = std::fs::read_to_string("policies/card.policy").unwrap();
    let mut ev = Evaluator::new(compile("policies/card.policy", &card, &cat), Instant::now());
    let (ready, reports) = evaluate(&mut ev, &store);
    assert!(!ready, "{reports:#?}");
    let failing: Vec<&CheckReport> = reports
        .iter()
        .filter(|r| r.state == CheckState::Fail)
        .collect();
    assert_eq!(failing.len(), 1, "{reports:#?}");
    let why = &failing[0].explanation;
    eprintln!("card policy with the snapshot behind: {why}");
    assert!(why.contains("rev_lag"), "{why}");
    assert!(why.contains(&(rev - served).to_string()), "{why}");
    assert!(
        !why.contains("qget_ms") && !why.contains("owner_ok"),
        "{why}"
    );

    // The sidecar takes an incremental snapshot close to the head: ready.
    let incr = rev - 10;
    sidecar.set(|s| {
        s.incr_revision = incr;
        s.incr_timestamp = now_unix() - 5.0;
    });
    backup.sample(&store, &Clock::node()).await.unwrap();
    assert_eq!(num(&cat, &store, "snapshot_revision"), incr as f64);
    assert_eq!(num(&cat, &store, "full_snapshot_revision"), served as f64);
    assert_eq!(num(&cat, &store, "rev_lag"), 10.0);
    let age = num(&cat, &store, "snapshot_age");
    assert!((4.0..120.0).contains(&age), "snapshot_age {age}");
    let (ready, reports) = evaluate(&mut ev, &store);
    assert!(ready, "{reports:#?}");

    // The same facts through /snapshot/latest.
    let store2 = SignalStore::new(&cat);
    let store2 = Arc::new(store2);
    let (_etcd_source2, _) = sample_etcd(&etcd, &cat, &store2, rev).await;
    let mut latest = BackupSampler::new(
        BackupConfig {
            mode: BackupMode::SnapshotLatest,
            ..cfg.clone()
        },
        &cat,
    )
    .unwrap();
    latest.sample(&store2, &Clock::node()).await.unwrap();
    assert!(boolean(&cat, &store2, "backup_up"));
    assert_eq!(num(&cat, &store2, "snapshot_revision"), incr as f64);
    assert_eq!(num(&cat, &store2, "full_snapshot_revision"), served as f64);
    assert_eq!(num(&cat, &store2, "rev_lag"), 10.0);
    let age = num(&cat, &store2, "full_snapshot_age");
    assert!((119.0..600.0).contains(&age), "full_snapshot_age {age}");

    // Without this member's revision, rev_lag is unknown and says why.
    let store3 = SignalStore::new(&cat);
    latest.sample(&store3, &Clock::node()).await.unwrap();
    assert_eq!(num(&cat, &store3, "snapshot_revision"), incr as f64);
    let why = unknown_error(&cat, &store3, "rev_lag");
    assert!(
        why.starts_with("this member's revision is unknown"),
        "{why}"
    );

    // /healthz 503: answered, and the answer is "not healthy".
    sidecar.set(|s| s.healthz = 503);
    backup.sample(&store, &Clock::node()).await.unwrap();
    assert!(!boolean(&cat, &store, "backup_healthy"));
    assert!(boolean(&cat, &store, "backup_up"));

    // The sidecar goes away: backup_up false, the rest unknown, card not ready.
    sidecar.stop().await;
    let e = backup.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Connect, "{e:?}");
    assert!(!boolean(&cat, &store, "backup_up"));
    for name in [
        "backup_healthy",
        "snapshot_revision",
        "full_snapshot_revision",
        "snapshot_age",
        "full_snapshot_age",
        "rev_lag",
    ] {
        let e = unknown_error(&cat, &store, name);
        assert!(e.contains(&sidecar.url), "{name}: {e}");
    }
    let (ready, reports) = evaluate(&mut ev, &store);
    assert!(!ready);
    let lag = reports.iter().find(|r| r.expr.contains("rev_lag")).unwrap();
    assert_eq!(lag.state, CheckState::Unknown, "{reports:#?}");
}

#[tokio::test]
async fn backup_sidecar_that_hangs_times_out_and_one_that_answers_garbage_is_up() {
    let cat = Catalogue::builtin();
    let cfg = |url: &str| BackupConfig {
        url: url.into(),
        tls: Default::default(),
        mode: BackupMode::Metrics,
        interval: Duration::from_secs(1),
        timeout: Duration::from_millis(300),
        max_body_bytes: etcd_readiness_exporter::outside::http_client::DEFAULT_MAX_BODY_BYTES,
    };

    let silent = Silent::start().await;
    let store = SignalStore::new(&cat);
    let e = BackupSampler::new(cfg(&silent.url), &cat)
        .unwrap()
        .sample(&store, &Clock::node())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Timeout, "{e:?}");
    assert!(!boolean(&cat, &store, "backup_up"));
    let why = unknown_error(&cat, &store, "backup_healthy");
    assert!(why.contains("/healthz"), "{why}");

    let sidecar = Sidecar::start().await;
    sidecar.set(|s| s.metrics_body = Some("etcdbr_snapshot_latest_revision{kind=Full} 1\n".into()));
    let store = SignalStore::new(&cat);
    let e = BackupSampler::new(cfg(&sidecar.url), &cat)
        .unwrap()
        .sample(&store, &Clock::node())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Parse, "{e:?}");
    assert!(boolean(&cat, &store, "backup_up"));
    assert!(boolean(&cat, &store, "backup_healthy"));
    let why = unknown_error(&cat, &store, "snapshot_revision");
    assert!(why.contains("/metrics: line 1: expected `\"`"), "{why}");
}

#[tokio::test]
async fn owner_check_against_a_real_dnsmasq() {
    let mut dns = Dnsmasq::start(&[("owner.example.test", "cluster-a")]).await;
    let cat = Catalogue::builtin();
    let store = SignalStore::new(&cat);
    let owner = |name: &str, id: &str| {
        OwnerSampler::new(
            OwnerConfig {
                name: name.to_string(),
                id: id.to_string(),
                interval: Duration::from_secs(30),
                timeout: Duration::from_millis(1500),
                nameserver: Some(dns.addr),
            },
            &cat,
        )
        .unwrap()
    };

    // The record names this cluster.
    let mut ours = owner("owner.example.test", "cluster-a");
    ours.sample(&store, &Clock::node()).await.unwrap();
    assert!(boolean(&cat, &store, "owner_ok"));
    assert!(num(&cat, &store, "owner_lookup_ms") >= 0.0);

    // The record names another cluster: a confirmed "no".
    let other_store = SignalStore::new(&cat);
    owner("owner.example.test", "cluster-b")
        .sample(&other_store, &Clock::node())
        .await
        .unwrap();
    assert!(!boolean(&cat, &other_store, "owner_ok"));

    // No such name: unknown, with the reason.
    let nx_store = SignalStore::new(&cat);
    let e = owner("missing.example.test", "cluster-a")
        .sample(&nx_store, &Clock::node())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Nxdomain, "{e:?}");
    let why = unknown_error(&cat, &nx_store, "owner_ok");
    assert!(
        why.contains("NXDOMAIN") && why.contains("missing.example.test"),
        "{why}"
    );

    // DNS goes away: unknown, and a lenient policy keeps passing.
    let port = dns.addr.port();
    dns.guard.kill();
    let e = ours.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Timeout, "{e:?}");
    let why = unknown_error(&cat, &store, "owner_ok");
    assert!(why.contains("owner.example.test"), "{why}");
    let policy = "check owner: owner_ok ?? true\ncheck owner_strict: owner_ok\n";
    let mut ev = Evaluator::new(compile("owner.policy", policy, &cat), Instant::now());
    let (_, reports) = evaluate(&mut ev, &store);
    assert_eq!(reports[0].state, CheckState::Pass, "{reports:#?}");
    assert_eq!(reports[1].state, CheckState::Unknown, "{reports:#?}");

    // DNS comes back with the record moved to another cluster: the next round sees it.
    let _dns2 = Dnsmasq::start_on(port, &[("owner.example.test", "cluster-b")]).await;
    ours.sample(&store, &Clock::node()).await.unwrap();
    assert!(!boolean(&cat, &store, "owner_ok"));
    let (ready, reports) = evaluate(&mut ev, &store);
    assert!(!ready);
    assert_eq!(reports[0].state, CheckState::Fail, "{reports:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_source_reads_a_real_etcd_metrics_listener() {
    let mut etcd = Etcd::start().await;
    let mut client = etcd.client().await;
    client.put("k", "v", None).await.unwrap();
    let yaml = format!(
        "sources:\n\
         - name: etcd_metrics\n\
         \x20 url: {}/metrics\n\
         \x20 interval: 1s\n\
         \x20 timeout: 1s\n\
         \x20 signals:\n\
         \x20   fsync_count: {{metric: etcd_disk_wal_fsync_duration_seconds_count}}\n\
         \x20   has_leader_metric: {{metric: etcd_server_has_leader}}\n\
         \x20   fsync_fast: {{metric: etcd_disk_wal_fsync_duration_seconds_bucket, labels: {{le: \"+Inf\"}}}}\n\
         \x20   fsync_buckets: {{metric: etcd_disk_wal_fsync_duration_seconds_bucket}}\n\
         \x20   fsync_buckets_max: {{metric: etcd_disk_wal_fsync_duration_seconds_bucket, aggregate: max}}\n",
        etcd.metrics_url
    );
    let config = Config::parse("sources.yaml", &yaml).unwrap();
    let mut cat = Catalogue::builtin();
    configure_catalogue(BuiltinSources::default(), Some(&config), &mut cat).unwrap();
    let store = SignalStore::new(&cat);
    let mut samplers = ScrapeSampler::all(&config, &cat).unwrap();
    assert_eq!(samplers.len(), 1);
    let scrape = &mut samplers[0];
    assert_eq!(scrape.pace().source.label(), "scrape:etcd_metrics");

    // `single` over a histogram's many buckets is an error for that signal only.
    let e = scrape.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Mismatch, "{e:?}");
    let why = unknown_error(&cat, &store, "fsync_buckets");
    assert!(
        why.contains("series match etcd_disk_wal_fsync_duration_seconds_bucket"),
        "{why}"
    );
    let count = num(&cat, &store, "fsync_count");
    assert!(count >= 1.0, "fsync_count {count}");
    assert_eq!(num(&cat, &store, "fsync_fast"), count);
    assert_eq!(num(&cat, &store, "fsync_buckets_max"), count);
    assert_eq!(num(&cat, &store, "has_leader_metric"), 1.0);

    let policy = "check leader_metric: has_leader_metric == 1\ncheck wal: fsync_count > 0\n";
    let mut ev = Evaluator::new(compile("scrape.policy", policy, &cat), Instant::now());
    let (ready, reports) = evaluate(&mut ev, &store);
    assert!(ready, "{reports:#?}");

    // The backup source is not configured: a policy naming it does not load.
    let d = Policy::compile("p", "check b: rev_lag < 5000", &cat).unwrap_err();
    assert!(
        d.to_string().contains("set --backup.url to enable it"),
        "{d}"
    );

    // etcd goes away: the scraped signals turn unknown and the policy fails closed.
    etcd.kill();
    let e = scrape.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Connect, "{e:?}");
    let why = unknown_error(&cat, &store, "fsync_count");
    assert!(why.contains(&etcd.metrics_url), "{why}");
    let (ready, _) = evaluate(&mut ev, &store);
    assert!(!ready);
}

#[test]
fn check_and_signals_know_scrape_signals_given_the_same_config() {
    let bin = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.policy");
    std::fs::write(&policy, "check wal: fsync_count > 0\n").unwrap();
    let run =
        |args: &[&std::ffi::OsStr]| std::process::Command::new(bin).args(args).output().unwrap();

    let out = run(&["check".as_ref(), policy.as_os_str()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fsync_count"), "{err}");

    let config = std::path::Path::new("deploy/sources.example.yaml").as_os_str();
    let out = run(&[
        "check".as_ref(),
        "--config".as_ref(),
        config,
        policy.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = run(&["signals".as_ref(), "--config".as_ref(), config]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("fsync_count "))
        .unwrap();
    assert!(line.contains("scrape:etcd_metrics"), "{line}");

    let clash = dir.path().join("clash.yaml");
    std::fs::write(
        &clash,
        "sources:\n- name: m\n  url: http://127.0.0.1:1/metrics\n  signals: {leader: {metric: etcd_server_has_leader}}\n",
    )
    .unwrap();
    let out = run(&["signals".as_ref(), "--config".as_ref(), clash.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("signal `leader` of scrape source `m` clashes with the built-in signal"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_over_mutual_tls_and_a_wrong_ca_or_no_client_cert_is_a_tls_error() {
    use etcd_readiness_exporter::outside::http_client::TlsFiles;
    let pki = pki::make_pki();
    let sidecar = Sidecar::start_tls(
        &pki.path("server.pem"),
        &pki.path("server-key.pem"),
        &pki.path("ca.pem"),
    )
    .await;
    let now = now_unix();
    sidecar.set(|s| {
        s.full_revision = 10;
        s.full_timestamp = now;
        s.incr_revision = 12;
        s.incr_timestamp = now;
    });
    let cat = Catalogue::builtin();
    let config = |ca: &str, client: bool| BackupConfig {
        url: sidecar.url.clone().into(),
        tls: TlsFiles {
            ca: Some(pki.path(ca)),
            cert: client.then(|| pki.path("client.pem")),
            key: client.then(|| pki.path("client-key.pem")),
        },
        mode: BackupMode::Metrics,
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        max_body_bytes: etcd_readiness_exporter::outside::http_client::DEFAULT_MAX_BODY_BYTES,
    };

    // The --backup.cacert/--backup.cert/--backup.key material: it works.
    let store = SignalStore::new(&cat);
    let mut good = BackupSampler::new(config("ca.pem", true), &cat).unwrap();
    good.sample(&store, &Clock::node()).await.unwrap();
    assert!(boolean(&cat, &store, "backup_up"));
    assert!(boolean(&cat, &store, "backup_healthy"));
    assert_eq!(num(&cat, &store, "snapshot_revision"), 12.0);

    // A CA that did not sign the sidecar's certificate: a TLS error, and the
    // sidecar's signals are not known.
    let store = SignalStore::new(&cat);
    let mut wrong_ca = BackupSampler::new(config("other-ca.pem", true), &cat).unwrap();
    let e = wrong_ca.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Tls, "{e}");
    assert!(!boolean(&cat, &store, "backup_up"));
    let why = unknown_error(&cat, &store, "snapshot_revision");
    assert!(why.to_lowercase().contains("certificate"), "{why}");

    // No client certificate: the sidecar refuses the handshake.
    let store = SignalStore::new(&cat);
    let mut anonymous = BackupSampler::new(config("ca.pem", false), &cat).unwrap();
    // Over TLS 1.3 the refusal comes after the client's handshake: either
    // the alert is read or the connection is gone before the request is
    // sent. Both are the same refusal and must read as one.
    let e = anonymous.sample(&store, &Clock::node()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Tls, "{e}");
    assert!(e.message.to_lowercase().contains("certificate"), "{e}");
    assert!(!boolean(&cat, &store, "backup_up"), "{e}");
}

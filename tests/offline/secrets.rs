//! A password given in any URL the exporter takes — `--etcd.endpoint`,
//! `--etcd.metrics-url`, `--backup.url` (each as a flag and as its
//! variable), a `--config` scrape source (at start and in a reload), and
//! `replay`'s `--prometheus.url` — well formed or not, is written nowhere:
//! not on the status page (its `title=` attributes included), `/signals`,
//! `/policy`, `/metrics`, `/history`, `/livez?verbose`, `/readyz?verbose`,
//! the answer of `POST /-/reload`, the log at debug level, start-up and
//! reload errors, nor the output of `check`, `signals`, `replay` and
//! `--help`. The sources answer from a real loopback server (a body without
//! the metric, a 404) and a closed port, so every error path that names a
//! URL runs.

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::hostile::{Behaviour, HostileServer};
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::process::ChildGuard;
use etcd_readiness_testkit::wait;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");

/// The secret; it must occur nowhere in what the exporter writes.
const PW: &str = "S3cretPassw0rd";

/// The URL flags of `serve` and their variables.
const URL_FLAGS: [(&str, &str); 3] = [
    ("--etcd.endpoint", "ERE_ETCD_ENDPOINT"),
    ("--etcd.metrics-url", "ERE_ETCD_METRICS_URL"),
    ("--backup.url", "ERE_BACKUP_URL"),
];

/// URLs with the password that do not parse: a bad port, `@@`, a scheme
/// other than http(s), no scheme, a raw `/` in the password.
fn malformed() -> Vec<String> {
    vec![
        format!("http://user:{PW}@127.0.0.1:bad/ok"),
        format!("http://u:{PW}@@127.0.0.1:x1"),
        format!("ftp://u:{PW}@127.0.0.1:1"),
        format!("user:{PW}@127.0.0.1:2379"),
        format!("http://u:{PW}/x@127.0.0.1:1/"),
    ]
}

/// Panic, showing where, if `text` (named `what`) holds the password.
fn assert_clean(what: &str, text: &str) {
    if let Some(at) = text.find(PW) {
        let from = text[..at]
            .char_indices()
            .rev()
            .nth(300)
            .map_or(0, |(i, _)| i);
        let to = (at + PW.len() + 300).min(text.len());
        panic!(
            "the password is in {what} ({} occurrences), e.g.:\n…{}…",
            text.matches(PW).count(),
            &text[from..text.floor_char_boundary(to)]
        );
    }
}

fn scrape_config(url: &str, url404: &str) -> String {
    format!(
        "sources:\n  - name: m_src\n    url: {url}\n    interval: 100ms\n    timeout: 100ms\n    signals:\n      m: {{metric: m}}\n  - name: n_src\n    url: {url404}\n    interval: 100ms\n    timeout: 100ms\n    signals:\n      n: {{metric: n}}\n"
    )
}

const POLICY: &str = "check leader: leader\ncheck scraped: m > 0 && n > 0\ncheck backup: backup_up\ncheck peers: active_peers > 0\n";

/// Start `cmd` with its stdout and stderr read into one text meanwhile (a
/// full pipe would block the child's log); the text is the thread's result.
fn spawn_logged(mut cmd: Command) -> (ChildGuard, JoinHandle<String>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the exporter");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let other = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s + &other.join().unwrap_or_default()
    });
    (ChildGuard::new(child, "exporter"), reader)
}

/// Every surface of a running exporter, by name.
async fn surfaces(http: &reqwest::Client, base: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for path in [
        "/",
        "/signals",
        "/policy",
        "/metrics",
        "/history",
        "/history?policy=candidate",
        "/livez?verbose",
        "/readyz?verbose",
        "/readyz/scraped?verbose",
        "/readyz/backup?verbose",
    ] {
        out.push((path.to_string(), get(http, &format!("{base}{path}")).await));
    }
    out
}

async fn get(http: &reqwest::Client, url: &str) -> String {
    match http.get(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => format!("(no answer: {e})"),
    }
}

async fn reload(http: &reqwest::Client, base: &str) -> String {
    match http.post(format!("{base}/-/reload")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => format!("(no answer: {e})"),
    }
}

/// `serve` with every URL carrying the password, by flag or by variable:
/// its surfaces once every source has failed naming its URL, the answers of
/// reloads of `--config` to URLs that do not parse, the surfaces after
/// them, and its whole log.
async fn serve_with_passwords(by_env: bool) {
    let server = HostileServer::start().await;
    let body = Behaviour::Fixed(b"unrelated 1\n".to_vec());
    server.set("/ok", body.clone());
    server.set("/metrics", body);
    let host = server.addr;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.policy");
    std::fs::write(&policy, POLICY).unwrap();
    let good = scrape_config(
        &format!("http://user:{PW}@{host}/ok"),
        &format!("http://user:{PW}@{host}/missing"),
    );
    let volume = dir.path().join("config");
    std::fs::create_dir(&volume).unwrap();
    let mut config = AtomicWriterVolume::create(&volume, "c.yaml", &good).unwrap();
    let closed = free_tcp_port();
    let urls = [
        format!("http://user:{PW}@127.0.0.1:{closed}"),
        format!("http://user:{PW}@{host}"),
        format!("http://user:{PW}@{host}/"),
    ];
    let port = free_tcp_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut cmd = bin();
    cmd.arg("serve")
        .args(["--web.listen-address", &format!("127.0.0.1:{port}")])
        .args(["--log.level", "debug", "--web.enable-lifecycle"])
        .arg("--policy")
        .arg(&policy)
        .arg("--policy.candidate")
        .arg(&policy)
        .arg("--config")
        .arg(config.path())
        .args(["--sample.interval", "100ms", "--sample.timeout", "50ms"]);
    for ((flag, env), url) in URL_FLAGS.iter().zip(&urls) {
        if by_env {
            cmd.env(env, url);
        } else {
            cmd.args([*flag, url.as_str()]);
        }
    }
    let (mut child, log) = spawn_logged(cmd);
    etcd_readiness_exporter::outside::http_client::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // Every source has failed at least once, naming its URL redacted.
    let want = [
        format!("<redacted>@{host}/ok"),
        format!("<redacted>@{host}/missing"),
        format!("<redacted>@{host}/metrics"),
    ];
    let seen = wait::poll(Duration::from_secs(30), Duration::from_millis(100), || {
        let (http, base, want) = (&http, &base, &want);
        async move {
            let mut body = get(http, &format!("{base}/signals")).await;
            body.push_str(&get(http, &format!("{base}/readyz?verbose")).await);
            match want.iter().find(|w| !body.contains(w.as_str())) {
                None => Ok(()),
                Some(w) => Err(format!("no {w} in {body}")),
            }
        }
    })
    .await;
    if let Err(last) = seen {
        child.kill();
        panic!(
            "the sources' failures never showed: {last}\nlog:\n{}",
            log.join().unwrap_or_default()
        );
    }
    let mut all = surfaces(&http, &base).await;
    // Reloads to URLs that do not parse (and a YAML error quoting the
    // line) fail and keep the last good file; their reasons name no password.
    for (i, bad) in malformed().into_iter().enumerate() {
        let text = if i == 0 {
            format!(
                "sources:\n  - name: m_src\n    url: [{bad}]\n    signals:\n      m: {{metric: m}}\n"
            )
        } else {
            scrape_config(&bad, &bad)
        };
        config.update(&text).unwrap();
        all.push((
            format!("POST /-/reload ({bad})"),
            reload(&http, &base).await,
        ));
    }
    all.extend(surfaces(&http, &base).await);
    child.kill();
    let log = log.join().unwrap_or_default();
    for (what, body) in &all {
        assert_clean(what, body);
    }
    assert_clean("the log", &log);
    // The page's signal titles (where the password once was) name the
    // scrape source's URL, redacted.
    let page = &all[0].1;
    let title = format!("title=\"m from http://&lt;redacted&gt;@{host}/ok (single)\"");
    assert!(page.contains(&title), "no {title} on the page: {page}");
    let reported = all.iter().any(|(_, b)| b.contains("invalid port number"));
    assert!(reported, "no reload failure reported: {all:#?}");
    let serving = format!("endpoint=http://<redacted>@127.0.0.1:{closed}");
    assert!(log.contains(&serving), "no {serving} logged: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_flags_and_config_is_on_no_surface_and_in_no_log_line() {
    serve_with_passwords(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_variables_is_on_no_surface_and_in_no_log_line() {
    serve_with_passwords(true).await;
}

/// The binary, with none of the URL variables of the environment the test
/// runs in.
fn bin() -> Command {
    let mut c = Command::new(BIN);
    for (_, env) in URL_FLAGS {
        c.env_remove(env);
    }
    c.env_remove("ERE_PROMETHEUS_URL").env_remove("ERE_CONFIG");
    c
}

/// Run `cmd` to its end (at most 30 s: every case here is refused at start
/// or fails at once); its exit code and whole output.
async fn run(cmd: Command, what: String) -> (String, Option<i32>, String) {
    let (mut child, log) = spawn_logged(cmd);
    let status = wait::poll(Duration::from_secs(30), Duration::from_millis(20), || {
        let exited = child.try_wait().ok_or(());
        async move { exited }
    })
    .await;
    child.kill();
    let out = log.join().unwrap_or_default();
    match status {
        Ok(s) => (what, s.code(), out),
        Err(()) => panic!("{what}: still running after 30 s:\n{out}"),
    }
}

/// Start-up with a URL that does not parse, in every flag, variable and
/// `--config`; `check`, `signals` and `replay` with the same files and
/// URLs; `--help` with the variables set. Each is refused or fails with a
/// reason that names no password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_a_url_that_does_not_parse_is_in_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.policy");
    std::fs::write(&policy, "check leader: leader\n").unwrap();
    let closed = free_tcp_port();
    let mut cases: Vec<(String, Command)> = Vec::new();
    let serve = || {
        let mut c = bin();
        c.args(["serve", "--web.listen-address", "127.0.0.1:0"]);
        c
    };
    for (i, bad) in malformed().iter().enumerate() {
        for (flag, env) in URL_FLAGS {
            let mut c = serve();
            c.args([flag, bad.as_str()]);
            cases.push((format!("{flag} {bad}"), c));
            let mut c = serve();
            c.env(env, bad);
            cases.push((format!("{env}={bad}"), c));
        }
        let config = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(&config, scrape_config(bad, bad)).unwrap();
        let mut c = serve();
        c.arg("--config").arg(&config);
        cases.push((format!("--config with {bad}"), c));
        let mut c = bin();
        c.arg("check").arg("--config").arg(&config).arg(&policy);
        cases.push((format!("check --config with {bad}"), c));
        let mut c = bin();
        c.arg("signals").arg("--config").arg(&config);
        cases.push((format!("signals --config with {bad}"), c));
        let mut c = bin();
        c.args(["replay", "--prometheus.url", bad.as_str(), "--start", "-1h"])
            .arg("--policy")
            .arg(&policy);
        cases.push((format!("replay --prometheus.url {bad}"), c));
        let mut c = bin();
        c.args(["replay", "--start", "-1h", "--policy"])
            .arg(&policy)
            .env("ERE_PROMETHEUS_URL", bad);
        cases.push((format!("replay ERE_PROMETHEUS_URL={bad}"), c));
    }
    // Well-formed URLs: `signals` lists the scrape source's URL, `replay`
    // fails to reach its Prometheus, `--help` has the variables set.
    let good = format!("http://user:{PW}@127.0.0.1:{closed}/ok");
    let config = dir.path().join("good.yaml");
    std::fs::write(&config, scrape_config(&good, &good)).unwrap();
    let mut c = bin();
    c.arg("signals").arg("--config").arg(&config);
    cases.push(("signals --config".into(), c));
    let mut c = bin();
    c.arg("check").arg("--config").arg(&config).arg(&policy);
    cases.push(("check --config".into(), c));
    let mut c = bin();
    c.args(["replay", "--prometheus.url", good.as_str(), "--policy"])
        .arg(&policy)
        .args(["--start", "-1h"]);
    cases.push(("replay --prometheus.url (closed port)".into(), c));
    for sub in ["serve", "replay"] {
        let mut c = bin();
        c.args([sub, "--help"]);
        for (_, env) in URL_FLAGS {
            c.env(env, &good);
        }
        c.env("ERE_PROMETHEUS_URL", &good);
        cases.push((format!("{sub} --help with the variables set"), c));
    }
    let started = cases.len();
    let mut set = tokio::task::JoinSet::new();
    for (what, cmd) in cases {
        set.spawn(run(cmd, what));
    }
    let results = set.join_all().await;
    assert_eq!(results.len(), started);
    for (what, code, out) in &results {
        assert_clean(what, out);
        // Every case but the well-formed `signals`, `check` and `--help` fails.
        let well_formed = what.contains("--help") || what.ends_with(" --config");
        if !well_formed {
            assert_ne!(code, &Some(0), "{what} succeeded:\n{out}");
        }
    }
    // The reasons are there, with the URL redacted.
    let serve_bad_port = results
        .iter()
        .find(|(w, _, _)| w.starts_with("--etcd.endpoint http://user:"))
        .unwrap();
    assert_eq!(serve_bad_port.1, Some(2), "{}", serve_bad_port.2);
    assert!(
        serve_bad_port.2.contains("<redacted>@127.0.0.1:bad/ok")
            && serve_bad_port.2.contains("invalid port number"),
        "{}",
        serve_bad_port.2
    );
}

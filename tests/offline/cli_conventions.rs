//! The real binary follows the conventions of Prometheus exporters:
//! `--version` and `etcd_readiness_build_info` name the same version,
//! revision, branch and rustc; logs are logfmt by default (JSON on request);
//! a misspelt `--log.level` exits 2 naming the valid levels; completions and
//! the man page are generated from the same flags `serve --help` lists.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::wait::poll_blocking;

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run the binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Kills the exporter when dropped, so a failing assertion leaves nothing.
pub(crate) struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` on a free loopback port against an etcd that is not there (what
/// is checked needs no etcd); returns the process, the address it logged and
/// a channel with every further stderr line.
pub(crate) fn serve(extra: &[&str]) -> (Kill, String, Vec<String>, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--etcd.endpoint",
            "http://127.0.0.1:9",
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the exporter");
    let stderr = child.stderr.take().unwrap();
    let child = Kill(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    // Each probe waits up to 200 ms for a line itself: no sleep between.
    let serving = poll_blocking(Duration::from_secs(30), Duration::ZERO, || {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let addr = logfmt(&line)
                    .ok()
                    .filter(|kv| kv.get("msg").map(String::as_str) == Some("serving"))
                    .and_then(|kv| kv.get("addr").cloned())
                    .or_else(|| {
                        let v: serde_json::Value = serde_json::from_str(&line).ok()?;
                        (v["msg"] == "serving").then(|| v["addr"].as_str().unwrap().to_string())
                    });
                seen.push(line);
                addr.ok_or(())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(()),
            // The exporter exited: no line will come.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the exporter logged no `serving` line; its log:\n{seen:#?}")
            }
        }
    });
    match serving {
        Ok(addr) => (child, addr, seen, rx),
        Err(()) => {
            panic!("the exporter logged no `serving` line within 30 s; its log:\n{seen:#?}")
        }
    }
}

/// A logfmt line as key -> value (go-logfmt's quoting), or why it is not one.
fn logfmt(line: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ' ')).collect();
        if key.is_empty() || chars.next() != Some('=') {
            return Err(format!("no key=value at {key:?} in {line:?}"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some('t') => value.push('\t'),
                        Some('r') => value.push('\r'),
                        Some(c) => value.push(c),
                        None => return Err(format!("dangling escape in {line:?}")),
                    },
                    Some(c) => value.push(c),
                    None => return Err(format!("unterminated quote in {line:?}")),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ' ')).collect();
            if value.contains('"') || value.contains('=') {
                return Err(format!("unquoted value {value:?} in {line:?}"));
            }
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("duplicate key {key:?} in {line:?}"));
        }
    }
}

/// GET `path` through the exporter's one HTTP client, within 10 s, from
/// synchronous code (a runtime of its own); the body of a 200.
pub(crate) fn get(addr: &str, path: &str) -> String {
    let addr: std::net::SocketAddr = addr.parse().expect("the exporter's address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let answer = runtime
        .block_on(http_client::get_at(
            addr,
            path,
            None,
            Duration::from_secs(10),
        ))
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    answer.body
}

/// `--version`'s fields: version, branch, revision, build date, rustc, platform.
fn version_fields() -> BTreeMap<&'static str, String> {
    let out = run(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let v = text(&out.stdout);
    let mut lines = v.lines();
    let first = lines.next().unwrap_or_default();
    // etcd-readiness-exporter 0.1.0 (branch: main, revision: 0123456789ab)
    let rest = first
        .strip_prefix("etcd-readiness-exporter ")
        .unwrap_or_else(|| panic!("first line {first:?}"));
    let (version, rest) = rest.split_once(" (branch: ").expect(first);
    let (branch, rest) = rest.split_once(", revision: ").expect(first);
    let revision = rest.strip_suffix(')').expect(first);
    let mut f = BTreeMap::from([
        ("version", version.to_string()),
        ("branch", branch.to_string()),
        ("revision", revision.to_string()),
    ]);
    for line in lines {
        let (k, val) = line.trim().split_once(':').expect(line);
        let key = match k {
            "build date" => "build_date",
            "rustc version" => "rustc",
            "platform" => "platform",
            other => panic!("unexpected --version line {other:?}"),
        };
        f.insert(key, val.trim().to_string());
    }
    assert_eq!(f.len(), 6, "{v}");
    f
}

#[test]
fn version_and_build_info_name_the_same_build() {
    let v = version_fields();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let rev = v["revision"]
        .strip_suffix("-dirty")
        .unwrap_or(&v["revision"]);
    assert!(
        rev == "unknown" || (rev.len() == 12 && rev.bytes().all(|b| b.is_ascii_hexdigit())),
        "revision {:?}",
        v["revision"]
    );
    v["build_date"]
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("build date {:?}: {e}", v["build_date"]));

    let (_child, addr, _, _) = serve(&[]);
    let scrape = get(&addr, "/metrics");
    let line = scrape
        .lines()
        .find(|l| l.starts_with("etcd_readiness_build_info{"))
        .unwrap_or_else(|| panic!("no build_info in\n{scrape}"));
    let labels: BTreeMap<&str, &str> = line
        ["etcd_readiness_build_info{".len()..line.rfind('}').unwrap()]
        .split("\",")
        .map(|kv| {
            let (k, v) = kv.split_once("=\"").expect(line);
            (k, v.trim_end_matches('"'))
        })
        .collect();
    assert!(line.ends_with("} 1"), "{line}");
    for (label, field) in [
        ("version", "version"),
        ("revision", "revision"),
        ("branch", "branch"),
        ("rustc", "rustc"),
        ("target", "platform"),
    ] {
        assert_eq!(
            labels.get(label).copied(),
            Some(v[field].as_str()),
            "build_info{{{label}}} against --version's {field}: {line}"
        );
    }
}

#[test]
fn logs_are_logfmt_by_default_and_json_on_request() {
    let (_child, _, seen, _) = serve(&[]);
    for line in &seen {
        let kv = logfmt(line).unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<&str> = kv.keys().map(String::as_str).collect();
        for k in ["time", "level", "source", "msg"] {
            assert!(keys.contains(&k), "{k} missing from {line}");
        }
        assert!(line.starts_with("time="), "{line}");
        kv["time"].parse::<jiff::Timestamp>().expect(line);
    }
    // `text`, the format's old name, still means logfmt.
    let (_child, _, seen, _) = serve(&["--log.format=text"]);
    assert!(
        seen.iter()
            .all(|l| logfmt(l).is_ok() && l.starts_with("time=")),
        "{seen:#?}"
    );

    let (_child, _, seen, _) = serve(&["--log.format=json", "--log.level=debug"]);
    let mut levels = Vec::new();
    for line in &seen {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for k in ["time", "level", "source", "msg"] {
            assert!(v[k].is_string(), "{k} missing from {line}");
        }
        levels.push(v["level"].as_str().unwrap().to_string());
    }
    // At debug, the start-up's RLIMIT_NOFILE line is there.
    assert!(
        levels.iter().any(|l| l == "DEBUG"),
        "no DEBUG line at --log.level=debug: {seen:#?}"
    );
}

#[test]
fn a_misspelt_log_level_exits_2_naming_the_valid_levels() {
    for bad in [
        "warning",
        "inf",
        "trace",
        "etcd_readiness_exporter=debug",
        "",
    ] {
        for how in ["flag", "env"] {
            let mut cmd = Command::new(BIN);
            cmd.arg("serve").env_remove("ERE_LOG_LEVEL");
            if how == "flag" {
                cmd.arg(format!("--log.level={bad}"));
            } else {
                cmd.env("ERE_LOG_LEVEL", bad);
            }
            if how == "env" && bad.is_empty() {
                continue; // an empty variable is an unset one for clap
            }
            let out = cmd.output().unwrap();
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{how} {bad:?}: {err}");
            assert!(
                err.contains("[possible values: debug, info, warn, error]"),
                "{how} {bad:?}: {err}"
            );
        }
    }
    // Upper case is the same level, not a misspelling: at WARN the exporter
    // serves and logs no INFO line (not even "serving").
    let addr = format!("127.0.0.1:{}", free_tcp_port());
    let child = Command::new(BIN)
        .args([
            "serve",
            "--etcd.endpoint",
            "http://127.0.0.1:9",
            "--log.level=WARN",
        ])
        .args(["--web.listen-address", &addr])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Kill(child);
    let listening = poll_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
        if TcpStream::connect(&addr).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            let mut err = String::new();
            child
                .0
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("--log.level=WARN: exited {status}: {err}");
        }
        Err(())
    });
    if listening.is_err() {
        panic!("--log.level=WARN: not listening on {addr} within 30 s");
    }
    let _ = get(&addr, "/livez");
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("level=INFO"), "{err}");
}

/// Every `--flag` of `serve --help`.
fn serve_flags() -> Vec<String> {
    let help = text(&run(&["serve", "--help"]).stdout);
    let mut flags: Vec<String> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            l.starts_with("--")
                .then(|| l.split([' ', '=', '<']).next().unwrap().to_string())
        })
        .filter(|f| f != "--help")
        .collect();
    flags.sort();
    flags.dedup();
    assert!(flags.len() > 20, "{help}");
    flags
}

#[test]
fn completions_parse_and_complete_every_serve_flag() {
    let flags = serve_flags();
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = text(&out.stdout);
        for f in &flags {
            let bare = f.trim_start_matches('-');
            assert!(script.contains(bare), "{shell} completion lacks {f}");
        }
    }
    let script = run(&["completion", "bash"]).stdout;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("completion.bash");
    std::fs::write(&path, &script).unwrap();
    let check = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash");
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));
    // Sourced, it registers a completion function for the program.
    let probe = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". {} && complete -p etcd-readiness-exporter",
            path.display()
        ))
        .output()
        .unwrap();
    assert!(
        text(&probe.stdout).contains("etcd-readiness-exporter"),
        "{}{}",
        text(&probe.stdout),
        text(&probe.stderr)
    );
    // Hidden: not in --help.
    let help = text(&run(&["--help"]).stdout);
    assert!(
        !help.contains("completion") && !help.contains(" man "),
        "{help}"
    );
}

#[test]
fn man_page_renders_with_name_synopsis_and_every_serve_flag() {
    let out = run(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let roff = out.stdout;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd-readiness-exporter.1");
    std::fs::write(&path, &roff).unwrap();
    // Rendered by man-db when it is there (plain text, no pager), else read
    // from the roff source with its `\-` escapes undone.
    // No hyphenation or justification: a flag must not be split across lines.
    let rendered = Command::new("man")
        .args(["--nh", "--nj", "-l"])
        .arg(&path)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "200")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            // Strip overstrike bold/underline (c\bc, _\bc).
            let t = text(&o.stdout);
            let mut s = String::new();
            for c in t.chars() {
                if c == '\u{8}' {
                    s.pop();
                } else {
                    s.push(c);
                }
            }
            s
        });
    let page = match &rendered {
        Some(r) => r.clone(),
        None => {
            eprintln!("man -l unavailable: checking the roff source");
            text(&roff).replace("\\-", "-")
        }
    };
    for section in ["NAME", "SYNOPSIS", "OPTIONS"] {
        assert!(
            page.lines()
                .any(|l| l.trim() == section || l == format!(".SH {section}")),
            "no {section} section:\n{page}"
        );
    }
    assert!(
        page.contains("etcd-readiness-exporter - Decides when"),
        "{page}"
    );
    for f in serve_flags() {
        assert!(page.contains(&f), "man page lacks {f}");
    }
}

/// `--web.telemetry-path` must mean one thing: a path that curl, browsers
/// or Prometheus would normalise before sending (dot and empty segments,
/// percent-encoded unreserved characters, lower-case hex, `\`) would serve
/// the metrics at a path no client requests. Each exits 2 at start, from
/// the flag and from its variable, naming the flag and the rule.
#[test]
fn a_telemetry_path_a_client_would_normalise_exits_2_naming_the_rule() {
    let cases = [
        ("/../metrics", "dot segment"),
        ("/a/./b", "dot segment"),
        ("/metrics/..", "dot segment"),
        ("//", "empty segment"),
        ("//metrics", "empty segment"),
        ("/a//b", "empty segment"),
        ("/%2e%2e", "lower case"),
        ("/%2E%2E/metrics", "percent-encoded letter, digit"),
        ("/%6Detrics", "percent-encoded letter, digit"),
        ("/a%", "not followed by two hex digits"),
        ("/a%zz", "not followed by two hex digits"),
        ("/a\\b", "turned into / by browsers"),
    ];
    for (path, rule) in cases {
        for how in ["flag", "env"] {
            let mut cmd = Command::new(BIN);
            cmd.args(["serve", "--etcd.endpoint", "http://127.0.0.1:9"])
                .args(["--web.listen-address", "127.0.0.1:0"])
                .env_remove("ERE_WEB_TELEMETRY_PATH");
            if how == "flag" {
                cmd.arg(format!("--web.telemetry-path={path}"));
            } else {
                cmd.env("ERE_WEB_TELEMETRY_PATH", path);
            }
            let out = cmd.output().unwrap();
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{how} {path:?}: {err}");
            assert!(
                err.contains("--web.telemetry-path") && err.contains(rule),
                "{how} {path:?}: expected the rule {rule:?} in: {err}"
            );
        }
    }
}

/// `lint` at its limits says which limit, in words (it printed Rust debug
/// text, `Nodes { nodes: 250001 }`), and exits 2.
#[test]
fn lint_inputs_over_its_limits_are_refused_in_words_naming_the_limit() {
    let lint_stdin = |input: Vec<u8>| {
        let mut child = Command::new(BIN)
            .arg("lint")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the binary");
        let mut stdin = child.stdin.take().unwrap();
        // The binary stops reading at its limit: a broken pipe is expected.
        let writer = std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, &input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        (out.status.code(), text(&out.stderr))
    };
    let (code, err) = lint_stdin(vec![b'#'; (16 << 20) + 1]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("lint's limit of 16 MiB"), "{err}");
    let (code, err) = lint_stdin("kind: Pod\n---\n".repeat(1_025).into_bytes());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("more than 1,024 YAML documents"), "{err}");
    let (code, err) =
        lint_stdin(format!("kind: Pod\nx: [{}]\n", "1,".repeat(250_001)).into_bytes());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("more than 250,000 YAML nodes") && !err.contains("Nodes {"),
        "{err}"
    );
}

/// An image without a CA bundle (SSL_CERT_FILE and SSL_CERT_DIR naming
/// nothing): `serve` with its plain-HTTP sources still starts (it refused
/// to, "No CA certificates were loaded from the system", before any https
/// source was even configured).
#[test]
fn regression_serve_starts_without_a_system_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    // Set on the child only.
    let mut cmd = Command::new(BIN);
    cmd.env("SSL_CERT_FILE", &empty)
        .env("SSL_CERT_DIR", dir.path().join("none"))
        .args(["serve", "--etcd.endpoint", "http://127.0.0.1:9"])
        .args(["--etcd.metrics-url", "http://127.0.0.1:9/metrics"])
        .args(["--web.listen-address", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = Kill(cmd.spawn().expect("start the exporter"));
    let stderr = child.0.stderr.take().unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .take(50)
    {
        let serving = line.contains("msg=serving");
        seen.push(line);
        if serving {
            return;
        }
    }
    panic!("no `serving` line; the exporter's log:\n{seen:#?}");
}

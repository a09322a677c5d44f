//! The README's quorum-lost sample is what a survivor's exporter prints: a
//! real 3-member cluster (the demo's), the exporter on member 0 with the
//! flags' defaults (the demo's), two members killed, and `/readyz` compared
//! with the README's block line by line: the deadlines and the policy's
//! constants as they are, the numbers that depend on the moment (ages,
//! times pending) masked, and a deadline stretched by the contention
//! credit compared as its base (the credit depends on the machine's load).

use std::path::Path;
use std::time::Duration;

use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::poll;

/// The lines of the README's sample under `$ {command}`, up to the next
/// `$ ` or the end of its block.
fn readme_sample(command: &str) -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(readme).expect("README.md");
    let mut lines = text.lines().skip_while(|l| *l != format!("$ {command}"));
    assert!(lines.next().is_some(), "README has no `$ {command}` sample");
    lines
        .take_while(|l| !l.starts_with("$ ") && !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

/// `line` with every number that depends on the moment (an age, a time
/// pending, a value) as `N`; a deadline (`after 1s`) and a policy's
/// constant (`< 1s`) are kept. A deadline stretched by the contention
/// credit, `after 2s (1s plus 1s while the node's CPU was contended)`, is
/// compared as its base, `after 1s`.
fn masked(line: &str) -> String {
    const CONTENDED: &str = " while the node's CPU was contended)";
    let line = match line.find(CONTENDED) {
        Some(b) => match (line[..b].rfind("after "), line[..b].rfind(" (")) {
            (Some(after), Some(open)) if after < open => {
                let base = line[open + 2..b].split(" plus ").next().unwrap_or("");
                format!(
                    "{}after {base}{}",
                    &line[..after],
                    &line[b + CONTENDED.len()..]
                )
            }
            _ => line.to_string(),
        },
        None => line.to_string(),
    };
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_ascii_digit() {
            out.push(c);
            continue;
        }
        let keep = out.ends_with("after ") || out.ends_with("< ");
        let mut token = c.to_string();
        while let Some(d) = chars.next_if(|d| d.is_ascii_alphanumeric() || *d == '.') {
            token.push(d);
        }
        out.push_str(if keep { &token } else { "N" });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_quorum_lost_sample_is_what_the_survivor_prints() {
    let want: Vec<String> = readme_sample("curl -s localhost:9379/readyz")
        .iter()
        .map(|l| masked(l))
        .collect();
    let mut cluster = EtcdCluster::builder(3).start();
    let e = Exporter::start(&cluster.endpoint(0), |a| {
        // The defaults, as the demo runs them (the testkit's are faster).
        a.sample_interval = Duration::from_secs(1);
        a.sample_timeout = Duration::from_millis(500);
    })
    .await;
    let r = e.wait_for("/readyz", 200, Duration::from_secs(30)).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    cluster.kill(1);
    cluster.kill(2);
    let want = &want;
    let e = &e;
    let seen = poll(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async move {
            let answer = http_client::get_at(e.addr(), "/readyz", None, Duration::from_secs(5))
                .await
                .map_err(|err| err.to_string())?;
            let (status, body) = (answer.status.as_u16(), answer.body);
            let got: Vec<String> = body.lines().map(masked).collect();
            if status == 503 && got == *want {
                Ok(())
            } else {
                Err(format!("{status}:\n{body}"))
            }
        },
    )
    .await;
    if let Err(last) = seen {
        panic!(
            "the survivor never printed the README's sample (numbers masked):\n{}\n--- last answer: {last}\n{}",
            want.join("\n"),
            cluster.log(0)
        );
    }
}

//! No client can starve, wedge or outlast the HTTP server: real TCP
//! connections from this process to a real exporter (the binary as a child
//! process, or the serve pipeline in-process) sampling a real etcd. Idle
//! floods under a lowered `RLIMIT_NOFILE`, slowloris heads, SIGTERM with a
//! half-sent request, h2c stream floods, and 60 KB of echoed input. Every wait
//! has a deadline; no assertion is on speed.

use std::process::Command;
use std::time::Duration;

use etcd_readiness_testkit::wait::poll;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{ChildExporter, Exporter, expect_metric};

const BIN: &str = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
const READY: Duration = Duration::from_secs(30);
/// A bound on waiting for an answer, not a performance figure.
const ANSWER: Duration = Duration::from_secs(5);

/// Wait until the peer closes `s` (EOF or reset), for at most `deadline`.
async fn closed_within(s: &mut TcpStream, deadline: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let end = tokio::time::Instant::now() + deadline;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A 408 or the like before the close is fine.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_while_1100_idle_connections_are_held_under_nofile_1024() {
    // This process holds the 1,100 client ends.
    etcd_readiness_exporter::http::server::raise_nofile_limit().unwrap();
    let cluster = EtcdCluster::builder(1).start();
    // Ask for more connections than the fd limit allows and let no timeout
    // close the idle ones: only the cap and eviction protect the probe.
    let mut exporter = ChildExporter::spawn(
        BIN,
        &cluster.endpoint(0),
        Some(1024),
        &[
            "--web.max-connections",
            "5000",
            "--web.read-header-timeout",
            "1h",
            "--web.idle-timeout",
            "1h",
        ],
    );
    exporter.wait_ready(READY).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", exporter.pid())).unwrap();
    let nofile = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap();
    assert_eq!(nofile, "1024", "{limits}");
    assert_eq!(
        exporter
            .metric_value("etcd_readiness_http_connections_limit")
            .await,
        896.0,
        "1024 minus the 128 fds kept in reserve"
    );

    let mut idle = Vec::new();
    for i in 0..1100 {
        let s = tokio::time::timeout(ANSWER, TcpStream::connect(exporter.addr))
            .await
            .unwrap_or_else(|_| panic!("connect {i} timed out"))
            .unwrap_or_else(|e| panic!("connect {i}: {e}"));
        idle.push(s);
    }
    // While all of them are held, the probe gets in, again and again.
    for _ in 0..10 {
        let r = exporter.get("/readyz").await;
        assert_eq!(
            r.as_ref().map(|r| r.0),
            Some(200),
            "{r:?}\n{}",
            exporter.log()
        );
    }
    assert_eq!(exporter.get("/livez").await.map(|r| r.0), Some(200));
    assert!(exporter.alive(), "{}", exporter.log());

    let fds = exporter.open_fds();
    assert!(fds > 0 && fds <= 896 + 100, "{fds} fds open");
    let (status, body) = exporter.get("/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(expect_metric(&body, "etcd_readiness_http_connections") <= 896.0);
    assert!(
        expect_metric(&body, "etcd_readiness_http_connections_evicted_total") >= 1100.0 - 896.0
    );
    assert_eq!(
        expect_metric(&body, "etcd_readiness_http_accept_errors_total"),
        0.0,
        "accept never ran out of descriptors"
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_are_closed_after_the_header_read_timeout_and_keepalive_is_not() {
    let cluster = EtcdCluster::builder(1).start();
    let exporter = Exporter::start(&cluster.endpoint(0), |a| {
        a.web_read_header_timeout = Duration::from_secs(1);
        a.web_idle_timeout = Duration::from_secs(60);
    })
    .await;
    assert_eq!(exporter.wait_for("/readyz", 200, READY).await.status, 200);
    let addr = exporter.addr();

    // Half a head sent at once, and half a head dribbled a byte at a time.
    let mut silent = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        silent.push(s);
    }
    let mut dribblers = Vec::new();
    for _ in 0..50 {
        dribblers.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            for b in b"GET /readyz HTTP/1.1\r\nX-Slow: "
                .iter()
                .cycle()
                .take(10_000)
            {
                if s.write_all(&[*b]).await.is_err() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                // A closed peer shows as EOF on read before a write fails.
                let mut buf = [0u8; 64];
                if let Ok(Ok(0) | Err(_)) =
                    tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await
                {
                    return true;
                }
            }
            false
        }));
    }
    for (i, s) in silent.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(15)).await,
            "half-sent head {i} still open after 15s"
        );
    }
    for d in dribblers {
        let closed = tokio::time::timeout(Duration::from_secs(15), d).await;
        assert!(matches!(closed, Ok(Ok(true))), "a dribbler was not closed");
    }
    let m = exporter.get("/metrics").await.body;
    assert!(
        expect_metric(
            &m,
            "etcd_readiness_http_connections_timed_out_total{phase=\"header\"}"
        ) >= 150.0,
        "{m}"
    );

    // A kept-alive connection idle longer than the header timeout is not a
    // slow head: its next request is answered.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(req).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    s.write_all(req).await.unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
}

/// One HTTP/1.1 response with a content-length, within [`ANSWER`].
async fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = tokio::time::Instant::now() + ANSWER;
    loop {
        let n = tokio::time::timeout_at(end, s.read(&mut chunk))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "connection closed before a full response");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")?
                        .parse()
                        .ok()
                })
                .unwrap_or(0);
            if body.len() >= len {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return (status, body.to_string());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_half_sent_request_exits_within_the_shutdown_timeout() {
    let cluster = EtcdCluster::builder(1).start();
    // The header timeout is far away: only the shutdown deadline can end it.
    let mut exporter = ChildExporter::spawn(
        BIN,
        &cluster.endpoint(0),
        None,
        &[
            "--web.read-header-timeout",
            "1h",
            "--web.shutdown-timeout",
            "2s",
        ],
    );
    exporter.wait_ready(READY).await;
    let mut half = TcpStream::connect(exporter.addr).await.unwrap();
    half.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The server holds it (this scrape is the other open connection).
    let held = &exporter;
    let accepted = poll(ANSWER, Duration::from_millis(50), || async move {
        let n = held.metric_value("etcd_readiness_http_connections").await;
        if n >= 2.0 { Ok(()) } else { Err(n) }
    })
    .await;
    if let Err(n) = accepted {
        panic!("the half-sent request was not accepted: {n} connections");
    }
    let st = Command::new("kill")
        .args(["-TERM", &exporter.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    // 2s shutdown timeout + 8s slack for a loaded machine.
    let child = &mut exporter;
    let exited = poll(Duration::from_secs(10), Duration::from_millis(50), || {
        let exited = child.try_wait().ok_or(());
        async move { exited }
    })
    .await;
    let Ok(status) = exited else {
        panic!("still running 10s after SIGTERM:\n{}", exporter.log());
    };
    assert_eq!(status.code(), Some(0), "{}", exporter.log());
    assert!(closed_within(&mut half, ANSWER).await);
    let log = exporter.log();
    assert!(log.contains("shutdown deadline"), "{log}");
    // Written to a file, not a terminal: no colour codes.
    assert!(!log.contains('\x1b'), "{log:?}");
}

/// One HTTP/2 frame: (type, flags, stream, payload).
async fn read_frame(s: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    tokio::time::timeout(ANSWER, s.read_exact(&mut head))
        .await
        .expect("a frame in time")
        .expect("frame header");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    tokio::time::timeout(ANSWER, s.read_exact(&mut payload))
        .await
        .expect("a frame in time")
        .expect("frame payload");
    (head[3], head[4], stream, payload)
}

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([ty, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_streams_beyond_the_limit_are_refused_and_probes_stay_answered_under_a_flood() {
    use etcd_readiness_exporter::http::server::HTTP2_MAX_CONCURRENT_STREAMS;
    let cluster = EtcdCluster::builder(1).start();
    // A child process, so that the flood clients of this process do not
    // share the exporter's runtime.
    let mut exporter = ChildExporter::spawn(BIN, &cluster.endpoint(0), None, &[]);
    exporter.wait_ready(READY).await;
    let addr = exporter.addr;

    // A raw client that ignores the advertised limit: 40 requests at once.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    s.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    let (ty, flags, _, settings) = read_frame(&mut s).await;
    assert_eq!((ty, flags), (0x4, 0), "the server's SETTINGS first");
    let advertised = settings
        .chunks(6)
        .find(|e| e[..2] == [0, 3])
        .map(|e| u32::from_be_bytes([e[2], e[3], e[4], e[5]]));
    assert_eq!(advertised, Some(HTTP2_MAX_CONCURRENT_STREAMS));
    let mut burst = frame(0x4, 0x1, 0, &[]); // SETTINGS ACK
    // :method GET, :scheme http, :path /readyz, :authority x (HPACK, no Huffman).
    let mut block = vec![0x82, 0x86, 0x04, 7];
    block.extend(b"/readyz");
    block.extend([0x01, 1, b'x']);
    for i in 0..40u32 {
        burst.extend(frame(0x1, 0x5, 2 * i + 1, &block));
    }
    s.write_all(&burst).await.unwrap();
    let (mut answered, mut refused) = (0, 0);
    while answered + refused < 40 {
        let (ty, _, stream, payload) = read_frame(&mut s).await;
        match ty {
            0x1 if stream != 0 => answered += 1,
            0x3 if payload == [0, 0, 0, 7] => refused += 1, // RST_STREAM REFUSED_STREAM
            0x7 => panic!("GOAWAY {payload:?}"),
            _ => {}
        }
    }
    assert!(refused >= 1, "answered {answered}, refused {refused}");
    assert!(answered >= 1, "answered {answered}, refused {refused}");

    // A flood over well-behaved h2c connections: 20 x 200 requests, each
    // connection at most 16 at a time; the probe is answered throughout.
    let mut flood = Vec::new();
    for _ in 0..20 {
        flood.push(tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let (send, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tcp),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            // One request first, so that the server's SETTINGS (and its
            // stream limit) are in force before the burst: requests sent
            // before that would be refused, as the raw client's were.
            let first = hyper::Request::get(format!("http://{addr}/readyz"))
                .body(String::new())
                .unwrap();
            let mut first_send = send.clone();
            let mut ok = usize::from(
                first_send
                    .send_request(first)
                    .await
                    .is_ok_and(|r| r.status() == 200),
            );
            let mut reqs = Vec::new();
            for _ in 1..200 {
                let mut send = send.clone();
                reqs.push(tokio::spawn(async move {
                    let req = hyper::Request::get(format!("http://{addr}/readyz"))
                        .body(String::new())
                        .unwrap();
                    match send.send_request(req).await {
                        Ok(r) => r.status().as_u16(),
                        Err(e) => {
                            eprintln!("flood request: {e:?}");
                            0
                        }
                    }
                }));
            }
            for r in reqs {
                if r.await.unwrap() == 200 {
                    ok += 1;
                }
            }
            ok
        }));
    }
    for _ in 0..10 {
        let r = exporter.get("/readyz").await;
        assert_eq!(r.as_ref().map(|r| r.0), Some(200), "{r:?}");
    }
    assert!(exporter.alive());
    let mut ok = 0;
    for f in flood {
        ok += tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("the flood finishes")
            .unwrap();
    }
    assert_eq!(
        ok,
        20 * 200,
        "every flood request answered in turn\n{}",
        exporter.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_kb_of_echoed_input_stays_under_the_body_limit() {
    let cluster = EtcdCluster::builder(1).start();
    let exporter = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(exporter.wait_for("/readyz", 200, READY).await.status, 200);
    let long = "n".repeat(60_000);
    let cases = [
        (format!("/readyz?format=json&exclude={long}"), 200, true),
        (format!("/readyz?verbose&exclude={long}"), 200, false),
        (format!("/readyz/{long}"), 404, false),
        (format!("/readyz/{long}?format=json"), 404, true),
        (
            format!("/readyz?verbose&{}", "exclude=a&".repeat(5_000)),
            200,
            false,
        ),
    ];
    for (path, status, json) in cases {
        let r = exporter.get(&path).await;
        let shown = &path[..40];
        assert_eq!(
            r.status,
            status,
            "{shown}: {}",
            &r.body[..r.body.len().min(300)]
        );
        assert!(
            r.body.len() <= 10_000,
            "{shown}: {} bytes of body",
            r.body.len()
        );
        assert!(
            r.body.contains("bytes cut)") || r.body.contains("more"),
            "{shown}: {}",
            r.body
        );
        if json {
            let _: serde_json::Value = serde_json::from_str(&r.body).expect("valid JSON");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_and_oversized_heads_refused() {
    let cluster = EtcdCluster::builder(1).start();
    let exporter = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    assert_eq!(exporter.wait_for("/readyz", 200, READY).await.status, 200);

    // 300 requests in one write: answered one after the other, in order.
    let mut s = TcpStream::connect(exporter.addr()).await.unwrap();
    let mut burst = Vec::new();
    for i in 0..300 {
        let path = if i % 2 == 0 { "/livez" } else { "/nope" };
        burst.extend(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes());
    }
    s.write_all(&burst).await.unwrap();
    let mut responses = String::new();
    let mut chunk = [0u8; 16 * 1024];
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    while responses.matches("HTTP/1.1 ").count() < 300
        || !responses.ends_with("for the endpoints\n")
    {
        let n = tokio::time::timeout_at(end, s.read(&mut chunk))
            .await
            .expect("300 pipelined responses in time")
            .unwrap();
        assert!(
            n > 0,
            "closed after {} responses",
            responses.matches("HTTP/1.1 ").count()
        );
        responses.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    let codes: Vec<&str> = responses
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|r| &r[..3])
        .collect();
    let expected: Vec<&str> = (0..300)
        .map(|i| if i % 2 == 0 { "200" } else { "404" })
        .collect();
    assert_eq!(codes, expected);

    // A head larger than the 64 KiB read buffer is refused, not buffered.
    let mut s = TcpStream::connect(exporter.addr()).await.unwrap();
    let head = format!(
        "GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(70 * 1024)
    );
    let _ = s.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(ANSWER, s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "{}",
        &answer[..answer.len().min(200)]
    );
}

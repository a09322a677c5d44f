//! `process_open_fds` counts what `/proc/self/fd` lists, and follows the
//! descriptors this process opens and closes; `process_max_fds` is the soft
//! `Max open files` of `/proc/self/limits`; the page size and clock tick the
//! collector scales by are the kernel's (`getconf`). One test in its own
//! binary: no other test thread opens files while it counts.

use etcd_readiness_exporter::metrics::{Format, encode, process};
use prometheus_client::registry::Registry;

fn value(scrape: &str, name: &str) -> f64 {
    let line = scrape
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{scrape}"));
    line.rsplit(' ').next().unwrap().parse().expect(line)
}

/// What the kernel lists in /proc/self/fd now, counted as the collector
/// does (the directory's own descriptor included while it is read).
fn listed() -> f64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as f64
}

#[test]
fn open_fds_match_proc_self_fd_and_follow_opened_files() {
    let mut registry = Registry::default();
    process::register(&mut registry, std::time::SystemTime::now());

    let before = listed();
    let scrape = encode(&registry, Format::Text004);
    assert_eq!(value(&scrape, "process_open_fds"), before, "{scrape}");

    let dir = tempfile::tempdir().unwrap();
    let files: Vec<std::fs::File> = (0..10)
        .map(|i| std::fs::File::create(dir.path().join(i.to_string())).unwrap())
        .collect();
    let scrape = encode(&registry, Format::Text004);
    assert_eq!(
        value(&scrape, "process_open_fds"),
        before + 10.0,
        "{scrape}"
    );
    assert_eq!(value(&scrape, "process_open_fds"), listed());
    drop(files);
    let scrape = encode(&registry, Format::Text004);
    assert_eq!(value(&scrape, "process_open_fds"), before, "{scrape}");

    // process_max_fds: the soft limit as the kernel reports it.
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("{limits}"));
    assert_eq!(
        value(&scrape, "process_max_fds"),
        soft.parse::<f64>().unwrap()
    );

    // Virtual memory: /proc/self/statm's size (pages) times getconf's page
    // size, read just before and after (the allocator may map in between).
    let page: f64 = getconf("PAGESIZE");
    let statm = || -> f64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        s.split_whitespace().next().unwrap().parse::<f64>().unwrap() * page
    };
    let lo = statm();
    let vm = value(
        &encode(&registry, Format::Text004),
        "process_virtual_memory_bytes",
    );
    let hi = statm();
    assert!(lo.min(hi) <= vm && vm <= lo.max(hi), "{lo} <= {vm} <= {hi}");
    // RSS is scaled by the same page size: a whole number of pages.
    let rss = value(&scrape, "process_resident_memory_bytes");
    assert_eq!(
        rss % page,
        0.0,
        "rss {rss} is not a multiple of the {page}-byte page"
    );
    // CPU seconds are ticks / CLK_TCK: a whole number of ticks.
    let hz: f64 = getconf("CLK_TCK");
    let cpu = value(&scrape, "process_cpu_seconds_total");
    assert!(
        ((cpu * hz) - (cpu * hz).round()).abs() < 1e-6,
        "cpu {cpu} s is not whole ticks of 1/{hz} s"
    );
}

fn getconf(name: &str) -> f64 {
    let out = std::process::Command::new("getconf")
        .arg(name)
        .output()
        .expect("getconf");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

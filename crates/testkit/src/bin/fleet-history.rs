//! Writes a synthetic fleet's history (`etcd_readiness_testkit::fleet`) to
//! standard output, for the benchmarks:
//! `fleet-history openmetrics|promtext MEMBERS START STEP STEPS [FIRST LAST]`
//! (FIRST and LAST: only samples FIRST..=LAST).

use std::io::{BufWriter, Write};

use etcd_readiness_testkit::fleet::{Fleet, Format};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fleet-history openmetrics|promtext MEMBERS START STEP STEPS [FIRST LAST]";
    let (format, members, start, step, steps, range) = match args.as_slice() {
        [f, m, a, s, n] => (f, m, a, s, n, None),
        [f, m, a, s, n, x, y] => (f, m, a, s, n, Some((x, y))),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let format = match format.as_str() {
        "openmetrics" => Format::OpenMetrics,
        "promtext" => Format::PromText,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let num = |s: &str| -> i64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("{usage}: `{s}` is not a number");
            std::process::exit(2);
        })
    };
    let fleet = Fleet {
        members: num(members).max(0) as usize,
        start: num(start),
        step: num(step),
        steps: num(steps),
    };
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let (first, last) = range.map_or((0, fleet.steps), |(x, y)| (num(x), num(y)));
    let written = fleet.write_samples(format, first, last, &mut out);
    if let Err(e) = written.and_then(|()| out.flush()) {
        eprintln!("fleet-history: {e}");
        std::process::exit(1);
    }
}

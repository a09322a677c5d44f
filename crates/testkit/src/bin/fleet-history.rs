//! Writes a synthetic fleet's history (`etcd_readiness_testkit::fleet`) to
//! standard output, for the benchmarks:
//! `fleet-history openmetrics|promtext MEMBERS START STEP STEPS`.

use std::io::{BufWriter, Write};

use etcd_readiness_testkit::fleet::{Fleet, Format};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fleet-history openmetrics|promtext MEMBERS START STEP STEPS";
    let [format, members, start, step, steps] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
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
    if let Err(e) = fleet.write(format, &mut out).and_then(|()| out.flush()) {
        eprintln!("fleet-history: {e}");
        std::process::exit(1);
    }
}

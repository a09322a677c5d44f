//! Fuzz target: `replay`'s reader of a `query_range` answer
//! (`replay::matrix::read`) on arbitrary text, every series kept in a
//! short row. It must return the answer or an error, never panic or hang.
#![no_main]

use etcd_readiness_exporter::replay::matrix;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = matrix::read(
        text,
        |labels| Ok::<_, ()>((labels.len() < 8).then(|| vec![None; 4])),
        |row: &mut Vec<Option<f64>>, t, v, next| {
            *next += 1;
            if let Some(slot) = row.get_mut(t.rem_euclid(4) as usize) {
                *slot = Some(v);
            }
        },
    );
});

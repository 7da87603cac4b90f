//! Merge planning time against the number of parts: the merge decides every
//! file and every S3 part before writing (`merge_plan`), so this is the part
//! of a merge that runs in the merger alone. Parts get sizes from 1 KiB to
//! 12 MiB (a fixed sequence: the same plan every run), dataset and single.
//! Prints one JSON line per part count: {"parts", "files", "ms", "ns_per_part"}.

use bucketscan_core::fleet::merge_plan::{plan_files, plan_single, PartIn};
use bytes::Bytes;
use std::time::Instant;

const ROUNDS: u32 = 20;

fn parts(n: usize) -> Vec<PartIn> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            PartIn {
                key: format!("scans/1/parts/{:08x}/1-start.csv", i),
                size: 1024 + x % (12 << 20),
            }
        })
        .collect()
}

fn main() {
    let lead = Bytes::from_static(b"bucket,key,status\r\n");
    for n in [1_000, 10_000, 20_000] {
        let input = parts(n);
        let started = Instant::now();
        let mut files = 0;
        for _ in 0..ROUNDS {
            files = plan_files(&input, &lead, 1 << 30).len();
            std::hint::black_box(plan_single(&input, &lead, 1 << 30));
        }
        let secs = started.elapsed().as_secs_f64() / f64::from(ROUNDS);
        println!(
            "{{\"parts\": {n}, \"files\": {files}, \"ms\": {:.2}, \"ns_per_part\": {:.0}}}",
            secs * 1e3,
            secs * 1e9 / n as f64
        );
    }
}

//! The quantised products of SmolLM2-135M's shapes, one thread at each instruction-set level
//! the machine has, then the best level on a [`Team`] of two threads: µs per product, weight GB/s streamed (what bounds a one-row decoding step)
//! and GMAC/s (what bounds a prefill or a batch of rows). Asserts nothing.
//!
//! `cargo bench -p rlx-kernels --bench products` (options after `--`: `--rows 1,16,64`).

#![allow(clippy::print_stdout)]

use std::time::Instant;

use rlx_kernels::{Acts, GgmlType, QMatrix, Team, isa};

fn pseudo(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// Q4_1 blocks of `w` `[n, k]` as GGUF stores them (d, m as f16, 16 bytes of nibbles).
fn q4_1(w: &[f32], n: usize, k: usize) -> QMatrix {
    let mut bytes = Vec::with_capacity(n * k / 32 * 20);
    for b in w.chunks_exact(32) {
        let (lo, hi) = b.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
        let d = (hi - lo) / 15.0;
        let (dh, mh) = (half(d), half(lo));
        bytes.extend_from_slice(&dh.to_le_bytes());
        bytes.extend_from_slice(&mh.to_le_bytes());
        let q = |v: f32| if d == 0.0 { 0 } else { ((v - lo) / d).round().clamp(0.0, 15.0) as u8 };
        for j in 0..16 {
            bytes.push(q(b[j]) | (q(b[16 + j]) << 4));
        }
    }
    QMatrix::from_ggml(GgmlType::Q4_1, &bytes, n, k).expect("q4_1")
}

/// f32 to f16 bits, truncating (values here are small and normal).
fn half(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3FF) as u16
}

fn main() {
    let mut rows = vec![1, 16, 64];
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rows" => rows = it.next().expect("--rows 1,16").split(',').map(|x| x.parse().expect("a number")).collect(),
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    // (name, n, k, 4-bit): SmolLM2's projections and its Q8_0 LM head.
    let shapes = [("q/o 576x576", 576, 576, true), ("gate/up 1536x576", 1536, 576, true), ("down 576x1536", 576, 1536, true), ("head 49152x576", 49152, 576, false), ("q8_0 1536x576", 1536, 576, false), ("q4 49152x576", 49152, 576, true)];
    println!("{:<18} {:>5} {:>8} {:>12} {:>10} {:>10}", "product", "rows", "isa", "µs", "GB/s", "GMAC/s");
    for &(name, n, k, four) in &shapes {
        let w = pseudo(n * k, 1);
        let q = if four { q4_1(&w, n, k) } else { QMatrix::q8_0(&w, n, k).expect("q8_0") };
        for &m in &rows {
            let mut acts = Acts::new();
            acts.quantize(&pseudo(m * k, 2), m, k);
            let mut out = vec![0f32; m * n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
            let best = *isa::Isa::available().last().expect("a level");
            // Each level on one thread, then the best on a team of two.
            let runs = isa::Isa::available().into_iter().map(|l| (l, false)).chain([(best, true)]);
            for (level, split) in runs {
                // About 0.3 s of work per line, after one warm-up product; a team is held for
                // all of them, as a decoding step holds one for all its products.
                let reps = (3e8 / (m * n * k) as f64).ceil().max(3.0) as usize;
                let time = |team: Option<&Team>, out: &mut [f32]| {
                    q.matmul_t_isa(level, &acts, out, team);
                    let t = Instant::now();
                    for _ in 0..reps {
                        q.matmul_t_isa(level, &acts, out, team);
                    }
                    t.elapsed().as_secs_f64() / reps as f64
                };
                let s = if split { pool.install(|| Team::run(|team| time(Some(team), &mut out))) } else { time(None, &mut out) };
                let label = if split { format!("{}x2", level.name()) } else { level.name().to_string() };
                println!("{name:<18} {m:>5} {label:>8} {:>12.1} {:>10.2} {:>10.1}", s * 1e6, q.bytes() as f64 / s / 1e9, (m * n * k) as f64 / s / 1e9);
            }
        }
    }
}

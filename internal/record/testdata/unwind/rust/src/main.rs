// The Rust fixture of TestUnwindCorpus: recursion, iterator chains and a
// sort of a Vec<String>, built with cargo build --release (no frame
// pointers). It prints its own CPU time (/proc/self/schedstat) on stderr
// for bench/unwind.
use std::env;

#[inline(never)]
fn collatz_len(mut n: u64) -> u32 {
    let mut steps = 0;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    steps
}

#[inline(never)]
fn recurse(depth: u32, seed: u64) -> u64 {
    if depth == 0 {
        return (1..200u64).map(|i| collatz_len(seed * 200 + i) as u64).sum();
    }
    // black_box keeps the recursion: LLVM would turn "+ 1" into a loop.
    std::hint::black_box(recurse(depth - 1, seed)) + 1
}

#[inline(never)]
fn sort_words(seed: u64) -> usize {
    let mut words: Vec<String> = (0..2000u64)
        .map(|i| format!("w{:x}", (i * 2654435761 + seed) % 1000003))
        .collect();
    words.sort();
    words.dedup();
    words.len()
}

fn main() {
    let rounds: u64 = env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut total = 0u64;
    for r in 0..rounds {
        total += recurse(10, r);
        total += sort_words(r) as u64;
    }
    println!("{}", total);
    if let Ok(s) = std::fs::read_to_string("/proc/self/schedstat") {
        if let Some(ns) = s.split_whitespace().next() {
            eprintln!("target-cpu-ns {}", ns);
        }
    }
}

//! The corpus's Rust program: ROUNDS (its argument) rounds of sorting, hashing and
//! formatting through the standard library, as a release build.
use std::collections::HashMap;
use std::fmt::Write;

/// Xorshift keeps the program free of crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[inline(never)]
fn sort_round(rng: &mut Rng, n: usize) -> u64 {
    let mut v: Vec<u64> = (0..n).map(|_| rng.next()).collect();
    v.sort_unstable();
    v[n / 2]
}

#[inline(never)]
fn count_words(rng: &mut Rng, n: usize) -> u64 {
    let mut counts: HashMap<String, u32> = HashMap::new();
    for _ in 0..n {
        *counts.entry(format!("w{}", rng.next() % 5000)).or_insert(0) += 1;
    }
    counts.len() as u64
}

#[inline(never)]
fn build(n: usize) -> u64 {
    let mut s = String::new();
    for i in 0..n {
        write!(s, "{},", i % 97).unwrap();
    }
    s.len() as u64
}

fn main() {
    let rounds: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut sum = 0u64;
    for _ in 0..rounds {
        sum = sum.wrapping_add(sort_round(&mut rng, 200_000));
        sum = sum.wrapping_add(count_words(&mut rng, 200_000));
        sum = sum.wrapping_add(build(200_000));
    }
    println!("sum {sum}");
}

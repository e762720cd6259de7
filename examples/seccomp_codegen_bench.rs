//! benches/seccomp_codegen.sh's driver: hutch's seccomp BPF generator
//! against the seccompiler-based compiler it replaced (kept as the test
//! oracle in tests/confine_support/), for every built-in profile and the
//! init filter, measured in one process: compiling the profile, and one
//! install of the program (`seccomp(SECCOMP_SET_MODE_FILTER)` in a forked
//! child: the kernel checks, converts and JITs it and builds its action
//! cache).
//!
//!   seccomp_codegen_bench [RUNS [ROUNDS]]      (default 200 5)
//!
//! RUNS compiles and installs of each program, in ROUNDS rounds; in each
//! round the two compilers alternate, compiles first (warm caches) then
//! installs, so that machine load hits both alike. Prints, per profile,
//! the instruction counts, the median compile and install time of each,
//! and the ratio hutch / seccompiler (overall, and the range of the
//! per-round ratios). The tests keep checking that both programs decide
//! alike and that the kernel accepts them (tests/confine_codegen.rs).

#[path = "../tests/confine_support/mod.rs"]
mod confine_support;

use std::time::Instant;

use confine_support::install::install_ns;
use confine_support::seccomp_reference::compile_with_seccompiler;
use confine_support::seccompiler_format::to_seccompiler;
use hutch::internals::confine::seccomp::{self, BUILTIN, INIT_PROFILE};

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// One measure (compile or install) of hutch's program and seccompiler's.
#[derive(Default)]
struct Pair {
    hutch: Vec<u64>,
    seccompiler: Vec<u64>,
    round_ratios: Vec<f64>,
}

impl Pair {
    fn end_round(&mut self, hutch: Vec<u64>, seccompiler: Vec<u64>) {
        self.round_ratios
            .push(median(&hutch) as f64 / median(&seccompiler) as f64);
        self.hutch.extend(hutch);
        self.seccompiler.extend(seccompiler);
    }

    /// `hutch µs  seccompiler µs  ratio (per-round range)`.
    fn cells(&self) -> String {
        let (h, s) = (median(&self.hutch), median(&self.seccompiler));
        let lo = self.round_ratios.iter().copied().fold(f64::MAX, f64::min);
        let hi = self.round_ratios.iter().copied().fold(f64::MIN, f64::max);
        format!(
            "{:7.1} {:7.1} {:5.2}x ({lo:.2}-{hi:.2})",
            h as f64 / 1000.0,
            s as f64 / 1000.0,
            h as f64 / s as f64
        )
    }
}

fn nanos_of(f: impl FnOnce()) -> u64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as u64
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("usage: seccomp_codegen_bench [RUNS [ROUNDS]]")
        })
        .collect();
    let runs = args.first().copied().unwrap_or(200).max(1);
    let rounds = args.get(1).copied().unwrap_or(5).clamp(1, runs);
    let per_round = runs.div_ceil(rounds);
    println!(
        "{runs} compiles and installs of each program in {rounds} rounds; medians in µs; \
         sc = the seccompiler layout; ratio = hutch / sc (range of the per-round ratios)"
    );
    let half = format!("{:>7} {:>7}  {:<17}", "hutch", "sc", "ratio");
    println!("{:8} {:>13}  {:^34}  {:^34}", "", "", "compile", "install");
    println!("{:8} {:>13}  {half}  {half}", "profile", "insns (sc)");
    for (name, text) in BUILTIN.iter().copied().chain([("init", INIT_PROFILE)]) {
        let oracle = to_seccompiler(text);
        let compile_hutch = || seccomp::compile(name, text.as_bytes()).unwrap().program;
        let compile_seccompiler = || compile_with_seccompiler(oracle.as_bytes()).unwrap();
        let (new, old) = (compile_hutch(), compile_seccompiler());
        let (mut compile, mut install) = (Pair::default(), Pair::default());
        for _ in 0..rounds {
            let (mut h, mut s) = (Vec::new(), Vec::new());
            for _ in 0..per_round {
                h.push(nanos_of(|| drop(compile_hutch())));
                s.push(nanos_of(|| drop(compile_seccompiler())));
            }
            compile.end_round(h, s);
            let (mut h, mut s) = (Vec::new(), Vec::new());
            for _ in 0..per_round {
                h.push(install_ns(&new));
                s.push(install_ns(&old));
            }
            install.end_round(h, s);
        }
        println!(
            "{name:8} {:>13}  {}  {}",
            format!("{} ({})", new.len(), old.len()),
            compile.cells(),
            install.cells()
        );
    }
}

//! hutch's own seccomp BPF generator: the stages of a profile compiled into
//! ONE classic-BPF program whose cost per syscall is logarithmic.
//!
//! Layout (forward order):
//!
//! 1. hutch's prelude: any architecture other than x86_64 (i386 through
//!    `int 0x80`, ...) and any syscall number with the x32 bit kill the
//!    process;
//! 2. a binary search (`JGE`) over the syscall numbers, split into the
//!    ranges where the profile's answer is the same. A range whose answer
//!    does not depend on arguments ends directly in a shared `RET`;
//! 3. for each syscall whose answer depends on arguments, one block that
//!    runs the stages naming it in order: a stage's rules are an OR of ANDs
//!    of argument comparisons; a stage answering `allow` lets the next stage
//!    decide, anything else decides.
//!
//! The semantics are those of the seccompiler-based compiler hutch used
//! before (see `tests/confine_support/seccomp_reference.rs`, the test oracle), plus a stage's
//! `unlisted_action`. A syscall costs the prelude, about log2(ranges)
//! comparisons and, for argument checks, a few instructions; the kernel's
//! action cache skips the program entirely for syscalls always allowed.
//!
//! The program is emitted backwards (from its last instruction), so every
//! jump target is already placed when the jump is written: offsets are
//! exact, a conditional jump too long for its 8-bit offset gets a `JA`
//! trampoline, `RET`s are shared while in reach, and a comparison that
//! reaches a `LD` of the word already in the accumulator jumps past it.

use std::collections::HashMap;

use crate::sys::sock_filter;

use super::profile::{Condition, Op, Rule, SECCOMP_RET_ALLOW, Stage};

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const ALU_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const JA: u16 = 0x05; // BPF_JMP | BPF_JA
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGT: u16 = 0x25;
const JGE: u16 = 0x35;
const JSET: u16 = 0x45;
const RET_K: u16 = 0x06;

// struct seccomp_data offsets.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// The x32 ABI marker bit in x86_64 syscall numbers.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
/// The kernel's BPF_MAXINSNS.
pub const MAX_INSTRUCTIONS: usize = 4096;

/// One stage's test of one syscall's arguments.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Step<'a> {
    rules: &'a [Rule],
    on_match: u32,
    on_mismatch: u32,
}

/// What the stages answer for one syscall number.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Decision<'a> {
    /// Whatever the arguments.
    Fixed(u32),
    /// Argument checks in stage order, then the answer if all allowed.
    Checks(Vec<Step<'a>>, u32),
}

/// Run the stages for syscall `nr` as far as they do not look at arguments.
fn decide(stages: &[Stage], nr: Option<u32>) -> Decision<'_> {
    let mut steps = Vec::new();
    for s in stages {
        let action = match nr.and_then(|n| s.rules.get(&n)) {
            None => s.unlisted_action,
            Some(rules) if rules.is_empty() => s.match_action,
            Some(rules) => {
                steps.push(Step {
                    rules,
                    on_match: s.match_action,
                    on_mismatch: s.mismatch_action,
                });
                continue;
            }
        };
        if action != SECCOMP_RET_ALLOW {
            return finish(steps, action);
        }
    }
    finish(steps, SECCOMP_RET_ALLOW)
}

fn finish(steps: Vec<Step<'_>>, last: u32) -> Decision<'_> {
    if steps.is_empty() {
        Decision::Fixed(last)
    } else {
        Decision::Checks(steps, last)
    }
}

/// A place in the program, as an index from its END (see the module doc).
#[derive(Clone, Copy)]
struct Pos {
    at: usize,
    /// When the code here starts with `LD w`: (w, where it continues), so
    /// that a jump made with `w` in the accumulator can skip the load.
    ld: Option<(u32, usize)>,
}

/// Where a jump goes.
#[derive(Clone, Copy)]
enum Target {
    Pos(Pos),
    /// A `RET` of this value, shared or placed on demand.
    Ret(u32),
}

/// The program under construction, last instruction first.
#[derive(Default)]
struct Rev {
    code: Vec<sock_filter>,
    /// The most recently placed `RET` of each value.
    rets: HashMap<u32, usize>,
}

fn ins(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

impl Rev {
    fn push(&mut self, i: sock_filter) -> usize {
        self.code.push(i);
        self.code.len() - 1
    }

    /// Offset from an instruction placed next to the one at `at`.
    fn dist(&self, at: usize) -> usize {
        self.code.len() - at - 1
    }

    /// The index of `t` for a jump made with `acc` in the accumulator.
    fn resolve(&mut self, t: Target, acc: Option<u32>) -> usize {
        match t {
            Target::Pos(p) => match p.ld {
                Some((w, after)) if acc == Some(w) => after,
                _ => p.at,
            },
            Target::Ret(v) => match self.rets.get(&v) {
                // +2: trampolines placed before the jump lengthen the reach.
                Some(&at) if self.dist(at) + 2 <= 255 => at,
                _ => {
                    let at = self.push(ins(RET_K, v, 0, 0));
                    self.rets.insert(v, at);
                    at
                }
            },
        }
    }

    /// Place `code k` jumping to `t` when true, `f` when false.
    fn jump(&mut self, code: u16, k: u32, t: Target, f: Target, acc: Option<u32>) -> Pos {
        let mut tt = self.resolve(t, acc);
        let mut ff = self.resolve(f, acc);
        loop {
            let (ot, of) = (self.dist(tt), self.dist(ff));
            if ot > 255 {
                tt = self.push(ins(JA, ot as u32, 0, 0));
            } else if of > 255 {
                ff = self.push(ins(JA, of as u32, 0, 0));
            } else {
                let at = self.push(ins(code, k, ot as u8, of as u8));
                return Pos { at, ld: None };
            }
        }
    }

    /// `LD w` in front of the code just placed (`next`).
    fn load(&mut self, w: u32, next: Pos) -> Target {
        let at = self.push(ins(LD_W_ABS, w, 0, 0));
        Target::Pos(Pos {
            at,
            ld: Some((w, next.at)),
        })
    }

    /// `(word w & mask) == val & mask` → t, else f.
    fn masked_word(&mut self, w: u32, mask: u32, val: u32, t: Target, f: Target) -> Target {
        let val = val & mask;
        if mask == 0 {
            return t;
        }
        let test = if val == 0 {
            self.jump(JSET, mask, f, t, Some(w))
        } else if mask.is_power_of_two() {
            self.jump(JSET, mask, t, f, Some(w))
        } else {
            self.jump(JEQ, val, t, f, None);
            let at = self.push(ins(ALU_AND_K, mask, 0, 0));
            Pos { at, ld: None }
        };
        self.load(w, test)
    }

    /// Code testing one condition: to `t` when it holds, else to `f`.
    fn condition(&mut self, c: &Condition, t: Target, f: Target) -> Target {
        let lo_w = ARGS + 8 * u32::from(c.index);
        let hi_w = lo_w + 4;
        let (hi, lo) = ((c.val >> 32) as u32, c.val as u32);
        // (opcode, swap targets) comparing the low word.
        let (code, swap) = match c.op {
            Op::MaskedEq(m) => {
                let low = self.masked_word(lo_w, m as u32, lo, t, f);
                return if c.qword {
                    self.masked_word(hi_w, (m >> 32) as u32, hi, low, f)
                } else {
                    low
                };
            }
            Op::Eq => (JEQ, false),
            Op::Ne => (JEQ, true),
            Op::Ge => (JGE, false),
            Op::Gt => (JGT, false),
            Op::Le => (JGT, true),
            Op::Lt => (JGE, true),
        };
        let (lt, lf) = if swap { (f, t) } else { (t, f) };
        let cmp = self.jump(code, lo, lt, lf, Some(lo_w));
        let low = self.load(lo_w, cmp);
        if !c.qword {
            return low;
        }
        // The high word decides unless it equals the value's.
        let cmp = match c.op {
            Op::Eq => self.jump(JEQ, hi, low, f, Some(hi_w)),
            Op::Ne => self.jump(JEQ, hi, low, t, Some(hi_w)),
            Op::Ge | Op::Gt => {
                let eq = self.jump(JEQ, hi, low, f, Some(hi_w));
                self.jump(JGT, hi, t, Target::Pos(eq), Some(hi_w))
            }
            _ => {
                let eq = self.jump(JEQ, hi, low, t, Some(hi_w));
                self.jump(JGT, hi, f, Target::Pos(eq), Some(hi_w))
            }
        };
        self.load(hi_w, cmp)
    }

    /// Rules (any of which matching, each an AND of conditions) → t, else f.
    fn rules(&mut self, rules: &[Rule], t: Target, f: Target) -> Target {
        let mut next_rule = f;
        for rule in rules.iter().rev() {
            let mut next = t;
            for c in rule.iter().rev() {
                next = self.condition(c, next, next_rule);
            }
            next_rule = next;
        }
        next_rule
    }

    fn decision(&mut self, d: &Decision<'_>) -> Target {
        match d {
            Decision::Fixed(v) => Target::Ret(*v),
            Decision::Checks(steps, last) => {
                let mut next = Target::Ret(*last);
                for s in steps.iter().rev() {
                    let answer = |v: u32| {
                        if v == SECCOMP_RET_ALLOW {
                            next
                        } else {
                            Target::Ret(v)
                        }
                    };
                    let (m, mm) = (answer(s.on_match), answer(s.on_mismatch));
                    next = self.rules(s.rules, m, mm);
                }
                next
            }
        }
    }

    /// Binary search over ranges (start, target), sorted, the first at 0.
    fn search(&mut self, ranges: &[(u32, Target)]) -> Target {
        match ranges {
            [] => Target::Ret(SECCOMP_RET_ALLOW),
            [(_, t)] => *t,
            // A single number inside one answer: one JEQ.
            [(_, a), (n, b), (m, c)] if *m == n.wrapping_add(1) && same(a, c) => {
                Target::Pos(self.jump(JEQ, *n, *b, *a, Some(NR)))
            }
            _ => {
                let mid = ranges.len() / 2;
                let right = self.search(&ranges[mid..]);
                let left = self.search(&ranges[..mid]);
                Target::Pos(self.jump(JGE, ranges[mid].0, right, left, Some(NR)))
            }
        }
    }
}

fn same(a: &Target, b: &Target) -> bool {
    match (a, b) {
        (Target::Ret(x), Target::Ret(y)) => x == y,
        (Target::Pos(x), Target::Pos(y)) => x.at == y.at,
        _ => false,
    }
}

/// The code for decision `d`, shared by every syscall with an equal one.
fn target_of<'a>(
    rev: &mut Rev,
    blocks: &mut HashMap<Decision<'a>, Target>,
    d: Decision<'a>,
) -> Target {
    if let Some(t) = blocks.get(&d) {
        return *t;
    }
    let t = rev.decision(&d);
    blocks.insert(d, t);
    t
}

/// Compile stages into one program. Errors when it exceeds the kernel's
/// 4096 instructions.
pub fn compile(stages: &[Stage]) -> Result<Vec<sock_filter>, String> {
    let other = decide(stages, None);
    let mut named: Vec<u32> = stages
        .iter()
        .flat_map(|s| s.rules.keys().copied())
        .collect();
    named.sort_unstable();
    named.dedup();

    let mut rev = Rev::default();
    // Argument-checking blocks first (they end the program), one per
    // distinct decision.
    let mut blocks: HashMap<Decision<'_>, Target> = HashMap::new();
    let other_t = target_of(&mut rev, &mut blocks, other);
    let mut ranges: Vec<(u32, Target)> = Vec::new();
    let push_range = |ranges: &mut Vec<(u32, Target)>, start: u32, t: Target| {
        if ranges.last().is_none_or(|(_, last)| !same(last, &t)) {
            ranges.push((start, t));
        }
    };
    if named.first() != Some(&0) {
        push_range(&mut ranges, 0, other_t);
    }
    for (i, &nr) in named.iter().enumerate() {
        let t = target_of(&mut rev, &mut blocks, decide(stages, Some(nr)));
        push_range(&mut ranges, nr, t);
        let next = nr.checked_add(1);
        if let Some(n) = next
            && named.get(i + 1) != Some(&n)
        {
            push_range(&mut ranges, n, other_t);
        }
    }
    let entry = rev.search(&ranges);
    // Prelude, backwards: kill x32, then foreign architectures.
    let check_x32 = rev.jump(
        JSET,
        X32_SYSCALL_BIT,
        Target::Ret(SECCOMP_RET_KILL_PROCESS),
        entry,
        Some(NR),
    );
    let load_nr = rev.load(NR, check_x32);
    let check_arch = rev.jump(
        JEQ,
        AUDIT_ARCH_X86_64,
        load_nr,
        Target::Ret(SECCOMP_RET_KILL_PROCESS),
        Some(ARCH),
    );
    rev.load(ARCH, check_arch);
    let mut program = rev.code;
    program.reverse();
    if program.len() > MAX_INSTRUCTIONS {
        return Err(format!(
            "the compiled filter has {} BPF instructions; the kernel accepts at most {MAX_INSTRUCTIONS}",
            program.len()
        ));
    }
    Ok(program)
}

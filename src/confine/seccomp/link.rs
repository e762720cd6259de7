//! Link the stages of a profile into ONE classic-BPF program behind hutch's
//! own architecture check.
//!
//! seccompiler builds one program per filter, each starting with an
//! architecture check and ending in its mismatch action. hutch:
//!
//! 1. prepends its own check: any arch other than x86_64 (i386 through
//!    `int 0x80`, ...) and any syscall number with the x32 bit
//!    (`nr & 0x40000000`) kill the process — seccompiler checks neither x32
//!    nor the i386 entry point of a 64-bit process separately;
//! 2. strips each stage's own (redundant) architecture check;
//! 3. rewrites every `RET ALLOW` of a stage that is not the last into a jump
//!    to the next stage, so that "allow" means "no objection, ask the next
//!    stage". The first stage that returns anything else decides.
//!
//! One program instead of one filter per stage keeps the per-syscall cost to
//! one filter run. Between the prelude and the stages, a binary search over
//! the syscall numbers any stage names answers every *other* syscall at
//! once (with what the stages would answer: the first non-allow mismatch
//! action, else allow). That keeps the kernel's attach-time action-cache
//! emulation (one walk per syscall number) and the runtime path short; the
//! cache then bypasses the program for every constant-allow syscall.

use seccompiler::sock_filter;

use super::profile::Stage;

// Classic BPF opcodes (linux/bpf_common.h).
// BPF_LD | BPF_W | BPF_ABS
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;

const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// The x32 ABI marker bit in x86_64 syscall numbers.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
/// The kernel's BPF_MAXINSNS.
pub const MAX_INSTRUCTIONS: usize = 4096;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// hutch's prelude: kill foreign architectures and the x32 ABI.
pub fn arch_prelude() -> Vec<sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JMP_JSET_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    ]
}

/// The three instructions seccompiler puts in front of every x86_64 filter.
fn seccompiler_arch_check() -> [sock_filter; 3] {
    [
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    ]
}

/// Leaves of the search tree hold at most this many numbers.
const LEAF: usize = 4;

/// Emit a search over the sorted numbers `set` (the syscall number is in
/// A): a member jumps to the stages (a `JA` patched later, its index pushed
/// to `to_stages`), anything else returns `other`.
fn search(set: &[u32], other: u32, out: &mut Vec<sock_filter>, to_stages: &mut Vec<usize>) {
    if set.len() <= LEAF {
        let m = set.len();
        for (i, nr) in set.iter().enumerate() {
            // Hit: jump over the remaining tests and the RET to the JA.
            out.push(jump(BPF_JMP_JEQ_K, *nr, (m - i) as u8, 0));
        }
        out.push(stmt(BPF_RET_K, other));
        to_stages.push(out.len());
        out.push(stmt(BPF_JMP_JA, 0));
        return;
    }
    let mid = set.len() / 2;
    let (left, right) = set.split_at(mid);
    // nr >= right[0]: the JA to the right half; else the left half inline.
    out.push(jump(BPF_JMP_JGE_K, right[0], 0, 1));
    let ja = out.len();
    out.push(stmt(BPF_JMP_JA, 0));
    let start = out.len();
    search(left, other, out, to_stages);
    out[ja].k = (out.len() - start) as u32;
    search(right, other, out, to_stages);
}

/// Link compiled stages into one program. Errors when a stage does not
/// have the expected shape (a seccompiler change) or the result is too long.
pub fn link(stages: &[Stage]) -> Result<Vec<sock_filter>, String> {
    let mut out = arch_prelude();
    // What the stages answer for a syscall none of them names.
    let other = stages
        .iter()
        .map(|s| s.mismatch)
        .find(|m| *m != SECCOMP_RET_ALLOW)
        .unwrap_or(SECCOMP_RET_ALLOW);
    let mut named: Vec<u32> = stages
        .iter()
        .flat_map(|s| s.named.iter().copied())
        .collect();
    named.sort_unstable();
    named.dedup();
    if !named.is_empty() {
        let mut to_stages = Vec::new();
        search(&named, other, &mut out, &mut to_stages);
        let stages_start = out.len();
        for idx in to_stages {
            out[idx].k = (stages_start - idx - 1) as u32;
        }
    }
    let check = seccompiler_arch_check();
    for (i, stage) in stages.iter().enumerate() {
        let body = stage
            .program
            .strip_prefix(&check[..])
            .ok_or_else(|| format!("filter {:?}: unexpected BPF prologue", stage.name))?;
        let last = i + 1 == stages.len();
        for (j, ins) in body.iter().enumerate() {
            let is_allow = ins.code == BPF_RET_K && ins.k == SECCOMP_RET_ALLOW;
            if is_allow && !last {
                // Jump to the first instruction after this stage.
                let skip = (body.len() - 1 - j) as u32;
                out.push(stmt(BPF_JMP_JA, skip));
            } else {
                out.push(ins.clone());
            }
        }
        if body.is_empty() && last {
            out.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        }
    }
    if stages.is_empty() {
        out.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    }
    if out.len() > MAX_INSTRUCTIONS {
        return Err(format!(
            "the linked filter has {} BPF instructions; the kernel accepts at most {MAX_INSTRUCTIONS}",
            out.len()
        ));
    }
    Ok(out)
}

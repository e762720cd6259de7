//! The seccompiler-based compiler hutch used before its own generator
//! (`src/confine/seccomp/codegen.rs`): each stage compiled by seccompiler
//! (three instructions per syscall and linear rule chains), linked into one
//! program behind hutch's architecture check. A test oracle only, outside
//! the shipped library (seccompiler is a dev-dependency):
//! `tests/confine_codegen.rs` checks that the new compiler decides every
//! syscall exactly as this one does, and `benches/seccomp_codegen.sh`
//! times the two.
//!
//! Linking: hutch's own prelude kills foreign architectures and x32; each
//! stage's own architecture check is stripped; every `RET ALLOW` of a stage
//! that is not the last jumps to the next stage. A binary search over the
//! named syscall numbers answers every other syscall at once.

use std::collections::BTreeMap;

use hutch::internals::confine::seccomp::profile::{
    Op, ProfileError, SECCOMP_RET_ALLOW, Stage, compile_stages,
};
use hutch::internals::sys::sock_filter;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// One stage as seccompiler compiles it.
struct Compiled {
    name: String,
    program: Vec<sock_filter>,
    named: Vec<u32>,
    mismatch: u32,
}

fn action(v: u32) -> Result<SeccompAction, String> {
    Ok(match v {
        SECCOMP_RET_ALLOW => SeccompAction::Allow,
        0 => SeccompAction::KillThread,
        0x8000_0000 => SeccompAction::KillProcess,
        0x7ffc_0000 => SeccompAction::Log,
        0x0003_0000 => SeccompAction::Trap,
        v if v & 0xffff_0000 == 0x0005_0000 => SeccompAction::Errno(v & 0xffff),
        v if v & 0xffff_0000 == 0x7ff0_0000 => SeccompAction::Trace(v & 0xffff),
        v => return Err(format!("action {v:#x} has no seccompiler equivalent")),
    })
}

fn compile_stage(stage: &Stage) -> Result<Compiled, String> {
    let here = format!("filter {:?}", stage.name);
    if stage.unlisted_action != stage.mismatch_action {
        return Err(format!(
            "{here}: unlisted_action cannot be expressed in seccompiler's format"
        ));
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, rs) in &stage.rules {
        let mut built = Vec::new();
        for r in rs {
            let mut conds = Vec::new();
            for c in r {
                let len = if c.qword {
                    SeccompCmpArgLen::Qword
                } else {
                    SeccompCmpArgLen::Dword
                };
                let op = match c.op {
                    Op::Eq => SeccompCmpOp::Eq,
                    Op::Ne => SeccompCmpOp::Ne,
                    Op::Ge => SeccompCmpOp::Ge,
                    Op::Gt => SeccompCmpOp::Gt,
                    Op::Le => SeccompCmpOp::Le,
                    Op::Lt => SeccompCmpOp::Lt,
                    Op::MaskedEq(m) => SeccompCmpOp::MaskedEq(m),
                };
                conds.push(
                    SeccompCondition::new(c.index, len, op, c.val)
                        .map_err(|e| format!("{here}: {e}"))?,
                );
            }
            built.push(SeccompRule::new(conds).map_err(|e| format!("{here}: {e}"))?);
        }
        rules.insert(i64::from(*nr), built);
    }
    let filter = SeccompFilter::new(
        rules,
        action(stage.mismatch_action)?,
        action(stage.match_action)?,
        TargetArch::x86_64,
    )
    .map_err(|e| format!("{here}: {e}"))?;
    let program = BpfProgram::try_from(filter).map_err(|e| format!("{here}: {e}"))?;
    Ok(Compiled {
        name: stage.name.clone(),
        // seccompiler's instruction type, as the one hutch installs.
        program: program
            .iter()
            .map(|i| jump(i.code, i.k, i.jt, i.jf))
            .collect(),
        named: stage.rules.keys().copied().collect(),
        mismatch: stage.mismatch_action,
    })
}

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
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const MAX_INSTRUCTIONS: usize = 4096;

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
fn arch_prelude() -> Vec<sock_filter> {
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
    let stages = stages
        .iter()
        .map(compile_stage)
        .collect::<Result<Vec<_>, _>>()?;
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
        let same = |a: &sock_filter, b: &sock_filter| {
            (a.code, a.jt, a.jf, a.k) == (b.code, b.jt, b.jf, b.k)
        };
        let body = match stage.program.split_at_checked(check.len()) {
            Some((head, body)) if head.iter().zip(&check).all(|(a, b)| same(a, b)) => body,
            _ => return Err(format!("filter {:?}: unexpected BPF prologue", stage.name)),
        };
        let last = i + 1 == stages.len();
        for (j, ins) in body.iter().enumerate() {
            let is_allow = ins.code == BPF_RET_K && ins.k == SECCOMP_RET_ALLOW;
            if is_allow && !last {
                // Jump to the first instruction after this stage.
                let skip = (body.len() - 1 - j) as u32;
                out.push(stmt(BPF_JMP_JA, skip));
            } else {
                out.push(jump(ins.code, ins.k, ins.jt, ins.jf));
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

/// Compile profile text with the seccompiler-based compiler: what
/// `hutch::internals::confine::seccomp::compile` must agree with. Refuses
/// `unlisted_action`, which seccompiler's format cannot express.
pub fn compile_with_seccompiler(json: &[u8]) -> Result<Vec<sock_filter>, ProfileError> {
    let stages = compile_stages(json)?;
    link(&stages).map_err(|message| ProfileError {
        location: String::new(),
        message,
    })
}

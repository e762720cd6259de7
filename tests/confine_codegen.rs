//! hutch's own BPF generator decides every syscall exactly as the
//! seccompiler-based compiler it replaced: both programs are run by a small
//! classic-BPF interpreter over every syscall number 0..=470 (plus x32,
//! i386 and out-of-range numbers) and argument patterns built from the
//! profile's own values (equal, ±1, high bits set).

mod confine_support;

use confine_support::install::install_ns;
use confine_support::seccomp_reference::compile_with_seccompiler;
use confine_support::seccompiler_format::{Ordered, to_seccompiler};
use hutch::internals::confine::seccomp::{self, BUILTIN, INIT_PROFILE};
use serde_json::{Value, json};

#[derive(Clone, Copy)]
struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

const X86_64: u32 = 0xC000_003E;
const I386: u32 = 0x4000_0003;

/// Run a seccomp classic-BPF program (the instructions hutch emits).
fn run(prog: &[hutch::internals::sys::sock_filter], d: &Data) -> u32 {
    let word = |k: u32| -> u32 {
        match k {
            0 => d.nr,
            4 => d.arch,
            8 | 12 => 0, // instruction pointer
            16..=63 if k.is_multiple_of(4) => {
                let a = d.args[((k - 16) / 8) as usize];
                if k.is_multiple_of(8) {
                    a as u32
                } else {
                    (a >> 32) as u32
                }
            }
            _ => panic!("load outside seccomp_data: {k}"),
        }
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let i = prog
            .get(pc)
            .unwrap_or_else(|| panic!("pc {pc} out of program"));
        let cond = |c: bool| pc + 1 + if c { i.jt as usize } else { i.jf as usize };
        pc = match i.code {
            0x20 => {
                acc = word(i.k);
                pc + 1
            }
            0x54 => {
                acc &= i.k;
                pc + 1
            }
            0x05 => pc + 1 + i.k as usize,
            0x15 => cond(acc == i.k),
            0x25 => cond(acc > i.k),
            0x35 => cond(acc >= i.k),
            0x45 => cond(acc & i.k != 0),
            0x06 => return i.k,
            c => panic!("unexpected opcode {c:#x} at {pc}"),
        };
    }
}

/// Tiny deterministic PRNG (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Argument values that sit on every boundary of the profile's conditions.
fn interesting(profile: &Value) -> Vec<u64> {
    let mut vals = vec![0, 1, u64::MAX, 1 << 32, 1 << 63, 0xffff_ffff];
    for f in profile.as_object().unwrap().values() {
        for r in f["filter"].as_array().unwrap() {
            for c in r["args"].as_array().into_iter().flatten() {
                let v = c["val"].as_u64().unwrap();
                let mut m = u64::MAX;
                if let Some(mask) = c["op"].get("masked_eq") {
                    m = mask.as_u64().unwrap();
                    vals.extend([v & m, (v & m) | !m, !m, v ^ m]);
                }
                for x in [v, v & m] {
                    vals.extend([
                        x,
                        x.wrapping_add(1),
                        x.wrapping_sub(1),
                        x ^ (1 << 32),
                        x | (1 << 63),
                        x | 0xffff_ffff_0000_0000,
                        x & 0xffff_ffff,
                        x.wrapping_add(1 << 32),
                        x.wrapping_sub(1 << 32),
                    ]);
                }
            }
        }
    }
    vals.sort_unstable();
    vals.dedup();
    vals
}

/// Compare the two compilers on `profile` (new) and `oracle_profile`
/// (the same rules in seccompiler's format). Returns the two lengths.
fn compare(what: &str, profile: &str, oracle_profile: &str) -> (usize, usize) {
    let new = seccomp::compile(what, profile.as_bytes())
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .program;
    let old = compile_with_seccompiler(oracle_profile.as_bytes())
        .unwrap_or_else(|e| panic!("{what} (oracle): {e}"));
    let vals = interesting(&Ordered::parse(profile).value());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ new.len() as u64);
    let mut nrs: Vec<u32> = (0..=470).collect();
    nrs.extend([
        471,
        512,
        1000,
        0xffff,
        0x3fff_ffff,
        0x4000_0000,
        0x4000_0027,
    ]);
    nrs.extend([0x4000_0000 | 41, 0x8000_0000, 0xffff_ffff, 0x7fff_ffff]);
    let mut checked = 0;
    for &nr in &nrs {
        for arch in [X86_64, I386, 0xC000_00B7] {
            let mut cases: Vec<[u64; 6]> = vals.iter().map(|v| [*v; 6]).collect();
            if arch == X86_64 && nr <= 470 {
                for _ in 0..48 {
                    let mut a = [0u64; 6];
                    for x in &mut a {
                        *x = vals[rng.below(vals.len() as u64) as usize];
                    }
                    cases.push(a);
                }
            }
            for args in cases {
                let d = Data { nr, arch, args };
                let (n, o) = (run(&new, &d), run(&old, &d));
                assert_eq!(
                    n, o,
                    "{what}: nr {nr} arch {arch:#x} args {args:x?}: new {n:#x}, seccompiler {o:#x}"
                );
                checked += 1;
            }
        }
    }
    println!(
        "{what}: {} instructions (seccompiler layout: {}), {checked} cases agree",
        new.len(),
        old.len()
    );
    (new.len(), old.len())
}

#[test]
fn builtin_profiles_decide_as_the_seccompiler_compiler() {
    let mut profiles: Vec<(&str, &str)> = BUILTIN.to_vec();
    profiles.push(("init", INIT_PROFILE));
    for (name, text) in profiles {
        let (new, old) = compare(name, text, &to_seccompiler(text));
        assert!(
            new < old,
            "{name}: {new} instructions, not fewer than {old}"
        );
    }
}

#[test]
fn socket_families_are_an_eq_allow_list() {
    let p: Value = serde_json::from_str(BUILTIN[0].1).unwrap();
    let f = &p["socket_families"];
    assert_eq!(f["match_action"], json!("allow"));
    assert_eq!(f["unlisted_action"], json!("allow"));
    let mut seen = Vec::new();
    for r in f["filter"].as_array().unwrap() {
        for c in r["args"].as_array().unwrap() {
            assert_eq!(c["op"], json!("eq"), "{r}");
            assert_eq!(c["type"], json!("dword"), "{r}");
        }
        seen.push(r["syscall"].as_str().unwrap());
    }
    assert!(seen.contains(&"socket") && seen.contains(&"socketpair"));
    // And the compiled program: a family outside the list, even with the
    // allowed family in the high bits, is EAFNOSUPPORT; socketpair too.
    let prog = seccomp::compile("default", BUILTIN[0].1.as_bytes())
        .unwrap()
        .program;
    let with_proto = |nr: i64, fam: u64, proto: u64| {
        let d = Data {
            nr: nr as u32,
            arch: X86_64,
            args: [fam, 1, proto, 0, 0, 0],
        };
        run(&prog, &d)
    };
    let at = |nr: i64, fam: u64| with_proto(nr, fam, 0);
    const EAFNOSUPPORT: u32 = 0x0005_0000 | 97;
    const ALLOW: u32 = 0x7fff_0000;
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        for fam in [1u64, 2, 10, 16, 1 | (1 << 32), 2 | (1 << 63)] {
            assert_eq!(at(nr, fam), ALLOW, "nr {nr} family {fam:#x}");
        }
        for fam in [0u64, 3, 17, 40, 38, (1 << 32) | 40, 17 | (1 << 63), 1 << 32] {
            assert_eq!(at(nr, fam), EAFNOSUPPORT, "nr {nr} family {fam:#x}");
        }
        // AF_NETLINK: NETLINK_ROUTE (0) only, also on the low 32 bits.
        assert_eq!(with_proto(nr, 16, 1 << 32), ALLOW);
        for proto in [4u64, 9, 12, 16, (1 << 32) | 12] {
            assert_eq!(
                with_proto(nr, 16, proto),
                EAFNOSUPPORT,
                "netlink {proto:#x}"
            );
            assert_eq!(with_proto(nr, 2, proto), ALLOW, "inet {proto:#x}");
        }
    }
}

/// Random profiles over every operator, width, action and stage shape.
#[test]
fn random_profiles_decide_as_the_seccompiler_compiler() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let names = [
        "read",
        "write",
        "openat",
        "ioctl",
        "socket",
        "clone",
        "mmap",
        "prctl",
        "personality",
        "kill",
        "fcntl",
        "futex",
        "bpf",
        "mount",
        "setns",
        "getpid",
    ];
    let actions = [
        json!("allow"),
        json!({"errno": 1}),
        json!({"errno": 38}),
        json!("log"),
        json!("trap"),
        json!("kill_process"),
        json!("kill_thread"),
        json!({"trace": 7}),
    ];
    let ops = ["eq", "ne", "ge", "gt", "le", "lt"];
    for round in 0..60 {
        let mut profile = serde_json::Map::new();
        for s in 0..1 + rng.below(3) {
            let m = rng.below(actions.len() as u64) as usize;
            let mut mm = rng.below(actions.len() as u64) as usize;
            if mm == m {
                mm = (m + 1) % actions.len();
            }
            let mut filter = Vec::new();
            let mut used: Vec<(&str, bool)> = Vec::new();
            for _ in 0..rng.below(12) {
                let name = names[rng.below(names.len() as u64) as usize];
                let conditional = rng.below(3) != 0;
                if let Some((_, c)) = used.iter().find(|(n, _)| *n == name)
                    && (!*c || !conditional)
                {
                    continue;
                }
                used.push((name, conditional));
                if !conditional {
                    filter.push(json!({"syscall": name}));
                    continue;
                }
                let mut args = Vec::new();
                for _ in 0..1 + rng.below(3) {
                    let qword = rng.below(2) == 0;
                    let mut val = match rng.below(4) {
                        0 => rng.below(20),
                        1 => rng.next(),
                        2 => rng.below(1 << 33),
                        _ => 1 << rng.below(64),
                    };
                    if !qword {
                        val &= 0xffff_ffff;
                    }
                    let op = if rng.below(4) == 0 {
                        let mut mask = match rng.below(3) {
                            0 => 1 << rng.below(64),
                            1 => rng.next(),
                            _ => 0xff << rng.below(56),
                        };
                        if !qword {
                            mask &= 0xffff_ffff;
                        }
                        json!({"masked_eq": mask})
                    } else {
                        json!(ops[rng.below(ops.len() as u64) as usize])
                    };
                    args.push(json!({
                        "index": rng.below(6),
                        "type": if qword { "qword" } else { "dword" },
                        "op": op,
                        "val": val,
                    }));
                }
                filter.push(json!({"syscall": name, "args": args}));
            }
            profile.insert(
                format!("stage{s}"),
                json!({
                    "mismatch_action": actions[mm],
                    "match_action": actions[m],
                    "filter": filter,
                }),
            );
        }
        let p = Value::Object(profile).to_string();
        compare(&format!("random profile {round}"), &p, &p);
    }
}

/// A profile long enough that jumps exceed the 8-bit BPF offsets (the
/// generator's trampolines) still decides as the old compiler.
#[test]
fn long_programs_decide_as_the_seccompiler_compiler() {
    let ioctls: Vec<Value> = (0..120u64)
        .map(|i| {
            // Two long blocks: the search jumps over one to reach the other.
            let name = if i % 2 == 0 { "ioctl" } else { "prctl" };
            json!({"syscall": name, "args": [
                {"index": 1, "type": "dword", "op": "eq", "val": 0x5400 + i},
                {"index": 2, "type": "qword", "op": "gt", "val": i << 31}]})
        })
        .collect();
    let strict: Value = serde_json::from_str(BUILTIN[1].1).unwrap();
    let mut p = serde_json::Map::new();
    p.insert(
        "ioctls".into(),
        json!({"mismatch_action": "allow", "match_action": {"errno": 25}, "filter": ioctls}),
    );
    p.insert("allow_list".into(), strict["allow_list"].clone());
    let p = Value::Object(p).to_string();
    let (new, _) = compare("long profile", &p, &p);
    assert!(
        new > 600,
        "{new} instructions: too short to need trampolines"
    );
    let prog = seccomp::compile("long", p.as_bytes()).unwrap().program;
    assert!(
        prog.iter().any(|i| i.code == 0x05),
        "no JA trampoline placed"
    );
}

/// The kernel accepts every built-in program, and its seccompiler layout
/// (each installed in a forked child). What compiling and installing them
/// cost, against seccompiler: `benches/seccomp_codegen.sh`.
#[test]
fn builtin_programs_install_in_the_kernel() {
    for (name, text) in BUILTIN.iter().chain([("init", INIT_PROFILE)].iter()) {
        let new = seccomp::compile(name, text.as_bytes()).unwrap().program;
        let old = compile_with_seccompiler(to_seccompiler(text).as_bytes()).unwrap();
        install_ns(&new);
        install_ns(&old);
    }
}

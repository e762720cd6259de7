//! Profile loading from arbitrary bytes: parsing, validation, compiling and
//! linking must return Ok or a one-line error, never panic; whatever
//! compiles must be a program the kernel would accept.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match hutch::internals::confine::seccomp::compile("fuzz", data) {
        Ok(f) => {
            assert!(!f.program.is_empty());
            assert!(f.program.len() <= hutch::internals::confine::seccomp::MAX_INSTRUCTIONS);
            // The kernel requires the last instruction to be a return.
            assert_eq!(f.program.last().map(|i| i.code), Some(0x06));
            // Every jump stays inside the program.
            for (i, ins) in f.program.iter().enumerate() {
                if ins.code & 0x07 == 0x05 {
                    let left = f.program.len() - i - 1;
                    if ins.code == 0x05 {
                        assert!((ins.k as usize) < left);
                    } else {
                        assert!((ins.jt as usize) < left && (ins.jf as usize) < left);
                    }
                }
            }
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
});

//! Layer unpacking over arbitrary bytes: the input is a layer tar (raw,
//! or gzip when it starts with the gzip magic), unpacked into a fresh
//! layer directory beside a canary directory that symlinks in the input
//! may name. The unpacker must never panic, never write outside the layer
//! directory (the canary stays empty), and stay within its limits.
#![no_main]

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;

use hutch::internals::image::tar::TarReader;
use hutch::internals::image::unpack::{OpaqueXattr, UnpackOptions, unpack};
use libfuzzer_sys::fuzz_target;

fn scratch() -> PathBuf {
    let p = std::env::temp_dir().join(format!("hutch-fuzz-layer-{}", std::process::id()));
    if p.exists() {
        let fd = hutch::internals::sys::open_dir_path(&std::env::temp_dir()).unwrap();
        let name = std::ffi::CString::new(p.file_name().unwrap().as_encoded_bytes()).unwrap();
        hutch::internals::image::store::remove_tree(fd.as_fd(), &name).unwrap();
    }
    std::fs::create_dir_all(p.join("layer")).unwrap();
    std::fs::create_dir_all(p.join("canary")).unwrap();
    p
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    let root = hutch::internals::sys::open_dir_path(&dir.join("layer")).unwrap();
    let opts = UnpackOptions {
        max_entries: 256,
        max_file_bytes: 1 << 20,
        allow_devices: false,
        keep_owners: false,
        opaque_xattr: OpaqueXattr::User,
    };
    let input: Box<dyn Read> = if data.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(data).take(4 << 20))
    } else {
        Box::new(data)
    };
    let mut records = Vec::new();
    let mut tar = TarReader::new(input);
    if let Ok(summary) = unpack(&mut tar, root.as_fd(), &mut records, &opts) {
        assert!(summary.entries <= 256);
        assert!(summary.file_bytes <= 1 << 20);
    }
    assert!(
        std::fs::read_dir(dir.join("canary")).unwrap().next().is_none(),
        "the unpacker wrote outside the layer"
    );
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "only layer/ and canary/ beside each other: {names:?}");
});

//! Image import over an arbitrary OCI image layout: nested indexes,
//! manifests, configs and layers. The input is a list of documents
//! separated by NUL bytes (JSON has none): the first is `index.json`, each
//! other one a blob. In a document, `$N` stands for the digest and `%N`
//! for the size of document N when N is a later document, so the fuzzer can
//! build references (nested indexes named many times included) without
//! computing digests. The import must never panic, must end in bounded
//! time (libFuzzer's -timeout) and memory, and may only write in its store.
#![no_main]

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use hutch::internals::image::{Digest, ImportOptions, Store};
use libfuzzer_sys::fuzz_target;

const MAX_DOCS: usize = 64;

fn scratch() -> PathBuf {
    let p = std::env::temp_dir().join(format!("hutch-fuzz-layout-{}", std::process::id()));
    if p.exists() {
        let fd = hutch::internals::sys::open_dir_path(&std::env::temp_dir()).unwrap();
        let name = std::ffi::CString::new(p.file_name().unwrap().as_encoded_bytes()).unwrap();
        hutch::internals::image::store::remove_tree(fd.as_fd(), &name).unwrap();
    }
    std::fs::create_dir_all(p.join("layout/blobs/sha256")).unwrap();
    p
}

/// Replace `$N` and `%N` (N a later document) by that document's digest
/// and size.
fn resolve(doc: &[u8], index: usize, done: &[Option<(String, usize)>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.len());
    let mut i = 0;
    while i < doc.len() {
        let c = doc[i];
        if (c == b'$' || c == b'%') && i + 1 < doc.len() && doc[i + 1].is_ascii_digit() {
            let mut j = i + 1;
            let mut n = 0usize;
            while j < doc.len() && doc[j].is_ascii_digit() && n < MAX_DOCS {
                n = n * 10 + usize::from(doc[j] - b'0');
                j += 1;
            }
            if n > index
                && let Some(Some((digest, size))) = done.get(n)
            {
                if c == b'$' {
                    out.extend_from_slice(digest.as_bytes());
                } else {
                    out.extend_from_slice(size.to_string().as_bytes());
                }
                i = j;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

fn write_layout(layout: &Path, data: &[u8]) {
    let docs: Vec<&[u8]> = data.split(|&b| b == 0).take(MAX_DOCS).collect();
    let mut done: Vec<Option<(String, usize)>> = vec![None; docs.len()];
    for i in (0..docs.len()).rev() {
        let bytes = resolve(docs[i], i, &done);
        if i == 0 {
            std::fs::write(layout.join("index.json"), &bytes).unwrap();
        } else {
            let digest = Digest::of(&bytes);
            std::fs::write(layout.join("blobs/sha256").join(digest.hex()), &bytes).unwrap();
            done[i] = Some((digest.to_string(), bytes.len()));
        }
    }
    std::fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    let layout = dir.join("layout");
    write_layout(&layout, data);
    let store = Store::open(Some(&dir.join("store"))).unwrap();
    let opts = ImportOptions {
        max_image_size: 1 << 20,
        max_layer_entries: 256,
        max_image_entries: 1024,
        ..ImportOptions::default()
    };
    if let Ok(report) = store.import(&layout, &opts) {
        assert!(report.record.layers.len() <= 128);
    }
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(names.len() <= 2, "only layout/ and store/: {names:?}");
});

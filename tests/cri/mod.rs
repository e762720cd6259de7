//! The CRI path of tests/oci_cri.rs (and benches/oci.sh's CRI row): a
//! containerd node with a `hutch` runtime handler, images built offline,
//! a kubelet-like CRI client, and the pod cgroup the kubelet would make.
#![allow(dead_code)]

pub mod client;
pub mod image;
pub mod node;
pub mod pod;
pub mod upstream;

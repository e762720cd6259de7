//! `hutch check`'s image_store line: the store is probed where it is, the
//! way runs use it (layers with user.overlay.opaque stacked in a user
//! namespace with userxattr; for root, idmapped first), as root and as
//! uid 65534, and the probe leaves nothing in it.

mod common;
mod image_support;

use common::*;
use image_support::*;

fn check(who: As, store: &std::path::Path) -> serde_json::Value {
    let mut cmd = hutch_command(who);
    let o = cmd
        .args(["check", "--json"])
        .env("HUTCH_IMAGE_STORE", store)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("a JSON report");
    report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "image_store")
        .expect("an image_store line")
        .clone()
}

#[test]
fn the_image_store_line_probes_overlay_lowers_and_cleans_up() {
    for who in identities() {
        let t = TempDir::new("img-check", who);
        let store = t.path().join("store");
        let f = check(who, &store);
        assert_eq!(f["status"], "ok", "{who:?}: {f}");
        let detail = f["detail"].as_str().unwrap();
        assert!(detail.contains("userxattr"), "{detail}");
        assert_eq!(detail.contains("idmapped"), who == As::Root, "{detail}");
        assert!(
            names_in(&store.join("tmp")).is_empty(),
            "probe layers removed"
        );
        assert!(names_in(&store.join("layers")).is_empty());
    }
}

#[test]
fn a_store_owned_by_someone_else_is_reported() {
    require!(
        is_root(),
        "a store owned by someone else: root makes one and uid 65534 probes it"
    );
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    let t = TempDir::new("img-check-owner", As::Nobody);
    let store = t.path().join("store");
    std::fs::create_dir(&store).unwrap();
    // Root's directory, probed by uid 65534.
    let f = check(As::Nobody, &store);
    assert_eq!(f["status"], "restricted", "{f}");
    assert!(
        f["detail"]
            .as_str()
            .unwrap()
            .contains("must belong to the caller"),
        "{f}"
    );
    assert!(
        f["fix"].as_str().unwrap().contains("HUTCH_IMAGE_STORE"),
        "{f}"
    );
}

//! `hutch image pull`: images fetched by digest from a real registry
//! (Debian's `docker-registry` on loopback, see tests/registry_support),
//! pushed there by `skopeo copy` from OCI layouts built here; and every
//! way a pull must fail closed (one line, exit 125, no image left).

mod common;
mod image_support;
mod registry_support;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use image_support::*;
use registry_support::*;

fn ready() -> Result<(), String> {
    for tool in ["docker-registry", "skopeo", "htpasswd"] {
        if !have(tool) {
            return Err(format!("{tool} is missing (tests/setup installs it)"));
        }
    }
    if !have_busybox() {
        return Err("/bin/busybox is missing".into());
    }
    Ok(())
}

fn busybox_image(hello: &str) -> Vec<(Vec<u8>, Comp)> {
    let tar = Tar::default()
        .busybox(TOOLS)
        .dir("etc")
        .file("etc/hello", hello)
        .finish();
    vec![(tar, Comp::Gzip)]
}

/// An OCI layout at `dir` (tag `t`, usable by skopeo) for `arch`.
fn layout(dir: &Path, arch: &'static str, hello: &str) -> String {
    let spec = ImageSpec {
        arch,
        ..ImageSpec::default()
    };
    oci_layout(dir, &busybox_image(hello), &spec)
}

/// A layout whose index.json names an image index of an amd64 and an
/// arm64 image; returns the index's digest.
fn multi_arch_layout(t: &Path) -> String {
    let a = t.join("amd64");
    let b = t.join("arm64");
    let ma = layout(&a, "amd64", "amd64 image\n");
    let mb = layout(&b, "arm64", "arm64 image\n");
    for e in std::fs::read_dir(b.join("blobs/sha256")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), a.join("blobs/sha256").join(e.file_name())).unwrap();
    }
    let size = |d: &str| {
        std::fs::metadata(a.join("blobs/sha256").join(&d[7..]))
            .unwrap()
            .len()
    };
    let mt = "application/vnd.oci.image.manifest.v1+json";
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": mt, "digest": mb, "size": size(&mb), "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
            {"mediaType": mt, "digest": ma, "size": size(&ma), "platform": {"architecture": "amd64", "os": "linux"}},
        ]
    }))
    .unwrap();
    let id = sha(&index);
    std::fs::write(a.join("blobs/sha256").join(&id[7..]), &index).unwrap();
    std::fs::write(
        a.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": id, "size": index.len(),
             "annotations": {"org.opencontainers.image.ref.name": "multi"}}
        ]}))
        .unwrap(),
    )
    .unwrap();
    id
}

fn pull(who: As, store: &Path, args: &[&str]) -> Output {
    let mut a = vec!["pull"];
    a.extend_from_slice(args);
    image(who, store, &a)
}

/// A pull that must fail: exit 125, one line naming `expect`, and no
/// image, layer or blob left in the store.
fn pull_refused(who: As, store: &Path, args: &[&str], expect: &str) -> String {
    let o = pull(who, store, args);
    let e = err(&o);
    assert_eq!(
        o.status.code(),
        Some(125),
        "pull {args:?} should fail: {}{e}",
        out(&o)
    );
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.contains(expect), "expected {expect:?} in: {e}");
    assert!(!e.contains(PASSWORD), "the password leaked: {e}");
    assert_no_image(store);
    e
}

fn assert_no_image(store: &Path) {
    let index = std::fs::read_to_string(store.join("index.json")).unwrap_or_default();
    assert!(!index.contains("sha256"), "an image was recorded: {index}");
    assert_eq!(names_in(&store.join("layers")), Vec::<String>::new());
    assert_eq!(names_in(&store.join("blobs/sha256")), Vec::<String>::new());
}

struct Setup {
    t: TempDir,
    reg: Registry,
    digest: String,
    reference: String,
}

impl Setup {
    fn new(tag: &str, who: As, basic_auth: bool) -> Setup {
        let t = TempDir::new(tag, who);
        let reg = Registry::start(&t.path().join("registry"), basic_auth);
        let lay = t.path().join("layout");
        layout(&lay, "amd64", "hello from the registry\n");
        let digest = reg.push(lay.to_str().unwrap(), "hutch/test:t", false);
        let reference = format!("{}/hutch/test@{digest}", reg.host);
        give(t.path(), who);
        Setup {
            t,
            reg,
            digest,
            reference,
        }
    }

    fn store(&self) -> PathBuf {
        self.t.path().join("store")
    }
}

#[test]
fn pulled_by_digest_runs_as_root_and_as_nobody() {
    require!(ready().is_ok(), ready().unwrap_err());
    for who in identities() {
        let s = Setup::new("pull-run", who, false);
        let store = s.store();
        let o = pull(
            who,
            &store,
            &[&s.reference, "--insecure-registry", &s.reg.host, "--json"],
        );
        assert!(o.status.success(), "pull as {who:?}: {}", err(&o));
        let r = result(&o);
        assert_eq!(r["digest"], s.digest.as_str());
        assert_eq!(r["pinned"], true);
        assert_eq!(r["image"]["manifest"], s.digest.as_str());
        assert_eq!(
            r["image"]["pulled"]["repository"],
            format!("{}/hutch/test", s.reg.host)
        );
        // Pulled again: nothing new.
        let o = pull(
            who,
            &store,
            &[&s.reference, "--insecure-registry", &s.reg.host],
        );
        assert!(o.status.success(), "{}", err(&o));
        assert!(out(&o).contains("(0 new;"), "{}", out(&o));
        assert_eq!(list(who, &store).len(), 1);
        let o = run_image(
            who,
            &store,
            s.t.path(),
            &["--image", &s.reference, "--", "/bin/cat", "/etc/hello"],
        );
        assert!(o.status.success(), "run as {who:?}: {}", err(&o));
        assert_eq!(out(&o), "hello from the registry\n");
    }
}

#[test]
fn basic_auth_from_a_credential_file() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-auth", who, true);
    let store = s.store();
    let e = pull_refused(
        who,
        &store,
        &[&s.reference, "--insecure-registry", &s.reg.host],
        &format!("registry {}", s.reg.host),
    );
    assert!(
        e.contains("Not authorized") && e.contains("--registry-auth FILE"),
        "{e}"
    );
    let creds = s.t.path().join("auth.json");
    auth_file(&creds, &s.reg.host);
    give(&creds, who);
    let o = pull(
        who,
        &store,
        &[
            &s.reference,
            "--insecure-registry",
            &s.reg.host,
            "--registry-auth",
            creds.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(!out(&o).contains(PASSWORD) && !err(&o).contains(PASSWORD));
    assert_eq!(list(who, &store).len(), 1);
}

#[test]
fn plain_http_only_for_a_registry_marked_insecure() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-https", who, false);
    // https is tried, and the plain-http answer fails the TLS handshake.
    pull_refused(
        who,
        &s.store(),
        &[&s.reference],
        &format!("https://{}", s.reg.host),
    );
    // Another registry marked insecure does not make this one plain http.
    pull_refused(
        who,
        &s.store(),
        &[&s.reference, "--insecure-registry", "127.0.0.1:1"],
        &format!("https://{}", s.reg.host),
    );
}

#[test]
fn a_multi_arch_index_resolves_to_the_platform() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let t = TempDir::new("pull-index", who);
    let reg = Registry::start(&t.path().join("registry"), false);
    let index = multi_arch_layout(t.path());
    let pushed = reg.push(
        &format!("{}:multi", t.path().join("amd64").display()),
        "hutch/multi:m",
        true,
    );
    assert_eq!(pushed, index);
    give(t.path(), who);
    let store = t.path().join("store");
    let reference = format!("{}/hutch/multi@{index}", reg.host);
    pull_refused(
        who,
        &store,
        &[
            &reference,
            "--platform",
            "linux/s390x",
            "--insecure-registry",
            &reg.host,
        ],
        "not the requested linux/s390x",
    );
    let o = pull(
        who,
        &store,
        &[&reference, "--insecure-registry", &reg.host, "--json"],
    );
    assert!(o.status.success(), "{}", err(&o));
    let r = result(&o);
    assert_eq!(r["digest"], index.as_str());
    assert_eq!(r["image"]["platform"]["architecture"], "amd64");
    assert_eq!(r["image"]["pulled"]["index"], index.as_str());
    // The index's digest pins the image for a run.
    let o = run_image(
        who,
        &store,
        t.path(),
        &["--image", &reference, "--", "/bin/cat", "/etc/hello"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "amd64 image\n");
}

#[test]
fn an_image_of_another_platform_is_refused() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let t = TempDir::new("pull-arm", who);
    let reg = Registry::start(&t.path().join("registry"), false);
    let lay = t.path().join("layout");
    layout(&lay, "arm64", "arm\n");
    let digest = reg.push(lay.to_str().unwrap(), "hutch/arm:t", false);
    give(t.path(), who);
    pull_refused(
        who,
        &t.path().join("store"),
        &[
            &format!("{}/hutch/arm@{digest}", reg.host),
            "--insecure-registry",
            &reg.host,
        ],
        "the image is for linux/arm64, not the requested linux/amd64",
    );
}

#[test]
fn a_tampered_blob_is_refused_and_nothing_is_stored() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-tamper", who, false);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.reg.blob_file(&s.digest)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let file = s.reg.blob_file(&layer);
    let mut data = std::fs::read(&file).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(&file, &data).unwrap();
    pull_refused(
        who,
        &s.store(),
        &[&s.reference, "--insecure-registry", &s.reg.host],
        &format!("blob {layer}"),
    );
}

#[test]
fn a_tag_needs_allow_unpinned_and_the_digest_is_reported() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-tag", who, false);
    let tagged = format!("{}/hutch/test:t", s.reg.host);
    pull_refused(
        who,
        &s.store(),
        &[&tagged, "--insecure-registry", &s.reg.host],
        "is not pinned",
    );
    let o = pull(
        who,
        &s.store(),
        &[
            &tagged,
            "--insecure-registry",
            &s.reg.host,
            "--allow-unpinned",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let r = result(&o);
    assert_eq!(r["pinned"], false);
    assert_eq!(r["digest"], s.digest.as_str());
    assert_eq!(r["image"]["pulled"]["reference"], tagged.as_str());
}

#[test]
fn a_registry_that_closes_mid_blob_leaves_nothing_and_the_retry_resumes() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-cut", who, false);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.reg.blob_file(&s.digest)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let proxy = cutting_proxy(&s.reg.host, &layer);
    let via = format!("{proxy}/hutch/test@{}", s.digest);
    pull_refused(
        who,
        &s.store(),
        &[&via, "--insecure-registry", &proxy],
        &format!("blob {layer}"),
    );
    // The config arrived whole before the cut: the retry fetches only the layer.
    let o = pull(
        who,
        &s.store(),
        &[&s.reference, "--insecure-registry", &s.reg.host, "--json"],
    );
    assert!(o.status.success(), "{}", err(&o));
    let r = result(&o);
    assert_eq!(
        (r["downloaded"].as_u64(), r["reused"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
}

/// `n` pulls of `reference` from the insecure registry `host` into
/// `store` at once; each must succeed.
fn pull_at_once(who: As, store: &Path, reference: &str, host: &str, n: usize) {
    let pulls: Vec<_> = (0..n)
        .map(|_| {
            let (store, r, h) = (store.to_path_buf(), reference.to_string(), host.to_string());
            std::thread::spawn(move || pull(who, &store, &[&r, "--insecure-registry", &h]))
        })
        .collect();
    for p in pulls {
        let o = p.join().unwrap();
        assert!(o.status.success(), "{}", err(&o));
    }
}

#[test]
fn concurrent_pulls_of_one_image_store_it_once() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-many", who, false);
    let store = s.store();
    pull_at_once(who, &store, &s.reference, &s.reg.host, 4);
    assert_eq!(list(who, &store).len(), 1);
    assert_eq!(names_in(&store.join("layers")).len(), 1);
    let o = run_image(
        who,
        &store,
        s.t.path(),
        &["--image", &s.reference, "--", "/bin/cat", "/etc/hello"],
    );
    assert!(o.status.success(), "{}", err(&o));
}

#[test]
fn a_failed_pull_answers_in_the_json_envelope() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let t = TempDir::new("pull-json", who);
    let store = t.path().join("store");
    let o = pull(who, &store, &["127.0.0.1:1/x/y:latest", "--json"]);
    assert_eq!(o.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["verb"], "image.pull");
    assert_eq!(v["error"]["kind"], "refused");
    let o = image(who, &store, &["import", "/nonexistent", "--json"]);
    assert_eq!(o.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].clone(), v["verb"].clone()),
        (false.into(), "image.import".into())
    );
    assert_eq!(v["error"]["kind"], "io", "{v}");
}

#[test]
fn only_approved_images_run_and_inspect_shows_the_verdict() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-approved", who, false);
    let store = s.store();
    let other = format!("sha256:{}", "ab".repeat(32));
    let deny = s.t.path().join("deny.list");
    std::fs::write(&deny, format!("# the platform's list\n{other}\n")).unwrap();
    let allow = s.t.path().join("allow.list");
    std::fs::write(&allow, format!("{}/hutch/test@{}\n", s.reg.host, s.digest)).unwrap();
    give(s.t.path(), who);
    let (deny, allow) = (deny.to_str().unwrap(), allow.to_str().unwrap());
    // An unapproved digest is not even fetched.
    pull_refused(
        who,
        &store,
        &[
            &s.reference,
            "--insecure-registry",
            &s.reg.host,
            "--approved",
            deny,
        ],
        &format!("image {} is not on the approved list", s.digest),
    );
    let o = pull(
        who,
        &store,
        &[
            &s.reference,
            "--insecure-registry",
            &s.reg.host,
            "--approved",
            allow,
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let run = |list: &str| {
        run_image(
            who,
            &store,
            s.t.path(),
            &[
                "--image",
                &s.reference,
                "--approved",
                list,
                "--",
                "/bin/cat",
                "/etc/hello",
            ],
        )
    };
    let o = run(deny);
    assert_eq!(o.status.code(), Some(125), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!("image {} is not on the approved list", s.digest)),
        "{e}"
    );
    assert_eq!(out(&o), "", "nothing ran");
    let o = run(allow);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "hello from the registry\n");
    let verdict = |list: &str| {
        let o = image(
            who,
            &store,
            &["inspect", &s.digest, "--approved", list, "--json"],
        );
        assert!(o.status.success(), "{}", err(&o));
        let r = result(&o);
        r["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["check"] == "approved")
            .cloned()
            .unwrap()
    };
    assert_eq!(verdict(deny)["outcome"], "refused");
    assert_eq!(verdict(allow)["outcome"], "pass");
    // A list entry that is not a digest: exit 125 before anything starts.
    let bad = s.t.path().join("bad.list");
    std::fs::write(&bad, "sha256:1234\n").unwrap();
    give(&bad, who);
    let o = run(bad.to_str().unwrap());
    assert_eq!(o.status.code(), Some(125));
    assert!(err(&o).contains("line 1"), "{}", err(&o));
}

#[test]
fn run_pull_missing_fetches_the_pinned_image_once() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-missing", who, false);
    let store = s.store();
    let host = s.reg.host.clone();
    let dir = s.t.path().to_path_buf();
    let run = || {
        run_image(
            who,
            &store,
            &dir,
            &[
                "--image",
                &s.reference,
                "--pull",
                "missing",
                "--insecure-registry",
                &host,
                "--",
                "/bin/cat",
                "/etc/hello",
            ],
        )
    };
    let o = run();
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "hello from the registry\n");
    assert_eq!(list(who, &store).len(), 1);
    // Present now: the registry is not asked again.
    let Setup { t, reg, .. } = s;
    drop(reg);
    let _keep = t;
    let o = run();
    assert!(o.status.success(), "{}", err(&o));
}

#[test]
fn hutch_check_reports_the_registry_client_and_its_trust_store() {
    let line = |cert_file: Option<&str>| {
        let mut cmd = hutch_command(caller());
        cmd.args(["check", "--json"]);
        if let Some(f) = cert_file {
            cmd.env("SSL_CERT_FILE", f).env("SSL_CERT_DIR", f);
        }
        let o = cmd.output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        report["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "registry_client")
            .expect("a registry_client line")
            .clone()
    };
    let ok = line(None);
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(ok["required"], false);
    let bad = line(Some("/nonexistent/ca.pem"));
    assert_eq!(bad["status"], "missing", "{bad}");
    assert!(
        bad["detail"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/ca.pem"),
        "{bad}"
    );
    assert!(
        bad["fix"].as_str().unwrap().contains("SSL_CERT_FILE"),
        "{bad}"
    );
}

#[test]
fn a_session_keeps_its_approved_list() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-session", who, false);
    let store = s.store();
    let o = pull(
        who,
        &store,
        &[&s.reference, "--insecure-registry", &s.reg.host],
    );
    assert!(o.status.success(), "{}", err(&o));
    let deny = s.t.path().join("deny.list");
    std::fs::write(&deny, format!("sha256:{}\n", "ab".repeat(32))).unwrap();
    let ws = s.t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    give(s.t.path(), who);
    let state = s.t.path().join("state");
    let create = |list: &Path| {
        hutch_in(
            who,
            s.t.path(),
            &[
                "session",
                "--state-dir",
                state.to_str().unwrap(),
                "create",
                "--from",
                ws.to_str().unwrap(),
                "--image",
                &s.reference,
                "--image-store",
                store.to_str().unwrap(),
                "--approved",
                list.to_str().unwrap(),
            ],
        )
    };
    let o = create(&deny);
    assert_eq!(o.status.code(), Some(125), "{}", out(&o));
    assert!(
        err(&o).contains(&format!("image {} is not on the approved list", s.digest)),
        "{}",
        err(&o)
    );
}

#[test]
fn https_trusts_the_hosts_store_and_ssl_cert_file() {
    require!(
        ready().is_ok() && have("openssl"),
        "docker-registry, skopeo, openssl"
    );
    let who = caller();
    let t = TempDir::new("pull-tls", who);
    let (reg, ca) = Registry::start_tls(&t.path().join("registry"));
    let lay = t.path().join("layout");
    layout(&lay, "amd64", "over https\n");
    let digest = reg.push(lay.to_str().unwrap(), "hutch/tls:t", false);
    give(t.path(), who);
    let reference = format!("{}/hutch/tls@{digest}", reg.host);
    let store = t.path().join("store");
    let pull_with = |cert_file: Option<&Path>| {
        let mut c = hutch_command(who);
        c.args([
            "image",
            "--image-store",
            store.to_str().unwrap(),
            "pull",
            &reference,
        ]);
        c.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
        if let Some(f) = cert_file {
            c.env("SSL_CERT_FILE", f);
        }
        c.stdin(std::process::Stdio::null()).output().unwrap()
    };
    // The system's store does not know the test CA.
    let o = pull_with(None);
    assert_eq!(o.status.code(), Some(125), "{}", out(&o));
    assert_eq!(err(&o).trim_end().lines().count(), 1, "{}", err(&o));
    assert!(err(&o).contains("UnknownIssuer"), "{}", err(&o));
    assert_no_image(&store);
    let o = pull_with(Some(&ca));
    assert!(o.status.success(), "{}", err(&o));
    let o = run_image(
        who,
        &store,
        t.path(),
        &["--image", &reference, "--", "/bin/cat", "/etc/hello"],
    );
    assert_eq!(out(&o), "over https\n", "{}", err(&o));
}

#[test]
fn token_auth_through_the_registrys_token_service() {
    require!(
        ready().is_ok() && have("openssl"),
        "docker-registry, skopeo, openssl"
    );
    let who = caller();
    let t = TempDir::new("pull-token", who);
    let reg = Registry::start_token(&t.path().join("registry"));
    let lay = t.path().join("layout");
    layout(&lay, "amd64", "behind a token\n");
    let digest = reg.push_with_creds(lay.to_str().unwrap(), "hutch/test:t");
    give(t.path(), who);
    let reference = format!("{}/hutch/test@{digest}", reg.host);
    let store = t.path().join("store");
    pull_refused(
        who,
        &store,
        &[&reference, "--insecure-registry", &reg.host],
        &format!("registry {}", reg.host),
    );
    let creds = t.path().join("auth.json");
    auth_file(&creds, &reg.host);
    give(&creds, who);
    let o = pull(
        who,
        &store,
        &[
            &reference,
            "--insecure-registry",
            &reg.host,
            "--registry-auth",
            creds.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(list(who, &store).len(), 1);
}

/// A hostile registry on loopback: `/v2/` answers 200, and a manifest
/// GET answers a body that does not end — chunked under `/v2/chunked/`,
/// a huge Content-Length under `/v2/long/` — of JSON-ish bytes. It stops
/// after `BOUND` bytes per answer (or when hutch hangs up), so code that
/// reads the body whole ends with a large RSS rather than eating the host.
/// The path of the HTTP request on `conn`, its header read to the end;
/// None when no request line came.
fn request_path(conn: &std::net::TcpStream) -> Option<String> {
    use std::io::{BufRead, BufReader};
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    Some(request_line.split(' ').nth(1).unwrap_or("").to_string())
}

/// A registry on loopback: each connection on a thread of its own, its
/// request's path (the headers read and dropped) handed to `answer`,
/// which writes the response. Its host:port.
fn loopback_registry(answer: impl Fn(&str, std::net::TcpStream) + Send + Sync + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                if let Some(path) = request_path(&conn) {
                    answer(&path, conn);
                }
            });
        }
    });
    host
}

/// A request path's repository (its first part) and what follows the
/// repository's name: `manifests/REF` or `blobs/DIGEST`.
fn repo_and_key(path: &str) -> (String, String) {
    let repo = path.split('/').nth(2).unwrap_or("").to_string();
    let key = path.splitn(4, '/').nth(3).and_then(|k| k.split_once('/'));
    (repo, key.map_or("", |(_, k)| k).to_string())
}

/// A whole 200 answer: `body` of type `ct`, then the connection closes.
fn answer_whole(conn: &mut std::net::TcpStream, ct: &str, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: {ct}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )?;
    conn.write_all(body)
}

fn hostile_registry() -> String {
    use std::io::Write;
    const BOUND: usize = 256 << 20;
    loopback_registry(move |path, mut conn| {
        let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\
                            Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
        let chunk = format!("{{\"a\":\"{}\",", "a".repeat(64 << 10));
        let _ = if path.starts_with("/v2/chunked/") {
            (|| {
                write!(conn, "{head}Transfer-Encoding: chunked\r\n\r\n")?;
                let mut sent = 0;
                while sent < BOUND {
                    write!(conn, "{:x}\r\n{chunk}\r\n", chunk.len())?;
                    sent += chunk.len();
                }
                conn.write_all(b"0\r\n\r\n")
            })()
        } else if path.starts_with("/v2/long/") {
            (|| {
                write!(conn, "{head}Content-Length: {}\r\n\r\n", 1u64 << 40)?;
                let mut sent = 0;
                while sent < BOUND {
                    conn.write_all(chunk.as_bytes())?;
                    sent += chunk.len();
                }
                Ok(())
            })()
        } else {
            conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
        };
    })
}

/// `hutch image pull ARGS` as `who`: its exit code, stderr and peak RSS
/// in KiB (`ru_maxrss` of the child, from wait4).
// The child is reaped by wait4 (for its rusage), not Child::wait.
#[allow(clippy::zombie_processes)]
fn pull_measured(who: As, store: &Path, args: &[&str]) -> (Option<i32>, String, i64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = hutch_command(who);
    cmd.args(["image", "--image-store", store.to_str().unwrap(), "pull"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let code = std::process::ExitStatus::from_raw(status).code();
    (code, stderr, usage.ru_maxrss)
}

#[test]
fn a_registry_sending_an_endless_manifest_is_cut_off_at_the_cap() {
    let who = caller();
    let t = TempDir::new("pull-hostile", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let host = hostile_registry();
    let digest = format!("sha256:{}", "ab".repeat(32));
    for repo in ["chunked", "long"] {
        let reference = format!("{host}/{repo}/x@{digest}");
        let (code, e, peak_kib) =
            pull_measured(who, &store, &[&reference, "--insecure-registry", &host]);
        eprintln!("{repo}: hutch's peak RSS {peak_kib} KiB");
        assert!(
            peak_kib < 96 << 10,
            "{repo}: hutch's peak RSS was {peak_kib} KiB reading a hostile manifest"
        );
        assert_eq!(code, Some(125), "{repo}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{repo}: one line: {e}");
        assert!(
            e.contains(&format!("a manifest over {} bytes", 8 << 20)),
            "{repo}: {e}"
        );
        assert_no_image(&store);
    }
}

/// A registry that lies about a manifest's size (issue 34): its index
/// (served whole and true, so its digest pins it) names a linux/amd64
/// manifest of `DECLARED` bytes; `/v2/REPO/manifests/<that digest>`
/// answers, by REPO: `long` a Content-Length of 4 MiB (under the 8 MiB
/// cap) and then nothing; `chunked` a 64 KiB chunk and then nothing;
/// `short` `DECLARED - 10` bytes and the end; `digest` exactly `DECLARED`
/// bytes of other content; `over` is an index declaring a 9 MiB manifest.
/// A "nothing" answer waits for hutch to hang up (no timer): a client
/// reading past the declared size hangs there. Returns the host and the
/// index digests (the `over` one second).
fn lying_registry() -> (String, String, String) {
    use std::io::{Read, Write};
    const DECLARED: usize = 1000;
    let manifest_digest = format!("sha256:{}", "cd".repeat(32));
    let index_for = |size: u64| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest, "size": size,
                "platform": {"architecture": "amd64", "os": "linux"}}]
        }))
        .unwrap()
    };
    let index = index_for(DECLARED as u64);
    let over = index_for(9 << 20);
    let (index_digest, over_digest) = (sha(&index), sha(&over));
    let (idx_d, over_d) = (index_digest.clone(), over_digest.clone());
    let host = loopback_registry(move |path, mut conn| {
        let (repo, _) = repo_and_key(path);
        let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\
                            Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
        // Wait for the client to hang up (read returns 0 or fails).
        let stall = |conn: &mut std::net::TcpStream| {
            let mut buf = [0u8; 256];
            while conn.read(&mut buf).is_ok_and(|n| n > 0) {}
        };
        let mt_index = "application/vnd.oci.image.index.v1+json";
        let _ = if path.ends_with(&format!("/manifests/{idx_d}")) {
            answer_whole(&mut conn, mt_index, &index)
        } else if path.ends_with(&format!("/manifests/{over_d}")) {
            answer_whole(&mut conn, mt_index, &over)
        } else if path.contains("/manifests/") {
            let filler = "a".repeat(64 << 10);
            (|| {
                match repo.as_str() {
                    "long" => {
                        write!(conn, "{head}Content-Length: {}\r\n\r\n", 4 << 20)?;
                        conn.write_all(&filler.as_bytes()[..DECLARED])?;
                        stall(&mut conn);
                    }
                    "chunked" => {
                        write!(conn, "{head}Transfer-Encoding: chunked\r\n\r\n")?;
                        write!(conn, "{:x}\r\n{filler}\r\n", filler.len())?;
                        stall(&mut conn);
                    }
                    "short" => {
                        write!(conn, "{head}\r\n")?;
                        conn.write_all(&filler.as_bytes()[..DECLARED - 10])?;
                    }
                    _ => {
                        write!(conn, "{head}Content-Length: {DECLARED}\r\n\r\n")?;
                        conn.write_all(&filler.as_bytes()[..DECLARED])?;
                    }
                }
                Ok(())
            })()
        } else {
            conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
        };
    });
    (host, index_digest, over_digest)
}

/// `hutch image pull ARGS` as `who`, killed (and the test failed) if it
/// has not ended within `limit`: its exit code and stderr.
fn pull_within(
    who: As,
    store: &Path,
    args: &[&str],
    limit: std::time::Duration,
) -> (Option<i32>, String) {
    use std::io::Read;
    let mut cmd = hutch_command(who);
    cmd.args(["image", "--image-store", store.to_str().unwrap(), "pull"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pull {args:?} still reading after {limit:?}: it reads past the declared size");
        }
        // A poll with a deadline: the child has no readiness fd of its own here.
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut e = String::new();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    (status.code(), e)
}

#[test]
fn a_manifest_is_read_with_the_size_its_index_declares() {
    let who = caller();
    let t = TempDir::new("pull-lying", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let (host, index, over) = lying_registry();
    let cases = [
        (
            "long",
            &index,
            "the registry announced 4194304 bytes, but its descriptor declares 1000",
        ),
        (
            "chunked",
            &index,
            "the registry sent more than the 1000 bytes its descriptor declares",
        ),
        (
            "short",
            &index,
            "990 bytes arrived, but its descriptor declares 1000",
        ),
        (
            "digest",
            &index,
            "the registry sent a manifest whose digest is sha256:",
        ),
        (
            "over",
            &over,
            "a manifest of 9437184 bytes, over the 8388608-byte cap for manifests",
        ),
    ];
    for (repo, digest, expect) in cases {
        let reference = format!("{host}/{repo}/x@{digest}");
        let started = std::time::Instant::now();
        let (code, e) = pull_within(
            who,
            &store,
            &[&reference, "--insecure-registry", &host],
            std::time::Duration::from_secs(20),
        );
        eprintln!("{repo}: refused in {:?}", started.elapsed());
        assert_eq!(code, Some(125), "{repo}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{repo}: one line: {e}");
        assert!(e.contains(expect), "{repo}: expected {expect:?} in: {e}");
        assert!(
            e.contains(&format!("sha256:{}", "cd".repeat(32))),
            "{repo}: names the blob: {e}"
        );
        assert_no_image(&store);
    }
}

/// `hutch ARGS` as `who` in `cwd` with `env` set and, when `fd3` is
/// given, that file open as fd 3 (`sh -c 'exec 3<FILE; exec hutch ...'`).
fn hutch_with(
    who: As,
    cwd: &Path,
    env: &[(&str, &str)],
    fd3: Option<&Path>,
    args: &[&str],
) -> Output {
    let base = hutch_command(who);
    let mut cmd = match fd3 {
        Some(file) => {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", "exec 3<\"$1\"; shift; exec \"$@\"", "sh"])
                .arg(file)
                .arg(base.get_program())
                .args(base.get_args());
            c
        }
        None => base,
    };
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("HUTCH_IMAGE_STORE")
        .env_remove("REGISTRY_AUTH_FILE")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    cmd.output().expect("spawn hutch")
}

#[test]
fn registry_credentials_come_from_a_secret_source_and_never_show() {
    require!(
        ready().is_ok() && have("openssl"),
        "docker-registry, skopeo, openssl"
    );
    let who = caller();
    let s = Setup::new("pull-secret", who, true);
    let store = s.store();
    let store_arg = store.display().to_string();
    let dir = s.t.path().to_path_buf();
    let pull_args = |cred: &str| -> Vec<String> {
        [
            "image",
            "--image-store",
            &store_arg,
            "pull",
            &s.reference,
            "--insecure-registry",
            &s.reg.host,
            "--registry-credential",
            cred,
            "--json",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let no_leak = |o: &Output, secret: &str| {
        assert!(
            !out(o).contains(secret) && !err(o).contains(secret),
            "the credential leaked: {}{}",
            out(o),
            err(o)
        );
    };
    // The value on the command line is refused, and not echoed.
    let a = pull_args(PASSWORD);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[], None, &a);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    no_leak(&o, PASSWORD);
    // A wrong password from a file: refused in the envelope, one line, not shown.
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "wrong-pass-91e2\n").unwrap();
    give(&wrong, who);
    let a = pull_args(&format!("user={USER},from-file={}", wrong.display()));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[], None, &a);
    assert_eq!(o.status.code(), Some(125), "{}", out(&o));
    let envelope: serde_json::Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(envelope["error"]["kind"], "registry", "{envelope}");
    assert!(
        envelope["error"]["what"]
            .as_str()
            .unwrap()
            .contains("Not authorized"),
        "{envelope}"
    );
    no_leak(&o, "wrong-pass-91e2");
    assert_no_image(&store);
    // USER:PASSWORD from the caller's environment.
    let pair = format!("{USER}:{PASSWORD}");
    let a = pull_args("from-env=REG_CRED");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[("REG_CRED", &pair)], None, &a);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(result(&o)["image"]["manifest"], s.digest.as_str());
    no_leak(&o, PASSWORD);
    // The password alone from an inherited fd, with user=.
    let pw = dir.join("pw");
    std::fs::write(&pw, PASSWORD).unwrap();
    give(&pw, who);
    let store2 = dir.join("store2");
    let a = [
        "image",
        "--image-store",
        store2.to_str().unwrap(),
        "pull",
        &s.reference,
        "--insecure-registry",
        &s.reg.host,
        "--registry-credential",
        &format!("user={USER},from-fd=3"),
    ];
    let o = hutch_with(who, &dir, &[], Some(&pw), &a);
    assert!(o.status.success(), "{}", err(&o));
    no_leak(&o, PASSWORD);
    assert_eq!(list(who, &store2).len(), 1);

    // Token auth, through `hutch run --pull missing`: the workload runs and
    // neither it nor any output sees the credential.
    let t = TempDir::new("pull-secret-token", who);
    let reg = Registry::start_token(&t.path().join("registry"));
    let lay = t.path().join("layout");
    layout(&lay, "amd64", "behind a token\n");
    let digest = reg.push_with_creds(lay.to_str().unwrap(), "hutch/test:t");
    give(t.path(), who);
    let reference = format!("{}/hutch/test@{digest}", reg.host);
    let store3 = t.path().join("store").display().to_string();
    let run = [
        "run",
        "--quiet",
        "--image-store",
        &store3,
        "--image",
        &reference,
        "--pull",
        "missing",
        "--insecure-registry",
        &reg.host,
        "--registry-credential",
        "user=puller,from-env=REG_PW",
        "--",
        "/bin/sh",
        "-c",
        "cat /etc/hello; env",
    ];
    let o = hutch_with(who, t.path(), &[("REG_PW", PASSWORD)], None, &run);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).starts_with("behind a token\n"), "{}", out(&o));
    no_leak(&o, PASSWORD);
    // Without the variable: one line naming the variable, nothing pulled.
    let o = hutch_with(who, t.path(), &[], None, &run);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("REG_PW"), "{}", err(&o));
    assert_eq!(err(&o).trim_end().lines().count(), 1, "{}", err(&o));
}

/// A scripted registry for the streaming pull (issue 34): two one-layer
/// images, `good` (layer A) and `other` (layer B, over 1 MiB so it
/// streams in many chunks). `/v2/REPO/blobs/<B>` answers, by REPO:
/// `good` the true blob; `swap` a blob of B's size that is a valid gzip
/// of the same tar (another byte in the gzip header), so it unpacks whole
/// and matches the diff_id, and only its digest differs at the end;
/// `short` B's Content-Length and then half the bytes and a close;
/// `chunked` half the bytes, chunked, and a clean end. Every request's
/// path is counted.
struct StreamRegistry {
    host: String,
    /// Manifest digests of the `good` and the `other` image.
    good: String,
    other: String,
    /// Layer blob digests (A, B) and the swapped blob's digest.
    layer_a: String,
    layer_b: String,
    layer_b_size: usize,
    swapped: String,
    gets: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl StreamRegistry {
    fn gets_of(&self, digest: &str) -> usize {
        let gets = self.gets.lock().unwrap();
        gets.iter()
            .filter(|(p, _)| p.ends_with(&format!("/blobs/{digest}")))
            .map(|(_, n)| n)
            .sum()
    }
}

fn stream_registry() -> StreamRegistry {
    use std::collections::HashMap;
    use std::io::Write;
    let image = |tar: &[u8]| {
        let blob = gzip(tar);
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [sha(tar)]},
        }))
        .unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": sha(&config), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": sha(&blob), "size": blob.len()}],
        }))
        .unwrap();
        (blob, config, manifest)
    };
    let a = Tar::default()
        .dir("etc")
        .file("etc/hello", "image a\n")
        .finish();
    // Text that gzip cannot shrink much: many chunks on the wire.
    let noise: String = (0..200_000u32)
        .map(|i| format!("{:08x}", i.wrapping_mul(2_654_435_761)))
        .collect();
    let b = Tar::default()
        .dir("etc")
        .file("etc/hello", "image b\n")
        .file("etc/noise", &noise)
        .finish();
    let (blob_a, config_a, manifest_a) = image(&a);
    let (blob_b, config_b, manifest_b) = image(&b);
    // The gzip header's OS byte: ignored by every decoder.
    let mut swapped = blob_b.clone();
    swapped[9] ^= 0x01;
    assert_ne!(sha(&swapped), sha(&blob_b));
    let mut objects: HashMap<String, (Vec<u8>, &'static str)> = HashMap::new();
    let mt = "application/vnd.oci.image.manifest.v1+json";
    let bin = "application/octet-stream";
    objects.insert(
        format!("manifests/{}", sha(&manifest_a)),
        (manifest_a.clone(), mt),
    );
    objects.insert(
        format!("manifests/{}", sha(&manifest_b)),
        (manifest_b.clone(), mt),
    );
    for blob in [&blob_a, &config_a, &config_b] {
        objects.insert(format!("blobs/{}", sha(blob)), (blob.clone(), bin));
    }
    let reg = StreamRegistry {
        host: String::new(),
        good: sha(&manifest_a),
        other: sha(&manifest_b),
        layer_a: sha(&blob_a),
        layer_b: sha(&blob_b),
        layer_b_size: blob_b.len(),
        swapped: sha(&swapped),
        gets: Default::default(),
    };
    let gets = reg.gets.clone();
    let layer_b = reg.layer_b.clone();
    let host = loopback_registry(move |path, mut conn| {
        *gets.lock().unwrap().entry(path.to_string()).or_default() += 1;
        let (repo, key) = repo_and_key(path);
        let _ = if key == format!("blobs/{layer_b}") {
            let half = &blob_b[..blob_b.len() / 2];
            match repo.as_str() {
                "swap" => answer_whole(&mut conn, bin, &swapped),
                "short" => (|| {
                    write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nConnection: close\r\n\
                                 Content-Length: {}\r\n\r\n",
                        blob_b.len()
                    )?;
                    conn.write_all(half)
                })(),
                "chunked" => (|| {
                    write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nConnection: close\r\n\
                                 Transfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                        half.len()
                    )?;
                    conn.write_all(half)?;
                    conn.write_all(b"\r\n0\r\n\r\n")
                })(),
                _ => answer_whole(&mut conn, bin, &blob_b),
            }
        } else if let Some((body, ct)) = objects.get(&key) {
            answer_whole(&mut conn, ct, body)
        } else {
            answer_whole(&mut conn, "application/json", b"{}")
        };
    });
    StreamRegistry { host, ..reg }
}

/// Every path below `store` with its size (index.json with its text),
/// but for `locks/` (empty lock files) and the config cache `tmp/pulled/`.
fn store_snapshot(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![store.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(store).unwrap().display().to_string();
            if rel == "locks" || rel == "tmp/pulled" {
                continue;
            }
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
                out.push(format!("{rel}/"));
            } else {
                out.push(format!("{rel} {}", m.len()));
            }
        }
    }
    out.push(std::fs::read_to_string(store.join("index.json")).unwrap_or_default());
    out.sort();
    out
}

#[test]
fn a_layer_refused_after_it_streamed_leaves_the_store_as_before() {
    let who = caller();
    let t = TempDir::new("pull-stream-bad", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let reg = stream_registry();
    let pull_from = |repo: &str, digest: &str| {
        pull(
            who,
            &store,
            &[
                &format!("{}/{repo}/x@{digest}", reg.host),
                "--insecure-registry",
                &reg.host,
            ],
        )
    };
    let o = pull_from("good", &reg.good);
    assert!(o.status.success(), "{}", err(&o));
    let before = store_snapshot(&store);
    let cases = [
        (
            "swap",
            format!(
                "blob {}: the content's digest is {}: the blob was altered or corrupted",
                reg.layer_b, reg.swapped
            ),
        ),
        ("short", format!("blob {}: ", reg.layer_b)),
        (
            "chunked",
            format!(
                "blob {}: {} bytes arrived, but its descriptor says {}",
                reg.layer_b,
                reg.layer_b_size / 2,
                reg.layer_b_size
            ),
        ),
    ];
    for (repo, expect) in cases {
        let o = pull_from(repo, &reg.other);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(125), "{repo}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{repo}: one line: {e}");
        assert!(e.contains(&expect), "{repo}: expected {expect:?} in: {e}");
        // No layer, blob, index entry or staging directory was left.
        assert_eq!(store_snapshot(&store), before, "{repo}: the store changed");
    }
    // The true blob still pulls.
    let o = pull_from("good", &reg.other);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(names_in(&store.join("layers")).len(), 2);
}

#[test]
fn a_layer_is_fetched_once_by_concurrent_pulls_and_never_when_stored() {
    let who = caller();
    let t = TempDir::new("pull-stream-once", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let reg = stream_registry();
    let reference = format!("{}/good/x@{}", reg.host, reg.other);
    pull_at_once(who, &store, &reference, &reg.host, 3);
    assert_eq!(list(who, &store).len(), 1);
    assert_eq!(names_in(&store.join("layers")).len(), 1);
    // One pull streamed the layer; the others found it stored.
    assert_eq!(
        reg.gets_of(&reg.layer_b),
        1,
        "{:?}",
        reg.gets.lock().unwrap()
    );
    let o = pull(
        who,
        &store,
        &[&reference, "--insecure-registry", &reg.host, "--json"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        reg.gets_of(&reg.layer_b),
        1,
        "a stored layer was fetched again"
    );
    assert_eq!(result(&o)["reused"], 1, "{}", out(&o));
    assert_eq!(reg.gets_of(&reg.layer_a), 0);
}

#[test]
fn registry_credentials_come_from_a_profile_and_the_flag_wins() {
    require!(ready().is_ok(), ready().unwrap_err());
    let who = caller();
    let s = Setup::new("pull-profile", who, true);
    let dir = s.t.path().to_path_buf();
    let profile = dir.join("registry.toml");
    std::fs::write(
        &profile,
        format!(
            "[[registry_credentials]]\nregistry = \"{}\"\nuser = \"{USER}\"\nfrom = {{ env = \"REG_PW\" }}\n",
            s.reg.host
        ),
    )
    .unwrap();
    give(&profile, who);
    let store = |n: &str| dir.join(n).display().to_string();
    let pull_args = |store: &str, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "image",
            "--image-store",
            store,
            "pull",
            &s.reference,
            "--insecure-registry",
            &s.reg.host,
            "--profile",
            profile.to_str().unwrap(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        a.extend(extra.iter().map(|a| a.to_string()));
        a
    };
    let no_leak = |o: &Output| {
        assert!(
            !out(o).contains(PASSWORD) && !err(o).contains(PASSWORD),
            "the credential leaked: {}{}",
            out(o),
            err(o)
        );
    };
    // The profile names the source; the value comes from the environment.
    let a = pull_args(&store("s1"), &["--json"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[("REG_PW", PASSWORD)], None, &a);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(result(&o)["image"]["manifest"], s.digest.as_str());
    no_leak(&o);
    // The flag wins over the profile: its wrong password is refused.
    let a = pull_args(
        &store("s2"),
        &[
            "--registry-credential",
            &format!("user={USER},from-env=OTHER_PW"),
        ],
    );
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(
        who,
        &dir,
        &[("REG_PW", PASSWORD), ("OTHER_PW", "wrong-b71c")],
        None,
        &a,
    );
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("Not authorized"), "{}", err(&o));
    assert_no_image(&dir.join("s2"));
    // The profile's variable unset: one line naming it and the entry.
    let a = pull_args(&store("s3"), &[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[], None, &a);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("REG_PW"), "{}", err(&o));
    assert_eq!(err(&o).trim_end().lines().count(), 1, "{}", err(&o));
    // `hutch run --profile ... --pull missing` reads the same entry.
    let s4 = store("s4");
    let run = [
        "run",
        "--quiet",
        "--profile",
        profile.to_str().unwrap(),
        "--image-store",
        &s4,
        "--image",
        &s.reference,
        "--pull",
        "missing",
        "--insecure-registry",
        &s.reg.host,
        "--",
        "/bin/cat",
        "/etc/hello",
    ];
    let o = hutch_with(who, &dir, &[("REG_PW", PASSWORD)], None, &run);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "hello from the registry\n");
    no_leak(&o);
    // A profile that holds a value instead of a source is refused.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[registry_credentials]]\nregistry = \"{}\"\npassword = \"{PASSWORD}\"\nfrom = {{ env = \"REG_PW\" }}\n",
            s.reg.host
        ),
    )
    .unwrap();
    give(&bad, who);
    let mut a = pull_args(&store("s5"), &[]);
    a[8] = bad.display().to_string();
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = hutch_with(who, &dir, &[("REG_PW", PASSWORD)], None, &a);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("registry_credentials[0]"), "{}", err(&o));
    no_leak(&o);
}

/// A registry on loopback serving one three-layer image (busybox and
/// /etc/hello; /etc/b; /etc/c and a new /etc/hello), bottom layer `a`
/// first, under `/v2/good/x/` and `/v2/swap/x/` (where the top layer's
/// blob is sent with its gzip header's OS byte changed: it unpacks to
/// the same tar, but its digest is not the one the manifest names).
///
/// The bottom layer's answer stops halfway until the top layer's answer
/// was sent whole (`good`), or the client hangs up on it, or
/// [`LAYERED_DEADLINE`] passes; then the rest follows. A pull that fetches its layers one
/// after another waits out the deadline before it reads the top layer.
struct LayeredRegistry {
    host: String,
    manifest: String,
    layers: [String; 3],
    state: std::sync::Arc<(std::sync::Mutex<Layered>, std::sync::Condvar)>,
}

const LAYERED_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

#[derive(Default)]
struct Layered {
    /// The top layer's answer was sent whole.
    top_sent: bool,
    /// The bottom layer's answer resumed because the top one was sent.
    bottom_overlapped: bool,
    /// The client hung up on the bottom layer's half-sent answer.
    bottom_cut: bool,
}

impl LayeredRegistry {
    fn state(&self) -> std::sync::MutexGuard<'_, Layered> {
        self.state.0.lock().unwrap()
    }

    /// Whether the client hung up on the bottom layer's answer, waiting
    /// (up to 10 s) for the registry's thread to notice.
    fn bottom_cut(&self) -> bool {
        let (lock, cv) = &*self.state;
        let s = lock.lock().unwrap();
        let (s, _) = cv
            .wait_timeout_while(s, std::time::Duration::from_secs(10), |s| !s.bottom_cut)
            .unwrap();
        s.bottom_cut
    }
}

fn layered_registry() -> LayeredRegistry {
    use std::collections::HashMap;
    use std::io::{Read, Write};
    let tars = [
        Tar::default()
            .busybox(TOOLS)
            .dir("etc")
            .file("etc/hello", "from layer a\n")
            .finish(),
        Tar::default()
            .dir("etc")
            .file("etc/b", "layer b\n")
            .finish(),
        Tar::default()
            .dir("etc")
            .file("etc/c", "layer c\n")
            .file("etc/hello", "from layer c\n")
            .finish(),
    ];
    let blobs: Vec<Vec<u8>> = tars.iter().map(|t| gzip(t)).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": tars.iter().map(|t| sha(t)).collect::<Vec<_>>()},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(&config), "size": config.len()},
        "layers": blobs.iter().map(|b| serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": sha(b), "size": b.len()})).collect::<Vec<_>>(),
    }))
    .unwrap();
    let mut swapped = blobs[2].clone();
    swapped[9] ^= 0x01;
    let layers = [sha(&blobs[0]), sha(&blobs[1]), sha(&blobs[2])];
    let mut objects: HashMap<String, Vec<u8>> = HashMap::new();
    objects.insert(format!("manifests/{}", sha(&manifest)), manifest.clone());
    objects.insert(format!("blobs/{}", sha(&config)), config);
    for b in &blobs {
        objects.insert(format!("blobs/{}", sha(b)), b.clone());
    }
    let state: std::sync::Arc<(std::sync::Mutex<Layered>, std::sync::Condvar)> = Default::default();
    let (bottom, top) = (layers[0].clone(), layers[2].clone());
    let shared = state.clone();
    let host = loopback_registry(move |path, mut conn| {
        let (repo, key) = repo_and_key(path);
        let body: &[u8] = if key == format!("blobs/{top}") && repo == "swap" {
            &swapped
        } else {
            objects.get(&key).map_or(&b"{}"[..], |b| &b[..])
        };
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if key == format!("blobs/{bottom}") {
            let half = body.len() / 2;
            if conn.write_all(&body[..half]).is_err() {
                return;
            }
            // Until the top layer was sent (but for a tampered
            // one: its failure must stop this download), the
            // client hangs up, or the deadline passes.
            let wait_for_top = repo != "swap";
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_millis(50)));
            let until = std::time::Instant::now() + LAYERED_DEADLINE;
            while std::time::Instant::now() < until {
                let (lock, cv) = &*shared;
                let s = lock.lock().unwrap();
                let (mut s, _) = cv
                    .wait_timeout_while(s, std::time::Duration::from_millis(50), |s| {
                        !(s.top_sent && wait_for_top)
                    })
                    .unwrap();
                if s.top_sent && wait_for_top {
                    s.bottom_overlapped = true;
                    break;
                }
                drop(s);
                match conn.read(&mut [0u8; 1]) {
                    Ok(0) => {
                        lock.lock().unwrap().bottom_cut = true;
                        cv.notify_all();
                        return;
                    }
                    Err(e)
                        if !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        lock.lock().unwrap().bottom_cut = true;
                        cv.notify_all();
                        return;
                    }
                    _ => {}
                }
            }
            let _ = conn.write_all(&body[half..]);
        } else if conn.write_all(body).is_ok() && key == format!("blobs/{top}") {
            let _ = conn.flush();
            let (lock, cv) = &*shared;
            lock.lock().unwrap().top_sent = true;
            cv.notify_all();
        }
    });
    LayeredRegistry {
        host,
        manifest: sha(&manifest),
        layers,
        state,
    }
}

#[test]
fn a_multi_layer_image_streams_its_layers_at_once_and_runs() {
    require!(have_busybox(), "/bin/busybox is missing");
    let who = caller();
    let t = TempDir::new("pull-layers", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let reg = layered_registry();
    let reference = format!("{}/good/x@{}", reg.host, reg.manifest);
    let started = std::time::Instant::now();
    let o = pull(
        who,
        &store,
        &[&reference, "--insecure-registry", &reg.host, "--json"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(result(&o)["downloaded"], 4, "{}", out(&o));
    // The top layer arrived while the bottom one was still streaming: on
    // one-at-a-time fetching the bottom layer waits out the deadline.
    assert!(
        reg.state().bottom_overlapped,
        "the top layer was not fetched while the bottom one streamed ({:?})",
        started.elapsed()
    );
    assert_eq!(names_in(&store.join("layers")).len(), 3);
    let o = run_image(
        who,
        &store,
        t.path(),
        &[
            "--image",
            &reference,
            "--",
            "/bin/cat",
            "/etc/hello",
            "/etc/b",
            "/etc/c",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o), "from layer c\nlayer b\nlayer c\n");
}

#[test]
fn a_tampered_upper_layer_stops_the_layers_streaming_beside_it() {
    let who = caller();
    let t = TempDir::new("pull-layers-bad", who);
    give(t.path(), who);
    let store = t.path().join("store");
    let reg = layered_registry();
    let reference = format!("{}/swap/x@{}", reg.host, reg.manifest);
    let started = std::time::Instant::now();
    let o = pull(who, &store, &[&reference, "--insecure-registry", &reg.host]);
    let took = started.elapsed();
    let e = err(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    let expect = format!("blob {}: the content's digest is sha256:", reg.layers[2]);
    assert!(e.contains(&expect), "expected {expect:?} in: {e}");
    // The bottom layer, half arrived when the top one failed, was cut off
    // (not waited for: its second half comes only after the deadline) and
    // left nothing; no image was recorded and no staging directory is
    // left. (The middle layer, whole and verified, may stay stored.)
    assert!(
        took < LAYERED_DEADLINE,
        "the failed pull waited for the stalled bottom layer ({took:?})"
    );
    assert!(
        reg.bottom_cut(),
        "the bottom layer's download was not stopped"
    );
    let index = std::fs::read_to_string(store.join("index.json")).unwrap_or_default();
    assert!(!index.contains("sha256"), "an image was recorded: {index}");
    let layers = names_in(&store.join("layers"));
    assert!(
        !layers.contains(&reg.layers[0][7..].to_string()),
        "the cut-off layer was stored: {layers:?}"
    );
    assert!(
        !layers.contains(&reg.layers[2][7..].to_string()),
        "the tampered layer was stored: {layers:?}"
    );
    let staging: Vec<String> = names_in(&store.join("tmp"))
        .into_iter()
        .filter(|n| n != "pulled")
        .collect();
    assert_eq!(staging, Vec::<String>::new(), "staging left in tmp/");
}

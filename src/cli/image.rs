//! `hutch image ...`: import, list, inspect, remove and collect images in
//! the content-addressed store (`crate::image`).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};

use crate::image::{ImportOptions, Inspection, Outcome, Platform, Store, checks::secret_like};
use crate::spec::ByteSize;

use super::machine::{self, ErrorKind, MachineError};

const USAGE: &str = "usage: hutch image [--image-store DIR] COMMAND ...
  import SRC [--name NAME] [--platform OS/ARCH[/VARIANT]] [--rootfs] [--ref REF]
             [--max-image-size SIZE] [--max-expansion N] [--allow-platform-mismatch] [--allow-volumes]
             [--allow-secret-env] [--allow-devices] [--json]
      SRC: an OCI image layout (directory or tar), a docker-archive (`docker save`),
      or with --rootfs a root filesystem (directory, or tar/tar.gz/tar.zst)
  pull REF@sha256:... [--registry-auth FILE | --registry-credential SOURCE] [--insecure-registry HOST[:PORT]]
             [--platform P] [--allow-unpinned] [--json]
      fetch from a registry by digest (OCI distribution API) and import
  list [--json]                     name, manifest digest, platform, size, layers
  inspect NAME|DIGEST [--platform P] [--approved FILE] [--json]
                                    config, layers, and each check's verdict
  rm NAME|DIGEST [--json]           remove a name (a digest: the image); layers stay until gc
  gc [--json]                       remove layers and blobs no image references

With --json, stdout is one envelope (docs/machine.md), failures included.

The store: --image-store DIR, else $HUTCH_IMAGE_STORE, else /var/lib/hutch/images
(root) or $XDG_DATA_HOME/hutch/images (~/.local/share/hutch/images).";

const EXIT_FAILURE: i32 = 125;

/// The envelope's verb (`image.VERB`) when `--json` was given.
static JSON_VERB: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The command word of `hutch image [--image-store DIR] COMMAND ...`.
fn command_of(args: &[OsString]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--image-store") => {
                it.next();
            }
            Some(s) if s.starts_with('-') => {}
            Some(s) => return Some(s.to_string()),
            None => return None,
        }
    }
    None
}

/// Entry point of `hutch image`.
pub fn main(args: Vec<OsString>) -> i32 {
    if args.iter().any(|a| a == "--json") {
        let verb = match command_of(&args).as_deref() {
            Some("ls") => "list".to_string(),
            Some("remove") => "rm".to_string(),
            Some(c) => c.to_string(),
            None => "?".to_string(),
        };
        let _ = JSON_VERB.set(format!("image.{verb}"));
    }
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain joined, no newlines from anywhere.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("hutch image: {msg}");
            if let Some(verb) = JSON_VERB.get() {
                let m = MachineError::classify_or(&e, ErrorKind::Usage);
                print(&(machine::error_line(verb, &m) + "\n"));
            }
            EXIT_FAILURE
        }
    }
}

fn text(a: &OsString, what: &str) -> Result<String> {
    a.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{what}: not UTF-8"))
}

fn run(args: Vec<OsString>) -> Result<i32> {
    let mut store_dir: Option<PathBuf> = None;
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    let mut command = None;
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--image-store") => {
                store_dir = Some(it.next().context("--image-store needs a directory")?.into())
            }
            Some(s) if s.starts_with("--image-store=") => {
                store_dir = Some(PathBuf::from(&s["--image-store=".len()..]))
            }
            Some("-h" | "--help") if command.is_none() => {
                println!("{USAGE}");
                return Ok(0);
            }
            _ if command.is_none() => command = Some(text(&a, "command")?),
            _ => rest.push(a),
        }
    }
    let Some(command) = command else {
        bail!("a command is needed; see `hutch image --help`");
    };
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", help(&command)?);
        return Ok(0);
    }
    let open = || -> Result<Store> { Ok(Store::open(store_dir.as_deref())?) };
    match command.as_str() {
        "import" => import(open()?, rest),
        "pull" => {
            let json = rest.iter().any(|a| a == "--json");
            let rest: Vec<OsString> = rest.into_iter().filter(|a| a != "--json").collect();
            let (value, human) = super::image_pull::pull(open()?, rest)?;
            if json {
                json_out(&value)?;
            } else {
                print(&human);
            }
            Ok(0)
        }
        "list" | "ls" => list(open()?, rest),
        "inspect" => inspect(open()?, rest),
        "rm" | "remove" => remove(open()?, rest),
        "gc" => gc(open()?, rest),
        other => bail!(
            "unknown command {}; see `hutch image --help`",
            crate::util::quote::display_name(other.as_bytes())
        ),
    }
}

fn help(command: &str) -> Result<&'static str> {
    Ok(match command {
        "import" => {
            "usage: hutch image import SRC [--name NAME] [--platform OS/ARCH[/VARIANT]] [--rootfs]
                         [--ref REF] [--max-image-size SIZE] [--max-expansion N]
                         [--allow-platform-mismatch] [--allow-volumes] [--allow-secret-env]
                         [--allow-devices] [--json]

Imports an OCI image layout (a directory, or a tar of one), a docker-archive
(`docker save`), or with --rootfs a plain root filesystem (a directory, or a
tar, tar.gz or tar.zst) as a one-layer image. Every blob is checked against
its digest and size; each layer is unpacked once, as hostile input (see
docs/images.md). Prints the manifest digest to pin runs to.

  --name NAME          name the image (default: the archive's own name, if any)
  --platform P         the platform to pick and require (default: the host's, linux/amd64)
  --ref REF            which image of a multi-image archive (OCI ref name or RepoTag)
  --max-image-size S   cap on the uncompressed layers (default 16G)
  --max-expansion N    a compressed layer, and the image, may unpack to at most N times
                       their compressed size, or 64M whatever the ratio (default 100)
  --allow-platform-mismatch, --allow-volumes, --allow-secret-env, --allow-devices
                       accept an image the corresponding check refuses"
        }
        "pull" => super::image_pull::HELP,
        "list" | "ls" => {
            "usage: hutch image list [--json]\n\nOne line per image: name(s), manifest digest, platform, size, layer count."
        }
        "inspect" => {
            "usage: hutch image inspect NAME|DIGEST [--platform P] [--approved FILE] [--json]

Shows the image's config (env, cmd, entrypoint, workdir, user), its layers and
the verdict of each check against the platform (default: the host's); with
--approved FILE (one sha256:<64 hex> or REPOSITORY@sha256:<64 hex> a line)
also whether the image is on that approved list.
DIGEST may be a unique prefix of the manifest digest."
        }
        "rm" | "remove" => {
            "usage: hutch image rm NAME|DIGEST

Removes a name; the image goes with its last name, or at once when given by
digest. Its layers and blobs stay until `hutch image gc`. An image a live
session uses (`hutch session create --image`) is not removed."
        }
        "gc" => {
            "usage: hutch image gc\n\nRemoves every layer and blob no image references (an image a live session uses \
             stays), leftovers of interrupted imports, and references of sessions that are gone. \
             Waits for running imports and for sandboxes running an image of the store."
        }
        other => bail!(
            "unknown command {}; see `hutch image --help`",
            crate::util::quote::display_name(other.as_bytes())
        ),
    })
}

fn flag_json(rest: &[OsString]) -> Result<bool> {
    let mut json = false;
    for a in rest {
        match a.to_str() {
            Some("--json") => json = true,
            _ => bail!(
                "unexpected argument {}",
                crate::util::quote::display_name(a.as_encoded_bytes())
            ),
        }
    }
    Ok(json)
}

fn print(s: &str) {
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}

/// The success envelope (docs/machine.md) of this `image` verb.
fn json_out(v: &impl serde::Serialize) -> Result<()> {
    let verb = JSON_VERB.get().map(String::as_str).unwrap_or("image");
    print(&(machine::ok_line(verb, v) + "\n"));
    Ok(())
}

fn import(store: Store, rest: Vec<OsString>) -> Result<i32> {
    let mut opts = ImportOptions::default();
    let mut src: Option<PathBuf> = None;
    let mut json = false;
    let mut it = rest.into_iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<String> {
            let v = it.next().with_context(|| format!("{flag} needs a value"))?;
            text(&v, flag)
        };
        match a.to_str() {
            Some("--name") => opts.name = Some(value("--name")?),
            Some("--platform") => {
                let v = value("--platform")?;
                opts.platform = Some(Platform::parse(&v).map_err(|e| anyhow!("--platform: {e}"))?)
            }
            Some("--ref") => opts.select = Some(value("--ref")?),
            Some("--max-image-size") => {
                let v = value("--max-image-size")?;
                opts.max_image_size = ByteSize::parse(&v)
                    .map_err(|e| anyhow!("--max-image-size: {e}"))?
                    .0
            }
            Some("--max-expansion") => {
                let v = value("--max-expansion")?;
                opts.max_expansion =
                    v.parse::<u64>().ok().filter(|n| *n >= 1).with_context(|| {
                        format!(
                            "--max-expansion {}: a whole ratio of at least 1 (default 100)",
                            crate::util::quote::display_name(v.as_bytes())
                        )
                    })?
            }
            Some("--rootfs") => opts.rootfs = true,
            Some("--allow-platform-mismatch") => opts.overrides.allow_platform_mismatch = true,
            Some("--allow-volumes") => opts.overrides.allow_volumes = true,
            Some("--allow-secret-env") => opts.overrides.allow_secret_env = true,
            Some("--allow-devices") => opts.overrides.allow_devices = true,
            Some("--json") => json = true,
            Some(s) if s.starts_with('-') => bail!(
                "unknown option {}; see `hutch image import --help`",
                crate::util::quote::display_name(s.as_bytes())
            ),
            _ if src.is_none() => src = Some(PathBuf::from(a)),
            _ => bail!("only one SRC may be given"),
        }
    }
    let src = src.context("SRC is needed: an OCI layout, a docker-archive, or --rootfs DIR|TAR")?;
    let report = store
        .import(&src, &opts)
        .with_context(|| format!("import {}", src.display()))?;
    if json {
        json_out(&serde_json::json!({
            "image": report.record,
            "new_layers": report.new_layers,
            "verdicts": report.verdicts,
        }))?;
    } else {
        let r = &report.record;
        let named = if r.names.is_empty() {
            String::new()
        } else {
            format!(" as {}", r.names.join(", "))
        };
        print(&format!(
            "{}\nimported {} image{named}: {}, {} layer(s) ({} new), {}\n",
            r.manifest,
            r.format,
            r.platform,
            r.layers.len(),
            report.new_layers,
            human_size(r.size)
        ));
        for v in &report.verdicts {
            if v.outcome != Outcome::Pass {
                print(&format!(
                    "note: {}: {} ({})\n",
                    v.check,
                    v.detail,
                    v.outcome.word()
                ));
            }
        }
    }
    Ok(0)
}

fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn list(store: Store, rest: Vec<OsString>) -> Result<i32> {
    let json = flag_json(&rest)?;
    let images = store.images()?;
    if json {
        json_out(&images)?;
        return Ok(0);
    }
    let mut out = format!(
        "{:<24} {:<71} {:<14} {:>10} {:>6}\n",
        "NAME", "MANIFEST DIGEST", "PLATFORM", "SIZE", "LAYERS"
    );
    for i in &images {
        let name = if i.names.is_empty() {
            "<none>".to_string()
        } else {
            i.names.join(",")
        };
        out.push_str(&format!(
            "{:<24} {:<71} {:<14} {:>10} {:>6}\n",
            name,
            i.manifest.to_string(),
            i.platform.to_string(),
            human_size(i.size),
            i.layers.len()
        ));
    }
    print(&out);
    Ok(0)
}

fn inspect(store: Store, rest: Vec<OsString>) -> Result<i32> {
    let mut json = false;
    let mut want = Platform::host();
    let mut target: Option<String> = None;
    let mut approved: Option<Vec<String>> = None;
    let mut it = rest.into_iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--json") => json = true,
            Some("--approved") => {
                let v = it.next().context("--approved needs a file")?;
                approved = Some(
                    crate::image::approved::read_file(std::path::Path::new(&v))
                        .context("--approved")?,
                );
            }
            Some("--platform") => {
                let v = it.next().context("--platform needs a value")?;
                want = Platform::parse(&text(&v, "--platform")?)
                    .map_err(|e| anyhow!("--platform: {e}"))?;
            }
            Some(s) if s.starts_with('-') => bail!(
                "unknown option {}",
                crate::util::quote::display_name(s.as_bytes())
            ),
            _ if target.is_none() => target = Some(text(&a, "NAME|DIGEST")?),
            _ => bail!("only one NAME|DIGEST may be given"),
        }
    }
    let target = target.context("NAME|DIGEST is needed")?;
    let ins = store.inspect(&target, &want, approved.as_deref())?;
    if json {
        json_out(&ins)?;
    } else {
        print(&render(&store, &ins));
    }
    Ok(0)
}

/// Env with secret-like values masked, every string quoted as data.
fn shown_env(kv: &str) -> String {
    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
    let v = if secret_like(k) { "<redacted>" } else { v };
    crate::util::quote::display_name(format!("{k}={v}").as_bytes())
}

fn words(list: &[String]) -> String {
    if list.is_empty() {
        return "(none)".into();
    }
    list.iter()
        .map(|w| crate::util::quote::display_name(w.as_bytes()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render(store: &Store, ins: &Inspection) -> String {
    let i = &ins.image;
    let c = &ins.config;
    let dn = |s: &str| {
        if s.is_empty() {
            "(none)".to_string()
        } else {
            crate::util::quote::display_name(s.as_bytes())
        }
    };
    let mut out = String::new();
    out.push_str(&format!("manifest    {}\n", i.manifest));
    out.push_str(&format!("config      {}\n", i.config));
    out.push_str(&format!(
        "names       {}\n",
        if i.names.is_empty() {
            "(none)".into()
        } else {
            i.names.join(" ")
        }
    ));
    out.push_str(&format!("platform    {}\n", i.platform));
    out.push_str(&format!("format      {}\n", i.format));
    out.push_str(&format!(
        "size        {} in {} layer(s)\n",
        human_size(i.size),
        i.layers.len()
    ));
    out.push_str(&format!("entrypoint  {}\n", words(&c.entrypoint)));
    out.push_str(&format!("cmd         {}\n", words(&c.cmd)));
    out.push_str(&format!("workdir     {}\n", dn(&c.working_dir)));
    out.push_str(&format!("user        {}\n", dn(&c.user)));
    if c.env.is_empty() {
        out.push_str("env         (none)\n");
    }
    for (n, kv) in c.env.iter().enumerate() {
        out.push_str(&format!(
            "{}{}\n",
            if n == 0 {
                "env         "
            } else {
                "            "
            },
            shown_env(kv)
        ));
    }
    out.push_str("layers (bottom to top)\n");
    for (n, l) in ins.layers.iter().enumerate() {
        let owners = if l.owners_kept {
            "owners kept".to_string()
        } else {
            format!(
                "files owned by uid {} (archive owners recorded)",
                l.unpacked_by
            )
        };
        out.push_str(&format!(
            "  {:>2} {}  {}, {} entries, {:?}, opaque xattr {}, {owners}{}\n",
            n + 1,
            l.digest,
            human_size(l.summary.file_bytes),
            l.summary.entries,
            l.compression,
            l.opaque_xattr.name().to_string_lossy(),
            if l.summary.root_opaque {
                ", opaque root"
            } else {
                ""
            }
        ));
    }
    out.push_str("checks\n");
    for v in &ins.verdicts {
        let flag = v
            .override_flag
            .as_deref()
            .filter(|_| v.outcome == Outcome::Refused)
            .map(|f| format!(" (override: {f})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {:<11} {:<10} {}{flag}\n",
            v.check,
            v.outcome.word(),
            v.detail
        ));
    }
    out.push_str(&format!("store       {}\n", store.root().display()));
    out
}

fn remove(store: Store, rest: Vec<OsString>) -> Result<i32> {
    let json = rest.iter().any(|a| a == "--json");
    let rest: Vec<&OsString> = rest.iter().filter(|a| *a != "--json").collect();
    let [target] = rest.as_slice() else {
        bail!("exactly one NAME|DIGEST is needed");
    };
    let target = text(target, "NAME|DIGEST")?;
    let r = store.remove(&target)?;
    if json {
        json_out(&r)?;
    } else if r.image_removed {
        print(&format!(
            "removed image {}{}; run `hutch image gc` to free its layers\n",
            r.manifest,
            if r.names.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.names.join(", "))
            }
        ));
    } else {
        print(&format!(
            "removed name {} of {}\n",
            r.names.join(", "),
            r.manifest
        ));
    }
    Ok(0)
}

fn gc(store: Store, rest: Vec<OsString>) -> Result<i32> {
    let json = flag_json(&rest)?;
    let r = store.gc()?;
    if json {
        json_out(&r)?;
    } else {
        print(&format!(
            "removed {} layer(s), {} blob(s), {} staging leftover(s), {} stale session reference(s)\n",
            r.layers.len(),
            r.blobs.len(),
            r.staging,
            r.stale_refs
        ));
    }
    Ok(0)
}

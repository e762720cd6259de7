//! A run with a container image (`Spec.image`, see `docs/images.md`):
//! before clone, the reference is resolved in the store (pinned, checked),
//! the store lock is taken shared for the sandbox's whole life (so `image
//! gc` waits for it), the config's defaults are applied under the Spec
//! (env, working directory, user, command), the id maps are chosen from
//! the layers' owners and the workload's ids, and the layers become the
//! lowers of the overlay that is the new root. After clone, the supervisor
//! writes subordinate maps (through newuidmap/newgidmap for an
//! unprivileged caller) and, for root, hands the layers over as idmapped
//! mounts.

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{range, subid};
use crate::image::{self, ResolvedImage, Store, unpack::OpaqueXattr};
use crate::launch::error::LaunchError;
use crate::launch::plan::{DEFAULT_ROOT_HOST_ID, Extent, Ids, Subordinate};
use crate::spec::{DEFAULT_PATH, ImageRef, Spec};
use crate::sys::{self};

/// What the exit report says about the image (`enforced.image`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageReport {
    /// The manifest that ran (also when resolved by a bare name).
    pub manifest_digest: String,
    pub config_digest: String,
    pub platform: String,
    /// False when a bare name was resolved (`allow_unpinned`).
    pub pinned: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Layers stacked (those an opaque layer root hides are left out).
    pub layers: usize,
    pub store: PathBuf,
    /// `kept`: files show the owners the archive gave them (root's
    /// imports, idmapped); `caller`: an unprivileged import's files, which
    /// all belong to the caller and show as root's.
    pub owners: String,
    /// `single` (one id), `subordinate` (a range of /etc/subuid) or
    /// `private` (a range hutch allocated: docs/images.md, "Id ranges").
    pub id_map: String,
    /// The first host id of a `private` range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_range_start: Option<u32>,
}

/// A prepared image run: the ids, the layers (top first) and what the
/// supervisor keeps (the Spec with the image's defaults applied, the
/// store lock, the report).
pub(crate) struct Prepared {
    pub ids: Ids,
    /// A private id range (root without /etc/subuid ranges), held by the
    /// plan until the sandbox is gone.
    pub id_range: Option<range::Allocation>,
    pub lowers: Vec<PathBuf>,
    pub held: Held,
}

/// Kept by the supervisor until the sandbox is gone.
pub(crate) struct Held {
    /// The Spec as launched: the image's Env, WorkingDir, User and command
    /// applied (what failure lines describe).
    pub spec: Spec,
    pub report: ImageReport,
    _lock: image::Lock,
}

fn refused(r: &ImageRef, why: impl std::fmt::Display) -> LaunchError {
    let shown = crate::util::quote::display_name(image::spec::reference(r).as_bytes());
    LaunchError::Image(format!("image {shown}: {why}"))
}

/// Resolve `spec.image` (None: no image) and apply its config.
pub(crate) fn prepare(spec: &Spec) -> Result<Option<Prepared>, LaunchError> {
    let Some(r) = &spec.image else {
        return Ok(None);
    };
    let store = Store::open_existing(r.store.as_deref()).map_err(|e| refused(r, e))?;
    // Held before resolving: a gc that runs now finishes first, and none
    // can start until the sandbox is gone.
    let lock = store.hold().map_err(|e| refused(r, e))?;
    let platform = image::spec::platform(r).map_err(|e| refused(r, e))?;
    let img = store
        .resolve(
            &image::spec::reference(r),
            &platform,
            &image::spec::overrides(r),
        )
        .map_err(|e| refused(r, e))?;
    let shown = |e: String| LaunchError::Image(format!("image {}: {e}", img.manifest_digest));
    let caller = (sys::geteuid(), nix::unistd::getegid().as_raw());
    for l in &img.layers {
        if l.opaque_xattr == OpaqueXattr::Trusted && l.opaque_dirs > 0 {
            return Err(shown(format!(
                "layer {} marks its opaque directories with trusted.overlay.opaque (an earlier \
                 hutch's root import), which overlays in a user namespace do not read: remove \
                 the image, `hutch image gc`, and import it again",
                l.digest
            )));
        }
        // The store is the caller's and closed to others, but a damaged
        // one (a layer tree gone, or replaced by a link) must not become
        // some other root: the tree is a real directory, never followed.
        match std::fs::symlink_metadata(&l.dir) {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(shown(format!(
                    "layer {} has no unpacked tree in the store (missing or not a directory): \
                     remove the image, `hutch image gc`, and import it again",
                    l.digest
                )));
            }
        }
        if caller.0 != 0 && (l.owners_kept || l.unpacked_by != caller.0) {
            return Err(shown(format!(
                "layer {} was unpacked by uid {}, not by you (uid {})",
                l.digest, l.unpacked_by, caller.0
            )));
        }
    }
    let mut eff = spec.clone();
    apply_config(&mut eff, &img, r).map_err(shown)?;
    let session = match &spec.identity.id_range {
        Some(crate::spec::IdRange::Session { start, session }) => Some((*start, session.as_path())),
        _ => None,
    };
    let (ids, id_range) = ids(&eff, &img, caller, session).map_err(shown)?;
    let report = ImageReport {
        manifest_digest: img.manifest_digest.to_string(),
        config_digest: img.config_digest.to_string(),
        platform: img.platform.to_string(),
        pinned: img.pinned,
        names: img.names.clone(),
        layers: img.layers.len(),
        store: store.root().to_path_buf(),
        owners: if caller.0 == 0 { "kept" } else { "caller" }.into(),
        id_map: match (&id_range, &ids.subordinate) {
            (Some(_), _) => "private",
            (None, Some(_)) => "subordinate",
            (None, None) => "single",
        }
        .into(),
        id_range_start: id_range.as_ref().map(range::Allocation::start),
    };
    Ok(Some(Prepared {
        ids,
        id_range,
        lowers: img.layers.iter().rev().map(|l| l.dir.clone()).collect(),
        held: Held {
            spec: eff,
            report,
            _lock: lock,
        },
    }))
}

/// The config's defaults under the Spec: env (PATH and HOME defaulted,
/// then the image's Env, then the Spec's own), working directory, user,
/// and the command when the Spec has none (Entrypoint + Cmd).
fn apply_config(spec: &mut Spec, img: &ResolvedImage, r: &ImageRef) -> Result<(), String> {
    let nul = |what: &str| format!("the image config's {what} holds a NUL byte");
    let mut env = std::collections::BTreeMap::new();
    env.insert("PATH".to_string(), DEFAULT_PATH.to_string());
    env.insert("HOME".to_string(), "/tmp".to_string());
    let proxied = matches!(spec.network, crate::spec::Network::Proxy(_));
    for (i, kv) in img.env.iter().enumerate() {
        if kv.contains('\0') {
            return Err(nul(&format!("Env[{i}]")));
        }
        match kv.split_once('=') {
            // An image's default neither comes back over the caller's
            // `unset_env` nor points the sandbox away from hutch's proxy.
            Some((k, _))
                if spec.unset_env.contains(k) || (proxied && crate::net::is_proxy_variable(k)) => {}
            Some((k, v)) if !k.is_empty() => {
                env.insert(k.to_string(), v.to_string());
            }
            _ => return Err(format!("the image config's Env[{i}] is not KEY=VALUE")),
        }
    }
    env.append(&mut spec.env);
    spec.env = env;

    if let Some(wd) = &img.working_dir {
        if wd.contains('\0') {
            return Err(nul("WorkingDir"));
        }
        let p = Path::new(wd);
        if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(
                "the image config's WorkingDir is not an absolute path without `..`".into(),
            );
        }
        // `/` is what an empty WorkingDir means and what many builders
        // write out: it names no place, so the workspace stays the cwd.
        if (r.use_working_dir && p != Path::new("/")) || spec.cwd.is_none() {
            spec.cwd = Some(p.to_path_buf());
            // As container runtimes do, a WorkingDir the image lacks is
            // made (in the root's discarded upper).
            if !in_layers(img, p) {
                spec.fs.push(crate::spec::FsOp::Dir {
                    dest: p.to_path_buf(),
                    mode: None,
                });
            }
        }
    }

    if spec.command.is_empty() {
        let argv: Vec<String> = img.entrypoint.iter().chain(&img.cmd).cloned().collect();
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(nul("Entrypoint or Cmd"));
        }
        if argv.is_empty() {
            return Err(
                "no command given, and the image config has neither Entrypoint nor Cmd".into(),
            );
        }
        spec.command = argv;
    }

    let id = &spec.identity;
    if id.uid.is_none() || id.gid.is_none() {
        let layers: Vec<(&Path, OpaqueXattr)> = img
            .layers
            .iter()
            .map(|l| (l.dir.as_path(), l.opaque_xattr))
            .collect();
        let (u, g) = image::passwd::resolve_user(img.user.as_deref().unwrap_or(""), &layers)
            .map_err(|e| e.to_string())?;
        spec.identity.uid.get_or_insert(u);
        spec.identity.gid.get_or_insert(g);
    }
    Ok(())
}

/// Whether some layer has `dir` (absolute) as a directory, looked up below
/// each layer's root without following any link.
fn in_layers(img: &ResolvedImage, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    if rel.as_os_str().is_empty() {
        return true;
    }
    let Ok(rel) = std::ffi::CString::new(rel.as_os_str().as_bytes()) else {
        return false;
    };
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    img.layers.iter().any(|l| {
        sys::open_dir_path(&l.dir)
            .and_then(|root| sys::openat2(Some(root.as_fd()), &rel, flags, 0, sys::RESOLVE_STRICT))
            .is_ok()
    })
}

/// The ids of an image run. One id when the layers' files and the
/// workload need only one; otherwise a subordinate range, or a refusal
/// saying what to configure.
fn ids(
    spec: &Spec,
    img: &ResolvedImage,
    caller: (u32, u32),
    session: Option<(u32, &Path)>,
) -> Result<(Ids, Option<range::Allocation>), String> {
    let (uid, gid) = (
        spec.identity.uid.unwrap_or(0),
        spec.identity.gid.unwrap_or(0),
    );
    let root = caller.0 == 0;
    // The ids the layers' files show inside: a root import's are the
    // archive's (the layers are idmapped 1:1 through the sandbox's own
    // map); an unprivileged import's are all the caller's, shown as 0.
    let mut file_uids = BTreeSet::new();
    let mut file_gids = BTreeSet::new();
    for l in &img.layers {
        if root && l.owners_kept {
            file_uids.extend(l.uids.iter().copied());
            file_gids.extend(l.gids.iter().copied());
        } else if root {
            file_uids.insert(l.unpacked_by);
        } else {
            file_uids.insert(0);
            file_gids.insert(0);
        }
    }
    let mut need_u = file_uids.clone();
    need_u.insert(uid);
    let mut need_g = file_gids.clone();
    need_g.insert(gid);
    let list = |s: &BTreeSet<u32>| {
        let v: Vec<String> = s.iter().take(8).map(u32::to_string).collect();
        let more = if s.len() > 8 { " ..." } else { "" };
        format!("{}{more}", v.join(","))
    };
    let single = need_u.len() == 1 && need_g.len() == 1;
    let host_ids = spec.identity.host_uid.is_some() || spec.identity.host_gid.is_some();
    if root && single {
        return Ok((Ids {
            inside_uid: uid,
            inside_gid: gid,
            host_uid: spec.identity.host_uid.unwrap_or(DEFAULT_ROOT_HOST_ID),
            host_gid: spec.identity.host_gid.unwrap_or(DEFAULT_ROOT_HOST_ID),
            root_launch: true,
            clear_groups: true,
            subordinate: None,
            // Completed by prepare (`Ids::for_image`).
            init_ids: None,
            workload_ids: None,
            maps: None,
        }, None));
    }
    if !root && single {
        if host_ids {
            return Err(
                "only root can choose the host id the sandbox runs as (identity.host_uid)".into(),
            );
        }
        return Ok((Ids {
            inside_uid: 0,
            inside_gid: 0,
            host_uid: caller.0,
            host_gid: caller.1,
            root_launch: false,
            clear_groups: false,
            subordinate: None,
            // Completed by prepare (`Ids::for_image`).
            init_ids: None,
            workload_ids: None,
            maps: None,
        }, None));
    }
    if host_ids {
        return Err(format!(
            "identity.host_uid/host_gid name one host id, but this run needs a range (files owned \
             by uids {} and gids {}, the workload {uid}:{gid})",
            list(&file_uids),
            list(&file_gids)
        ));
    }
    ranged(
        uid,
        gid,
        &need_u,
        &need_g,
        caller,
        session,
        Some("run as root inside (--uid 0 --gid 0)"),
    )
}

/// The ids of a run that maps a range (an image's several owners, or
/// `identity.id_range = "private"`): the ids in `need_u`/`need_g` must
/// fit. Root: its /etc/subuid and /etc/subgid ranges, else a private range
/// (`session`'s when a session holds one); unprivileged: the caller's own
/// range through newuidmap/newgidmap, or a refusal naming the line to add
/// (and `alternative`, another way out).
#[allow(clippy::too_many_arguments)]
pub(super) fn ranged(
    uid: u32,
    gid: u32,
    need_u: &BTreeSet<u32>,
    need_g: &BTreeSet<u32>,
    caller: (u32, u32),
    session: Option<(u32, &Path)>,
    alternative: Option<&str>,
) -> Result<(Ids, Option<range::Allocation>), String> {
    let (need_u, need_g) = (need_u.clone(), need_g.clone());
    let root = caller.0 == 0;
    let subuid = Path::new("/etc/subuid");
    let subgid = Path::new("/etc/subgid");
    if root {
        // Root's own ranges win; without them, a private range (a
        // session's again for each of its commands).
        let (ru, rg, allocation) = match (
            subid::range_for(subuid, Some("root"), 0),
            subid::range_for(subgid, Some("root"), 0),
        ) {
            (Some(ru), Some(rg)) => (ru, rg, None),
            _ => {
                let a = match session {
                    Some((start, dir)) => range::Allocation::resume(start, dir),
                    None => range::Allocation::allocate(),
                }
                .map_err(|e| e.to_string())?;
                let r = subid::Range {
                    start: a.start(),
                    count: range::RANGE_SIZE,
                };
                (r, r, Some(a))
            }
        };
        let (fu, fg) = if allocation.is_some() {
            (
                "a private range (docs/images.md)",
                "a private range (docs/images.md)",
            )
        } else {
            ("/etc/subuid", "/etc/subgid")
        };
        check_fits(&need_u, ru.count, "uid", fu)?;
        check_fits(&need_g, rg.count, "gid", fg)?;
        let e = |r: subid::Range| Extent {
            inside: 0,
            host: r.start,
            count: r.count,
        };
        let s = Subordinate {
            uid: [e(ru), Extent::default()],
            gid: [e(rg), Extent::default()],
            len: 1,
            helpers: false,
        };
        return Ok((
            Ids {
                inside_uid: uid,
                inside_gid: gid,
                host_uid: ru.start + uid,
                host_gid: rg.start + gid,
                root_launch: true,
                clear_groups: true,
                subordinate: Some(s),
                // Completed by prepare (`Ids::for_image`).
                init_ids: None,
                workload_ids: None,
                maps: None,
            },
            allocation,
        ));
    }
    let name = subid::user_name(caller.0);
    let shown_name = name.clone().unwrap_or_else(|| caller.0.to_string());
    let (Some(ru), Some(rg)) = (
        subid::range_for(subuid, name.as_deref(), caller.0),
        subid::range_for(subgid, name.as_deref(), caller.1),
    ) else {
        let why = match alternative {
            Some(_) => format!("the workload runs as {uid}:{gid}, not root"),
            None => "a private id range is asked for".to_string(),
        };
        return Err(format!(
            "{why}: an unprivileged launch maps only your \
             own id (uid {}, root inside) unless /etc/subuid and /etc/subgid give {shown_name} a \
             subordinate range (e.g. `{shown_name}:100000:65536`) for newuidmap/newgidmap \
             (package uidmap) to map; add one (as root){}",
            caller.0,
            alternative.map(|a| format!(", or {a}")).unwrap_or_default()
        ));
    };
    // Inside 0 is the caller; 1..=count the range.
    check_fits(&need_u, ru.count.saturating_add(1), "uid", "/etc/subuid")?;
    check_fits(&need_g, rg.count.saturating_add(1), "gid", "/etc/subgid")?;
    if subid::helper("newuidmap").is_none() || subid::helper("newgidmap").is_none() {
        return Err(
            "mapping a subordinate range needs newuidmap and newgidmap (package uidmap)".into(),
        );
    }
    let two = |own: u32, r: subid::Range| {
        [
            Extent {
                inside: 0,
                host: own,
                count: 1,
            },
            Extent {
                inside: 1,
                host: r.start,
                count: r.count,
            },
        ]
    };
    let s = Subordinate {
        uid: two(caller.0, ru),
        gid: two(caller.1, rg),
        len: 2,
        helpers: true,
    };
    Ok((Ids {
        inside_uid: uid,
        inside_gid: gid,
        host_uid: Subordinate::host_of(&s.uid, uid).unwrap_or(caller.0),
        host_gid: Subordinate::host_of(&s.gid, gid).unwrap_or(caller.1),
        root_launch: false,
        clear_groups: true,
        subordinate: Some(s),
        // Completed by prepare (`Ids::for_image`).
        init_ids: None,
        workload_ids: None,
        maps: None,
    }, None))
}

fn check_fits(need: &BTreeSet<u32>, count: u32, what: &str, file: &str) -> Result<(), String> {
    match need.iter().find(|id| **id >= count) {
        Some(id) => Err(format!(
            "{what} {id} is needed inside, but the subordinate range of {file} maps only {count} \
             ids; give a larger range"
        )),
        None => Ok(()),
    }
}

/// The image's layers become the lowers of the new root (top first).
/// Root launches get them from the supervisor as idmapped mounts.
pub(crate) fn add_lowers(plan: &mut crate::fs::Plan, prepared: &Prepared) {
    crate::fs::plan::add_image_lowers(plan, &prepared.lowers, prepared.ids.root_launch);
}

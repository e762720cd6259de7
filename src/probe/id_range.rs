//! `id_range`: whether an image run that needs more than one id can map
//! them (`docs/images.md`, "Id ranges"). Root: its own /etc/subuid and
//! /etc/subgid ranges when it has them, else a private range from hutch's
//! region (how many are held now, and that one is free). Unprivileged:
//! the caller's /etc/subuid and /etc/subgid ranges and newuidmap /
//! newgidmap. Optional: single-owner images need none.

use std::path::Path;

use super::{Feature, HostSettings, Status};
use crate::launch::prepare_range as range;
use crate::launch::prepare_subid as subid;

const NAME: &str = "id_range";

pub(super) fn probe(host: &HostSettings) -> Feature {
    let (subuid, subgid) = (Path::new("/etc/subuid"), Path::new("/etc/subgid"));
    if host.uid == 0 {
        if let (Some(u), Some(g)) = (
            subid::range_for(subuid, Some("root"), 0),
            subid::range_for(subgid, Some("root"), 0),
        ) {
            return Feature::ok(
                NAME,
                false,
                format!(
                    "root's ranges of /etc/subuid ({}+{}) and /etc/subgid ({}+{}) map images of several owners",
                    u.start, u.count, g.start, g.count
                ),
            );
        }
        return match range::survey() {
            Ok((held, Some(free))) => Feature::ok(
                NAME,
                false,
                format!(
                    "private 65536-id ranges from {:#x}..{:#x} for images of several owners: {held} held now, {free:#x} free",
                    range::REGION_START,
                    range::REGION_END
                ),
            ),
            Ok((held, None)) => Feature::bad(
                NAME,
                false,
                Status::Restricted,
                format!("every private id range is taken ({held} held by sandboxes)"),
                "end some sandboxes or sessions, or give root a range in /etc/subuid and /etc/subgid",
            ),
            Err(e) => Feature::bad(NAME, false, Status::Restricted, e.to_string(), ""),
        };
    }
    let name = subid::user_name(host.uid);
    let shown = name.clone().unwrap_or_else(|| host.uid.to_string());
    let ranges = (
        subid::range_for(subuid, name.as_deref(), host.uid),
        subid::range_for(subgid, name.as_deref(), host.gid),
    );
    let helpers = subid::helper("newuidmap").is_some() && subid::helper("newgidmap").is_some();
    let fix = format!(
        "add `{shown}:100000:65536` to /etc/subuid and /etc/subgid (as root){}",
        if helpers {
            ""
        } else {
            " and install package uidmap"
        }
    );
    match ranges {
        (Some(u), Some(g)) if helpers => Feature::ok(
            NAME,
            false,
            format!(
                "your ranges of /etc/subuid ({}+{}) and /etc/subgid ({}+{}), through newuidmap/newgidmap, map images of several owners",
                u.start, u.count, g.start, g.count
            ),
        ),
        (Some(_), Some(_)) => Feature::bad(
            NAME,
            false,
            Status::Restricted,
            "newuidmap/newgidmap not found: images of several owners or an image user are refused",
            "install package uidmap",
        ),
        _ => Feature::bad(
            NAME,
            false,
            Status::Restricted,
            format!(
                "{shown} has no range in /etc/subuid and /etc/subgid: images of several owners or an image user are refused"
            ),
            fix,
        ),
    }
}

//! `systemctl list-units --all --no-pager` (and `--plain`), `systemctl is-active`, and
//! `systemctl list-unit-files` (whether a unit starts at boot).
//!
//! A unit line is `[●] NAME LOAD ACTIVE SUB DESCRIPTION...`; the legend and the
//! footer ("LOAD   = ...", "N loaded units listed.") are skipped.

use serde::Serialize;

/// One unit line of `systemctl list-units`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unit {
    /// Full unit name (`firewalld.service`).
    pub name: String,
    /// LOAD column: `loaded`, `not-found`, `masked`, `error`, `bad-setting`.
    pub load: String,
    /// ACTIVE column: `active`, `inactive`, `failed`, `activating`, ...
    pub active: String,
    /// SUB column: the unit type's own state (`running`, `exited`, `dead`).
    pub sub: String,
    /// Line number (1-based) in the listing, for evidence.
    pub line: u32,
}

impl Unit {
    /// Whether systemd reports the unit `active` (running, or exited after starting).
    pub fn is_active(&self) -> bool {
        self.active == "active"
    }
}

/// Reads the unit lines of a `systemctl list-units` listing (with or without the `●`
/// bullet); legend, header and footer lines are skipped.
pub fn list_units(text: &str) -> Vec<Unit> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let mut w = l.split_whitespace().skip_while(|w| *w == "●" || *w == "*");
            let name = w.next()?;
            let (load, active, sub) = (w.next()?, w.next()?, w.next()?);
            let is_unit = name.contains('.')
                && matches!(
                    load,
                    "loaded" | "not-found" | "masked" | "error" | "bad-setting"
                )
                && !name.starts_with("UNIT");
            is_unit.then(|| Unit {
                name: name.to_string(),
                load: load.to_string(),
                active: active.to_string(),
                sub: sub.to_string(),
                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// One line of `systemctl list-unit-files`: `NAME STATE [PRESET]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnitFile {
    /// `ufw.service`.
    pub name: String,
    /// `enabled`, `disabled`, `masked`, `static`, `alias`, ... as printed.
    pub state: String,
    /// 1-based line in the output.
    pub line: u32,
}

impl UnitFile {
    /// Starts at boot (`enabled`, `enabled-runtime`, `alias` of an enabled unit is not
    /// told apart, so only the first two).
    pub fn is_enabled(&self) -> bool {
        matches!(self.state.as_str(), "enabled" | "enabled-runtime")
    }
}

/// `systemctl list-unit-files [--no-legend]`: the header (`UNIT FILE STATE ...`) and the
/// footer (`N unit files listed.`) are skipped.
pub fn list_unit_files(text: &str) -> Vec<UnitFile> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            let state = w.next()?;
            let is_unit = name.contains('.')
                && !name.starts_with("UNIT")
                && state.chars().all(|c| c.is_ascii_lowercase() || c == '-');
            is_unit.then(|| UnitFile {
                name: name.to_string(),
                state: state.to_string(),
                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unit_files_with_header_footer_and_preset() {
        let u = super::list_unit_files(
            "UNIT FILE                    STATE    PRESET\n\
             firewalld.service            disabled enabled\n\
             ufw.service                  enabled  enabled\n\
             netfilter-persistent.service masked   enabled\n\
             \n\
             3 unit files listed.\n",
        );
        let got: Vec<(&str, &str, bool)> = u
            .iter()
            .map(|u| (u.name.as_str(), u.state.as_str(), u.is_enabled()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("firewalld.service", "disabled", false),
                ("ufw.service", "enabled", true),
                ("netfilter-persistent.service", "masked", false)
            ]
        );
        assert_eq!(u[1].line, 3);
    }

    #[test]
    fn units_with_and_without_bullets() {
        let u = super::list_units(
            "  UNIT                 LOAD   ACTIVE SUB     DESCRIPTION\n\
             ● firewalld.service    loaded active running firewalld - dynamic firewall daemon\n\
               ufw.service          loaded inactive dead  Uncomplicated firewall\n\
               illumio-ven.service  not-found inactive dead illumio-ven.service\n\
             LOAD   = Reflects whether the unit definition was properly loaded.\n\
             3 loaded units listed.\n",
        );
        assert_eq!(u.len(), 3);
        assert!(u[0].is_active());
        assert_eq!(u[0].name, "firewalld.service");
        assert_eq!(u[1].active, "inactive");
        assert_eq!(u[2].load, "not-found");
    }
}

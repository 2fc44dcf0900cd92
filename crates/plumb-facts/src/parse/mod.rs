//! Pure parsers for the text outputs a node or a support bundle gives. Each takes the
//! whole text and returns what it recognised with line numbers; none panics (fuzzed).

pub mod health;
pub mod logs;
pub mod lsmod;
pub mod ps;
pub mod rke2;
pub mod ss;
pub mod sysctl;
pub mod systemd;
pub mod ufw;

/// Runs every parser above on `text` and drops the results: the one list the
/// never-panics proptest and the `facts_text` fuzz target share, so a new parser is
/// exercised by both once it is added here.
#[doc(hidden)]
pub fn run_every_parser(text: &str) {
    let _ = sysctl::parse(text);
    let _ = lsmod::parse(text);
    let _ = ss::parse(text);
    let _ = ufw::parse(text);
    let _ = systemd::list_units(text);
    let _ = ps::parse(text);
    let lines = logs::cri_lines(text);
    for l in &lines {
        let _ = logs::signal(&l.text);
        let _ = logs::klog(&l.text);
        let _ = logs::dial_target(&l.text);
        let _ = logs::probe_status(&l.text);
        let _ = logs::probe_kind(&l.text);
        let _ = logs::subject_container(&l.text);
    }
    let _ = crate::cluster::settings_in(text, "text");
    // The timeline reads every line's time (CRI, ISO, syslog, klog, audit stamps).
    let facts = crate::Facts {
        node_logs: vec![crate::LogFile {
            signals: lines
                .into_iter()
                .map(|l| (logs::Signal::ProbeFailed, l))
                .collect(),
            ..crate::LogFile::default()
        }],
        ..crate::Facts::default()
    };
    let _ = crate::timeline::build(&facts);
    let _ = health::parse(text);
    let _ = rke2::parse_config(text);
    let _ = rke2::parse_probe_paths(text);
}

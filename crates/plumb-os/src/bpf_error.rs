//! Why the kernel refused to load or attach one of plumb's own eBPF programs (the drop
//! probe of `observe`, the writer probe of `watch`): the step, the errno, what that
//! errno means for a BTF tracepoint program, and the loader's whole message. One type
//! for both programs, so they explain a refusal the same way.

use std::error::Error;
use std::fmt;
use std::io;

/// The kernel refused a step of loading a program: "load", "attach" or "map".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What was being done: "load", "attach", "map".
    pub stage: &'static str,
    /// The errno the kernel returned, when known.
    pub errno: Option<i32>,
    /// What that errno means here.
    pub meaning: String,
    /// The loader's message (with the verifier's log on a load failure).
    pub detail: String,
}

impl Refusal {
    /// From a loader's error and its sources: the first `io::Error` gives the errno,
    /// and the messages are joined (a message already holding its source's is kept
    /// once). `tracepoint` names the program's tracepoint, for ENOENT.
    pub fn from_error(stage: &'static str, tracepoint: &str, e: &(dyn Error + 'static)) -> Refusal {
        let mut errno = None;
        let mut detail = e.to_string();
        let mut cur: Option<&(dyn Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(io) = err.downcast_ref::<io::Error>() {
                errno = errno.or(io.raw_os_error());
            }
            let text = err.to_string();
            if !detail.contains(&text) {
                detail.push_str(": ");
                detail.push_str(&text);
            }
            cur = err.source();
        }
        Refusal {
            stage,
            errno,
            meaning: meaning(errno, tracepoint),
            detail,
        }
    }

    /// Something the program's object should hold is not there (`what` says which).
    pub fn missing(stage: &'static str, what: &str) -> Refusal {
        Refusal {
            stage,
            errno: None,
            meaning: format!("{what} missing from the object"),
            detail: String::new(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "eBPF {} failed", self.stage)?;
        if let Some(e) = self.errno {
            write!(f, " ({})", io::Error::from_raw_os_error(e))?;
        }
        write!(f, ": {}; {}", self.meaning, self.detail)
    }
}

impl Error for Refusal {}

/// What an errno from loading or attaching a BTF tracepoint program on `tracepoint`
/// means.
pub fn meaning(errno: Option<i32>, tracepoint: &str) -> String {
    match errno {
        Some(libc::EPERM) => "not permitted: needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN / \
             root); kernel lockdown or a seccomp/LSM policy can also forbid bpf()"
            .into(),
        Some(libc::EACCES) => "the verifier rejected the program (see its log)".into(),
        Some(libc::EINVAL) => {
            "the kernel refused the program or attach type (tp_btf needs Linux 5.5+ with BTF)"
                .into()
        }
        Some(libc::ENOENT) => format!("the tracepoint {tracepoint} is not in the kernel's BTF"),
        Some(libc::ENOSYS) => "the kernel has no bpf() syscall (CONFIG_BPF_SYSCALL)".into(),
        Some(libc::E2BIG) => "the program or map is too big for this kernel".into(),
        Some(libc::ENOMEM) => "out of memory (or the memlock limit on kernels before 5.11)".into(),
        _ => "unexpected error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errno is found below the loader's own error, every message is said once, and
    /// the text says what the errno means.
    #[test]
    fn a_refusal_names_its_errno_and_every_message_once() {
        #[derive(Debug)]
        struct Outer(io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "the `kfree_skb` program failed to load")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(io::Error::from_raw_os_error(libc::EPERM));
        let r = Refusal::from_error("load", "kfree_skb", &e);
        assert_eq!(r.errno, Some(libc::EPERM));
        let text = r.to_string();
        assert!(
            text.starts_with("eBPF load failed (Operation not permitted"),
            "{text}"
        );
        assert!(text.contains("CAP_BPF"), "{text}");
        assert_eq!(text.matches("failed to load").count(), 1, "{text}");
        assert!(
            Refusal::from_error(
                "attach",
                "sys_enter",
                &io::Error::from_raw_os_error(libc::ENOENT)
            )
            .meaning
            .contains("sys_enter")
        );
        assert_eq!(
            Refusal::missing("map", "ring buffer `events`").to_string(),
            "eBPF map failed: ring buffer `events` missing from the object; "
        );
    }
}

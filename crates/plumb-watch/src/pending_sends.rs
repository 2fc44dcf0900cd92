//! Who is committing the nf_tables transaction being read, before its NEWGEN says
//! so: the batches the eBPF writer probe ([`crate::writer_probe`]) saw sent into the
//! watched namespace whose transaction has not ended yet ([`PendingSends`]). Pure,
//! apart from the caller's `/proc` check ([`may_be_in_sendmsg`]).
//!
//! The kernel names a transaction's writer only in NEWGEN, after all of its
//! notifications: a 10k-service revert is ~150k of them, which the kernel needs
//! ~100–180 ms to send on a 2-core VM. Knowing the writer from the first notifications
//! lets the listener report such a revert as a *preliminary* event within a few
//! milliseconds; the complete event follows at NEWGEN.

/// A batch the writer probe ([`crate::writer_probe`]) saw being sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The sending process (thread group) id.
    pub pid: u32,
    /// The sending thread: what NEWGEN names (the kernel writes the thread's id).
    pub tid: u32,
    /// The sending thread's comm (at most 15 bytes).
    pub comm: String,
    /// When the send began, CLOCK_MONOTONIC nanoseconds.
    pub at_ns: u64,
}

/// Batches sent that no NEWGEN has answered yet, oldest first (at most this many).
pub const MAX_PENDING_SENDS: usize = 64;

/// The batches sent into the watched namespace whose transaction the listener has not
/// seen end, so that a transaction's writer is known from its first notifications.
///
/// The kernel commits batches one at a time (nfnetlink's per-subsystem mutex) in about
/// the order their writers entered `sendmsg`, and sends a transaction's notifications
/// and NEWGEN before that `sendmsg` returns. Every NEWGEN read clears its writer's
/// send and the older ones, so the oldest pending send is the batch of the transaction
/// being read, or one the kernel refused (it commits nothing and gets no NEWGEN). If
/// its thread is still inside `sendmsg`, it is taken as the writer. If not, either the
/// kernel refused it, or its transaction is committed and the reader lags behind its
/// NEWGEN: only a reader whose queue is empty can tell, and drops it.
///
/// Where the assumptions fail, the name is wrong and the NEWGEN contradicts it (the
/// complete event has the right writer; the summary counts contradictions): a writer
/// whose batches the probe does not see (`sendto`, `write`, reports the ring buffer
/// dropped: the caller then starts over, [`PendingSends::clear`]) or commits out of
/// the order of their sends. Where a thread's sends could be confused, names are lost
/// rather than wrong: a thread has one pending send at most (the later replaces the
/// earlier in place: a thread is in one `sendmsg` at a time, so the earlier is over).
#[derive(Clone, Debug, Default)]
pub struct PendingSends {
    sends: std::collections::VecDeque<Sent>,
}

impl PendingSends {
    /// Adds a send, newest last. A send of a thread that already has one replaces it
    /// in place; beyond [`MAX_PENDING_SENDS`] the oldest is forgotten.
    pub fn push(&mut self, s: Sent) {
        if let Some(old) = self.sends.iter_mut().find(|o| o.tid == s.tid) {
            *old = s;
            return;
        }
        if self.sends.len() == MAX_PENDING_SENDS {
            self.sends.pop_front();
        }
        self.sends.push_back(s);
    }

    /// Number of pending sends.
    pub fn len(&self) -> usize {
        self.sends.len()
    }

    /// Whether no send is pending.
    pub fn is_empty(&self) -> bool {
        self.sends.is_empty()
    }

    /// Forgets every pending send (after lost notifications or lost probe reports,
    /// when the order can no longer be trusted).
    pub fn clear(&mut self) {
        self.sends.clear();
    }

    /// A NEWGEN naming thread `tid` was read: that thread's pending send and every
    /// older one are done. A NEWGEN whose writer sent nothing pending (a writer the
    /// probe does not see) leaves the others waiting.
    pub fn committed(&mut self, tid: Option<u32>) {
        if let Some(i) = tid.and_then(|t| self.sends.iter().position(|s| s.tid == t)) {
            self.sends.drain(..=i);
        }
    }

    /// The writer of the transaction being read: the oldest pending send, if its
    /// thread is still in `sendmsg` (`in_sendmsg`). Sends at the front that are not
    /// are dropped as refused only while `queue_empty` says the reader has read
    /// everything the kernel sent (so their NEWGEN cannot be waiting unread; asked
    /// after `in_sendmsg`, which makes the answer sound); a reader that lags names
    /// nobody yet.
    pub fn committing(
        &mut self,
        in_sendmsg: impl Fn(&Sent) -> bool,
        mut queue_empty: impl FnMut() -> bool,
    ) -> Option<&Sent> {
        while let Some(s) = self.sends.front() {
            if in_sendmsg(s) {
                return self.sends.front();
            }
            if !queue_empty() {
                return None;
            }
            self.sends.pop_front();
        }
        None
    }
}

/// `sendmsg` on x86_64 and aarch64.
#[cfg(target_arch = "x86_64")]
const SYS_SENDMSG: &str = "46";
#[cfg(target_arch = "aarch64")]
const SYS_SENDMSG: &str = "211";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYS_SENDMSG: &str = "";

/// Whether `/proc/PID/task/TID/syscall` says the thread may be inside `sendmsg`:
/// blocked or preempted in it, or on a CPU (`running`: the kernel cannot say where a
/// running thread is, and a writer committing a big batch is on a CPU).
pub fn may_be_in_sendmsg(proc_syscall: &str) -> bool {
    let first = proc_syscall.split_whitespace().next().unwrap_or("");
    first == "running" || (!SYS_SENDMSG.is_empty() && first == SYS_SENDMSG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_is_the_oldest_send_still_in_sendmsg_and_newgen_settles_it() {
        let sent = |tid: u32| Sent {
            pid: tid,
            tid,
            comm: format!("w{tid}"),
            at_ns: u64::from(tid),
        };
        let (lagging, caught_up) = (|| false, || true);
        let mut p = PendingSends::default();
        // kube-proxy (1) commits while the agent (2) waits on the mutex.
        p.push(sent(1));
        p.push(sent(2));
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.tid), Some(1));
        p.committed(Some(1));
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.tid), Some(2));
        p.committed(Some(2));
        p.push(sent(3));
        p.push(sent(4));
        // 3 returned from sendmsg without a NEWGEN read: a reader that lags (3's
        // NEWGEN may be queued, unread) names nobody, not 4 ...
        assert_eq!(p.committing(|s| s.tid != 3, lagging), None);
        assert_eq!(p.len(), 2);
        // ... one that has read everything knows 3's batch was refused, and skips it.
        assert_eq!(
            p.committing(|s| s.tid != 3, caught_up).map(|s| s.tid),
            Some(4)
        );
        assert_eq!(p.len(), 1);
        // A NEWGEN by a writer the probe did not see leaves the others waiting.
        p.committed(Some(99));
        assert_eq!(p.len(), 1);
        p.committed(Some(4));
        assert!(p.is_empty());
        assert_eq!(p.committing(|_| true, caught_up), None);
        // A thread that sends again (a refused batch retried): one pending send, in
        // the place of the first, so one NEWGEN settles it and none is left stale.
        p.push(sent(5));
        p.push(sent(6));
        p.push(Sent {
            at_ns: 50,
            ..sent(5)
        });
        assert_eq!(p.len(), 2);
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.at_ns), Some(50));
        p.committed(Some(5));
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.tid), Some(6));
        // NEWGEN names a thread: a multi-threaded writer's send is matched by tid.
        p.push(Sent { pid: 6, ..sent(7) });
        p.committed(Some(6));
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.tid), Some(7));
        p.clear();
        assert!(p.is_empty());
        // Bounded.
        for i in 0..(MAX_PENDING_SENDS as u32 + 5) {
            p.push(sent(100 + i));
        }
        assert_eq!(p.len(), MAX_PENDING_SENDS);
        assert_eq!(p.committing(|_| true, lagging).map(|s| s.tid), Some(105));
        // /proc/PID/task/TID/syscall.
        assert!(may_be_in_sendmsg("running"));
        assert!(!may_be_in_sendmsg("-1 0x7ffd 0x7f12"));
        assert!(!may_be_in_sendmsg(
            "7 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f12"
        ));
        assert!(!may_be_in_sendmsg(""));
        #[cfg(target_arch = "x86_64")]
        assert!(may_be_in_sendmsg(
            "46 0x3 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f12"
        ));
    }
}

//! Loading the eBPF writer probe in a short-lived helper process, so that parsing the
//! kernel's BTF (aya, ~40 MB for a moment) never lands in a long-running watch's
//! memory (watch's peak RSS stays what its own work needs; target < 40 MB).
//!
//! The helper is this executable again, asked by [`HELPER_ENV`] (`<fd>:<netns
//! inode>`): it loads the program without attaching it
//! ([`WriterProbe::load_detached`]), sends the program's and the ring buffer's file
//! descriptors back over a socket pair (`SCM_RIGHTS`) or an error text, and exits.
//! Watch attaches the program itself ([`WriterProbe::attach_loaded`]), so it stays
//! attached exactly as long as watch holds the link. The executable must call
//! [`serve_if_asked`] first thing in `main`.

use crate::writer_probe::{ProbeError, WriterProbe};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Environment variable that makes the executable the loader helper.
pub const HELPER_ENV: &str = "PLUMB_WRITER_PROBE_HELPER";

/// How long watch waits for the helper.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// In the helper process: when [`HELPER_ENV`] is set, loads the program, hands it
/// over and returns the exit code; None when this process is not the helper.
pub fn serve_if_asked() -> Option<i32> {
    let spec = std::env::var(HELPER_ENV).ok()?;
    let Some((fd, inode)) = spec
        .split_once(':')
        .and_then(|(f, i)| Some((f.parse::<RawFd>().ok()?, i.parse::<u64>().ok()?)))
    else {
        eprintln!("plumb: {HELPER_ENV}={spec:?} is not <fd>:<netns inode>");
        return Some(2);
    };
    // SAFETY: the parent passed this end of its socket pair to us as `fd`, open and
    // ours alone (it keeps the other end).
    let sock = unsafe { UnixStream::from_raw_fd(fd) };
    let sent = match load(inode) {
        Ok((prog, ring)) => send(&sock, b"ok", &[prog.as_raw_fd(), ring.as_raw_fd()]),
        Err(e) => send(&sock, format!("error: {e}").as_bytes(), &[]),
    };
    Some(if sent.is_ok() { 0 } else { 1 })
}

#[cfg(not(plumb_no_bpf))]
fn load(inode: u64) -> Result<(OwnedFd, OwnedFd), ProbeError> {
    WriterProbe::load_detached(inode)
}

#[cfg(plumb_no_bpf)]
fn load(_inode: u64) -> Result<(OwnedFd, OwnedFd), ProbeError> {
    Err(ProbeError::NotBuilt)
}

/// In watch: runs `exe` as the helper for `netns_inode`, receives the loaded program
/// and attaches it here.
pub fn attach_via_helper(exe: &Path, netns_inode: u64) -> Result<WriterProbe, ProbeError> {
    let helper = |e: io::Error| ProbeError::Helper(e.to_string());
    let (ours, theirs) = UnixStream::pair().map_err(helper)?;
    ours.set_read_timeout(Some(HELPER_TIMEOUT))
        .map_err(helper)?;
    let their_fd = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new(exe);
    cmd.env(HELPER_ENV, format!("{their_fd}:{netns_inode}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    // SAFETY: between fork and exec the closure only calls fcntl (async-signal-safe)
    // to let the helper inherit its end of the pair.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::fcntl(their_fd, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(helper)?;
    drop(theirs);
    let received = receive(&ours);
    // The helper exits right after sending; never leave it behind.
    let deadline = Instant::now() + HELPER_TIMEOUT;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (text, fds) = received.map_err(helper)?;
    match (text.as_slice(), <[OwnedFd; 2]>::try_from(fds)) {
        #[cfg(not(plumb_no_bpf))]
        (b"ok", Ok([prog, ring])) => WriterProbe::attach_loaded(prog, ring, netns_inode),
        (t, _) => Err(ProbeError::Helper(
            String::from_utf8_lossy(t.strip_prefix(b"error: ").unwrap_or(t)).into_owned(),
        )),
    }
}

/// Sends `data` with `fds` attached (`SCM_RIGHTS`).
fn send(sock: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: all-zero msghdr is valid; the pointers set below stay alive for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `control` holds CMSG_SPACE(fd_bytes) bytes, room for one header and
        // the descriptors; CMSG_FIRSTHDR/CMSG_DATA point inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    // SAFETY: `msg` describes live buffers (see above).
    if unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one message and the descriptors attached to it (at most 4).
fn receive(sock: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut data = vec![0u8; 4096];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: a pure size computation.
    let space = unsafe { libc::CMSG_SPACE((4 * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: all-zero msghdr is valid; the pointers set below stay alive for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes live buffers; MSG_CMSG_CLOEXEC marks received fds.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`, within
    // msg_controllen; each SCM_RIGHTS payload is an array of new descriptors we own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("descriptors cut short"));
    }
    data.truncate(n as usize);
    Ok((data, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_text_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        send(&a, b"ok", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let (text, fds) = receive(&b).unwrap();
        assert_eq!(text, b"ok");
        assert_eq!(fds.len(), 2);
        // New descriptors for the same open file.
        assert_ne!(fds[0].as_raw_fd(), f.as_raw_fd());
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fds[1].as_raw_fd())).unwrap();
        assert!(link.ends_with("stat"), "{link:?}");
        send(&a, b"error: no BTF", &[]).unwrap();
        let (text, fds) = receive(&b).unwrap();
        assert_eq!((text.as_slice(), fds.len()), (&b"error: no BTF"[..], 0));
    }
}

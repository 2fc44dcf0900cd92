//! Turning kernel audit on for a test or a lab run, and back off afterwards.
//!
//! For tests and the lab only: `plumb watch` never calls this (it never changes audit
//! state; it only listens). Audit is machine-global, so [`AuditEnabled`] changes it
//! only from off to on, only while alive, and restores it on drop (also on panic).
//! Only the `enabled` bit is set (AUDIT_SET with mask AUDIT_STATUS_ENABLED); no
//! audit daemon is registered (no AUDIT_STATUS_PID).

/// Audit enabled for as long as this guard lives.
pub struct AuditEnabled {
    was_enabled: u32,
}

const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;

fn audit_request(kind: u16, payload: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_AUDIT)?;
    s.bind_auto()?;
    s.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    let len = 16 + payload.len() as u32;
    let mut msg = Vec::new();
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(1u16 | 4).to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    s.send(&msg, 0)?;
    let mut replies = Vec::new();
    for _ in 0..2 {
        let mut buf = vec![0u8; 8192];
        let n = s.recv(&mut &mut buf[..], 0)?;
        buf.truncate(n);
        for m in plumb_os::netlink::messages(&buf) {
            if m.kind == 2 {
                let err = m.errno();
                if err != 0 {
                    return Err(std::io::Error::from_raw_os_error(-err));
                }
                if kind == AUDIT_SET {
                    return Ok(Vec::new());
                }
            } else if m.kind == AUDIT_GET {
                replies = m.payload.to_vec();
            }
        }
        if !replies.is_empty() {
            break;
        }
    }
    Ok(replies)
}

/// `enabled` from AUDIT_GET (0 off, 1 on, 2 locked).
pub fn audit_enabled() -> std::io::Result<u32> {
    let status = audit_request(AUDIT_GET, &[])?;
    status
        .get(4..8)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| std::io::Error::other("short audit status"))
}

fn audit_set_enabled(v: u32) -> std::io::Result<()> {
    let mut status = vec![0u8; 40];
    status[0..4].copy_from_slice(&1u32.to_ne_bytes()); // AUDIT_STATUS_ENABLED
    status[4..8].copy_from_slice(&v.to_ne_bytes());
    audit_request(AUDIT_SET, &status).map(|_| ())
}

impl AuditEnabled {
    /// Err with a reason when audit cannot be enabled here.
    pub fn new() -> Result<AuditEnabled, String> {
        let was = audit_enabled().map_err(|e| format!("AUDIT_GET: {e}"))?;
        if was == 0 {
            audit_set_enabled(1).map_err(|e| format!("AUDIT_SET enabled=1: {e}"))?;
        }
        Ok(AuditEnabled { was_enabled: was })
    }
}

impl Drop for AuditEnabled {
    fn drop(&mut self) {
        if self.was_enabled == 0 {
            let _ = audit_set_enabled(0);
        }
    }
}

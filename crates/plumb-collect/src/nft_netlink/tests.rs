//! Unit tests of the decoder from built messages.

use super::*;
use plumb_os::netlink::build::*;

fn nfmsg(kind: u16, family: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = vec![family, 0, 0, 0];
    payload.extend(attrs.concat());
    message((SUBSYS_NFTABLES << 8) | kind, 0, &payload)
}

#[test]
fn garbage_never_panics() {
    let mut d = Decoder::new();
    d.push_bytes(&[0xff; 64]);
    assert!(d.finish().is_empty());
}

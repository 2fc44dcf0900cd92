//! Privileged: `plumb observe --netns NS -o json` prints a connection through a DNAT
//! rule as a JSON line with the endpoint it was translated to.

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn observe_prints_a_cluster_ip_connection_with_its_endpoint() {
    if !plumb_testkit::privileged(&["ip", "iptables-nft-restore"]) {
        return;
    }
    let ns = plumb_os::netns::Netns::create("plumb-observe-cli").expect("a private namespace");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["route", "add", "10.43.0.0/16", "dev", "lo"],
    ] {
        let (ok, _, err) = ns.exec("ip", args, None).unwrap();
        assert!(ok, "{err}");
    }
    let rules = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.43.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:8443\nCOMMIT\n";
    let (ok, _, err) = ns.exec("iptables-nft-restore", &[], Some(rules)).unwrap();
    assert!(ok, "{err}");
    let observer = Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args([
            "observe",
            "--netns",
            ns.name(),
            "--duration",
            "4",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("plumb observe");
    // Give it a moment to subscribe (it is ready once the socket is bound; there is no
    // readiness signal yet), then connect a few times.
    std::thread::sleep(Duration::from_millis(800));
    let name = ns.name().to_string();
    let server = plumb_os::netns::on_thread(Some(&name), || {
        std::net::TcpListener::bind("127.0.0.1:8443")
    })
    .unwrap();
    for _ in 0..3 {
        let _ = plumb_os::netns::on_thread(Some(&name), || {
            std::net::TcpStream::connect_timeout(
                &"10.43.0.1:443".parse().unwrap(),
                Duration::from_secs(1),
            )
        });
        let _ = server.accept();
    }
    let out = observer
        .wait_with_output()
        .expect("observe ends after --duration");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "NEW" && v["IP"]["destination"] == "10.43.0.1")
        .unwrap_or_else(|| panic!("no NEW line for 10.43.0.1:\n{text}"));
    assert_eq!(line["verdict"], "FORWARDED");
    assert_eq!(line["l4"]["destination_port"], 443);
    assert_eq!(line["translated_destination"], "127.0.0.1:8443");
}

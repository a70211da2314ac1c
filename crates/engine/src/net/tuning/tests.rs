use super::*;
use std::io::{Read, Write};

use crate::testing::tcp_pair as pair;

#[test]
fn loopback_is_found_and_has_no_link_rate() {
    assert_eq!(
        interface_of("127.0.0.1".parse().unwrap()).as_deref(),
        Some("lo")
    );
    assert_eq!(
        interface_of("::ffff:127.0.0.1".parse::<IpAddr>().unwrap().to_canonical()).as_deref(),
        Some("lo")
    );
    assert_eq!(interface_of("192.0.2.77".parse().unwrap()), None);
    assert_eq!(link_bits_of("127.0.0.1".parse().unwrap()), None);
}

#[test]
fn a_lan_session_keeps_the_floor_and_every_data_socket_gets_the_best_congestion_control() {
    let (mut c, mut s) = pair();
    // A round trip on the control connection, as the handshake makes.
    c.write_all(b"hello").unwrap();
    let mut b = [0; 5];
    s.read_exact(&mut b).unwrap();
    s.write_all(b"world").unwrap();
    c.read_exact(&mut b).unwrap();
    let t = decide(&c, 2, 64 << 20);
    assert!(
        t.rtt > Duration::ZERO && t.rtt < Duration::from_millis(50),
        "{t:?}"
    );
    assert_eq!(t.link_bits, None, "loopback has no link rate");
    assert_eq!(t.plan.socket_bytes, path::FLOOR_SOCKET_BYTES);
    assert!(!t.plan.capped);
    let (d, _ds) = pair();
    t.apply(&d);
    let sock = socket2::SockRef::from(&d);
    // The kernel doubles what it was asked for (forced as root, else capped at
    // net.core.wmem_max, which is at least 208 KiB everywhere).
    assert!(sock.send_buffer_size().unwrap() >= 200 << 10);
    assert_eq!(tcp::notsent_lowat(&d), Some(NOTSENT_LOWAT_BYTES));
    match t.congestion {
        Some(cc) => assert_eq!(tcp::congestion_of(&d).as_deref(), Some(cc)),
        None => eprintln!("SKIP: this kernel offers none of bbr, htcp, cubic"),
    }
    let r = NetworkReport::new(&t, final_figures(&[c]));
    assert_eq!(r.connections.len(), 1);
    assert_eq!(r.connections[0].bytes, 5);
    assert!(r.link_assumed);
    assert!(r.reason.contains("congestion control"), "{}", r.reason);
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "rtt_ms",
        "congestion",
        "socket_bytes",
        "reason",
        "connections",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    for key in ["bytes", "retransmits", "rtt_ms", "rate"] {
        assert!(json["connections"][0].get(key).is_some(), "{key} in {json}");
    }
}

#[test]
fn a_send_buffer_the_kernel_capped_is_said_in_the_reason() {
    let (c, _s) = pair();
    let mut t = decide(&c, 2, 1 << 30);
    let asked = usize::try_from(t.plan.socket_bytes).unwrap();
    let granted = |send, forced| tcp::Granted {
        send,
        recv: send,
        forced,
    };
    t.note_granted(&granted(2 * asked, false));
    assert_eq!(t.kernel_note, None, "granted in full");
    t.note_granted(&granted(asked / 2, true));
    assert_eq!(t.kernel_note, None, "forced: what was asked");
    t.note_granted(&granted(4 << 20, false));
    let reason = t.reason();
    assert!(
        reason.contains("4096 KiB of send buffer (net.core.wmem_max"),
        "{reason}"
    );
}

#[test]
fn each_data_connection_is_paced_at_its_share_of_its_own_nic() {
    let (one, two, other): (IpAddr, IpAddr, IpAddr) = (
        "10.0.1.1".parse().unwrap(),
        "10.0.2.1".parse().unwrap(),
        "10.0.3.1".parse().unwrap(),
    );
    // Two 1 Gbit/s links: two connections leave through the first, one through the
    // second; the third address's NIC says nothing; one socket has no address.
    let bits = |ip: IpAddr| (ip != other).then_some(1_000_000_000);
    let caps = pacing_caps(&[Some(one), Some(two), Some(one), Some(other), None], bits);
    assert_eq!(
        caps,
        vec![
            Some(62_500_000),
            Some(125_000_000),
            Some(62_500_000),
            None,
            None
        ]
    );
}

#[test]
fn a_session_on_loopback_is_not_paced() {
    let (c, _s) = pair();
    let (d, _ds) = pair();
    let (t, _) = tune_session(&Link::plain(c), &[Link::plain(d)], 64 << 20);
    assert_eq!(t.pacing, None, "loopback reports no rate");
    assert!(!t.reason().contains("paced"), "{}", t.reason());
}

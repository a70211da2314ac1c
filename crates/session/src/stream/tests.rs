//! Each piece of the stream core on its own.

use super::*;
use sluice_wire::{ChunkFlags, ChunkHeader, Compression, ErrorCode};

fn header(offset: u64, raw: &[u8], last: bool) -> ChunkHeader {
    ChunkHeader::plain(1, offset, raw, last)
}

#[test]
fn records_go_round_the_connections_and_arrive_in_order() {
    let mut tx = RecordOrder::new(3);
    let mut rx = RecordOrder::new(3);
    let data = [b"abc".as_slice(), b"de", b"f", b"ghij", b"k"];
    for (k, d) in data.iter().enumerate() {
        assert_eq!(tx.next_connection(), k % 3);
        let h = header(tx.next_offset(), d, k == data.len() - 1);
        tx.pushed(d.len() as u64);
        assert_eq!(rx.next_connection(), k % 3);
        assert_eq!(rx.arrived(&h), Ok(k == data.len() - 1));
    }
    assert_eq!((rx.records(), rx.bytes(), rx.wire_bytes()), (5, 11, 11));
    assert_eq!((tx.records(), tx.bytes()), (5, 11));
}

#[test]
fn a_record_out_of_place_is_refused_and_not_counted() {
    let mut rx = RecordOrder::new(2);
    rx.arrived(&header(0, b"abcd", false)).unwrap();
    let err = rx.arrived(&header(9, b"x", false)).unwrap_err();
    assert_eq!(
        err,
        StreamError::OutOfOrder {
            offset: 9,
            expected: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "record at byte 9 arrived where byte 4 was due"
    );
    assert_eq!((rx.records(), rx.bytes()), (1, 4));
}

#[test]
#[should_panic(expected = "a stream needs a connection")]
fn a_stream_without_connections_is_a_bug() {
    let _ = RecordOrder::new(0);
}

#[test]
fn the_window_gives_records_back_when_acknowledged_in_any_order() {
    let mut w = SendWindow::new(4);
    for (i, o) in [0u64, 10, 20].into_iter().enumerate() {
        w.hold(o, i);
    }
    assert_eq!(w.oldest(), Some(0));
    assert_eq!(w.acknowledged(10), Some(1));
    assert_eq!(w.acknowledged(10), None, "once");
    assert_eq!(w.acknowledged(0), Some(0));
    assert_eq!(w.acknowledged(99), None);
    assert_eq!((w.len(), w.oldest()), (1, Some(20)));
    assert_eq!(w.acknowledged(20), Some(2));
    assert!(w.is_empty());
}

#[test]
fn a_nack_sends_the_record_and_every_later_one_again_at_most_max_resends_times() {
    let mut w = SendWindow::new(8);
    for o in [0u64, 10, 20, 30] {
        w.hold(o, o);
    }
    for round in 1..=MAX_RESENDS {
        let again: Vec<u64> = w.nacked(10).unwrap().map(|r| *r).collect();
        assert_eq!(again, [10, 20, 30], "round {round}");
    }
    assert_eq!(w.resent(), u64::from(MAX_RESENDS));
    let err = w.nacked(10).err().unwrap();
    assert_eq!(err, StreamError::TooManyResends { offset: 10 });
    assert_eq!(
        err.to_string(),
        format!(
            "the record at byte 10 failed its checksum {} times; the stream stops before it",
            MAX_RESENDS + 1
        )
    );
    // Another record has its own count.
    assert_eq!(w.nacked(30).unwrap().count(), 1);
    let err = w.nacked(5).err().unwrap();
    assert_eq!(err, StreamError::NotHeld { offset: 5 });
    assert!(err
        .to_string()
        .contains("which this connection does not hold"));
}

#[test]
#[should_panic(expected = "more records than slots held")]
fn a_window_never_grows_past_its_slots() {
    let mut w = SendWindow::new(2);
    w.hold(0, ());
    w.hold(1, ());
    w.hold(2, ());
}

#[test]
#[should_panic(expected = "stream order")]
fn a_window_holds_records_in_stream_order() {
    let mut w = SendWindow::new(2);
    w.hold(5, ());
    w.hold(5, ());
}

#[test]
fn routes_take_each_word_to_the_connection_that_sent_the_record() {
    let mut r = AckRoutes::new(3, 2);
    r.route(0, 0).unwrap();
    r.route(100, 1).unwrap();
    assert_eq!(r.heard(Word::Nack(100)), Some(1));
    assert_eq!(r.heard(Word::Nack(100)), Some(1), "a nack keeps the route");
    assert_eq!(r.heard(Word::Ack(100)), Some(1));
    assert_eq!(r.heard(Word::Ack(100)), None, "an ack ends it");
    assert_eq!(r.heard(Word::Ack(7)), None);
    r.route(200, 1).unwrap();
    r.route(300, 0).unwrap();
    assert_eq!(r.route(400, 0), Err(RoutesFull));
    assert_eq!(r.len(), 3);
    assert_eq!(Word::Nack(300).offset(), 300);
}

#[test]
fn a_receiver_drops_what_follows_a_damaged_record_until_it_comes_back() {
    let mut c = RecvConn::new(true);
    let h = |o| header(o, b"", false);
    assert_eq!(c.arrives(&h(0)), Ok(Arrival::Check));
    assert_eq!(c.checked(0, Ok(())), Verdict::Deliver);
    assert_eq!(
        c.checked(10, Err(Damage::Checksum)),
        Verdict::AskAgain {
            tries: 1,
            damage: Damage::Checksum
        }
    );
    assert_eq!(c.awaiting(), Some(10));
    assert_eq!(c.arrives(&h(20)), Ok(Arrival::Drop));
    assert_eq!(c.arrives(&h(10)), Ok(Arrival::Check));
    let undecodable = Damage::Undecodable("lz4: bad".into());
    assert_eq!(
        c.checked(10, Err(undecodable.clone())),
        Verdict::AskAgain {
            tries: 2,
            damage: undecodable
        }
    );
    assert!(c.ended().is_err());
    assert_eq!(
        c.ended().unwrap_err().to_string(),
        "the sender closed the connection before it sent the record at byte 10 again"
    );
    assert_eq!(c.checked(10, Ok(())), Verdict::Deliver);
    assert_eq!(c.arrives(&h(20)), Ok(Arrival::Check));
    assert_eq!(c.ended(), Ok(()));
}

#[test]
fn a_record_damaged_more_than_max_resends_times_stops_the_stream() {
    let mut c = RecvConn::new(true);
    for tries in 1..=MAX_RESENDS {
        assert_eq!(
            c.checked(7, Err(Damage::Checksum)),
            Verdict::AskAgain {
                tries,
                damage: Damage::Checksum
            }
        );
    }
    let Verdict::Fail(e) = c.checked(7, Err(Damage::Checksum)) else {
        panic!("a fourth damage must stop the stream");
    };
    assert_eq!(
        e.to_string(),
        format!(
            "the record at byte 7 failed its checksum, {} times; the stream stops before it",
            MAX_RESENDS + 1
        )
    );
}

#[test]
fn without_acknowledgements_a_damaged_record_stops_the_stream_at_once() {
    let mut c = RecvConn::new(false);
    let v = c.checked(3, Err(Damage::Undecodable("zstd: x".into())));
    let Verdict::Fail(e) = v else { panic!("{v:?}") };
    assert_eq!(
        e.to_string(),
        "the record at byte 3 does not decompress (zstd: x); the stream stops before it"
    );
}

#[test]
fn a_packed_chunk_is_not_a_stream_record() {
    let mut h = header(0, b"", false);
    h.flags.set(ChunkFlags::PACKED, true);
    let e = RecvConn::new(true).arrives(&h).unwrap_err();
    assert_eq!(e.to_string(), "a packed chunk on a stream");
}

#[test]
fn check_record_decodes_then_verifies() {
    let data = b"twelve bytes".to_vec();
    let h = header(0, &data, true);
    let mut slot = data.clone();
    slot.resize(64, 0);
    assert_eq!(check_record(&h, &mut slot, |_, _| unreachable!()), Ok(12));
    slot[3] ^= 1;
    assert_eq!(
        check_record(&h, &mut slot, |_, _| Ok(())),
        Err(Damage::Checksum)
    );
    // Compressed: the decoder runs first; what it yields must match the checksum.
    let z = h.compressed(Compression::Lz4, 5);
    let good = |_: Compression, b: &mut [u8]| {
        b[..12].copy_from_slice(b"twelve bytes");
        Ok(())
    };
    assert_eq!(check_record(&z, &mut slot, good), Ok(12));
    let wrong = |_: Compression, b: &mut [u8]| {
        b[..12].copy_from_slice(b"twelve bytez");
        Ok(())
    };
    assert_eq!(check_record(&z, &mut slot, wrong), Err(Damage::Checksum));
    let refused = check_record(&z, &mut slot, |c, _| Err(format!("{c:?}: bad")));
    assert_eq!(refused, Err(Damage::Undecodable("Lz4: bad".into())));
    assert_eq!(nack_reason(&z), ErrorCode::DecompressFailed);
    assert_eq!(nack_reason(&h), ErrorCode::ChecksumMismatch);
    // A length beyond the slot is damage, not a panic.
    let mut small = [0u8; 4];
    assert!(matches!(
        check_record(&h, &mut small, |_, _| Ok(())),
        Err(Damage::Undecodable(_))
    ));
}

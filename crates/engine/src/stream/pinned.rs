//! Records sent from the caller's memory, without a copy (issue 19): a record's slot
//! holds its head (a Python message's header and info, or nothing) and the record goes
//! on with a range of bytes the caller pinned, which the net-send thread hands to the
//! socket from where they are, in the same vectored write as the head.
//!
//! Nothing on the wire changes: the chunk's checksum is that of the head and the pinned
//! bytes hashed in one pass, the header the one a copied record of the same bytes gets,
//! so the receiver cannot tell. The pinned bytes are never compressed (a codec reads the
//! record from its slot, so a stream that compresses copies them there, as before).
//!
//! A pinned record is kept until the receiver acknowledges it, like every record, and
//! resent from the same memory; its owner is dropped once the last record over it is
//! acknowledged, or the stream ends or fails. Each record still holds a slot of the
//! pool, so the records in flight, and so the bytes they pin, stay bounded by the pool.

use sluice_buffers::Slot;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// Memory a caller lends a stream without a copy. Its bytes must stay where they are
/// and unchanged as long as the value lives: the stream drops its last reference to it
/// once every record over it is acknowledged (or the stream ended or failed), on
/// whichever thread that happens (a net-send thread, mostly).
pub trait PinnedBytes: Send + Sync {
    /// The bytes.
    fn bytes(&self) -> &[u8];
}

/// One record's part of a caller's pinned bytes: the owner, shared by every record of
/// one message (an `Arc` per message, cloned per record), and a range of its bytes.
#[derive(Clone)]
pub struct PinnedRange {
    owner: Arc<dyn PinnedBytes>,
    start: usize,
    end: usize,
}

impl PinnedRange {
    /// `range` of `owner`'s bytes; `None` where it is not within them.
    pub fn new(owner: Arc<dyn PinnedBytes>, range: Range<usize>) -> Option<PinnedRange> {
        let fits = range.start <= range.end && range.end <= owner.bytes().len();
        fits.then_some(PinnedRange {
            owner,
            start: range.start,
            end: range.end,
        })
    }

    /// The bytes of the range.
    pub fn bytes(&self) -> &[u8] {
        &self.owner.bytes()[self.start..self.end]
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

impl fmt::Debug for PinnedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedRange")
            .field("start", &self.start)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// Makes a record of `record_bytes` at most in `slot`: the head `head` writes (into the
/// room `tail` leaves), then `tail`, which stays where it is (returned, to send from
/// there) unless `copy` (the stream compresses: the codec reads the record from its
/// slot), when it is copied after the head and let go.
pub(super) fn compose(
    slot: &mut Slot,
    record_bytes: usize,
    head: impl FnOnce(&mut [u8]) -> usize,
    tail: PinnedRange,
    copy: bool,
) -> Option<PinnedRange> {
    debug_assert!(tail.len() <= record_bytes && record_bytes <= slot.len());
    let room = record_bytes - tail.len();
    let n = head(&mut slot[..room]).min(room);
    if !copy {
        slot.set_filled(n);
        return Some(tail);
    }
    slot[n..n + tail.len()].copy_from_slice(tail.bytes());
    slot.set_filled(n + tail.len());
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_buffers::BufferPool;

    const SLOT: usize = 4096;

    struct Bytes(Vec<u8>);

    impl PinnedBytes for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    fn tail(data: &[u8], range: Range<usize>) -> PinnedRange {
        PinnedRange::new(Arc::new(Bytes(data.to_vec())), range).expect("within the bytes")
    }

    #[test]
    fn a_range_must_lie_within_the_bytes() {
        let owner: Arc<dyn PinnedBytes> = Arc::new(Bytes(vec![7; 10]));
        assert!(PinnedRange::new(Arc::clone(&owner), 10..10).is_some_and(|r| r.is_empty()));
        assert_eq!(
            PinnedRange::new(Arc::clone(&owner), 2..9).map(|r| r.len()),
            Some(7)
        );
        assert!(PinnedRange::new(Arc::clone(&owner), 3..11).is_none());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 5..4;
        assert!(PinnedRange::new(owner, backwards).is_none());
    }

    #[test]
    fn a_record_keeps_its_tail_pinned_or_copies_it_for_the_codec() {
        let pool = Arc::new(BufferPool::new(None, 2 * SLOT as u64, SLOT).expect("pool"));
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251).to_le_bytes()[0]).collect();
        let head = |buf: &mut [u8]| {
            assert_eq!(
                buf.len(),
                SLOT - 1000,
                "the head gets the room the tail leaves"
            );
            buf[..3].copy_from_slice(b"HDR");
            3
        };

        let mut slot = pool.acquire();
        let kept = compose(&mut slot, SLOT, head, tail(&data, 2000..3000), false);
        assert_eq!(slot.filled_bytes(), b"HDR");
        assert_eq!(
            kept.map(|t| t.bytes().to_vec()),
            Some(data[2000..].to_vec())
        );

        let mut slot = pool.acquire();
        let kept = compose(&mut slot, SLOT, head, tail(&data, 2000..3000), true);
        assert!(kept.is_none());
        assert_eq!(&slot.filled_bytes()[..3], b"HDR");
        assert_eq!(&slot.filled_bytes()[3..], &data[2000..]);
    }
}

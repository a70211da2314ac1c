//! A byte ring of variable-length packet records, allocated once: the packets a direction
//! holds while they wait out their delay. Packets leave in the order they came (the delay
//! is fixed and the shaper's departure times never decrease), so a FIFO is enough.
//!
//! Record layout (8-byte aligned): `due_ns: u64`, `len: u32`, `pad: u32`, then `len`
//! bytes. A record never wraps: when the space left at the end cannot hold the largest
//! packet, the writer leaves a wrap marker (`len == u32::MAX`, or less than a header of
//! room) and starts again at offset 0.

/// Bytes of a record's header.
const HEADER_BYTES: usize = 16;
const WRAP_MARKER: u32 = u32::MAX;

const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// The ring; one per direction, owned by that direction's thread.
pub struct Ring {
    buf: Vec<u8>,
    packet_bytes_max: usize,
    head: usize,
    tail: usize,
    count: usize,
    used_bytes: usize,
}

impl Ring {
    /// A ring of about `capacity_bytes` for packets of at most `packet_bytes_max` bytes.
    pub fn new(capacity_bytes: usize, packet_bytes_max: usize) -> Ring {
        let slot = align8(HEADER_BYTES + packet_bytes_max);
        let capacity = align8(capacity_bytes.max(4 * slot));
        Ring {
            buf: vec![0; capacity],
            packet_bytes_max,
            head: 0,
            tail: 0,
            count: 0,
            used_bytes: 0,
        }
    }

    #[cfg(test)]
    /// Packets held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Bytes held, headers and alignment included.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    fn slot_bytes(&self) -> usize {
        align8(HEADER_BYTES + self.packet_bytes_max)
    }

    /// Room for one more packet of the largest size: a slice to read it into, or `None`
    /// when the ring is full (the caller drops the packet at the tail, like a router).
    pub fn reserve(&mut self) -> Option<&mut [u8]> {
        if self.count == 0 {
            self.head = 0;
            self.tail = 0;
        }
        let slot = self.slot_bytes();
        let cap = self.buf.len();
        let wrapped = self.tail < self.head || (self.tail == self.head && self.count > 0);
        if wrapped {
            if self.head - self.tail <= slot {
                return None;
            }
        } else if cap - self.tail < slot {
            if self.head <= slot {
                return None;
            }
            if cap - self.tail >= HEADER_BYTES {
                self.put_header(self.tail, 0, WRAP_MARKER);
            }
            self.used_bytes += cap - self.tail;
            self.tail = 0;
        }
        let start = self.tail + HEADER_BYTES;
        Some(&mut self.buf[start..start + self.packet_bytes_max])
    }

    /// Keeps the first `len` bytes of the slice `reserve` gave, due at `due_ns`.
    pub fn commit(&mut self, len: usize, due_ns: u64) {
        assert!(
            len <= self.packet_bytes_max,
            "packet of {len} bytes exceeds the ring's slot"
        );
        let len32 = u32::try_from(len).unwrap_or(WRAP_MARKER - 1);
        self.put_header(self.tail, due_ns, len32);
        let step = align8(HEADER_BYTES + len);
        self.used_bytes += step;
        self.tail += step;
        if self.tail == self.buf.len() {
            self.tail = 0;
        }
        self.count += 1;
    }

    /// The oldest packet: its due time and bytes.
    pub fn front(&mut self) -> Option<(u64, &[u8])> {
        if self.count == 0 {
            return None;
        }
        self.skip_wrap();
        let (due_ns, len) = self.header(self.head);
        let start = self.head + HEADER_BYTES;
        Some((due_ns, &self.buf[start..start + len as usize]))
    }

    /// Drops the oldest packet (after it was sent).
    pub fn pop(&mut self) {
        assert!(self.count > 0, "pop on an empty ring");
        self.skip_wrap();
        let (_, len) = self.header(self.head);
        let step = align8(HEADER_BYTES + len as usize);
        self.used_bytes -= step;
        self.head += step;
        if self.head == self.buf.len() {
            self.head = 0;
        }
        self.count -= 1;
        if self.count == 0 {
            // a wrap left by a reserve that was never committed is all that may remain
            assert!(
                self.used_bytes < self.slot_bytes(),
                "an empty ring holds no packet bytes"
            );
            self.head = 0;
            self.tail = 0;
            self.used_bytes = 0;
        }
    }

    fn skip_wrap(&mut self) {
        let cap = self.buf.len();
        if cap - self.head < HEADER_BYTES || self.header(self.head).1 == WRAP_MARKER {
            self.used_bytes -= cap - self.head;
            self.head = 0;
        }
    }

    fn put_header(&mut self, at: usize, due_ns: u64, len: u32) {
        self.buf[at..at + 8].copy_from_slice(&due_ns.to_ne_bytes());
        self.buf[at + 8..at + 12].copy_from_slice(&len.to_ne_bytes());
    }

    fn header(&self, at: usize) -> (u64, u32) {
        let mut due = [0u8; 8];
        let mut len = [0u8; 4];
        due.copy_from_slice(&self.buf[at..at + 8]);
        len.copy_from_slice(&self.buf[at + 8..at + 12]);
        (u64::from_ne_bytes(due), u32::from_ne_bytes(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn fifo_matches_a_model_through_many_wraps() {
        let mut ring = Ring::new(1000, 100);
        let mut model: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
        let mut x: u64 = 12345;
        let mut full_seen = 0;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) {
                let len = usize::try_from((x >> 8) % 101).unwrap_or(0);
                match ring.reserve() {
                    Some(slot) => {
                        for (i, b) in slot[..len].iter_mut().enumerate() {
                            *b = (step + i as u64).to_le_bytes()[0];
                        }
                        let bytes = slot[..len].to_vec();
                        ring.commit(len, step);
                        model.push_back((step, bytes));
                    }
                    None => full_seen += 1,
                }
            } else if let Some((due, bytes)) = model.pop_front() {
                let (d, b) = ring.front().expect("ring has what the model has");
                assert_eq!((d, b), (due, &bytes[..]));
                ring.pop();
            } else {
                assert!(ring.front().is_none());
            }
            assert_eq!(ring.len(), model.len());
            assert!(ring.used_bytes() <= ring.buf.len());
        }
        assert!(full_seen > 0, "the test must reach a full ring");
    }

    #[test]
    fn a_full_ring_refuses_and_recovers() {
        let mut ring = Ring::new(0, 64);
        let mut n = 0;
        while let Some(_slot) = ring.reserve() {
            ring.commit(64, n);
            n += 1;
        }
        assert!(n >= 3, "a ring holds at least three largest packets");
        ring.pop();
        ring.pop();
        assert!(
            ring.reserve().is_some(),
            "space freed at the head is reused"
        );
    }
}

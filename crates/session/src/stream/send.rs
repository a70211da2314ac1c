//! The sender's side: each connection's window of records sent and not yet
//! acknowledged, and the routes that take the receiver's words to that connection.

use super::{StreamError, MAX_RESENDS};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

/// The receiver's word on one record (by offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// `ChunkAck`: it arrived whole.
    Ack(u64),
    /// `ChunkNack`: it arrived damaged; send it and what followed it again.
    Nack(u64),
}

impl Word {
    /// The record's offset.
    #[must_use]
    pub fn offset(self) -> u64 {
        match self {
            Word::Ack(o) | Word::Nack(o) => o,
        }
    }
}

/// A record held: its offset, the times it was sent again, the caller's record.
#[derive(Debug)]
struct Held<T> {
    offset: u64,
    resent: u32,
    record: T,
}

/// One connection's records sent and not yet acknowledged, oldest first (the caller's
/// records: a header and the buffer slot that holds the bytes). Its capacity is fixed
/// at start: at most one record per buffer slot can be held.
#[derive(Debug)]
pub struct SendWindow<T> {
    held: VecDeque<Held<T>>,
    capacity: usize,
    resent: u64,
}

impl<T> SendWindow<T> {
    /// A window for at most `capacity` records.
    #[must_use]
    pub fn new(capacity: usize) -> SendWindow<T> {
        assert!(capacity > 0, "a window holds at least one record");
        SendWindow {
            held: VecDeque::with_capacity(capacity),
            capacity,
            resent: 0,
        }
    }

    /// Keeps `record`, sent at `offset`, until acknowledged.
    ///
    /// # Panics
    /// The window is full (each record holds a slot, so the caller could not have it),
    /// or `offset` is not after the last record's.
    pub fn hold(&mut self, offset: u64, record: T) {
        assert!(
            self.held.len() < self.capacity,
            "more records than slots held"
        );
        assert!(
            self.held.back().is_none_or(|h| h.offset < offset),
            "records are held in stream order"
        );
        self.held.push_back(Held {
            offset,
            resent: 0,
            record,
        });
    }

    /// The receiver has the record at `offset`: it is given back (its slot returns to
    /// the pool when the caller drops it); `None` when this window does not hold it.
    pub fn acknowledged(&mut self, offset: u64) -> Option<T> {
        // Words come in the order this connection's records were verified: the oldest.
        let i = self.held.iter().position(|h| h.offset == offset)?;
        let h = if i == 0 {
            self.held.pop_front()
        } else {
            self.held.remove(i)
        };
        h.map(|h| h.record)
    }

    /// The record at `offset` arrived damaged: the records to send again, in order,
    /// are it and every later one this connection sent (the receiver drops what this
    /// connection brings until it arrives again).
    ///
    /// # Errors
    /// This connection does not hold it, or it was sent again [`MAX_RESENDS`] times.
    pub fn nacked(&mut self, offset: u64) -> Result<impl Iterator<Item = &mut T>, StreamError> {
        let from = self
            .held
            .iter()
            .position(|h| h.offset == offset)
            .ok_or(StreamError::NotHeld { offset })?;
        let h = &mut self.held[from];
        h.resent += 1;
        if h.resent > MAX_RESENDS {
            return Err(StreamError::TooManyResends { offset });
        }
        self.resent += 1;
        Ok(self.held.iter_mut().skip(from).map(|h| &mut h.record))
    }

    /// Whether every record sent was acknowledged.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Records held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// The oldest record held (the one the receiver owes a word on first).
    #[must_use]
    pub fn oldest(&self) -> Option<u64> {
        self.held.front().map(|h| h.offset)
    }

    /// Times a record was sent again.
    #[must_use]
    pub fn resent(&self) -> u64 {
        self.resent
    }
}

/// More records in flight than the routes were sized for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutesFull;

impl std::fmt::Display for RoutesFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("more records in flight than buffer slots")
    }
}

impl std::error::Error for RoutesFull {}

/// Which connection sent the record at each offset, for records not yet acknowledged
/// (at most one per buffer slot): the control reader's map from the receiver's words
/// to the connection that must hear them. Sized at start; a fixed hasher.
#[derive(Debug)]
pub struct AckRoutes {
    by_offset: HashMap<u64, usize, BuildHasherDefault<DefaultHasher>>,
    capacity: usize,
    connections: usize,
}

impl AckRoutes {
    /// Routes for at most `capacity` records in flight over `connections`.
    #[must_use]
    pub fn new(capacity: usize, connections: usize) -> AckRoutes {
        assert!(capacity > 0 && connections > 0);
        AckRoutes {
            by_offset: HashMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default()),
            capacity,
            connections,
        }
    }

    /// The record at `offset` goes out on `conn` (before it is sent: its word may come
    /// at once).
    ///
    /// # Errors
    /// More records are in flight than the capacity (a stream that already failed and
    /// is still pushed to, or a caller that holds more records than slots).
    pub fn route(&mut self, offset: u64, conn: usize) -> Result<(), RoutesFull> {
        assert!(
            conn < self.connections,
            "connection {conn} of {}",
            self.connections
        );
        if self.by_offset.len() >= self.capacity && !self.by_offset.contains_key(&offset) {
            return Err(RoutesFull);
        }
        self.by_offset.insert(offset, conn);
        Ok(())
    }

    /// The connection that must hear `word`; an acknowledged record's route ends here.
    /// `None`: the record is not in flight (a word for it came already).
    pub fn heard(&mut self, word: Word) -> Option<usize> {
        match word {
            Word::Ack(offset) => self.by_offset.remove(&offset),
            Word::Nack(offset) => self.by_offset.get(&offset).copied(),
        }
    }

    /// Records in flight.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_offset.len()
    }

    /// Whether no record is in flight.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }
}

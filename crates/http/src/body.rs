//! Response bodies: a small fixed one, a file read in bounded chunks, or a stream of
//! chunks a task sends (the perf markers of a copy).

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Bytes read from a file per frame.
pub const FILE_CHUNK: usize = 1 << 20;

/// A response body.
#[derive(Debug)]
pub enum Out {
    /// A body known whole (possibly empty).
    Full(Option<Bytes>),
    /// `remaining` bytes of a file, read from its current position.
    File(FileBody),
    /// Chunks sent by a task; ends when its sender is dropped.
    Channel(mpsc::Receiver<Bytes>),
}

/// Part of a file, read one [`FILE_CHUNK`] at a time into one buffer, which is
/// reclaimed for the next chunk once hyper has written the previous one.
#[derive(Debug)]
pub struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: BytesMut,
    /// Counts the bytes handed to hyper (a push's perf markers read it).
    sent: Option<Arc<AtomicU64>>,
}

impl FileBody {
    /// `len` bytes of `file` from its current position.
    pub fn new(file: tokio::fs::File, len: u64) -> FileBody {
        FileBody {
            file,
            remaining: len,
            buf: BytesMut::with_capacity(FILE_CHUNK),
            sent: None,
        }
    }

    /// [`FileBody::new`], adding every chunk's length to `sent`.
    pub fn counted(file: tokio::fs::File, len: u64, sent: Arc<AtomicU64>) -> FileBody {
        FileBody {
            sent: Some(sent),
            ..FileBody::new(file, len)
        }
    }
}

impl Out {
    /// An empty body.
    pub fn empty() -> Out {
        Out::Full(None)
    }

    /// A body of `text`.
    pub fn text(text: impl Into<String>) -> Out {
        Out::Full(Some(Bytes::from(text.into())))
    }
}

impl Body for Out {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Out::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Out::Channel(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
            Out::File(f) => f.poll_chunk(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Out::Full(b) => b.is_none(),
            Out::File(f) => f.remaining == 0,
            Out::Channel(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Out::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Out::File(f) => SizeHint::with_exact(f.remaining),
            Out::Channel(_) => SizeHint::default(),
        }
    }
}

impl FileBody {
    fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(self.remaining).map_or(FILE_CHUNK, |r| r.min(FILE_CHUNK));
        if self.buf.is_empty() {
            self.buf.reserve(want);
        }
        while self.buf.len() < want {
            let room = want - self.buf.len();
            let mut limited = (&mut self.buf).limit(room);
            match tokio_util::io::poll_read_buf(Pin::new(&mut self.file), cx, &mut limited) {
                Poll::Pending if self.buf.is_empty() => return Poll::Pending,
                Poll::Pending => break,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file became shorter while it was sent",
                    ))))
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
        let n = self.buf.len();
        self.remaining -= n as u64;
        if let Some(c) = &self.sent {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        Poll::Ready(Some(Ok(Frame::data(self.buf.split_to(n).freeze()))))
    }
}

use bytes::BufMut as _;

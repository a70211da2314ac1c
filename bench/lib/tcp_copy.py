"""The plainest file copy through TCP on this host (issue 16): one file sent over one
loopback connection with `sendfile` (no copy in the sender) and written at the other end
by one thread with `splice` (socket -> pipe -> file: one copy), in 4 MiB steps. No
checksum, no framing, no protocol: the least work a mover that carries the bytes
through a socket can do. A reference, not a bound on time: where writing into fresh
pages dominates, its single writer can be slower than a mover with more.

    python3 bench/lib/tcp_copy.py SRC DST

bench/cost.sh runs it as the tool `tcp-copy` beside sluice when it copies one large
file; bench/runs/2026-11-29-vm-splice has the first measurements (there as floor.py,
with `send`/`recv` variants).
"""

import fcntl
import os
import socket
import sys

STEP = 4 << 20
F_SETPIPE_SZ = 1031


def send(port: int, src: str, size: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        fd = os.open(src, os.O_RDONLY)
        off = 0
        while off < size:
            off += os.sendfile(conn.fileno(), fd, off, min(STEP, size - off))


def receive(conn: socket.socket, dst: str, size: int) -> None:
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    off = 0
    while off < size:
        n = os.splice(conn.fileno(), w, min(1 << 20, size - off))
        if n == 0:
            sys.exit(f"tcp_copy.py: the sender stopped after {off} of {size} bytes")
        done = 0
        while done < n:
            done += os.splice(r, out, n - done, offset_dst=off + done)
        off += n
    os.close(out)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python3 bench/lib/tcp_copy.py SRC DST")
    src, dst = sys.argv[1], sys.argv[2]
    size = os.path.getsize(src)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            listener.close()
            send(port, src, size)
        except BaseException as e:  # the child must never return into main
            print(f"tcp_copy.py: sending: {e}", file=sys.stderr)
            code = 1
        os._exit(code)
    conn, _ = listener.accept()
    receive(conn, dst, size)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("tcp_copy.py: the sender failed")


if __name__ == "__main__":
    main()

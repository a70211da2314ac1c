# The plainest copy over TCP on this machine (bench/runs/2026-11-29-vm-splice/README.md):
# one file sent over one connection and written at the other end, no checksum, no
# framing. Modes: client send (pread into a buffer, send) or sendfile; server recv
# (recv into a buffer, pwrite) or splice (socket -> pipe -> file).
#   python3 floor.py {send|sendfile} {recv|splice} SRC DST
# Loopback by default; HOST=ADDR binds the server there, NSA=/var/run/netns/A moves the
# client (a forked child) into that namespace first (run the server with ip netns exec).
import os, socket, sys, time, resource
mode_c, mode_s, src, dst = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
CH = 4 << 20
size = os.path.getsize(src)
ls = socket.socket(); ls.bind((os.environ.get("HOST","127.0.0.1"), 0)); ls.listen(1)
port = ls.getsockname()[1]
pid = os.fork()
if pid == 0:
    if os.environ.get('NSA'):
        import ctypes; fdn=os.open(os.environ['NSA'], os.O_RDONLY); assert ctypes.CDLL(None).setns(fdn, 0x40000000)==0
    c = socket.create_connection((os.environ.get("HOST","127.0.0.1"), port))
    fd = os.open(src, os.O_RDONLY)
    off = 0
    if mode_c == "sendfile":
        while off < size:
            n = os.sendfile(c.fileno(), fd, off, min(CH, size - off)); off += n
    else:
        buf = bytearray(CH); mv = memoryview(buf)
        while off < size:
            n = os.preadv(fd, [mv[:min(CH, size-off)]], off); c.sendall(mv[:n]); off += n
    c.close(); os._exit(0)
s, _ = ls.accept()
t0 = time.time()
out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
off = 0
if mode_s == "splice":
    r, w = os.pipe()
    import fcntl
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    while off < size:
        n = os.splice(s.fileno(), w, min(1 << 20, size - off))
        if n == 0: break
        k = 0
        while k < n:
            m = os.splice(r, out, n - k, offset_dst=off + k); k += m
        off += n
else:
    buf = bytearray(CH); mv = memoryview(buf)
    while off < size:
        want = min(CH, size - off); got = 0
        while got < want:
            n = s.recv_into(mv[got:want]); got += n
        os.pwrite(out, mv[:want], off); off += want
os.waitpid(pid, 0)
t1 = time.time()
ru_s = resource.getrusage(resource.RUSAGE_SELF); ru_c = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{mode_c:8} {mode_s:6} wall {t1-t0:.3f} server_cpu {ru_s.ru_utime+ru_s.ru_stime:.2f} client_cpu {ru_c.ru_utime+ru_c.ru_stime:.2f}")

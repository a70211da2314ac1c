# Writes 1 GiB in 4 MiB pwrites into a fresh tmpfs file, O_DIRECT against buffered,
# alternating, 8 reps each, the same bytes written and deleted first (warm). Medians.
import os, mmap, time, resource, sys
d = "/dev/shm/dwtest"; os.makedirs(d, exist_ok=True)
buf = mmap.mmap(-1, 4 << 20); buf.write(os.urandom(4 << 20))
N = 256  # 1 GiB
def warm():
    fd = os.open(d + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for i in range(N): os.pwrite(fd, buf, i << 22)
    os.close(fd); os.unlink(d + "/w")
def run(direct):
    warm()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.time()
    fd = os.open(d + "/f", flags)
    for i in range(N): os.pwrite(fd, buf, i << 22)
    os.close(fd)
    t1 = time.time(); r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.unlink(d + "/f")
    return t1 - t0, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
res = {True: [], False: []}
for rep in range(8):
    for direct in ([True, False] if rep % 2 else [False, True]):
        res[direct].append(run(direct))
import statistics as st
for k, v in res.items():
    print("direct" if k else "buffered", "wall", round(st.median(x[0] for x in v), 3), "cpu", round(st.median(x[1] for x in v), 3), [round(x[0], 2) for x in v])

"""The WAN run's report (bench/wan.sh): called by report.py for a folder whose meta.env
says mode=wan-*. One table of every path (RTT, rate, loss, the forwarder's ceiling, the
best of iperf3 -P 1..8, every tool, sluice's ratios against the issue's targets), a plot
of rate against RTT for every tool, and the forwarder's counters per path."""
import json
import os
from collections import OrderedDict

TOOLS = [("sluice", "sluice"), ("gridftp", "GridFTP -fast -p 4"), ("rsyncd", "rsync (daemon)"), ("scp", "scp")]
COLORS = {"iperf3": "#7f7f7f", "sluice": "#1f77b4", "gridftp": "#ff7f0e", "rsyncd": "#2ca02c", "scp": "#d62728"}


def mbit(bytes_per_s):
    return None if bytes_per_s is None else bytes_per_s * 8 / 1e6


def fmt(v, nd=0):
    return "-" if v is None else f"{v:,.{nd}f}"


def path_facts(rows):
    """path -> its RTT, rate, loss, links and the forwarder ceiling, from the rows."""
    facts = OrderedDict()
    for r in rows:
        if r["section"] != "wan" and not (r["section"] == "ceiling" and r["path"] not in facts and not r["path"].startswith("forwarder")):
            continue
        facts.setdefault(r["path"], {k: r.get(k, "") for k in ("rtt_ms", "rate_bps", "loss", "links", "forwarder_ceiling_bps")})
    return facts


def iperf_best(agg, path):
    best = None
    for k, s in agg.items():
        if k[0] == "ceiling" and k[1] == path and k[3] == "iperf3" and s["status"] == "ok" and s["thr"]:
            if best is None or s["thr"] > best[0]:
                best = (s["thr"], k[4].split(" ")[0])
    return best


def wan_runs(agg, path, tool, variant="default"):
    """A tool's aggregated runs on a path, whichever file the path moved (None: not run)."""
    return next((v for k, v in agg.items() if k[0] == "wan" and k[1] == path and k[3] == tool and k[4] == variant), None)


def tool_thr(agg, path, tool, variant="default"):
    """A tool's median rate on a path, whichever file the path moved."""
    s = wan_runs(agg, path, tool, variant)
    if s is None:
        return None, "not run"
    return (s["thr"], "ok") if s["status"] == "ok" else (None, s["status"])


def link_split(agg, path):
    """How sluice's bytes went over the two links (client side's TUN counters)."""
    s = wan_runs(agg, path, "sluice")
    if not s or s["link1"] is None or s["link2"] is None:
        return ""
    return f"; sluice's bytes on link 1 / 2: {s['link1'] / 1e9:.2f} / {s['link2'] / 1e9:.2f} GB"


def delayline_stats(out):
    stats = {}
    p = os.path.join(out, "logs", "delayline-stats.log")
    if os.path.exists(p):
        for line in open(p):
            name, _, js = line.partition(" ")
            try:
                stats[name] = json.loads(js)["directions"]
            except ValueError:
                pass
    return stats


def verdicts(name, f, best, thr, split=""):
    """The issue's targets for this path: >= 0.9x iperf3's best everywhere; >= 1.2x
    GridFTP on the 100 ms and lossy paths; on two links >= 0.85x their sum."""
    out = []
    s = thr.get("sluice")
    if s and best:
        r = s / best[0]
        out.append(f"{r:.2f}x iperf3 best ({'met' if r >= 0.9 else 'NOT met'}: >= 0.9)")
    b = thr.get("sluice-base")
    if s and b:
        out.append(f"{s / b:.2f}x the baseline build")
    if float(f.get("rtt_ms") or 0) >= 100 or float(f.get("loss") or 0) > 0:
        for key, what in (("gridftp-cubic", "GridFTP on a stock host (cubic)"), ("gridftp", "GridFTP with this host's default")):
            g = thr.get(key)
            if s and g:
                r = s / g
                out.append(f"{r:.2f}x {what} ({'met' if r >= 1.2 else 'NOT met'}: >= 1.2)")
    if s and f.get("links") == "2" and float(f.get("rate_bps") or 0) > 0:
        r = s / (2 * float(f["rate_bps"]) / 8)
        out.append(f"{r:.2f}x the two links' sum ({'met' if r >= 0.85 else 'NOT met'}: >= 0.85){split}")
    return "; ".join(out) or "-"


BASE = ("sluice-base", "sluice, baseline build")
CUBIC = ("gridftp-cubic", "GridFTP, host cubic")


def table(R, agg, facts):
    has_base = any(k[3] == BASE[0] for k in agg)
    has_cubic = any(k[3] == "gridftp" and k[4] == "host-cubic" for k in agg)
    tools = TOOLS[:1] + ([BASE] if has_base else []) + TOOLS[1:2] + ([CUBIC] if has_cubic else []) + TOOLS[2:]
    head = ["path", "RTT", "rate", "loss", "forwarder ceiling", "iperf3 best (-P)"] + [t[1] for t in tools] + ["sluice against the targets"]
    rows, data = [], OrderedDict()
    for name, f in facts.items():
        best = iperf_best(agg, name)
        thr, cells = {}, []
        for tool, _ in tools:
            v, st = tool_thr(agg, name, "gridftp", "host-cubic") if tool == CUBIC[0] else tool_thr(agg, name, tool)
            thr[tool] = v
            cells.append(fmt(mbit(v)) if st == "ok" else st)
        rate = float(f.get("rate_bps") or 0)
        links = f.get("links") or "1"
        rows.append([name, f"{f.get('rtt_ms')} ms", (f"{links} x " if links != "1" else "") + (f"{rate / 1e9:g} Gbit/s" if rate else "none"),
                     f"{float(f.get('loss') or 0) * 100:g} %", fmt(mbit(float(f["forwarder_ceiling_bps"]) / 8) if f.get("forwarder_ceiling_bps") else None),
                     f"{fmt(mbit(best[0]))} ({best[1]})" if best else "-"] + cells + [verdicts(name, f, best, thr, link_split(agg, name))])
        data[name] = (f, best, thr)
    return R.md_table(head, rows), data


def plot(out, data):
    """Rate against RTT for every tool on the lossless 1 Gbit/s single-link paths; the
    other paths as points beside them."""
    series = OrderedDict([("iperf3", "iperf3 best of -P")] + TOOLS)
    pts = {t: [] for t in series}
    for name, (f, best, thr) in data.items():
        if f.get("links") != "1" or float(f.get("loss") or 0) > 0 or float(f.get("rate_bps") or 0) != 1e9:
            continue
        rtt = float(f["rtt_ms"])
        if best:
            pts["iperf3"].append((rtt, mbit(best[0])))
        for t, _ in TOOLS:
            if thr.get(t):
                pts[t].append((rtt, mbit(thr[t])))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_svg(out, series, pts)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.4]})
    for t, lab in series.items():
        p = sorted(pts[t])
        if p:
            ax.plot([x for x, _ in p], [y for _, y in p], marker="o", label=lab, color=COLORS[t])
    ax.set_xlabel("RTT (ms)")
    ax.set_ylabel("Mbit/s (median)")
    ax.set_ylim(bottom=0)
    ax.set_title("1 Gbit/s paths: rate against RTT", fontsize=9)
    ax.legend(fontsize=8)
    names = list(data)
    width = 0.8 / len(series)
    for i, t in enumerate(series):
        vals = []
        for n in names:
            f, best, thr = data[n]
            v = best[0] if t == "iperf3" and best else thr.get(t)
            vals.append(mbit(v) or 0)
        bx.bar([j + (i - len(series) / 2 + 0.5) * width for j in range(len(names))], vals, width, label=series[t], color=COLORS[t])
    bx.set_xticks(range(len(names)))
    bx.set_xticklabels(names, fontsize=7, rotation=20)
    bx.set_ylabel("Mbit/s (median)")
    bx.set_title("Every path", fontsize=9)
    fig.suptitle("WAN paths through sluice-delayline (1 file from tmpfs, default flags)", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "wan.png"), dpi=90)
    plt.close(fig)
    return ["wan.png"]


def plot_svg(out, series, pts):
    w, h, x0, y0, pw, ph = 620, 340, 60, 20, 420, 260
    xs = [x for p in pts.values() for x, _ in p] or [1]
    ys = [y for p in pts.values() for _, y in p] or [1]
    xmax, ymax = max(xs) * 1.1, max(ys) * 1.1
    sx = lambda x: x0 + pw * x / xmax  # noqa: E731
    sy = lambda y: y0 + ph - ph * y / ymax  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10">',
             f'<line x1="{x0}" y1="{y0 + ph}" x2="{x0 + pw}" y2="{y0 + ph}" stroke="black"/>',
             f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + ph}" stroke="black"/>',
             f'<text x="{x0 + pw / 2}" y="{h - 10}">RTT (ms)</text>', f'<text x="2" y="{y0 + 10}">Mbit/s</text>']
    for i, (t, lab) in enumerate(series.items()):
        p = sorted(pts[t])
        if not p:
            continue
        c = COLORS[t]
        parts.append(f'<polyline fill="none" stroke="{c}" points="{" ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in p)}"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>' for x, y in p]
        parts.append(f'<text x="{x0 + pw + 10}" y="{y0 + 14 * i + 10}" fill="{c}">{lab}</text>')
    for x in sorted(set(xs)):
        parts.append(f'<text x="{sx(x) - 8:.1f}" y="{y0 + ph + 14}">{x:g}</text>')
    parts.append(f'<text x="{x0 - 40}" y="{y0 + 4}">{ymax:,.0f}</text></svg>')
    open(os.path.join(out, "wan.svg"), "w").write("\n".join(parts))
    return ["wan.svg"]


def counters(stats):
    rows = []
    for name, dirs in stats.items():
        ab = sum(d.get("wire_bytes_in", 0) for d in dirs if d["direction"].endswith("ab"))
        tot = lambda k: sum(d.get(k, 0) for d in dirs)  # noqa: E731
        rows.append([name, f"{ab / 1e9:.2f}", tot("lost"), tot("queue_full"), tot("ring_full"),
                     tot("write_errors"), f"{max(d.get('ring_peak_bytes', 0) for d in dirs) / 2**20:.1f}"])
    return rows


def destination(meta):
    """The paragraph on where the file goes and how fast a fresh file is written there."""
    if not meta.get("dest"):
        return []  # runs before the destination was measured: tmpfs, rates unknown
    g = lambda k: float(meta.get(k) or 0) / 1e9
    return [f"Destination: {meta.get('dest_description', meta['dest'])}. A fresh file of the path file's size "
            f"goes into it at **{g('dest_direct_bps'):.2f} Gbit/s with O_DIRECT** (sluice's default) and "
            f"{g('dest_buffered_bps'):.2f} Gbit/s through the page cache with the final fsync (GridFTP, rsync, scp); "
            f"into tmpfs at {g('tmpfs_direct_bps'):.2f} and {g('tmpfs_buffered_bps'):.2f} Gbit/s. On this VM the host "
            "faults in every page the guest touches afresh (freed memory goes back to it at once), so writes into "
            "fresh memory are the slow part; the ramdisk's memory is written once before the run. iperf3 writes "
            "nothing. Every row of raw.csv carries the destination's rates (`dest_direct_bps`, `dest_buffered_bps`).",
            ""]


def main(R, rows, wl, notes, runs, meta):
    out = R.OUT
    agg = R.aggregate(rows)
    R.write_summary(agg)
    facts = path_facts(rows)
    tab, data = table(R, agg, facts)
    plots = plot(out, data)
    L = [f"# sluice WAN benchmark: {meta.get('date', '')[:10]} on {meta.get('host', '?')} ({meta.get('mode', '?')} run)", ""]
    L.append(f"Machine: {meta.get('cpus', '?')} CPUs ({meta.get('cpu', '?')}), {meta.get('memory', '?')}, kernel {meta.get('kernel', '?')}. "
             f"sluice `{meta.get('sluice', '?')}` at `{meta.get('git', '?')}` with its default flags. "
             f"Load average at start {meta.get('load_start', '?')}, at end {meta.get('load_end', '?')}. "
             f"Whole run {float(meta.get('seconds_total', 0) or 0) / 60:.1f} min.")
    L.append("")
    L.append("Paths: two network namespaces joined by `sluice-delayline` (crates/delayline): a TUN device per link in "
             "each, a forwarder thread per direction that holds every packet for the one-way delay (RTT = 2 x), "
             "serialises it at the rate behind a tail-drop queue of one RTT, and drops it at random with the loss "
             "probability (seeded; per segment: a TSO super-packet is dropped whole with 1 - (1 - p)^n). "
             f"MTU {meta.get('mtu', '?')}, congestion control {meta.get('congestion_control', '?')} (the kernel's default), "
             f"tcp_rmem {meta.get('tcp_rmem', '?')}, tcp_wmem {meta.get('tcp_wmem', '?')}. "
             "Proof that the paths are what they say: bench/delay/prove.sh"
             + (" ([proof.md](proof.md), run just before this benchmark)." if os.path.exists(os.path.join(out, "proof.md")) else "."))
    if meta.get("mode") == "wan-quick":
        L += ["", "**Quick run**: one run per tool on a smaller file, so start-up and TCP's ramp-up weigh more than "
              "in the full run (`bench/wan.sh` without --quick), which is the measurement; this one keeps the harness honest."]
    L.append("")
    ceil = float(meta.get("forwarder_ceiling_bps") or 0)
    L.append(f"The forwarder's ceiling in this run: **{ceil / 1e9:.2f} Gbit/s** (iperf3 -P 4 through 1 ms of one-way delay, "
             f"no rate limit; forwarder CPU {meta.get('forwarder_ceiling_cpu_s', '?')} s); through 25 ms one-way "
             f"iperf3 -P 8 reached {float(meta.get('forwarder_ceiling_50ms_bps') or 0) / 1e9:.2f} Gbit/s, so the fastest "
             f"path runs at {meta.get('fast_path_mbit', '?')} Mbit/s (80 % of it in steps of 0.5 Gbit/s). Every row of "
             "raw.csv carries the ceiling (`forwarder_ceiling_bps`).")
    L.append("")
    L += destination(meta)
    files = "; ".join(v.get("description", "?") for v in wl.values()) or "?"
    amount = meta.get("iperf_amount") or "3 s each"
    cc = meta.get("gridftp_variants")
    L.append(f"Workload: {files}. Each tool is timed to the end of the copy (sync "
             f"included) and its output verified byte for byte; median of {meta.get('reps', '?')} runs, the tools interleaved run "
             f"by run (order reversed every other round). iperf3: best of -P {meta.get('iperf_streams', '?')}, moving "
             f"{amount}. " + (f"GridFTP runs twice: {cc}. " if cc else "") + "Rates in Mbit/s.")
    L.append("")
    L += tab
    L.append("")
    L += [f"![rate against RTT]({p})" for p in plots]
    L.append("")
    L.append("## The forwarder's counters per path (both directions)")
    L.append("")
    L += R.md_table(["path", "GB A->B", "lost (loss)", "queue full (rate)", "ring full", "write errors", "ring peak MiB"],
                    counters(delayline_stats(out)))
    L.append("")
    L.append("`ring full` and `write errors` must be 0: a packet the forwarder itself could not hold would be a loss "
             "the path does not have. `queue full` is the router's tail drop in front of the rate limit.")
    if notes:
        L += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    failed = [s for s in agg.values() if s["status"] not in ("ok",)]
    if failed:
        L += ["", "## Failed or skipped", ""] + [f"- {'/'.join(s['key'][:4])}: {s['status']} {R.short(s['note'])}" for s in failed]
    L += ["", "Files: `raw.csv` (every run), `summary.csv` (medians), `meta.env`, `logs/` (run log, forwarder counters), "
          "`sluice-runs.jsonl` (sluice's JSON summaries)."]
    open(os.path.join(out, "results.md"), "w").write("\n".join(L) + "\n")
    return 0

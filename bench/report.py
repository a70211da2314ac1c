#!/usr/bin/env python3
"""Turns one results folder (raw.csv, meta.env, workloads.csv, notes.txt,
sluice-runs.jsonl) into summary.csv, results.md and the plots.

    report.py RESULTS_DIR

Medians over the repetitions of each case; a case with any failed repetition is FAILED
(and its time is not used). Plots need matplotlib; without it they are written as
plain SVG by hand.
"""
import csv
import json
import os
import statistics
import sys
from collections import OrderedDict, defaultdict

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
MB = 1e6

TOOL_LABEL = {
    "sluice": "sluice",
    "sluice-base": "sluice (baseline build)",
    "gridftp": "GridFTP",
    "gridftp-3pt": "GridFTP 3rd-party",
    "xrdcp": "XRootD xrdcp",
    "rsyncd": "rsync daemon",
    "rsync-ssh": "rsync over ssh",
    "scp": "scp (SFTP)",
    "tar-nc": "tar | nc",
    "cp": "local cp",
    "tar-tar": "local tar | tar",
    "iperf3": "iperf3",
    "memcpy": "memcpy",
}


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def read_env(path):
    d = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                d[k] = v
    return d


def load():
    rows = list(csv.DictReader(open(os.path.join(OUT, "raw.csv"))))
    wl = OrderedDict()
    p = os.path.join(OUT, "workloads.csv")
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            wl[r["workload"]] = r
    notes = []
    p = os.path.join(OUT, "notes.txt")
    if os.path.exists(p):
        notes = [n.strip() for n in open(p) if n.strip()]
    runs = []
    p = os.path.join(OUT, "sluice-runs.jsonl")
    if os.path.exists(p):
        for line in open(p):
            try:
                runs.append(json.loads(line))
            except ValueError:
                pass
    return rows, wl, list(OrderedDict.fromkeys(notes)), runs


def aggregate(rows):
    """(section, path, workload, tool, variant) -> one summary dict, in first-seen order."""
    groups = OrderedDict()
    for r in rows:
        k = (r["section"], r["path"], r["workload"], r["tool"], r["variant"])
        groups.setdefault(k, []).append(r)
    out = OrderedDict()
    for k, rs in groups.items():
        statuses = [r["status"] for r in rs]
        s = {"key": k, "reps": len(rs), "flags": rs[0]["flags"], "rows": rs}
        bad = [r for r in rs if r["status"] not in ("ok",)]
        if bad:
            s["status"] = bad[0]["status"]
            s["note"] = bad[0]["note"]
            s["raw_seconds"] = fnum(bad[0]["seconds"])
        else:
            s["status"] = "ok"
            s["note"] = rs[-1]["note"]

        def med(col):
            v = [fnum(r[col]) for r in rs if fnum(r[col]) is not None]
            return statistics.median(v) if v else None

        s["seconds"] = med("seconds")
        s["bytes"] = fnum(rs[0]["bytes"])
        s["files"] = fnum(rs[0]["files"])
        if s["seconds"] and s["bytes"] and k[0] != "ceiling":
            s["thr"] = s["bytes"] / s["seconds"]
        else:
            s["thr"] = med("throughput_Bps")
        s["cpu"] = None
        cc, cs = med("cpu_client_s"), med("cpu_server_s")
        if cc is not None or cs is not None:
            s["cpu"] = (cc or 0) + (cs or 0)
        s["cpu_client"], s["cpu_server"] = cc, cs
        s["rss_client"], s["rss_server"] = med("rss_client_kib"), med("rss_server_kib")
        s["wire"] = med("wire_bytes")
        s["link1"], s["link2"] = med("link1_bytes"), med("link2_bytes")
        s["all_seconds"] = [fnum(r["seconds"]) for r in rs if fnum(r["seconds"]) is not None]
        if statuses.count("ok") != len(statuses):
            s["thr"] = None if s["status"] != "ok" else s["thr"]
        out[k] = s
    return out


def fmt_mb(b):
    return "" if b is None else f"{b / MB:,.0f}"


def fmt_s(x):
    return "" if x is None else (f"{x:.2f}" if x < 100 else f"{x:.0f}")


def fmt_rss(k):
    return "" if k is None else f"{k / 1024:,.0f}"


def fmt_ratio(x):
    return "" if x is None else f"{x:.2f}"


def write_summary(agg):
    cols = ["section", "path", "workload", "tool", "variant", "status", "reps", "seconds_median",
            "throughput_MBps", "cpu_s", "cpu_client_s", "cpu_server_s", "rss_client_MiB",
            "rss_server_MiB", "wire_bytes", "link1_bytes", "link2_bytes", "flags", "note"]
    with open(os.path.join(OUT, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for s in agg.values():
            w.writerow(list(s["key"][:5]) + [
                s["status"], s["reps"], fmt_s(s["seconds"]),
                "" if s["thr"] is None else f"{s['thr'] / MB:.1f}",
                "" if s["cpu"] is None else f"{s['cpu']:.2f}",
                s["cpu_client"] or "", s["cpu_server"] or "",
                fmt_rss(s["rss_client"]), fmt_rss(s["rss_server"]),
                "" if s["wire"] is None else int(s["wire"]),
                "" if s["link1"] is None else int(s["link1"]),
                "" if s["link2"] is None else int(s["link2"]),
                s["flags"], s["note"]])


def get(agg, section, path, wl, tool, variant="default"):
    return agg.get((section, path, wl, tool, variant))


def ok_thr(s):
    return s["thr"] if s and s["status"] == "ok" else None


def iperf_best(agg, path):
    v = [ok_thr(s) for k, s in agg.items() if k[0] == "ceiling" and k[1] == path and k[3] == "iperf3"]
    v = [x for x in v if x]
    return max(v) if v else None


# ---------------------------------------------------------------- plots

def plot_all(agg, wl):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_svg_fallback(agg, wl)
    files = []
    # 1. throughput per tool per workload (loopback + local ceilings)
    wls = [w for w in wl if any(k[0] == "transfer" and k[2] == w for k in agg)]
    if wls:
        fig, axes = plt.subplots(len(wls), 1, figsize=(9, 2.1 + 1.9 * len(wls)), squeeze=False)
        for ax, w in zip(axes[:, 0], wls):
            items = [s for k, s in agg.items() if k[0] == "transfer" and k[2] == w]
            names, vals, colors, labels = [], [], [], []
            for s in items:
                t, v = s["key"][3], s["key"][4]
                names.append(TOOL_LABEL.get(t, t) + ("" if v == "default" else f" ({v})"))
                vals.append((s["thr"] or 0) / MB if s["status"] == "ok" else 0)
                colors.append("#1f77b4" if t == "sluice" else ("#7f7f7f" if t in ("cp", "tar-tar") else "#ff7f0e"))
                labels.append("" if s["status"] == "ok" else s["status"])
            y = range(len(names))
            ax.barh(y, vals, color=colors)
            ax.set_yticks(list(y))
            ax.set_yticklabels(names, fontsize=8)
            ax.invert_yaxis()
            top = max(vals + [1])
            for i, (v, lab) in enumerate(zip(vals, labels)):
                ax.text(v + top * 0.01, i, lab if lab else f"{v:,.0f}", va="center", fontsize=7,
                        color="red" if lab else "black")
            ax.set_xlim(0, top * 1.18)
            ax.set_title(f"{w}: {wl[w]['description']}", fontsize=9)
            ax.set_xlabel("MB/s (median, incl. sync)", fontsize=8)
        fig.suptitle("Throughput per tool (blue sluice, orange peers, grey local ceilings; FAILED = wrong output)", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "throughput.png"), dpi=90)
        plt.close(fig)
        files.append("throughput.png")
    # 2. placement sweep (seed 000 figure 1)
    sweep = [s for k, s in agg.items() if k[0] == "sweep" and " io=" in k[4]]
    if sweep:
        wsw = list(OrderedDict.fromkeys(s["key"][2] for s in sweep))
        fig, axes = plt.subplots(1, len(wsw), figsize=(4.5 * len(wsw), 3.4), squeeze=False)
        for ax, w in zip(axes[0], wsw):
            by = defaultdict(list)
            for s in sweep:
                if s["key"][2] != w or s["status"] != "ok":
                    continue
                pol, io = s["key"][4].split(" io=")
                by[pol].append((int(io), s["thr"] / MB))
            for pol, pts in by.items():
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=pol)
            ax.set_xlabel("I/O threads per side")
            ax.set_ylabel("MB/s")
            ax.set_title(f"{w}: {wl.get(w, {}).get('description', '')}", fontsize=8)
            ax.legend(fontsize=8)
            ax.set_ylim(bottom=0)
        fig.suptitle("Placement sweep (policies os / bind / mts); one NUMA node here" if True else "", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "sweep.png"), dpi=90)
        plt.close(fig)
        files.append("sweep.png")
    # 3. paths
    paths = list(OrderedDict.fromkeys(k[1] for k in agg if k[0] in ("path", "ceiling") and k[1] not in ("local", "lo")))
    if paths:
        series = [("iperf3 (best)", None), ("sluice", ("path", "path-big", "sluice")),
                  ("GridFTP", ("path", "path-big", "gridftp"))]
        fig, ax = plt.subplots(figsize=(9, 3.6))
        width = 0.26
        for i, (lab, key) in enumerate(series):
            vals = []
            for p in paths:
                if key is None:
                    v = iperf_best(agg, p)
                else:
                    v = ok_thr(get(agg, key[0], p, key[1], key[2]))
                vals.append((v or 0) / MB)
            ax.bar([j + (i - 1) * width for j in range(len(paths))], vals, width, label=lab)
        ax.set_xticks(range(len(paths)))
        ax.set_xticklabels(paths, fontsize=8)
        ax.set_ylabel("MB/s")
        ax.legend(fontsize=8)
        ax.set_title("Paths: namespaces joined by one or two veth pairs, with tbf rate limits (path-big)", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "paths.png"), dpi=90)
        plt.close(fig)
        files.append("paths.png")
    return files


def plot_svg_fallback(agg, wl):
    """Without matplotlib: one hand-written SVG bar chart of the loopback throughputs."""
    items = [s for k, s in agg.items() if k[0] == "transfer"]
    if not items:
        return []
    h = 16 * len(items) + 40
    top = max([(s["thr"] or 0) for s in items] + [1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{h}" font-family="sans-serif" font-size="10">']
    for i, s in enumerate(items):
        y = 20 + 16 * i
        w, t, v = s["key"][2], s["key"][3], s["key"][4]
        lab = f"{w} {TOOL_LABEL.get(t, t)}" + ("" if v == "default" else f" ({v})")
        parts.append(f'<text x="0" y="{y + 11}">{lab}</text>')
        if s["status"] == "ok":
            bw = 420 * (s["thr"] or 0) / top
            color = "#1f77b4" if t == "sluice" else "#ff7f0e"
            parts.append(f'<rect x="250" y="{y}" width="{bw:.1f}" height="12" fill="{color}"/>')
            parts.append(f'<text x="{255 + bw:.1f}" y="{y + 11}">{(s["thr"] or 0) / MB:,.0f} MB/s</text>')
        else:
            parts.append(f'<text x="250" y="{y + 11}" fill="red">{s["status"]}</text>')
    parts.append("</svg>")
    open(os.path.join(OUT, "throughput.svg"), "w").write("\n".join(parts))
    return ["throughput.svg"]


# ---------------------------------------------------------------- markdown

def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    return out


def short(note, n=160):
    note = note or ""
    return note if len(note) <= n else note[: n - 1] + "…"


def targets(agg, wl, meta, runs=()):
    lines = []
    lo_iperf = iperf_best(agg, "lo")
    buffer_mib = 256
    flags = meta.get("sluice_flags", "")
    if "--buffer-mem" in flags:
        v = flags.split("--buffer-mem")[1].split()[0]
        if v.lower().endswith("mib"):
            buffer_mib = float(v[:-3])
        elif v.lower().endswith("gib"):
            buffer_mib = float(v[:-3]) * 1024

    def verdict(ok):
        return "PASS" if ok else "FAIL"

    for w in ("big", "many"):
        s = get(agg, "transfer", "lo", w, "sluice")
        cp = ok_thr(get(agg, "transfer", "local", w, "cp"))
        if not s:
            lines.append(f"- **NOT RUN** big files ({w}) ≥ 0.8 × min(iperf3, local cp)")
            continue
        if s["status"] != "ok":
            lines.append(f"- **FAIL** big files ({w}) ≥ 0.8 × min(iperf3, local cp): sluice {s['status']}: {short(s['note'], 200)}")
            continue
        ceil = min(x for x in (lo_iperf, cp) if x) if (lo_iperf or cp) else None
        if not ceil:
            lines.append(f"- **NOT EVALUATED** big files ({w}): no ceiling measured")
            continue
        r = s["thr"] / ceil
        lines.append(f"- **{verdict(r >= 0.8)}** big files ({w}) ≥ 0.8 × min(iperf3 {lo_iperf / MB if lo_iperf else float('nan'):,.0f}, "
                     f"local cp {cp / MB if cp else float('nan'):,.0f} MB/s): sluice {s['thr'] / MB:,.0f} MB/s = **{r:.2f}** × the ceiling")
    # tree: the kernel tree (symlinks, modes); small: regular files only, which every
    # peer can copy correctly, so that the GridFTP line below has a verdict.
    for w in ("tree", "small", "million"):
        sec = "million" if w == "million" else "transfer"
        path = "lo"
        s = get(agg, sec, path, w, "sluice")
        tt = get(agg, sec, "local", w, "tar-tar")
        if not s:
            lines.append(f"- **NOT RUN** small-file tree ({w}) ≥ 0.7 × local tar | tar"
                         + (" (run with --million)" if w == "million" else ""))
            continue
        if s["status"] != "ok" or not ok_thr(tt):
            lines.append(f"- **FAIL** small-file tree ({w}) ≥ 0.7 × local tar | tar: sluice {s['status']}"
                         f"{'' if ok_thr(tt) else ', tar|tar ' + (tt['status'] if tt else 'not run')}: {short(s['note'], 200)}")
            continue
        r = s["thr"] / tt["thr"]
        lines.append(f"- **{verdict(r >= 0.7)}** small-file tree ({w}) ≥ 0.7 × local tar | tar: sluice {fmt_s(s['seconds'])} s vs "
                     f"tar | tar {fmt_s(tt['seconds'])} s = **{r:.2f}** ×")
    for w, need in (("big", 1.5), ("many", 1.5), ("tree", 3.0), ("small", 3.0)):
        s = get(agg, "transfer", "lo", w, "sluice")
        g = get(agg, "transfer", "lo", w, "gridftp")
        what = "small-file tree" if w in ("tree", "small") else "big files"
        if not s:
            lines.append(f"- **NOT RUN** sluice ≥ {need}× GridFTP ({what}, {w})")
            continue
        if s["status"] != "ok":
            lines.append(f"- **FAIL** sluice ≥ {need}× GridFTP ({what}, {w}): sluice {s['status']}: {short(s['note'], 200)}")
            continue
        if not g or g["status"] == "SKIPPED":
            lines.append(f"- **NOT EVALUATED** sluice ≥ {need}× GridFTP ({what}, {w}): GridFTP {g['status'] if g else 'not run'} {short(g['note'] if g else '', 80)}")
            continue
        if g["status"] != "ok" and not (g["note"] or "").startswith("wrong output"):
            # it did not finish (exit status, time limit): no time to compare with
            lines.append(f"- **NOT EVALUATED** sluice ≥ {need}× GridFTP ({what}, {w}): GridFTP {g['status']}: {short(g['note'], 120)}")
            continue
        if g["status"] != "ok":
            raw = g.get("raw_seconds")
            rr = (raw / s["seconds"]) if raw and s["seconds"] else None
            tail = ""
            if rr is not None:
                tail = (f"; on raw time (its wrong output, {fmt_s(raw)} s vs sluice {fmt_s(s['seconds'])} s) sluice is "
                        f"{rr:.2f}× as fast, {'which would pass' if rr >= need else 'which would not pass'}")
            lines.append(f"- **NOT COMPARABLE** sluice ≥ {need}× GridFTP ({what}, {w}): GridFTP produced wrong output "
                         f"({short(g['note'], 90)}){tail}")
            continue
        r = s["thr"] / g["thr"]
        lines.append(f"- **{verdict(r >= need)}** sluice ≥ {need}× GridFTP `{g['flags']}` ({what}, {w}): "
                     f"sluice {s['thr'] / MB:,.0f} vs GridFTP {g['thr'] / MB:,.0f} MB/s = **{r:.2f}**×")
    # Context for the big-file lines: the disk, not the tool, bounds every tool there;
    # memory to memory (the sweep's data in /dev/shm) shows what each tool itself costs.
    big = [(t, get(agg, "transfer", "local" if t == "cp" else "lo", "big", t)) for t in ("cp", "sluice", "gridftp")]
    if all(ok_thr(x) for _, x in big):
        spread = max(abs(x['thr'] / big[0][1]['thr'] - 1) for _, x in big)
        tail = (": the disk is the ceiling there, no tool can be 1.5× another that reaches it" if spread <= 0.1 else
                ": the tools differ by more than the disk explains (the tool's own pipeline shows)")
        lines.append("- context (big): disk to disk, " + ", ".join(f"{TOOL_LABEL.get(t, t)} {x['thr'] / MB:,.0f}" for t, x in big)
                     + f" MB/s: every tool within {spread * 100:.0f} % of local cp, which reads and writes the same disk" + tail)
    # The disk's own read rate for that file, measured in this run (run_disk_ceilings):
    # no tool that reads it can move it faster, so 1.5x a peer above 2/3 of it cannot be.
    reads = [(k[4], ok_thr(x)) for k, x in agg.items()
             if k[0] == "ceiling" and k[2] == "big" and k[3] == "dd" and ok_thr(x)]
    g = get(agg, "transfer", "lo", "big", "gridftp")
    if reads:
        top = max(r for _, r in reads)
        where = ", ".join(f"{r / MB:,.0f} ({v})" for v, r in reads)
        tail = ""
        if ok_thr(g):
            need = 1.5 * g["thr"]
            tail = (f"; 1.5× GridFTP ({g['thr'] / MB:,.0f}) is {need / MB:,.0f} MB/s, "
                    + ("above the fastest read of the file: the disk, not the tool, rules that target out in this run"
                       if need > top else "within what the disk gives"))
        s_big = get(agg, "transfer", "lo", "big", "sluice")
        at = f"; sluice moved it at {ok_thr(s_big) / top:.2f} of the fastest read" if ok_thr(s_big) else ""
        lines.append(f"- context (big): the disk reads the file, in MB/s, at {where}{at}{tail}")
    mem = {t: get(agg, "sweep", "local" if t == "cp" else "lo", "sweep-big", t) for t in ("cp", "sluice", "gridftp")}
    if ok_thr(mem["sluice"]) and ok_thr(mem["gridftp"]):
        r = mem["sluice"]["thr"] / mem["gridftp"]["thr"]
        cpx = f", local cp {mem['cp']['thr'] / MB:,.0f} MB/s" if ok_thr(mem["cp"]) else ""
        lines.append(f"- **{verdict(r >= 1.5)}** memory to memory (sweep-big in /dev/shm, no disk): sluice ≥ 1.5× GridFTP: sluice "
                     f"{mem['sluice']['thr'] / MB:,.0f} vs GridFTP {mem['gridftp']['thr'] / MB:,.0f} MB/s = **{r:.2f}**×{cpx}")
    # Compression (issue 6), tomography-like data: lz4 pays on the 1 Gbit/s link, and
    # auto is never more than 5 % behind the better of off and on.
    for sec, path, label in (("path", "veth1-tbf1g", "1 Gbit/s (tbf)"), ("transfer", "lo", "loopback")):
        off, lz4, auto = (get(agg, sec, path, "tomo", "sluice", v) for v in ("default", "lz4", "auto"))
        if not (ok_thr(off) and ok_thr(lz4)):
            lines.append(f"- **NOT RUN** compression on {label} (tomo): off {off['status'] if off else 'not run'}, "
                         f"lz4 {lz4['status'] if lz4 else 'not run'}")
            continue
        r = lz4["thr"] / off["thr"]
        if path != "lo":
            lines.append(f"- **{verdict(r >= 1.8)}** `--compress lz4` ≥ 1.8× off on {label} (tomo): {lz4['thr'] / MB:,.0f} vs "
                         f"{off['thr'] / MB:,.0f} MB/s = **{r:.2f}**×")
        if ok_thr(auto):
            best = max(off["thr"], lz4["thr"])
            ra = auto["thr"] / best
            lines.append(f"- **{verdict(ra >= 0.95)}** `--compress auto` within 5 % of the better of off/lz4 on {label} (tomo): "
                         f"auto {auto['thr'] / MB:,.0f}, off {off['thr'] / MB:,.0f}, lz4 {lz4['thr'] / MB:,.0f} MB/s = **{ra:.2f}**× the better")
    s = get(agg, "million", "lo", "million", "sluice")
    cap = buffer_mib + 64
    # The caps the processes really had (`--buffer-mem auto` sizes them by the job).
    cap_c = cap_d = cap
    for r in runs:
        c = r.get("case", {})
        if c.get("section") == "million" and c.get("workload") == "million" and c.get("tool", "sluice") == "sluice":
            ch = r.get("summary", {}).get("plan", {}).get("channels", [])
            if ch:
                cap_c = sum(x.get("buffer_bytes", 0) for x in ch) / 2**20 + 64
            if c.get("daemon_buffer_bytes"):
                cap_d = c["daemon_buffer_bytes"] / 2**20 + 64
    if s and s["rss_client"] is not None and s["rss_server"] is not None:
        rc, rs_ = s["rss_client"] / 1024, s["rss_server"] / 1024
        ok = rc < cap_c and rs_ < cap_d
        lines.append(f"- **{verdict(ok)}** RSS < buffer cap + 64 MiB on 1,000,000 files: client {rc:,.0f} MiB (cap + 64 = "
                     f"{cap_c:,.0f}), daemon {rs_:,.0f} MiB (cap + 64 = {cap_d:,.0f}) (transfer {s['status']})")
    else:
        t = get(agg, "transfer", "lo", "tree", "sluice")
        extra = ""
        if t and t["rss_client"] is not None and t["rss_server"] is not None:
            extra = (f"; on the {wl.get('tree', {}).get('files', '?')}-file tree: client {t['rss_client'] / 1024:,.0f} MiB, "
                     f"daemon {t['rss_server'] / 1024:,.0f} MiB")
        lines.append(f"- **NOT RUN** RSS < buffer cap + 64 MiB = {cap:.0f} MiB on 1,000,000 files (run with --million){extra}")
    return lines


def baseline_lines(agg, meta):
    """sluice against the baseline build run beside it (`run.sh --sluice-base`), per case."""
    rows = []
    for k, s in agg.items():
        if k[3] != "sluice" or k[4] != "default":
            continue
        b = agg.get((k[0], k[1], k[2], "sluice-base", k[4]))
        if not b:
            continue
        if not (ok_thr(s) and ok_thr(b)):
            rows.append([k[0], k[1], k[2], s["status"], b["status"], "", "", "", "", ""])
            continue
        cpu = f"{s['cpu'] / b['cpu']:.2f}" if s["cpu"] and b["cpu"] else ""
        rows.append([k[0], k[1], k[2], fmt_mb(s["thr"]), fmt_mb(b["thr"]), f"**{s['thr'] / b['thr']:.2f}**",
                     fmt_s(s["cpu"]), fmt_s(b["cpu"]), cpu, ""])
    if not rows:
        return []
    how = ("interleaved run by run on each workload" if meta.get("sluice_base_interleaved") == "yes" else
           "one after the other on each workload (all runs of this build, then all of the baseline: a drift of the "
           "machine within those minutes shows as a difference between the builds)")
    lines = [f"## This build against the baseline build (`{meta.get('sluice_base', '?')}`)", "",
             f"Both run in this run, {how}. Ratio: this build's throughput over the "
             "baseline's (above 1: faster); CPU ratio: this build's CPU seconds over the baseline's (below 1: cheaper).", ""]
    lines += md_table(["section", "path", "workload", "MB/s", "baseline MB/s", "ratio", "CPU s", "baseline CPU s",
                       "CPU ratio", "note"], rows)
    lines.append("")
    return lines


def transfer_tables(agg, wl):
    lines = []
    lo_iperf = iperf_best(agg, "lo")
    for w in wl:
        items = [s for k, s in agg.items() if k[0] in ("transfer", "million") and k[2] == w]
        if not items:
            continue
        sl = next((s for s in items if s["key"][3] == "sluice" and s["key"][4] == "default"), None)
        sl_thr = ok_thr(sl)
        d = wl[w]
        lines.append(f"### {w}: {d['description']} ({int(d['files']):,} files, {int(d['bytes']) / MB:,.0f} MB)")
        lines.append("")
        rows = []
        for s in items:
            t, v = s["key"][3], s["key"][4]
            name = TOOL_LABEL.get(t, t) + ("" if v == "default" else f" ({v})")
            ratio = ""
            if s["status"] == "ok" and sl_thr:
                if t in ("cp", "tar-tar"):
                    ratio = f"sluice/this {sl_thr / s['thr']:.2f}"
                elif t == "sluice" and v == "default":
                    ratio = f"sluice/iperf3 {sl_thr / lo_iperf:.2f}" if lo_iperf else ""
                else:
                    ratio = f"this/sluice {s['thr'] / sl_thr:.2f}"
            status = s["status"] if s["status"] == "ok" else f"**{s['status']}**"
            rss = "" if s["rss_client"] is None else fmt_rss(s["rss_client"])
            if s["rss_server"]:
                rss += f" / {fmt_rss(s['rss_server'])}"
            note = short(s["note"], 140) if s["status"] != "ok" else ""
            if s["status"] == "ok" and s["wire"] and s["bytes"] and t == "sluice":
                note = f"wire/payload {s['wire'] / s['bytes']:.2f}"
            rows.append([name, f"`{s['flags']}`" if s["flags"] else "", s["path"] if False else s["key"][1], status,
                         s["reps"], fmt_s(s["seconds"]) if s["status"] == "ok" else "",
                         fmt_mb(s["thr"]) if s["status"] == "ok" else "",
                         fmt_s(s["cpu"]) if s["status"] == "ok" else "", rss if s["status"] == "ok" else "", ratio, note])
        lines += md_table(["tool", "flags", "path", "status", "runs", "time s", "MB/s", "CPU s", "peak RSS MiB cli / srv",
                           "ratio", "note"], rows)
        lines.append("")
        if sl_thr:
            ahead = [f"{TOOL_LABEL.get(s['key'][3], s['key'][3])} {s['thr'] / sl_thr:.2f}×" for s in items
                     if s["status"] == "ok" and s["key"][3] != "sluice" and s["thr"] > sl_thr]
            wrong = [TOOL_LABEL.get(s["key"][3], s["key"][3]) for s in items if s["status"] == "FAILED" and s["key"][3] != "sluice"]
            lines.append(f"Faster than sluice here: {', '.join(ahead) if ahead else 'nothing'}."
                         + (f" Wrong output (not timed): {', '.join(wrong)}." if wrong else ""))
            lines.append("")
    return lines


def main():
    rows, wl, notes, runs = load()
    meta = read_env(os.path.join(OUT, "meta.env"))
    if meta.get("mode", "").startswith("wan-"):  # bench/wan.sh's runs have their own report
        import report_wan
        return report_wan.main(sys.modules[__name__], rows, wl, notes, runs, meta)
    agg = aggregate(rows)
    for s in agg.values():
        s["path"] = s["key"][1]
    write_summary(agg)
    plots = plot_all(agg, wl)
    L = []
    L.append(f"# sluice benchmark: {meta.get('date', '')[:10]} on {meta.get('host', '?')} ({meta.get('mode', '?')} run)")
    L.append("")
    L.append(f"Machine: {meta.get('cpus', '?')} CPUs ({meta.get('cpu', '?')}), {meta.get('numa_nodes', '?')} NUMA node(s), "
             f"{meta.get('memory', '?')}, kernel {meta.get('kernel', '?')}. sluice `{meta.get('sluice', '?')}` at "
             f"`{meta.get('git', '?')}`, flags `{meta.get('sluice_flags', '')}`. "
             f"Load average at start {meta.get('load_start', '?')}, at end {meta.get('load_end', '?')}. "
             f"Whole run {float(meta.get('seconds_total', 0)) / 60:.1f} min: setup and data generation "
             f"{float(meta.get('seconds_setup', 0) or 0) / 60:.1f}, loopback {float(meta.get('seconds_loopback', 0) or 0) / 60:.1f}, "
             f"paths {float(meta.get('seconds_paths', 0) or 0) / 60:.1f}, sweep {float(meta.get('seconds_sweep', 0) or 0) / 60:.1f}, "
             f"1,000,000 files {float(meta.get('seconds_million', 0) or 0) / 60:.1f} min.")
    L.append("")
    L.append("Absolute numbers drift ±25 % on these shared 2-core machines: **the ratios inside one run are the point.** "
             f"Each case is the median of {meta.get('reps', '?')} runs (sluice, GridFTP and the local ceilings) or "
             f"{meta.get('peer_reps', '?')} (the other peers); a tool whose output is wrong is FAILED and not timed.")
    L.append("")
    L.append("## Targets (transfer and compression issues)")
    L.append("")
    L += targets(agg, wl, meta, runs)
    L.append("")
    L += baseline_lines(agg, meta)
    # ceilings
    L.append("## Ceilings")
    L.append("")
    crow = []
    for k, s in agg.items():
        if k[0] == "ceiling":
            crow.append([TOOL_LABEL.get(k[3], k[3]), k[4], k[1], s["status"], fmt_mb(s["thr"]),
                         f"{s['thr'] * 8 / 1e9:.1f}" if s["thr"] else "", f"`{s['flags']}`", short(s["note"], 100)])
    L += md_table(["ceiling", "variant", "path", "status", "MB/s", "Gbit/s", "how", "note"], crow)
    L.append("")
    L.append("Local `cp -a` and `tar | tar` (same disk, caches dropped, sync inside the timing) are in each workload's table.")
    L.append("")
    L.append("## Loopback: every tool on every workload")
    L.append("")
    L.append("Time includes `sync`; CPU s is user+sys of client and server(s) with their children (GNU time); "
             "peak RSS is the largest single process on each side. Ratio: `this/sluice` is the peer's throughput over "
             "sluice's (below 1: sluice is faster); `sluice/this` is sluice over a ceiling.")
    L.append("")
    L += transfer_tables(agg, wl)
    if "throughput.png" in plots or "throughput.svg" in plots:
        L.append(f"![throughput per tool per workload]({plots[0]})")
        L.append("")
    # paths
    paths = list(OrderedDict.fromkeys(k[1] for k in agg if k[0] in ("path",) or (k[0] == "ceiling" and k[1] not in ("lo", "local"))))
    if paths:
        L.append("## Paths: network namespaces, veth pairs, tbf")
        L.append("")
        L.append(f"netem: {meta.get('netem', '?')}. **RTT is not emulated here**: this kernel has no `sch_netem`, "
                 "so every path has a sub-millisecond RTT; tbf limits the rate on both ends of each link.")
        L.append("")
        prow = []
        for p in paths:
            i1 = next((s for k, s in agg.items() if k[0] == "ceiling" and k[1] == p and k[4].startswith("1 ")), None)
            iN = next((s for k, s in agg.items() if k[0] == "ceiling" and k[1] == p and not k[4].startswith("1 ")), None)
            for w in ("path-big", "tree", "tomo"):
                sl = get(agg, "path", p, w, "sluice")
                if not sl:
                    continue
                for s in [x for k, x in agg.items() if k[0] == "path" and k[1] == p and k[2] == w]:
                    t, v = s["key"][3], s["key"][4]
                    links = ""
                    if s["link1"] is not None and s["link2"] is not None and (s["link1"] + s["link2"]) > 0:
                        tot = s["link1"] + s["link2"]
                        links = f"{s['link1'] / MB:,.0f} / {s['link2'] / MB:,.0f} MB ({100 * s['link2'] / tot:.0f} % on link 2)"
                    rs = ""
                    bi = iperf_best(agg, p)
                    if s["status"] == "ok":
                        if t == "sluice" and bi:
                            rs = f"sluice/iperf3 {s['thr'] / bi:.2f}"
                        elif ok_thr(sl):
                            rs = f"this/sluice {s['thr'] / sl['thr']:.2f}"
                    prow.append([p, w, TOOL_LABEL.get(t, t) + ("" if v == "default" else f" ({v})"),
                                 s["status"] if s["status"] == "ok" else f"**{s['status']}**",
                                 fmt_mb(s["thr"]) if s["status"] == "ok" else "",
                                 fmt_mb(ok_thr(i1)), fmt_mb(ok_thr(iN)), links, rs,
                                 short(s["note"], 120)])
        L += md_table(["path", "workload", "tool", "status", "MB/s", "iperf3 1 stream", f"iperf3 {meta.get('peer_streams', 'N')} streams",
                       "bytes sent on link 1 / link 2", "ratio", "note (sluice: its JSON plan)"], prow)
        L.append("")
        L.append("On the two-link paths the server listens on both addresses and sluice is given both NICs "
                 "(`--nic` on each side); the link columns are the client side's tx byte counters, so they say which "
                 "links the bytes really took. The peers are pointed at link 1's address (none of them can use two). "
                 "iperf3 on two links runs one client per link at the same time and adds them.")
        L.append("")
        if "paths.png" in plots:
            L.append("![paths](paths.png)")
            L.append("")
    # sweep
    sw = [(k, s) for k, s in agg.items() if k[0] == "sweep"]
    if sw:
        L.append("## Placement sweep (seed 000 figure 1, seed 001 configurations A–H)")
        L.append("")
        nodes = meta.get("numa_nodes", "?")
        if nodes == "1":
            L.append("**This machine has one NUMA node: placement cannot change where memory is, so NUMA effects "
                     "cannot show here.** The sweep still runs every policy and thread count (data in /dev/shm, like "
                     "seed 000's memory file system), so the harness is ready for a multi-node machine; the "
                     "configurations that need node 1 are refused by sluice's own planner and recorded as CANNOT_RUN, "
                     "not faked.")
            L.append("")
        srow = []
        for k, s in sw:
            srow.append([k[2], k[4], s["status"] if s["status"] == "ok" else f"**{s['status']}**", s["reps"],
                         fmt_s(s["seconds"]) if s["status"] == "ok" else "", fmt_mb(s["thr"]) if s["status"] == "ok" else "",
                         fmt_s(s["cpu"]) if s["status"] == "ok" else "", f"`{s['flags']}`",
                         short(s["note"], 150)])
        L += md_table(["workload", "configuration", "status", "runs", "time s", "MB/s", "CPU s", "flags", "note"], srow)
        L.append("")
        L.append("Seed 001's tables: compression and decompression configurations A–H are (memory domain, execution "
                 "domain) = A (0,0), B (0,1), C (1,0), D (1,1), E (0, 0&1), F (1, 0&1), G (0, OS), H (1, OS), given to "
                 "sluice as `--place ROLE=mem:M,exec:E`; send/receive configurations A–E are (sender socket, "
                 "receiver socket) = (0,0), (0,1), (1,0), (1,1), (OS,OS).")
        L.append("")
        if "sweep.png" in plots:
            L.append("![placement sweep](sweep.png)")
            L.append("")
    # failures
    fails = [(k, s) for k, s in agg.items() if s["status"] == "FAILED"]
    if fails:
        L.append("## Failures")
        L.append("")
        for k, s in fails:
            L.append(f"- {k[0]} / {k[1]} / {k[2]} / {TOOL_LABEL.get(k[3], k[3])} ({k[4]}): `{s['flags']}` — {s['note']}")
        L.append("")
    skipped = [(k, s) for k, s in agg.items() if s["status"] == "SKIPPED"]
    if skipped:
        L.append("## Skipped")
        L.append("")
        for k, s in skipped:
            L.append(f"- {k[1]} / {k[2]} / {TOOL_LABEL.get(k[3], k[3])}: {s['note']}")
        L.append("")
    L.append("## Notes")
    L.append("")
    for n in notes:
        L.append(f"- {n}")
    L.append(f"- Sources: {meta.get('source_fs', '?')}; destinations: {meta.get('destination_fs', '?')}. "
             f"Page cache dropped before every timed run: {meta.get('drop_caches', '?')}.")
    L.append("- Verification (bench/lib/verify.py): every byte of every file, entry types, permission bits and "
             "symlink targets, nothing missing or extra; owners and timestamps are not compared.")
    L.append("- Files: `raw.csv` (every run), `summary.csv` (medians), `workloads.csv`, `meta.env`, "
             "`sluice-runs.jsonl` (sluice's JSON summaries with plans), `logs/`.")
    L.append("")
    open(os.path.join(OUT, "results.md"), "w").write("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())

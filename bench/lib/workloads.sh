# shellcheck shell=bash
# Workloads: generated once into $WORK/data (kept between runs, ignored by git), every
# byte deterministic. Full sizes by default; --quick uses tiny stand-ins of each.
#
#   big        one random file (4 GiB; quick 64 MiB)
#   many       32 x 128 MiB random files (quick 8 x 8 MiB)
#   tree       the Linux kernel source tree from Debian's linux-source (~80k files);
#              quick (or without linux-source): a generated 3,000-file tree with
#              executables, symlinks and empty directories
#   small      50,000 regular files of 0-32 KiB in 100 directories, nothing else (no
#              symlinks, executables or empty directories): the small-file tree every
#              peer can copy correctly, so the GridFTP target has a verdict (quick 2,000)
#   tree-tar   a tar of that tree (compressible, one file)
#   tomo       raw 16-bit detector frames of a rotating object (96 x 11.06 MB, lz4 ~2:1;
#              quick 4 frames)
#   path-big   one 1 GiB random file for the rate-limited paths (quick 32 MiB)
#   million    1,000,000 files of 0-4 KiB (full mode with --million only; quick never)

declare -A WL_PATH=() WL_KIND=() WL_DESC=()
WORKLOADS=""

# keystream FILE BYTES IVNUM: AES-128-CTR keystream of a fixed key (deterministic).
keystream() {
    local iv
    iv=$(printf '%032x' "$3")
    { openssl enc -aes-128-ctr -nosalt -K 5a6c75696365626e6368000000000000 -iv "$iv" \
        -in /dev/zero 2>/dev/null || true; } | head -c "$2" >"$1.tmp"
    [ "$(stat -c %s "$1.tmp")" = "$2" ] && mv "$1.tmp" "$1"
}

_wl_ok() { [ -f "$DATA/.$1.ok" ] && [ "$(cat "$DATA/.$1.ok")" = "$2" ]; }
_wl_done() { echo "$2" >"$DATA/.$1.ok"; rm -f "$DATA/.$1.stats"; }

wl_define() {
    mkdir -p "$DATA"
    local ksrc
    ksrc=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)
    if [ "$QUICK" = 1 ]; then
        BIG_BYTES=$((64 << 20)) MANY_N=8 MANY_BYTES=$((8 << 20)) TOMO_FRAMES=4
        PATHBIG_BYTES=$((32 << 20)) KSRC="" SMALL_N=2000
    else
        BIG_BYTES=$((4 << 30)) MANY_N=32 MANY_BYTES=$((128 << 20)) TOMO_FRAMES=96
        PATHBIG_BYTES=$((1 << 30)) KSRC=$ksrc SMALL_N=50000
    fi
    WL_PATH[big]=$DATA/big/big.bin WL_KIND[big]=file
    WL_DESC[big]="1 x $(human_bytes $BIG_BYTES) random"
    WL_PATH[many]=$DATA/many WL_KIND[many]=dir
    WL_DESC[many]="$MANY_N x $(human_bytes $MANY_BYTES) random"
    WL_PATH[tree]=$DATA/tree WL_KIND[tree]=dir
    if [ -n "$KSRC" ]; then
        WL_DESC[tree]="Linux source tree ($(basename "$KSRC" .tar.xz))"
    else
        WL_DESC[tree]="generated 3,000-file tree (0-64 KiB, exec bits, symlinks)"
        [ "$QUICK" = 1 ] || note "linux-source not installed: 'tree' is a generated 3,000-file stand-in"
    fi
    WL_PATH[small]=$DATA/small WL_KIND[small]=dir
    WL_DESC[small]="generated $(sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$SMALL_N")-file tree (0-32 KiB; regular files only: no symlinks, exec bits or empty dirs)"
    WL_PATH[tree-tar]=$DATA/tree-tar/tree.tar WL_KIND[tree-tar]=file
    WL_DESC[tree-tar]="tar of the tree (one compressible file)"
    WL_PATH[tomo]=$DATA/tomo WL_KIND[tomo]=dir
    WL_DESC[tomo]="$TOMO_FRAMES x 11.06 MB 16-bit detector frames (lz4 ~2:1)"
    WL_PATH[path-big]=$DATA/path-big/path-big.bin WL_KIND[path-big]=file
    WL_DESC[path-big]="1 x $(human_bytes $PATHBIG_BYTES) random"
    WL_PATH[million]=$DATA/million WL_KIND[million]=dir
    WL_DESC[million]="1,000,000 files of 0-4 KiB"
    WORKLOADS="big many tree small tree-tar tomo"
}

wl_prepare() {
    local name=$1 spec t0 i
    t0=$(now)
    case $name in
        big)
            spec="keystream $BIG_BYTES"
            _wl_ok big "$spec" && return 0
            log "generating big ($(human_bytes $BIG_BYTES))"
            mkdir -p "$DATA/big" && keystream "${WL_PATH[big]}" "$BIG_BYTES" 1 || return 1
            ;;
        path-big)
            spec="keystream $PATHBIG_BYTES"
            _wl_ok path-big "$spec" && return 0
            mkdir -p "$DATA/path-big" && keystream "${WL_PATH[path-big]}" "$PATHBIG_BYTES" 2 || return 1
            ;;
        many)
            spec="keystream $MANY_N x $MANY_BYTES"
            _wl_ok many "$spec" && return 0
            log "generating many ($MANY_N x $(human_bytes $MANY_BYTES))"
            rm -rf "$DATA/many" && mkdir -p "$DATA/many" || return 1
            for ((i = 0; i < MANY_N; i++)); do
                keystream "$DATA/many/part$(printf %03d $i).bin" "$MANY_BYTES" $((100 + i)) || return 1
            done
            ;;
        tree | tree-tar)
            spec="tree ${KSRC:-generated}"
            if _wl_ok tree "$spec" && _wl_ok tree-tar "$spec"; then return 0; fi
            rm -rf "$DATA/tree" "$DATA/tree-tar" && mkdir -p "$DATA/tree" "$DATA/tree-tar" || return 1
            if [ -n "$KSRC" ]; then
                log "unpacking $KSRC (once; kept in $DATA)"
                xz -dc -T0 "$KSRC" >"$DATA/tree-tar/tree.tar" &&
                    tar -C "$DATA/tree" --strip-components=1 -xf "$DATA/tree-tar/tree.tar" || return 1
            else
                "$PY" "$BENCH/lib/gen.py" tree "$DATA/tree" --files 3000 --max-bytes 65536 \
                    --fanout 100 --kernel-like --seed 7 &&
                    tar -C "$DATA/tree" -cf "$DATA/tree-tar/tree.tar" . || return 1
            fi
            _wl_done tree "$spec"
            _wl_done tree-tar "$spec"
            sync
            return 0
            ;;
        small)
            # umask 022 (files 644, directories 755): the same modes whatever umask the
            # run inherits
            spec="small $SMALL_N 0-32768 fanout 500 seed 13"
            _wl_ok small "$spec" && return 0
            log "generating small ($SMALL_N files; once, kept in $DATA)"
            rm -rf "$DATA/small" && (umask 022 && "$PY" "$BENCH/lib/gen.py" tree "$DATA/small" --files "$SMALL_N" \
                --max-bytes 32768 --fanout 500 --seed 13) || return 1
            ;;
        tomo)
            spec="tomo $TOMO_FRAMES"
            _wl_ok tomo "$spec" && return 0
            "$PY" -c "import numpy" 2>/dev/null || { note "python3-numpy missing: no tomo workload"; return 1; }
            log "generating tomo ($TOMO_FRAMES frames)"
            rm -rf "$DATA/tomo" && "$PY" "$BENCH/lib/gen.py" tomo "$DATA/tomo" --frames "$TOMO_FRAMES" --seed 3 || return 1
            ;;
        million)
            spec="million 1000000 0-4096"
            _wl_ok million "$spec" && return 0
            log "generating the 1,000,000-file tree (once; kept in $DATA)"
            rm -rf "$DATA/million" && "$PY" "$BENCH/lib/gen.py" tree "$DATA/million" --files 1000000 \
                --max-bytes 4096 --fanout 1000 --seed 11 || return 1
            ;;
        *) return 1 ;;
    esac
    _wl_done "$name" "$spec"
    sync
    log "prepared $name in $(fsub "$(now)" "$t0") s"
}

# wl_stats NAME -> "FILES BYTES" (cached next to the data)
wl_stats() {
    local f="$DATA/.$1.stats"
    if [ ! -s "$f" ]; then
        "$PY" "$BENCH/lib/gen.py" stats "${WL_PATH[$1]}" >"$f"
    fi
    cat "$f"
}

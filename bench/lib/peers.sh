# shellcheck shell=bash
# The tools: installation from Debian packages, one server per timed run (started under
# GNU time so that its CPU seconds and peak RSS are known), and the client command with
# the flags written into the table. Every server listens only on loopback inside our
# loopback namespace or on our veth addresses.
#
# tool_begin TOOL SRC KIND DST  starts TOOL's servers for a push of SRC (a file or a
#                               directory whose contents are copied) into DST and sets
#                               CMD (the client, a bash command) and FLAGS (for the table)
# tool_end TOOL                 stops them and sets SRV_CPU, SRV_RSS

TOOLS_LOCAL="cp tar-tar"
TOOLS_NET="sluice gridftp gridftp-3pt xrdcp rsyncd rsync-ssh scp tar-nc"

APT_CORE="rsync openssh-server openssh-client netcat-openbsd iperf3 time openssl xz-utils iproute2"
APT_PEERS="globus-gridftp-server-progs globus-gass-copy-progs xrootd-server xrootd-client"
APT_REPORT="python3-matplotlib python3-numpy"

# Unprivileged account that GridFTP's anonymous logins and xrootd run as.
PEER_USER=nobody
PEER_GROUP=$(id -gn nobody 2>/dev/null || echo nogroup)

# Parallelism given to every peer that has a knob for it (and to iperf3's "N streams").
PEER_STREAMS=4
GUC_FLAGS="-fast -p $PEER_STREAMS"
SSH_CIPHER=aes128-gcm@openssh.com

install_peers() {
    local pkgs="$APT_CORE $APT_PEERS $APT_REPORT" p missing=""
    [ "$QUICK" = 1 ] || pkgs="$pkgs linux-source"
    if [ "$NO_INSTALL" = 1 ]; then note "--no-install: using whatever is installed"; return 0; fi
    if ! is_root || ! command -v apt-get >/dev/null; then
        note "not root or no apt-get: peers not installed, using whatever is installed"
        return 0
    fi
    for p in $pkgs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && { log "all packages already installed"; return 0; }
    log "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! apt-get install -y -q --no-install-recommends $missing >"$RUNTMP/apt.log" 2>&1; then
        apt-get update -q >>"$RUNTMP/apt.log" 2>&1
        for p in $missing; do
            apt-get install -y -q --no-install-recommends "$p" >>"$RUNTMP/apt.log" 2>&1 ||
                note "package $p could not be installed: the cases needing it are SKIPPED"
        done
    fi
}

# tool_missing TOOL: prints why TOOL cannot run here (nothing if it can).
tool_missing() {
    local b
    case $1 in
        sluice) b=$SLUICE ;;
        sluice-base) b=${SLUICE_BASE:-sluice-base} ;;
        cp) b=cp ;;
        tar-tar) b=tar ;;
        gridftp | gridftp-3pt) b="globus-gridftp-server globus-url-copy" ;;
        xrdcp) b="xrootd xrdcp" ;;
        rsyncd) b=rsync ;;
        rsync-ssh) b="rsync ssh /usr/sbin/sshd" ;;
        scp) b="scp /usr/sbin/sshd" ;;
        tar-nc) b="tar nc" ;;
        iperf3) b=iperf3 ;;
    esac
    local x
    for x in $b; do command -v "$x" >/dev/null 2>&1 || { echo "$x not installed"; return; }; done
    if [ "$1" = xrdcp ] && [ "$PATH_NAME" = lo ] && [ -z "$NS_L_READY" ]; then
        echo "xrootd cannot bind loopback only; it runs only inside a namespace (needs root)"
    fi
    if [ "$1" = gridftp-3pt ] && [ "$PATH_NAME" != lo ] && [ -z "$CLI_HOST" ]; then echo "no source host"; fi
}

# Per-run server ports (inside our namespaces any port is free; on the host, ask).
_port() {
    if [ -n "$SRV_X" ]; then echo "$1"; else free_port; fi
}

_ssh_keys() {
    [ -f "$WORK/ssh/userkey" ] && return 0
    mkdir -p "$WORK/ssh" && chmod 700 "$WORK/ssh"
    ssh-keygen -q -t ed25519 -N '' -f "$WORK/ssh/hostkey" &&
        ssh-keygen -q -t ed25519 -N '' -f "$WORK/ssh/userkey" &&
        cp "$WORK/ssh/userkey.pub" "$WORK/ssh/authorized_keys"
}

SSH_OPTS() {
    echo "-i $WORK/ssh/userkey -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
}

_nic_flags() { local n out=""; for n in $1; do out="$out --nic $n"; done; echo "$out"; }

tool_begin() {
    local tool=$1 src=$2 kind=$3 dst=$4 name parent port port2 r="" dotsrc
    name=$(basename "$src") parent=$(dirname "$src")
    CMD="" FLAGS="" TOOL_ERR=""
    if [ "$kind" = dir ]; then r="-r"; dotsrc="$src/"; else dotsrc="$src"; fi
    case $tool in
        cp)
            FLAGS="cp -a"
            if [ "$kind" = dir ]; then CMD="cp -a '$src/.' '$dst/'"; else CMD="cp -a '$src' '$dst/'"; fi
            ;;
        tar-tar)
            FLAGS="tar -cf - | tar -xf -"
            if [ "$kind" = dir ]; then
                CMD="tar -C '$src' -cf - . | tar -C '$dst' -xf -"
            else
                CMD="tar -C '$parent' -cf - '$name' | tar -C '$dst' -xf -"
            fi
            ;;
        sluice | sluice-base)
            local bin=$SLUICE
            [ "$tool" = sluice-base ] && bin=$SLUICE_BASE
            port=$(_port 17000)
            local listen=127.0.0.1 auth="" cnics="" snics=""
            if [ "$PATH_NAME" != lo ]; then
                listen=0.0.0.0
                head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RUNTMP/token"
                auth="--token-file $RUNTMP/token"
                cnics=$(_nic_flags "$CLI_NICS") snics=$(_nic_flags "$SRV_NICS")
            fi
            # shellcheck disable=SC2086
            start_server sluice "$SRV_X" "$bin" serve --root "$dst" --listen "$listen:$port" --json \
                $auth $snics $SLUICE_SRV_FLAGS $SLUICE_SRV_EXTRA
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="sluice serve did not listen: $(tail -c 300 "$RUNTMP/srv-sluice.err")"; return 1; }
            FLAGS="sluice cp $r $SLUICE_CLI_FLAGS $SLUICE_CLI_EXTRA${cnics:+ --nic (each link)}"
            [ "${LINKS:-1}" = 2 ] && FLAGS="$FLAGS sluice://ADDR1,ADDR2:PORT/"
            [ -n "$SLUICE_SRV_EXTRA" ] && FLAGS="$FLAGS; serve $SLUICE_SRV_EXTRA"
            # two links: both of the daemon's addresses, the data connections alternate
            local hosts=$SRV_HOST
            [ "${LINKS:-1}" = 2 ] && [ -n "$SRV_HOST2" ] && hosts="$SRV_HOST,$SRV_HOST2"
            CMD="'$bin' cp $r --json $auth $cnics $SLUICE_CLI_FLAGS $SLUICE_CLI_EXTRA '$dotsrc' sluice://$hosts:$port/ >'$RUNTMP/sluice.json'"
            ;;
        gridftp)
            port=$(_port 2811)
            start_server gridftp "$SRV_X" globus-gridftp-server -aa -anonymous-user "$PEER_USER" \
                -anonymous-group "$PEER_GROUP" -p "$port" -control-interface "$SRV_HOST" \
                -data-interface "$SRV_HOST" -d error -l "$RUNTMP/gridftp.log"
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="globus-gridftp-server did not listen"; return 1; }
            if [ "$kind" = dir ]; then
                FLAGS="globus-url-copy $GUC_FLAGS -cc $PEER_STREAMS -r -cd"
                CMD="globus-url-copy $GUC_FLAGS -cc $PEER_STREAMS -r -cd 'file://$src/' 'ftp://$SRV_HOST:$port$dst/'"
            else
                FLAGS="globus-url-copy $GUC_FLAGS"
                CMD="globus-url-copy $GUC_FLAGS 'file://$src' 'ftp://$SRV_HOST:$port$dst/$name'"
            fi
            ;;
        gridftp-3pt)
            port=$(_port 2812) port2=$(_port 2813)
            start_server gridftp-src "$CLI_X" globus-gridftp-server -aa -anonymous-user "$PEER_USER" \
                -anonymous-group "$PEER_GROUP" -p "$port" -control-interface "$CLI_HOST" \
                -data-interface "$CLI_HOST" -d error -l "$RUNTMP/gridftp-src.log"
            start_server gridftp-dst "$SRV_X" globus-gridftp-server -aa -anonymous-user "$PEER_USER" \
                -anonymous-group "$PEER_GROUP" -p "$port2" -control-interface "$SRV_HOST" \
                -data-interface "$SRV_HOST" -d error -l "$RUNTMP/gridftp-dst.log"
            wait_listen "$CLI_X" "$port" && wait_listen "$SRV_X" "$port2" ||
                { TOOL_ERR="globus-gridftp-server did not listen"; return 1; }
            if [ "$kind" = dir ]; then
                FLAGS="globus-url-copy $GUC_FLAGS -cc $PEER_STREAMS -r -cd ftp://A/ ftp://B/ (third party)"
                CMD="globus-url-copy $GUC_FLAGS -cc $PEER_STREAMS -r -cd 'ftp://$CLI_HOST:$port$src/' 'ftp://$SRV_HOST:$port2$dst/'"
            else
                FLAGS="globus-url-copy $GUC_FLAGS ftp://A ftp://B (third party)"
                CMD="globus-url-copy $GUC_FLAGS 'ftp://$CLI_HOST:$port$src' 'ftp://$SRV_HOST:$port2$dst/$name'"
            fi
            ;;
        xrdcp)
            port=$(_port 1094)
            mkdir -p "$RUNTMP/xrd" && chown "$PEER_USER:$PEER_GROUP" "$RUNTMP/xrd"
            cat >"$RUNTMP/xrootd.cfg" <<EOF
xrd.port $port
xrd.network nodnr
all.export $dst
all.adminpath $RUNTMP/xrd
all.pidpath $RUNTMP/xrd
EOF
            start_server xrootd "$SRV_X" xrootd -c "$RUNTMP/xrootd.cfg" -R "$PEER_USER" -l "$RUNTMP/xrd/xrootd.log"
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="xrootd did not listen: $(tail -c 300 "$RUNTMP/srv-xrootd.err")"; return 1; }
            local env="XRD_CONNECTIONRETRY=1 XRD_REQUESTTIMEOUT=300 XRD_STREAMTIMEOUT=300"
            if [ "$kind" = dir ]; then
                FLAGS="xrdcp -s -f -r --parallel $PEER_STREAMS --streams $PEER_STREAMS SRC/*"
                CMD="shopt -s dotglob; $env xrdcp -s -f -r --parallel $PEER_STREAMS --streams $PEER_STREAMS '$src'/* 'root://$SRV_HOST:$port/$dst/'"
            else
                FLAGS="xrdcp -s -f --streams $PEER_STREAMS"
                CMD="$env xrdcp -s -f --streams $PEER_STREAMS '$src' 'root://$SRV_HOST:$port/$dst/$name'"
            fi
            ;;
        rsyncd)
            port=$(_port 873)
            cat >"$RUNTMP/rsyncd.conf" <<EOF
port = $port
address = $SRV_HOST
# chroot (we are root): without it rsync rewrites symlink targets ("../.././x" -> "../../x")
use chroot = yes
munge symlinks = no
log file = $RUNTMP/rsyncd.log
[bench]
    path = $dst
    read only = no
    uid = root
    gid = root
EOF
            start_server rsyncd "$SRV_X" rsync --daemon --no-detach --config="$RUNTMP/rsyncd.conf"
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="rsync --daemon did not listen"; return 1; }
            FLAGS="rsync -a -W rsync://"
            CMD="rsync -a -W '$dotsrc' 'rsync://$SRV_HOST:$port/bench/'"
            ;;
        rsync-ssh | scp)
            _ssh_keys || { TOOL_ERR="ssh-keygen failed"; return 1; }
            port=$(_port 22)
            mkdir -p /run/sshd
            cat >"$RUNTMP/sshd_config" <<EOF
Port $port
ListenAddress $SRV_HOST
HostKey $WORK/ssh/hostkey
AuthorizedKeysFile $WORK/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
Subsystem sftp internal-sftp
Ciphers $SSH_CIPHER,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com
LogLevel ERROR
EOF
            start_server sshd "$SRV_X" /usr/sbin/sshd -D -e -f "$RUNTMP/sshd_config"
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="sshd did not listen: $(tail -c 300 "$RUNTMP/srv-sshd.err")"; return 1; }
            local so
            so=$(SSH_OPTS)
            if [ "$tool" = scp ]; then
                FLAGS="scp -p${r:+ -r} -c $SSH_CIPHER (SFTP)"
                if [ "$kind" = dir ]; then
                    CMD="scp -rp -q $so -P $port -c $SSH_CIPHER '$src/.' 'root@$SRV_HOST:$dst/'"
                else
                    CMD="scp -p -q $so -P $port -c $SSH_CIPHER '$src' 'root@$SRV_HOST:$dst/'"
                fi
            else
                FLAGS="rsync -a -W -e 'ssh -c $SSH_CIPHER'"
                CMD="rsync -a -W -e 'ssh $so -p $port -c $SSH_CIPHER' '$dotsrc' 'root@$SRV_HOST:$dst/'"
            fi
            ;;
        tar-nc)
            port=$(_port 9000)
            start_server tar-nc "$SRV_X" bash -c "nc -l $SRV_HOST $port | tar -C '$dst' -xf -"
            wait_listen "$SRV_X" "$port" || { TOOL_ERR="nc -l did not listen"; return 1; }
            FLAGS="tar -cf - | nc -N ... | tar -xf -"
            local wait_srv="rc=\$?; while kill -0 ${SRV_PIDS[tar-nc]} 2>/dev/null; do sleep 0.01; done; (exit \$rc)"
            if [ "$kind" = dir ]; then
                CMD="tar -C '$src' -cf - . | nc -N $SRV_HOST $port; $wait_srv"
            else
                CMD="tar -C '$parent' -cf - '$name' | nc -N $SRV_HOST $port; $wait_srv"
            fi
            ;;
        *)
            TOOL_ERR="unknown tool $tool"
            return 1
            ;;
    esac
    FLAGS=$(tr -s ' ' <<<"$FLAGS" | sed 's/ $//')
    return 0
}

# Destination directory for one run, writable by the account the tool's server writes as.
tool_dst() {
    local tool=$1 dst=$2
    rm -rf "$dst" && mkdir -p "$dst" || return 1
    case $tool in
        gridftp | gridftp-3pt | xrdcp) chown "$PEER_USER:$PEER_GROUP" "$dst" ;;
    esac
}

tool_end() {
    local tool=$1 n cpu=0 rss=0
    SRV_CPU="" SRV_RSS=""
    case $tool in
        cp | tar-tar) return 0 ;;
        sluice | sluice-base) set -- sluice ;;
        gridftp) set -- gridftp ;;
        gridftp-3pt) set -- gridftp-src gridftp-dst ;;
        xrdcp) set -- xrootd ;;
        rsyncd) set -- rsyncd ;;
        rsync-ssh | scp) set -- sshd ;;
        tar-nc) set -- tar-nc ;;
    esac
    for n in "$@"; do
        stop_server "$n"
        cpu=$(awk -v a="$cpu" -v b="${S_CPU:-0}" 'BEGIN { printf "%.2f", a + b }')
        [ "${S_RSS:-0}" -gt "$rss" ] && rss=$S_RSS
    done
    SRV_CPU=$cpu SRV_RSS=$rss
}

# The init of a namespaced sandbox. `unshare` runs it as pid 1 of fresh user,
# mount, pid, ipc and uts namespaces (and a network namespace unless the
# sandbox may use the host's network):
#
#   bash -c SCRIPT sandfleet-init SANDBOX_DIR IMAGE_DIR WORKDIR HOSTNAME MARKER MODE
#
# It builds the sandbox's root filesystem on a tmpfs (the host's system
# directories read-only, private /dev, /proc, /tmp, and the image as a
# copy-on-write workdir) and pivots into it. In mode `serve` it then becomes
# the sandbox's init, which reaps orphans until it is killed; in mode `probe`
# it exits. Either way it first prints `ready overlay` or `ready copy`.
set -eu
sandbox=$1 image=$2 workdir=$3 hostname=$4 marker=$5 mode=$6
root=$sandbox/rootfs

# Blocking on a FIFO opened for both reading and writing never returns, so the
# init waits without a child process of its own; unlinked, nobody can write it.
mkfifo "$sandbox/init.fifo"
exec 3<>"$sandbox/init.fifo"
rm "$sandbox/init.fifo"

mount -t tmpfs -o mode=0755 sandfleet-root "$root"

# The host's system directories: commands run the host's tools.
for dir in usr etc opt; do
    if [ -d "/$dir" ]; then
        mkdir "$root/$dir"
        mount --rbind "/$dir" "$root/$dir"
    fi
done
for dir in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$dir" ]; then
        ln -s "$(readlink "/$dir")" "$root/$dir"
    elif [ -d "/$dir" ]; then
        mkdir "$root/$dir"
        mount --rbind "/$dir" "$root/$dir"
    fi
done
# ...read-only, submounts included. A user namespace may not clear the flags a
# mount already has (nosuid, nodev, atime), so each is remounted with its own.
mounts=$(cat /proc/self/mountinfo)
while read -r _ _ _ _ mountpoint options _; do
    case $mountpoint in
    "$root"/*)
        flags=${options#rw}
        mount -o "remount,bind,ro$flags" "$mountpoint"
        ;;
    esac
done <<<"$mounts"

mkdir "$root/dev" "$root/proc" "$root/tmp" "$root/root"
mount -t tmpfs -o mode=0755,nosuid sandfleet-dev "$root/dev"
for node in null zero full random urandom tty; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev sandfleet-shm "$root/dev/shm"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=1777,nosuid,nodev sandfleet-tmp "$root/tmp"
echo "$hostname" >"$root/proc/sys/kernel/hostname"

# The workdir: the image under a private overlay, so the image stays as it is;
# where overlayfs is not allowed, a private copy (reflinked where it can be).
mkdir -p "$root$workdir"
if mount -t overlay sandfleet-workdir \
    -o "lowerdir=$image,upperdir=$sandbox/upper,workdir=$sandbox/work" "$root$workdir"; then
    copy=overlay
else
    cp -a --reflink=auto "$image/." "$sandbox/upper/"
    mount --bind "$sandbox/upper" "$root$workdir"
    copy=copy
fi

cd "$root"
mkdir .old
pivot_root . .old
umount -l /.old
rmdir /.old
cd /

if [ "$mode" = probe ]; then
    echo "ready $copy"
    exit 0
fi
# The init: bash blocked on the FIFO, reaping (on SIGCHLD) the orphans
# re-parented to pid 1. It reports ready only once it carries the marker as
# argv[0], then lets go of stdout.
exec -a "$marker" bash -c 'echo "ready $1"; exec </dev/null >/dev/null 2>&1
while read -r -u 3 _; do :; done' sandfleet-init "$copy"

"""Hosts as network namespaces, for tests of several machines on one: a
switch namespace holding one bridge, and each host a namespace of its own
joined to the bridge by a veth pair, with an address of the test's own
making (NET.0/24, a private /24 picked from the test's PID, that exists
only inside these namespaces: nothing is added to the root namespace's
links, addresses or routes). Every name carries the test's PID
(gpo<pid>-<host>), so that two tests can run at once.

- Net.host(NAME) adds a host; Net.popen(NAME, ARGS) starts a process in it;
  Net.inside(NAME) (a context manager) and Net.enter(NAME) move the calling
  thread into a host, for the test's own sockets (a socket belongs to the
  namespace of the thread that made it; threads and processes started from a
  thread inherit its namespace).
- Partitions: Net.cut(NAME) / Net.heal(NAME) set the host's port on the
  switch down and up again (the cable pulled at the switch: the host's
  packets vanish, no error comes back, as in a real partition);
  Net.drop(NAME, ADDRS) / Net.undrop(NAME) drop the host's traffic to and
  from some addresses only, with an nftables table inside the host.
- Net.cleanup() kills by PID every process Net started, and deletes the
  namespaces (also on failure: a test calls it in its finally; SIGTERM
  from meson's timeout becomes SystemExit, see Net.catch_sigterm()).

Processes are started with `nsenter --net=/run/netns/NS`, not `ip netns
exec`: the latter also remounts /sys in a new mount namespace, which hides
the cgroup filesystems mounted under /sys/fs/cgroup, where the agents make
their jobs' cgroups. nsenter changes the network namespace only (and execs
the program, so the PID Net keeps is the program's). Needs root."""

import contextlib
import ctypes
import os
import signal
import subprocess
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)


def _setns(path):
    """Moves the calling thread into the network namespace at PATH."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _ns_inode(path):
    return os.stat(path).st_ino


class NetError(RuntimeError):
    """A command that builds or changes the network failed (its output said why)."""


def sh(*args, check=True):
    """Runs ARGS (no shell); NetError with its output when it fails."""
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise NetError(f"{' '.join(args)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p


class Host:
    """One host: its namespace's name and path, its address, its port on the switch."""

    def __init__(self, net, name, addr, port):
        self.net, self.name, self.addr, self.port = net, name, addr, port
        self.ns = f"{net.prefix}-{name}"
        self.path = f"/run/netns/{self.ns}"
        self.inode = None  # the namespace's inode, as /proc/PID/ns/net shows it

    def __repr__(self):
        return f"Host({self.name}, {self.addr})"


class Net:
    """The switch and the hosts of one test. PREFIX defaults to gpo<pid>."""

    def __init__(self, prefix=None):
        pid = os.getpid()
        self.prefix = prefix or f"gpo{pid}"
        # 10.A.B.0/24 with A in 100..227 and B from the PID: only inside our namespaces.
        self.net = f"10.{100 + (pid >> 8) % 128}.{pid & 255}"
        self.switch = f"{self.prefix}-sw"
        self.hosts = {}
        self.procs = []  # every Popen started in a host, killed by PID at cleanup
        self.namespaces = []  # made so far, deleted at cleanup
        self.lock = threading.Lock()
        self.root_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._next = 10

    # -- Building. ----------------------------------------------------------------------

    def _add_ns(self, ns):
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    def start(self):
        """Makes the switch namespace and its bridge (no address: it only switches)."""
        self._add_ns(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        return self

    def host(self, name):
        """Adds host NAME: its namespace, eth0 in it with the next address, its
        port (named NAME) on the bridge. Returns the Host."""
        if len(name) > 15 or not name.isalnum():
            raise ValueError(f"host name {name!r}: expected 1-15 letters and digits")
        addr = f"{self.net}.{self._next}"
        self._next += 1
        h = Host(self, name, addr, name)
        self._add_ns(h.ns)
        h.inode = _ns_inode(h.path)
        sh("ip", "link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", name,
           "netns", self.switch)
        sh("ip", "-n", self.switch, "link", "set", "dev", name, "master", "br0", "up")
        sh("ip", "-n", h.ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        sh("ip", "-n", h.ns, "link", "set", "eth0", "up")
        self.hosts[name] = h
        return h

    def host_of_inode(self, inode):
        """The name of the host whose namespace has INODE, or None (the root's, another's)."""
        for h in self.hosts.values():
            if h.inode == inode:
                return h.name
        return None

    # -- Processes and threads inside hosts. --------------------------------------------

    def popen(self, name, args, **kwargs):
        """subprocess.Popen(ARGS) inside host NAME; its PID is the program's."""
        h = self.hosts[name]
        p = subprocess.Popen(["nsenter", f"--net={h.path}", "--"] + [str(a) for a in args],
                             **kwargs)
        with self.lock:
            self.procs.append(p)
        return p

    def prefix_args(self, name):
        """The words that start a program inside host NAME (for a class that
        builds its own command line)."""
        return ["nsenter", f"--net={self.hosts[name].path}", "--"]

    def adopt(self, proc):
        """Keeps PROC (a Popen started with prefix_args) to be killed at cleanup."""
        with self.lock:
            self.procs.append(proc)
        return proc

    def enter(self, name):
        """Moves the calling thread into host NAME for good (until leave())."""
        _setns(self.hosts[name].path)

    def leave(self):
        """Moves the calling thread back to the namespace the test started in."""
        if _libc.setns(self.root_ns, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns(root): {os.strerror(err)}")

    @contextlib.contextmanager
    def inside(self, name):
        """The calling thread inside host NAME for the block, then back where it was."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(self.hosts[name].path)
            yield self.hosts[name]
        finally:
            try:
                if _libc.setns(back, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back")
            finally:
                os.close(back)

    # -- Partitions. ----------------------------------------------------------------------

    def cut(self, name):
        """Host NAME's port on the switch down: nothing reaches it, nothing leaves it."""
        sh("ip", "-n", self.switch, "link", "set", "dev", self.hosts[name].port, "down")

    def heal(self, name):
        sh("ip", "-n", self.switch, "link", "set", "dev", self.hosts[name].port, "up")

    def drop(self, name, addrs):
        """Drops host NAME's packets to and from ADDRS (nftables, inside the host)."""
        h = self.hosts[name]
        rules = ["add table inet gpotest",
                 "add chain inet gpotest in { type filter hook input priority 0; }",
                 "add chain inet gpotest out { type filter hook output priority 0; }"]
        for a in addrs:
            rules += [f"add rule inet gpotest in ip saddr {a} drop",
                      f"add rule inet gpotest out ip daddr {a} drop"]
        p = subprocess.run(["ip", "netns", "exec", h.ns, "nft", "-f", "-"],
                           input="\n".join(rules) + "\n", capture_output=True, text=True,
                           timeout=30)
        if p.returncode != 0:
            raise NetError(f"nft in {h.ns}: exit {p.returncode}: {p.stderr.strip()}")

    def undrop(self, name):
        h = self.hosts[name]
        sh("ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet", "gpotest")

    # -- Undoing. -------------------------------------------------------------------------

    def kill_all(self):
        """SIGKILL to every process started in a host that still runs, by PID."""
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self):
        """Kills what runs, deletes every namespace made (hosts first, the switch
        last); returns the names it could not delete."""
        self.kill_all()
        try:
            self.leave()
        except OSError:
            pass
        left = []
        for ns in reversed(self.namespaces):
            p = sh("ip", "netns", "del", ns, check=False)
            if p.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
                left.append(f"{ns}: {p.stderr.strip()}")
        self.namespaces = []
        return left

    @staticmethod
    def catch_sigterm():
        """SIGTERM (meson's timeout) raises SystemExit in the main thread, so
        that the test's finally blocks undo the network."""
        def handler(signum, frame):
            raise SystemExit(f"signal {signum}")
        signal.signal(signal.SIGTERM, handler)


def leftovers(prefix):
    """Namespaces named PREFIX-* that still exist (a check after cleanup)."""
    try:
        return sorted(n for n in os.listdir("/run/netns") if n.startswith(prefix + "-"))
    except FileNotFoundError:
        return []


def need_root():
    """None when the test can build namespaces, else why not (one line)."""
    if os.geteuid() != 0:
        return "network namespaces and the agents' switch to the job's user need root"
    return None

"""Helpers shared by the Python tests that drive real tollgated (tests/rls, tests/http).

Nothing here sleeps for synchronisation: wait_until polls observable state with a deadline.
"""
import os
import socket
import subprocess
import time

WAIT_S = 20  # the longest any poll waits before failing, unless told otherwise


_reserved = []  # lock files held open for the process's life (closing one drops its lock)


def _bindable(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _reserve(port):
    """A lock on `port` shared with every test process of this user (src/process/child_process.cc
    takes the same files), held until this process exits; True if ours (or no lock directory)."""
    import fcntl
    # A fixed directory, not under $TMPDIR: each test has a TMPDIR of its own.
    directory = "/tmp/tollgate-test-ports-%d" % os.getuid()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(directory, str(port)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _reserved.append(fd)
    return True


def free_port():
    """A loopback port free for TCP and UDP, outside the kernel's ephemeral range (so no outgoing
    connection can take it before the daemon binds it) and reserved against every other test
    process for this one's life."""
    import random
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    first, last = 10000, lo - 1
    if last - first < 2000:
        first, last = hi + 1, 65535
    span = last - first + 1
    start = random.randrange(span)
    for i in range(span):
        port = first + (start + i) % span
        if _bindable(port) and _reserve(port) and _bindable(port):
            return port
    raise RuntimeError("no free loopback port")


def http_get(port, path):
    """GET http://127.0.0.1:PORT/PATH: (status, body as text)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def wait_until(what, predicate, timeout=WAIT_S, context=lambda: ""):
    """predicate()'s first true value, polled until `timeout`; then an AssertionError naming
    `what`, followed by context() (e.g. the daemons' logs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what + context())
        time.sleep(0.01)  # polling interval, not synchronisation: the predicate decides


def stop_and_remove(daemon, workdir):
    """Stops `daemon` (its stop() returns the exit status), removes `workdir`, and fails unless the
    daemon exited 0 (a sanitizer's report at exit, or a crash while leaving, is a failure)."""
    import shutil
    code = daemon.stop()
    log = ""
    if code != 0:  # what it said (a sanitizer's report, say), before the directory goes
        read_log = getattr(daemon, "read_log", None)
        log = read_log()[-8000:] if read_log else ""
    shutil.rmtree(workdir, ignore_errors=True)
    if code != 0:
        raise AssertionError("tollgated exited with %s; the end of its log:\n%s" % (code, log))


class Process:
    """A program the test starts (tollgated, nginx, prometheus), its output in a log file: the one
    launcher of the Python tests. stop() ends it (SIGTERM, then SIGKILL) and returns its exit
    status; output() is its log so far, for failure messages."""

    def __init__(self, args, log_path):
        import subprocess
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def alive(self):
        return self.proc.poll() is None

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def exit_status(self, timeout=WAIT_S):
        """Waits for the process to exit by itself; if it does not, fails with what it said so far
        (and stops it), so that a hang under load says where it was."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log.flush()
            said = self.output()
            terminate(self.proc)
            self.log.close()
            raise AssertionError("%s did not exit within %d s; its output so far:\n%s"
                                 % (self.proc.args[0], timeout, said[-8000:]))
        self.log.close()
        return self.proc.returncode

    def stop(self):
        terminate(self.proc)
        self.log.close()
        return self.proc.returncode


def terminate(proc, timeout=WAIT_S):
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout`; its exit status."""
    import signal
    import subprocess
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# Certificates for TLS tests, made by openssl (EC P-256, two days).
def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".pem", cwd=d)


def make_cert(d, name, ca, san=None):
    """name.key and name.pem, signed by CA ca (a leaf: a server's with SAN, or a client's)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=" + name,
            "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\n" + ("subjectAltName=" + san + "\n" if san else ""))
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-CAcreateserial",
            "-days", "2", "-extfile", ext, "-out", name + ".pem", cwd=d)


def sanitized(binary, which=("asan", "tsan")):
    """Whether `binary` was built with AddressSanitizer or ThreadSanitizer (or only those named in
    `which`): their allocators, not glibc's, own the heap (a quarantine, shadow memory), so
    resident-memory bounds do not apply."""
    with open(binary, "rb") as f:
        image = f.read()
    return any(("__%s_init" % w).encode() in image for w in which)


def rss_kib(pid, field="VmRSS:"):
    """A process's resident memory (or another /proc status field, VmHWM: its peak) in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (field, pid))

"""Helpers shared by the Python tests that drive real tollgated (tests/rls, tests/http).

Nothing here sleeps for synchronisation: wait_until polls observable state with a deadline.
"""
import os
import socket
import subprocess
import time

WAIT_S = 20  # the longest any poll waits before failing, unless told otherwise


def free_port():
    """A loopback TCP port free right now (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        """Waits for the process to exit by itself."""
        self.proc.wait(timeout=timeout)
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

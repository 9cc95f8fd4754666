#!/usr/bin/python3
"""The operator's page (issue 41) in a real browser: three tollgated under load with one hot key,
node 1's page opened in Debian's headless Chromium by playwright-core (tests/browser), which checks
what a person would and saves screenshots in OUTDIR (look at them).

The hot key is checked through nodes 2 and 3 only, so node 1 shows it at the top of its rule by
gossip alone. Cold keys go to all three; a key that is HTML is sent too, and must read as text.

Usage (ctest runs it): operator_page_test.py TOLLGATED OUTDIR [unittest args]
Skipped (77) without chromium or playwright-core (scripts/deps installs both), except under CI=true,
where that is a failure. Nothing here sleeps for synchronisation: the load thread paces itself,
and every wait polls observable state with a deadline.
"""
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import Process, free_port, http_get, wait_until  # noqa: E402

TOLLGATED = sys.argv[1]
OUTDIR = sys.argv[2]
del sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER_DIR = os.path.join(HERE, "..", "browser")
CHROMIUM = os.environ.get("TOLLGATE_CHROMIUM", "/usr/bin/chromium")
NODE = shutil.which("node")
TOKEN = "page-test-token-0123456789abcdef"
RULE = "user:*"
HOT = "user:hot"
HOSTILE = "user:<img src=x onerror=alert(1)>"
RULES = """rules:
  - {match: "user:*", rate: 20/s, burst: 20}
"""


def missing_tools():
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(CHROMIUM)
    if not NODE:
        missing.append("node")
    if not os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")):
        missing.append("tests/browser/node_modules/playwright-core")
    return missing


class Load(threading.Thread):
    """Checks over keep-alive connections at a paced rate until stopped: the hot key at 200/s to
    nodes 2 and 3, 50 cold keys at about 1/s each to all three, and the hostile key 30 times."""

    def __init__(self, ports):
        super().__init__(daemon=True)
        self.ports = ports
        self.done = threading.Event()
        self.sent = 0
        self.errors = []

    def run(self):
        conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in self.ports}
        headers = {"Authorization": "Bearer " + TOKEN}

        def check(port, key):
            c = conns[port]
            try:
                c.request("GET", "/v1/check?key=" + urllib.parse.quote(key, safe=""), headers=headers)
                r = c.getresponse()
                r.read()
                if r.status not in (200, 429):
                    self.errors.append("%s: %d" % (key, r.status))
                self.sent += 1
            except OSError as e:
                self.errors.append("%s: %s" % (key, e))
                c.close()
        hostile_left = 30
        tick = 0
        start = time.monotonic()
        while not self.done.is_set():
            tick += 1
            check(self.ports[1 + tick % 2], HOT)
            if tick % 4 == 0:
                check(self.ports[tick % 3], "user:cold-%d" % (tick // 4 % 50))
            if hostile_left and tick % 7 == 0:
                check(self.ports[0], HOSTILE)
                hostile_left -= 1
            # Pacing the load (200 ticks a second), not waiting for anything.
            delay = start + tick / 200.0 - time.monotonic()
            if delay > 0:
                self.done.wait(delay)


class OperatorPage(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-page-")
        self.procs = []

    def tearDown(self):
        codes = [(p.log_path, p.stop()) for p in self.procs]
        shutil.rmtree(self.dir, ignore_errors=True)
        for log, code in codes:
            self.assertEqual(code, 0, "a daemon exited %s (%s)" % (code, log))

    def logs(self):
        return "".join("\n--- %s:\n%s" % (p.log_path, p.output()[-3000:]) for p in self.procs)

    def test_the_page_shows_the_cluster_the_hot_key_and_a_balance(self):
        names = ["n1", "n2", "n3"]
        gossip = {n: free_port() for n in names}
        http_ports = [free_port() for _ in names]
        rules = os.path.join(self.dir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        token = os.path.join(self.dir, "token")
        with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(TOKEN + "\n")
        peers = os.path.join(self.dir, "peers")
        with open(peers, "w") as f:
            for n in names:
                f.write("%s 127.0.0.1:%d\n" % (n, gossip[n]))
        for n, port in zip(names, http_ports):
            self.procs.append(Process(
                [TOLLGATED, "--node-id", n, "--bind", "127.0.0.1:%d" % gossip[n],
                 "--listen", "unix:" + os.path.join(self.dir, n + ".sock"), "--rules", rules,
                 "--membership", "static", "--peers-file", peers, "--insecure-gossip",
                 "--http-listen", "127.0.0.1:%d" % port, "--http-token-file", token, "--top-window", "10s"],
                os.path.join(self.dir, n + ".log")))
        for port in http_ports:
            wait_until("a daemon ready", lambda port=port: self.ready(port), context=self.logs)
        load = Load(http_ports)
        load.start()
        try:
            os.makedirs(OUTDIR, exist_ok=True)
            run = subprocess.run(
                [NODE, os.path.join(BROWSER_DIR, "operator_page.mjs"), "http://127.0.0.1:%d/" % http_ports[0], token,
                 OUTDIR, RULE, HOT, HOSTILE, str(len(names))],
                capture_output=True, text=True, timeout=150)
        finally:
            load.done.set()
            load.join()
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr + self.logs())
        print(run.stdout.strip() + " (screenshots in %s)" % OUTDIR)
        self.assertEqual(load.errors, [])
        for shot in ("01-members.png", "02-top.png", "03-balance.png", "04-hostile-key.png"):
            self.assertGreater(os.path.getsize(os.path.join(OUTDIR, shot)), 10000, shot)

    @staticmethod
    def ready(port):
        try:
            return http_get(port, "/readyz")[0] == 200
        except OSError:
            return False


if __name__ == "__main__":
    missing = missing_tools()
    if missing:
        if os.environ.get("CI") == "true":
            sys.exit("the browser test cannot run under CI without: " + ", ".join(missing))
        print("skipped: missing " + ", ".join(missing) + " (scripts/deps installs them)")
        sys.exit(77)
    unittest.main(verbosity=2)

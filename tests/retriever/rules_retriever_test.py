#!/usr/bin/python3
"""tollgated's rules retriever (--rules-url) against Debian's nginx serving the rules file, as a
rules service would (nginx answers If-None-Match with 304 from its ETag).

The served file is edited, broken and taken away while a daemon polls it; then the daemon is
restarted while the service is down (it must start from its cached copy), and started with no
cache and no service (it must refuse to start, naming the URL).

Usage (ctest runs it): rules_retriever_test.py TOLLGATED TOLLGATE_CLI [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import Process, free_port, http_get, wait_until as poll_until  # noqa: E402

TOLLGATED, CLI = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

RULES_V1 = 'rules:\n  - {match: "k*", rate: 5/min, burst: 5}\n'
# Each version a different size: nginx's ETag is the file's mtime (in seconds) and size, so two
# versions of one size published within a second would look the same to If-None-Match.
RULES_V2 = 'rules:\n  - {match: "k*", rate: 70/min, burst: 70}\n'
RULES_V3 = 'rules:\n  - {match: "k*", rate: 900/min, burst: 900}\n'
BROKEN = 'rules:\n  - {match: "k*", rate: 5/min, burst: 5, colour: blue}\n'


def version(text):
    """tollgated's rules_version: the first 48 bits of the SHA-256 of the bytes."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


def publish(path, text):
    """As a deployment would: the new file replaces the old in one rename."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


class NginxAndDaemon:
    """Starts Debian's nginx serving cls.www on cls.nginx_port, and tollgated polling cls.url."""

    tls = ""  # nginx's TLS directives: none here, see RulesServiceOverTls

    @classmethod
    def start_nginx(cls):
        prefix = os.path.join(cls.dir, "nginx")
        os.makedirs(prefix, exist_ok=True)
        conf = os.path.join(prefix, "nginx.conf")
        user = "user root;\n" if os.geteuid() == 0 else ""
        with open(conf, "w") as f:
            f.write("%sworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
                    "events { worker_connections 64; }\n"
                    "http {\n  access_log off;\n  client_body_temp_path %s/body; proxy_temp_path %s/proxy;\n"
                    "  fastcgi_temp_path %s/fastcgi; uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;\n"
                    "  server { listen 127.0.0.1:%d%s; root %s; }\n}\n"
                    % (user, prefix, prefix, prefix, prefix, prefix, prefix, prefix, cls.nginx_port, cls.tls, cls.www))
        cls.nginx = Process([NGINX, "-p", prefix, "-c", conf, "-g", "daemon off;"], os.path.join(prefix, "out.log"))

        def serving():
            if not cls.nginx.alive():
                raise AssertionError("nginx exited:\n" + cls.nginx.output())
            try:
                socket.create_connection(("127.0.0.1", cls.nginx_port), timeout=1).close()
                return True
            except OSError:
                return False
        poll_until("nginx listening", serving)

    @classmethod
    def start_daemon(cls, name="a", wait=True, extra=(), poll="100ms"):
        cls.http_port = free_port()
        bind = "127.0.0.1:%d" % free_port()
        args = [TOLLGATED, "--node-id", name, "--bind", bind,
                "--listen", "unix:" + os.path.join(cls.dir, name + ".sock"), "--rules-url", cls.url,
                "--rules-poll", poll, "--rules-cache", cls.cache, "--membership", "static",
                "--peers-file", cls.peers_file(name, bind), "--insecure-gossip",
                "--http-listen", "127.0.0.1:%d" % cls.http_port] + list(extra)
        p = Process(args, os.path.join(cls.dir, "%s-%d.log" % (name, cls.http_port)))
        if wait:
            def up():
                if not p.alive():
                    raise AssertionError("tollgated exited:\n" + p.output())
                try:
                    return http_get(cls.http_port, "/healthz")[0] == 200
                except OSError:
                    return False
            poll_until("tollgated serving HTTP", up)
        return p

    def stats(self):
        status, body = http_get(self.http_port, "/v1/stats")
        self.assertEqual(status, 200, body)
        return json.loads(body)["stats"]

    @classmethod
    def peers_file(cls, name, bind):
        path = os.path.join(cls.dir, "peers-" + name)
        with open(path, "w") as f:
            f.write("%s %s\n" % (name, bind))
        return path


class RulesService(NginxAndDaemon, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-retriever-")
        cls.www = os.path.join(cls.dir, "www")
        os.mkdir(cls.www)
        cls.served = os.path.join(cls.www, "rules.yaml")
        publish(cls.served, RULES_V1)
        cls.cache = os.path.join(cls.dir, "state", "rules.yaml")
        os.mkdir(os.path.dirname(cls.cache))
        cls.nginx_port = free_port()
        cls.url = "http://127.0.0.1:%d/rules.yaml" % cls.nginx_port
        cls.nginx = cls.daemon = None
        try:
            cls.start_nginx()
            cls.daemon = cls.start_daemon()
        except BaseException:
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise

    @classmethod
    def tearDownClass(cls):
        for p in (cls.daemon, cls.nginx):
            if p:
                p.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def burst_of(self, key):
        status, body = http_get(self.http_port, "/v1/check?key=%s&cost=0" % key)
        self.assertEqual(status, 200, body)
        return int(json.loads(body)["limit"]["burst"])

    def wait_until(self, what, predicate, timeout=20):
        return poll_until(what, predicate, timeout, lambda: "\n--- tollgated:\n" + self.daemon.output()[-3000:])

    def cached(self):
        with open(self.cache) as f:
            return f.read()

    def test_1_the_first_rules_come_from_the_service_and_unchanged_ones_are_not_fetched_again(self):
        self.assertEqual(self.stats()["rules_version"], version(RULES_V1))
        self.assertEqual(self.burst_of("k1"), 5)
        self.assertEqual(self.cached(), RULES_V1)
        # nginx answers If-None-Match with 304: polls go on, nothing is reloaded.
        self.wait_until("three 304s", lambda: self.stats()["rules_polls_not_modified"] >= 3)
        s = self.stats()
        self.assertEqual((s["rules_reloads"], s["rules_reload_failures"], s["rules_poll_failures"]), (0, 0, 0))

    def test_2_a_published_edit_applies_and_is_cached(self):
        publish(self.served, RULES_V2)
        self.wait_until("version 2 in force", lambda: self.stats()["rules_version"] == version(RULES_V2))
        self.assertEqual(self.burst_of("k1"), 70)
        self.assertEqual(self.stats()["rules_reloads"], 1)
        self.wait_until("version 2 cached", lambda: self.cached() == RULES_V2)
        # What an operator sees: tollgate rules show.
        shown = subprocess.run([CLI, "--endpoint", "unix:" + os.path.join(self.dir, "a.sock"), "rules", "show"],
                               capture_output=True, text=True, timeout=20)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("rules version %d\n" % version(RULES_V2), shown.stdout)
        self.assertIn("reloads: 1 applied, 0 refused", shown.stdout)
        self.assertRegex(shown.stdout, r"rules service polls: \d+, \d+ unchanged, 0 failed")

    def test_3_a_broken_version_is_refused_once_and_the_rules_in_force_stay(self):
        publish(self.served, BROKEN)
        self.wait_until("the broken version refused", lambda: self.stats()["rules_reload_failures"] == 1)
        polls = self.stats()["rules_polls"]
        self.wait_until("five more polls", lambda: self.stats()["rules_polls"] >= polls + 5)
        s = self.stats()
        self.assertEqual((s["rules_version"], s["rules_reload_failures"]), (version(RULES_V2), 1))
        self.assertEqual(self.burst_of("k1"), 70)
        self.assertEqual(self.cached(), RULES_V2)
        log = self.daemon.output()
        self.assertEqual(log.count("rules version %d refused" % version(BROKEN)), 1, log)
        self.assertIn(self.url + ":2:42:", log)  # the error names the URL, line and column

    def test_4_an_unreachable_service_keeps_the_rules_and_is_logged_once(self):
        self.assertEqual(self.nginx.stop(), 0)
        self.wait_until("five failed polls", lambda: self.stats()["rules_poll_failures"] >= 5)
        self.assertEqual(self.burst_of("k1"), 70)
        log = self.daemon.output()
        self.assertEqual(log.count("rules service " + self.url), 1, log)

    def test_5_a_restart_while_the_service_is_down_starts_from_the_cache(self):
        self.assertEqual(self.daemon.stop(), 0)
        type(self).daemon = self.start_daemon()
        self.assertEqual(self.stats()["rules_version"], version(RULES_V2))
        self.assertEqual(self.burst_of("k1"), 70)
        self.assertIn("rules from the cache", self.daemon.output())

    def test_6_the_service_back_with_a_new_version_is_followed(self):
        publish(self.served, RULES_V3)
        self.start_nginx()
        self.wait_until("version 3 in force", lambda: self.stats()["rules_version"] == version(RULES_V3))
        self.assertEqual(self.burst_of("k1"), 900)
        self.assertIn("answers again", self.daemon.output())
        self.wait_until("version 3 cached", lambda: self.cached() == RULES_V3)

    def test_7_sighup_polls_at_once(self):
        # Polled hourly: only the SIGHUP can bring version 1 back within the test.
        self.assertEqual(self.daemon.stop(), 0)
        type(self).daemon = self.start_daemon(name="h", poll="1h")
        self.assertEqual(self.stats()["rules_version"], version(RULES_V3))
        self.wait_until("the first poll, at start", lambda: self.stats()["rules_polls"] == 1)
        publish(self.served, RULES_V1)
        polls = self.stats()["rules_polls"]
        self.daemon.proc.send_signal(signal.SIGHUP)
        self.wait_until("version 1 after SIGHUP", lambda: self.stats()["rules_version"] == version(RULES_V1))
        self.assertEqual(self.stats()["rules_polls"], polls + 1)

    def test_8_no_cache_and_no_usable_service_refuses_to_start(self):
        os.unlink(self.cache)
        saved_url = type(self).url
        try:
            # 404: the path is wrong.
            type(self).url = "http://127.0.0.1:%d/missing.yaml" % self.nginx_port
            p = self.start_daemon(name="b", wait=False)
            self.assertNotEqual(p.exit_status(), 0)
            self.assertIn("HTTP 404", p.output())
            self.assertIn(type(self).url, p.output())
            # Broken rules from the service: refused with the URL, line and column.
            publish(self.served, BROKEN)
            type(self).url = saved_url
            p = self.start_daemon(name="c", wait=False)
            self.assertNotEqual(p.exit_status(), 0)
            self.assertIn(saved_url + ":2:42:", p.output())
            self.assertFalse(os.path.exists(self.cache))
        finally:
            type(self).url = saved_url


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + name, cwd=d)
    return os.path.join(d, name + ".pem")


class RulesServiceOverTls(NginxAndDaemon, unittest.TestCase):
    """https://: the certificate chain must lead to --rules-ca and name the URL's host."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-retriever-tls-")
        cls.nginx = None
        try:
            cls.ca = make_ca(cls.dir, "rules-ca")
            cls.other_ca = make_ca(cls.dir, "other-ca")
            with open(os.path.join(cls.dir, "san.ext"), "w") as f:
                f.write("subjectAltName=DNS:localhost\n")
            openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                    "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=cls.dir)
            openssl("x509", "-req", "-in", "server.csr", "-CA", "rules-ca.pem", "-CAkey", "rules-ca.key",
                    "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=cls.dir)
            cls.www = os.path.join(cls.dir, "www")
            os.mkdir(cls.www)
            cls.served = os.path.join(cls.www, "rules.yaml")
            publish(cls.served, RULES_V1)
            cls.nginx_port = free_port()
            cls.tls = " ssl; ssl_certificate %s/server.pem; ssl_certificate_key %s/server.key" % (cls.dir, cls.dir)
            cls.start_nginx()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.nginx:
            cls.nginx.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, name, url, ca, wait=True):
        cls = type(self)
        cls.url = url
        cls.cache = os.path.join(self.dir, name + "-cache.yaml")
        return cls.start_daemon(name=name, wait=wait, extra=("--rules-ca", ca))

    def test_a_trusted_certificate_that_names_the_host_serves_the_rules(self):
        d = self.start("a", "https://localhost:%d/rules.yaml" % self.nginx_port, self.ca)
        try:
            self.assertEqual(self.stats()["rules_version"], version(RULES_V1))
            poll_until("a 304 over TLS", lambda: self.stats()["rules_polls_not_modified"] >= 2)
            publish(self.served, RULES_V2)
            poll_until("version 2 over TLS", lambda: self.stats()["rules_version"] == version(RULES_V2))
            self.assertEqual(self.stats()["rules_poll_failures"], 0)
            self.assertNotIn("plain http", d.output())
        finally:
            self.assertEqual(d.stop(), 0)

    def test_an_untrusted_certificate_or_another_host_name_is_refused(self):
        for name, url, ca in (("b", "https://localhost:%d/rules.yaml" % self.nginx_port, self.other_ca),
                              ("c", "https://127.0.0.1:%d/rules.yaml" % self.nginx_port, self.ca)):
            p = self.start(name, url, ca, wait=False)
            self.assertNotEqual(p.exit_status(), 0, p.output())
            self.assertIn("certificate verify failed", p.output())
            self.assertIn(url, p.output())


if __name__ == "__main__":
    unittest.main(verbosity=2)

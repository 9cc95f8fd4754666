#!/usr/bin/python3
"""nginx (Debian's, not ours) in front of a service, asking tollgated through the shipped
config/nginx/tollgate-auth.conf (auth_request).

Two tollgated form one cluster; two nginx, one per daemon, front one trivial upstream. Requests
through both nginx share one limit: once it is spent, both answer 429 with Retry-After, and 200
again after the refill. With its tollgated stopped, an nginx lets requests through (fail open).

Usage (ctest runs it): nginx_test.py TOLLGATED NGINX_SNIPPET [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import Process, free_port, wait_until as poll_until  # noqa: E402

TOLLGATED, SNIPPET = sys.argv[1], os.path.abspath(sys.argv[2])
del sys.argv[1:3]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
WAIT_S = 20

# One bucket per client address: every request here comes from 127.0.0.1. 6 per minute: exact
# counts, whatever the test's pace.
RULES = """rules:
  - {match: "ip:*", rate: 6/min, burst: 6}
"""






LOG_DIRS = []


def logs():
    """The daemons' and nginx's logs, for a failure message."""
    out = ""
    for d in LOG_DIRS:
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if name.endswith(".log"):
                    with open(os.path.join(root, name), errors="replace") as f:
                        out += "\n--- %s:\n%s" % (os.path.join(root, name), f.read()[-2000:])
    return out


def get(port, path="/"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def answers(port):
    """Something accepts connections on `port` (a request through nginx would spend a token)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_until(what, predicate, timeout=WAIT_S):
    return poll_until(what, predicate, timeout, logs)


class NginxInFront(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemons, cls.nginx = {}, {}
        try:
            cls.start()
        except BaseException:
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise

    @classmethod
    def start(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-nginx-")
        LOG_DIRS.append(cls.dir)
        rules = os.path.join(cls.dir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        gossip = {"a": free_port(), "b": free_port()}
        peers = os.path.join(cls.dir, "peers")
        with open(peers, "w") as f:
            for name, port in sorted(gossip.items()):
                f.write("%s 127.0.0.1:%d\n" % (name, port))
        cls.http = {name: free_port() for name in gossip}
        for name in sorted(gossip):
            cls.daemons[name] = Process(
                [TOLLGATED, "--node-id", name, "--bind", "127.0.0.1:%d" % gossip[name],
                 "--listen", "unix:" + os.path.join(cls.dir, name + ".sock"), "--rules", rules,
                 "--membership", "static", "--peers-file", peers, "--mode", "mesh", "--insecure-gossip",
                 "--http-listen", "127.0.0.1:%d" % cls.http[name]],
                os.path.join(cls.dir, name + ".log"))
        # The shipped file, with one change: its 50 ms fail-open timeouts become 2 s, so that a
        # scheduling stall on a loaded CI machine does not read as tollgated being down (a denied
        # request would then pass). Everything else is tested as shipped.
        with open(SNIPPET) as f:
            shipped = f.read()
        assert shipped.count(" 50ms;") == 3, "the shipped snippet's timeouts changed: update this test"
        cls.snippet = os.path.join(cls.dir, "tollgate-auth.conf")
        with open(cls.snippet, "w") as f:
            f.write(shipped.replace(" 50ms;", " 2s;"))
        app_port = free_port()
        cls.front = {}
        for name in sorted(gossip):
            cls.front[name] = free_port()
            prefix = os.path.join(cls.dir, "nginx-" + name)
            os.mkdir(prefix)
            conf = os.path.join(prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(cls.nginx_conf(prefix, cls.http[name], cls.front[name],
                                       app_port if name == "a" else None, app_port, cls.snippet))
            cls.nginx[name] = Process([NGINX, "-p", prefix, "-c", conf, "-g", "daemon off;"],
                                      os.path.join(prefix, "stdout.log"))
        for name in sorted(gossip):
            wait_until("tollgated %s ready" % name, lambda n=name: cls.ready(n))
            wait_until("nginx %s listening" % name, lambda n=name: cls.nginx[n].alive() and answers(cls.front[n]))
        wait_until("the upstream", lambda: answers(app_port))

    @staticmethod
    def nginx_conf(prefix, tollgate_port, front_port, serve_app_on, app_port, snippet):
        user = "user root;\n" if os.geteuid() == 0 else ""
        app = ""
        if serve_app_on:  # nginx a also plays the service both front ends pass to
            app = "  server { listen 127.0.0.1:%d; location / { return 200 'hello\\n'; } }\n" % serve_app_on
        return (
            "%sworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
            "events { worker_connections 64; }\n"
            "http {\n"
            "  access_log off;\n"
            "  client_body_temp_path %s/body; proxy_temp_path %s/proxy; fastcgi_temp_path %s/fastcgi;\n"
            "  uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;\n"
            "  upstream tollgate_http { server 127.0.0.1:%d; keepalive 4; }\n"
            "  upstream app { server 127.0.0.1:%d; }\n"
            "  server { listen 127.0.0.1:%d; include %s; }\n"
            "%s}\n" % (user, prefix, prefix, prefix, prefix, prefix, prefix, prefix, tollgate_port, app_port,
                       front_port, snippet, app))

    @classmethod
    def ready(cls, name):
        if not cls.daemons[name].alive():
            raise AssertionError("tollgated %s exited" % name)
        try:
            return get(cls.http[name], "/readyz")[0] == 200
        except OSError:
            return False

    @classmethod
    def tearDownClass(cls):
        for p in list(cls.nginx.values()) + list(cls.daemons.values()):
            p.stop()
        if hasattr(cls, "dir"):
            shutil.rmtree(cls.dir, ignore_errors=True)

    def remaining_at(self, name):
        body = get(self.http[name], "/v1/check?key=ip:127.0.0.1&cost=0")[2]
        return int(json.loads(body)["remaining"])

    def test_1_both_front_ends_share_one_limit_then_refill(self):
        for _ in range(3):
            status, headers, body = get(self.front["a"])
            self.assertEqual((status, body), (200, "hello\n"))
            self.assertTrue(headers["ratelimit"].startswith('"tollgate";r='), headers)
        # b's daemon learns a's three through gossip before b's requests.
        wait_until("b to see 3 spent", lambda: self.remaining_at("b") == 3)
        for _ in range(3):
            self.assertEqual(get(self.front["b"])[0], 200)
        status, headers, body = get(self.front["b"])
        self.assertEqual(status, 429, body)
        retry_after = int(headers["retry-after"])
        self.assertTrue(1 <= retry_after <= 10, headers)  # a token every 10 s
        self.assertIn("ratelimit-policy", headers)
        wait_until("a to see all 6 spent", lambda: self.remaining_at("a") == 0)
        self.assertEqual(get(self.front["a"])[0], 429)
        # Denied requests are not charged: after the refill one passes again.
        wait_until("a refilled token", lambda: get(self.front["a"])[0] == 200, timeout=15)

    def test_2_a_front_end_whose_tollgated_is_down_fails_open(self):
        self.assertEqual(self.daemons["b"].stop(), 0)
        started = time.monotonic()
        status, _, body = get(self.front["b"])
        self.assertEqual((status, body), (200, "hello\n"))
        self.assertLess(time.monotonic() - started, 5)


if __name__ == "__main__":
    unittest.main()

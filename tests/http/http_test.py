#!/usr/bin/python3
"""tollgated's HTTP front end on real daemons, driven by Python's own HTTP client and checked by
Prometheus's promtool (software that is not ours).

Two daemons form one cluster; checks through either node's HTTP port share one limit. The
endpoints answer what docs/operations.md says, /metrics passes `promtool check metrics`, and the
limits hold: connections beyond the cap are closed, a client that sends half a request is cut off
after --http-timeout, oversized headers and bodies get 431 and 413, garbage gets 400.

Usage (ctest runs it): http_test.py TOLLGATED [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import hashlib
import http.client
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
from tollgate_testing import Process, free_port, rss_kib, stop_and_remove, wait_until as poll_until  # noqa: E402

TOLLGATED = sys.argv[1]
del sys.argv[1]
# The `tollgate` CLI (ctest sets it): `tollgate top` must answer what GET /v1/top does.
TOLLGATE_CLI = os.environ.get("TOLLGATE_CLI", os.path.join(os.path.dirname(TOLLGATED), "..", "cli", "tollgate"))
WAIT_S = 20

RULES = """rules:
  - {match: "shared*", rate: 10/min, burst: 10}
  - {match: "k*", rate: 100/s, burst: 100}
  - {match: "db*", concurrency: 2, lease_ttl: 1h}
"""
RLS = """domain: web
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3}
"""






def wait_until(what, predicate, timeout=WAIT_S):
    return poll_until(what, predicate, timeout)


class Daemon:
    def __init__(self, workdir, name, gossip_port, peers, extra=()):
        self.name = name
        self.http_port = free_port()
        self.api_socket = os.path.join(workdir, name + ".sock")
        rules = os.path.join(workdir, "rules.yaml")
        rls = os.path.join(workdir, "rls.yaml")
        peers_file = os.path.join(workdir, name + ".peers")
        with open(peers_file, "w") as f:
            for peer_name, port in peers:
                f.write("%s 127.0.0.1:%d\n" % (peer_name, port))
        args = [TOLLGATED, "--node-id", name, "--bind", "127.0.0.1:%d" % gossip_port,
                "--listen", "unix:" + self.api_socket, "--rules", rules,
                "--rls-config", rls, "--membership", "static", "--peers-file", peers_file, "--mode", "mesh",
                "--insecure-gossip", "--http-listen", "127.0.0.1:%d" % self.http_port] + list(extra)
        self.process = Process(args, os.path.join(workdir, name + ".log"))
        self.proc = self.process.proc
        wait_until(name + " serving HTTP (log: %s)" % self.process.log_path, self.serving)

    def serving(self):
        if self.proc.poll() is not None:
            raise AssertionError("%s exited with %s" % (self.name, self.proc.returncode))
        try:
            return self.request("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read().decode()
        finally:
            conn.close()

    def stats(self):
        status, _, body = self.request("GET", "/v1/stats")
        assert status == 200, body
        return json.loads(body)["stats"]

    def try_stats(self):
        try:
            return self.stats()
        except (OSError, http.client.HTTPException):
            return None

    def stop(self):
        return self.process.stop()


def workdir(prefix):
    """A new directory holding RULES as rules.yaml and RLS as rls.yaml."""
    path = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(path, "rules.yaml"), "w") as f:
        f.write(RULES)
    with open(os.path.join(path, "rls.yaml"), "w") as f:
        f.write(RLS)
    return path


class TwoNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = workdir("tollgate-http-")
        ports = {"a": free_port(), "b": free_port()}
        peers = sorted(ports.items())
        limits = ["--http-max-connections", "5", "--http-timeout", "1s"]
        cls.a = Daemon(cls.dir, "a", ports["a"], peers, limits)
        cls.b = Daemon(cls.dir, "b", ports["b"], peers, limits)
        # Ready: each hears the other and has its peer's balances (tests run in any order).
        for d in (cls.a, cls.b):
            wait_until(d.name + " ready", lambda d=d: d.request("GET", "/readyz")[0] == 200)

    @classmethod
    def tearDownClass(cls):
        codes = [cls.a.stop(), cls.b.stop()]
        shutil.rmtree(cls.dir, ignore_errors=True)
        if codes != [0, 0]:
            raise AssertionError("tollgated exited with %s" % codes)

    def test_ready_once_each_node_hears_the_other(self):
        for d in (self.a, self.b):
            wait_until(d.name + " ready", lambda d=d: d.request("GET", "/readyz")[0] == 200)
            members = json.loads(d.request("GET", "/v1/members")[2])["members"]
            self.assertEqual(sorted(m["id"] for m in members), ["a", "b"])

    def test_both_nodes_enforce_one_shared_limit(self):
        self.test_ready_once_each_node_hears_the_other()
        statuses = [self.a.request("GET", "/v1/check?key=shared1")[0] for _ in range(12)]
        self.assertEqual(statuses, [200] * 10 + [429] * 2)
        # b hears a's consumption through gossip: its bucket empties without a check of its own.
        wait_until("b to see the shared key spent",
                   lambda: json.loads(self.b.request("GET", "/v1/check?key=shared1&cost=0")[2])["remaining"] == "0")
        status, headers, body = self.b.request("GET", "/v1/check?key=shared1&deny_status=403")
        self.assertEqual(status, 403, body)
        self.assertEqual(headers["RateLimit-Policy"], '"tollgate";q=10;w=60')
        self.assertTrue(headers["RateLimit"].startswith('"tollgate";r=0;t='), headers)
        self.assertGreaterEqual(int(headers["Retry-After"]), 1)
        self.assertFalse(json.loads(body)["allowed"])

    def test_a_reset_makes_a_spent_key_full_again_at_both_nodes(self):
        remaining = lambda d: json.loads(d.request("GET", "/v1/check?key=shared-reset&cost=0")[2])["remaining"]
        self.assertEqual(self.a.request("GET", "/v1/check?key=shared-reset&cost=10")[0], 200)
        wait_until("b to see shared-reset spent", lambda: remaining(self.b) == "0")
        status, _, body = self.b.request("POST", "/v1/reset?key=shared-reset")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"key": "shared-reset", "limited": True, "remaining": "10"})
        wait_until("a to see shared-reset full again", lambda: remaining(self.a) == "10")
        self.assertEqual(self.a.request("GET", "/v1/check?key=shared-reset&cost=3")[0], 200)
        wait_until("b to count what a admitted after the reset", lambda: remaining(self.b) == "7")
        # Only POST, one key, and not an Envoy bucket's.
        status, headers, _ = self.a.request("GET", "/v1/reset?key=shared-reset")
        self.assertEqual((status, headers.get("Allow")), (405, "POST"))
        for bad in ("/v1/reset", "/v1/reset?key=", "/v1/reset?key=a&key=b", "/v1/reset?key=%1Eweb"):
            status, _, body = self.a.request("POST", bad)
            self.assertEqual(status, 400, bad + ": " + body)

    def test_leases_share_one_concurrency_limit_and_a_release_frees_it_everywhere(self):
        # Issue 40. Only this test takes leases, so a node's lease_rows is the other's lease here.
        def acquire(d, **extra):
            status, _, body = d.request("POST", "/v1/leases", json.dumps(dict(key="db-http", **extra)))
            return status, json.loads(body)
        status, first = acquire(self.a, ttl="90s")
        self.assertEqual(status, 200, first)
        self.assertEqual((len(first["id"]), first["in_flight"], first["limit"], first["expires_in"]),
                         (32, "1", "2", "90s"))
        wait_until("b to count a's lease", lambda: self.b.stats().get("lease_rows", 0) >= 1)
        status, second = acquire(self.b)
        self.assertEqual((status, second["in_flight"], second["expires_in"]), (200, "2", "3600s"), second)
        wait_until("a to count b's lease", lambda: self.a.stats().get("lease_rows", 0) >= 1)
        status, refused = acquire(self.a)
        self.assertEqual((status, refused["granted"], refused["id"]), (429, False, ""), refused)
        # A lease is released where it was taken: b does not hold a's.
        self.assertEqual(self.b.request("DELETE", "/v1/leases/" + first["id"])[0], 404)
        status, _, body = self.a.request("PUT", "/v1/leases/" + first["id"], json.dumps({"ttl": "60s"}))
        self.assertEqual((status, json.loads(body)["expires_in"]), (200, "60s"), body)
        status, _, body = self.a.request("DELETE", "/v1/leases/" + first["id"])
        self.assertEqual((status, json.loads(body)["found"]), (200, True), body)
        # b hears the release: its acquire passes again (a refused acquire holds nothing).
        wait_until("b to see a's slot freed", lambda: acquire(self.b)[0] == 200)
        status, refused = acquire(self.b)
        self.assertEqual(status, 429, refused)
        self.assertEqual(self.a.stats()["leases_released"], 1)

    def test_top_names_the_keys_denied_most_cluster_wide_at_either_node(self):
        # Issue 41: b denies shared-top about 5 times, a about 4 (the key refills a token every
        # 6 s: the test counts the 429s it got); either node's /v1/top counts them all (each
        # summary holds every key it saw here: the bounds are exact).
        statuses = [self.b.request("GET", "/v1/check?key=shared-top")[0] for _ in range(15)]
        self.assertEqual(statuses[:10], [200] * 10)
        wait_until("a to see shared-top spent",
                   lambda: json.loads(self.a.request("GET", "/v1/check?key=shared-top&cost=0")[2])["remaining"] == "0")
        statuses += [self.a.request("GET", "/v1/check?key=shared-top")[0] for _ in range(4)]
        denied = statuses.count(429)
        self.assertGreaterEqual(denied, 5, statuses)

        def bounds(d):
            status, _, body = d.request("GET", "/v1/top?rule=shared*&k=100")
            self.assertEqual(status, 200, body)
            rules = json.loads(body)["rules"]
            if len(rules) != 1 or rules[0]["members_reporting"] != 2:
                return None
            keys = {k["key"]: (k["lower"], k["upper"]) for k in rules[0]["denied"]["keys"]}
            return keys.get("shared-top")
        for d in (self.a, self.b):
            wait_until(d.name + " to count all %d denials" % denied, lambda d=d: bounds(d) == (denied, denied))
        # The native door: `tollgate top` on a's API socket says the same.
        cli = subprocess.run([TOLLGATE_CLI, "--endpoint", "unix:" + self.a.api_socket, "top", "--rule", "shared*",
                              "-k", "100", "--json"], capture_output=True, text=True, timeout=30)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        rule = json.loads(cli.stdout)["rules"][0]
        self.assertEqual(rule["members_reporting"], 2)
        self.assertIn({"key": "shared-top", "lower": denied, "upper": denied}, rule["denied"]["keys"])
        text = subprocess.run([TOLLGATE_CLI, "--endpoint", "unix:" + self.a.api_socket, "top", "--rule", "shared*"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("shared-top", text.stdout)
        self.assertGreater(self.a.stats()["top_units_sealed"], 0)
        status, _, body = self.a.request("GET", "/v1/top?k=1000")
        self.assertEqual(status, 400, body)

    def test_a_batch_and_envoys_json(self):
        status, _, body = self.a.request(
            "POST", "/v1/check", json.dumps({"checks": [{"key": "k1", "cost": 60}, {"key": "k2"}]}),
            {"Content-Type": "application/json"})
        self.assertEqual(status, 200, body)
        results = json.loads(body)["results"]
        self.assertEqual([r["remaining"] for r in results], ["40", "99"])
        request = json.dumps({"domain": "web", "descriptors": [{"entries": [{"key": "path", "value": "/x"}]}]})
        codes = [self.a.request("POST", "/json", request)[0] for _ in range(4)]
        self.assertEqual(codes, [200, 200, 200, 429])
        self.assertEqual(json.loads(self.a.request("POST", "/json", request)[2])["overallCode"], "OVER_LIMIT")
        # Issue 41: top-K names Envoy's bucket by its descriptor (the key itself is internal bytes).

        def described():
            rules = json.loads(self.a.request("GET", "/v1/top?rule=rls:web.path")[2])["rules"]
            keys = rules[0]["denied"]["keys"] if rules else []
            return [(k.get("descriptor"), k["lower"]) for k in keys]
        wait_until("a's top to name the descriptor denied", lambda: described() == [("web: path=/x", 2)])

    def test_metrics_pass_promtool(self):
        self.a.request("GET", "/v1/check?key=k9")
        # Issue 41: the check's tokens reach top-K at the node's next round; promtool lints its
        # gauges too.
        wait_until("a's top-K gauges", lambda: 'tollgate_top_tokens{rule="k*",rank="1"}' in self.a.request(
            "GET", "/metrics")[2])
        status, headers, body = self.a.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('tollgate_top_error_bound{rule="k*",metric="tokens"}', body)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        self.assertIn('tollgate_members{state="alive"}', body)
        self.assertIn('tollgate_checks_total{decision="allowed"}', body)
        self.assertIn('tollgate_check_duration_seconds_bucket{le="+Inf"}', body)
        self.assertIn("tollgate_round_duration_seconds_count", body)
        self.assertIn('tollgate_rule_checks_total{rule="k*"}', body)
        self.assertIn("tollgate_rules_version", body)
        self.assertIn('tollgate_rule_leases_in_flight{rule="db*"}', body)  # issue 40: per concurrency rule
        # Every stat the daemon reports is declared beside its owner (src/util/stat_def.h), with
        # its kind and help: none is rendered from its name alone (issue 33).
        self.assertNotIn("(undeclared)", body)
        self.assertIn("# TYPE tollgate_keys gauge", body)
        self.assertIn("# HELP tollgate_keys Buckets held", body)
        self.assertIn("# TYPE tollgate_state_write_seconds gauge", body)
        lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)

    def test_bad_requests_get_4xx_and_a_reason(self):
        status, _, body = self.a.request("GET", "/v1/check?key=k1&cost=x")
        self.assertEqual(status, 400)
        self.assertIn("cost must be a whole number", json.loads(body)["error"])
        status, _, _ = self.a.request("GET", "/v1/check?key=k1", headers={"X-Big": "v" * 9000})
        self.assertEqual(status, 431)
        status, _, _ = self.a.request("POST", "/v1/check", "x" * 70000)
        self.assertEqual(status, 413)
        with socket.create_connection(("127.0.0.1", self.a.http_port), timeout=10) as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 400"))

    def test_at_the_cap_a_newcomer_takes_the_place_of_the_longest_waiting_and_idle_ones_time_out(self):
        # Issue 34, finding 3: five connections holding half a request used to lock every later
        # client out until --http-timeout (nginx's auth_request then fails open). Now each
        # newcomer takes the place of the connection that has waited longest for its request.
        before = self.b.stats()
        held = [socket.create_connection(("127.0.0.1", self.b.http_port), timeout=10) for _ in range(5)]
        try:
            for s in held:
                s.sendall(b"GET /healthz HTTP/1.1\r\n")
            # Connections are accepted in order, so the sixth finds the five before it, the first
            # of them waiting longest. (No stats call in between: it would be a sixth itself.)
            status, _, _ = self.b.request("GET", "/healthz")
            self.assertEqual(status, 200, "the sixth client is served")
            self.assertEqual(held[0].recv(100), b"", "the longest-waiting connection made room")
            for s in held[1:]:  # the others are closed without an answer once the timeout passes
                self.assertEqual(s.recv(100), b"")
        finally:
            for s in held:
                s.close()
        after = wait_until("the server to serve again", self.b.try_stats)
        # At least one: the connection of the `before` call may still have been counted (the
        # server sees its close a moment later) and made room too. None was refused.
        self.assertGreaterEqual(after["http.connections_evicted"] - before["http.connections_evicted"], 1)
        self.assertEqual(after["http.connections_rejected"], before["http.connections_rejected"])
        self.assertGreaterEqual(after["http.connections_timed_out"] - before["http.connections_timed_out"], 4)


class SoloDaemon(unittest.TestCase):
    """Base of the classes below: one daemon of the class's own (cls.d), alone in its cluster,
    started with the class's EXTRA flags, and checked to exit 0."""
    EXTRA = []

    @classmethod
    def setUpClass(cls):
        cls.dir = workdir("tollgate-http-solo-")
        port = free_port()
        cls.d = Daemon(cls.dir, "solo", port, [("solo", port)], cls.EXTRA)

    @classmethod
    def tearDownClass(cls):
        stop_and_remove(cls.d, cls.dir)


class EndlessLines(SoloDaemon):
    """Lines the parser must see whole and that never end (issue 34, finding 1): a chunk-size
    line, a chunk extension, a trailer. Each is refused with 400 after a bounded read, and the
    daemon's memory does not follow what the client sends. Before the fix the read buffer grew
    with every byte until the 10 s timeout: 64 MiB sent, 64+ MiB more RSS, no answer."""

    SEND_CAP = 64 << 20  # bytes the attacker is allowed to push before the test gives up
    HEAD = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    # (default limits: a 10 s timeout)

    def flood(self, prefix, filler):
        """Sends prefix, then filler until the server answers or SEND_CAP bytes have gone: the
        bytes sent and the first bytes of the answer (b"" if the server closed without one)."""
        import select
        block = filler * ((64 << 10) // len(filler))
        sent = 0
        answer = b""
        with socket.create_connection(("127.0.0.1", self.d.http_port), timeout=20) as s:
            s.sendall(self.HEAD + prefix)
            try:
                while sent < self.SEND_CAP:
                    readable, _, _ = select.select([s], [], [], 0)
                    if readable:
                        answer = s.recv(200)
                        break
                    s.sendall(block)
                    sent += len(block)
                else:
                    return sent, answer
            except (BrokenPipeError, ConnectionResetError):
                pass
            if not answer:
                try:
                    answer = s.recv(200)
                except (ConnectionResetError, socket.timeout):
                    pass
        return sent, answer

    def check_refused(self, prefix, filler):
        before = rss_kib(self.d.proc.pid)
        sent, answer = self.flood(prefix, filler)
        grown = rss_kib(self.d.proc.pid) - before
        self.assertTrue(answer.startswith(b"HTTP/1.1 400"), "after %d bytes: %r" % (sent, answer))
        self.assertLess(sent, 8 << 20, "the server read on long after the line passed its buffer")
        self.assertLess(grown, 16 << 10, "RSS grew by %d KiB while %d bytes were sent" % (grown, sent))
        # The daemon still answers, and it counted the refusal.
        self.assertEqual(self.d.request("GET", "/healthz")[0], 200)

    def test_an_endless_chunk_size_line_is_refused(self):
        self.check_refused(b"", b"1")

    def test_an_endless_chunk_extension_is_refused(self):
        self.check_refused(b"5;ext=", b"a")

    def test_endless_trailers_are_refused(self):
        self.check_refused(b"0\r\nX-Trailer: ", b"v")

    def test_the_refusals_are_counted(self):
        before = self.d.stats()["http.requests_too_large"]
        self.check_refused(b"", b"f")
        self.assertEqual(self.d.stats()["http.requests_too_large"], before + 1)


class ConnectionLimits(SoloDaemon):
    """At the connection limit, the client holding the most connections gives up its longest-
    waiting one: a flood from one address cannot push out another client's kept-alive
    connection (issue 34, finding 3)."""

    EXTRA = ["--http-max-connections", "4"]

    def test_the_client_holding_most_makes_room_not_another(self):
        # Every request before the newcomer goes over `kept`: a connection of our own that the
        # server has not yet seen close would count towards the limit.
        kept = http.client.HTTPConnection("127.0.0.1", self.d.http_port, timeout=10)  # from 127.0.0.1
        held = []
        try:
            kept.request("GET", "/v1/stats")
            r = kept.getresponse()
            self.assertEqual(r.status, 200)
            before = json.loads(r.read())["stats"]
            # Three half-open requests from another address: the limit of four is reached, and the
            # kept-alive connection is now the least recently active of all.
            for _ in range(3):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(10)
                s.bind(("127.0.0.2", 0))
                s.connect(("127.0.0.1", self.d.http_port))
                s.sendall(b"GET /healthz HTTP/1.1\r\n")
                held.append(s)
            status, _, _ = self.d.request("GET", "/healthz")  # a newcomer from 127.0.0.1
            self.assertEqual(status, 200)
            self.assertEqual(held[0].recv(100), b"", "127.0.0.2 holds most: its longest-waiting one went")
            kept.request("GET", "/v1/check?key=k1")
            r = kept.getresponse()
            r.read()
            self.assertEqual(r.status, 200, "the other client's connection stayed")
            # An eviction is no malformed request: nothing is answered or counted for it.
            kept.request("GET", "/v1/stats")
            r = kept.getresponse()
            now = json.loads(r.read())["stats"]
            self.assertEqual(now["http.requests_malformed"], before["http.requests_malformed"])
            self.assertEqual(now["http.connections_evicted"] - before["http.connections_evicted"], 1)
        finally:
            kept.close()
            for s in held:
                s.close()
        after = wait_until("the server to serve again", self.d.try_stats)
        # At least one (the sockets closed above may still count when this last call arrives).
        self.assertGreaterEqual(after["http.connections_evicted"] - before["http.connections_evicted"], 1)
        self.assertEqual(after["http.connections_rejected"], before["http.connections_rejected"])


class RulesFileReload(unittest.TestCase):
    """An edited rules file applies within seconds without SIGHUP; a broken edit leaves the rules
    in force and is counted; rules_version is the documented hash of the file in force."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-http-rules-")
        self.rules = os.path.join(self.dir, "rules.yaml")
        self.write('rules:\n  - {match: "k*", rate: 5/s, burst: 5}\n')
        with open(os.path.join(self.dir, "rls.yaml"), "w") as f:
            f.write(RLS)
        port = free_port()
        self.d = Daemon(self.dir, "solo", port, [("solo", port)])

    def tearDown(self):
        code = self.d.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(code, 0)

    def write(self, text):
        tmp = self.rules + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.rules)  # as an editor or a deploy tool does: never half a file
        self.text = text

    def burst(self):
        return json.loads(self.d.request("GET", "/v1/check?key=k1&cost=0")[2])["limit"]["burst"]

    def version(self):
        return int.from_bytes(hashlib.sha256(self.text.encode()).digest()[:6], "big")

    def test_an_edit_applies_and_a_broken_one_is_refused(self):
        self.assertEqual(self.burst(), "5")
        self.assertEqual(self.d.stats()["rules_version"], self.version())
        self.write('rules:\n  - {match: "k*", rate: 5/s, burst: 7}\n')
        wait_until("the edited rules", lambda: self.burst() == "7")
        stats = self.d.stats()
        self.assertEqual(stats["rules_version"], self.version())
        self.assertEqual(stats["rules_reloads"], 1)
        good = self.version()
        self.write('rules:\n  - {match: "k*", rate: 5/s, burts: 9}\n')
        wait_until("the broken file to be refused", lambda: self.d.stats()["rules_reload_failures"] == 1)
        self.assertEqual(self.burst(), "7")
        self.assertEqual(self.d.stats()["rules_version"], good)


class Credentials(unittest.TestCase):
    """--http-token-file, --metrics-listen and the refusal of an open non-loopback listener
    (issue 34, finding 10), on a real daemon."""

    TOKEN = "first-token-0123456789abcdef"

    @classmethod
    def setUpClass(cls):
        cls.dir = workdir("tollgate-http-auth-")
        cls.token_file = os.path.join(cls.dir, "token")
        cls.write_token(cls.TOKEN)
        cls.metrics_port = free_port()
        port = free_port()
        cls.d = Daemon(cls.dir, "solo", port, [("solo", port)],
                       ["--http-token-file", cls.token_file, "--metrics-listen", "127.0.0.1:%d" % cls.metrics_port])

    @classmethod
    def tearDownClass(cls):
        stop_and_remove(cls.d, cls.dir)

    @classmethod
    def write_token(cls, token):
        tmp = cls.token_file + ".new"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(token + "\n")
        os.replace(tmp, cls.token_file)

    def status(self, path, token=None, port=None, method="GET"):
        headers = {"Authorization": "Bearer " + token} if token else {}
        conn = http.client.HTTPConnection("127.0.0.1", port or self.d.http_port, timeout=10)
        try:
            conn.request(method, path, headers=headers)
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()

    def test_a_token_guards_all_but_health_and_a_reload_rotates_it(self):
        self.assertEqual(self.status("/v1/check?key=k1"), 401)
        self.assertEqual(self.status("/v1/check?key=k1", "wrong-token-0123456789abcdef"), 401)
        self.assertEqual(self.status("/v1/stats"), 401)
        self.assertEqual(self.status("/metrics"), 401)
        self.assertEqual(self.status("/healthz"), 200)
        self.assertEqual(self.status("/v1/check?key=k1", self.TOKEN), 200)
        # A reset is a write like a check: behind the token.
        self.assertEqual(self.status("/v1/reset?key=k1", method="POST"), 401)
        self.assertEqual(self.status("/v1/reset?key=k1", self.TOKEN, method="POST"), 200)
        # The metrics listener: metrics and health without a token, nothing else.
        self.assertEqual(self.status("/metrics", port=self.metrics_port), 200)
        self.assertEqual(self.status("/healthz", port=self.metrics_port), 200)
        self.assertEqual(self.status("/v1/check?key=k1", self.TOKEN, port=self.metrics_port), 404)
        # SIGHUP rotates the token; a bad file then keeps the one in force.
        self.write_token("second-token-0123456789abcdef")
        self.d.proc.send_signal(signal.SIGHUP)
        wait_until("the new token", lambda: self.status("/v1/stats", "second-token-0123456789abcdef") == 200)
        self.assertEqual(self.status("/v1/stats", self.TOKEN), 401)
        self.write_token("short")
        self.d.proc.send_signal(signal.SIGHUP)
        log = os.path.join(self.dir, "solo.log")
        def refused():
            with open(log) as f:
                return "HTTP token not reloaded" in f.read()
        wait_until("the bad token file to be refused", refused)
        self.assertEqual(self.status("/v1/stats", "second-token-0123456789abcdef"), 200)

    def test_a_listener_beyond_loopback_needs_a_token_or_says_insecure(self):
        port = free_port()
        args = [TOLLGATED, "--node-id", "open", "--bind", "127.0.0.1:%d" % port, "--listen",
                "unix:" + os.path.join(self.dir, "open.sock"), "--rules", os.path.join(self.dir, "rules.yaml"),
                "--membership", "heartbeat", "--seeds", "127.0.0.1:%d" % port, "--insecure-gossip",
                "--http-listen", "0.0.0.0:%d" % free_port()]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"is not loopback", r.stdout)
        self.assertIn(b"--http-token-file", r.stdout)


class DurableBalances(unittest.TestCase):
    """--state-dir (issue 35): a per-day limit spent to zero stays spent across a SIGTERM restart
    and across a kill -9 after a state write; a state file of another node stops the start."""

    def setUp(self):
        self.dir = workdir("tollgate-http-state-")
        with open(os.path.join(self.dir, "rules.yaml"), "w") as f:
            f.write('rules:\n  - {match: "day:*", rate: 5/d, burst: 5}\n')
        self.state = os.path.join(self.dir, "state")
        os.mkdir(self.state)
        self.port = free_port()
        self.d = None

    def tearDown(self):
        if self.d:
            stop_and_remove(self.d, self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, name="solo"):
        self.d = Daemon(self.dir, name, self.port, [(name, self.port)],
                        ["--state-dir", self.state, "--state-interval", "1s"])

    def check(self):
        return self.d.request("GET", "/v1/check?key=day:alice")[0]

    def test_a_spent_daily_limit_stays_spent_across_restarts(self):
        self.start()
        self.assertEqual([self.check() for _ in range(6)], [200] * 5 + [429])
        self.assertEqual(self.d.stop(), 0)  # SIGTERM: the state is written as it leaves
        self.start()
        self.assertEqual(self.check(), 429)
        self.assertEqual(self.d.stats()["state_keys_restored"], 1)
        # kill -9 once a state write has followed the last check: nothing of it is lost.
        writes = self.d.stats()["state_writes"]
        wait_until("a state write", lambda: self.d.stats()["state_writes"] > writes)
        self.d.proc.kill()
        self.d.proc.wait()
        self.d.process.log.close()
        self.start()
        self.assertEqual(self.check(), 429)

    def test_another_nodes_state_stops_the_start(self):
        self.start()
        self.assertEqual(self.check(), 200)
        self.assertEqual(self.d.stop(), 0)
        self.d = None
        with self.assertRaises(AssertionError):
            self.start("impostor")
        with open(os.path.join(self.dir, "impostor.log")) as f:
            self.assertIn("written by node solo, this is node impostor", f.read())
        self.d = None


if __name__ == "__main__":
    unittest.main()

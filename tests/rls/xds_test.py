#!/usr/bin/python3
"""tollgated's RLS config from an xDS management server (--rls-xds), on real daemons, against a
management server that is not our code: Debian's python3-grpcio serving the aggregated discovery
service from stubs protoc generates at test time from our mirrors of Envoy's ads.proto and
envoyproxy/ratelimit's rls_conf.proto (Python's Any.Pack writes the resource's real type URL).

What Envoy Gateway does is the spec (docs/xds-plan.md): one ADS stream, state of the world, the
whole config in each response, ACK with the version and nonce, NACK with the last good version
and the refused nonce, reconnect with the version in force and no nonce.

Usage (ctest runs it): xds_test.py TOLLGATED TOLLGATE_CLI PROTO_DIR [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import concurrent.futures
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import Process, free_port, make_ca, make_cert, wait_until  # noqa: E402

TOLLGATED, TOLLGATE_CLI, PROTO_DIR = sys.argv[1:4]
del sys.argv[1:4]

GEN = tempfile.mkdtemp(prefix="tollgate-xds-stubs-")
subprocess.run(
    ["protoc", "-I", PROTO_DIR, "-I", "/usr/include", "--python_out=" + GEN, "--grpc_python_out=" + GEN,
     "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
     os.path.join(PROTO_DIR, "envoy/service/discovery/v3/ads.proto"),
     os.path.join(PROTO_DIR, "ratelimit/config/ratelimit/v3/rls_conf.proto"),
     os.path.join(PROTO_DIR, "envoy/service/ratelimit/v3/rls.proto")],
    check=True)
sys.path.insert(0, GEN)

import grpc  # noqa: E402
from envoy.service.discovery.v3 import ads_pb2, ads_pb2_grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from google.protobuf import any_pb2  # noqa: E402
from ratelimit.config.ratelimit.v3 import rls_conf_pb2 as conf  # noqa: E402

TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
WAIT_S = 20


def config(domain, key, per_minute, name=None, unit=conf.MINUTE):
    """One RateLimitConfig: `domain` limiting `key` (any value) to per_minute a minute."""
    c = conf.RateLimitConfig(name=name or domain, domain=domain)
    d = c.descriptors.add(key=key)
    d.rate_limit.unit = unit
    d.rate_limit.requests_per_unit = per_minute
    return c


def packed(message):
    a = any_pb2.Any()
    a.Pack(message)
    return a


class XdsServer:
    """An ADS server the test drives: each request the daemon sends is queued for the test
    (`next_request`), and `push` sends a response on the open stream (a fresh nonce each)."""

    def __init__(self, port=None, credentials=None):
        self.port = port or free_port()
        self.requests = queue.Queue()
        self.streams = queue.Queue()  # each stream's outgoing queue, as it opens
        self.current = None
        self.nonces = itertools.count(1)
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(self, self.server)
        address = "127.0.0.1:%d" % self.port
        bound = (self.server.add_secure_port(address, credentials) if credentials
                 else self.server.add_insecure_port(address))
        assert bound == self.port, "port %d not bound" % self.port
        self.server.start()

    # The servicer.
    def StreamAggregatedResources(self, request_iterator, context):
        outgoing = queue.Queue()
        self.streams.put(outgoing)

        def read():
            try:
                for r in request_iterator:
                    self.requests.put(r)
            except grpc.RpcError:
                pass
            outgoing.put(None)  # the client is gone: end the stream
        threading.Thread(target=read, daemon=True).start()
        while True:
            response = outgoing.get()
            if response is None:
                return
            yield response

    def next_request(self, timeout=WAIT_S):
        try:
            return self.requests.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no DiscoveryRequest within %d s" % timeout)

    def wait_stream(self):
        try:
            self.current = self.streams.get(timeout=WAIT_S)
        except queue.Empty:
            raise AssertionError("no stream opened within %d s" % WAIT_S)

    def push(self, version, resources, type_url=TYPE_URL):
        """Sends a response of `resources` (messages, or ready Anys); returns its nonce."""
        nonce = "n%d" % next(self.nonces)
        response = ads_pb2.DiscoveryResponse(version_info=version, type_url=type_url, nonce=nonce)
        for r in resources:
            response.resources.append(r if isinstance(r, any_pb2.Any) else packed(r))
        self.current.put(response)
        return nonce

    def stop(self):
        if self.current is not None:
            self.current.put(None)
        self.server.stop(grace=None)


class Daemon:
    """One tollgated serving the RLS on a free loopback port, its config from `xds_port`."""

    def __init__(self, workdir, xds_port, extra=()):
        self.workdir = workdir
        self.rls_port = free_port()
        self.api = os.path.join(workdir, "api.sock")
        peers = os.path.join(workdir, "peers")
        with open(peers, "w"):
            pass
        args = [TOLLGATED, "--node-id", "solo", "--bind", "127.0.0.1:%d" % free_port(), "--listen",
                "unix:" + self.api, "--membership", "static", "--peers-file", peers, "--insecure-gossip",
                "--rls-xds", "127.0.0.1:%d" % xds_port, "--rls-listen", "127.0.0.1:%d" % self.rls_port]
        self.process = Process(args + list(extra), os.path.join(workdir, "tollgated.log"))
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.rls_port)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=WAIT_S)
        except grpc.FutureTimeoutError:
            raise AssertionError("tollgated never served gRPC; its log:\n" + self.process.output())

    def call(self, domain, key, value="v"):
        request = rls_pb2.RateLimitRequest(domain=domain.encode())
        e = request.descriptors.add().entries.add()
        e.key = key.encode()
        e.value = value.encode()
        return self.stub.ShouldRateLimit(request, timeout=5)

    def stats(self):
        out = subprocess.run([TOLLGATE_CLI, "--endpoint", "unix:" + self.api, "stats", "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["stats"]

    def stop(self):
        self.channel.close()
        return self.process.stop()


class XdsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-xds-")
        self.servers, self.daemons = [], []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        for d in self.daemons:
            log = d.process.output()
            self.assertEqual(d.stop(), 0, "tollgated did not exit 0; its log:\n" + log)
        shutil.rmtree(self.dir, ignore_errors=True)

    def server(self, **kw):
        s = XdsServer(**kw)
        self.servers.append(s)
        return s

    def daemon(self, xds_port, extra=()):
        d = Daemon(self.dir, xds_port, extra)
        self.daemons.append(d)
        return d

    def ack(self, server, version, nonce):
        r = server.next_request()
        self.assertEqual((r.version_info, r.response_nonce), (version, nonce), r)
        self.assertFalse(r.HasField("error_detail"), r.error_detail.message)
        return r

    def nack(self, server, version_in_force, nonce):
        r = server.next_request()
        self.assertEqual((r.version_info, r.response_nonce), (version_in_force, nonce), r)
        self.assertTrue(r.HasField("error_detail"), "an ACK where a NACK was due")
        return r.error_detail.message

    def codes(self, d, domain, key, n, value="v"):
        return [d.call(domain, key, value).overall_code for _ in range(n)]

    def test_configs_are_acked_and_applied_and_bad_ones_nacked_keeping_the_last_good(self):
        s = self.server()
        d = self.daemon(s.port, ["--rls-xds-node-id", "envoy-ratelimit", "--rls-xds-node-metadata", "zone=a"])
        s.wait_stream()
        first = s.next_request()
        self.assertEqual(first.node.id, "envoy-ratelimit")
        self.assertEqual(first.node.user_agent_name, "tollgated")
        self.assertEqual([(f.key, f.value.string_value) for f in first.node.metadata.fields], [("zone", "a")])
        self.assertEqual(first.type_url, TYPE_URL)
        self.assertEqual((first.version_info, first.response_nonce, list(first.resource_names)), ("", "", []))
        # Before any config: every call OK, unlimited, and the daemon says it has none.
        r = d.call("d", "k")
        self.assertEqual(r.overall_code, OK)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(d.stats()["rls_config_missing"], 1)

        n1 = s.push("1", [config("d", "k", 2)])
        self.ack(s, "1", n1)
        wait_until("version 1 in force", lambda: d.call("d", "k", "probe").statuses[0].HasField("current_limit"))
        self.assertEqual(self.codes(d, "d", "k", 3), [OK, OK, OVER])
        self.assertEqual(d.stats()["rls_config_missing"], 0)

        # Version 2 adds a domain and keeps d's limit: d's spent bucket stays spent.
        n2 = s.push("2", [config("d", "k", 2), config("e", "k", 1)])
        self.ack(s, "2", n2)
        wait_until("version 2 in force", lambda: d.call("e", "k", "probe").statuses[0].HasField("current_limit"))
        self.assertEqual(self.codes(d, "d", "k", 1), [OVER])
        self.assertEqual(self.codes(d, "e", "k", 2), [OK, OVER])

        # Refused, each naming what is wrong; version 2 stays in force and is what the NACK says.
        bad_unit = config("d", "k", 5, name="cfg-d", unit=conf.UNKNOWN)
        nonce = s.push("3", [bad_unit])
        self.assertIn("cfg-d", self.nack(s, "2", nonce))
        nonce = s.push("3", [config("d", "k", 5), config("d", "other", 5, name="again")])
        self.assertIn("domain \"d\" is already defined", self.nack(s, "2", nonce))
        nonce = s.push("3", [packed(rls_pb2.RateLimitRequest(domain=b"x"))])
        self.assertIn("not a " + TYPE_URL, self.nack(s, "2", nonce))
        garbage = any_pb2.Any(type_url=TYPE_URL, value=b"\xff\xff\xff")
        nonce = s.push("3", [garbage])
        self.assertIn("not a readable RateLimitConfig", self.nack(s, "2", nonce))
        nonce = s.push("3", [config("d", "k", 5)], type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster")
        self.assertIn("asks for " + TYPE_URL + " only", self.nack(s, "2", nonce))
        self.assertEqual(self.codes(d, "d", "k", 1), [OVER], "version 2's limit, not the refused 5/min")
        stats = d.stats()
        self.assertEqual((stats["rls_xds_acks"], stats["rls_xds_nacks"], stats["rls_xds_connected"]), (2, 5, 1))

        # The whole state each time: no resource is no domain (every call OK again), not "none yet".
        n4 = s.push("4", [])
        self.ack(s, "4", n4)
        wait_until("version 4 in force", lambda: not d.call("d", "k", "probe").statuses[0].HasField("current_limit"))
        self.assertEqual(self.codes(d, "d", "k", 2), [OK, OK])
        self.assertEqual(d.stats()["rls_config_missing"], 0)

    def test_a_new_stream_asks_with_the_version_in_force_and_no_nonce_and_limits_hold_meanwhile(self):
        s = self.server()
        d = self.daemon(s.port)
        s.wait_stream()
        s.next_request()
        n1 = s.push("7", [config("d", "k", 1)])
        self.ack(s, "7", n1)
        wait_until("version 7 in force", lambda: d.call("d", "k", "probe").statuses[0].HasField("current_limit"))
        self.assertEqual(self.codes(d, "d", "k", 2), [OK, OVER])
        port = s.port
        s.stop()
        self.servers.remove(s)
        wait_until("the stream seen down", lambda: d.stats()["rls_xds_connected"] == 0)
        self.assertEqual(self.codes(d, "d", "k", 1), [OVER], "the config in force holds without its server")
        s2 = self.server(port=port)
        s2.wait_stream()
        again = s2.next_request()
        self.assertEqual((again.version_info, again.response_nonce), ("7", ""))
        self.assertGreaterEqual(d.stats()["rls_xds_streams"], 2)

    def test_without_a_server_at_start_calls_pass_until_one_answers(self):
        port = free_port()
        d = self.daemon(port)
        self.assertEqual(d.call("d", "k").overall_code, OK)
        self.assertEqual(d.stats()["rls_config_missing"], 1)
        s = self.server(port=port)
        s.wait_stream()
        s.next_request()
        n = s.push("1", [config("d", "k", 1)])
        self.ack(s, "1", n)
        wait_until("the first config in force", lambda: d.stats()["rls_config_missing"] == 0)
        self.assertEqual(self.codes(d, "d", "k", 2), [OK, OVER])

    def test_tls_with_a_client_certificate_and_a_wrong_ca_is_refused(self):
        make_ca(self.dir, "ca")
        make_ca(self.dir, "other")
        make_cert(self.dir, "server", "ca", "DNS:xds.example")
        make_cert(self.dir, "client", "ca")
        def f(name):
            with open(os.path.join(self.dir, name), "rb") as file:
                return file.read()
        credentials = grpc.ssl_server_credentials([(f("server.key"), f("server.pem"))], root_certificates=f("ca.pem"),
                                                  require_client_auth=True)
        s = self.server(credentials=credentials)
        path = lambda name: os.path.join(self.dir, name)  # noqa: E731
        # A CA that did not sign the server's certificate: no stream ever reaches the servicer.
        wrong = self.daemon(s.port, ["--rls-xds-tls-ca", path("other.pem"), "--rls-xds-tls-cert", path("client.pem"),
                                     "--rls-xds-tls-key", path("client.key"), "--rls-xds-tls-server-name",
                                     "xds.example"])
        wait_until("a refused handshake", lambda: wrong.stats()["rls_xds_streams"] >= 1)
        good = Daemon(tempfile.mkdtemp(dir=self.dir), s.port,
                      ["--rls-xds-tls-ca", path("ca.pem"), "--rls-xds-tls-cert", path("client.pem"),
                       "--rls-xds-tls-key", path("client.key"), "--rls-xds-tls-server-name", "xds.example"])
        self.daemons.append(good)
        s.wait_stream()
        s.next_request()
        n = s.push("1", [config("d", "k", 1)])
        self.ack(s, "1", n)
        wait_until("the config in force over TLS", lambda: good.stats()["rls_config_missing"] == 0)
        self.assertEqual(self.codes(good, "d", "k", 2), [OK, OVER])
        self.assertTrue(s.streams.empty(), "the daemon with the wrong CA reached the servicer")
        self.assertEqual(wrong.stats()["rls_xds_acks"], 0)
        self.assertEqual(wrong.stats()["rls_config_missing"], 1)

    def test_a_tls_file_that_cannot_be_read_stops_the_start_naming_it(self):
        peers = os.path.join(self.dir, "peers")
        with open(peers, "w"):
            pass
        p = subprocess.run([TOLLGATED, "--node-id", "x", "--bind", "127.0.0.1:%d" % free_port(), "--insecure-gossip",
                            "--membership", "static", "--peers-file", peers, "--listen",
                            "unix:" + os.path.join(self.dir, "api.sock"), "--rls-listen", "127.0.0.1:%d" % free_port(),
                            "--rls-xds", "127.0.0.1:%d" % free_port(), "--rls-xds-tls-ca",
                            os.path.join(self.dir, "missing-ca.pem")],
                           capture_output=True, text=True, timeout=WAIT_S)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("missing-ca.pem", p.stdout + p.stderr)

    def test_usage_errors_name_the_setting(self):
        base = [TOLLGATED, "--node-id", "x", "--bind", "127.0.0.1:1", "--insecure-gossip"]
        xds = ["--rls-listen", "127.0.0.1:1", "--rls-xds", "127.0.0.1:2"]
        cases = [
            (xds + ["--rls-config", "/nonexistent"], "give one"),
            (["--rls-listen", "127.0.0.1:1", "--rls-xds", "10.1.2.3:18000"], "--rls-xds 10.1.2.3:18000 is not loopback"),
            (xds + ["--rls-xds-tls-cert", "c.pem"], "go together"),
            (xds + ["--rls-xds-tls-cert", "c", "--rls-xds-tls-key", "k"], "need --rls-xds-tls-ca"),
            (xds + ["--rls-xds-header", "Authorization:x"], "lower-case"),
            (["--rls-xds-node-id", "envoy-ratelimit", "--rules", "/nonexistent"], "are for --rls-xds"),
            (["--rls-listen", "127.0.0.1:1", "--rules", "/nonexistent"], "--rls-listen needs --rls-config PATH or --rls-xds"),
        ]
        for extra, want in cases:
            p = subprocess.run(base + extra, capture_output=True, text=True, timeout=WAIT_S)
            self.assertEqual(p.returncode, 2, (extra, p.stderr))
            self.assertIn(want, p.stderr, extra)


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        shutil.rmtree(GEN, ignore_errors=True)

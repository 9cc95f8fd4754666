#!/usr/bin/python3
"""Envoy's rate limit service on real tollgated, driven by a gRPC client that is not our code.

Debian's python3-grpcio speaks to tollgated with stubs that protoc and grpc_python_plugin generate
from our proto/envoy/service/ratelimit/v3/rls.proto and from grpc-proto's health.proto. The cases
follow envoyproxy/ratelimit's integration tests (their behaviour is the spec; docs/rls-notes.md
section 4), with tollgate's semantics where they differ on purpose (all or nothing, token bucket).

Usage (ctest runs it): rls_test.py TOLLGATED TOLLGATE_CLI PROTO_DIR [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import (Process, free_port, make_ca, make_cert, rss_kib, sanitized, stop_and_remove,  # noqa: E402
                              wait_until as poll_until)

TOLLGATED, TOLLGATE_CLI, PROTO_DIR = sys.argv[1:4]
del sys.argv[1:4]

GEN = tempfile.mkdtemp(prefix="tollgate-rls-stubs-")
# grpc-proto's health.proto, copied under another directory: generated as grpc/health/v1/ it would
# be hidden by the installed grpc package. The proto package (grpc.health.v1), which makes the
# method path, is unchanged.
os.mkdir(os.path.join(GEN, "health_probe"))
shutil.copy("/usr/share/grpc-proto/grpc/health/v1/health.proto", os.path.join(GEN, "health_probe"))
subprocess.run(
    ["protoc", "-I", PROTO_DIR, "-I", GEN, "-I", "/usr/include",
     "--python_out=" + GEN, "--grpc_python_out=" + GEN,
     "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
     os.path.join(PROTO_DIR, "envoy/service/ratelimit/v3/rls.proto"),
     os.path.join(GEN, "health_probe/health.proto")],
    check=True)
sys.path.insert(0, GEN)

import grpc  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from health_probe import health_pb2, health_pb2_grpc  # noqa: E402

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
UINT32_MAX = 4294967295
WAIT_S = 20  # the longest any poll waits before failing

BASIC = """
domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: unlimited_key
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /each/*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_user}]
  - key: llm_tokens
    rate_limit: {unit: minute, requests_per_unit: 100, max_debt: 200, charge_when_over: true}
"""






def wait_until(what, predicate, timeout=WAIT_S):
    return poll_until(what, predicate, timeout)


@contextlib.contextmanager
def daemon_serving(prefix, config_text, extra=(), config_name="rls.yaml"):
    """One daemon serving `config_text` (None: the config file is not written) from a temporary
    directory; yields (daemon, config path). It must exit 0 when stopped; the directory goes."""
    work = tempfile.mkdtemp(prefix="tollgate-rls-" + prefix + "-")
    config = os.path.join(work, config_name)
    if config_text is not None:
        with open(config, "w") as f:
            f.write(config_text)
    d = None
    try:
        d = Daemon(work, prefix, config, extra=extra)
        yield d, config
    finally:
        try:
            if d is not None:
                assert d.stop() == 0, "the daemon did not exit 0; its log:\n" + d.read_log()
        finally:
            shutil.rmtree(work, ignore_errors=True)


class Daemon:
    """One tollgated serving the RLS on a free loopback port."""

    def __init__(self, workdir, name, rls_config, peers=None, gossip_port=None, key_file=None, extra=()):
        self.workdir = workdir
        self.name = name
        self.rls_port = free_port()
        self.gossip_port = gossip_port or free_port()
        self.api = os.path.join(workdir, name + ".sock")
        peers_file = os.path.join(workdir, name + ".peers")
        with open(peers_file, "w") as f:
            for peer_name, port in (peers or []):
                f.write("%s 127.0.0.1:%d\n" % (peer_name, port))
        args = [TOLLGATED, "--node-id", name, "--bind", "127.0.0.1:%d" % self.gossip_port,
                "--listen", "unix:" + self.api, "--membership", "static", "--peers-file", peers_file,
                "--rls-config", rls_config, "--rls-listen", "127.0.0.1:%d" % self.rls_port, "--mode", "mesh"]
        args += ["--cluster-key-file", key_file] if key_file else ["--insecure-gossip"]
        args += list(extra)
        self.process = Process(args, os.path.join(workdir, name + ".log"))
        self.proc = self.process.proc
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.rls_port)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=WAIT_S)
        except grpc.FutureTimeoutError:
            raise AssertionError("%s never served gRPC; its log:\n%s" % (name, self.read_log()))

    def read_log(self):
        return self.process.output()

    def call(self, domain, descriptors, hits=0, timeout=5):
        """descriptors: a list of (entries, hits_addend or None); entries: a list of (key, value)."""
        request = rls_pb2.RateLimitRequest(domain=domain.encode(), hits_addend=hits)
        for entries, own_hits in descriptors:
            d = request.descriptors.add()
            for k, v in entries:
                e = d.entries.add()
                e.key = k.encode()
                e.value = v.encode()
            if own_hits is not None:
                d.hits_addend.value = own_hits
        return self.stub.ShouldRateLimit(request, timeout=timeout)

    def one(self, domain, entries, hits=0, own_hits=None):
        return self.call(domain, [(entries, own_hits)], hits=hits)

    def stats(self):
        out = subprocess.run([TOLLGATE_CLI, "--endpoint", "unix:" + self.api, "stats", "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["stats"]

    def stop(self):
        self.channel.close()
        return self.process.stop()


class SingleDaemon(unittest.TestCase):
    """The cases on the gRPC C++ engine; SingleDaemonNative runs them on the default, ours."""
    EXTRA = ("--rls-server", "grpc")

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-rls-")
        cls.config_dir = os.path.join(cls.dir, "config")
        os.mkdir(cls.config_dir)
        with open(os.path.join(cls.config_dir, "basic.yaml"), "w") as f:
            f.write(BASIC)
        cls.d = Daemon(cls.dir, "solo", cls.config_dir, extra=cls.EXTRA)

    @classmethod
    def tearDownClass(cls):
        stop_and_remove(cls.d, cls.dir)

    def test_unknown_domain_is_ok_without_a_limit(self):
        r = self.d.one("foo", [("hello", "world")])
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(len(r.statuses), 1)
        self.assertEqual(r.statuses[0].code, OK)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(r.statuses[0].limit_remaining, 0)

    def test_first_hit_reports_the_limit_and_what_remains(self):
        r = self.d.one("basic", [("key1", "first")])
        self.assertEqual(r.overall_code, OK)
        s = r.statuses[0]
        self.assertEqual(s.current_limit.requests_per_unit, 50)
        self.assertEqual(s.current_limit.unit, rls_pb2.RateLimitResponse.RateLimit.SECOND)
        self.assertEqual(s.limit_remaining, 49)
        # One token short of full at 50/s: 20 ms until the bucket is full again.
        self.assertEqual(s.duration_until_reset.seconds, 0)
        self.assertEqual(s.duration_until_reset.nanos, 20_000_000)

    def test_25_hits_on_20_per_minute(self):
        codes, remaining = [], []
        for _ in range(25):
            r = self.d.one("basic", [("key2", "twentyfive")])
            codes.append(r.overall_code)
            remaining.append(r.statuses[0].limit_remaining)
        self.assertEqual(codes, [OK] * 20 + [OVER] * 5)
        self.assertEqual(remaining, list(range(19, -1, -1)) + [0] * 5)

    def test_calls_at_once_admit_exactly_the_limit(self):
        def call(_):
            return self.d.one("basic", [("key2", "at-once")]).overall_code
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(call, range(40)))
        self.assertEqual(codes.count(OK), 20)
        self.assertEqual(codes.count(OVER), 20)

    def test_the_limits_that_denied_are_named_in_the_dynamic_metadata(self):
        # Envoy keeps it as the rate limit filter's dynamic metadata, for access logs (envoy #43113).
        for _ in range(10):
            self.d.one("basic", [("key3", "named")])
        r = self.d.call("basic", [([("key2", "named")], None), ([("key3", "named")], None)])
        self.assertEqual(r.overall_code, OVER)
        # Read as Envoy reads it: a google.protobuf.Struct (rls.proto's Metadata has its wire format).
        from google.protobuf import struct_pb2
        metadata = struct_pb2.Struct.FromString(r.dynamic_metadata.SerializeToString())
        denied = metadata.fields["over_limit"].list_value.values
        self.assertEqual(len(denied), 1)
        self.assertEqual(denied[0].struct_value.fields["descriptor"].number_value, 1)
        self.assertEqual(denied[0].struct_value.fields["requests_per_unit"].number_value, 10)
        self.assertEqual(denied[0].struct_value.fields["unit"].string_value, "hour")
        self.assertEqual(denied[0].struct_value.fields["name"].string_value, "")
        self.assertFalse(self.d.one("basic", [("key2", "named")]).HasField("dynamic_metadata"), "not on OK")

    def test_two_descriptors_are_all_or_nothing(self):
        # key3 (10/h) denies from call 11 on; key2 (20/min) is then not charged, unlike the
        # reference server, which keeps charging it.
        for i in range(15):
            r = self.d.call("basic", [([("key2", "pair")], None), ([("key3", "pair")], None)])
            want = OK if i < 10 else OVER
            self.assertEqual(r.overall_code, want, "call %d" % (i + 1))
            self.assertEqual(r.statuses[1].code, want)
            self.assertEqual(r.statuses[0].code, OK, "key2 had room on call %d" % (i + 1))
            self.assertEqual(r.statuses[0].limit_remaining, max(10, 19 - i))
        r = self.d.one("basic", [("key2", "pair")])
        self.assertEqual(r.statuses[0].limit_remaining, 9, "key2 was charged 10 times, then once now")

    def test_hits_addend_at_both_levels(self):
        r = self.d.one("basic", [("key2", "hits")], hits=5)
        self.assertEqual(r.statuses[0].limit_remaining, 15)
        r = self.d.one("basic", [("key2", "hits")], hits=5, own_hits=3)  # the descriptor's own wins
        self.assertEqual(r.statuses[0].limit_remaining, 12)
        r = self.d.one("basic", [("key2", "hits")], own_hits=0)  # 0 checks without charging
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].limit_remaining, 12)
        r = self.d.one("basic", [("key2", "hits")], hits=13)
        self.assertEqual(r.overall_code, OVER)
        r = self.d.one("basic", [("key2", "hits")], hits=12)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OK, 0))

    def test_shadow_mode_counts_but_never_denies(self):
        before = self.d.stats()["rls_shadow_over_limit"]
        codes = [self.d.one("basic", [("shadow", "s")]).overall_code for _ in range(5)]
        self.assertEqual(codes, [OK] * 5)
        r = self.d.one("basic", [("shadow", "s")])
        self.assertEqual((r.statuses[0].code, r.statuses[0].limit_remaining), (OK, 0))
        self.assertEqual(self.d.stats()["rls_shadow_over_limit"] - before, 4)

    def test_unlimited_and_blocked(self):
        r = self.d.one("basic", [("unlimited_key", "x")], hits=1000)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].limit_remaining, UINT32_MAX)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.d.one("basic", [("blocked", "x")])
        self.assertEqual(r.overall_code, OVER)
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 0)

    def test_each_value_gets_its_own_bucket(self):
        for value in ("alice", "bob"):
            self.assertEqual(self.d.one("basic", [("key2", "v-" + value)], hits=20).statuses[0].limit_remaining, 0)
        self.assertEqual(self.d.one("basic", [("key2", "v-alice")]).overall_code, OVER)
        self.assertEqual(self.d.one("basic", [("key2", "v-carol")]).statuses[0].limit_remaining, 19)

    def test_nested_descriptors_match_only_at_full_depth(self):
        nested = [("message_type", "marketing"), ("to_number", "2061111111")]
        self.assertEqual(self.d.one("basic", nested).statuses[0].limit_remaining, 4)
        self.assertEqual(self.d.one("basic", nested).statuses[0].limit_remaining, 3)
        # The placeholder alone has no limit; a deeper request has none either.
        r = self.d.one("basic", [("message_type", "marketing")])
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.d.one("basic", nested + [("extra", "x")])
        self.assertFalse(r.statuses[0].HasField("current_limit"))

    def test_wildcards_shared_and_per_value(self):
        for _ in range(10):
            self.assertEqual(self.d.one("basic", [("path", "/files/a.pdf")]).overall_code, OK)
        r = self.d.one("basic", [("path", "/files/b.csv")])  # share_threshold: one bucket
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OVER, 0))
        for name in ("a", "b", "c"):  # without it: each value its own bucket
            self.assertEqual(self.d.one("basic", [("path", "/each/" + name)]).statuses[0].limit_remaining, 2)
        self.assertFalse(self.d.one("basic", [("path", "/other")]).statuses[0].HasField("current_limit"))

    def test_replaces_drops_the_named_limit_within_the_request(self):
        self.assertEqual(self.d.one("basic", [("user", "u1")]).overall_code, OK)
        self.assertEqual(self.d.one("basic", [("user", "u1")]).overall_code, OVER)
        r = self.d.call("basic", [([("user", "u1")], None), ([("vip", "u1")], None)])
        self.assertEqual(r.overall_code, OK)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(r.statuses[1].limit_remaining, 99)

    def test_a_cost_known_after_the_work_is_paid_into_debt(self):
        # Envoy's apply_on_stream_done sends the real cost (say, an LLM answer's tokens) once the
        # response is done: it is charged even over the limit, and later requests wait.
        r = self.d.one("basic", [("llm_tokens", "tenant-a")], own_hits=150)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (OVER, 0))
        self.assertEqual(self.d.one("basic", [("llm_tokens", "tenant-a")]).overall_code, OVER, "in debt: 50 owed")
        # 100/min repays 1 token every 0.6 s: full again only after 90 s.
        self.assertGreater(self.d.one("basic", [("llm_tokens", "tenant-a")], own_hits=0)
                           .statuses[0].duration_until_reset.seconds, 80)
        self.assertEqual(self.d.one("basic", [("llm_tokens", "tenant-b")], own_hits=99).statuses[0].limit_remaining, 1)

    def test_bad_requests_are_invalid_argument(self):
        cases = [
            ("", [([("a", "b")], None)]),
            ("basic", []),
            ("basic", [([("", "b")], None)]),
            ("basic", [([("key1", "b")], None)] * 65),
        ]
        for domain, descriptors in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.d.call(domain, descriptors)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, e.exception.details())

    def test_is_negative_hits_gives_the_hits_back(self):
        # Envoy's refunds (is_negative_hits, e.g. apply_on_stream_done): the hits go back to the
        # bucket, never above the limit, and the answer is OK.
        def refund(value, hits):
            request = rls_pb2.RateLimitRequest(domain=b"basic")
            d = request.descriptors.add()
            e = d.entries.add()
            e.key, e.value = b"key2", value.encode()
            d.hits_addend.value = hits
            d.is_negative_hits = True
            return self.d.stub.ShouldRateLimit(request, timeout=5)

        self.assertEqual(self.d.one("basic", [("key2", "refund")], own_hits=15).statuses[0].limit_remaining, 5)
        r = refund("refund", 10)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].limit_remaining, 15)
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 20)
        self.assertEqual(refund("refund", 100).statuses[0].limit_remaining, 20, "never above the limit")
        self.assertEqual(self.d.one("basic", [("key2", "refund")], own_hits=0).statuses[0].limit_remaining, 20)

    def test_a_limit_override_wins_over_the_config(self):
        # Envoy's route rate_limits[].limit: the reference server's rule is that the override wins
        # in a known domain, with a bucket per overriding limit and descriptor. The config's bucket
        # is key3's (10 an hour, a token back every 6 minutes), so no refill can land between two
        # of its calls on a loaded machine (key2's 20 a minute refilled one in 3 s and broke CI).
        def call(domain, entries, rpu, unit, multiplier=None):
            request = rls_pb2.RateLimitRequest(domain=domain.encode())
            d = request.descriptors.add()
            for k, v in entries:
                e = d.entries.add()
                e.key, e.value = k.encode(), v.encode()
            d.limit.requests_per_unit = rpu
            d.limit.unit = unit
            if multiplier is not None:
                d.limit.unit_multiplier.value = multiplier
            return self.d.stub.ShouldRateLimit(request, timeout=5)

        for i in range(3):
            r = call("basic", [("key3", "ovr")], 3, rls_pb2.HOUR)
            self.assertEqual(r.overall_code, OK, "call %d" % (i + 1))
            self.assertEqual(r.statuses[0].limit_remaining, 2 - i)
            self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 3)
            self.assertEqual(r.statuses[0].current_limit.unit, rls_pb2.HOUR)
        self.assertEqual(call("basic", [("key3", "ovr")], 3, rls_pb2.HOUR).overall_code, OVER)
        # The config's own bucket (10/hour) was not touched, and another override is another bucket.
        self.assertEqual(self.d.one("basic", [("key3", "ovr")]).statuses[0].limit_remaining, 9)
        self.assertEqual(call("basic", [("key3", "ovr")], 3, rls_pb2.HOUR, multiplier=2).statuses[0].limit_remaining, 2)
        # Entries the config has no limit for are limited by the override.
        self.assertEqual(call("basic", [("unconfigured", "x")], 1, rls_pb2.HOUR).overall_code, OK)
        self.assertEqual(call("basic", [("unconfigured", "x")], 1, rls_pb2.HOUR).overall_code, OVER)
        # An override without a unit cannot be honoured: the config's limit applies (never none),
        # and the daemon counts it.
        ignored = self.d.stats()["rls_overrides_ignored"]
        r = call("basic", [("key3", "ovr")], 3, rls_pb2.UNKNOWN)
        self.assertEqual(self.d.stats()["rls_overrides_ignored"] - ignored, 1)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 10)
        self.assertEqual(r.statuses[0].limit_remaining, 8)
        # In a domain the config does not have, no limit, as the reference answers; counted.
        not_found = self.d.stats()["rls_domain_not_found"]
        r = call("no-such-domain", [("key3", "ovr")], 1, rls_pb2.SECOND)
        self.assertEqual(r.overall_code, OK)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(self.d.stats()["rls_domain_not_found"] - not_found, 1)

    def test_bytes_that_are_not_utf8_and_long_values(self):
        request = rls_pb2.RateLimitRequest(domain=b"basic")
        e = request.descriptors.add().entries.add()
        e.key, e.value = b"key2", b"\xff\xfe-not-utf8"
        self.assertEqual(self.d.stub.ShouldRateLimit(request, timeout=5).statuses[0].limit_remaining, 19)
        long_value = "v" * 4000  # longer than a key: the bucket key carries a digest
        self.assertEqual(self.d.one("basic", [("key2", long_value)]).statuses[0].limit_remaining, 19)
        self.assertEqual(self.d.one("basic", [("key2", long_value)]).statuses[0].limit_remaining, 18)
        self.assertEqual(self.d.one("basic", [("key2", long_value + "w")]).statuses[0].limit_remaining, 19)

    def test_health_is_serving(self):
        r = self.d.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)


class SingleDaemonOnTwoThreads(SingleDaemon):
    """The same cases with --threads 2: the key table concurrent, each call decided on the gRPC
    thread that read it instead of the node's (gRPC's engine; native on two threads is
    Http2RapidResetNative's)."""
    EXTRA = ("--rls-server", "grpc", "--threads", "2")


class SingleDaemonNative(SingleDaemon):
    """The same cases served by --rls-server native (our own HTTP/2 on libnghttp2): the same
    answers to the same calls as gRPC C++ gives."""
    EXTRA = ("--rls-server", "native")

    def test_health_watch_of_an_unknown_service_is_told_so_and_watches_are_capped(self):
        stream = self.d.health.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=WAIT_S)
        self.assertEqual(next(stream).status, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
        # 16 watches a connection (this one holds the first): the 17th is refused, the others stay.
        held = [self.d.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S) for _ in range(15)]
        for h in held:
            self.assertEqual(next(h).status, health_pb2.HealthCheckResponse.SERVING)
        with self.assertRaises(grpc.RpcError) as refused:
            next(self.d.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S))
        self.assertEqual(refused.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        for h in held + [stream]:
            h.cancel()
        # Cancelled watches free their places (pruned at the next Watch).
        wait_until("a watch served again", lambda: self.watch_serves())

    def watch_serves(self):
        w = self.d.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        try:
            return next(w).status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False
        finally:
            w.cancel()


class ResponseHeaders(unittest.TestCase):
    def test_ietf_draft_fields_and_retry_after(self):
        work = tempfile.mkdtemp(prefix="tollgate-rls-headers-")
        config = os.path.join(work, "rls.yaml")
        with open(config, "w") as f:
            f.write('domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2, '
                    'name: per "min"}\n  - key: anon\n    rate_limit: {unit: second, requests_per_unit: 5}\n')
        d = Daemon(work, "headers", config, extra=["--rls-response-headers"])
        try:
            headers = lambda r: {h.key: h.value for h in r.response_headers_to_add}
            first = headers(d.one("h", [("k", "x")]))
            self.assertEqual(first["RateLimit-Policy"], '"per \\"min\\"";q=2;w=60')  # escaped name
            self.assertEqual(first["RateLimit"], '"per \\"min\\"";r=1;t=30')       # full again in 30 s
            self.assertNotIn("Retry-After", first)
            d.one("h", [("k", "x")])
            over = d.one("h", [("k", "x")])
            self.assertEqual(over.overall_code, OVER)
            self.assertEqual(headers(over)["RateLimit"], '"per \\"min\\"";r=0;t=30')  # until 1 token
            self.assertEqual(headers(over)["Retry-After"], "30")
            self.assertEqual(headers(d.one("h", [("anon", "y")]))["RateLimit-Policy"], '"default";q=5;w=1')
            self.assertEqual(len(d.one("h", [("other", "z")]).response_headers_to_add), 0)  # no limit, no fields
        finally:
            self.assertEqual(d.stop(), 0)
            shutil.rmtree(work, ignore_errors=True)


class ReferenceLimitHeaders(unittest.TestCase):
    def test_the_reference_servers_headers_under_the_names_given(self):
        """--rls-limit-headers (the reference's LIMIT_RESPONSE_HEADERS_ENABLED): plain numbers for the
        descriptor with the fewest tokens left, or the one over; names from --rls-limit-header-names."""
        config = ('domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n'
                  '  - key: wide\n    rate_limit: {unit: second, requests_per_unit: 100}\n')
        with daemon_serving("limitheaders", config,
                            ["--rls-limit-headers", "--rls-limit-header-names", "X-Limit,X-Left,X-Reset"]) as (d, _):
            headers = lambda r: {h.key: h.value for h in r.response_headers_to_add}
            first = headers(d.call("h", [([("wide", "x")], None), ([("k", "x")], None)]))
            self.assertEqual(first, {"X-Limit": "2", "X-Left": "1", "X-Reset": "30"})  # k: fewest left
            d.one("h", [("k", "x")])
            over = d.call("h", [([("k", "x")], None), ([("wide", "x")], None)])
            self.assertEqual(over.overall_code, OVER)
            self.assertEqual(headers(over), {"X-Limit": "2", "X-Left": "0", "X-Reset": "60"})
            self.assertEqual(len(d.one("h", [("other", "z")]).response_headers_to_add), 0)  # no limit, no headers


class SeveralLimitsOnOneDescriptor(unittest.TestCase):
    def test_rate_limits_hold_every_limit_all_or_nothing(self):
        """tollgate's rate_limits: 4 an hour AND 3 a second on one key: the status names the limit
        that denied (the first over), and a denied call charges none of them."""
        config = ("domain: s\ndescriptors:\n  - key: api\n    rate_limits:\n"
                  "      - {unit: hour, requests_per_unit: 4, name: per_hour}\n"
                  "      - {unit: second, requests_per_unit: 3, name: per_second}\n")
        with daemon_serving("several", config) as (d, _):
            first = d.one("s", [("api", "k")], own_hits=3)
            self.assertEqual(first.overall_code, OK)
            self.assertEqual(first.statuses[0].current_limit.name, "per_second")  # 0 of 3 left, 1 of 4
            self.assertEqual(first.statuses[0].limit_remaining, 0)
            over = d.one("s", [("api", "k")], own_hits=2)
            self.assertEqual(over.overall_code, OVER)
            self.assertEqual(over.statuses[0].current_limit.name, "per_hour")  # the first of those over
            # However long the second takes to refill, the hour has 1 left: 2 never pass, 1 does once.
            ok = wait_until("the second's limit refilled",
                            lambda: d.one("s", [("api", "k")], own_hits=1).overall_code == OK)
            self.assertTrue(ok)
            last = d.one("s", [("api", "k")], own_hits=1)
            self.assertEqual(last.overall_code, OVER)
            self.assertEqual(last.statuses[0].current_limit.name, "per_hour")


class StartingWithoutAConfig(unittest.TestCase):
    def test_an_optional_config_that_is_not_there_yet_answers_ok_and_is_read_when_it_appears(self):
        """--rls-config-optional: started before its config is written, the daemon answers every
        call OK (unlimited), says so in /readyz and rls_config_missing, and takes the file when it
        appears."""
        http_port = free_port()
        with daemon_serving("optional", None,  # the config: not written yet
                            ["--rls-config-optional", "--http-listen", "127.0.0.1:%d" % http_port]) as (d, config):
            r = d.one("o", [("k", "v")])
            self.assertEqual(r.overall_code, OK)
            self.assertFalse(r.statuses[0].HasField("current_limit"))
            def readyz():  # the body once ready (a lone node: after --fail-after), else None
                try:
                    return urllib.request.urlopen("http://127.0.0.1:%d/readyz" % http_port, timeout=5).read().decode()
                except urllib.error.HTTPError as e:
                    if e.code == 503:
                        return None
                    raise
            self.assertIn("without an RLS config yet", wait_until("ready", readyz))
            self.assertEqual(d.stats()["rls_config_missing"], 1)
            staged = config + ".new"
            with open(staged, "w") as f:
                f.write("domain: o\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
            os.rename(staged, config)  # whole, as operations.md advises
            wait_until("the config read once it appeared",
                       lambda: d.one("o", [("k", "v")], own_hits=0).statuses[0].HasField("current_limit"))
            self.assertEqual(d.one("o", [("k", "v")]).overall_code, OK)
            self.assertEqual(d.one("o", [("k", "v")]).overall_code, OVER)
            self.assertEqual(d.stats()["rls_config_missing"], 0)
            self.assertEqual(readyz(), "ready\n")

    def test_without_the_switch_a_missing_config_stops_the_start(self):
        work = tempfile.mkdtemp(prefix="tollgate-rls-required-")
        try:
            missing = os.path.join(work, "rls.yaml")
            peers = os.path.join(work, "peers")
            open(peers, "w").close()
            out = subprocess.run([TOLLGATED, "--node-id", "r", "--bind", "127.0.0.1:%d" % free_port(), "--peers-file", peers,
                                  "--listen", "unix:" + os.path.join(work, "r.sock"), "--insecure-gossip",
                                  "--rls-config", missing, "--rls-listen", "127.0.0.1:%d" % free_port()],
                                 capture_output=True, text=True, timeout=30)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(missing, out.stderr)
        finally:
            shutil.rmtree(work, ignore_errors=True)


class ValueMetrics(unittest.TestCase):
    def test_detailed_metric_and_value_to_metric_give_each_value_a_capped_series(self):
        """The reference's per-value stats, in /metrics: tollgate_rls_value_hits_total by descriptor
        value, at most --rls-value-metrics values a limit, the rest counted as dropped."""
        config = ("domain: v\ndescriptors:\n  - key: user\n    value_to_metric: true\n"
                  "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
                  "  - key: tenant\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
        http_port = free_port()
        with daemon_serving("values", config,
                            ["--http-listen", "127.0.0.1:%d" % http_port, "--rls-value-metrics", "2"]) as (d, _):
            for user in ("ann", "ann", "bob", "cid"):
                d.one("v", [("user", user)])
            d.call("v", [([("tenant", "t1")], 3)])
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=5).read().decode()
            series = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                      for line in text.splitlines() if line.startswith("tollgate_rls_value_hits_total{")}
            def hits(rule, name, result):
                key = 'tollgate_rls_value_hits_total{rule="%s",descriptor="%s",result="%s"}' % (rule, name, result)
                return series.get(key)
            self.assertEqual(hits("rls:v.user", "v.user_ann", "within_limit"), 1)
            self.assertEqual(hits("rls:v.user", "v.user_ann", "over_limit"), 1)
            self.assertEqual(hits("rls:v.user", "v.user_bob", "within_limit"), 1)
            self.assertIsNone(hits("rls:v.user", "v.user_cid", "within_limit"))  # the third value of the limit
            self.assertEqual(hits("rls:v.tenant", "v.tenant_t1", "within_limit"), 3)  # hits, not calls
            self.assertIn("tollgate_rls_value_metrics_dropped_total 1", text)


class QuotaModeAndResponseMetadata(unittest.TestCase):
    """The reference server's quota mode (a descriptor's quota_mode, QUOTA_MODE) and its
    RESPONSE_DYNAMIC_METADATA (--rls-response-metadata), decoded as Envoy decodes them: a Struct."""

    CONFIG = """domain: q
descriptors:
  - key: regular
    metadata: {name: service_1, team: {id: 7}}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    metadata: {name: service_2, other: x, team: {lead: ann}}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"""

    @staticmethod
    def metadata(r):
        from google.protobuf import json_format, struct_pb2
        return json_format.MessageToDict(struct_pb2.Struct.FromString(r.dynamic_metadata.SerializeToString()))

    def test_quota_descriptors_deny_only_together_and_metadata_names_what_passed(self):
        with daemon_serving("quota", self.CONFIG, ["--rls-response-metadata"]) as (d, _):
            first = d.call("q", [([("regular", "a")], None), ([("quota", "a")], 1)], hits=2)
            self.assertEqual(first.overall_code, OK)
            self.assertEqual(self.metadata(first), {
                "domain": "q",
                "descriptors": [{"entries": ["regular=a"]}, {"entries": ["quota=a"], "hitsAddend": 1}],
                "hitsAddend": 2,
                # merged: service_1's name wins (the first), the nested mappings are joined
                "metadata": {"name": "service_1", "team": {"id": 7, "lead": "ann"}, "other": "x"}})
            # quota=a is spent: over in its own status, but quota2 has room, so the request is OK;
            # only the descriptors that passed give their metadata.
            r = d.call("q", [([("quota", "a")], None), ([("quota2", "a")], None)])
            self.assertEqual(r.overall_code, OK)
            self.assertEqual([s.code for s in r.statuses], [OVER, OK])
            self.assertNotIn("metadata", self.metadata(r))  # quota2 has none; quota was over
            # Now both quota descriptors are spent: the request is over.
            r = d.call("q", [([("quota", "a")], None), ([("quota2", "a")], None)])
            self.assertEqual(r.overall_code, OVER)
            self.assertEqual([s.code for s in r.statuses], [OVER, OVER])
            # A regular descriptor with room does not save a request whose only quota is over,
            # and was not charged: 5 - 2 (the first call) left.
            r = d.call("q", [([("regular", "a")], None), ([("quota", "a")], None)])
            self.assertEqual(r.overall_code, OVER)
            self.assertEqual(r.statuses[0].code, OK)
            self.assertEqual(r.statuses[0].limit_remaining, 3)

    def test_the_global_quota_mode_makes_every_limit_a_quota(self):
        with daemon_serving("quotaall", self.CONFIG, ["--rls-quota-mode"]) as (d, _):
            for _ in range(5):
                self.assertEqual(d.one("q", [("regular", "b")]).overall_code, OK)
            r = d.call("q", [([("regular", "b")], None), ([("regular", "c")], None)])
            self.assertEqual(r.overall_code, OK)  # one of two over
            self.assertEqual([s.code for s in r.statuses], [OVER, OK])
            self.assertEqual(d.one("q", [("regular", "b")]).overall_code, OVER)  # alone: over
            self.assertEqual(len(d.one("q", [("regular", "d")]).dynamic_metadata.fields), 0)  # metadata off


class Reload(unittest.TestCase):
    EXTRA = ("--rls-server", "grpc")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-rls-reload-")
        self.config_dir = os.path.join(self.dir, "config")
        os.mkdir(self.config_dir)
        self.write("basic.yaml", BASIC)
        self.d = Daemon(self.dir, "reload", self.config_dir, extra=self.EXTRA)

    def tearDown(self):
        self.assertEqual(self.d.stop(), 0)
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, text):
        # Write beside, then rename: the daemon never reads a half-written file.
        tmp = os.path.join(self.dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.config_dir, name))

    def test_file_changes_apply_broken_ones_do_not_and_balances_survive(self):
        self.assertFalse(self.d.one("reload", [("block", "foo")]).statuses[0].HasField("current_limit"))
        # key3 (10 an hour): no token comes back while the reload is awaited on a loaded machine.
        self.assertEqual(self.d.one("basic", [("key3", "kept")], hits=5).statuses[0].limit_remaining, 5)
        reloads = self.d.stats()["rls_config_reloads"]
        self.write("reload.yaml", """
domain: reload
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
""")
        wait_until("the new file to load", lambda: self.d.stats()["rls_config_reloads"] > reloads)
        self.assertEqual(self.d.one("reload", [("key1", "foo")]).statuses[0].limit_remaining, 49)
        self.assertEqual(self.d.one("reload", [("block", "foo")]).overall_code, OVER)
        # basic.yaml did not change: its bucket kept its balance across the reload.
        self.assertEqual(self.d.one("basic", [("key3", "kept")]).statuses[0].limit_remaining, 4)

        failures = self.d.stats()["rls_config_reload_failures"]
        self.write("reload.yaml", "domain: reload\ndescriptors:\n  - key: key1\n    rate_limit: {unit: fortnight}\n")
        wait_until("the broken file to be refused", lambda: self.d.stats()["rls_config_reload_failures"] > failures)
        self.assertIn("reload.yaml:4:", self.d.read_log())
        self.assertEqual(self.d.one("reload", [("block", "foo")]).overall_code, OVER, "the last good config stays")

        reloads = self.d.stats()["rls_config_reloads"]
        os.remove(os.path.join(self.config_dir, "reload.yaml"))
        wait_until("the removal to load", lambda: self.d.stats()["rls_config_reloads"] > reloads)
        self.assertFalse(self.d.one("reload", [("block", "foo")]).statuses[0].HasField("current_limit"))

    def test_sighup_reloads_and_sigterm_drains_health(self):
        reloads = self.d.stats()["rls_config_reloads"]
        self.d.proc.send_signal(signal.SIGHUP)
        wait_until("SIGHUP's reload", lambda: self.d.stats()["rls_config_reloads"] > reloads)
        # Watch streams the status: SERVING now, NOT_SERVING once SIGTERM starts the drain.
        stream = self.d.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        seen = [next(stream).status]
        self.d.proc.send_signal(signal.SIGTERM)
        try:
            for update in stream:
                seen.append(update.status)
                if update.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
        except grpc.RpcError:
            pass  # the server shut down after the update
        self.assertEqual(seen[0], health_pb2.HealthCheckResponse.SERVING)
        self.assertIn(health_pb2.HealthCheckResponse.NOT_SERVING, seen)
        self.assertEqual(self.d.proc.wait(timeout=WAIT_S), 0)


class ReloadNative(Reload):
    """The same reloads and the same drain (health Watch told NOT_SERVING) on --rls-server native."""
    EXTRA = ("--rls-server", "native")


def two_daemons(work, config_text):
    """Daemons a and b of one cluster (a shared cluster key, each the other's peer) serving the
    RLS config `config_text`, in `work`."""
    key_file = os.path.join(work, "cluster.key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, (os.urandom(32).hex() + "\n").encode())
    os.close(fd)
    config = os.path.join(work, "rls.yaml")
    with open(config, "w") as f:
        f.write(config_text)
    ports = {"a": free_port(), "b": free_port()}
    peers = [("a", ports["a"]), ("b", ports["b"])]
    a = Daemon(work, "a", config, peers, ports["a"], key_file)
    try:
        return a, Daemon(work, "b", config, peers, ports["b"], key_file)
    except BaseException:
        a.stop()
        raise


class Cluster(unittest.TestCase):
    def test_calls_spread_over_two_daemons_share_one_limit(self):
        work = tempfile.mkdtemp(prefix="tollgate-rls-cluster-")
        try:
            a, b = two_daemons(
                work, "domain: shared\ndescriptors:\n  - key: api\n    rate_limit: {unit: minute, requests_per_unit: 20}\n")
            try:
                entries = [("api", "tenant-1")]
                for i in range(10):
                    self.assertEqual(a.one("shared", entries).statuses[0].limit_remaining, 19 - i)
                # b learns a's ten through gossip; a query (hits 0) charges nothing.
                wait_until("b to see a's consumption",
                           lambda: b.one("shared", entries, own_hits=0).statuses[0].limit_remaining == 10)
                allowed_on_b = 0
                while b.one("shared", entries).overall_code == OK:
                    allowed_on_b += 1
                    self.assertLess(allowed_on_b, 20, "b never ran out")
                self.assertEqual(allowed_on_b, 10, "the cluster admitted 20 in all")
                wait_until("a to see b's consumption",
                           lambda: a.one("shared", entries, own_hits=0).statuses[0].limit_remaining == 0)
                self.assertEqual(a.one("shared", entries).overall_code, OVER)

                def request(daemon, entries, hits, negative=False, override=None):
                    r = rls_pb2.RateLimitRequest(domain=b"shared")
                    d = r.descriptors.add()
                    for k, v in entries:
                        e = d.entries.add()
                        e.key, e.value = k.encode(), v.encode()
                    d.hits_addend.value = hits
                    d.is_negative_hits = negative
                    if override:
                        d.limit.requests_per_unit, d.limit.unit = override
                    return daemon.stub.ShouldRateLimit(r, timeout=5)

                # A refund at b (is_negative_hits) is given back at a too. (Refill alone would take
                # 45 s to give a 15 tokens.)
                self.assertEqual(request(b, entries, 15, negative=True).overall_code, OK)
                wait_until("a to see b's refund",
                           lambda: a.one("shared", entries, own_hits=0).statuses[0].limit_remaining >= 15)
                # Consumption under a limit override at a is counted at b, which finds the limit
                # from the bucket key alone.
                hourly = (3, rls_pb2.HOUR)
                other = [("api", "tenant-2")]
                self.assertEqual(request(a, other, 2, override=hourly).statuses[0].limit_remaining, 1)
                wait_until("b to see a's consumption under the override",
                           lambda: request(b, other, 0, override=hourly).statuses[0].limit_remaining == 1)
                self.assertEqual(request(b, other, 2, override=hourly).overall_code, OVER)
            finally:
                self.assertEqual(a.stop(), 0)
                self.assertEqual(b.stop(), 0)
        finally:
            shutil.rmtree(work, ignore_errors=True)


class ConcurrencyBehindEnvoy(unittest.TestCase):
    """tollgate's `concurrency:` on an RLS descriptor (issue 40), as Envoy drives it: a stream's
    first call (hits_addend) takes a slot, the call Envoy sends when the stream ends
    (apply_on_stream_done, is_negative_hits) frees it, and Envoy sends that one for denied
    streams too. Two daemons share the limit."""

    def test_streams_at_two_daemons_share_one_concurrency_limit_and_a_denied_streams_end_frees_nothing(self):
        work = tempfile.mkdtemp(prefix="tollgate-rls-leases-")
        try:
            a, b = two_daemons(work, "domain: llm\ndescriptors:\n  - key: api_key\n    concurrency: 2\n    lease_ttl: 5m\n")
            try:
                def call(daemon, negative=False, hits=1):
                    r = rls_pb2.RateLimitRequest(domain=b"llm")
                    d = r.descriptors.add()
                    e = d.entries.add()
                    e.key, e.value = b"api_key", b"k-1"
                    d.hits_addend.value = hits
                    d.is_negative_hits = negative
                    return daemon.stub.ShouldRateLimit(r, timeout=5)

                def start(daemon):
                    """A stream's first call; a denied stream ends at once, and Envoy says so."""
                    r = call(daemon)
                    if r.overall_code != OK:
                        self.assertEqual(call(daemon, negative=True).overall_code, OK)
                    return r

                r = start(a)
                self.assertEqual(r.overall_code, OK)
                self.assertEqual(r.statuses[0].limit_remaining, 1)
                wait_until("b to hear of a's lease", lambda: b.stats().get("lease_rows", 0) >= 1)
                self.assertEqual(start(b).overall_code, OK)
                wait_until("a to hear of b's lease", lambda: a.stats().get("lease_rows", 0) >= 1)
                self.assertEqual(start(a).overall_code, OVER, "three streams in flight on a limit of 2")
                r = start(b)
                self.assertEqual(r.overall_code, OVER, "three streams in flight on a limit of 2")
                from google.protobuf import struct_pb2
                denied = struct_pb2.Struct.FromString(r.dynamic_metadata.SerializeToString())
                self.assertEqual(
                    denied.fields["over_limit"].list_value.values[0].struct_value.fields["concurrency"].number_value, 2)
                # The denied streams' ends freed nothing: still full at both.
                self.assertEqual(start(a).overall_code, OVER)
                self.assertEqual(start(b).overall_code, OVER)
                self.assertGreaterEqual(a.stats()["leases_by_key_owed_settled"], 2)
                self.assertEqual(a.stats()["leases_by_key_unmatched"], 0)
                # a's stream ends: its slot is free for a stream at b.
                self.assertEqual(call(a, negative=True).overall_code, OK)
                self.assertEqual(a.stats()["leases_by_key_released"], 1)
                wait_until("b to hear of a's release", lambda: start(b).overall_code == OK)

                def slots_left(daemon):  # hits_addend 0: takes nothing, says what is left
                    return call(daemon, hits=0).statuses[0].limit_remaining

                self.assertEqual(slots_left(b), 0)
                wait_until("a to hear that b holds both slots", lambda: slots_left(a) == 0)
                self.assertEqual(start(a).overall_code, OVER)
            finally:
                self.assertEqual(a.stop(), 0)
                self.assertEqual(b.stop(), 0)
        finally:
            shutil.rmtree(work, ignore_errors=True)


class RawHttp2:
    """One plaintext HTTP/2 connection to the rate limit service, frames written and read with
    hyperframe and headers coded with hpack (Debian's python3-h2 brings both): what an attacker
    sends, without a client library that would keep to the server's settings."""
    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, port):
        import hpack
        import socket
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.encoder = hpack.Encoder()
        self.buffer = b""
        self.sock.sendall(self.PREFACE + self.frame_bytes("settings"))
        self.next_id = 1

    def frame_bytes(self, kind, stream_id=0, **kw):
        import hyperframe.frame as hf
        f = {"settings": hf.SettingsFrame, "headers": hf.HeadersFrame, "rst": hf.RstStreamFrame,
             "ack": hf.SettingsFrame, "data": hf.DataFrame}[kind](stream_id, **kw)
        if kind == "ack":
            f.flags.add("ACK")
        return f.serialize()

    def call_headers(self, stream_id, end_stream=False, extra=()):
        import hyperframe.frame as hf
        block = self.encoder.encode([(":method", "POST"), (":scheme", "http"),
                                     (":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
                                     (":authority", "tollgated"), ("content-type", "application/grpc"),
                                     ("te", "trailers")] + list(extra))
        f = hf.HeadersFrame(stream_id, data=block)
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return f.serialize()

    def frames(self, until, timeout=WAIT_S):
        """Reads frames, acking the server's settings, until until(frame) is true or the
        connection ends; returns the frames read."""
        import socket
        import hyperframe.frame as hf
        import time
        got, end = [], time.monotonic() + timeout
        while time.monotonic() < end:
            while len(self.buffer) >= 9:
                f, length = hf.Frame.parse_frame_header(memoryview(self.buffer[:9]))
                if len(self.buffer) < 9 + length:
                    break
                f.parse_body(memoryview(self.buffer[9:9 + length]))
                self.buffer = self.buffer[9 + length:]
                got.append(f)
                if isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags:
                    self.sock.sendall(self.frame_bytes("ack"))
                if until(f):
                    return got
            try:
                self.sock.settimeout(max(0.01, end - time.monotonic()))
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionError:
                data = b""
            if not data:
                got.append(None)  # the server closed the connection
                return got
            self.buffer += data
        return got

    def close(self):
        self.sock.close()


class OwnDaemon(unittest.TestCase):
    """A class of tests with a daemon of its own serving BASIC, named NAME, started with EXTRA."""
    NAME = "own"
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-rls-" + cls.NAME + "-")
        config = os.path.join(cls.dir, "rls.yaml")
        with open(config, "w") as f:
            f.write(BASIC)
        cls.d = Daemon(cls.dir, cls.NAME, config, extra=cls.EXTRA)

    @classmethod
    def tearDownClass(cls):
        stop_and_remove(cls.d, cls.dir)


class Http2Attacks(OwnDaemon):
    """Issue 34, finding 5: the HTTP/2 limits set on gRPC (RlsServer::set_limits) hold against a
    client that does not keep to them, and the daemon keeps serving a normal client meanwhile."""
    NAME = "h2"
    EXTRA = ("--rls-server", "grpc")

    def settled(self, conn):
        """The server's settings read and acked, and ours acked by it."""
        import hyperframe.frame as hf
        conn.frames(lambda f: isinstance(f, hf.SettingsFrame) and "ACK" in f.flags)

    def open_150_streams(self):
        """150 calls opened on one connection and never finished (no body, no END_STREAM), our
        SETTINGS (100 streams) acknowledged: the frames read until the server closed it."""
        conn = RawHttp2(self.d.rls_port)
        self.settled(conn)
        conn.sock.sendall(b"".join(conn.call_headers(2 * i + 1) for i in range(150)))
        got = conn.frames(lambda f: False)
        conn.close()
        self.assertIsNone(got[-1], "the connection was not closed: %s" % got[-3:])
        return got

    def test_a_client_opening_more_than_100_streams_on_one_connection_loses_it(self):
        import hyperframe.frame as hf
        # gRPC 1.51 takes the 101st as a protocol error of the whole connection: every stream on
        # it fails (UNAVAILABLE), and the connection is closed.
        got = self.open_150_streams()
        answered = {f.stream_id for f in got if isinstance(f, hf.HeadersFrame)}
        self.assertTrue(answered, "no stream was answered")
        self.assertLessEqual(max(answered), 199, "a stream beyond the first 100 was served")
        self.assertEqual(self.d.one("basic", [("key1", "after-streams")]).overall_code, OK)

    def test_request_headers_over_16_kib_are_refused_and_others_still_served(self):
        conn = RawHttp2(self.d.rls_port)
        self.settled(conn)
        conn.sock.sendall(conn.call_headers(1, extra=[("x-big", "a" * 20000)]))
        got = conn.frames(lambda f: getattr(f, "stream_id", 0) == 1 and type(f).__name__ in
                          ("RstStreamFrame", "HeadersFrame") or type(f).__name__ == "GoAwayFrame")
        conn.close()
        last = got[-1]
        self.assertIsNotNone(last, "the server closed the connection without a word")
        if type(last).__name__ == "HeadersFrame":  # answered with trailers: a gRPC error, not OK
            status = dict((k.decode() if isinstance(k, bytes) else k, v) for k, v in
                          __import__("hpack").Decoder().decode(last.data))
            self.assertNotEqual(status.get("grpc-status", "0"), "0", status)
        self.assertEqual(self.d.one("basic", [("key1", "after-headers")]).overall_code, OK)

class Http2AttacksNative(Http2Attacks):
    """The same attacks on --rls-server native (src/rls/h2_session.h)."""
    NAME = "h2native"
    EXTRA = ("--rls-server", "native")

    def test_a_client_opening_more_than_100_streams_on_one_connection_loses_it(self):
        import hyperframe.frame as hf
        # nghttp2 ends the connection at the 101st (GOAWAY PROTOCOL_ERROR), none of them was work.
        got = self.open_150_streams()
        goaway = [f for f in got if isinstance(f, hf.GoAwayFrame)]
        self.assertEqual([(f.error_code, f.last_stream_id) for f in goaway], [(1, 199)])
        self.assertEqual(self.d.one("basic", [("key1", "after-streams")]).overall_code, OK)


class Http2RapidReset(OwnDaemon):
    """HTTP/2 rapid reset (CVE-2023-44487) against a daemon of its own: what gRPC 1.51 is left to
    work through after it must not touch another test's daemon."""
    NAME = "reset"
    EXTRA = ("--rls-server", "grpc")

    def test_after_a_rapid_reset_attack_the_daemon_serves_again_and_gives_its_memory_back(self):
        # CVE-2023-44487, not fixed in Debian 12's gRPC 1.51: streams opened and cancelled at once,
        # as fast as one connection goes. gRPC holds each reset stream for a while (some 20 KiB)
        # and its threads are busy with them: while the attack lasts the daemon's memory grows and
        # other clients' calls may miss their deadlines (docs/operations.md section 6 says so and
        # why the defaults keep such a client out). What is asserted is what the daemon does about
        # it: it does not exit, it serves calls again once the attack stops, and the memory is
        # given back (MemoryRelease) instead of staying at the peak until a restart.
        import threading
        if sanitized(TOLLGATED, ("tsan",)):
            # Under ThreadSanitizer, gRPC 1.51's Server::Shutdown waits for ever after such an
            # attack (UnrefAndWaitLocked, gRPC's own threads idle: seen with gdb), so the daemon
            # cannot leave; the plain build leaves in 0.3 s after 20,000 reset streams, and the
            # ASan stage runs this test.
            self.skipTest("gRPC 1.51 cannot shut down after rapid reset under ThreadSanitizer")
        before = rss_kib(self.d.proc.pid)
        stop = threading.Event()
        sent, peak = [0], [before]

        # A sanitizer's build is some ten times slower: a tenth of the attack keeps its work (and
        # the seconds it takes to drain it, before the daemon can leave) within the test's time.
        streams = 2000 if sanitized(TOLLGATED) else 20000

        def attack():
            while not stop.is_set() and sent[0] < streams:
                conn = RawHttp2(self.d.rls_port)
                stream = 1
                try:
                    while not stop.is_set() and sent[0] < streams:
                        burst = b"".join(conn.call_headers(stream + 2 * i) + conn.frame_bytes("rst", stream + 2 * i,
                                                                                               error_code=8)
                                         for i in range(100))
                        conn.sock.sendall(burst)
                        stream += 200
                        sent[0] += 100
                        peak[0] = max(peak[0], rss_kib(self.d.proc.pid))
                except OSError:
                    pass  # the server cut it off: open another
                finally:
                    conn.close()
        attacker = threading.Thread(target=attack)
        attacker.start()
        try:
            wait_until("the attack under way", lambda: sent[0] >= streams)
        finally:
            stop.set()
            attacker.join(WAIT_S)
        self.assertIsNone(self.d.proc.poll(), "the daemon exited")

        def served():
            try:
                return all(self.d.one("basic", [("key1", "after-reset-%d" % i)]).overall_code == OK for i in range(5))
            except grpc.RpcError:
                return False  # gRPC still busy with the reset streams
        wait_until("calls served again after the attack", served, timeout=3 * WAIT_S)
        if sanitized(TOLLGATED):
            return  # the sanitizer's allocator owns the heap: malloc_trim has nothing to give back
        # Back within MemoryRelease's step (64 MiB) of where it was, whatever the peak.
        wait_until("memory given back (peak %d KiB, before %d KiB, %d streams reset)" % (peak[0], before, sent[0]),
                   lambda: rss_kib(self.d.proc.pid) < before + 80 * 1024)
        # Whether MemoryRelease had to trim depends on the run: when gRPC's streams leave glibc's
        # free pages below the heap's top it does (254 to 460 MiB peaks seen), when they are
        # freed from the top glibc gives them back by itself within the second (a 102 MiB peak
        # and no trim, in CI). What the daemon promises is the memory back, asserted above; the
        # trim itself is MemoryRelease.GivesBackWhatABurstFreedOnceResidentMemoryGrewAStep's.
        self.assertIn("memory_releases", self.d.stats())


class Http2RapidResetNative(OwnDaemon):
    """HTTP/2 rapid reset against --rls-server native: the attacker's connections are cut by the
    reset budget (src/rls/reset_budget.h: half of 500 streams closed prematurely), the daemon's
    memory stays flat, and a normal client is served all along. How fast it is served during the
    attack is measured by scripts/rls-rapid-reset (docs/results.md), not asserted here."""
    NAME = "resetnative"
    # Two threads: the attacker's connections alternate between them, the client's on the first.
    EXTRA = ("--rls-server", "native", "--threads", "2")

    def test_the_attacker_is_cut_off_and_a_normal_client_is_served_throughout(self):
        import threading
        before = rss_kib(self.d.proc.pid)
        stop = threading.Event()
        sent, peak, connections = [0], [before], [0]
        streams = 2000 if sanitized(TOLLGATED) else 20000

        def attack():
            while not stop.is_set() and sent[0] < streams:
                conn = RawHttp2(self.d.rls_port)
                connections[0] += 1
                stream = 1
                try:
                    while not stop.is_set() and sent[0] < streams:
                        conn.sock.sendall(b"".join(conn.call_headers(stream + 2 * i) +
                                                   conn.frame_bytes("rst", stream + 2 * i, error_code=8)
                                                   for i in range(100)))
                        stream += 200
                        sent[0] += 100
                        peak[0] = max(peak[0], rss_kib(self.d.proc.pid))
                except OSError:
                    pass  # cut off: open another
                finally:
                    conn.close()
        attacker = threading.Thread(target=attack)
        attacker.start()
        calls, failed = 0, []
        try:
            while sent[0] < streams and attacker.is_alive():
                try:
                    self.assertEqual(self.d.one("basic", [("key1", "during-%d" % calls)]).overall_code, OK)
                except grpc.RpcError as e:
                    failed.append(e.code())
                calls += 1
        finally:
            stop.set()
            attacker.join(WAIT_S)
        self.assertIsNone(self.d.proc.poll(), "the daemon exited")
        self.assertEqual(failed, [], "calls failed during the attack (%d made)" % calls)
        self.assertGreater(calls, 0)
        stats = self.d.stats()
        # Every 500 streams reset at once on a connection end it (250 premature of a window of
        # 500): each of the attacker's connections but the last was cut.
        self.assertGreater(connections[0], 1)
        self.assertGreaterEqual(stats["rls_connections_cut"], connections[0] - 1, stats)
        self.assertLess(peak[0], before + 64 * 1024, "memory grew under the attack")
        self.assertEqual(self.d.one("basic", [("key1", "after-reset")]).overall_code, OK)


class MutualTls(unittest.TestCase):
    """--rls-tls-cert/-key/-client-ca (issue 34, finding 5): Envoy's rate limit service over mutual
    TLS, a renewed certificate served without a restart, and the refusals at start."""
    EXTRA = ("--rls-server", "grpc")

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tollgate-rls-tls-")
        d = cls.dir
        make_ca(d, "ca")
        make_ca(d, "ca2")
        make_cert(d, "server", "ca", "IP:127.0.0.1")
        make_cert(d, "server2", "ca2", "IP:127.0.0.1")
        make_cert(d, "envoy", "ca")
        make_cert(d, "stranger", "ca2")
        cls.config = os.path.join(d, "rls.yaml")
        with open(cls.config, "w") as f:
            f.write(BASIC)
        # The daemon reads these paths; the test renews them in place.
        shutil.copy(os.path.join(d, "server.pem"), os.path.join(d, "live.pem"))
        shutil.copy(os.path.join(d, "server.key"), os.path.join(d, "live.key"))
        cls.port = free_port()
        cls.args = [TOLLGATED, "--node-id", "tls", "--bind", "127.0.0.1:%d" % free_port(),
                    "--listen", "unix:" + os.path.join(d, "tls.sock"), "--membership", "heartbeat",
                    "--insecure-gossip", "--rls-config", cls.config] + list(cls.EXTRA)
        cls.process = Process(
            cls.args + ["--seeds", "127.0.0.1:1", "--rls-listen", "127.0.0.1:%d" % cls.port,
                        "--rls-tls-cert", os.path.join(d, "live.pem"), "--rls-tls-key", os.path.join(d, "live.key"),
                        "--rls-tls-client-ca", os.path.join(d, "ca.pem")],
            os.path.join(d, "tls.log"))
        cls.proc = cls.process.proc

    @classmethod
    def tearDownClass(cls):
        code = cls.process.stop()
        log = cls.process.output()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, "tollgated exited with %s; its log:\n%s" % (code, log)

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def call(self, trust="ca", client="envoy", timeout=3):
        """A ShouldRateLimit over TLS trusting CA `trust`, with client certificate `client` (None:
        none); the response, or the grpc.RpcError."""
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.read(trust + ".pem"),
            private_key=self.read(client + ".key") if client else None,
            certificate_chain=self.read(client + ".pem") if client else None)
        with grpc.secure_channel("127.0.0.1:%d" % self.port, creds) as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            request = rls_pb2.RateLimitRequest(domain=b"basic")
            e = request.descriptors.add().entries.add()
            e.key, e.value = b"key1", b"tls"
            try:
                return stub.ShouldRateLimit(request, timeout=timeout)
            except grpc.RpcError as error:
                return error

    def test_1_only_a_client_with_a_certificate_of_the_ca_is_served(self):
        wait_until("the TLS service", lambda: not isinstance(self.call(), grpc.RpcError))
        self.assertEqual(self.call().overall_code, OK)
        self.assertIsInstance(self.call(client=None), grpc.RpcError)  # no client certificate
        self.assertIsInstance(self.call(client="stranger"), grpc.RpcError)  # signed by another CA
        with grpc.insecure_channel("127.0.0.1:%d" % self.port) as plain:  # no TLS at all
            stub = rls_pb2_grpc.RateLimitServiceStub(plain)
            with self.assertRaises(grpc.RpcError):
                stub.ShouldRateLimit(rls_pb2.RateLimitRequest(domain=b"basic"), timeout=3)

    def test_2_a_renewed_certificate_is_served_without_a_restart(self):
        wait_until("the TLS service", lambda: not isinstance(self.call(), grpc.RpcError))
        self.assertIsInstance(self.call(trust="ca2"), grpc.RpcError)  # the server's cert is ca's
        for ext in ("pem", "key"):  # renewed as a deploy tool does: a new file renamed over the old
            shutil.copy(os.path.join(self.dir, "server2." + ext), os.path.join(self.dir, "live.new"))
            os.replace(os.path.join(self.dir, "live.new"), os.path.join(self.dir, "live." + ext))
        wait_until("the renewed certificate", lambda: not isinstance(self.call(trust="ca2"), grpc.RpcError))
        self.assertEqual(self.call(trust="ca2").overall_code, OK)
        self.assertEqual(self.proc.poll(), None)

    def start_fails(self, extra):
        args = [TOLLGATED, "--node-id", "other", "--bind", "127.0.0.1:%d" % free_port(),
                "--listen", "unix:" + os.path.join(self.dir, "other.sock"), "--membership", "heartbeat",
                "--seeds", "127.0.0.1:1", "--insecure-gossip", "--rls-config", self.config] + list(self.EXTRA)
        r = subprocess.run(args + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        return r.stdout.decode()

    def test_3_refusals_at_start_name_the_problem(self):
        d = self.dir
        out = self.start_fails(["--rls-listen", "0.0.0.0:%d" % free_port()])
        self.assertIn("is not loopback", out)
        self.assertIn("--rls-tls-client-ca", out)
        out = self.start_fails(["--rls-listen", "127.0.0.1:%d" % free_port(), "--rls-tls-cert",
                                os.path.join(d, "server.pem"), "--rls-tls-key", os.path.join(d, "envoy.key")])
        self.assertIn("envoy.key: this private key is not the key of", out)
        out = self.start_fails(["--rls-listen", "127.0.0.1:%d" % free_port(), "--rls-tls-cert",
                                os.path.join(d, "rls.yaml"), "--rls-tls-key", os.path.join(d, "server.key")])
        self.assertIn("rls.yaml: no PEM certificate", out)


class MutualTlsNative(MutualTls):
    """The same on --rls-server native (src/rls/tls_context.h: OpenSSL through Boost.Asio, ALPN h2)."""
    EXTRA = ("--rls-server", "native")


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(GEN, ignore_errors=True)

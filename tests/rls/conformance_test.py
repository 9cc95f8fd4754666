#!/usr/bin/python3
"""Conformance: envoyproxy/ratelimit's own published behaviour, replayed against a real tollgated.

The reference server's config tests (test/config/config_test.go, descriptor_key_config_test.go)
and integration tests (test/integration/integration_test.go and its runtime config files) are
re-expressed as data: the YAML fixtures under conformance/ and the cases in conformance/cases.json,
each naming the reference test function it comes from. Every case is asserted through gRPC:

  - a config the reference loads is served here, and a config it refuses makes tollgated exit
    with status 2 at start-up, naming the file;
  - a GetLimit case (descriptor entries -> the limit that applies, or none) is asserted as the
    `current_limit` of the ShouldRateLimit answer (requests_per_unit, unit, name,
    unit_multiplier), `limit_remaining` 4294967295 for `unlimited`, the answer when over for
    `shadow_mode`, and no `current_limit` for no limit;
  - share_threshold cases also check which values share one bucket.

Where tollgate differs from the reference on purpose (docs/operations.md section 10.3: token
bucket, all or nothing, limit_remaining and duration_until_reset), tollgate's documented answer
is asserted instead of the reference's number, and the test says so ("DOCUMENTED DIFFERENCE").
A difference the documentation does not describe is an expected failure whose reason starts
"UNDOCUMENTED DIFFERENCE".

One daemon serves every loadable fixture (conformance/serve/, one domain per file), a second one
the split domain of TestDomainMerge (--rls-merge-domains); each refused config gets a daemon that
lives only until it exits. Stubs are generated from our proto at test time, as in rls_test.py.

Usage: conformance_test.py TOLLGATED TOLLGATE_CLI PROTO_DIR [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
CONF = os.path.join(HERE, "conformance")
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from tollgate_testing import Process, free_port, wait_until  # noqa: E402

TOLLGATED, TOLLGATE_CLI, PROTO_DIR = sys.argv[1:4]
del sys.argv[1:4]

GEN = tempfile.mkdtemp(prefix="tollgate-conformance-stubs-")
subprocess.run(
    ["protoc", "-I", PROTO_DIR, "-I", "/usr/include", "--python_out=" + GEN, "--grpc_python_out=" + GEN,
     "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
     os.path.join(PROTO_DIR, "envoy/service/ratelimit/v3/rls.proto")],
    check=True)
sys.path.insert(0, GEN)

import grpc  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
Unit = rls_pb2.RateLimitResponse.RateLimit.Unit
UINT32_MAX = 4294967295
WAIT_S = 20  # the longest any poll waits before failing

with open(os.path.join(CONF, "cases.json")) as f:
    CASES = json.load(f)


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


# Which engine serves the calls (--rls-server): ctest runs the cases against both.
ENGINE = os.environ.get("TOLLGATE_RLS_SERVER", "grpc")


def daemon_args(name, workdir, config, rls_port, extra=()):
    """A lone tollgated (static membership of itself) serving the RLS on rls_port with ENGINE."""
    gossip_port = free_port()
    peers = os.path.join(workdir, name + ".peers")
    with open(peers, "w") as f:
        f.write("%s 127.0.0.1:%d\n" % (name, gossip_port))
    return [TOLLGATED, "--node-id", name, "--bind", "127.0.0.1:%d" % gossip_port,
            "--listen", "unix:" + os.path.join(workdir, name + ".sock"), "--membership", "static",
            "--peers-file", peers, "--insecure-gossip", "--mode", "mesh",
            "--rls-config", config, "--rls-listen", "127.0.0.1:%d" % rls_port, "--rls-server", ENGINE] + list(extra)


class Daemon:
    """A tollgated serving the RLS from a copy of some fixture directories."""

    def __init__(self, name, sources, extra=()):
        self.name = name
        self.workdir = tempfile.mkdtemp(prefix="tollgate-conformance-%s-" % name)
        self.config = os.path.join(self.workdir, "config")
        os.mkdir(self.config)
        for source in sources:
            for entry in sorted(os.listdir(source)):
                shutil.copy(os.path.join(source, entry), self.config)
        self.api = os.path.join(self.workdir, name + ".sock")
        self.port = free_port()
        self.process = Process(daemon_args(name, self.workdir, self.config, self.port, extra),
                               os.path.join(self.workdir, name + ".log"))
        wait_until("%s to serve or exit" % name,
                   lambda: not self.process.alive() or port_open(self.port), WAIT_S)
        if not self.process.alive():
            raise AssertionError("%s exited with %s; its log:\n%s"
                                 % (name, self.process.proc.returncode, self.process.output()))
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)
        grpc.channel_ready_future(self.channel).result(timeout=WAIT_S)

    def ask(self, domain, descriptors, hits=0):
        """descriptors: [(entries, own_hits or None, override (rpu, unit name) or None)]."""
        request = rls_pb2.RateLimitRequest(domain=domain.encode(), hits_addend=hits)
        for entries, own_hits, override in descriptors:
            d = request.descriptors.add()
            for k, v in entries:
                e = d.entries.add()
                e.key, e.value = k.encode(), v.encode()
            if own_hits is not None:
                d.hits_addend.SetInParent()
                d.hits_addend.value = own_hits
            if override is not None:
                d.limit.requests_per_unit = override[0]
                d.limit.unit = rls_pb2.RateLimitUnit.Value(override[1])
        return self.stub.ShouldRateLimit(request, timeout=10)

    def one(self, domain, entries, hits=0, own_hits=None, override=None):
        return self.ask(domain, [(entries, own_hits, override)], hits)

    def stats(self):
        out = subprocess.run([TOLLGATE_CLI, "--endpoint", "unix:" + self.api, "stats", "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["stats"]

    def stop(self):
        self.channel.close()
        code = self.process.stop()
        log = self.process.output()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if code != 0:
            raise AssertionError("%s exited with %s; its log:\n%s" % (self.name, code, log))


SERVERS = {}


def setUpModule():
    try:
        # Every loadable fixture in one daemon; --rls-response-metadata lets TestMetadata read
        # each limit's `metadata` back (it only adds dynamic_metadata to the answers).
        SERVERS["main"] = Daemon("main", [os.path.join(CONF, "serve")], ["--rls-response-metadata"])
        # TestDomainMerge: one domain in two files, the reference's MERGE_DOMAIN_CONFIG.
        SERVERS["merge"] = Daemon("merge", [os.path.join(CONF, "merge")], ["--rls-merge-domains"])
    except BaseException:
        tearDownModule()  # unittest skips it when setUpModule fails
        raise


def tearDownModule():
    errors = []
    for daemon in SERVERS.values():
        try:
            daemon.stop()
        except AssertionError as e:
            errors.append(str(e))
    SERVERS.clear()
    if errors:
        raise AssertionError("\n".join(errors))


def describe(case):
    return "%s: domain %r, entries %r%s" % (case["ref"], case["domain"], case["entries"],
                                           ", override %r" % case["override"] if "override" in case else "")


def method_name(prefix, i, ref):
    return "test_%s_%03d_%s" % (prefix, i, re.sub(r"\W+", "_", ref).strip("_"))


# --- Which limit applies to which descriptor (the reference's GetLimit) -------------------------

class Lookups(unittest.TestCase):
    """One method per case of cases.json "lookups": the descriptor is asked with a hits_addend of
    0 (checked, not charged), so the cases do not disturb one another."""

    def check_lookup(self, case):
        daemon = SERVERS[case.get("server", "main")]
        override = (case["override"]["rpu"], case["override"]["unit"]) if "override" in case else None
        r = daemon.one(case["domain"], case["entries"], own_hits=0, override=override)
        self.assertEqual(len(r.statuses), 1)
        s = r.statuses[0]
        expect = case["expect"]
        if expect is None:  # GetLimit returns nil: OK, no limit, nothing remaining
            self.assertEqual(s.code, OK)
            self.assertFalse(s.HasField("current_limit"), "a limit where the reference has none: %s" % s)
            self.assertEqual(s.limit_remaining, 0)
            return
        if expect == "unlimited":  # always OK, never counted
            self.assertEqual(s.code, OK)
            self.assertFalse(s.HasField("current_limit"))
            self.assertEqual(s.limit_remaining, UINT32_MAX)
            return
        self.assertTrue(s.HasField("current_limit"), "no limit where the reference has one")
        limit = s.current_limit
        self.assertEqual(limit.requests_per_unit, expect["rpu"])
        self.assertEqual(Unit.Name(limit.unit), expect["unit"])
        self.assertEqual(limit.name, expect.get("name", ""))
        # unit_multiplier is sent only when it is not 1 (operations.md 10.3); absent reads as 1.
        multiplier = limit.unit_multiplier.value if limit.HasField("unit_multiplier") else 1
        self.assertEqual(multiplier, expect.get("multiplier", 1))
        if "metadata" in expect:
            metadata = json_format.MessageToDict(
                struct_pb2.Struct.FromString(r.dynamic_metadata.SerializeToString()))
            self.assertEqual(metadata.get("metadata"), expect["metadata"])
        if "shadow" in expect:
            # More hits than the limit holds: a shadow-mode limit still answers OK (nothing left),
            # any other denies. The reference's RateLimit.ShadowMode, seen from the outside.
            over = daemon.one(case["domain"], case["entries"], own_hits=expect["rpu"] + 1)
            if expect["shadow"]:
                self.assertEqual((over.overall_code, over.statuses[0].code, over.statuses[0].limit_remaining),
                                 (OK, OK, 0), "shadow_mode: should never deny")
            else:
                self.assertEqual(over.overall_code, OVER, "not in shadow mode: should deny")


def _add_lookup(i, case):
    def test(self):
        self.check_lookup(case)
    test.__doc__ = describe(case)
    setattr(Lookups, method_name("lookup", i, case["ref"]), test)


for _i, _case in enumerate(CASES["lookups"]):
    _add_lookup(_i, _case)


# --- Which values share a bucket (share_threshold) ----------------------------------------------

class Buckets(unittest.TestCase):
    """cases.json "buckets": a share_threshold wildcard gives every matching value one bucket (the
    reference's ShareThresholdKeyPattern, the pattern in place of the value in its cache key);
    without it each value has its own."""

    def check_buckets(self, case):
        daemon = SERVERS["main"]
        rpu, hits = case["rpu"], case["hits"]
        r = daemon.one(case["domain"], case["charge"], own_hits=hits)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, rpu)
        # Refill between two calls is a fraction of a token unless the machine stalls for
        # seconds: a tenth of the limit of slack, far below the hits charged.
        slack = rpu // 10
        for entries in case.get("same", []):
            s = daemon.one(case["domain"], entries, own_hits=0).statuses[0]
            self.assertEqual(s.current_limit.requests_per_unit, rpu)
            self.assertLessEqual(s.limit_remaining, rpu - hits + slack,
                                 "%r should share the bucket of %r" % (entries, case["charge"]))
        for entries in case.get("own", []):
            s = daemon.one(case["domain"], entries, own_hits=0).statuses[0]
            own_rpu = case.get("own_rpu", rpu)
            self.assertEqual(s.current_limit.requests_per_unit, own_rpu)
            self.assertEqual(s.limit_remaining, own_rpu,
                             "%r should have a bucket of its own, apart from %r" % (entries, case["charge"]))


def _add_buckets(i, case):
    def test(self):
        self.check_buckets(case)
    test.__doc__ = "%s: domain %r, charge %r" % (case["ref"], case["domain"], case["charge"])
    setattr(Buckets, method_name("buckets", i, case["ref"]), test)


for _i, _case in enumerate(CASES["buckets"]):
    _add_buckets(_i, _case)


# --- Configs the reference refuses ---------------------------------------------------------------

class Refused(unittest.TestCase):
    """cases.json "refused": tollgated started on the config exits with status 2 and names the
    file (the reference panics with "FILE: reason"). A daemon that serves instead is stopped and
    the case fails."""

    def check_refused(self, case):
        work = tempfile.mkdtemp(prefix="tollgate-conformance-refused-")
        try:
            config = os.path.join(work, "config")
            os.mkdir(config)
            for spec in case["files"]:
                source, _, target = spec.partition("=>")
                shutil.copy(os.path.join(CONF, source), os.path.join(config, target or os.path.basename(source)))
            port = free_port()
            process = Process(daemon_args("refused", work, config, port, case.get("flags", [])),
                              os.path.join(work, "refused.log"))
            wait_until("tollgated to exit or serve", lambda: not process.alive() or port_open(port), WAIT_S)
            if process.alive():
                process.stop()
                self.fail("tollgated loaded a config the reference refuses (%s); its log:\n%s"
                          % (case["ref"], process.output()))
            code = process.exit_status()
            out = process.output()
            self.assertEqual(code, 2, out)
            self.assertIn(os.path.join(config, case["names"]) + ":", out, "the error names the file")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _add_refused(i, case):
    def test(self):
        self.check_refused(case)
    test.__doc__ = "%s: %s refused" % (case["ref"], case["names"])
    if "undocumented" in case:
        # The case's "undocumented" text starts "UNDOCUMENTED DIFFERENCE:": tollgate answers
        # otherwise than the reference and operations.md does not say so.
        test.__doc__ += " -- " + case["undocumented"]
        test = unittest.expectedFailure(test)
    setattr(Refused, method_name("refused", i, case["ref"]), test)


for _i, _case in enumerate(CASES["refused"]):
    _add_refused(_i, _case)


# --- The reference's integration tests (test/integration/integration_test.go) ------------------

class Integration(unittest.TestCase):
    """The integration suite's calls, on its runtime config files (serve/integ_*.yaml, domains
    basic, another, share-threshold-test, ...) and reload.yaml (conformance/reload/)."""

    @property
    def d(self):
        return SERVERS["main"]

    @staticmethod
    def fresh():
        return uuid.uuid4().hex  # the reference's random value: a bucket no other call touched

    def test_unknown_domain_is_ok_without_a_limit(self):
        # TestBasicConfig / testBasicBaseConfig: domain foo, hello=world.
        r = self.d.one("foo", [("hello", "world")], hits=1)
        self.assertEqual(r.overall_code, OK)
        self.assertEqual([(s.code, s.HasField("current_limit"), s.limit_remaining) for s in r.statuses],
                         [(OK, False, 0)])

    def test_first_hit_reports_the_limit_and_what_remains(self):
        # TestBasicConfig: basic key1=foo, hits 1 -> OK, 50 per SECOND, 49 remaining.
        r = self.d.one("basic", [("key1", "foo")], hits=1)
        self.assertEqual(r.overall_code, OK)
        s = r.statuses[0]
        self.assertEqual((s.code, s.current_limit.requests_per_unit, s.current_limit.unit, s.limit_remaining),
                         (OK, 50, Unit.Value("SECOND"), 49))

    def test_25_hits_on_20_per_minute_one_after_another(self):
        # TestBasicConfig (the sequential form): another key2=<random> 25 times.
        value = self.fresh()
        for i in range(25):
            r = self.d.one("another", [("key2", value)], hits=1)
            want = (OK, 19 - i) if i < 20 else (OVER, 0)
            s = r.statuses[0]
            self.assertEqual((r.overall_code, s.code, s.limit_remaining), (want[0], want[0], want[1]), "call %d" % i)
            self.assertEqual((s.current_limit.requests_per_unit, s.current_limit.unit), (20, Unit.Value("MINUTE")))

    def test_25_hits_on_20_per_minute_at_once(self):
        # testBasicBaseConfig (the concurrent form): 25 calls at once, 20 OK and 5 OVER_LIMIT.
        value = self.fresh()
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(lambda _: self.d.one("another", [("key2", value)], hits=1).overall_code, range(25)))
        self.assertEqual((codes.count(OK), codes.count(OVER)), (20, 5))

    def test_two_keys_one_after_another(self):
        # TestBasicConfig: key2 (20/min) and key3 (10/h) in one call, 15 times. key3 denies from
        # call 11 on, as in the reference. DOCUMENTED DIFFERENCE (operations.md 10.3, all or
        # nothing): the reference keeps charging key2 (its remaining goes 19, 18, ... 5); tollgate
        # charges nothing once key3 denies, so key2 stays at 10.
        value = self.fresh()
        for i in range(15):
            r = self.d.ask("another", [([("key2", value)], None, None), ([("key3", value)], None, None)], hits=1)
            want = OK if i < 10 else OVER
            key2, key3 = r.statuses
            self.assertEqual((r.overall_code, key3.code, key3.limit_remaining), (want, want, max(0, 9 - i)), "call %d" % i)
            self.assertEqual((key3.current_limit.requests_per_unit, key3.current_limit.unit), (10, Unit.Value("HOUR")))
            self.assertEqual(key2.code, OK)
            self.assertEqual(key2.limit_remaining, max(10, 19 - i), "call %d (reference: %d)" % (i, 19 - i))

    def test_two_keys_at_once(self):
        # testBasicBaseConfig: 15 calls of key2+key3 at once: 10 OK, 5 OVER_LIMIT.
        value = self.fresh()
        pair = [([("key2", value)], None, None), ([("key3", value)], None, None)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(lambda _: self.d.ask("another", pair, hits=1).overall_code, range(15)))
        self.assertEqual((codes.count(OK), codes.count(OVER)), (10, 5))

    def test_five_descriptors_at_once(self):
        # testBasicConfigWithProcess: 200 calls at once of key2..key6 (key5 and key6 unlimited
        # by absence): key3's 10 per hour decides, 10 OK and 190 OVER_LIMIT.
        value = self.fresh()
        five = [([(key, value)], None, None) for key in ("key2", "key3", "key4", "key5", "key6")]
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            codes = list(pool.map(lambda _: self.d.ask("another", five, hits=1).overall_code, range(200)))
        self.assertEqual((codes.count(OK), codes.count(OVER)), (10, 190))

    def test_duration_until_reset(self):
        # testBasicBaseConfig hits key4 (20/day) twice, 2 s apart, and expects the second
        # duration_until_reset to be shorter (the window's end comes closer). DOCUMENTED
        # DIFFERENCE (operations.md 10.3): tollgate's is the time until the bucket is full again,
        # so it grows with each hit: one token of 20/day is 4320 s, two are 8640 s.
        value = self.fresh()
        first = self.d.one("another", [("key4", value)], hits=1).statuses[0].duration_until_reset.seconds
        second = self.d.one("another", [("key4", value)], hits=1).statuses[0].duration_until_reset.seconds
        self.assertAlmostEqual(first, 4320, delta=2)
        self.assertAlmostEqual(second, 8640, delta=2)

    def test_share_threshold(self):
        # TestShareThreshold (integration): 10 calls on files/a.pdf spend the shared 10/h, so
        # files/b.csv is over; every files_no_share/... value has its own 10.
        for _ in range(10):
            self.d.one("share-threshold-test", [("files", "files/a.pdf")], hits=1)
        r = self.d.one("share-threshold-test", [("files", "files/b.csv")], hits=1)
        s = r.statuses[0]
        self.assertEqual((r.overall_code, s.code, s.current_limit.requests_per_unit, s.current_limit.unit,
                          s.limit_remaining), (OVER, OVER, 10, Unit.Value("HOUR"), 0))
        for _ in range(10):
            r = self.d.one("share-threshold-test", [("files_no_share", "files_no_share/" + self.fresh())], hits=1)
            s = r.statuses[0]
            self.assertEqual((r.overall_code, s.code, s.current_limit.requests_per_unit, s.limit_remaining),
                             (OK, OK, 10, 9))

    def test_reload_adds_and_removes_a_domain(self):
        # testConfigReload: before reload.yaml is in the directory, reload/block=foo is OK without
        # a limit; once it is (written beside and renamed in, as operations.md 10.2 advises),
        # reload/key1=foo is 50 per SECOND with 49 left; removing it reloads again.
        r = self.d.one("reload", [("block", "foo")], hits=1)
        self.assertEqual((r.overall_code, r.statuses[0].code, r.statuses[0].HasField("current_limit")), (OK, OK, False))
        before = self.d.stats()["rls_config_reloads"]
        staging = os.path.join(self.d.workdir, "reload.yaml.new")
        shutil.copy(os.path.join(CONF, "reload", "reload.yaml"), staging)
        os.replace(staging, os.path.join(self.d.config, "reload.yaml"))
        try:
            wait_until("reload.yaml to load", lambda: self.d.stats()["rls_config_reloads"] > before, WAIT_S)
            r = self.d.one("reload", [("key1", "foo")], hits=1)
            s = r.statuses[0]
            self.assertEqual((r.overall_code, s.code, s.current_limit.requests_per_unit, s.current_limit.unit,
                              s.limit_remaining), (OK, OK, 50, Unit.Value("SECOND"), 49))
        finally:
            before = self.d.stats()["rls_config_reloads"]
            os.remove(os.path.join(self.d.config, "reload.yaml"))
            wait_until("the removal to load", lambda: self.d.stats()["rls_config_reloads"] > before, WAIT_S)
        self.assertFalse(self.d.one("reload", [("key1", "foo")], hits=1).statuses[0].HasField("current_limit"))


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(GEN, ignore_errors=True)

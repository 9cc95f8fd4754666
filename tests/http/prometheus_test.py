#!/usr/bin/python3
"""A real Prometheus (Debian's) scrapes a three-node tollgate cluster's /metrics, and its query
API sums a counter over the three nodes.

Usage (ctest runs it): prometheus_test.py TOLLGATED [unittest args]
Nothing here sleeps for synchronisation: every wait polls observable state with a deadline.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import Process, free_port, http_get as get, wait_until as poll_until  # noqa: E402
import urllib.parse

TOLLGATED = sys.argv[1]
del sys.argv[1]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
WAIT_S = 30

RULES = """rules:
  - {match: "k*", rate: 1000/s, burst: 1000}
"""






class PrometheusScrapesACluster(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tollgate-prometheus-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def spawn(self, name, args):
        self.procs.append(Process(args, os.path.join(self.dir, name + ".log")))

    def logs(self):
        out = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out += "\n--- %s:\n%s" % (name, f.read()[-3000:])
        return out

    def wait_until(self, what, predicate):
        return poll_until(what, predicate, WAIT_S, self.logs)

    def query(self, port, promql):
        try:
            status, body = get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        except OSError:
            return None
        if status != 200:
            return None
        result = json.loads(body)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def test_a_counter_summed_over_three_nodes(self):
        names = ["n0", "n1", "n2"]
        gossip = {n: free_port() for n in names}
        http_ports = {n: free_port() for n in names}
        rules = os.path.join(self.dir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        peers = os.path.join(self.dir, "peers")
        with open(peers, "w") as f:
            for n in names:
                f.write("%s 127.0.0.1:%d\n" % (n, gossip[n]))
        for n in names:
            self.spawn(n, [TOLLGATED, "--node-id", n, "--bind", "127.0.0.1:%d" % gossip[n],
                           "--listen", "unix:" + os.path.join(self.dir, n + ".sock"), "--rules", rules,
                           "--membership", "static", "--peers-file", peers, "--insecure-gossip",
                           "--http-listen", "127.0.0.1:%d" % http_ports[n]])
        for n in names:
            self.wait_until(n + " ready", lambda n=n: self.ready(http_ports[n]))
        # 3, 4 and 5 checks through the three nodes' HTTP.
        for i, n in enumerate(names):
            for _ in range(3 + i):
                self.assertEqual(get(http_ports[n], "/v1/check?key=k%d" % i)[0], 200)

        prom_port = free_port()
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n"
                    "  - job_name: tollgate\n"
                    "    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'127.0.0.1:%d'" % http_ports[n] for n in names))
        self.spawn("prometheus", [PROMETHEUS, "--config.file=" + config,
                                  "--storage.tsdb.path=" + os.path.join(self.dir, "tsdb"),
                                  "--web.listen-address=127.0.0.1:%d" % prom_port])
        self.wait_until("Prometheus to scrape all three nodes",
                        lambda: self.query(prom_port, 'count(up{job="tollgate"} == 1)') == 3)
        self.wait_until("the HTTP checks summed over the cluster to be 12",
                        lambda: self.query(prom_port, "sum(tollgate_http_checks_total)") == 12)
        allowed = self.query(prom_port, 'sum(tollgate_checks_total{decision="allowed"})')
        self.assertEqual(allowed, 12)
        # Each of the three nodes sees three alive members, itself included.
        self.wait_until("9 alive members summed", lambda: self.query(prom_port, 'sum(tollgate_members{state="alive"})') == 9)

    @staticmethod
    def ready(port):
        try:
            return get(port, "/readyz")[0] == 200
        except OSError:
            return False


if __name__ == "__main__":
    unittest.main()

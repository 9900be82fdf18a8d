#!/usr/bin/python3
"""deploy/prometheus/ against a real Prometheus server (Debian's `prometheus`).

One fuseserve process serves the default repository at test sizes; a
Prometheus process scrapes it with a copy of deploy/prometheus/prometheus.yml
whose one static target (`fuseserve:8002`) points at the server's metrics port
and whose intervals are 1 s, and loads deploy/prometheus/alerts.yml copied
next to it. After a short bench run the tests read the request counter and a
p99 latency from the histogram through Prometheus's HTTP API, and check that
every alert rule loaded and evaluates without error.
"""

import os
import shutil
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deploy_testing as dt  # noqa: E402

try:
  import yaml
  HAVE_YAML = True
except ImportError:
  HAVE_YAML = False

# The scrape target deploy/prometheus/prometheus.yml names (the compose
# service); the copy points it at the test's server.
COMPOSE_TARGET = "fuseserve:8002"
INTERVAL = "1s"
P99_QUERY = ("histogram_quantile(0.99, sum by (le) "
             "(rate(nv_inference_request_duration_histogram_us_bucket{model=\"%s\"}[5m])))"
             % dt.MODEL)


def _skip_reason():
  missing = dt.missing_tools("prometheus", "promtool")
  if not HAVE_YAML:
    missing.append("PyYAML (python3-yaml) for %s" % sys.executable)
  return "needs %s (scripts/setup.sh installs them)" % ", ".join(missing) if missing else None


def _rule_names(rule_file):
  with open(rule_file) as f:
    document = yaml.safe_load(f)
  return sorted(rule.get("alert") or rule.get("record")
                for group in document["groups"] for rule in group["rules"])


def write_test_config(work_dir, metrics_port):
  """Copies prometheus.yml (target and intervals rewritten) and the rule
  files it names into work_dir; returns (config path, [rule file paths])."""
  with open(dt.deploy_file("prometheus", "prometheus.yml")) as f:
    text = f.read()
  count = text.count(COMPOSE_TARGET)
  if count != 1:
    raise AssertionError("deploy/prometheus/prometheus.yml names %s %d times, expected once" %
                         (COMPOSE_TARGET, count))
  config = yaml.safe_load(text.replace(COMPOSE_TARGET, "127.0.0.1:%d" % metrics_port))
  config.setdefault("global", {})
  config["global"]["scrape_interval"] = INTERVAL
  config["global"]["evaluation_interval"] = INTERVAL
  config["global"].pop("scrape_timeout", None)
  for job in config.get("scrape_configs", []):
    job.pop("scrape_interval", None)
    job.pop("scrape_timeout", None)
  rule_files = []
  for name in config.get("rule_files", []):
    if os.path.isabs(name) or "*" in name:
      raise AssertionError("rule_files entry %r is not a plain path relative to the config" %
                           name)
    copy = os.path.join(work_dir, name)
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    shutil.copyfile(dt.deploy_file("prometheus", name), copy)
    rule_files.append(copy)
  config_path = os.path.join(work_dir, "prometheus.yml")
  with open(config_path, "w") as f:
    yaml.safe_dump(config, f, sort_keys=False)
  return config_path, rule_files


class PrometheusScrapesFuseserveTest(unittest.TestCase):

  server = None
  prometheus = None

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    reason = _skip_reason()
    if reason:
      raise unittest.SkipTest(reason)
    cls.work_dir = dt.new_work_dir("fuseserve_deploy_prometheus_")
    try:
      repository = os.path.join(cls.work_dir, "models")
      dt.make_repository(repository)
      cls.server = dt.Fuseserve("fuseserve", repository, cls.work_dir).start()
      cls.config_path, cls.rule_files = write_test_config(cls.work_dir, cls.server.metrics_port)
      cls.prometheus = cls._start_prometheus()
      # rate() needs a sample from before the requests: wait for the first
      # scrape, then send requests for the counters and histograms to record.
      dt.wait_until(cls._target_up, 60, "up{job=\"fuseserve\"} == 1 for the server",
                    interval_s=0.2, check=cls.prometheus.check_running)
      report = dt.run_bench("bench", cls.server.grpc_address, cls.work_dir,
                            concurrency=4, duration_s=2)
      cls.succeeded = report["summary"]["succeeded"]
      if cls.succeeded <= 0 or report["summary"]["failed"] != 0:
        raise AssertionError("bench did not run cleanly: %s" % report["summary"])
    except BaseException:
      cls._teardown()
      raise

  @classmethod
  def _start_prometheus(cls):
    # The port is chosen before Prometheus binds it; another process may win
    # the race, so a start that fails is retried on a new port.
    for attempt in range(3):
      prometheus = dt.Prometheus(cls.config_path, cls.work_dir, dt.free_port())
      try:
        dt.wait_until(lambda: dt.http_get(prometheus.url("/-/ready"), 5)[0] == 200,
                      dt.startup_timeout_s(), "Prometheus to become ready",
                      interval_s=0.2, check=prometheus.check_running)
        return prometheus
      except AssertionError:
        prometheus.kill()
        if attempt == 2 or "address already in use" not in dt.tail(prometheus.stderr_path):
          raise
    raise AssertionError("unreachable")

  @classmethod
  def tearDownClass(cls):
    cls._teardown()
    super().tearDownClass()

  @classmethod
  def _teardown(cls):
    try:
      if cls.prometheus is not None:
        cls.prometheus.stop()
      if cls.server is not None:
        cls.server.stop()
    finally:
      cls.prometheus = None
      cls.server = None
      shutil.rmtree(cls.work_dir, ignore_errors=True)

  def diagnostics(self):
    return "%s\n%s" % (self.prometheus.output(), self.server.output())

  def test_promtool_accepts_alert_rules(self):
    done = subprocess.run(["promtool", "check", "rules",
                           dt.deploy_file("prometheus", "alerts.yml")],
                          capture_output=True, text=True, timeout=120)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

  def test_promtool_accepts_rewritten_config(self):
    done = subprocess.run(["promtool", "check", "config", self.config_path],
                          capture_output=True, text=True, timeout=120)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

  @classmethod
  def _target_up(cls):
    for labels, value in cls.prometheus.query('up{job="fuseserve"}'):
      if labels.get("instance") == "127.0.0.1:%d" % cls.server.metrics_port:
        return value == "1"
    return False

  def test_scrape_target_is_up(self):
    self.assertTrue(self._target_up(), self.diagnostics())

  def test_request_success_counter_reaches_prometheus(self):
    expression = 'nv_inference_request_success{job="fuseserve",model="%s"}' % dt.MODEL

    def counted():
      values = [float(value) for _, value in self.prometheus.query(expression)]
      return values if values and values[0] >= self.succeeded else None
    # The bench has finished: the scraped counter must reach what it sent.
    values = dt.wait_until(counted, 60, "%s >= %d" % (expression, self.succeeded),
                           interval_s=0.5, check=self.prometheus.check_running)
    self.assertEqual(len(values), 1, values)
    self.assertEqual(values[0], self.server.counter("nv_inference_request_success",
                                                    model=dt.MODEL))

  def test_p99_latency_from_histogram_is_finite(self):
    def finite_p99():
      result = self.prometheus.query(P99_QUERY)
      return result if len(result) == 1 and dt.is_finite_number(result[0][1]) else None
    result = dt.wait_until(finite_p99, 60, "a finite value of " + P99_QUERY,
                           interval_s=0.5, check=self.prometheus.check_running)
    p99_us = float(result[0][1])
    self.assertGreater(p99_us, 0)
    # An upper bound that a request of this tiny model never approaches.
    self.assertLess(p99_us, 60e6)

  def test_alert_rules_load_and_evaluate_without_error(self):
    expected = sorted(name for path in self.rule_files for name in _rule_names(path))
    self.assertTrue(expected, "the rule files %s hold no rules" % self.rule_files)

    def evaluated_rules():
      groups = self.prometheus.api("/api/v1/rules")["groups"]
      rules = [rule for group in groups for rule in group["rules"]]
      # A rule's health is "unknown" until its group first evaluates.
      if len(rules) == len(expected) and all(r["health"] != "unknown" for r in rules):
        return groups
      return None
    groups = dt.wait_until(evaluated_rules, 60, "every rule of %s evaluated" % self.rule_files,
                           interval_s=0.5, check=self.prometheus.check_running)
    self.assertTrue(groups)
    rules = [rule for group in groups for rule in group["rules"]]
    self.assertEqual(sorted(rule["name"] for rule in rules), expected)
    for rule in rules:
      self.assertEqual(rule["health"], "ok",
                       "rule %s: %s\n%s" % (rule["name"], rule.get("lastError"),
                                            self.diagnostics()))


if __name__ == "__main__":
  dt.run_tests()

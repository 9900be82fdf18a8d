#!/usr/bin/python3
"""The L7 gRPC load balancer of deploy/nginx/ with a real nginx in front of
two fuseserve replicas.

nginx runs unprivileged on a free loopback port (`nginx -p PREFIX -c CONF
-e stderr -g 'daemon off;'`) with deploy/nginx/fuseserve-grpc.conf.template
rendered the way the nginx image's envsubst step renders it for deploy/k8s/.
Every test starts both replicas and nginx afresh and drives `fuseserve-cli
bench` (closed loop, CONCURRENCY requests outstanding) through nginx; each
replica's share is read from its own /metrics (nv_inference_request_success),
which counts only inferences, so the shares add up to exactly what bench saw
succeed.

NginxBalancingTest: requests spread over both replicas; SIGKILL of a replica
fails only the requests in flight on it; a replica taken out of nginx's
upstreams (Kubernetes' endpoint removal and preStop) and then sent SIGTERM
loses nothing. NginxSigtermDrainTest: SIGTERM reaches a replica that nginx
still sends requests to, and not one request may fail.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deploy_testing as dt  # noqa: E402

CONCURRENCY = 8
# Bench runs (seconds of measurement after a 0.5 s warm-up, which bench's
# request totals include).
SHORT_RUN_S = 2
LONG_RUN_S = 4
# Requests each replica must have served before a replica is stopped: proof
# that the run is under way and balanced before the signal.
SERVED_BEFORE_SIGNAL = 20
# Replicas drain for at most this long after SIGTERM (--exit-timeout-secs).
EXIT_TIMEOUT_S = 20
BENCH_TIMEOUT_S = 120
TEMPLATE = "fuseserve-grpc.conf.template"


def render_config(template_path, listen_port, backends):
  with open(template_path) as f:
    template = f.read()
  for name in ("FUSESERVE_LISTEN_PORT", "FUSESERVE_UPSTREAM_SERVERS"):
    if "${%s}" % name not in template:
      raise AssertionError("%s has no ${%s} placeholder" % (template_path, name))
  servers = "\n".join("server %s;" % backend for backend in backends)
  return dt.envsubst(template, {"FUSESERVE_LISTEN_PORT": str(listen_port),
                                "FUSESERVE_UPSTREAM_SERVERS": servers})


class Nginx(dt.Process):
  """nginx in the foreground with `prefix` as its prefix directory."""

  def __init__(self, prefix, config_path, port):
    self.port = port
    self.config_path = config_path
    super().__init__("nginx", [shutil.which("nginx"), "-p", prefix + "/", "-c", config_path,
                               "-e", "stderr", "-g", "daemon off;"], prefix,
                     # SIGTERM: a master stopped with the test stops its workers.
                     process_group=True, death_signal=signal.SIGTERM)

  @property
  def address(self):
    return "127.0.0.1:%d" % self.port

  def accepts_connections(self):
    try:
      with socket.create_connection(("127.0.0.1", self.port), timeout=2):
        return True
    except OSError:
      return False

  def failed_requests(self):
    """The access log's lines (deploy/nginx's grpc_lb format on stdout) of
    requests that did not end with grpc_status=0."""
    try:
      with open(self.stdout_path, errors="replace") as f:
        return [line.rstrip("\n") for line in f if "grpc_status=0 " not in line]
    except OSError:
      return []

  def output(self):
    failed = self.failed_requests()
    return "--- %s: %s\n--- stderr ---\n%s\n--- access log, requests without grpc_status=0 " \
           "(%d) ---\n%s" % (self.name, " ".join(self.command), dt.tail(self.stderr_path),
                              len(failed), "\n".join(failed[:40]))

  def reload(self, backends):
    """Re-renders the template for `backends` and reloads (SIGHUP): new
    workers use the new upstreams, old ones finish their requests and exit."""
    with open(self.config_path, "w") as f:
      f.write(render_config(dt.deploy_file("nginx", TEMPLATE), self.port, backends))
    self.signal(signal.SIGHUP)


def start_nginx(work_dir, backends):
  """nginx balancing over `backends`, once gRPC health answers through it."""
  prefix = os.path.join(work_dir, "nginx")
  os.makedirs(os.path.join(prefix, "logs"))
  os.chmod(prefix, 0o755)
  template = dt.deploy_file("nginx", TEMPLATE)
  config_path = os.path.join(prefix, "nginx.conf")
  # The port is chosen before nginx binds it; another process may win the
  # race, so a start that fails to bind is retried on a new port.
  for attempt in range(3):
    port = dt.free_port()
    with open(config_path, "w") as f:
      f.write(render_config(template, port, backends))
    nginx = Nginx(prefix, config_path, port)
    try:
      dt.wait_until(nginx.accepts_connections, dt.startup_timeout_s(),
                    "nginx to listen on %s" % nginx.address, check=nginx.check_running)
      break
    except AssertionError:
      nginx.kill()
      if attempt == 2 or "Address already in use" not in dt.tail(nginx.stderr_path):
        raise

  def healthy_through_nginx():
    done = subprocess.run([dt.cli_binary(), "health", "--url", nginx.address, "--model",
                           dt.MODEL], capture_output=True, text=True, timeout=60)
    return done.returncode == 0
  dt.wait_until(healthy_through_nginx, dt.startup_timeout_s(),
                "fuseserve-cli health through nginx", interval_s=0.2, check=nginx.check_running)
  return nginx


class TwoReplicasBehindNginx(unittest.TestCase):
  """Each test gets replicas `replica_a` and `replica_b` (self.replicas) and
  nginx (self.nginx) in front of them, all fresh."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    missing = dt.missing_tools("nginx")
    if missing:
      raise unittest.SkipTest("needs %s (scripts/setup.sh installs it)" % ", ".join(missing))
    cls.class_dir = dt.new_work_dir("fuseserve_deploy_nginx_")
    try:
      cls.repository = os.path.join(cls.class_dir, "models")
      dt.make_repository(cls.repository)
    except BaseException:
      shutil.rmtree(cls.class_dir, ignore_errors=True)
      raise

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.class_dir, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    self.work_dir = dt.new_work_dir("fuseserve_deploy_nginx_test_")
    self.processes = []
    # Cleanups run last-in first-out (also when setUp fails): processes are
    # killed before their directory is removed.
    self.addCleanup(shutil.rmtree, self.work_dir, True)
    self.addCleanup(self._kill_processes)
    self.replicas = [self._start_replica(name) for name in ("replica_a", "replica_b")]
    self.nginx = start_nginx(self.work_dir, [r.grpc_address for r in self.replicas])
    self.processes.append(self.nginx)

  def _kill_processes(self):
    for process in reversed(self.processes):
      process.kill()

  def _start_replica(self, name):
    replica = dt.Fuseserve(name, self.repository, self.work_dir,
                           ["--exit-timeout-secs=%d" % EXIT_TIMEOUT_S])
    self.processes.append(replica)
    return replica.start()

  def bench(self, name, duration_s):
    bench = dt.Bench(name, self.nginx.address, self.work_dir, CONCURRENCY, duration_s)
    self.processes.append(bench)
    return bench

  def diagnostics(self):
    return "\n".join(process.output() for process in self.processes)

  def served(self, replica):
    return replica.counter("nv_inference_request_success", model=dt.MODEL)

  def wait_until_both_serve(self, bench):
    """Waits until each replica has served SERVED_BEFORE_SIGNAL requests of
    the running `bench`."""
    def both_serve():
      return all(self.served(r) >= SERVED_BEFORE_SIGNAL for r in self.replicas)
    dt.wait_until(both_serve, 60, "both replicas to serve %d requests" % SERVED_BEFORE_SIGNAL,
                  interval_s=0.02, check=bench.check_running)

  def assert_clean_run(self, report):
    summary = report["summary"]
    self.assertEqual(summary["lost"], 0, summary)
    self.assertEqual(summary["failed"], 0, "%s\n%s" % (summary, self.diagnostics()))
    self.assertGreater(summary["succeeded"], 0, summary)

  def sigterm_and_wait(self, replica):
    replica.signal(signal.SIGTERM)
    self.assertEqual(replica.wait(EXIT_TIMEOUT_S + 30), 0,
                     "%s did not exit 0 after SIGTERM\n%s" % (replica.name, replica.output()))


class NginxBalancingTest(TwoReplicasBehindNginx):

  def test_bench_spreads_requests_over_both_replicas(self):
    report = self.bench("bench", SHORT_RUN_S).report(BENCH_TIMEOUT_S)
    self.assert_clean_run(report)
    served = [self.served(r) for r in self.replicas]
    self.assertEqual(sum(served), report["summary"]["succeeded"],
                     "replicas served %s; bench saw %s" % (served, report["summary"]))
    for replica, count in zip(self.replicas, served):
      share = count / sum(served)
      self.assertTrue(0.3 <= share <= 0.7,
                      "%s served %.0f of %.0f requests (%.0f%%), outside 30-70%%" %
                      (replica.name, count, sum(served), 100 * share))

  def test_sigkill_of_a_replica_fails_only_its_in_flight_requests(self):
    killed, survivor = self.replicas
    bench = self.bench("bench_kill", LONG_RUN_S)
    self.wait_until_both_serve(bench)
    bench.check_running()
    killed.signal(signal.SIGKILL)
    self.assertEqual(killed.wait(30), -signal.SIGKILL)
    report = bench.report(BENCH_TIMEOUT_S)
    summary = report["summary"]
    # The run finishes with every request answered; only the requests in
    # flight on the killed replica may fail (at most one per closed-loop
    # client), and they fail UNAVAILABLE.
    self.assertEqual(summary["lost"], 0, summary)
    self.assertLessEqual(set(summary["errors"]), {"UNAVAILABLE"}, summary)
    self.assertLessEqual(summary["failed"], CONCURRENCY, "%s\n%s" % (summary, self.diagnostics()))
    self.assertGreater(self.served(survivor), SERVED_BEFORE_SIGNAL)

    # Afterwards everything reaches the survivor, without a failure.
    before = self.served(survivor)
    report = self.bench("bench_after_kill", SHORT_RUN_S).report(BENCH_TIMEOUT_S)
    self.assert_clean_run(report)
    self.assertEqual(self.served(survivor) - before, report["summary"]["succeeded"])

  def test_replica_taken_out_of_nginx_then_sigterm_loses_no_request(self):
    # Kubernetes' order: a terminating pod leaves the endpoints that the load
    # balancer follows while its preStop hook runs, and gets SIGTERM after.
    leaving, survivor = self.replicas
    bench = self.bench("bench_scale_in", LONG_RUN_S)
    self.wait_until_both_serve(bench)
    self.nginx.reload([survivor.grpc_address])
    # nginx's old workers have finished once `leaving` sees no new request
    # for a while and `survivor` does meanwhile.
    history = []

    def only_survivor_serves():
      history.append((self.served(leaving), self.served(survivor)))
      window = history[-10:]
      return (len(window) == 10 and window[0][0] == window[-1][0] and
              window[0][1] < window[-1][1])
    dt.wait_until(only_survivor_serves, 60, "nginx to stop sending to %s" % leaving.name,
                  interval_s=0.1, check=bench.check_running)
    self.sigterm_and_wait(leaving)
    self.assertTrue(bench.running(), "bench ended before %s exited" % leaving.name)
    self.assert_clean_run(bench.report(BENCH_TIMEOUT_S))


class NginxSigtermDrainTest(TwoReplicasBehindNginx):
  """SIGTERM reaches a replica while nginx still sends it requests: nginx
  retries a request elsewhere only when its connect fails (gRPC request
  bodies are streamed, so nothing already sent is ever retried), so the
  draining replica must refuse new work at connect time and answer every
  request it accepted (server/grpc/tcp_listener.h: the drain)."""

  def test_sigterm_of_a_replica_drains_without_failed_requests(self):
    draining, survivor = self.replicas
    bench = self.bench("bench_drain", LONG_RUN_S)
    self.wait_until_both_serve(bench)
    bench.check_running()
    self.sigterm_and_wait(draining)
    self.assertTrue(bench.running(), "bench ended before %s exited" % draining.name)
    report = bench.report(BENCH_TIMEOUT_S)
    # The draining replica finishes what it accepted and nginx sends the
    # rest to the survivor: not one request fails.
    self.assert_clean_run(report)
    self.assertGreater(self.served(survivor), SERVED_BEFORE_SIGNAL)


if __name__ == "__main__":
  dt.run_tests()

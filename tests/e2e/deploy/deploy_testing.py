"""Helpers for the deployment tests: real fuseserve, Prometheus and nginx
processes on loopback, driven through HTTP (stdlib only) and fuseserve-cli.

Environment (set by tests/e2e/deploy/CMakeLists.txt):
  FUSESERVE_BINARY      the server binary
  FUSESERVE_CLI         the fuseserve-cli binary (make-repository, bench)
  FUSESERVE_DEPLOY_DIR  the repository's deploy/ directory
  FUSESERVE_STARTUP_TIMEOUT_S  optional, seconds a process may take to come up
                               (default 120: CI machines are small and busy)

A test file calls `run_tests()`: it exits 77 (ctest's SKIP_RETURN_CODE) with
the reason on stderr when every test was skipped, e.g. because `prometheus`
or `nginx` is not installed, so a missing tool shows up as SKIPPED.

Every process started here is killed by `Process.kill` (also at exit) and
every temporary directory belongs to a test that removes it.
"""

import atexit
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

SKIP_EXIT_CODE = 77

# The model every deployment test drives: the smallest and fastest of the
# default repository's models (make-repository --small).
MODEL = "gemm_bias_hardtanh_mish_groupnorm"

_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
_DEFAULT_DEPLOY_DIR = os.path.normpath(os.path.join(_THIS_DIR, "..", "..", "..", "deploy"))


def startup_timeout_s():
  return float(os.environ.get("FUSESERVE_STARTUP_TIMEOUT_S", "120"))


def run_tests():
  """unittest.main() with ctest's skip convention (exit 77 if all skipped)."""
  program = unittest.main(exit=False, verbosity=2)
  result = program.result
  if not result.wasSuccessful():
    sys.exit(1)
  # A skip raised by setUpClass is reported once for its class and is not
  # counted in testsRun.
  skipped_tests = sum(1 for test, _ in result.skipped if isinstance(test, unittest.TestCase))
  if result.skipped and result.testsRun == skipped_tests:
    reasons = sorted({reason for _, reason in result.skipped})
    print("SKIPPED: " + "; ".join(reasons), file=sys.stderr)
    sys.exit(SKIP_EXIT_CODE)
  sys.exit(0)


def missing_tools(*names):
  """The names among `names` that are not executables on PATH."""
  return [name for name in names if shutil.which(name) is None]


def _executable_from_env(variable):
  path = os.environ.get(variable, "")
  if not path:
    raise RuntimeError("%s is not set (run through ctest, or export it)" % variable)
  if not os.access(path, os.X_OK):
    raise RuntimeError("%s=%s is not an executable file" % (variable, path))
  return path


def server_binary():
  return _executable_from_env("FUSESERVE_BINARY")


def cli_binary():
  return _executable_from_env("FUSESERVE_CLI")


def deploy_file(*parts):
  """The path of a file under deploy/; a missing file is an error, not a skip
  (the deployment artifacts are part of the repository)."""
  path = os.path.join(os.environ.get("FUSESERVE_DEPLOY_DIR", _DEFAULT_DEPLOY_DIR), *parts)
  if not os.path.isfile(path):
    raise RuntimeError("deployment file %s does not exist" % path)
  return path


def wait_until(predicate, timeout_s, what, interval_s=0.1, check=None):
  """Polls `predicate` until it returns a true value, which is returned.

  `check`, called on every round, raises to stop early (e.g. a process died).
  On timeout raises AssertionError naming `what` and the last value seen.
  """
  deadline = time.monotonic() + timeout_s
  last = None
  while True:
    if check is not None:
      check()
    last = predicate()
    if last:
      return last
    if time.monotonic() > deadline:
      raise AssertionError("timed out after %.0f s waiting for %s (last: %r)" %
                           (timeout_s, what, last))
    time.sleep(interval_s)


def free_port():
  """A TCP port on 127.0.0.1 that the OS just reported free.

  For programs that cannot report the port they bound (nginx, Prometheus);
  another process may take it before they bind, so callers retry on failure.
  """
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# Loopback requests never go through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url, timeout_s=10):
  """(status, body text) of a GET; (None, error text) when nothing answered."""
  try:
    with _OPENER.open(url, timeout=timeout_s) as response:
      return response.status, response.read().decode("utf-8", "replace")
  except urllib.error.HTTPError as e:
    return e.code, e.read().decode("utf-8", "replace")
  except (urllib.error.URLError, OSError) as e:
    return None, str(e)


def tail(path, limit=6000):
  try:
    with open(path, "r", errors="replace") as f:
      return f.read()[-limit:]
  except OSError:
    return "<no output>"


# --------------------------------------------------------------------------
# Processes.

def _die_with_parent(signum):
  """A preexec_fn: the child gets `signum` when this test process dies, so a
  test killed by ctest's timeout leaves no server behind."""
  libc = ctypes.CDLL(None, use_errno=True)
  pr_set_pdeathsig = 1
  return lambda: libc.prctl(pr_set_pdeathsig, int(signum))


class Process:
  """A child process whose stdout and stderr go to files in `work_dir`.

  With `process_group` it leads a process group of its own and kill() ends
  the whole group (nginx's workers outlive a killed master otherwise).
  """

  def __init__(self, name, command, work_dir, process_group=False,
               death_signal=signal.SIGKILL):
    self.name = name
    self.command = list(command)
    self.process_group = process_group
    self.stdout_path = os.path.join(work_dir, name + ".stdout")
    self.stderr_path = os.path.join(work_dir, name + ".stderr")
    with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
      self.process = subprocess.Popen(self.command, stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL,
                                      start_new_session=process_group,
                                      preexec_fn=_die_with_parent(death_signal))
    atexit.register(self.kill)

  @property
  def pid(self):
    return self.process.pid

  def running(self):
    return self.process.poll() is None

  def output(self):
    return "--- %s: %s\n--- stderr ---\n%s\n--- stdout ---\n%s" % (
        self.name, " ".join(self.command), tail(self.stderr_path), tail(self.stdout_path))

  def check_running(self):
    if not self.running():
      raise AssertionError("%s exited with code %s\n%s" %
                           (self.name, self.process.returncode, self.output()))

  def signal(self, signum):
    if self.running():
      self.process.send_signal(signum)

  def wait(self, timeout_s):
    """The exit code, or None if still running after `timeout_s`."""
    try:
      return self.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      return None

  def stop(self, timeout_s=30):
    """SIGTERM, then kill() after `timeout_s`; the exit code (None if killed)."""
    if self.running():
      self.process.send_signal(signal.SIGTERM)
      if self.wait(timeout_s) is None:
        self.kill()
        return None
    self.kill()
    return self.process.returncode

  def kill(self):
    # Linux does not hand out a pid that is still a live group's id, so the
    # group signalled here is ours as long as any member (e.g. an nginx worker
    # whose master died) is left.
    if self.process_group:
      try:
        os.killpg(self.process.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    elif self.running():
      self.process.kill()
    self.process.wait()


def make_repository(directory):
  """The default model repository at test sizes, written by fuseserve-cli."""
  done = subprocess.run([cli_binary(), "make-repository", directory, "--small"],
                        capture_output=True, text=True, timeout=120)
  if done.returncode != 0:
    raise RuntimeError("fuseserve-cli make-repository failed (%d):\n%s%s" %
                       (done.returncode, done.stdout, done.stderr))


class Fuseserve(Process):
  """fuseserve on OS-chosen ports; start() returns once /v2/health/ready is 200."""

  def __init__(self, name, repository, work_dir, extra_args=()):
    self.port_file = os.path.join(work_dir, name + ".ports.json")
    super().__init__(name, [server_binary(), "--model-repository=" + repository,
                            "--grpc-address=127.0.0.1", "--grpc-port=0",
                            "--metrics-address=127.0.0.1", "--metrics-port=0",
                            "--port-file=" + self.port_file] + list(extra_args), work_dir)
    self.grpc_port = None
    self.metrics_port = None

  @property
  def grpc_address(self):
    return "127.0.0.1:%d" % self.grpc_port

  def metrics_url(self, path):
    return "http://127.0.0.1:%d%s" % (self.metrics_port, path)

  def start(self):
    timeout_s = startup_timeout_s()

    def read_ports():
      try:
        with open(self.port_file) as f:
          return json.load(f)
      except (OSError, ValueError):
        return None

    ports = wait_until(read_ports, timeout_s, "%s to write %s" % (self.name, self.port_file),
                       interval_s=0.05, check=self.check_running)
    self.grpc_port = int(ports["grpc_port"])
    self.metrics_port = int(ports["metrics_port"])
    wait_until(lambda: http_get(self.metrics_url("/v2/health/ready"), 5)[0] == 200,
               timeout_s, "%s to report ready" % self.name, interval_s=0.05,
               check=self.check_running)
    return self

  def metrics_text(self):
    status, body = http_get(self.metrics_url("/metrics"))
    if status != 200:
      raise AssertionError("GET %s: %s %s" % (self.metrics_url("/metrics"), status, body))
    return body

  def counter(self, name, **labels):
    """The value of one series of the server's /metrics (0 if absent)."""
    return metric_value(self.metrics_text(), name, labels)


_SAMPLE_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_value(text, name, labels):
  """Sum of the samples of `name` in Prometheus text whose labels include
  `labels` (0 when there is none)."""
  total = 0.0
  for line in text.splitlines():
    match = _SAMPLE_LINE.match(line)
    if not match or match.group(1) != name:
      continue
    sample_labels = dict(_LABEL.findall(match.group(2) or ""))
    if all(sample_labels.get(k) == v for k, v in labels.items()):
      total += float(match.group(3))
  return total


# --------------------------------------------------------------------------
# fuseserve-cli bench.

class Bench(Process):
  """`fuseserve-cli bench` in the background, closed loop, one fixed window.

  Failed requests never make it exit non-zero (--allow-errors): the tests
  judge the JSON report instead.
  """

  def __init__(self, name, url, work_dir, concurrency, duration_s, warmup_s=0.5,
               model=MODEL):
    self.json_path = os.path.join(work_dir, name + ".json")
    super().__init__(name, [cli_binary(), "bench", model, "--url", url,
                            "--concurrency", str(concurrency),
                            "--duration-s", str(duration_s), "--warmup-s", str(warmup_s),
                            "--json", self.json_path, "--quiet", "--allow-errors"], work_dir)

  def report(self, timeout_s):
    """Waits for the run to end and returns the JSON report's dict."""
    code = self.wait(timeout_s)
    if code is None:
      self.kill()
      raise AssertionError("bench did not finish within %.0f s\n%s" % (timeout_s, self.output()))
    if code != 0:
      raise AssertionError("bench exited with code %d\n%s" % (code, self.output()))
    with open(self.json_path) as f:
      return json.load(f)


def run_bench(name, url, work_dir, concurrency, duration_s, timeout_s=120):
  return Bench(name, url, work_dir, concurrency, duration_s).report(timeout_s)


# --------------------------------------------------------------------------
# Configuration templates.

def envsubst(template, values):
  """Substitutes `$NAME` and `${NAME}` for the NAMEs in `values` only, as the
  nginx image's entrypoint does (`envsubst "$defined_envs"`): every other `$`
  (nginx's own variables) is left as written."""
  def replace(match):
    name = match.group(1) or match.group(2)
    return values[name] if name in values else match.group(0)
  return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", replace, template)


def is_finite_number(text):
  try:
    return math.isfinite(float(text))
  except (TypeError, ValueError):
    return False


class Prometheus(Process):
  """A Prometheus server with its own storage on a free loopback port."""

  def __init__(self, config_file, work_dir, port):
    self.port = port
    storage = os.path.join(work_dir, "tsdb")
    super().__init__("prometheus", [
        shutil.which("prometheus"), "--config.file=" + config_file,
        "--storage.tsdb.path=" + storage,
        "--web.listen-address=127.0.0.1:%d" % port], work_dir)

  def url(self, path, **query):
    text = "http://127.0.0.1:%d%s" % (self.port, path)
    return text + ("?" + urllib.parse.urlencode(query) if query else "")

  def api(self, path, **query):
    """The `data` of a successful API answer; raises on any other answer."""
    status, body = http_get(self.url(path, **query))
    if status != 200:
      raise AssertionError("GET %s: %s %s" % (self.url(path, **query), status, body[:2000]))
    answer = json.loads(body)
    if answer.get("status") != "success":
      raise AssertionError("GET %s: %s" % (self.url(path, **query), body[:2000]))
    return answer["data"]

  def query(self, expression):
    """The instant vector of `expression` as [(labels, value text)]."""
    data = self.api("/api/v1/query", query=expression)
    if data["resultType"] != "vector":
      raise AssertionError("%s: result type %s, expected vector" %
                           (expression, data["resultType"]))
    return [(sample["metric"], sample["value"][1]) for sample in data["result"]]


def new_work_dir(prefix):
  """A temporary directory that the nginx workers can use when the tests run
  as root (nginx then runs its workers as an unprivileged user)."""
  directory = tempfile.mkdtemp(prefix=prefix)
  os.chmod(directory, 0o755)
  return directory

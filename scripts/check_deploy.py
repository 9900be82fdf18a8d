#!/usr/bin/python3
"""Checks the deployment files (Dockerfile, deploy/) against the real server.

  check_deploy.py --server BUILD/server/fuseserve --cli BUILD/client/fuseserve-cli

Every YAML and JSON file under deploy/ must parse. The script starts the
server on a small generated repository (ephemeral ports), sends one inference
so that the histograms have samples, scrapes /metrics, and then checks that

- every metric named in deploy/ (PromQL of the alert rules and their unit
  tests, the prometheus-adapter rule, the Grafana dashboard) is a series of
  that scrape, and every label they use is one the series carry (families
  registered in server/metrics/ without a series in this scrape, i.e. the GPU
  memory gauges of a server without a GPU, are checked against their
  registration instead);
- every flag in the Kubernetes manifests is one the server knows, the
  container ports, Service target ports, probe ports and paths match the
  flags (or their defaults in `fuseserve --help`) and the probe paths answer
  200 on the running server; terminationGracePeriodSeconds exceeds the
  preStop sleep plus --exit-timeout-secs; the load balancer, ServiceMonitor,
  HPA, PodDisruptionBudgets and kustomization refer to what exists;
- docker-compose, prometheus.yml, the Grafana provisioning and the Dockerfile
  use the same ports, paths and files;
- the nginx template has exactly its two placeholders and, rendered, passes
  `nginx -t` (when nginx is installed); `kubectl kustomize deploy/k8s` builds
  (when kubectl is installed); `promtool check config`, `promtool check
  rules` and `promtool test rules` pass (when promtool is installed). A tool
  that is missing is reported as skipped, with the reason.

The server is stopped with SIGTERM and must exit 0. Exit status: 0 when every
check passed, 1 with one line per mismatch otherwise, 77 when PyYAML is
missing (ctest reports it as skipped).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
  import yaml
except ImportError:
  print("check_deploy: SKIPPED: PyYAML is missing (Debian: python3-yaml)")
  sys.exit(77)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_TIMEOUT_S = 60

# Series that Prometheus makes itself, not the server.
PROMETHEUS_SERIES = {"up"}
# Labels that Prometheus (targets, Kubernetes service discovery through the
# Prometheus Operator) or PromQL add to the server's series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint",
                 "le", "quantile"}

PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp",
    "clamp_max", "clamp_min", "count_over_time", "day_of_month", "day_of_week", "delta",
    "deriv", "exp", "floor", "histogram_quantile", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log2",
    "log10", "max_over_time", "min_over_time", "minute", "month", "predict_linear",
    "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time",
    "time", "timestamp", "vector", "year",
}
PROMQL_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                       "count_values", "bottomk", "topk", "quantile"}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
PROMQL_LABEL_CLAUSES = ("by", "without", "on", "ignoring", "group_left", "group_right")


class Checker:
  """Collects the outcome of every check; failures make the exit status 1."""

  def __init__(self):
    self.failures = []
    self.passed = 0
    self.skipped = []

  def ok(self, what):
    self.passed += 1
    print(f"ok    {what}")

  def fail(self, what):
    self.failures.append(what)
    print(f"FAIL  {what}")

  def expect(self, condition, what, failure):
    if condition:
      self.ok(what)
    else:
      self.fail(f"{what}: {failure}")
    return condition

  def skip(self, what, reason):
    self.skipped.append(what)
    print(f"skip  {what}: {reason}")


def rel(path):
  return os.path.relpath(path, REPO_ROOT)


# ---------------------------------------------------------------- files

def load_deploy_files(checker, deploy_dir):
  """{relative path: [documents]} of every YAML and JSON file under deploy/."""
  documents = {}
  for directory, _, names in sorted(os.walk(deploy_dir)):
    for name in sorted(names):
      path = os.path.join(directory, name)
      if not name.endswith((".yaml", ".yml", ".json")):
        continue
      try:
        with open(path, encoding="utf-8") as f:
          if name.endswith(".json"):
            documents[rel(path)] = [json.load(f)]
          else:
            documents[rel(path)] = [d for d in yaml.safe_load_all(f) if d is not None]
      except (yaml.YAMLError, json.JSONDecodeError) as e:
        checker.fail(f"{rel(path)} does not parse: {e}")
  checker.expect(documents, f"{len(documents)} YAML/JSON files under deploy/ parse",
                 "none found")
  return documents


def one_document(documents, path):
  docs = documents.get(path)
  if not docs:
    raise SystemExit(f"check_deploy: {path} is missing or empty")
  return docs[0]


# ---------------------------------------------------------------- the server

class ServerFacts:
  """Defaults and flags from --help, and what the running server exports."""

  def __init__(self, help_text):
    self.flags = set(re.findall(r"^\s+--([a-z][a-z-]*)", help_text, re.M))
    self.defaults = {}
    for flag in ("grpc-port", "metrics-port", "exit-timeout-secs"):
      # The flag's description, which may wrap, up to the next flag.
      match = re.search(rf"--{flag}=\S+((?:(?!\n\s+--).)*?)\(default (\d+)", help_text, re.S)
      if not match:
        raise SystemExit(f"check_deploy: `fuseserve --help` gives no default for --{flag}")
      self.defaults[flag] = int(match.group(2))
    self.series = {}  # sample name -> set of label names
    self.http_status = {}  # path -> status code on the metrics port
    # Sample names and label names of the families registered in the
    # server's source, for those that have no series in the scrape.
    self.registered_series = set()
    self.registered_labels = set()

  def read_registrations(self, metrics_dir):
    for name in sorted(os.listdir(metrics_dir)):
      if not name.endswith(".cc"):
        continue
      source = open(os.path.join(metrics_dir, name)).read()
      for kind, family in re.findall(r"Build(Counter|Gauge|Histogram)\(\)\s*\.Name\(\"(\w+)\"\)",
                                     source):
        suffixes = ("_bucket", "_sum", "_count") if kind == "Histogram" else ("",)
        self.registered_series.update(family + suffix for suffix in suffixes)
      self.registered_labels.update(re.findall(r"\{\"([a-z_]+)\",", source))


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def http_get(port, path):
  """(status, body) of GET http://127.0.0.1:port/path."""
  try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
      return response.status, response.read().decode("utf-8", "replace")
  except urllib.error.HTTPError as e:
    return e.code, ""


def parse_exposition(text):
  """{sample name: set of label names} of a Prometheus text exposition."""
  series = {}
  for line in text.splitlines():
    if not line or line.startswith("#"):
      continue
    match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s", line)
    if match:
      labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", match.group(2) or ""))
      series.setdefault(match.group(1), set()).update(labels)
  return series


def run_server(checker, args, facts, probe_paths, workdir):
  """Starts the server, sends one inference, scrapes, probes, stops it."""
  repository = os.path.join(workdir, "models")
  subprocess.run([args.cli, "make-repository", repository, "--small"], check=True,
                 stdout=subprocess.DEVNULL)
  port_file = os.path.join(workdir, "ports.json")
  log_path = os.path.join(workdir, "server.log")
  with open(log_path, "w") as log:
    server = subprocess.Popen(
        [args.server, f"--model-repository={repository}", "--grpc-address=127.0.0.1",
         "--grpc-port=0", "--metrics-address=127.0.0.1", "--metrics-port=0",
         f"--port-file={port_file}"], stdout=log, stderr=subprocess.STDOUT)
  try:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not os.path.exists(port_file):
      if server.poll() is not None or time.monotonic() > deadline:
        raise SystemExit(f"check_deploy: the server did not start; its log:\n"
                         f"{open(log_path).read()}")
      time.sleep(0.05)
    with open(port_file) as f:
      ports = json.load(f)
    while http_get(ports["metrics_port"], "/v2/health/ready")[0] != 200:
      if server.poll() is not None or time.monotonic() > deadline:
        raise SystemExit("check_deploy: the server never became ready")
      time.sleep(0.05)
    infer = subprocess.run(
        [args.cli, "--url", f"127.0.0.1:{ports['grpc_port']}", "infer", "groupnorm",
         "--random", "1,8,4,4"], capture_output=True, text=True)
    checker.expect(infer.returncode == 0, "one inference on the small repository's groupnorm",
                   infer.stderr.strip())
    status, text = http_get(ports["metrics_port"], "/metrics")
    checker.expect(status == 200, "GET /metrics", f"status {status}")
    facts.series = parse_exposition(text)
    for path in sorted(probe_paths):
      facts.http_status[path] = http_get(ports["metrics_port"], path)[0]
    server.send_signal(signal.SIGTERM)
    try:
      code = server.wait(timeout=facts.defaults["exit-timeout-secs"] + 15)
      checker.expect(code == 0, "the server exits 0 on SIGTERM", f"exit status {code}")
    except subprocess.TimeoutExpired:
      checker.fail("the server did not exit after SIGTERM within --exit-timeout-secs + 15 s")
  finally:
    if server.poll() is None:
      server.kill()
      server.wait()


# ---------------------------------------------------------------- PromQL

def promql_references(expr):
  """(metric names, label names, function names) an expression refers to.

  Understands PromQL plus the templating around it here: Grafana variables
  ($model, $__rate_interval, ${datasource}), label_values(...) and
  prometheus-adapter's <<.LabelMatchers>> / <<.GroupBy>>.
  """
  metrics, labels, functions = set(), set(), set()
  text = re.sub(r"<<\.\w+>>", " ", expr)
  text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', text)

  def take_matchers(match):
    labels.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", match.group(0)))
    return " "
  text = re.sub(r"\{[^{}]*\}", take_matchers, text)
  text = re.sub(r"\[[^\]]*\]", " ", text)
  text = re.sub(r"\$\{?\w+\}?", " ", text)

  def take_clause(match):
    labels.update(re.findall(r"[a-zA-Z_]\w*", match.group(2)))
    return " "
  text = re.sub(rf"\b({'|'.join(PROMQL_LABEL_CLAUSES)})\s*\(([^()]*)\)", take_clause, text)

  def take_label_values(match):
    labels.add(match.group(2))
    return match.group(1)
  text = re.sub(r"\blabel_values\s*\(([^(),]*),\s*([a-zA-Z_]\w*)\s*\)", take_label_values, text)
  text = re.sub(r"\blabel_values\s*\(([^(),]*)\)", r"\1", text)

  for match in re.finditer(
      r"(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*)|(?P<id>[a-zA-Z_:][\w:]*)", text):
    name = match.group("id")
    if not name:
      continue
    if name in PROMQL_KEYWORDS or name in PROMQL_AGGREGATIONS:
      continue
    if re.match(r"\s*\(", text[match.end():]):
      functions.add(name)
    else:
      metrics.add(name)
  return metrics, labels, functions


def series_selector_name(series):
  """The metric name of a promtool input series like 'name{a="b"}'."""
  return re.match(r"\s*([a-zA-Z_:][\w:]*)", series).group(1)


def collect_expressions(documents):
  """[(where, expression)] of every PromQL expression under deploy/."""
  found = []
  alerts = one_document(documents, "deploy/prometheus/alerts.yml")
  for group in alerts.get("groups", []):
    for rule in group.get("rules", []):
      name = rule.get("alert") or rule.get("record")
      found.append((f"alerts.yml rule {name}", rule["expr"]))
  adapter = one_document(documents, "deploy/k8s/prometheus-adapter/values.yaml")
  for rule in adapter["rules"]["custom"]:
    found.append(("prometheus-adapter seriesQuery", rule["seriesQuery"]))
    found.append(("prometheus-adapter metricsQuery", rule["metricsQuery"]))
  dashboard = one_document(documents, "deploy/grafana/dashboards/fuseserve.json")

  def walk_panels(panels):
    for panel in panels:
      for target in panel.get("targets", []):
        if "expr" in target:
          found.append((f"dashboard panel '{panel.get('title')}'", target["expr"]))
      walk_panels(panel.get("panels", []))
  walk_panels(dashboard.get("panels", []))
  for variable in dashboard.get("templating", {}).get("list", []):
    if variable.get("type") != "query":
      continue
    query = variable.get("query")
    if isinstance(query, dict):
      query = query.get("query")
    found.append((f"dashboard variable ${variable['name']}", query))
  return found


def check_metrics(checker, documents, facts):
  recorded = set()
  for group in one_document(documents, "deploy/prometheus/alerts.yml").get("groups", []):
    recorded.update(r["record"] for r in group.get("rules", []) if "record" in r)
  scraped_labels = set().union(*facts.series.values()) if facts.series else set()

  def known_metric(name):
    if name in facts.series or name in PROMETHEUS_SERIES or name in recorded:
      return "scrape"
    # Families without a series (the GPU gauges on a server without a GPU)
    # are missing from the scrape: they must be registered.
    if name in facts.registered_series:
      return "source"
    return None

  unscraped = set()
  expressions = collect_expressions(documents)
  for where, expr in expressions:
    metrics, labels, functions = promql_references(expr)
    if not metrics:
      checker.fail(f"{where}: no metric found in {expr!r}")
    for name in sorted(metrics):
      origin = known_metric(name)
      if origin is None:
        checker.fail(f"{where}: metric {name} is not exported by the server "
                     f"(not in /metrics, not registered in server/metrics/)")
      elif origin == "source":
        unscraped.add(name)
    for label in sorted(labels - scraped_labels - TARGET_LABELS):
      if label in facts.registered_labels:
        unscraped.add(f"label {label}")
      else:
        checker.fail(f"{where}: label {label} is on no series of the server")
    for function in sorted(functions - PROMQL_FUNCTIONS - PROMQL_AGGREGATIONS - {"label_values"}):
      checker.fail(f"{where}: {function}() is not a PromQL function")
  checker.ok(f"{len(expressions)} PromQL expressions refer only to the server's metrics and labels")
  tests = one_document(documents, "deploy/prometheus/alerts_test.yml")
  for name in sorted({series_selector_name(series["series"]) for test in tests.get("tests", [])
                      for series in test.get("input_series", [])}):
    checker.expect(known_metric(name) is not None, f"alerts_test.yml input series {name}",
                   "not a metric the server exports")
  if unscraped:
    print(f"note  without a series in this scrape (a server exports them only with a GPU in "
          f"use), registered in server/metrics/: {', '.join(sorted(unscraped))}")


# ---------------------------------------------------------------- Kubernetes

def k8s_objects(documents):
  objects = []
  for path, docs in documents.items():
    if path.startswith("deploy/k8s/") and not path.startswith("deploy/k8s/prometheus-adapter/"):
      objects.extend((path, d) for d in docs if isinstance(d, dict) and "kind" in d
                     and d["kind"] != "Kustomization")
  return objects


def find_objects(objects, kind):
  return [d for _, d in objects if d["kind"] == kind]


def parse_flags(args):
  """{flag: value} of ["--name=value", ...] (and "--name value")."""
  flags = {}
  i = 0
  while i < len(args):
    arg = args[i]
    if arg.startswith("--"):
      name, sep, value = arg[2:].partition("=")
      if not sep and i + 1 < len(args) and not args[i + 1].startswith("--"):
        i += 1
        value = args[i]
      flags[name] = value
    i += 1
  return flags


def resolve_port(port, container):
  """The container port number a probe or Service targetPort refers to."""
  if isinstance(port, int):
    return port
  for p in container.get("ports", []):
    if p.get("name") == port:
      return p["containerPort"]
  return None


def prestop_sleep_s(container):
  pre_stop = container.get("lifecycle", {}).get("preStop", {})
  if "sleep" in pre_stop:
    return int(pre_stop["sleep"]["seconds"])
  command = " ".join(str(c) for c in pre_stop.get("exec", {}).get("command", []))
  match = re.search(r"\bsleep\s+(\d+)", command)
  return int(match.group(1)) if match else 0


def selects(selector, labels):
  return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_server_deployment(checker, objects, facts):
  """Checks the fuseserve Deployment; returns (pod labels, container, flags)."""
  for deployment in find_objects(objects, "Deployment"):
    pod = deployment["spec"]["template"]
    for container in pod["spec"]["containers"]:
      if container["name"] == "fuseserve":
        break
    else:
      continue
    name = f"Deployment {deployment['metadata']['name']}"
    flags = parse_flags(container.get("args", []))
    unknown = sorted(set(flags) - facts.flags)
    checker.expect(not unknown, f"{name}: every argument is a fuseserve flag",
                   f"unknown {', '.join('--' + f for f in unknown)}")
    grpc_port = int(flags.get("grpc-port", facts.defaults["grpc-port"]))
    metrics_port = int(flags.get("metrics-port", facts.defaults["metrics-port"]))
    exit_timeout = int(flags.get("exit-timeout-secs", facts.defaults["exit-timeout-secs"]))
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    checker.expect(ports.get("grpc") == grpc_port, f"{name}: containerPort grpc is {grpc_port}",
                   f"it is {ports.get('grpc')}")
    checker.expect(ports.get("metrics") == metrics_port,
                   f"{name}: containerPort metrics is {metrics_port}",
                   f"it is {ports.get('metrics')}")
    expected_paths = {"startupProbe": "/v2/health/ready", "readinessProbe": "/v2/health/ready",
                      "livenessProbe": "/v2/health/live"}
    for probe_name, expected_path in expected_paths.items():
      probe = container.get(probe_name)
      if not checker.expect(probe is not None, f"{name}: has a {probe_name}", "missing"):
        continue
      if "httpGet" in probe:
        port = resolve_port(probe["httpGet"]["port"], container)
        path = probe["httpGet"].get("path")
        checker.expect(port == metrics_port, f"{name}: {probe_name} port is the metrics port",
                       f"{probe['httpGet']['port']} is port {port}, the server serves HTTP on "
                       f"{metrics_port}")
        checker.expect(path == expected_path, f"{name}: {probe_name} path is {expected_path}",
                       f"it is {path}")
        status = facts.http_status.get(path)
        checker.expect(status == 200, f"{name}: {probe_name} GET {path} answers 200",
                       f"the running server answered {status}")
      elif "grpc" in probe:
        port = resolve_port(probe["grpc"]["port"], container)
        checker.expect(port == grpc_port, f"{name}: {probe_name} port is the gRPC port",
                       f"{probe['grpc']['port']} is port {port}, the server's gRPC port is "
                       f"{grpc_port}")
      else:
        checker.fail(f"{name}: {probe_name} is neither httpGet on the metrics port nor grpc")
    grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    sleep = prestop_sleep_s(container)
    checker.expect(sleep > 0, f"{name}: a preStop sleep lets the endpoints drop the pod first",
                   "no preStop sleep")
    checker.expect(grace > sleep + exit_timeout,
                   f"{name}: terminationGracePeriodSeconds {grace} > preStop {sleep} s + "
                   f"--exit-timeout-secs {exit_timeout}",
                   "SIGKILL would cut the drain short")
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    checker.expect(gpus is not None and int(gpus) >= 1, f"{name}: requests an nvidia.com/gpu",
                   "no nvidia.com/gpu limit")
    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
    checker.expect("/models" in mounts, f"{name}: mounts the model repository at /models",
                   "no volume at /models")
    return pod["metadata"]["labels"], container, {"grpc": grpc_port, "metrics": metrics_port}
  raise SystemExit("check_deploy: no Deployment in deploy/k8s has a container named fuseserve")


def check_services(checker, objects, pod_labels, container, server_ports):
  services = find_objects(objects, "Service")
  server_services = [s for s in services if selects(s["spec"].get("selector"), pod_labels)]
  checker.expect(server_services, "a Service selects the fuseserve pods", "none does")
  for service in server_services:
    for port in service["spec"]["ports"]:
      target = resolve_port(port.get("targetPort", port["port"]), container)
      checker.expect(target in server_ports.values(),
                     f"Service {service['metadata']['name']} port {port.get('name')} targets "
                     f"a server port", f"targetPort {port.get('targetPort')} is {target}")
  headless = [s for s in server_services if s["spec"].get("clusterIP") == "None"]
  checker.expect(headless, "a headless Service lists the fuseserve pods for the load balancer",
                 "none (clusterIP: None) selects them")
  return services, headless[0] if headless else None


def check_load_balancer(checker, objects, documents, services, headless, namespace):
  template_text = open(os.path.join(REPO_ROOT, "deploy/nginx/fuseserve-grpc.conf.template")).read()
  generator = one_document(documents, "deploy/nginx/kustomization.yaml")["configMapGenerator"][0]
  lb = None
  for deployment in find_objects(objects, "Deployment"):
    for container in deployment["spec"]["template"]["spec"]["containers"]:
      env = {e["name"]: e.get("value") for e in container.get("env", [])}
      if "FUSESERVE_UPSTREAM_SERVERS" in env:
        lb = (deployment, container, env)
  if not checker.expect(lb is not None, "a Deployment runs the nginx load balancer",
                        "no container sets FUSESERVE_UPSTREAM_SERVERS"):
    return
  deployment, container, env = lb
  name = f"Deployment {deployment['metadata']['name']}"
  ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
  checker.expect(str(ports.get("grpc")) == env.get("FUSESERVE_LISTEN_PORT"),
                 f"{name}: nginx listens on its containerPort grpc",
                 f"FUSESERVE_LISTEN_PORT={env.get('FUSESERVE_LISTEN_PORT')}, "
                 f"containerPort {ports.get('grpc')}")
  if headless is not None:
    headless_port = next(p["port"] for p in headless["spec"]["ports"])
    upstream = (f"{headless['metadata']['name']}.{namespace}.svc.cluster.local:"
                f"{headless_port}")
    servers = env["FUSESERVE_UPSTREAM_SERVERS"]
    checker.expect(re.search(rf"\bserver\s+{re.escape(upstream)}\s", servers),
                   f"{name}: the upstream is the headless Service {upstream}",
                   f"FUSESERVE_UPSTREAM_SERVERS is {servers!r}")
  checker.expect(env.get("NGINX_ENVSUBST_OUTPUT_DIR") == "/etc/nginx",
                 f"{name}: the template renders to /etc/nginx/nginx.conf",
                 "NGINX_ENVSUBST_OUTPUT_DIR is not /etc/nginx")
  key = generator["files"][0].split("=", 1)[0]
  volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
  mounted = [m for m in container.get("volumeMounts", [])
             if volumes.get(m["name"], {}).get("configMap", {}).get("name") == generator["name"]]
  checker.expect(mounted and mounted[0]["mountPath"] == f"/etc/nginx/templates/{key}",
                 f"{name}: mounts ConfigMap {generator['name']} (the template) as "
                 f"/etc/nginx/templates/{key}", f"mounts {mounted}")
  placeholders = sorted(set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", template_text)))
  checker.expect(placeholders == ["FUSESERVE_LISTEN_PORT", "FUSESERVE_UPSTREAM_SERVERS"],
                 "the nginx template's placeholders are FUSESERVE_LISTEN_PORT and "
                 "FUSESERVE_UPSTREAM_SERVERS", f"found {placeholders}")
  lb_pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
  lb_services = [s for s in services if selects(s["spec"].get("selector"), lb_pod_labels)]
  checker.expect(any(resolve_port(p.get("targetPort"), container) == ports.get("grpc")
                     for s in lb_services for p in s["spec"]["ports"]),
                 "a Service sends gRPC to the load balancer", "none targets its grpc port")


def check_k8s(checker, documents, facts):
  kustomization = one_document(documents, "deploy/k8s/kustomization.yaml")
  for resource in kustomization["resources"]:
    path = os.path.join(REPO_ROOT, "deploy/k8s", resource)
    checker.expect(os.path.exists(path), f"kustomization resource {resource} exists", "missing")
  namespace = kustomization.get("namespace", "default")
  objects = k8s_objects(documents)
  pod_labels, container, server_ports = check_server_deployment(checker, objects, facts)
  services, headless = check_services(checker, objects, pod_labels, container, server_ports)
  check_load_balancer(checker, objects, documents, services, headless, namespace)
  for monitor in find_objects(objects, "ServiceMonitor"):
    for endpoint in monitor["spec"]["endpoints"]:
      targets = [resolve_port(p.get("targetPort"), container) for s in services
                 if selects(monitor["spec"]["selector"].get("matchLabels"), s["metadata"]["labels"])
                 for p in s["spec"]["ports"] if p.get("name") == endpoint["port"]]
      checker.expect(targets and all(t == server_ports["metrics"] for t in targets),
                     f"ServiceMonitor scrapes port {endpoint['port']}, the metrics port",
                     f"that Service port targets {targets}")
      checker.expect(endpoint.get("path", "/metrics") == "/metrics",
                     "ServiceMonitor path is /metrics", f"it is {endpoint.get('path')}")
  deployments = {d["metadata"]["name"]: d for d in find_objects(objects, "Deployment")}
  adapter = one_document(documents, "deploy/k8s/prometheus-adapter/values.yaml")
  adapter_metrics = {r["name"]["as"] for r in adapter["rules"]["custom"]}
  for hpa in find_objects(objects, "HorizontalPodAutoscaler"):
    target = hpa["spec"]["scaleTargetRef"]["name"]
    checker.expect(target in deployments, f"HPA scales Deployment {target}", "no such Deployment")
    for metric in hpa["spec"]["metrics"]:
      if metric["type"] == "Pods":
        metric_name = metric["pods"]["metric"]["name"]
        checker.expect(metric_name in adapter_metrics,
                       f"HPA metric {metric_name} is served by the prometheus-adapter rule",
                       f"the rules serve {sorted(adapter_metrics)}")
  for pdb in find_objects(objects, "PodDisruptionBudget"):
    selector = pdb["spec"]["selector"]["matchLabels"]
    checker.expect(any(selects(selector, d["spec"]["template"]["metadata"]["labels"])
                       for d in deployments.values()),
                   f"PodDisruptionBudget {pdb['metadata']['name']} selects a Deployment's pods",
                   "it selects none")
  kubectl = shutil.which("kubectl")
  if kubectl:
    build = subprocess.run([kubectl, "kustomize", os.path.join(REPO_ROOT, "deploy/k8s")],
                           capture_output=True, text=True)
    checker.expect(build.returncode == 0, "kubectl kustomize deploy/k8s builds",
                   build.stderr.strip())
  else:
    checker.skip("kubectl kustomize deploy/k8s", "kubectl is not installed")


# ---------------------------------------------------------------- the rest

def check_prometheus(checker, documents, facts):
  config = one_document(documents, "deploy/prometheus/prometheus.yml")
  checker.expect("alerts.yml" in config.get("rule_files", []), "prometheus.yml loads alerts.yml",
                 f"rule_files is {config.get('rule_files')}")
  jobs = {j["job_name"]: j for j in config.get("scrape_configs", [])}
  job = jobs.get("fuseserve")
  if checker.expect(job is not None, "prometheus.yml has a scrape job fuseserve", "missing"):
    targets = [t for c in job.get("static_configs", []) for t in c.get("targets", [])]
    checker.expect(job.get("metrics_path", "/metrics") == "/metrics",
                   "the fuseserve job scrapes /metrics", f"it scrapes {job.get('metrics_path')}")
    checker.expect(targets == [f"fuseserve:{facts.defaults['metrics-port']}"],
                   f"the fuseserve job's target is fuseserve:{facts.defaults['metrics-port']}",
                   f"targets are {targets}")
  promtool = shutil.which("promtool")
  if not promtool:
    checker.skip("promtool check config / check rules / test rules", "promtool is not installed")
    return
  directory = os.path.join(REPO_ROOT, "deploy/prometheus")
  for command in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"],
                  ["test", "rules", "alerts_test.yml"]):
    result = subprocess.run([promtool] + command, cwd=directory, capture_output=True, text=True)
    checker.expect(result.returncode == 0, f"promtool {' '.join(command)}",
                   (result.stdout + result.stderr).strip())


def check_compose_and_grafana(checker, documents, facts):
  compose = one_document(documents, "deploy/compose/docker-compose.yml")
  services = compose["services"]
  published = {str(p).rsplit(":", 1)[-1] for p in services["fuseserve"].get("ports", [])}
  for flag in ("grpc-port", "metrics-port"):
    port = str(facts.defaults[flag])
    checker.expect(port in published, f"compose publishes the server's --{flag} {port}",
                   f"it publishes {sorted(published)}")
  grace = services["fuseserve"].get("stop_grace_period", "10s")
  match = re.fullmatch(r"(\d+)(s|m)", grace)
  grace_s = int(match.group(1)) * (60 if match.group(2) == "m" else 1) if match else 0
  checker.expect(grace_s > facts.defaults["exit-timeout-secs"],
                 f"compose stop_grace_period {grace} > --exit-timeout-secs "
                 f"{facts.defaults['exit-timeout-secs']}", "docker would cut the drain short")
  compose_dir = os.path.join(REPO_ROOT, "deploy/compose")
  mounts = {}
  for service in ("prometheus", "grafana"):
    for volume in services[service].get("volumes", []):
      source, target = volume.split(":")[:2]
      if source.startswith("."):
        checker.expect(os.path.isdir(os.path.join(compose_dir, source)),
                       f"compose {service} mounts {source}", "no such directory")
        mounts[target] = os.path.normpath(os.path.join(compose_dir, source))
  provider = one_document(documents, "deploy/grafana/provisioning/dashboards/fuseserve.yml")
  path = provider["providers"][0]["options"]["path"]
  checker.expect(mounts.get(path) == os.path.join(REPO_ROOT, "deploy/grafana/dashboards"),
                 f"Grafana loads dashboards from {path}, where compose mounts them",
                 f"compose mounts {mounts.get(path)} there")
  datasource = one_document(documents, "deploy/grafana/provisioning/datasources/prometheus.yml")
  url = datasource["datasources"][0]["url"]
  checker.expect(re.fullmatch(r"http://prometheus:9090/?", url) is not None and
                 "9090:9090" in services["prometheus"].get("ports", []),
                 "the Grafana data source is the compose Prometheus", f"url {url}")


def check_dockerfile(checker, facts):
  text = open(os.path.join(REPO_ROOT, "Dockerfile")).read()
  exposed = set(" ".join(re.findall(r"^EXPOSE\s+(.*)$", text, re.M)).split())
  for flag in ("grpc-port", "metrics-port"):
    port = str(facts.defaults[flag])
    checker.expect(port in exposed, f"Dockerfile exposes --{flag} {port}",
                   f"EXPOSE {' '.join(sorted(exposed))}")
  ready = f"127.0.0.1:{facts.defaults['metrics-port']}/v2/health/ready"
  checker.expect(re.search(r"^HEALTHCHECK\b(.|\\\n)*" + re.escape(ready), text, re.M),
                 f"Dockerfile HEALTHCHECK gets {ready}", "no such HEALTHCHECK")
  checker.expect(re.search(r"^VOLUME\s+/models\s*$", text, re.M), "Dockerfile VOLUME /models",
                 "missing")
  entrypoint = os.path.join(REPO_ROOT, "deploy/docker/entrypoint.sh")
  checker.expect(os.access(entrypoint, os.X_OK) and "deploy/docker/entrypoint.sh" in text,
                 "Dockerfile installs the executable deploy/docker/entrypoint.sh",
                 "missing, not executable or not copied")


def check_nginx(checker, facts, workdir):
  nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                    else None)
  if not nginx:
    checker.skip("nginx -t on the rendered template", "nginx is not installed")
    return
  template = open(os.path.join(REPO_ROOT, "deploy/nginx/fuseserve-grpc.conf.template")).read()
  prefix = os.path.join(workdir, "nginx")
  os.makedirs(prefix)
  rendered = (template.replace("${FUSESERVE_LISTEN_PORT}", str(free_port()))
              .replace("${FUSESERVE_UPSTREAM_SERVERS}",
                       f"server 127.0.0.1:{facts.defaults['grpc-port']};"))
  config = os.path.join(prefix, "nginx.conf")
  with open(config, "w") as f:
    f.write(rendered)
  result = subprocess.run([nginx, "-t", "-q", "-p", prefix + "/", "-c", config, "-e", "stderr"],
                          capture_output=True, text=True)
  checker.expect(result.returncode == 0, "nginx -t accepts the rendered template",
                 result.stderr.strip())


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--server", required=True, help="the fuseserve binary")
  parser.add_argument("--cli", required=True, help="the fuseserve-cli binary")
  args = parser.parse_args()
  for binary in (args.server, args.cli):
    if not os.access(binary, os.X_OK):
      raise SystemExit(f"check_deploy: {binary} is not an executable (build it first)")
  checker = Checker()
  documents = load_deploy_files(checker, os.path.join(REPO_ROOT, "deploy"))
  help_text = subprocess.run([args.server, "--help"], capture_output=True, text=True,
                             check=True).stdout
  facts = ServerFacts(help_text)
  facts.read_registrations(os.path.join(REPO_ROOT, "server/metrics"))
  deployment_paths = {"/v2/health/ready", "/v2/health/live"}
  for _, obj in k8s_objects(documents):
    for container in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
      for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = container.get(probe, {}).get("httpGet", {}).get("path")
        if path:
          deployment_paths.add(path)
  workdir = tempfile.mkdtemp(prefix="check_deploy_")
  try:
    run_server(checker, args, facts, deployment_paths, workdir)
    check_metrics(checker, documents, facts)
    check_k8s(checker, documents, facts)
    check_prometheus(checker, documents, facts)
    check_compose_and_grafana(checker, documents, facts)
    check_dockerfile(checker, facts)
    check_nginx(checker, facts, workdir)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  print(f"check_deploy: {checker.passed} checks passed, {len(checker.failures)} failed, "
        f"{len(checker.skipped)} skipped")
  for failure in checker.failures:
    print(f"  FAILED: {failure}")
  return 1 if checker.failures else 0


if __name__ == "__main__":
  sys.exit(main())

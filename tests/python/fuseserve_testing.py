"""Shared helpers for fuseserve's Python end-to-end tests.

The tests talk to a real `fuseserve` process the way Triton's Python client
(`tritonclient.grpc`) does, without depending on it (REFERENCE.md §1.6):
inputs travel as `raw_input_contents` (C-order little-endian bytes), outputs
are read from `raw_output_contents[i]` for `outputs[i]`, and the channel
raises both message-size limits to INT32_MAX.

Environment (set by tests/python/CMakeLists.txt):
  FUSESERVE_BINARY     path of the server binary
  FUSESERVE_PROTO_DIR  directory holding grpc_service.proto and model_config.proto
  FUSESERVE_STARTUP_TIMEOUT_S  optional, seconds to wait for readiness (default 120)

A test file calls `run_tests()` instead of `unittest.main()`: it exits 77
(ctest's SKIP_RETURN_CODE) when every test was skipped, e.g. because this
interpreter lacks torch, so a missing dependency shows up as SKIPPED rather
than as a pass or a failure.
"""

import atexit
import importlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

try:
  import numpy as np
  HAVE_NUMPY = True
except ImportError:
  np = None
  HAVE_NUMPY = False

try:
  import grpc
  HAVE_GRPC = True
except ImportError:
  grpc = None
  HAVE_GRPC = False

# grpc_tools generates the stubs at run time unless FUSESERVE_PY_STUBS names a
# directory of stubs generated beforehand (a GPU host has grpcio but not
# grpc_tools; scripts/gpu/package.sh generates them with generate_stubs.py).
try:
  import grpc_tools.protoc  # noqa: F401  (used through `python -m`)
  HAVE_GRPC_TOOLS = True
except ImportError:
  HAVE_GRPC_TOOLS = False

try:
  import torch
  HAVE_TORCH = True
except ImportError:
  torch = None
  HAVE_TORCH = False

# The exit code ctest maps to SKIPPED (SKIP_RETURN_CODE in CMakeLists.txt).
SKIP_EXIT_CODE = 77

INT32_MAX = 2**31 - 1
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", INT32_MAX),
    ("grpc.max_receive_message_length", INT32_MAX),
]

FAMILY_CONV = "convtranspose_gelu_groupnorm"
FAMILY_GEMM = "gemm_bias_hardtanh_mish_groupnorm"
FAMILY_GROUPNORM = "groupnorm"

# SPEC.md §1.4: precision -> (max relative L2 error, max abs error) against a
# float64 reference on the same inputs.
TOLERANCES = {
    "fp32": (5e-6, 1e-4),
    "tf32": (1e-3, 1e-2),
}

_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
_DEFAULT_PROTO_DIR = os.path.normpath(os.path.join(_THIS_DIR, "..", "..", "proto"))


def missing_dependencies(need_torch):
  """Names of the Python modules this interpreter lacks for the tests."""
  missing = []
  if not HAVE_NUMPY:
    missing.append("numpy")
  if not HAVE_GRPC or not (HAVE_GRPC_TOOLS or os.environ.get("FUSESERVE_PY_STUBS")):
    missing.append("grpcio/grpc_tools")
  if need_torch and not HAVE_TORCH:
    missing.append("torch")
  return missing


def run_tests():
  """unittest.main() with ctest's skip convention (exit 77 if all skipped)."""
  program = unittest.main(exit=False, verbosity=2)
  result = program.result
  if not result.wasSuccessful():
    sys.exit(1)
  if result.testsRun > 0 and len(result.skipped) == result.testsRun:
    reasons = sorted({reason for _, reason in result.skipped})
    print("SKIPPED: " + "; ".join(reasons), file=sys.stderr)
    sys.exit(SKIP_EXIT_CODE)
  sys.exit(0)


# --------------------------------------------------------------------------
# Protocol stubs, generated at run time from the repository's protos.

# grpc.health.v1 as grpc/grpc defines it (src/proto/grpc/health/v1/
# health.proto); Debian's python3-grpcio ships no grpc_health module.
_HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus {
    UNKNOWN = 0;
    SERVING = 1;
    NOT_SERVING = 2;
    SERVICE_UNKNOWN = 3;
  }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""


class Protos:
  """The generated modules: service (grpc_service_pb2), service_grpc,
  config (model_config_pb2), health (health_pb2), health_grpc."""

  def __init__(self, modules):
    self.service = modules["grpc_service_pb2"]
    self.service_grpc = modules["grpc_service_pb2_grpc"]
    self.config = modules["model_config_pb2"]
    self.health = modules["health_pb2"]
    self.health_grpc = modules["health_pb2_grpc"]


_protos = None


def proto_dir():
  return os.environ.get("FUSESERVE_PROTO_DIR", _DEFAULT_PROTO_DIR)


def _run_protoc(include_dir, out_dir, files, system_protoc=False):
  if system_protoc:
    # Debian's protoc (3.21) writes builder-style modules that current
    # protobuf runtimes accept; grpc_tools' bundled compiler does not.
    command = ["protoc", "-I" + include_dir, "--python_out=" + out_dir,
               "--grpc_out=" + out_dir,
               "--plugin=protoc-gen-grpc=" + shutil.which("grpc_python_plugin")]
  else:
    command = [sys.executable, "-m", "grpc_tools.protoc", "-I" + include_dir,
               "--python_out=" + out_dir, "--grpc_python_out=" + out_dir]
  command += [os.path.join(include_dir, f) for f in files]
  done = subprocess.run(command, capture_output=True, text=True)
  if done.returncode != 0:
    raise RuntimeError("protoc failed (%s):\n%s%s" %
                       (" ".join(command), done.stdout, done.stderr))


def generate_stubs(out_dir, system_protoc=False):
  """Writes the Python stubs of our protos and grpc.health.v1 into out_dir,
  with grpc_tools, or with the system's protoc and grpc_python_plugin (stubs
  for another host's newer protobuf runtime)."""
  source_dir = proto_dir()
  for name in ("grpc_service.proto", "model_config.proto"):
    if not os.path.isfile(os.path.join(source_dir, name)):
      raise RuntimeError("%s not found in FUSESERVE_PROTO_DIR=%s" % (name, source_dir))
  health_dir = os.path.join(out_dir, "health_src")
  os.makedirs(health_dir, exist_ok=True)
  with open(os.path.join(health_dir, "health.proto"), "w") as f:
    f.write(_HEALTH_PROTO)
  _run_protoc(source_dir, out_dir, ["model_config.proto", "grpc_service.proto"], system_protoc)
  _run_protoc(health_dir, out_dir, ["health.proto"], system_protoc)


def protos():
  """Generates (once per process, unless FUSESERVE_PY_STUBS gives them) and
  imports the Python stubs."""
  global _protos
  if _protos is not None:
    return _protos
  out_dir = os.environ.get("FUSESERVE_PY_STUBS")
  if not out_dir:
    out_dir = tempfile.mkdtemp(prefix="fuseserve_stubs_")
    atexit.register(shutil.rmtree, out_dir, True)
    generate_stubs(out_dir)
  # The generated grpc_service_pb2 imports model_config_pb2 as a top-level
  # module, so the output directory itself must be importable.
  sys.path.insert(0, out_dir)
  names = ["model_config_pb2", "grpc_service_pb2", "grpc_service_pb2_grpc",
           "health_pb2", "health_pb2_grpc"]
  _protos = Protos({n: importlib.import_module(n) for n in names})
  return _protos


# --------------------------------------------------------------------------
# safetensors, written by hand (the `safetensors` package is not installed).

_SAFETENSORS_DTYPES = {
    "float32": "F32",
    "float64": "F64",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
}
_NUMPY_DTYPES = {v: k for k, v in _SAFETENSORS_DTYPES.items()}


def _to_numpy(value):
  if HAVE_TORCH and isinstance(value, torch.Tensor):
    return value.detach().cpu().contiguous().numpy()
  return np.asarray(value)


def safetensors_bytes(tensors, metadata=None):
  """The safetensors image of {name: array or torch.Tensor}.

  Layout (as safetensors.torch.save_file writes it): u64 little-endian header
  length N, N bytes of JSON header padded with spaces to a multiple of 8,
  then the tensors' raw little-endian bytes back to back; data_offsets are
  relative to the end of the header.
  """
  header = {"__metadata__": dict(metadata or {"format": "pt"})}
  chunks = []
  offset = 0
  for name in sorted(tensors):
    array = _to_numpy(tensors[name])
    dtype_name = array.dtype.name
    if dtype_name not in _SAFETENSORS_DTYPES:
      raise ValueError("tensor %s has unsupported dtype %s" % (name, dtype_name))
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    header[name] = {
        "dtype": _SAFETENSORS_DTYPES[dtype_name],
        "shape": [int(d) for d in array.shape],
        "data_offsets": [offset, offset + len(data)],
    }
    chunks.append(data)
    offset += len(data)
  header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
  header_bytes += b" " * (-len(header_bytes) % 8)
  return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def write_safetensors(path, tensors, metadata=None):
  with open(path, "wb") as f:
    f.write(safetensors_bytes(tensors, metadata))


def read_safetensors(path):
  """{name: numpy array} from a safetensors file (a check of the writer)."""
  with open(path, "rb") as f:
    image = f.read()
  (header_len,) = struct.unpack("<Q", image[:8])
  header = json.loads(image[8:8 + header_len].decode("utf-8"))
  data = image[8 + header_len:]
  result = {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    begin, end = entry["data_offsets"]
    dtype = np.dtype(_NUMPY_DTYPES[entry["dtype"]]).newbyteorder("<")
    result[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
  return result


# --------------------------------------------------------------------------
# Model repository.

def _pbtxt_string(value):
  return json.dumps(str(value))


def config_pbtxt(name, platform, max_batch_size, input_dims, output_dims,
                 parameters=None, dynamic_batching=None, instance_kind=None,
                 instance_count=None, input_name="input", output_name="output"):
  """config.pbtxt (Triton text format) for one fuseserve model.

  parameters: {key: value}, written as Triton's
    `parameters { key: "k" value: { string_value: "v" } }`.
  dynamic_batching: None (absent) or a dict of ModelDynamicBatching fields
    (`{}` for `dynamic_batching { }`).
  instance_kind: None (absent) or "KIND_CPU" / "KIND_GPU" / "KIND_AUTO".
  """
  def dims(values):
    return "[ " + ", ".join(str(int(d)) for d in values) + " ]"

  lines = [
      "name: %s" % _pbtxt_string(name),
      "platform: %s" % _pbtxt_string(platform),
      "max_batch_size: %d" % max_batch_size,
      "input [ { name: %s, data_type: TYPE_FP32, dims: %s } ]" % (
          _pbtxt_string(input_name), dims(input_dims)),
      "output [ { name: %s, data_type: TYPE_FP32, dims: %s } ]" % (
          _pbtxt_string(output_name), dims(output_dims)),
  ]
  if dynamic_batching is not None:
    fields = []
    for key, value in dynamic_batching.items():
      if key == "preferred_batch_size":
        fields.append("preferred_batch_size: %s" % dims(value))
      elif key == "default_queue_policy":
        fields.append("default_queue_policy { %s }" % " ".join(
            "%s: %s" % item for item in value.items()))
      else:
        fields.append("%s: %s" % (key, value))
    lines.append("dynamic_batching { %s }" % " ".join(fields))
  if instance_kind is not None or instance_count is not None:
    group = []
    if instance_count is not None:
      group.append("count: %d" % instance_count)
    if instance_kind is not None:
      group.append("kind: %s" % instance_kind)
    lines.append("instance_group [ { %s } ]" % ", ".join(group))
  for key, value in (parameters or {}).items():
    lines.append("parameters { key: %s value: { string_value: %s } }" % (
        _pbtxt_string(key), _pbtxt_string(value)))
  return "\n".join(lines) + "\n"


def add_model(repository, name, config_text, tensors, version=1):
  """Writes <repository>/<name>/config.pbtxt and <version>/model.safetensors."""
  model_dir = os.path.join(repository, name)
  version_dir = os.path.join(model_dir, str(version))
  os.makedirs(version_dir, exist_ok=True)
  with open(os.path.join(model_dir, "config.pbtxt"), "w") as f:
    f.write(config_text)
  write_safetensors(os.path.join(version_dir, "model.safetensors"), tensors)
  return model_dir


# --------------------------------------------------------------------------
# The server process.

def server_binary():
  path = os.environ.get("FUSESERVE_BINARY", "")
  if not path:
    raise RuntimeError("FUSESERVE_BINARY is not set (run through ctest, or export it)")
  if not os.access(path, os.X_OK):
    raise RuntimeError("FUSESERVE_BINARY=%s is not an executable file" % path)
  return path


def _tail(path, limit=8000):
  try:
    with open(path, "r", errors="replace") as f:
      text = f.read()
  except OSError:
    return "<no output>"
  return text[-limit:]


class ServerProcess:
  """One fuseserve process on ephemeral ports over a test-owned repository.

  start() returns once the port file exists and ServerLive answers, plus
  ServerReady when `expect_ready` (a repository holding a broken model may
  legitimately report not-ready). stop() sends SIGTERM and returns the exit
  code; it always leaves no process behind.
  """

  def __init__(self, repository, work_dir, expect_ready=True, extra_args=()):
    self.repository = repository
    self.work_dir = work_dir
    self.expect_ready = expect_ready
    self.name = "fuseserve"  # names the process in output()
    self.extra_args = list(extra_args)
    self.command = []
    self.process = None
    self.grpc_port = None
    self.metrics_port = None
    self.channel = None
    self.stub = None
    self.health_stub = None
    self.stdout_path = os.path.join(work_dir, "server.stdout")
    self.stderr_path = os.path.join(work_dir, "server.stderr")
    self.port_file = os.path.join(work_dir, "ports.json")

  def output(self):
    return ("--- %s stderr ---\n%s\n--- %s stdout ---\n%s" %
            (self.name, _tail(self.stderr_path), self.name, _tail(self.stdout_path)))

  def _fail(self, what):
    self.kill()
    raise RuntimeError("%s\ncommand: %s\n%s" % (what, " ".join(self.command), self.output()))

  def start(self):
    p = protos()
    timeout_s = float(os.environ.get("FUSESERVE_STARTUP_TIMEOUT_S", "120"))
    self.command = [server_binary(), "--model-repository=" + self.repository,
                    "--grpc-port=0", "--metrics-port=0",
                    "--port-file=" + self.port_file] + self.extra_args
    with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
      self.process = subprocess.Popen(self.command, stdout=out, stderr=err,
                                      stdin=subprocess.DEVNULL)
    atexit.register(self.kill)
    deadline = time.monotonic() + timeout_s
    ports = None
    while ports is None:
      if self.process.poll() is not None:
        self._fail("fuseserve exited with code %d before writing %s" %
                   (self.process.returncode, self.port_file))
      if time.monotonic() > deadline:
        self._fail("fuseserve did not write %s within %.0f s" % (self.port_file, timeout_s))
      try:
        with open(self.port_file) as f:
          ports = json.load(f)
      except (OSError, ValueError):
        time.sleep(0.05)
    try:
      self.grpc_port = int(ports["grpc_port"])
      self.metrics_port = int(ports["metrics_port"])
    except (KeyError, TypeError, ValueError):
      self._fail("port file %s has unexpected content %r" % (self.port_file, ports))
    if self.grpc_port <= 0 or self.metrics_port <= 0:
      self._fail("port file %s names port 0: %r" % (self.port_file, ports))
    self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port,
                                         options=CHANNEL_OPTIONS)
    self.stub = p.service_grpc.GRPCInferenceServiceStub(self.channel)
    self.health_stub = p.health_grpc.HealthStub(self.channel)
    last_error = "no answer yet"
    while True:
      if self.process.poll() is not None:
        self._fail("fuseserve exited with code %d while starting" % self.process.returncode)
      if time.monotonic() > deadline:
        self._fail("fuseserve not %s within %.0f s (last: %s)" % (
            "ready" if self.expect_ready else "live", timeout_s, last_error))
      try:
        live = self.stub.ServerLive(p.service.ServerLiveRequest(), timeout=5).live
        ready = self.stub.ServerReady(p.service.ServerReadyRequest(), timeout=5).ready
        if live and (ready or not self.expect_ready):
          return self
        last_error = "live=%s ready=%s" % (live, ready)
      except grpc.RpcError as e:
        last_error = "%s: %s" % (e.code(), e.details())
      time.sleep(0.05)

  def stop(self, timeout_s=60):
    """SIGTERM, then the exit code (None if it had to be killed)."""
    if self.channel is not None:
      self.channel.close()
      self.channel = None
    if self.process is None or self.process.poll() is not None:
      return None if self.process is None else self.process.returncode
    self.process.send_signal(signal.SIGTERM)
    try:
      return self.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      self.kill()
      return None

  def kill(self):
    if self.process is not None and self.process.poll() is None:
      self.process.kill()
      self.process.wait()


class ServerTestCase(unittest.TestCase):
  """A TestCase class that serves one repository for all of its tests.

  Subclasses implement `populate_repository(cls, repository)` and may set
  `expect_ready = False`. tearDownClass asserts that SIGTERM ends the server
  with exit code 0.
  """

  expect_ready = True
  server = None

  @classmethod
  def populate_repository(cls, repository):
    raise NotImplementedError

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.work_dir = tempfile.mkdtemp(prefix="fuseserve_test_")
    cls.repository = os.path.join(cls.work_dir, "models")
    os.mkdir(cls.repository)
    try:
      cls.populate_repository(cls.repository)
      cls.p = protos()
      cls.server = ServerProcess(cls.repository, cls.work_dir, expect_ready=cls.expect_ready)
      cls.server.start()
    except BaseException:
      shutil.rmtree(cls.work_dir, ignore_errors=True)
      raise
    cls.stub = cls.server.stub
    cls.health_stub = cls.server.health_stub

  @classmethod
  def tearDownClass(cls):
    server = cls.server
    cls.server = None
    try:
      if server is not None:
        code = server.stop()
        if code != 0:
          raise AssertionError("fuseserve did not exit 0 on SIGTERM (exit code %s)\n%s" %
                               (code, server.output()))
    finally:
      shutil.rmtree(cls.work_dir, ignore_errors=True)
      super().tearDownClass()

  def server_output(self):
    return self.server.output() if self.server is not None else ""


# --------------------------------------------------------------------------
# Inference as tritonclient.grpc performs it.

def infer_request(model, array, request_id="", input_name="input",
                  output_names=("output",), model_version=""):
  """The ModelInferRequest tritonclient builds for one FP32 input."""
  p = protos()
  array = np.ascontiguousarray(array, dtype=np.float32)
  request = p.service.ModelInferRequest(model_name=model, model_version=model_version,
                                        id=request_id)
  tensor = request.inputs.add()
  tensor.name = input_name
  tensor.datatype = "FP32"
  tensor.shape.extend(int(d) for d in array.shape)
  for name in output_names:
    request.outputs.add().name = name
  request.raw_input_contents.append(array.astype("<f4", copy=False).tobytes())
  return request


def decode_output(response, name="output"):
  """outputs[i] named `name`, decoded from raw_output_contents[i] (as
  tritonclient's InferResult.as_numpy does)."""
  for index, output in enumerate(response.outputs):
    if output.name != name:
      continue
    if output.datatype != "FP32":
      raise AssertionError("output %s has datatype %r, expected FP32" % (name, output.datatype))
    if index >= len(response.raw_output_contents):
      raise AssertionError("output %s (index %d) has no raw_output_contents entry (%d entries)"
                           % (name, index, len(response.raw_output_contents)))
    raw = response.raw_output_contents[index]
    shape = [int(d) for d in output.shape]
    expected_bytes = 4 * int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected_bytes:
      raise AssertionError("output %s has shape %s but %d raw bytes (expected %d)"
                           % (name, shape, len(raw), expected_bytes))
    return np.frombuffer(raw, dtype="<f4").reshape(shape)
  raise AssertionError("response has no output %r (outputs: %s)"
                       % (name, [o.name for o in response.outputs]))


def infer(stub, model, array, request_id="", timeout=120, **kwargs):
  """Sends `array` as tritonclient would and returns (output array, response)."""
  response = stub.ModelInfer(infer_request(model, array, request_id, **kwargs), timeout=timeout)
  return decode_output(response), response


# --------------------------------------------------------------------------
# Accuracy (SPEC.md §1.4).

def rel_l2(y, ref):
  y = np.asarray(y, dtype=np.float64)
  ref = np.asarray(ref, dtype=np.float64)
  denom = np.linalg.norm(ref.ravel())
  diff = np.linalg.norm((y - ref).ravel())
  if denom == 0.0:
    return 0.0 if diff == 0.0 else float("inf")
  return float(diff / denom)


def max_abs(y, ref):
  y = np.asarray(y, dtype=np.float64)
  ref = np.asarray(ref, dtype=np.float64)
  if y.size == 0:
    return 0.0
  return float(np.max(np.abs(y - ref)))


def accuracy_problem(y, ref, precision):
  """None when y meets `precision`'s tolerance against ref, else a message."""
  y = np.asarray(y)
  ref = np.asarray(ref)
  if tuple(y.shape) != tuple(ref.shape):
    return "shape %s, expected %s" % (list(y.shape), list(ref.shape))
  if not np.all(np.isfinite(y)):
    return "%d non-finite values" % int(np.sum(~np.isfinite(y)))
  rel_tol, abs_tol = TOLERANCES[precision]
  rel = rel_l2(y, ref)
  err = max_abs(y, ref)
  if rel <= rel_tol and err <= abs_tol:
    return None
  return ("%s tolerance missed: rel L2 %.3g (limit %.0e), max abs %.3g (limit %.0e)"
          % (precision, rel, rel_tol, err, abs_tol))

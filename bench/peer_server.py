#!/usr/bin/env python3
"""The peer fuseserve is measured against: the server a PyTorch user would
write instead of deploying fuseserve.

Python grpcio serving the KServe v2 service (inference.GRPCInferenceService,
our proto/grpc_service.proto) over the same model repository fuseserve reads
(<repository>/<model>/config.pbtxt + <version>/model.safetensors; the latest
version of each model is served, fuseserve's default version policy):

- each model is the user's own nn.Module of its family (SPEC.md §1; the
  classes of tests/python/parity_test.py), its weights read from the
  safetensors file by state_dict name (strict: a missing, extra or
  mis-shaped tensor fails that model's load, and the other models still
  load);
- PyTorch eager in float32 under torch.inference_mode, on the GPU when there
  is one. The math is PyTorch's default (TF32 for cuDNN convolutions, full
  float32 matmuls), which is also fuseserve's default precision per family;
  a model's `precision` parameter can only raise it (one `fp32` conv model
  turns cuDNN TF32 off for all, since the flags are process-wide);
- no dynamic batching: every request runs alone, at most --max-concurrency
  at a time (a thread pool), each request's tensor copied to the device and
  back synchronously on PyTorch's default stream;
- raw_input_contents (or typed fp32_contents) in, one raw_output_contents
  entry out; requests are validated against config.pbtxt and answered with
  the status codes of SPEC.md §3.

RPCs: ServerLive, ServerReady, ServerMetadata, ModelReady, ModelMetadata,
ModelConfig (what `fuseserve-cli bench` and perf_analyzer read),
ModelStatistics (success; queue = waiting for a worker, measured by the
asyncio flavour only, since grpcio's thread pool queues before the handler
runs; compute_input = decode + host-to-device copy; compute_infer = forward
+ device-to-host copy; compute_output = building the answer) and ModelInfer.
The others answer UNIMPLEMENTED.

Usage:
  peer_server.py --model-repository DIR [--port 8001] [--address 0.0.0.0]
      [--port-file FILE] [--device auto|cuda|cpu] [--max-concurrency N]
      [--server threads|aio] [--cudnn-benchmark]

The gRPC stubs come from FUSESERVE_PY_STUBS when set (generated beforehand
by tests/python/generate_stubs.py, for a Python without grpc_tools), else
they are generated at start from proto/ with grpc_tools. --port-file gets
{"grpc_port": P} once every model has loaded and the server is serving.
SIGTERM/SIGINT: stop accepting, finish running requests, exit 0.
"""

import argparse
import asyncio
import concurrent.futures
import faulthandler
import json
import logging
import math
import os
import signal
import struct
import sys
import threading
import time
import warnings

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))

import fuseserve_testing as ft  # noqa: E402  (stubs and channel options)
import grpc  # noqa: E402
from google.protobuf import text_format  # noqa: E402
# The user's modules (SPEC.md §1; attribute names give the state_dict
# names): the very ones the parity suite holds fuseserve's answers to.
from parity_test import (ConvTransposeGeluGroupNorm,  # noqa: E402
                         GemmBiasHardtanhMishGroupNorm, GroupNormModel)
import torch  # noqa: E402

SERVER_NAME = "peer_server"
SERVER_VERSION = "1"

FAMILY_CONV = ft.FAMILY_CONV
FAMILY_GEMM = ft.FAMILY_GEMM
FAMILY_GROUPNORM = ft.FAMILY_GROUPNORM

# torch.frombuffer over the request's immutable bytes: the tensor is only
# read (copied to the device, or read by the CPU forward), never written.
warnings.filterwarnings("ignore", message="The given buffer is not writable")


class LoadError(Exception):
  """A model that cannot be served; the message says why."""


class Parameters:
  """Typed reads of config.pbtxt's `parameters` (string values)."""

  def __init__(self, config, known):
    self.values = {key: value.string_value for key, value in config.parameters.items()}
    unknown = sorted(set(self.values) - set(known))
    if unknown:
      raise LoadError("unknown parameter \"%s\" for platform %s" % (unknown[0], config.platform))

  def integer(self, key, default=None, minimum=1):
    text = self.values.get(key)
    if text is None:
      if default is None:
        raise LoadError("parameter \"%s\" is required" % key)
      return default
    try:
      value = int(text)
    except ValueError:
      value = minimum - 1
    if value < minimum:
      raise LoadError("parameter \"%s\" must be an integer >= %d, got \"%s\"" %
                      (key, minimum, text))
    return value

  def number(self, key, default):
    text = self.values.get(key)
    if text is None:
      return default
    try:
      value = float(text)
    except ValueError:
      value = math.nan
    if not math.isfinite(value):
      raise LoadError("parameter \"%s\" must be a finite number, got \"%s\"" % (key, text))
    return value

  def precision(self, default):
    value = self.values.get("precision", default)
    if value not in ("fp32", "tf32"):
      raise LoadError("parameter \"precision\" must be fp32 or tf32, got \"%s\"" % value)
    return value


def build_module(config):
  """(module, precision of its matrix part or None) for a config's platform."""
  if config.platform == FAMILY_CONV:
    p = Parameters(config, ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                            "output_padding", "num_groups", "eps", "precision"))
    module = ConvTransposeGeluGroupNorm(
        p.integer("in_channels"), p.integer("out_channels"), p.integer("kernel_size"),
        p.integer("stride", 1), p.integer("padding", 0, minimum=0),
        p.integer("output_padding", 0, minimum=0), p.integer("num_groups"),
        p.number("eps", 1e-5))
    return module, p.precision("tf32")
  if config.platform == FAMILY_GEMM:
    p = Parameters(config, ("in_features", "out_features", "num_groups", "hardtanh_min",
                            "hardtanh_max", "eps", "precision"))
    module = GemmBiasHardtanhMishGroupNorm(
        p.integer("in_features"), p.integer("out_features"), p.integer("num_groups"),
        p.number("hardtanh_min", -1.0), p.number("hardtanh_max", 1.0), p.number("eps", 1e-5))
    return module, p.precision("fp32")
  if config.platform == FAMILY_GROUPNORM:
    p = Parameters(config, ("num_channels", "num_groups", "eps"))
    return GroupNormModel(p.integer("num_channels"), p.integer("num_groups"),
                          p.number("eps", 1e-5)), None
  raise LoadError("unknown platform \"%s\"" % config.platform)


# --------------------------------------------------------------------------
# safetensors (the `safetensors` package is not on every host): u64
# little-endian header length N, N bytes of JSON header, then the raw data;
# data_offsets are relative to the end of the header.

_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "F64": torch.float64}


def load_safetensors(path):
  """{name: CPU tensor}; LoadError naming the tensor for a malformed file."""
  with open(path, "rb") as f:
    image = bytearray(f.read())
  if len(image) < 8:
    raise LoadError("%s: shorter than the 8-byte header length" % path)
  (header_len,) = struct.unpack_from("<Q", image)
  if header_len > len(image) - 8:
    raise LoadError("%s: header length %d runs past the end of the file" % (path, header_len))
  try:
    header = json.loads(image[8:8 + header_len].decode("utf-8"))
  except (UnicodeDecodeError, ValueError) as e:
    raise LoadError("%s: header is not JSON: %s" % (path, e))
  if not isinstance(header, dict):
    raise LoadError("%s: header is not a JSON object" % path)
  data_start = 8 + header_len
  tensors = {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    try:
      dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
      shape = [int(d) for d in entry["shape"]]
      begin, end = (int(v) for v in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as e:
      raise LoadError("%s: tensor \"%s\" has a malformed or unsupported entry %r (%s)" %
                      (path, name, entry, e))
    count = math.prod(shape)
    item_size = torch.tensor([], dtype=dtype).element_size()
    if begin < 0 or end != begin + count * item_size or data_start + end > len(image):
      raise LoadError("%s: tensor \"%s\" has data_offsets [%d, %d] that do not fit its shape %s "
                      "or the file" % (path, name, begin, end, shape))
    if count == 0:
      tensors[name] = torch.empty(shape, dtype=dtype)
    else:
      tensors[name] = torch.frombuffer(image, dtype=dtype, count=count,
                                       offset=data_start + begin).reshape(shape)
  return tensors


# --------------------------------------------------------------------------
# The repository.

class RpcError(Exception):
  """An answer with a non-OK gRPC status."""

  def __init__(self, code, message):
    super().__init__(message)
    self.code = code
    self.message = message


class Statistics:
  """Triton's cumulative per-model counters (ModelStatistics), thread-safe."""

  FIELDS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")

  def __init__(self):
    self.lock = threading.Lock()
    self.counts = {field: 0 for field in self.FIELDS}
    self.ns = {field: 0 for field in self.FIELDS}
    self.inference_count = 0
    self.execution_count = 0
    self.last_inference_ms = 0

  def record(self, durations_ns, batch=0):
    """durations_ns: {field: ns} of one request; batch > 0 for an execution."""
    with self.lock:
      for field, ns in durations_ns.items():
        self.counts[field] += 1
        self.ns[field] += ns
      if batch > 0:
        self.inference_count += batch
        self.execution_count += 1
        self.last_inference_ms = int(time.time() * 1000)

  def fill(self, stats):
    with self.lock:
      stats.inference_count = self.inference_count
      stats.execution_count = self.execution_count
      stats.last_inference = self.last_inference_ms
      for field in self.FIELDS:
        duration = getattr(stats.inference_stats, field)
        duration.count = self.counts[field]
        duration.ns = self.ns[field]


class Model:
  """One loaded model: config, module on the device, full I/O dims."""

  def __init__(self, name, version, config, module, precision, device):
    self.name = name
    self.version = version
    self.config = config
    self.module = module
    self.precision = precision  # of the matrix part; None for groupnorm
    self.device = device
    self.input = config.input[0]
    self.output = config.output[0]
    batch = [-1] if config.max_batch_size > 0 else []
    self.full_input_dims = batch + list(self.input.dims)
    self.full_output_dims = batch + list(self.output.dims)
    self.stats = Statistics()

  def check_shape(self, shape):
    def described():
      return "[%s]" % ", ".join(str(d) for d in shape)
    if len(shape) != len(self.full_input_dims):
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "input \"%s\" has shape %s of rank %d, model \"%s\" expects rank %d" %
                     (self.input.name, described(), len(shape), self.name,
                      len(self.full_input_dims)))
    for index, (dim, expected) in enumerate(zip(shape, self.full_input_dims)):
      if dim < 1:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       "input \"%s\" dimension %d is %d; every dimension must be >= 1" %
                       (self.input.name, index, dim))
      if expected != -1 and dim != expected:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       "input \"%s\" dimension %d is %d, model \"%s\" expects %d" %
                       (self.input.name, index, dim, self.name, expected))
    if self.config.max_batch_size > 0 and shape[0] > self.config.max_batch_size:
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "batch size %d exceeds max_batch_size %d of model \"%s\"" %
                     (shape[0], self.config.max_batch_size, self.name))


def _latest_version(model_dir):
  versions = [int(entry) for entry in os.listdir(model_dir)
              if entry.isdigit() and int(entry) > 0 and
              os.path.isdir(os.path.join(model_dir, entry))]
  if not versions:
    raise LoadError("no version directory (a positive integer) in %s" % model_dir)
  return max(versions)


def _check_io(config):
  if len(config.input) != 1 or len(config.output) != 1:
    raise LoadError("expected exactly one input and one output, got %d and %d" %
                    (len(config.input), len(config.output)))
  fp32 = ft.protos().config.DataType.Value("TYPE_FP32")
  for tensor in (config.input[0], config.output[0]):
    if tensor.data_type != fp32:
      raise LoadError("tensor \"%s\" must be TYPE_FP32" % tensor.name)
  if config.max_batch_size < 0:
    raise LoadError("max_batch_size must be >= 0, got %d" % config.max_batch_size)


def load_model(repository, name, device):
  """A Model, or LoadError saying why not."""
  model_dir = os.path.join(repository, name)
  config = ft.protos().config.ModelConfig()
  config_path = os.path.join(model_dir, "config.pbtxt")
  try:
    with open(config_path) as f:
      text_format.Parse(f.read(), config)
  except (OSError, text_format.ParseError) as e:
    raise LoadError("%s: %s" % (config_path, e))
  if config.name and config.name != name:
    raise LoadError("%s: name \"%s\" differs from the directory name" % (config_path, config.name))
  config.name = name
  _check_io(config)
  version = _latest_version(model_dir)
  module, precision = build_module(config)
  weights_path = os.path.join(model_dir, str(version), "model.safetensors")
  try:
    tensors = load_safetensors(weights_path)
  except OSError as e:
    raise LoadError("%s: %s" % (weights_path, e))
  try:
    module.load_state_dict(tensors, strict=True)
  except RuntimeError as e:
    raise LoadError("%s: %s" % (weights_path, e))
  try:
    module = module.to(device).eval()
  except RuntimeError as e:
    raise LoadError("cannot move the weights to %s: %s" % (device, e))
  return Model(name, str(version), config, module, precision, device)


def set_math_flags(models):
  """TF32 only where every model of the family allows it (never lowers a
  model's precision); PyTorch's defaults for the default repository. The
  flags are read when an op runs, so setting them after loading is enough."""
  conv = [m.precision for m in models if m.config.platform == FAMILY_CONV]
  gemm = [m.precision for m in models if m.config.platform == FAMILY_GEMM]
  torch.backends.cudnn.allow_tf32 = all(p == "tf32" for p in conv)
  torch.backends.cuda.matmul.allow_tf32 = bool(gemm) and all(p == "tf32" for p in gemm)
  logging.info("TF32: cuDNN convolutions %s, matmuls %s",
               torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)


# --------------------------------------------------------------------------
# The service, independent of the server flavour (threads or asyncio).

def _elapsed_ns(start_ns):
  return time.perf_counter_ns() - start_ns


class PeerService:
  """The RPCs as plain functions request -> response, raising RpcError."""

  def __init__(self, repository, device):
    self.p = ft.protos()
    self.device = device
    self.models = {}
    self.failures = {}
    for name in sorted(os.listdir(repository)):
      if not os.path.isdir(os.path.join(repository, name)):
        continue
      try:
        self.models[name] = load_model(repository, name, device)
        logging.info("loaded model %s version %s (%s) on %s", name, self.models[name].version,
                     self.models[name].config.platform, device)
      except LoadError as e:
        self.failures[name] = str(e)
        logging.error("model %s failed to load: %s", name, e)
    set_math_flags(self.models.values())

  def find(self, name, version):
    model = self.models.get(name)
    if model is None:
      if name in self.failures:
        raise RpcError(grpc.StatusCode.UNAVAILABLE,
                       "model \"%s\" is not loaded: %s" % (name, self.failures[name]))
      raise RpcError(grpc.StatusCode.NOT_FOUND, "unknown model \"%s\"" % name)
    if version and version != model.version:
      raise RpcError(grpc.StatusCode.NOT_FOUND,
                     "model \"%s\" has no version \"%s\" (serving version %s)" %
                     (name, version, model.version))
    return model

  def ServerLive(self, request):
    return self.p.service.ServerLiveResponse(live=True)

  def ServerReady(self, request):
    return self.p.service.ServerReadyResponse(ready=True)

  def ServerMetadata(self, request):
    return self.p.service.ServerMetadataResponse(
        name=SERVER_NAME, version=SERVER_VERSION,
        extensions=["model_configuration", "statistics"])

  def ModelReady(self, request):
    try:
      self.find(request.name, request.version)
    except RpcError:
      return self.p.service.ModelReadyResponse(ready=False)
    return self.p.service.ModelReadyResponse(ready=True)

  def ModelMetadata(self, request):
    model = self.find(request.name, request.version)
    response = self.p.service.ModelMetadataResponse(
        name=model.name, versions=[model.version], platform=model.config.platform)
    for tensors, tensor, dims in ((response.inputs, model.input, model.full_input_dims),
                                  (response.outputs, model.output, model.full_output_dims)):
      tensors.add(name=tensor.name, datatype="FP32", shape=dims)
    return response

  def ModelConfig(self, request):
    model = self.find(request.name, request.version)
    return self.p.service.ModelConfigResponse(config=model.config)

  def ModelStatistics(self, request):
    if request.name:
      models = [self.find(request.name, request.version)]
    else:
      models = [self.models[name] for name in sorted(self.models)]
    response = self.p.service.ModelStatisticsResponse()
    for model in models:
      stats = response.model_stats.add(name=model.name, version=model.version)
      model.stats.fill(stats)
    return response

  def ModelInfer(self, request, queued_ns=0):
    """queued_ns: how long the request waited for a worker before this call."""
    start_ns = time.perf_counter_ns()
    model = self.find(request.model_name, request.model_version)
    try:
      response = self._infer(model, request, start_ns, queued_ns)
    except RpcError:
      model.stats.record({"fail": _elapsed_ns(start_ns) + queued_ns})
      raise
    return response

  def _decode(self, model, request):
    """(input shape, raw bytes or typed values) after every check."""
    if len(request.inputs) != 1:
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "model \"%s\" expects 1 input (\"%s\"), got %d" %
                     (model.name, model.input.name, len(request.inputs)))
    tensor = request.inputs[0]
    if tensor.name != model.input.name:
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "unknown input \"%s\" for model \"%s\" (expects \"%s\")" %
                     (tensor.name, model.name, model.input.name))
    if tensor.datatype != "FP32":
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "input \"%s\" has datatype %s, model \"%s\" expects FP32" %
                     (tensor.name, tensor.datatype, model.name))
    shape = [int(d) for d in tensor.shape]
    model.check_shape(shape)
    for requested in request.outputs:
      if requested.name != model.output.name:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       "unknown output \"%s\" requested from model \"%s\" (has \"%s\")" %
                       (requested.name, model.name, model.output.name))
    elements = math.prod(shape)
    if request.raw_input_contents:
      if len(request.raw_input_contents) != 1:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       "%d raw_input_contents entries for 1 input" %
                       len(request.raw_input_contents))
      raw = request.raw_input_contents[0]
      if len(raw) != 4 * elements:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                       "input \"%s\" has %d bytes of raw contents, expected %d for FP32 shape %s"
                       % (tensor.name, len(raw), 4 * elements, shape))
      return shape, raw
    values = tensor.contents.fp32_contents
    if len(values) != elements:
      raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                     "input \"%s\" has %d fp32_contents values, expected %d for shape %s" %
                     (tensor.name, len(values), elements, shape))
    return shape, values

  def _infer(self, model, request, start_ns, queued_ns):
    shape, data = self._decode(model, request)
    try:
      with torch.inference_mode():
        if isinstance(data, bytes):
          x = torch.frombuffer(data, dtype=torch.float32)
        else:
          x = torch.tensor(data, dtype=torch.float32)
        x = x.reshape(shape).to(model.device)
        input_ns = _elapsed_ns(start_ns)
        y = model.module(x).cpu()
        infer_ns = _elapsed_ns(start_ns) - input_ns
    except RuntimeError as e:
      raise RpcError(grpc.StatusCode.INTERNAL, "model \"%s\" failed: %s" % (model.name, e))
    response = self.p.service.ModelInferResponse(model_name=model.name,
                                                 model_version=model.version, id=request.id)
    response.outputs.add(name=model.output.name, datatype="FP32", shape=list(y.shape))
    response.raw_output_contents.append(y.numpy().tobytes())
    total_ns = _elapsed_ns(start_ns)
    model.stats.record({"success": total_ns + queued_ns, "queue": queued_ns,
                        "compute_input": input_ns, "compute_infer": infer_ns,
                        "compute_output": total_ns - input_ns - infer_ns},
                       batch=shape[0] if model.config.max_batch_size > 0 else 1)
    return response


RPCS = ("ServerLive", "ServerReady", "ServerMetadata", "ModelReady", "ModelMetadata",
        "ModelConfig", "ModelStatistics", "ModelInfer")


def threaded_servicer(service):
  """A sync servicer: grpcio's thread pool runs each RPC on a worker."""
  base = ft.protos().service_grpc.GRPCInferenceServiceServicer

  def handler(function):
    def handle(self, request, context):
      try:
        return function(request)
      except RpcError as e:
        context.abort(e.code, e.message)
    return handle

  return type("ThreadedServicer", (base,),
              {rpc: handler(getattr(service, rpc)) for rpc in RPCS})()


def asyncio_servicer(service, executor):
  """An asyncio servicer: the event loop does the gRPC work, ModelInfer runs
  on the executor's threads (PyTorch releases the GIL while it computes)."""
  base = ft.protos().service_grpc.GRPCInferenceServiceServicer

  def handler(rpc):
    function = getattr(service, rpc)

    async def handle(self, request, context):
      try:
        if rpc != "ModelInfer":
          return function(request)
        submitted_ns = time.perf_counter_ns()
        return await asyncio.get_running_loop().run_in_executor(
            executor, lambda: function(request, _elapsed_ns(submitted_ns)))
      except RpcError as e:
        await context.abort(e.code, e.message)
    return handle

  return type("AsyncioServicer", (base,), {rpc: handler(rpc) for rpc in RPCS})()


# SIGTERM: RPCs in flight get this long to finish.
SHUTDOWN_GRACE_S = 30
# A peer still running this long after SIGTERM prints every thread's stack to
# stderr (the bench's harness kills it at 60 s): after some GPU runs the peer
# has failed to exit, and where it waits was never seen.
STACKS_AFTER_S = 45


def begin_shutdown():
  logging.info("SIGTERM: stopping (grace %d s)", SHUTDOWN_GRACE_S)
  faulthandler.dump_traceback_later(STACKS_AFTER_S, exit=False)


def write_port_file(path, port):
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    json.dump({"grpc_port": port}, f)
  os.replace(temporary, path)


def serve_threads(service, args):
  executor = concurrent.futures.ThreadPoolExecutor(max_workers=args.max_concurrency)
  server = grpc.server(executor, options=ft.CHANNEL_OPTIONS)
  ft.protos().service_grpc.add_GRPCInferenceServiceServicer_to_server(
      threaded_servicer(service), server)
  port = server.add_insecure_port("%s:%d" % (args.address, args.port))
  server.start()
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  announce(args, port)
  # A timed wait: Python runs a signal's handler in the main thread, but the
  # kernel may deliver SIGTERM to any thread (CUDA's and gRPC's included), and
  # then an untimed wait is never interrupted to run it. The peer's missing
  # "SIGTERM: stopping" line on GPU hosts is the likely sign of it.
  while not stop.wait(timeout=0.2):
    pass
  begin_shutdown()
  server.stop(grace=SHUTDOWN_GRACE_S).wait()
  logging.info("gRPC server stopped")


async def serve_asyncio(service, args):
  executor = concurrent.futures.ThreadPoolExecutor(max_workers=args.max_concurrency)
  server = grpc.aio.server(options=ft.CHANNEL_OPTIONS)
  ft.protos().service_grpc.add_GRPCInferenceServiceServicer_to_server(
      asyncio_servicer(service, executor), server)
  port = server.add_insecure_port("%s:%d" % (args.address, args.port))
  await server.start()
  stop = asyncio.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    asyncio.get_running_loop().add_signal_handler(signum, stop.set)
  announce(args, port)
  await stop.wait()
  begin_shutdown()
  await server.stop(grace=SHUTDOWN_GRACE_S)
  logging.info("gRPC server stopped")
  executor.shutdown()


def announce(args, port):
  if port == 0:
    raise SystemExit("peer_server: cannot listen on %s:%d" % (args.address, args.port))
  logging.info("serving on %s:%d (%s, max concurrency %d)", args.address, port, args.server,
               args.max_concurrency)
  if args.port_file:
    write_port_file(args.port_file, port)


def parse_args(argv):
  parser = argparse.ArgumentParser(
      description="KServe v2 gRPC server of fuseserve's model families in PyTorch eager "
                  "(the peer of bench/serving_bench.py).")
  parser.add_argument("--model-repository", required=True)
  parser.add_argument("--address", default="0.0.0.0")
  parser.add_argument("--port", type=int, default=8001, help="0 = any free port")
  parser.add_argument("--port-file", default="",
                      help="written with {\"grpc_port\": P} once serving")
  parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                      help="auto = cuda when PyTorch sees a GPU")
  parser.add_argument("--max-concurrency", type=int, default=16,
                      help="requests computed at once (worker threads)")
  parser.add_argument("--server", choices=("threads", "aio"), default="threads",
                      help="grpcio's thread-pool server, or grpc.aio with an executor")
  parser.add_argument("--cudnn-benchmark", action="store_true",
                      help="torch.backends.cudnn.benchmark = True (autotuned convolutions)")
  args = parser.parse_args(argv)
  if args.max_concurrency < 1:
    parser.error("--max-concurrency must be >= 1")
  return args


def main(argv):
  logging.basicConfig(level=logging.INFO, format="%(asctime)s peer_server %(message)s")
  args = parse_args(argv)
  if not os.path.isdir(args.model_repository):
    raise SystemExit("peer_server: --model-repository %s is not a directory" %
                     args.model_repository)
  if args.device == "auto":
    args.device = "cuda" if torch.cuda.is_available() else "cpu"
  torch.backends.cudnn.benchmark = args.cudnn_benchmark
  service = PeerService(args.model_repository, torch.device(args.device))
  if args.server == "threads":
    serve_threads(service, args)
  else:
    asyncio.run(serve_asyncio(service, args))
  logging.info("exiting")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/: small valid inputs and
near-valid ones (one rule broken each), so that the fuzzers start next to the
accepting paths. Deterministic; rerun after changing a fixture in
fuzz_models.cc and commit the result.

Needs /usr/bin/python3 with numpy, and protoc (protobuf-compiler) to encode
the ModelInfer requests.

Usage: fuzz/make_corpus.py
"""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

FUZZ_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(FUZZ_DIR)
CORPUS = os.path.join(FUZZ_DIR, "corpus")


def write(target, name, data):
  directory = os.path.join(CORPUS, target)
  os.makedirs(directory, exist_ok=True)
  if isinstance(data, str):
    data = data.encode()
  with open(os.path.join(directory, name), "wb") as f:
    f.write(data)


# --- infer_request_decoder: one byte choosing the model, then the request ---

# (selector, full input shape of a valid request, extra dims that still pass
# the config) for the models of fuzz_models.cc, in their order.
MODELS = [
    (0, [2, 4, 3, 5]),   # groupnorm, batching
    (1, [2, 4, 3]),      # groupnorm, no batch dimension
    (2, [3, 8]),         # gemm
    (3, [1, 2, 4, 3]),   # conv transpose
]


def text_bytes(data):
  return "".join("\\%03o" % b for b in data)


def request_text(shape, datatype="FP32", name="input", raw=True, values=None,
                 extra="", raw_entries=1, outputs=("output",)):
  count = int(np.prod(shape))
  if values is None:
    values = [((i * 37) % 11) / 4.0 - 1.0 for i in range(count)]
  tensor = 'name: "%s" datatype: "%s" %s' % (
      name, datatype, " ".join("shape: %d" % d for d in shape))
  lines = ['model_name: "fuzz"', 'id: "seed"']
  if raw:
    lines.append("inputs { %s }" % tensor)
    data = struct.pack("<%df" % len(values), *values)
    lines += ['raw_input_contents: "%s"' % text_bytes(data)] * raw_entries
  else:
    lines.append("inputs { %s contents { %s } }" % (
        tensor, " ".join("fp32_contents: %r" % v for v in values)))
  lines += ['outputs { name: "%s" }' % o for o in outputs]
  lines.append(extra)
  return "\n".join(lines)


def encode_request(text):
  return subprocess.run(
      ["protoc", "-I", os.path.join(ROOT, "proto"), "--encode=inference.ModelInferRequest",
       "grpc_service.proto"], input=text.encode(), check=True, capture_output=True).stdout


def decoder_corpus():
  timeout = 'parameters { key: "timeout" value { int64_param: 1000 } }'
  for selector, shape in MODELS:
    cases = {
        "raw": request_text(shape),
        "fp32_contents": request_text(shape, raw=False),
        "timeout": request_text(shape, extra=timeout),
        "priority_and_sequence_off": request_text(
            shape, extra='parameters { key: "priority" value { uint64_param: 1 } }\n'
                         'parameters { key: "sequence_id" value { int64_param: 0 } }'),
        "no_outputs": request_text(shape, outputs=()),
        "wrong_datatype": request_text(shape, datatype="FP16"),
        "wrong_name": request_text(shape, name="x"),
        "short_data": request_text(shape, values=[1.0] * (int(np.prod(shape)) - 1)),
        "two_raw_entries": request_text(shape, raw_entries=2),
        "wrong_rank": request_text(shape + [1]),
        "zero_dim": request_text([0] + shape[1:], values=[]),
        "negative_timeout": request_text(
            shape, extra='parameters { key: "timeout" value { int64_param: -5 } }'),
        "sequence_start": request_text(
            shape, extra='parameters { key: "sequence_start" value { bool_param: true } }'),
        "shared_memory": request_text(shape).replace(
            'datatype: "FP32"',
            'datatype: "FP32" parameters { key: "shared_memory_region" '
            'value { string_param: "r" } }'),
        "output_twice": request_text(shape, outputs=("output", "output")),
        "int_contents": request_text(shape, raw=False).replace(
            "contents {", "contents { int_contents: 1"),
    }
    if selector != 1:
      batch_limit = {0: 4, 2: 8, 3: 2}[selector]
      cases["batch_over_max"] = request_text([batch_limit + 1] + shape[1:])
    for case, text in cases.items():
      write("infer_request_decoder", "%d_%s" % (selector, case),
            bytes([selector]) + encode_request(text))


# --- shared_memory_params: the decoder's input format, tensors in the
# fuzzer's regions ("r" 8192 bytes, "u" 4000 bytes from object byte 1, "e"
# the last 64 bytes) ---

# Output bytes of a valid request of each model in MODELS.
OUTPUT_BYTES = {0: 480, 1: 96, 2: 72, 3: 768}


def infer_parameter(key, value):
  return 'parameters { key: "%s" value { %s } }' % (key, value)


def shm_parameters(region, byte_size, offset=None, number="int64_param"):
  parts = [infer_parameter("shared_memory_region", 'string_param: "%s"' % region),
           infer_parameter("shared_memory_byte_size", "%s: %d" % (number, byte_size))]
  if offset is not None:
    parts.append(infer_parameter("shared_memory_offset", "%s: %d" % (number, offset)))
  return " ".join(parts)


def shm_request_text(shape, input_parameters=None, output_parameters=None, raw=False):
  """Input in shared memory when input_parameters is given, else raw;
  output in shared memory when output_parameters is given."""
  if input_parameters is None:
    return request_text(shape, outputs=()) + (
        '\noutputs { name: "output" %s }' % output_parameters if output_parameters else "")
  lines = ['model_name: "fuzz"', 'id: "seed"',
           'inputs { name: "input" datatype: "FP32" %s %s }' % (
               " ".join("shape: %d" % d for d in shape), input_parameters)]
  if raw:
    count = int(np.prod(shape))
    lines.append('raw_input_contents: "%s"' % text_bytes(struct.pack("<%df" % count,
                                                                    *[1.0] * count)))
  if output_parameters is not None:
    lines.append('outputs { name: "output" %s }' % output_parameters)
  return "\n".join(lines)


def shared_memory_corpus():
  for selector, shape in MODELS:
    in_bytes = 4 * int(np.prod(shape))
    out_bytes = OUTPUT_BYTES[selector]
    cases = {
        "input_in_r": shm_request_text(shape, shm_parameters("r", in_bytes, 0)),
        "input_unaligned": shm_request_text(shape, shm_parameters("u", in_bytes)),
        "output_in_r": shm_request_text(shape, None, shm_parameters("r", out_bytes, 4096)),
        "both": shm_request_text(shape, shm_parameters("r", in_bytes, 0),
                                 shm_parameters("r", out_bytes, 4096)),
        "output_unaligned": shm_request_text(shape, shm_parameters("r", in_bytes, 0),
                                             shm_parameters("u", out_bytes, 2001)),
        "output_larger_space": shm_request_text(shape, None,
                                                shm_parameters("r", out_bytes + 100, 4000)),
        "uint64": shm_request_text(shape, shm_parameters("r", in_bytes, 8, "uint64_param"),
                                   shm_parameters("u", out_bytes, 1000, "uint64_param")),
        "past_end": shm_request_text(shape, shm_parameters("e", in_bytes, 8)),
        "huge_offset": shm_request_text(shape, shm_parameters("r", in_bytes,
                                                              9223372036854775807)),
        "unknown_region": shm_request_text(shape, shm_parameters("x", in_bytes)),
        "size_mismatch": shm_request_text(shape, shm_parameters("r", in_bytes - 4)),
        "output_too_small": shm_request_text(shape, None, shm_parameters("r", out_bytes - 4)),
        "overlap": shm_request_text(shape, shm_parameters("r", in_bytes, 0),
                                    shm_parameters("r", out_bytes, 4)),
        "negative_offset": shm_request_text(shape, shm_parameters("r", in_bytes, -4)),
        "region_not_string": shm_request_text(
            shape, shm_parameters("r", in_bytes).replace('string_param: "r"', "int64_param: 1")),
        "offset_without_region": shm_request_text(
            shape, infer_parameter("shared_memory_offset", "int64_param: 0")),
        "also_raw": shm_request_text(shape, shm_parameters("r", in_bytes), raw=True),
    }
    for case, text in cases.items():
      write("shared_memory_params", "%d_%s" % (selector, case),
            bytes([selector]) + encode_request(text))


# --- safetensors ---

def safetensors(tensors, metadata=None, pad=True, header_override=None, tail=b""):
  """tensors: list of (name, dtype, shape, bytes)."""
  header = {}
  if metadata is not None:
    header["__metadata__"] = metadata
  offset = 0
  data = b""
  for name, dtype, shape, payload in tensors:
    header[name] = {"dtype": dtype, "shape": shape,
                    "data_offsets": [offset, offset + len(payload)]}
    offset += len(payload)
    data += payload
  text = header_override if header_override is not None else json.dumps(header)
  text = text.encode()
  if pad:
    text += b" " * ((8 - len(text) % 8) % 8)
  return struct.pack("<Q", len(text)) + text + data + tail


def f32(count, start=0.0):
  return struct.pack("<%df" % count, *[start + 0.5 * i for i in range(count)])


def safetensors_corpus():
  gn = [("gn.weight", "F32", [4], f32(4, 1.0)), ("gn.bias", "F32", [4], f32(4))]
  gemm = [("gemm.weight", "F32", [6, 8], f32(48)), ("gemm.bias", "F32", [6], f32(6)),
          ("bias", "F32", [6], f32(6)), ("groupnorm.weight", "F32", [6], f32(6)),
          ("groupnorm.bias", "F32", [6], f32(6))]
  conv = [("conv_transpose.weight", "F32", [2, 4, 3, 3], f32(72)),
          ("conv_transpose.bias", "F32", [4], f32(4)),
          ("group_norm.weight", "F32", [4], f32(4)), ("group_norm.bias", "F32", [4], f32(4))]
  write("safetensors", "groupnorm", safetensors(gn, metadata={"format": "pt"}))
  write("safetensors", "gemm", safetensors(gemm))
  write("safetensors", "conv", safetensors(conv))
  write("safetensors", "empty", safetensors([]))
  write("safetensors", "unpadded_misaligned", safetensors(gn, pad=False))
  write("safetensors", "other_dtypes", safetensors([
      ("h", "F16", [2, 2], b"\x00\x3c" * 4), ("b", "BF16", [3], b"\x80\x3f" * 3),
      ("i", "I64", [2], struct.pack("<2q", -1, 7)), ("u", "U8", [5], b"\x01" * 5),
      ("d", "F64", [1], struct.pack("<d", 2.5)), ("z", "F32", [0, 3], b""),
      ("s", "F32", [], f32(1))]))
  write("safetensors", "truncated_data", safetensors(gn)[:-3])
  write("safetensors", "header_longer_than_file",
        struct.pack("<Q", 1 << 20) + b'{"a": 1}')
  write("safetensors", "overlap", safetensors([], header_override=json.dumps({
      "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}), tail=f32(3)))
  write("safetensors", "end_before_begin", safetensors([], header_override=json.dumps({
      "a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}), tail=f32(2)))
  write("safetensors", "size_mismatch", safetensors([], header_override=json.dumps({
      "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}), tail=f32(2)))
  write("safetensors", "repeated_name", safetensors([], header_override=
        '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
        '"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', tail=f32(2)))
  write("safetensors", "huge_shape", safetensors([], header_override=json.dumps({
      "a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}}),
      tail=f32(2)))
  write("safetensors", "bad_metadata", safetensors(gn, metadata={"n": 1}))
  write("safetensors", "not_json", struct.pack("<Q", 8) + b"{nope:} ")


# --- model_config ---

def param(key, value):
  return 'parameters { key: "%s" value: { string_value: "%s" } }\n' % (key, value)


def io(input_dims, output_dims):
  return ('input [ { name: "input", data_type: TYPE_FP32, dims: [ %s ] } ]\n'
          'output [ { name: "output", data_type: TYPE_FP32, dims: [ %s ] } ]\n'
          % (input_dims, output_dims))


def model_config_corpus():
  groupnorm = ('platform: "groupnorm"\nmax_batch_size: 4\n' + io("4, -1, -1", "4, -1, -1") +
               param("num_channels", "4") + param("num_groups", "2"))
  gemm = ('name: "model"\nplatform: "gemm_bias_hardtanh_mish_groupnorm"\nmax_batch_size: 8\n' +
          io("8", "6") + param("in_features", "8") + param("out_features", "6") +
          param("num_groups", "3") + param("hardtanh_min", "-0.5") +
          param("hardtanh_max", "1") + param("eps", "1e-5") + param("precision", "tf32"))
  conv = ('platform: "convtranspose_gelu_groupnorm"\nmax_batch_size: 2\n' +
          io("2, -1, -1", "4, -1, -1") + param("in_channels", "2") +
          param("out_channels", "4") + param("kernel_size", "3") + param("stride", "2") +
          param("padding", "1") + param("output_padding", "1") + param("num_groups", "2") +
          param("precision", "fp32"))
  full = ('platform: "convtranspose_gelu_groupnorm"\nmax_batch_size: 32\n' +
          io("64, 256, 256", "64, 258, 258") +
          "dynamic_batching {\n  preferred_batch_size: [ 8, 16 ]\n"
          "  max_queue_delay_microseconds: 500\n"
          "  default_queue_policy { max_queue_size: 256 default_timeout_microseconds: 1000 "
          "allow_timeout_override: true }\n}\n"
          "instance_group [ { count: 2, kind: KIND_GPU, gpus: [ 0 ] }, { kind: KIND_CPU } ]\n"
          "version_policy { specific { versions: [ 1, 3 ] } }\n"
          'default_model_filename: "weights.safetensors"\n' +
          param("in_channels", "64") + param("out_channels", "64") +
          param("kernel_size", "3") + param("num_groups", "8"))
  cases = {
      "groupnorm": groupnorm,
      "gemm": gemm,
      "conv": conv,
      "triton_style_full": full,
      "no_batching": groupnorm.replace("max_batch_size: 4", "max_batch_size: 0")
                     .replace('"4, -1, -1"', '"2, 4, -1"'),
      "version_policy_all": groupnorm + "version_policy { all { } }\n",
      "version_policy_latest": groupnorm + "version_policy { latest { num_versions: 2 } }\n",
      "syntax_error": groupnorm + "max_batch_size: [\n",
      "unknown_field": groupnorm + "max_batch: 3\n",
      "wrong_name": 'name: "other"\n' + groupnorm,
      "backend_not_platform": groupnorm.replace("platform:", "backend:"),
      "fp16_input": groupnorm.replace("TYPE_FP32", "TYPE_FP16", 1),
      "zero_dim": groupnorm.replace("4, -1, -1", "0, -1, -1", 1),
      "bad_parameter": groupnorm.replace('"num_groups" value: { string_value: "2"',
                                         '"num_groups" value: { string_value: "3"'),
      "unknown_parameter": groupnorm + param("strides", "2"),
      "huge_parameters": gemm.replace('string_value: "8"', 'string_value: "2147483647"'),
      "preferred_over_max": groupnorm + "dynamic_batching { preferred_batch_size: 9 }\n",
      "weights_outside": groupnorm + 'default_model_filename: "../w.safetensors"\n',
      "kind_model": groupnorm + "instance_group { kind: KIND_MODEL }\n",
  }
  for case, text in cases.items():
    write("model_config", case, text)


# --- npy ---

def npy_bytes(array, version=None):
  import io as pyio
  out = pyio.BytesIO()
  if version is None:
    np.save(out, array, allow_pickle=False)
  else:
    np.lib.format.write_array(out, array, version=version, allow_pickle=False)
  return out.getvalue()


def npy_corpus():
  x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
  write("npy", "f4_2d", npy_bytes(x))
  write("npy", "f4_scalar", npy_bytes(np.float32(1.5)))
  write("npy", "f4_1d", npy_bytes(np.array([1, -2, 3], dtype=np.float32)))
  write("npy", "f4_empty", npy_bytes(np.zeros((0, 4), dtype=np.float32)))
  write("npy", "f4_v2", npy_bytes(x, version=(2, 0)))
  write("npy", "f4_v3", npy_bytes(x, version=(3, 0)))
  write("npy", "f4_fortran_1d", npy_bytes(np.asfortranarray(np.ones(3, dtype=np.float32))))
  write("npy", "f8", npy_bytes(x.astype(np.float64)))
  write("npy", "big_endian", npy_bytes(x.astype(">f4")))
  write("npy", "fortran", npy_bytes(np.asfortranarray(x)))
  write("npy", "structured", npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])))
  write("npy", "truncated", npy_bytes(x)[:-2])
  write("npy", "trailing", npy_bytes(x) + b"\0\0\0\0")
  write("npy", "bad_version", b"\x93NUMPY\x04\x00" + npy_bytes(x)[8:])
  write("npy", "double_quoted_header",
        b"\x93NUMPY\x01\x00" + struct.pack("<H", 60) +
        b'{"descr": "<f4", "fortran_order": False, "shape": (1,), }'.ljust(59) + b"\n" +
        struct.pack("<f", 2.0))


def main():
  if len(sys.argv) != 1:
    print(__doc__, file=sys.stderr)
    return 2
  for target in ("infer_request_decoder", "safetensors", "model_config", "npy",
                 "shared_memory_params"):
    shutil.rmtree(os.path.join(CORPUS, target), ignore_errors=True)
  decoder_corpus()
  shared_memory_corpus()
  safetensors_corpus()
  model_config_corpus()
  npy_corpus()
  return 0


if __name__ == "__main__":
  sys.exit(main())

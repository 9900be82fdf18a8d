#pragma once

// Helpers of the security end-to-end tests: a test PKI made with the openssl
// command-line tool, and running a program to its exit.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fuseserve::testing {

// The server binary: $FUSESERVE_BINARY when set (a GPU host runs a packed
// copy), else the one this build made.
std::string ServerBinary();

// A CA, a server certificate for localhost / 127.0.0.1 (subjectAltName) and a
// client certificate signed by it, and a second, unrelated CA with its own
// client certificate (which the first CA must not accept). EC P-256 keys, so
// that making them takes milliseconds. Paths of PEM files.
struct TestCertificates {
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;
  std::string other_client_cert;  // signed by other_ca_cert
  std::string other_client_key;
};

// Writes the certificates into `directory` (which must exist) with the
// openssl program at `openssl`. Internal with openssl's output when a step
// fails.
absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& openssl,
                                                      const std::string& directory);

// The base64 lines of a PEM file's body (between its BEGIN and END lines):
// what must never appear in a log.
std::vector<std::string> PemBodyLines(const std::string& pem_path);

struct ProgramResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr, interleaved
};

// Runs `args` (args[0] is the program's path; no shell) to its exit, with
// stdout and stderr captured through the file `output_path`.
absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& args,
                                         const std::string& output_path);

}  // namespace fuseserve::testing

#include "tests/e2e/security/security_testing.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

extern char** environ;

namespace fuseserve::testing {
namespace {

// The extensions of each kind of certificate, in a config of our own so that
// the system's openssl.cnf can neither add nor contradict any.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
)";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class OpenSsl {
 public:
  OpenSsl(std::string program, std::string directory)
      : program_(std::move(program)), directory_(std::move(directory)) {}

  std::string Path(const std::string& name) const { return directory_ + "/" + name; }

  // Runs `openssl <args>`; Internal with its output when it fails.
  absl::Status Run(std::vector<std::string> args) const {
    args.insert(args.begin(), program_);
    ASSIGN_OR_RETURN(const ProgramResult result, RunProgram(args, Path("openssl.log")));
    if (result.exit_code != 0) {
      return absl::InternalError(
          absl::StrCat("`", absl::StrJoin(args, " "), "` failed:\n", result.output));
    }
    return absl::OkStatus();
  }

  // A new EC key at <name>.key and a certificate request for it.
  absl::Status NewKey(const std::string& name, std::vector<std::string> request_args) const {
    std::vector<std::string> args = {"req",
                                     "-config",
                                     Path("openssl.cnf"),
                                     "-newkey",
                                     "ec",
                                     "-pkeyopt",
                                     "ec_paramgen_curve:prime256v1",
                                     "-nodes",
                                     "-keyout",
                                     Path(name + ".key")};
    args.insert(args.end(), request_args.begin(), request_args.end());
    return Run(args);
  }

  // A self-signed CA certificate at <name>.pem (key at <name>.key).
  absl::Status MakeCa(const std::string& name) const {
    return NewKey(name, {"-x509", "-extensions", "ca", "-days", "2", "-subj",
                         "/CN=fuseserve test " + name, "-out", Path(name + ".pem")});
  }

  // A certificate at <name>.pem (key at <name>.key) for `common_name`, with
  // the config's `extensions` section, signed by the CA `ca`.
  absl::Status MakeSigned(const std::string& name, const std::string& common_name,
                          const std::string& extensions, const std::string& ca) const {
    RETURN_IF_ERROR(
        NewKey(name, {"-new", "-subj", "/CN=" + common_name, "-out", Path(name + ".csr")}));
    return Run({"x509", "-req", "-in", Path(name + ".csr"), "-CA", Path(ca + ".pem"), "-CAkey",
                Path(ca + ".key"), "-CAcreateserial", "-days", "2", "-extfile", Path("openssl.cnf"),
                "-extensions", extensions, "-out", Path(name + ".pem")});
  }

 private:
  std::string program_;
  std::string directory_;
};

}  // namespace

std::string ServerBinary() {
  const char* path = std::getenv("FUSESERVE_BINARY");
  return path != nullptr ? path : FUSESERVE_BINARY;
}

absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& openssl,
                                                      const std::string& directory) {
  const OpenSsl tool(openssl, directory);
  std::ofstream(tool.Path("openssl.cnf")) << kConfig;
  RETURN_IF_ERROR(tool.MakeCa("ca"));
  RETURN_IF_ERROR(tool.MakeSigned("server", "localhost", "server", "ca"));
  RETURN_IF_ERROR(tool.MakeSigned("client", "fuseserve test client", "client", "ca"));
  RETURN_IF_ERROR(tool.MakeCa("other_ca"));
  RETURN_IF_ERROR(tool.MakeSigned("other_client", "fuseserve other client", "client", "other_ca"));
  TestCertificates certificates;
  certificates.ca_cert = tool.Path("ca.pem");
  certificates.server_cert = tool.Path("server.pem");
  certificates.server_key = tool.Path("server.key");
  certificates.client_cert = tool.Path("client.pem");
  certificates.client_key = tool.Path("client.key");
  certificates.other_ca_cert = tool.Path("other_ca.pem");
  certificates.other_client_cert = tool.Path("other_client.pem");
  certificates.other_client_key = tool.Path("other_client.key");
  return certificates;
}

std::vector<std::string> PemBodyLines(const std::string& pem_path) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(ReadFile(pem_path), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "-----")) lines.emplace_back(line);
  }
  return lines;
}

absl::StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& args,
                                         const std::string& output_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> args_copy = args;
  std::vector<char*> argv;
  for (std::string& arg : args_copy) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) {
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": error ", spawn_error));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return absl::InternalError("waitpid failed");
  ProgramResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = ReadFile(output_path);
  return result;
}

}  // namespace fuseserve::testing

// TLS on the gRPC port, end to end: the real `fuseserve` binary with
// certificates made by the openssl tool in the test, the client library and
// the fuseserve-cli binary as clients.


#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/default_repository.h"
#include "common/shape.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/security/security_testing.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/test_dir.h"

namespace fuseserve {
namespace {

using client::Client;
using client::MakeChannelCredentials;
using client::TlsOptions;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ProgramResult;
using testing::RunProgram;
using testing::ServerBinary;
using testing::ServerProcess;
using testing::TestCertificates;

class TlsE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new TestDir("fuseserve-tls");
    directory_->MakeDir("repo");
    ASSERT_TRUE(WriteDefaultRepository(directory_->path() + "/repo", RepositorySize::kSmall).ok());
    auto certificates = testing::MakeTestCertificates(FUSESERVE_OPENSSL, directory_->path());
    ASSERT_TRUE(certificates.ok())
        << certificates.status() << "\n(the openssl program is needed: scripts/setup.sh)";
    certificates_ = new TestCertificates(*certificates);

    auto tls = ServerProcess::Start(
        ServerBinary(), directory_->path() + "/repo",
        {"--grpc-use-ssl=true", "--grpc-server-cert=" + certificates_->server_cert,
         "--grpc-server-key=" + certificates_->server_key});
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_server_ = tls->release();
    auto mutual = ServerProcess::Start(
        ServerBinary(), directory_->path() + "/repo",
        {"--grpc-use-ssl-mutual=true", "--grpc-server-cert=" + certificates_->server_cert,
         "--grpc-server-key=" + certificates_->server_key,
         "--grpc-root-cert=" + certificates_->ca_cert});
    ASSERT_TRUE(mutual.ok()) << mutual.status();
    mutual_server_ = mutual->release();
  }

  static void TearDownTestSuite() {
    delete tls_server_;
    delete mutual_server_;
    delete certificates_;
    delete directory_;  // and the directory
  }

  void SetUp() override {
    ASSERT_NE(tls_server_, nullptr);
    ASSERT_NE(mutual_server_, nullptr);
  }

  // A client of `server` with `tls` (which must be usable).
  static std::unique_ptr<Client> Connect(const ServerProcess& server, const TlsOptions& tls) {
    auto credentials = MakeChannelCredentials(tls);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    if (!credentials.ok()) return nullptr;
    return Client::Create(server.grpc_target(), *credentials);
  }

  static TlsOptions TrustingTheCa() {
    TlsOptions tls;
    tls.ssl = true;
    tls.root_certificates = certificates_->ca_cert;
    return tls;
  }

  static TlsOptions WithClientCertificate() {
    TlsOptions tls = TrustingTheCa();
    tls.private_key = certificates_->client_key;
    tls.certificate_chain = certificates_->client_cert;
    return tls;
  }

  // ServerReady, then one groupnorm inference; both must succeed.
  static void ExpectServes(Client& client) {
    const absl::StatusOr<bool> ready = client.ServerReady();
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_TRUE(*ready);
    const Shape shape = {1, 8, 3, 3};
    const auto result =
        client.Infer("groupnorm", {{"input", shape, std::vector<float>(NumElements(shape), 1.5f)}});
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->outputs.size(), 1u);
    EXPECT_EQ(result->outputs[0].shape, shape);
  }

  // The handshake fails, so the call does not reach the service.
  static void ExpectRefused(Client& client) {
    const absl::StatusOr<bool> ready = client.ServerReady(absl::Seconds(10));
    EXPECT_EQ(ready.status().code(), absl::StatusCode::kUnavailable) << ready.status();
  }

  // `args` (args[0] is the program) run to their exit.
  static ProgramResult RunToExit(const std::vector<std::string>& args) {
    auto result = RunProgram(args, directory_->path() + "/program.log");
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProgramResult{};
  }

  // The server with `tls_args` on free ports, run to its exit (the tests that
  // use it expect it to refuse to start).
  static ProgramResult RunServerToExit(const std::vector<std::string>& tls_args) {
    std::vector<std::string> args = {ServerBinary(),
                                     "--model-repository=" + directory_->path() + "/repo",
                                     "--grpc-port=0",
                                     "--metrics-port=0",
                                     "--grpc-address=127.0.0.1",
                                     "--metrics-address=127.0.0.1"};
    args.insert(args.end(), tls_args.begin(), tls_args.end());
    return RunToExit(args);
  }

  // fuseserve-cli with `args`.
  static ProgramResult RunCli(std::vector<std::string> args) {
    args.insert(args.begin(), FUSESERVE_CLI);
    return RunToExit(args);
  }

  static TestDir* directory_;
  static TestCertificates* certificates_;
  static ServerProcess* tls_server_;
  static ServerProcess* mutual_server_;
};

TestDir* TlsE2eTest::directory_ = nullptr;
TestCertificates* TlsE2eTest::certificates_ = nullptr;
ServerProcess* TlsE2eTest::tls_server_ = nullptr;
ServerProcess* TlsE2eTest::mutual_server_ = nullptr;

TEST_F(TlsE2eTest, ServesAClientThatTrustsItsCa) {
  auto client = Connect(*tls_server_, TrustingTheCa());
  ASSERT_NE(client, nullptr);
  ExpectServes(*client);
}

TEST_F(TlsE2eTest, ServesUnderTheLocalhostNameToo) {
  auto credentials = MakeChannelCredentials(TrustingTheCa());
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  auto client = Client::Create(absl::StrCat("localhost:", tls_server_->grpc_port()), *credentials);
  const absl::StatusOr<bool> live = client->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE(*live);
}

TEST_F(TlsE2eTest, RefusesAPlaintextClient) {
  auto client = Client::Create(tls_server_->grpc_target());
  ExpectRefused(*client);
}

TEST_F(TlsE2eTest, ClientRefusesAServerCertificateFromAnotherCa) {
  TlsOptions tls;
  tls.ssl = true;
  tls.root_certificates = certificates_->other_ca_cert;
  auto client = Connect(*tls_server_, tls);
  ASSERT_NE(client, nullptr);
  ExpectRefused(*client);
}

TEST_F(TlsE2eTest, MutualTlsServesAClientWithACaSignedCertificate) {
  auto client = Connect(*mutual_server_, WithClientCertificate());
  ASSERT_NE(client, nullptr);
  ExpectServes(*client);
}

TEST_F(TlsE2eTest, MutualTlsRefusesAClientWithoutCertificate) {
  auto client = Connect(*mutual_server_, TrustingTheCa());
  ASSERT_NE(client, nullptr);
  ExpectRefused(*client);
}

TEST_F(TlsE2eTest, MutualTlsRefusesAClientCertificateFromAnotherCa) {
  TlsOptions tls = TrustingTheCa();
  tls.private_key = certificates_->other_client_key;
  tls.certificate_chain = certificates_->other_client_cert;
  auto client = Connect(*mutual_server_, tls);
  ASSERT_NE(client, nullptr);
  ExpectRefused(*client);
}

TEST_F(TlsE2eTest, MutualTlsRefusesAPlaintextClient) {
  auto client = Client::Create(mutual_server_->grpc_target());
  ExpectRefused(*client);
}

TEST_F(TlsE2eTest, LogsTheModeButNoKeyMaterial) {
  // Refused handshakes above have been logged (if at all) by now too.
  const std::vector<std::string> secret_lines = testing::PemBodyLines(certificates_->server_key);
  ASSERT_FALSE(secret_lines.empty());
  for (const ServerProcess* server : {tls_server_, mutual_server_}) {
    const std::string log = server->Log();
    EXPECT_THAT(log, HasSubstr("TLS"));
    EXPECT_THAT(log, Not(HasSubstr("PRIVATE KEY")));
    for (const std::string& line : secret_lines) EXPECT_THAT(log, Not(HasSubstr(line)));
    for (const std::string& line : testing::PemBodyLines(certificates_->server_cert)) {
      EXPECT_THAT(log, Not(HasSubstr(line)));
    }
  }
  EXPECT_THAT(mutual_server_->Log(),
              HasSubstr("client certificates verified by " + certificates_->ca_cert));
}

TEST_F(TlsE2eTest, MissingKeyFileStopsTheServerNamingTheFlag) {
  const std::string missing = directory_->path() + "/no-such-key.pem";
  const ProgramResult result =
      RunServerToExit({"--grpc-use-ssl=true", "--grpc-server-cert=" + certificates_->server_cert,
                       "--grpc-server-key=" + missing});

  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output,
              AllOf(HasSubstr("--grpc-server-key"), HasSubstr(missing), HasSubstr("No such file")));
  EXPECT_THAT(result.output, Not(HasSubstr("serving gRPC")));
}

TEST_F(TlsE2eTest, KeyThatDoesNotMatchTheCertificateStopsTheServerWithoutLoggingIt) {
  const ProgramResult result =
      RunServerToExit({"--grpc-use-ssl=true", "--grpc-server-cert=" + certificates_->server_cert,
                       "--grpc-server-key=" + certificates_->client_key});

  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("cannot start"));
  for (const std::string& line : testing::PemBodyLines(certificates_->client_key)) {
    EXPECT_THAT(result.output, Not(HasSubstr(line)));
  }
}

TEST_F(TlsE2eTest, TlsWithoutAKeyFlagIsAUsageError) {
  const ProgramResult result =
      RunServerToExit({"--grpc-use-ssl=true", "--grpc-server-cert=" + certificates_->server_cert});

  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("--grpc-use-ssl needs --grpc-server-key"));
}

TEST_F(TlsE2eTest, CliTalksTlsWithSsl) {
  const ProgramResult health =
      RunCli({"--url", tls_server_->grpc_target(), "--ssl", "--root-certificates",
              certificates_->ca_cert, "health", "--model", "groupnorm"});
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_THAT(health.output,
              AllOf(HasSubstr("server ready: true"), HasSubstr("model groupnorm: ready")));

  // The options are accepted after the command too.
  const ProgramResult infer =
      RunCli({"infer", "groupnorm", "--random", "1,8,2,2", "--url", mutual_server_->grpc_target(),
              "--ssl", "--root-certificates=" + certificates_->ca_cert,
              "--private-key=" + certificates_->client_key,
              "--certificate-chain=" + certificates_->client_cert});
  EXPECT_EQ(infer.exit_code, 0) << infer.output;
  EXPECT_THAT(infer.output, HasSubstr("output"));
}

TEST_F(TlsE2eTest, CliBenchTalksMutualTls) {
  const ProgramResult bench = RunCli(
      {"--url", mutual_server_->grpc_target(), "--ssl", "--root-certificates",
       certificates_->ca_cert, "--private-key", certificates_->client_key, "--certificate-chain",
       certificates_->client_cert, "bench", "groupnorm", "--shape", "8,2,2", "--channels", "2",
       "--warmup-s", "0", "--duration-s", "0.2", "--quiet"});
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_THAT(bench.output, HasSubstr("none failed"));
}

TEST_F(TlsE2eTest, CliFailsAgainstTlsWithoutSslOrWithoutItsCertificate) {
  const ProgramResult plaintext = RunCli({"--url", tls_server_->grpc_target(), "health"});
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr("UNAVAILABLE"));

  const ProgramResult no_client_cert =
      RunCli({"--url", mutual_server_->grpc_target(), "--ssl", "--root-certificates",
              certificates_->ca_cert, "metadata", "groupnorm"});
  EXPECT_EQ(no_client_cert.exit_code, 1) << no_client_cert.output;
  EXPECT_THAT(no_client_cert.output, HasSubstr("UNAVAILABLE"));
}

TEST_F(TlsE2eTest, CliRejectsTlsFilesWithoutSslAndMissingFiles) {
  const ProgramResult without_ssl =
      RunCli({"--url", tls_server_->grpc_target(), "--root-certificates", certificates_->ca_cert,
              "health"});
  EXPECT_EQ(without_ssl.exit_code, 2) << without_ssl.output;
  EXPECT_THAT(without_ssl.output, HasSubstr("--root-certificates is given but TLS is off"));

  const std::string missing = directory_->path() + "/absent.pem";
  const ProgramResult missing_file = RunCli(
      {"stats", "--url", tls_server_->grpc_target(), "--ssl", "--root-certificates", missing});
  EXPECT_EQ(missing_file.exit_code, 2) << missing_file.output;
  EXPECT_THAT(missing_file.output, AllOf(HasSubstr("--root-certificates"), HasSubstr(missing)));
}

}  // namespace
}  // namespace fuseserve

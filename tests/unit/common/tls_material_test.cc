// The run's certificates (tls_certificates.h) and the checks a process makes before it serves or
// calls with TLS (tls.h): what is accepted, and that every refusal names the file at fault.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "services/common/base/files.h"
#include "services/common/wire/tls.h"
#include "services/common/wire/tls_certificates.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class TlsMaterialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/strata-tls-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/tls";
    ASSERT_TRUE(WriteRunCertificates(dir_, {}).ok());
  }
  void TearDown() override { fs::remove_all(root_); }

  absl::StatusOr<TlsMaterial> Load(const std::string& dir, TlsMode mode,
                                   TlsUse use = TlsUse::kServerAndClient,
                                   const std::string& name = kDefaultTlsServerName) {
    TlsSettings s;
    s.mode = mode;
    s.dir = dir;
    s.server_name = name;
    return LoadTlsMaterial(s, use);
  }

  // A copy of dir_ named `name` in which each file of `replaced` is a copy of the path it maps to,
  // or removed when that is empty.
  std::string Copy(const std::string& name,
                   const std::vector<std::pair<std::string, std::string>>& replaced) {
    const std::string dir = root_ + "/" + name;
    fs::create_directory(dir);
    for (const auto& e : fs::directory_iterator(dir_)) {
      fs::copy_file(e.path(), dir / e.path().filename());
    }
    for (const auto& [file, from] : replaced) {
      fs::remove(dir + "/" + file);
      if (!from.empty()) fs::copy_file(from, dir + "/" + file);
    }
    return dir;
  }

  std::string root_, dir_;
};

mode_t Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST_F(TlsMaterialTest, TheRunsCertificatesAreAcceptedAndPrivate) {
  EXPECT_EQ(Mode(dir_), 0700u);
  EXPECT_EQ(Mode(dir_ + "/server.key"), 0600u);
  EXPECT_EQ(Mode(dir_ + "/client.key"), 0600u);
  EXPECT_FALSE(fs::exists(dir_ + "/ca.key")) << "the CA's key must never be written";
  auto mutual = Load(dir_, TlsMode::kMutual);
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  EXPECT_TRUE(mutual->enabled());
  EXPECT_FALSE(mutual->server_key_pem.empty());
  EXPECT_FALSE(mutual->client_cert_pem.empty());
  auto on_client = Load(dir_, TlsMode::kOn, TlsUse::kClient);
  ASSERT_TRUE(on_client.ok()) << on_client.status();
  EXPECT_TRUE(on_client->server_key_pem.empty());  // a client only reads what it needs
  EXPECT_TRUE(on_client->client_cert_pem.empty());
  EXPECT_FALSE(on_client->ca_pem.empty());
  auto off = Load("/nowhere", TlsMode::kOff);
  ASSERT_TRUE(off.ok());  // nothing is read with TLS off
  EXPECT_FALSE(off->enabled());
  // A second run's certificates never go into a directory that already holds some.
  const absl::Status again = WriteRunCertificates(dir_, {});
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(absl::StrContains(again.message(), "already holds")) << again;
}

// The name is written into the certificate's list of names as text: one that is no host name
// (here one that would add an IP address of its own) is refused before anything is made.
TEST_F(TlsMaterialTest, AServerNameThatIsNoHostNameIsRefusedAndNothingIsWritten) {
  for (const char* name : {"a,IP:10.0.0.1", "", "-strata", "a..b", "strata_1"}) {
    RunCertificateOptions options;
    options.server_name = name;
    const absl::Status s = WriteRunCertificates(root_ + "/refused", options);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "is not a host name")) << s;
    EXPECT_FALSE(std::filesystem::exists(root_ + "/refused")) << name;
  }
}

TEST_F(TlsMaterialTest, EveryRefusalNamesTheFile) {
  const std::string other = root_ + "/other";
  ASSERT_TRUE(WriteRunCertificates(other, {}).ok());
  RunCertificateOptions old;
  old.backdate = std::chrono::hours(48);
  old.valid_for = -std::chrono::hours(24);
  ASSERT_TRUE(WriteRunCertificates(root_ + "/expired", old).ok());
  RunCertificateOptions named;
  named.server_name = "trainer.example";
  ASSERT_TRUE(WriteRunCertificates(root_ + "/named", named).ok());
  ASSERT_TRUE(WriteFileAtomic(root_ + "/garbage.pem", "not pem\n").ok());

  struct Case {
    std::string label, dir;
    TlsMode mode;
    std::string name;
    std::string expected_prefix;  // the message starts with the file's path
    std::string expected_text;
  };
  const std::string D = root_;
  const std::vector<Case> cases = {
      {"no directory", D + "/none", TlsMode::kOn, "strata", "cannot open " + D + "/none/ca.pem",
       "No such file"},
      {"a CA that is not PEM", Copy("c1", {{"ca.pem", D + "/garbage.pem"}}), TlsMode::kOn, "strata",
       D + "/c1/ca.pem", "holds no PEM certificate"},
      {"a leaf as the CA", Copy("c2", {{"ca.pem", dir_ + "/server.pem"}}), TlsMode::kOn, "strata",
       D + "/c2/ca.pem", "not a CA's"},
      {"another CA", Copy("c3", {{"ca.pem", other + "/ca.pem"}}), TlsMode::kOn, "strata",
       D + "/c3/server.pem", "not accepted with the CA in " + D + "/c3/ca.pem"},
      {"a key of another certificate", Copy("c4", {{"server.key", other + "/server.key"}}),
       TlsMode::kOn, "strata", D + "/c4/server.key", "does not belong to the certificate"},
      {"a missing server key", Copy("c5", {{"server.key", ""}}), TlsMode::kOn, "strata",
       "cannot open " + D + "/c5/server.key", ""},
      {"a missing client certificate under mutual", Copy("c6", {{"client.pem", ""}}),
       TlsMode::kMutual, "strata", "cannot open " + D + "/c6/client.pem", ""},
      {"a client certificate of another CA",
       Copy("c7", {{"client.pem", other + "/client.pem"}, {"client.key", other + "/client.key"}}),
       TlsMode::kMutual, "strata", D + "/c7/client.pem", "not accepted"},
      {"the client certificate serving",
       Copy("c8", {{"server.pem", dir_ + "/client.pem"}, {"server.key", dir_ + "/client.key"}}),
       TlsMode::kOn, "strata", D + "/c8/server.pem", "does not allow TLS server authentication"},
      {"another server name", dir_, TlsMode::kOn, "trainer.example", dir_ + "/server.pem",
       "does not name the server name 'trainer.example'"},
      {"expired", D + "/expired", TlsMode::kOn, "strata", D + "/expired/server.pem",
       "certificate has expired"},
  };
  for (const Case& c : cases) {
    auto m = Load(c.dir, c.mode, TlsUse::kServerAndClient, c.name);
    ASSERT_FALSE(m.ok()) << c.label;
    const std::string message(m.status().message());
    EXPECT_TRUE(absl::StartsWith(message, c.expected_prefix)) << c.label << ": " << message;
    EXPECT_TRUE(absl::StrContains(message, c.expected_text)) << c.label << ": " << message;
  }
  // Certificates made for another name serve under that name.
  EXPECT_TRUE(
      Load(root_ + "/named", TlsMode::kMutual, TlsUse::kServerAndClient, "trainer.example").ok());
  // The client certificate under `on` is not read at all.
  EXPECT_TRUE(Load(Copy("c9", {{"client.pem", ""}}), TlsMode::kOn).ok());
}

TEST(TlsFlags, DirectoryAndModeMustAgree) {
  TlsFlagValues flags;
  EXPECT_TRUE(TlsSettingsFromFlags(flags).ok());  // off, nothing given
  flags.mode = "mutual";
  auto no_dir = TlsSettingsFromFlags(flags);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_TRUE(absl::StrContains(no_dir.status().message(), "--tls mutual needs --tls-dir"));
  flags.dir = "/etc/strata/tls";
  auto both = TlsSettingsFromFlags(flags);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->mode, TlsMode::kMutual);
  EXPECT_EQ(both->server_name, "strata");
  flags.mode = "off";
  auto ignored = TlsSettingsFromFlags(flags);
  ASSERT_FALSE(ignored.ok());
  EXPECT_TRUE(absl::StrContains(ignored.status().message(), "--tls-dir is given but --tls is off"));
  flags.mode = "yes";
  EXPECT_FALSE(TlsSettingsFromFlags(flags).ok());
  for (const std::string& name : TlsModeNames()) {
    auto mode = TlsModeFromName(name);
    ASSERT_TRUE(mode.ok());
    EXPECT_EQ(TlsModeName(*mode), name);
  }
}

}  // namespace
}  // namespace strata

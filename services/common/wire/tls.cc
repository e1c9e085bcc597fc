#include "services/common/wire/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "services/common/base/files.h"
#include "services/common/wire/openssl_ptr.h"

namespace strata {
namespace {

// OpenSSL keeps errors in a per-thread queue; a check that fails must not leave them behind for
// the next caller (gRPC reads the same queue during handshakes).
std::string TakeOpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate in a PEM file, in order (a chain: leaf first).
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(const std::string& path,
                                                       const std::string& pem) {
  std::vector<X509Ptr> certs;
  auto bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the loop ends on "no start line" at the end of the file
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)"));
  }
  return certs;
}

// Refuses to ask for a passphrase: a service has no terminal, and gRPC would load the key without
// one.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return -1; }

absl::StatusOr<KeyPtr> ParsePrivateKey(const std::string& path, const std::string& pem) {
  if (pem.find("ENCRYPTED") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": the private key is encrypted; Strata needs an unencrypted PEM key (protect it "
        "with the directory's permissions instead, mode 0700)"));
  }
  auto bio = MemoryBio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, &NoPassphrase, nullptr);
  if (key == nullptr) {
    const std::string why = TakeOpenSslError();
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds no PEM private key (expected -----BEGIN PRIVATE KEY-----",
                     why.empty() ? "" : "; ", why, ")"));
  }
  return KeyPtr(key);
}

std::string SubjectNames(X509* cert) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type == GEN_DNS) {
      const ASN1_STRING* s = name->d.dNSName;
      names.push_back(
          absl::StrCat("DNS:", std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                           static_cast<size_t>(ASN1_STRING_length(s)))));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = "?";
      const int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
      ::inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text);
      names.push_back(absl::StrCat("IP:", text));
    }
  }
  GENERAL_NAMES_free(sans);
  return names.empty() ? "no subject alternative names" : absl::StrJoin(names, ", ");
}

// A certificate and its key, as read from their files and checked against the CA.
struct PairCheck {
  std::string cert_path, key_path;
  int purpose;              // X509_PURPOSE_SSL_SERVER or X509_PURPOSE_SSL_CLIENT
  std::string server_name;  // servers: a name the certificate must hold
};

absl::Status CheckPair(const PairCheck& pair, const std::string& cert_pem,
                       const std::string& key_pem, const std::vector<X509Ptr>& ca,
                       const std::string& ca_path) {
  auto chain = ParseCertificates(pair.cert_path, cert_pem);
  if (!chain.ok()) return chain.status();
  auto key = ParsePrivateKey(pair.key_path, key_pem);
  if (!key.ok()) return key.status();
  X509* leaf = chain->front().get();
  if (X509_check_private_key(leaf, key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        pair.key_path, ": this key does not belong to the certificate in ", pair.cert_path));
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const X509Ptr& c : ca) X509_STORE_add_cert(store.get(), c.get());
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain->size(); ++i) sk_X509_push(untrusted, (*chain)[i].get());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted);
  // The purpose checks the extended key usage, as the TLS handshake will: a client certificate
  // offered as a server's is refused here rather than in every handshake.
  X509_STORE_CTX_set_purpose(ctx.get(), pair.purpose);
  const int verified = X509_verify_cert(ctx.get());
  const int error = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(untrusted);  // the certificates themselves belong to `chain`
  ERR_clear_error();
  if (verified != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        pair.cert_path, ": not accepted with the CA in ", ca_path, ": ",
        X509_verify_cert_error_string(error),
        error == X509_V_ERR_INVALID_PURPOSE
            ? (pair.purpose == X509_PURPOSE_SSL_SERVER
                   ? " (its extended key usage does not allow TLS server authentication)"
                   : " (its extended key usage does not allow TLS client authentication)")
            : ""));
  }
  if (!pair.server_name.empty() &&
      X509_check_host(leaf, pair.server_name.data(), pair.server_name.size(), 0, nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        pair.cert_path, ": does not name the server name '", pair.server_name,
        "' that clients verify (security.tls_server_name, --tls-server-name); it names ",
        SubjectNames(leaf)));
  }
  return absl::OkStatus();
}

// PEM files are a few KiB; ReadFile's message names the path.
absl::StatusOr<std::string> ReadTlsFile(const std::string& path) {
  return ReadFile(path, size_t{1} << 20);
}

}  // namespace

const std::vector<std::string>& TlsModeNames() {
  static const auto* names = new std::vector<std::string>{"off", "on", "mutual"};
  return *names;
}

absl::StatusOr<TlsMode> TlsModeFromName(std::string_view name) {
  if (name == "off") return TlsMode::kOff;
  if (name == "on") return TlsMode::kOn;
  if (name == "mutual") return TlsMode::kMutual;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown TLS mode '", std::string(name),
                   "' (allowed: ", absl::StrJoin(TlsModeNames(), ", "), ")"));
}

std::string TlsModeName(TlsMode mode) {
  switch (mode) {
    case TlsMode::kOff:
      return "off";
    case TlsMode::kOn:
      return "on";
    case TlsMode::kMutual:
      return "mutual";
  }
  return "off";
}

absl::StatusOr<TlsSettings> TlsSettingsFromFlags(const TlsFlagValues& flags) {
  TlsSettings settings;
  auto mode = TlsModeFromName(flags.mode);
  if (!mode.ok())
    return absl::InvalidArgumentError(absl::StrCat(kTlsFlag, ": ", mode.status().message()));
  settings.mode = *mode;
  settings.dir = flags.dir;
  settings.server_name = flags.server_name;
  if (settings.mode == TlsMode::kOff) {
    if (!flags.dir.empty() || flags.server_name != kDefaultTlsServerName) {
      return absl::InvalidArgumentError(
          absl::StrCat(flags.dir.empty() ? kTlsServerNameFlag : kTlsDirFlag, " is given but ",
                       kTlsFlag, " is off, so calls would travel in plaintext: pass ", kTlsFlag,
                       " on or ", kTlsFlag, " mutual (docs/security.md)"));
    }
    return settings;
  }
  if (flags.dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTlsFlag, " ", flags.mode, " needs ", kTlsDirFlag, " DIR, the directory with ",
                     kTlsCaFile, ", ", kTlsServerCertFile, ", ", kTlsServerKeyFile,
                     settings.mode == TlsMode::kMutual
                         ? absl::StrCat(", ", kTlsClientCertFile, ", ", kTlsClientKeyFile)
                         : "",
                     " (docs/security.md)"));
  }
  if (flags.server_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kTlsServerNameFlag, " is empty"));
  }
  return settings;
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsSettings& settings, TlsUse use) {
  TlsMaterial m;
  m.mode = settings.mode;
  m.server_name = settings.server_name;
  if (settings.mode == TlsMode::kOff) return m;
  auto in_dir = [&](const char* name) { return absl::StrCat(settings.dir, "/", name); };
  const std::string ca_path = in_dir(kTlsCaFile);
  auto ca_pem = ReadTlsFile(ca_path);
  if (!ca_pem.ok()) return ca_pem.status();
  auto ca = ParseCertificates(ca_path, *ca_pem);
  if (!ca.ok()) return ca.status();
  for (const X509Ptr& c : *ca) {
    if (X509_check_ca(c.get()) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          ca_path,
          ": holds a certificate that is not a CA's (basicConstraints CA:TRUE missing); "
          "it should hold the certificate that signed server.pem and client.pem"));
    }
  }
  m.ca_pem = *std::move(ca_pem);

  auto load_pair = [&](const char* cert_name, const char* key_name, int purpose,
                       const std::string& server_name, std::string* cert_out,
                       std::string* key_out) -> absl::Status {
    PairCheck pair{in_dir(cert_name), in_dir(key_name), purpose, server_name};
    auto cert = ReadTlsFile(pair.cert_path);
    if (!cert.ok()) return cert.status();
    auto key = ReadTlsFile(pair.key_path);
    if (!key.ok()) return key.status();
    if (absl::Status s = CheckPair(pair, *cert, *key, *ca, ca_path); !s.ok()) return s;
    *cert_out = *std::move(cert);
    *key_out = *std::move(key);
    return absl::OkStatus();
  };
  if (use == TlsUse::kServerAndClient) {
    if (absl::Status s = load_pair(kTlsServerCertFile, kTlsServerKeyFile, X509_PURPOSE_SSL_SERVER,
                                   settings.server_name, &m.server_cert_pem, &m.server_key_pem);
        !s.ok()) {
      return s;
    }
  }
  if (settings.mode == TlsMode::kMutual) {
    if (absl::Status s = load_pair(kTlsClientCertFile, kTlsClientKeyFile, X509_PURPOSE_SSL_CLIENT,
                                   "", &m.client_cert_pem, &m.client_key_pem);
        !s.ok()) {
      return s;
    }
  }
  return m;
}

std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(const TlsMaterial& material) {
  grpc::SslCredentialsOptions options;
  // Only the run's CA: never the system's roots, which would accept any public certificate.
  options.pem_root_certs = material.ca_pem;
  options.pem_cert_chain = material.client_cert_pem;
  options.pem_private_key = material.client_key_pem;
  return grpc::SslCredentials(options);
}

void SetTlsTargetName(const TlsMaterial& material, grpc::ChannelArguments* args) {
  args->SetSslTargetNameOverride(material.server_name);
}

}  // namespace strata

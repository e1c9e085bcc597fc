#include "services/common/wire/tls_certificates.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <absl/strings/str_cat.h>

#include "services/common/base/host_name.h"
#include "services/common/wire/openssl_ptr.h"

namespace strata {
namespace {

absl::Status OpenSslError(const std::string& what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  char text[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, text, sizeof text);
  return absl::InternalError(
      absl::StrCat("cannot make the run's certificates: ", what, ": ", text));
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return OpenSslError("EC key generation");
  return key;
}

// Adds one X509v3 extension in OpenSSL's configuration syntax ("critical,CA:TRUE").
absl::Status AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError(absl::StrCat("adding extension ", OBJ_nid2sn(nid)));
  return absl::OkStatus();
}

struct Subject {
  std::string common_name;
  // Extensions in order; the issuer's certificate must already hold its own for keyid lookups.
  std::vector<std::pair<int, std::string>> extensions;
};

// A certificate for `key`, signed by `issuer_key` (issuer == nullptr: self-signed).
absl::StatusOr<X509Ptr> Certify(const Subject& subject, EVP_PKEY* key, X509* issuer,
                                EVP_PKEY* issuer_key, const RunCertificateOptions& o) {
  X509Ptr cert(X509_new());
  if (!cert) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);  // v3
  // A random 127-bit serial: certificates of different runs never share one.
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return OpenSslError("serial number");
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -static_cast<long>(o.backdate.count()));
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(o.valid_for.count()));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Strata run"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(subject.common_name.c_str()),
                             -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  for (const auto& [nid, value] : subject.extensions) {
    if (absl::Status s = AddExtension(cert.get(), signer, nid, value.c_str()); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("signing");
  return cert;
}

absl::StatusOr<std::string> Pem(X509* cert, EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  const int ok = cert != nullptr ? PEM_write_bio_X509(bio.get(), cert)
                                 : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0,
                                                            nullptr, nullptr);
  if (ok != 1) return OpenSslError("PEM encoding");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Creates `path` (it must not exist) with `mode`, never following a link.
absl::Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// `dir` as a fresh private directory: created 0700, or an empty directory of this user's, made
// 0700. Certificates are never written into a directory others could have prepared.
absl::Status PrivateDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) return absl::OkStatus();
  if (errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " exists and is not a directory of this user's"));
  }
  if (::chmod(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot chmod 0700 ", dir, ": ", std::strerror(errno)));
  }
  for (const char* name :
       {kTlsCaFile, kTlsServerCertFile, kTlsServerKeyFile, kTlsClientCertFile, kTlsClientKeyFile}) {
    if (::lstat(absl::StrCat(dir, "/", name).c_str(), &st) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " already holds ", name, "; certificates are made once per run"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteRunCertificates(const std::string& dir, const RunCertificateOptions& o) {
  // The name goes into the certificate's list of names as text: a comma in it would add entries.
  if (!IsDnsHostName(o.server_name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", o.server_name,
        "' is not a host name (labels of letters, digits and '-', separated by dots)"));
  }
  if (absl::Status s = PrivateDirectory(dir); !s.ok()) return s;
  auto ca_key = NewKey();
  if (!ca_key.ok()) return ca_key.status();
  auto ca = Certify({"Strata run CA",
                     {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                      {NID_key_usage, "critical,keyCertSign,cRLSign"},
                      {NID_subject_key_identifier, "hash"}}},
                    ca_key->get(), nullptr, ca_key->get(), o);
  if (!ca.ok()) return ca.status();

  auto server_key = NewKey();
  if (!server_key.ok()) return server_key.status();
  auto server =
      Certify({o.server_name,
               {{NID_basic_constraints, "critical,CA:FALSE"},
                {NID_key_usage, "critical,digitalSignature"},
                {NID_ext_key_usage, "serverAuth"},
                {NID_subject_alt_name,
                 absl::StrCat("DNS:", o.server_name, ",DNS:localhost,IP:127.0.0.1,IP:::1")},
                {NID_subject_key_identifier, "hash"},
                {NID_authority_key_identifier, "keyid:always"}}},
              server_key->get(), ca->get(), ca_key->get(), o);
  if (!server.ok()) return server.status();

  auto client_key = NewKey();
  if (!client_key.ok()) return client_key.status();
  auto client = Certify({"strata-client",
                         {{NID_basic_constraints, "critical,CA:FALSE"},
                          {NID_key_usage, "critical,digitalSignature"},
                          {NID_ext_key_usage, "clientAuth"},
                          {NID_subject_key_identifier, "hash"},
                          {NID_authority_key_identifier, "keyid:always"}}},
                        client_key->get(), ca->get(), ca_key->get(), o);
  if (!client.ok()) return client.status();

  struct Output {
    const char* name;
    X509* cert;
    EVP_PKEY* key;
    mode_t mode;
  };
  for (const Output& out : {Output{kTlsCaFile, ca->get(), nullptr, 0644},
                            Output{kTlsServerCertFile, server->get(), nullptr, 0644},
                            Output{kTlsServerKeyFile, nullptr, server_key->get(), 0600},
                            Output{kTlsClientCertFile, client->get(), nullptr, 0644},
                            Output{kTlsClientKeyFile, nullptr, client_key->get(), 0600}}) {
    auto pem = Pem(out.cert, out.key);
    absl::Status s =
        pem.ok() ? WriteNewFile(absl::StrCat(dir, "/", out.name), *pem, out.mode) : pem.status();
    if (!s.ok()) {
      // No half set left behind (a key without its certificate would only mislead).
      for (const char* name : {kTlsCaFile, kTlsServerCertFile, kTlsServerKeyFile,
                               kTlsClientCertFile, kTlsClientKeyFile}) {
        ::unlink(absl::StrCat(dir, "/", name).c_str());
        if (name == out.name) break;
      }
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace strata

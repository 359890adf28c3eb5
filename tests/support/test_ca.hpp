// A certificate authority made for one test (an EC P-256 key and a self-signed CA certificate),
// and the server certificates it issues, for loopback TLS servers (tls_front.hpp). Trust the CA
// through its PEM file (SSL_CERT_FILE, which the HTTP client's system store honours).
//
//   TestCa ca;
//   setenv("SSL_CERT_FILE", ca.write_pem(dir / "ca.pem").c_str(), 1);
//   TlsFront front(ca.issue("IP:127.0.0.1,DNS:localhost"), backend.port());
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace kernex::test {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using PkeyPtr = std::shared_ptr<EVP_PKEY>;
using X509Ptr = std::shared_ptr<X509>;

// A key and the certificate that names it.
struct TlsIdentity {
  PkeyPtr key;
  X509Ptr cert;
};

class TestCa {
 public:
  explicit TestCa(const std::string& name = "kernex test CA")
      : ca_(make(name, "critical,CA:TRUE", "critical,keyCertSign,cRLSign", nullptr)) {}

  // Writes the CA's certificate (PEM) to `path` and returns the path.
  std::string write_pem(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    const bool ok = PEM_write_X509(f, ca_.cert.get()) == 1;
    std::fclose(f);
    if (!ok) throw std::runtime_error("PEM_write_X509 failed");
    return path;
  }

  // A server certificate for `alt_names` ("IP:127.0.0.1,DNS:localhost"), signed by this CA.
  TlsIdentity issue(const std::string& alt_names) const {
    TlsIdentity id =
        make("kernex test server", "critical,CA:FALSE", "critical,digitalSignature", &ca_);
    add_extension(id.cert.get(), ca_.cert.get(), NID_subject_alt_name, alt_names);
    add_extension(id.cert.get(), ca_.cert.get(), NID_ext_key_usage, "serverAuth");
    sign(id.cert.get(), ca_.key.get());
    return id;
  }

 private:
  static void check(bool ok, const char* what) {
    if (!ok) throw std::runtime_error(std::string("test CA: ") + what + " failed");
  }

  static void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    check(ext != nullptr, "X509V3_EXT_conf_nid");
    check(X509_add_ext(cert, ext, -1) == 1, "X509_add_ext");
    X509_EXTENSION_free(ext);
  }

  static void sign(X509* cert, EVP_PKEY* key) {
    check(X509_sign(cert, key, EVP_sha256()) > 0, "X509_sign");
  }

  // A key and a certificate valid from an hour ago for a day; signed here when self-signed
  // (`issuer` null), else by the caller once its extensions are in.
  static TlsIdentity make(const std::string& name, const char* constraints, const char* usage,
                          const TlsIdentity* issuer) {
    static std::atomic<long> serial{1};
    TlsIdentity id;
    id.key = PkeyPtr(EVP_EC_gen("P-256"), PkeyFree{});
    check(id.key != nullptr, "EVP_EC_gen");
    id.cert = X509Ptr(X509_new(), X509Free{});
    X509* x = id.cert.get();
    check(X509_set_version(x, 2) == 1, "X509_set_version");
    ASN1_INTEGER_set(X509_get_serialNumber(x), ++serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    check(X509_set_pubkey(x, id.key.get()) == 1, "X509_set_pubkey");
    X509_NAME* subject = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
    X509* signer = issuer != nullptr ? issuer->cert.get() : nullptr;
    check(X509_set_issuer_name(x, X509_get_subject_name(signer != nullptr ? signer : x)) == 1,
          "X509_set_issuer_name");
    add_extension(x, signer, NID_basic_constraints, constraints);
    add_extension(x, signer, NID_key_usage, usage);
    add_extension(x, signer, NID_subject_key_identifier, "hash");
    if (issuer == nullptr) sign(x, id.key.get());
    return id;
  }

  TlsIdentity ca_;
};

}  // namespace kernex::test

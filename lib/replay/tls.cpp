// SPDX-License-Identifier: Apache-2.0
// The replay service's byte stream: plaintext on loopback (or when asked for loudly), else TLS
// 1.3 from OpenSSL with external PSKs derived from the channel's keys, or with certificates
// both ways. No session tickets, no resumption, no early data: every connection is a full
// handshake with fresh (EC)DHE, so a recorded handshake replayed is refused.
#include "lib/replay/tls.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "lib/posix/errors.hpp"
#include "lib/posix/unique_fd.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace prizma::replay {

// One key's PSK: HKDF-SHA-256 of the channel key, salted and labelled for this use only (a
// packet MAC key is never used as is for anything else).
struct TlsConfig::Psk {
    std::string identity;  // "prizma-replay-v1/ID"
    unsigned char key[32]{};
};

namespace {

constexpr std::size_t kPskBytes = 32;
constexpr std::string_view kIdentityPrefix = "prizma-replay-v1/";

std::string ssl_errors() {
    std::string out;
    while (const unsigned long e = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        out += out.empty() ? "" : "; ";
        out += buf;
    }
    return out.empty() ? "no detail" : out;
}

Error tls_error(const std::string& what) {
    return {Errc::invalid_argument, "replay: " + what + ": " + ssl_errors()};
}

bool derive_psk(const AuthKey& k, unsigned char* out) noexcept {
    static constexpr unsigned char kSalt[] = "prizma replay psk";
    const std::string info = "tls13 external psk, key id " + std::to_string(k.id);
    EVP_PKEY_CTX* p = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
    std::size_t len = kPskBytes;
    const bool ok =
        p != nullptr && EVP_PKEY_derive_init(p) > 0 && EVP_PKEY_CTX_set_hkdf_md(p, EVP_sha256()) > 0
        && EVP_PKEY_CTX_set1_hkdf_salt(p, kSalt, sizeof kSalt - 1) > 0
        && EVP_PKEY_CTX_set1_hkdf_key(p, k.bytes.data(), static_cast<int>(k.bytes.size())) > 0
        && EVP_PKEY_CTX_add1_hkdf_info(p, reinterpret_cast<const unsigned char*>(info.data()),
                                       static_cast<int>(info.size()))
               > 0
        && EVP_PKEY_derive(p, out, &len) > 0 && len == kPskBytes;
    EVP_PKEY_CTX_free(p);
    return ok;
}

const TlsConfig* config_of(SSL* ssl) noexcept {
    return static_cast<const TlsConfig*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
}

unsigned int server_psk(SSL* ssl,
                        const char* identity,
                        unsigned char* psk,
                        unsigned int max_len) noexcept {
    const TlsConfig* c = config_of(ssl);
    if (c == nullptr || identity == nullptr || max_len < kPskBytes || !c->psk_for(identity, psk)) {
        return 0;  // unknown identity: the handshake fails
    }
    return kPskBytes;
}

unsigned int client_psk(SSL* ssl,
                        const char* /*hint*/,
                        char* identity,
                        unsigned int max_identity,
                        unsigned char* psk,
                        unsigned int max_len) noexcept {
    const TlsConfig* c = config_of(ssl);
    if (c == nullptr || max_len < kPskBytes || c->client_identity().size() + 1 > max_identity
        || !c->psk_for(c->client_identity(), psk)) {
        return 0;
    }
    std::memcpy(identity, c->client_identity().c_str(), c->client_identity().size() + 1);
    return kPskBytes;
}

// A keyed client takes no certificate: TLS 1.3 lets a server ignore the offered PSK and
// authenticate with any certificate instead, and whoever answers on the address would then be
// trusted. Verification of any certificate fails, so that handshake fails at the Certificate.
int refuse_any_certificate(int /*preverify_ok*/, X509_STORE_CTX* /*store*/) noexcept {
    return 0;
}

}  // namespace

// The socket under a TLS connection, as its BIO sees it: ciphertext is gathered here and sent
// in large writes (a TLS record is at most 16 KiB; one send(2) per record costs a replay a
// system call every 100 records), always with MSG_NOSIGNAL (OpenSSL's own socket BIO writes
// with write(2): a peer gone would raise SIGPIPE in the application).
struct Link::Wire {
    static constexpr std::size_t kMaxPending = std::size_t{256} << 10U;
    int fd = -1;
    std::vector<std::byte> out;
    std::size_t sent = 0;
    std::size_t received = 0;  // bytes read (Link::received())
    /// Sends what is gathered; false when the socket is full (or failed: errno says).
    bool flush() noexcept {
        while (sent < out.size()) {
            const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
            if (n < 0) {
                return false;
            }
            sent += static_cast<std::size_t>(n);
        }
        out.clear();
        sent = 0;
        return true;
    }
};

namespace {

Link::Wire* wire_of(BIO* b) noexcept {
    return static_cast<Link::Wire*>(BIO_get_data(b));
}

int bio_write(BIO* b, const char* data, std::size_t len, std::size_t* written) {
    BIO_clear_retry_flags(b);
    Link::Wire& w = *wire_of(b);
    if (w.out.size() - w.sent >= Link::Wire::kMaxPending && !w.flush()) {
        if (errno == EAGAIN || errno == EINTR) {
            BIO_set_retry_write(b);
        }
        return 0;
    }
    try {
        const auto* p = reinterpret_cast<const std::byte*>(data);
        w.out.insert(w.out.end(), p, p + len);
    } catch (...) {
        return 0;
    }
    *written = len;
    return 1;
}

int bio_read(BIO* b, char* data, std::size_t len, std::size_t* got) {
    BIO_clear_retry_flags(b);
    const ssize_t n = ::recv(wire_of(b)->fd, data, len, 0);
    if (n > 0) {
        *got = static_cast<std::size_t>(n);
        wire_of(b)->received += *got;
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        BIO_set_retry_read(b);
    }
    return 0;
}

long bio_ctrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) {
    if (cmd != BIO_CTRL_FLUSH) {
        return 0;
    }
    BIO_clear_retry_flags(b);
    if (wire_of(b)->flush()) {
        return 1;
    }
    if (errno == EAGAIN || errno == EINTR) {
        BIO_set_retry_write(b);
    }
    return 0;
}

int bio_create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
}

const BIO_METHOD* socket_method() noexcept {
    static BIO_METHOD* const m = [] {
        BIO_METHOD* meth =
            BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "prizma replay socket");
        if (meth != nullptr) {
            BIO_meth_set_write_ex(meth, bio_write);
            BIO_meth_set_read_ex(meth, bio_read);
            BIO_meth_set_ctrl(meth, bio_ctrl);
            BIO_meth_set_create(meth, bio_create);
        }
        return meth;
    }();
    return m;
}

BIO* user_space_bio(Link::Wire* wire) noexcept {
    BIO* b = BIO_new(socket_method());
    if (b != nullptr) {
        BIO_set_data(b, wire);
    }
    return b;
}

bool has_certificates(const ReplaySecurity& s) noexcept {
    return !s.certificate_file.empty() || !s.private_key_file.empty() || !s.ca_file.empty();
}

Result<void, Error> load_certificates(SSL_CTX* ctx, const ReplaySecurity& s) {
    if (s.certificate_file.empty() || s.private_key_file.empty() || s.ca_file.empty()) {
        return Error(Errc::invalid_argument,
                     "replay: certificates need certificate_file, private_key_file and ca_file "
                     "(both ends present one: mutual authentication)");
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, s.certificate_file.c_str()) != 1) {
        return tls_error("certificate '" + s.certificate_file + "'");
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, s.private_key_file.c_str(), SSL_FILETYPE_PEM) != 1
        || SSL_CTX_check_private_key(ctx) != 1) {
        return tls_error("private key '" + s.private_key_file + "'");
    }
    if (SSL_CTX_load_verify_locations(ctx, s.ca_file.c_str(), nullptr) != 1) {
        return tls_error("CA file '" + s.ca_file + "'");
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return {};
}

}  // namespace

bool kernel_tls_available() noexcept {
    const posix::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    return s.valid() && ::setsockopt(s.get(), IPPROTO_TCP, TCP_ULP, "tls", 3) != 0
           && errno == ENOTCONN;
}

bool is_loopback(std::string_view address) noexcept {
    const std::string a(address);
    in_addr v4{};
    if (::inet_pton(AF_INET, a.c_str(), &v4) == 1) {
        return (ntohl(v4.s_addr) >> 24U) == 127U;
    }
    in6_addr v6{};
    if (::inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
        if (IN6_IS_ADDR_V4MAPPED(&v6)) {
            return v6.s6_addr[12] == 127U;
        }
        return IN6_IS_ADDR_LOOPBACK(&v6);
    }
    return false;
}

Result<std::shared_ptr<TlsConfig>, Error> TlsConfig::make(const ReplaySecurity& security,
                                                          bool server,
                                                          bool loopback) {
    std::shared_ptr<TlsConfig> c(new TlsConfig());
    const bool keys = security.keys.has_value();
    const bool certs = has_certificates(security);
    if (keys && certs) {
        return Error(Errc::invalid_argument,
                     "replay: keys or certificates, not both (choose one way to authenticate)");
    }
    if (!keys && !certs) {
        if (!loopback && !security.insecure) {
            return Error(Errc::invalid_argument,
                         "replay: refusing plaintext on a non-loopback address: the journal is "
                         "the stream's whole content. Set keys (the channel's key file) or "
                         "certificates, or `insecure` to accept an unprotected service");
        }
        c->describe_ = loopback ? "plaintext (loopback)"
                                : "PLAINTEXT, INSECURE: anyone on the network can read and "
                                  "forge the replay";
        return c;
    }
    c->ctx_ = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (c->ctx_ == nullptr) {
        return tls_error("SSL_CTX_new");
    }
    SSL_CTX_set_app_data(c->ctx_, c.get());
    (void)SSL_CTX_set_min_proto_version(c->ctx_, TLS1_3_VERSION);
    SSL_CTX_set_options(c->ctx_, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
    (void)SSL_CTX_set_num_tickets(c->ctx_, 0);
    SSL_CTX_set_session_cache_mode(c->ctx_, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_mode(c->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // Kernel TLS where the kernel has it: OpenSSL then gives the traffic keys to the socket
    // (setsockopt TLS_TX / TLS_RX) once the handshake has made them (Link::handshake()).
    // (Servers only: OpenSSL 3.0 hands TLS 1.3 keys to the kernel for sending, not receiving.)
    if (server && security.kernel_tls && kernel_tls_available()) {
        SSL_CTX_set_options(c->ctx_, SSL_OP_ENABLE_KTLS);
        c->kernel_tls_ = true;
    }
    // AES-GCM first (the PSK's hash is SHA-256: OpenSSL's default order would pick
    // ChaCha20-Poly1305, about half as fast where the CPU has AES instructions).
    if (SSL_CTX_set_ciphersuites(c->ctx_,
                                 "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                 "TLS_CHACHA20_POLY1305_SHA256")
        != 1) {
        return tls_error("ciphersuites");
    }
    // Read what the socket holds in one recv (not a record header, then its body): half the
    // system calls of a replay.
    SSL_CTX_set_read_ahead(c->ctx_, 1);
    SSL_CTX_set_default_read_buffer_len(c->ctx_, std::size_t{64} << 10U);
    c->server_name_ = security.server_name;
    if (certs) {
        if (auto r = load_certificates(c->ctx_, security); !r) {
            return r.error();
        }
        c->protection_ = Protection::tls_certificates;
        c->describe_ = c->kernel_tls_ ? "TLS 1.3, certificates (mutual); kernel TLS offered"
                                      : "TLS 1.3, certificates (mutual)";
        return c;
    }
    const auto& ks = security.keys->keys;
    if (ks.empty() || ks.size() > 4) {
        return Error(Errc::invalid_argument, "replay: 1 to 4 keys");
    }
    c->psks_ = std::make_unique<Psk[]>(ks.size());
    c->psk_count_ = ks.size();
    c->describe_ = "TLS 1.3, pre-shared keys";
    for (std::size_t i = 0; i < ks.size(); ++i) {
        c->psks_[i].identity = std::string(kIdentityPrefix) + std::to_string(ks[i].id);
        if (!derive_psk(ks[i], c->psks_[i].key)) {
            return tls_error("deriving the PSK");
        }
        c->describe_ += (i == 0 ? " " : ", ") + std::to_string(ks[i].id);
    }
    if (server) {
        SSL_CTX_set_psk_server_callback(c->ctx_, server_psk);
    } else {
        SSL_CTX_set_psk_client_callback(c->ctx_, client_psk);
        SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER, refuse_any_certificate);
    }
    c->protection_ = Protection::tls_psk;
    if (c->kernel_tls_) {
        c->describe_ += "; kernel TLS offered";
    }
    return c;
}

TlsConfig::~TlsConfig() {
    SSL_CTX_free(ctx_);
    for (std::size_t i = 0; i < psk_count_; ++i) {
        OPENSSL_cleanse(psks_[i].key, sizeof psks_[i].key);
    }
}

bool TlsConfig::psk_for(std::string_view identity, unsigned char* out) const noexcept {
    for (std::size_t i = 0; i < psk_count_; ++i) {
        if (psks_[i].identity == identity) {
            std::memcpy(out, psks_[i].key, kPskBytes);
            return true;
        }
    }
    return false;
}

const std::string& TlsConfig::client_identity() const noexcept {
    static const std::string none;
    return psk_count_ > 0 ? psks_[0].identity : none;
}

// ---- Link ---------------------------------------------------------------------------------

Result<Link, Error> Link::make(const TlsConfig& config,
                               int fd,
                               bool server,
                               std::string_view peer) {
    Link l;
    l.fd_ = fd;
    if (config.ctx() == nullptr) {
        return l;
    }
    l.psk_only_ = config.protection() == Protection::tls_psk;
    l.wire_ = std::make_unique<Wire>();
    l.wire_->fd = fd;
    l.ssl_ = SSL_new(config.ctx());
    BIO* bio = l.ssl_ != nullptr ? user_space_bio(l.wire_.get()) : nullptr;
    if (bio == nullptr) {
        return tls_error("SSL_new");
    }
    if (server && config.kernel_tls()) {
        // OpenSSL gives keys to the kernel only through its own socket BIO: the server's
        // sending side (what a replay moves in bulk) takes it; reading keeps ours.
        BIO* sock = BIO_new_socket(fd, BIO_NOCLOSE);
        if (sock == nullptr) {
            BIO_free(bio);
            return tls_error("BIO_new_socket");
        }
        SSL_set_bio(l.ssl_, bio, sock);
    } else {
        SSL_set_bio(l.ssl_, bio, bio);
    }
    if (server) {
        SSL_set_accept_state(l.ssl_);
        return l;
    }
    SSL_set_connect_state(l.ssl_);
    if (config.protection() == Protection::tls_certificates) {
        const std::string name =
            config.server_name().empty() ? std::string(peer) : config.server_name();
        in6_addr any{};
        const bool ip = ::inet_pton(AF_INET, name.c_str(), &any) == 1
                        || ::inet_pton(AF_INET6, name.c_str(), &any) == 1;
        const int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(l.ssl_), name.c_str())
                          : SSL_set1_host(l.ssl_, name.c_str());
        if (ok != 1
            || (!ip
                && SSL_ctrl(l.ssl_, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                            const_cast<char*>(name.c_str()))  // the macro's cast
                       != 1)) {
            return tls_error("server name '" + name + "'");
        }
    }
    return l;
}

Link::Link() noexcept = default;

Link::Link(Link&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      kernel_tx_(std::exchange(o.kernel_tx_, false)),
      psk_only_(std::exchange(o.psk_only_, false)),
      wire_(std::move(o.wire_)),
      ssl_(std::exchange(o.ssl_, nullptr)),
      error_(std::move(o.error_)) {}

Link& Link::operator=(Link&& o) noexcept {
    if (this != &o) {
        SSL_free(ssl_);
        fd_ = std::exchange(o.fd_, -1);
        kernel_tx_ = std::exchange(o.kernel_tx_, false);
        psk_only_ = std::exchange(o.psk_only_, false);
        ssl_ = std::exchange(o.ssl_, nullptr);
        wire_ = std::move(o.wire_);
        error_ = std::move(o.error_);
    }
    return *this;
}

Link::~Link() {
    SSL_free(ssl_);
}

Link::Io Link::result(int ret, const char* what) noexcept {
    const int e = SSL_get_error(ssl_, ret);
    switch (e) {
        case SSL_ERROR_WANT_READ: return Io::want_read;
        case SSL_ERROR_WANT_WRITE: return Io::want_write;
        case SSL_ERROR_ZERO_RETURN: return Io::closed;
        default: break;
    }
    try {
        error_ = std::string("TLS ") + what + " failed: ";
        if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
            error_ += errno != 0 ? posix::errno_text(errno) : "the peer closed the connection";
        } else {
            error_ += ssl_errors();
        }
        const long v = SSL_get_verify_result(ssl_);
        if (v != X509_V_OK) {
            error_ += std::string(" (certificate: ") + X509_verify_cert_error_string(v) + ")";
        }
    } catch (...) {  // NOLINT(bugprone-empty-catch): the text is best effort
    }
    ERR_clear_error();
    return Io::failed;
}

Link::Io Link::os_failure() noexcept {
    const int err = errno;
    try {
        error_ = posix::errno_text(err);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the text is best effort
    }
    return Io::failed;
}

Link::Io Link::handshake() noexcept {
    if (ssl_ == nullptr) {
        return Io::done;
    }
    ERR_clear_error();
    errno = 0;
    const int r = SSL_do_handshake(ssl_);
    if (r != 1) {
        return result(r, "handshake");
    }
    // With keys, only a handshake that used the PSK counts (both ends): the peer accepted the
    // offered key (for an external PSK, OpenSSL marks the session as resumed from it) and
    // authenticated with nothing else. The verify callback already refuses a certificate;
    // this is the check that does not depend on how the handshake failed to use the key.
    if (psk_only_
        && (SSL_session_reused(ssl_) != 1 || SSL_get0_peer_certificate(ssl_) != nullptr)) {
        try {
            error_ =
                "TLS handshake failed: the peer did not use the pre-shared key (it "
                "authenticated another way, e.g. with a certificate)";
        } catch (...) {  // NOLINT(bugprone-empty-catch): the text is best effort
        }
        return Io::failed;
    }
    if (!settle_kernel_tls()) {
        try {
            error_ = "TLS handshake failed: out of memory";
        } catch (...) {  // NOLINT(bugprone-empty-catch): the text is best effort
        }
        return Io::failed;
    }
    return Io::done;
}

// After the handshake: where OpenSSL's socket BIO stands in for ours (kernel TLS tried), keep
// it if the kernel took the keys; else put ours back, so that the connection goes on exactly
// as without kernel TLS (ciphertext gathered, large sends with MSG_NOSIGNAL).
bool Link::settle_kernel_tls() noexcept {
    BIO* w = SSL_get_wbio(ssl_);
    if (w == SSL_get_rbio(ssl_) || BIO_method_type(w) != BIO_TYPE_SOCKET) {
        return true;  // not tried
    }
    kernel_tx_ = BIO_get_ktls_send(w);
    if (!kernel_tx_) {
        BIO* ours = user_space_bio(wire_.get());
        if (ours == nullptr) {
            return false;
        }
        SSL_set0_wbio(ssl_, ours);
    }
    return true;
}

Link::Io Link::read(std::byte* p, std::size_t n, std::size_t& got) noexcept {
    got = 0;
    if (ssl_ == nullptr) {
        const ssize_t r = ::recv(fd_, p, n, 0);
        if (r > 0) {
            got = static_cast<std::size_t>(r);
            return Io::done;
        }
        if (r == 0) {
            return Io::closed;
        }
        if (errno == EAGAIN || errno == EINTR) {
            return Io::want_read;
        }
        return os_failure();
    }
    ERR_clear_error();
    errno = 0;
    return SSL_read_ex(ssl_, p, n, &got) == 1 ? Io::done : result(0, "read");
}

Link::Io Link::write(const std::byte* p, std::size_t n, std::size_t& put) noexcept {
    put = 0;
    // Plaintext, or kernel TLS: the kernel cuts what send(2) takes into records and encrypts
    // them (one call for a whole buffer, not one per 16 KiB record as SSL_write would).
    if (ssl_ == nullptr || kernel_tx_) {
        const ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL);
        if (r >= 0) {
            put = static_cast<std::size_t>(r);
            return Io::done;
        }
        if (errno == EAGAIN || errno == EINTR) {
            return Io::want_write;
        }
        return os_failure();
    }
    ERR_clear_error();
    errno = 0;
    // Records up to the BIO's bound, then one send of them all.
    while (put < n) {
        std::size_t k = 0;
        if (SSL_write_ex(ssl_, p + put, n - put, &k) != 1) {
            const Io io = result(0, "write");
            if (io != Io::want_write || put == 0) {
                return io;
            }
            break;
        }
        put += k;
    }
    return flush();
}

Link::Io Link::flush() noexcept {
    if (!wire_ || wire_->flush()) {
        return Io::done;
    }
    // The socket is full: the rest stays pending (the caller waits for it to be writable).
    return errno == EAGAIN || errno == EINTR ? Io::done : os_failure();
}

std::size_t Link::pending() const noexcept {
    return wire_ ? wire_->out.size() - wire_->sent : 0;
}

std::size_t Link::received() const noexcept {
    return wire_ ? wire_->received : 0;
}

}  // namespace prizma::replay

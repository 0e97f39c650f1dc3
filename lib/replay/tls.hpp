// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prizma/replay.hpp>

// The replay service's byte stream: plaintext, or TLS 1.3 from OpenSSL (docs/STREAMS.md,
// "Protecting the replay service"). OpenSSL stays in this target (prizma::replay): nothing of
// it reaches a public header or the core library.
using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace prizma::replay {

/// How a replay connection is protected, as decided from ReplaySecurity and the address.
enum class Protection : std::uint8_t { plaintext, tls_psk, tls_certificates };

/// One end's TLS configuration (an SSL_CTX): PSKs derived from the channel's keys, or
/// certificates. Shared by every connection of that end; immutable once made.
class TlsConfig {
public:
    /// Errors: Errc::invalid_argument (keys and certificates both, unreadable or mismatched
    /// files, plaintext refused on a non-loopback address without `insecure`).
    static Result<std::shared_ptr<TlsConfig>, Error> make(const ReplaySecurity& security,
                                                          bool server,
                                                          bool loopback);
    TlsConfig(const TlsConfig&) = delete;
    TlsConfig& operator=(const TlsConfig&) = delete;
    TlsConfig(TlsConfig&&) = delete;
    TlsConfig& operator=(TlsConfig&&) = delete;
    ~TlsConfig();

    [[nodiscard]] Protection protection() const noexcept { return protection_; }
    /// For logs and tools: "TLS 1.3, pre-shared keys 7, 8", "plaintext (loopback)", ...
    [[nodiscard]] const std::string& describe() const noexcept { return describe_; }
    [[nodiscard]] SSL_CTX* ctx() const noexcept { return ctx_; }
    /// The PSK of a key id (server), or of the first key (client); 32 bytes.
    [[nodiscard]] bool psk_for(std::string_view identity, unsigned char* out) const noexcept;
    [[nodiscard]] const std::string& client_identity() const noexcept;
    [[nodiscard]] const std::string& server_name() const noexcept { return server_name_; }
    /// Kernel TLS is to be tried on this server's connections: asked for (ReplaySecurity::
    /// kernel_tls), TLS, and the kernel has the `tls` module (kernel_tls_available()).
    [[nodiscard]] bool kernel_tls() const noexcept { return kernel_tls_; }

    struct Psk;

private:
    TlsConfig() = default;
    Protection protection_ = Protection::plaintext;
    std::string describe_;
    std::string server_name_;
    bool kernel_tls_ = false;
    SSL_CTX* ctx_ = nullptr;
    std::unique_ptr<Psk[]> psks_;
    std::size_t psk_count_ = 0;
};

/// One connection's byte stream over a non-blocking socket (not owned): plaintext or TLS.
/// Never raises SIGPIPE.
class Link {
public:
    enum class Io : std::uint8_t { done, want_read, want_write, closed, failed };

    Link() noexcept;
    /// `peer`: the address connected to (a client checks the server's certificate against it
    /// when no server_name is configured).
    static Result<Link, Error> make(const TlsConfig& config,
                                    int fd,
                                    bool server,
                                    std::string_view peer);
    Link(Link&& other) noexcept;
    Link& operator=(Link&& other) noexcept;
    Link(const Link&) = delete;
    Link& operator=(const Link&) = delete;
    ~Link();

    /// Drives the TLS handshake (done at once for plaintext). With TlsConfig::kernel_tls(), a
    /// server's sending side goes through OpenSSL's socket BIO during the handshake, so that
    /// OpenSSL can hand the keys to the kernel; once done, the server either sends through the
    /// kernel (kernel_tx()) or is back on the user-space path. That BIO writes with write(2):
    /// the server's thread must block SIGPIPE. With keys, a handshake that did not use the
    /// PSK (a peer that authenticated with a certificate instead) fails.
    Io handshake() noexcept;
    /// Up to `n` bytes; done with `got` > 0, or want_read (nothing now), closed, failed.
    Io read(std::byte* p, std::size_t n, std::size_t& got) noexcept;
    /// Up to `n` bytes; done with `put` > 0, or want_write (the socket is full), failed.
    /// TLS gathers ciphertext (up to 256 KiB) and sends it in large writes: what the socket
    /// did not take yet is pending() until flush() sends it.
    Io write(const std::byte* p, std::size_t n, std::size_t& put) noexcept;
    /// Sends gathered ciphertext: done (maybe with some still pending), or failed.
    Io flush() noexcept;
    [[nodiscard]] std::size_t pending() const noexcept;
    /// Bytes read from the socket so far (TLS: ciphertext, the handshake's included).
    [[nodiscard]] std::size_t received() const noexcept;
    /// What failed, after Io::failed.
    [[nodiscard]] const std::string& error() const noexcept { return error_; }
    [[nodiscard]] bool secure() const noexcept { return ssl_ != nullptr; }
    /// After the handshake: the kernel encrypts what write() sends (a plain send(2)).
    [[nodiscard]] bool kernel_tx() const noexcept { return kernel_tx_; }

    struct Wire;

private:
    Io result(int ret, const char* what) noexcept;
    Io os_failure() noexcept;
    bool settle_kernel_tls() noexcept;
    int fd_ = -1;
    bool kernel_tx_ = false;
    bool psk_only_ = false;       // keys: a handshake that did not use the PSK fails
    std::unique_ptr<Wire> wire_;  // TLS: the BIO's socket and gathered ciphertext
    SSL* ssl_ = nullptr;
    std::string error_;
};

/// The kernel can take TLS keys: setting the `tls` ULP on an unconnected TCP socket fails with
/// ENOTCONN when the module is there (loaded on demand), ENOENT when it is not.
bool kernel_tls_available() noexcept;

/// True for 127.0.0.0/8 and ::1 (and ::ffff:127.x.y.z).
bool is_loopback(std::string_view address) noexcept;

}  // namespace prizma::replay

// SPDX-License-Identifier: Apache-2.0
// execlog-fix's FIX 4.4 drop-copy acceptor on QuickFIX: one session per account
// (SenderCompID PRIZMA, TargetCompID A<account>), each with its own MsgSeqNum, logon,
// heartbeats, test and resend requests and sequence resets, kept in QuickFIX's FileStore.
//
// This header is C++14 as well as C++20: QuickFIX 1.15's headers use dynamic exception
// specifications, which C++17 removed, so fix_acceptor.cpp is compiled as C++14 and nothing
// of QuickFIX's shows here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace execlog {

struct FixAcceptorOptions {
    std::uint16_t port = 0;           ///< SocketAcceptPort (QuickFIX 1.15 binds every address)
    std::string store_dir;            ///< FileStorePath: one store per session
    std::string sender = "PRIZMA";    ///< SenderCompID
    std::uint32_t first_account = 1;  ///< sessions for accounts first..last
    std::uint32_t last_account = 1000;
    bool verbose_events = false;  ///< print every session event, not just logons, resends, ...
};

/// The acceptor. Thread-safety: send() and the queries are called from one thread (the event
/// loop); QuickFIX's own thread (after start()) serves the sockets, and each session's
/// state is behind the session's lock.
class FixAcceptor {
public:
    /// Makes the sessions (their stores are read now); listens after start(). Null with
    /// `error` set when QuickFIX refuses the configuration or a store cannot be opened.
    static std::unique_ptr<FixAcceptor> create(const FixAcceptorOptions& options,
                                               std::string& error);
    ~FixAcceptor();
    FixAcceptor(const FixAcceptor&) = delete;
    FixAcceptor& operator=(const FixAcceptor&) = delete;
    FixAcceptor(FixAcceptor&&) = delete;
    FixAcceptor& operator=(FixAcceptor&&) = delete;

    /// Starts listening (QuickFIX's thread). false with `error` set on failure.
    bool start(std::string& error);
    /// Logs every session out and stops listening.
    void stop();

    [[nodiscard]] bool has_session(std::uint32_t account) const;
    /// The account's next sender MsgSeqNum (0 without a session).
    [[nodiscard]] std::uint64_t next_sender_seq(std::uint32_t account) const;
    /// Application messages (not admin ones) the account's store holds from `from_seq` on.
    [[nodiscard]] std::uint64_t app_messages_since(std::uint32_t account,
                                                   std::uint64_t from_seq) const;
    /// Stores the message in the account's session (next MsgSeqNum; SendingTime now) and
    /// sends it if the firm is logged on; otherwise a resend request gets it later. false with
    /// `error` set when the session refused it or the store could not write it.
    bool send(std::uint32_t account,
              char msg_type,
              const std::vector<std::pair<int, std::string>>& fields,
              std::string& error);
    /// Sessions logged on now.
    [[nodiscard]] std::size_t logged_on() const;

private:
    struct Impl;
    explicit FixAcceptor(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace execlog

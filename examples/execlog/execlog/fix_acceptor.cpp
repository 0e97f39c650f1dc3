// SPDX-License-Identifier: Apache-2.0
// Compiled as C++14 (see fix_acceptor.hpp): QuickFIX 1.15's headers.
#include "execlog/fix_acceptor.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include <quickfix/Application.h>
#include <quickfix/FileStore.h>
#include <quickfix/Log.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketAcceptor.h>

namespace execlog {
namespace {

// QuickFIX's Application declares its callbacks with dynamic exception specifications; an
// override must repeat them (C++14 [except.spec]), and g++ calls each one deprecated.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated"
// NOLINTBEGIN(modernize-use-noexcept): the overrides must repeat QuickFIX's specifications

/// The drop copy receives only admin messages; an application message from a firm is
/// refused with a BusinessMessageReject (QuickFIX, on UnsupportedMessageType).
class DropCopyApp : public FIX::Application {
public:
    void onCreate(const FIX::SessionID& /*id*/) override {}
    void onLogon(const FIX::SessionID& /*id*/) override {}
    void onLogout(const FIX::SessionID& /*id*/) override {}
    void toAdmin(FIX::Message& /*msg*/, const FIX::SessionID& /*id*/) override {}
    void toApp(FIX::Message& /*msg*/, const FIX::SessionID& /*id*/) throw(FIX::DoNotSend) override {
    }
    void fromAdmin(const FIX::Message& /*msg*/,
                   const FIX::SessionID& /*id*/) throw(FIX::FieldNotFound,
                                                       FIX::IncorrectDataFormat,
                                                       FIX::IncorrectTagValue,
                                                       FIX::RejectLogon) override {}
    void fromApp(const FIX::Message& /*msg*/,
                 const FIX::SessionID& /*id*/) throw(FIX::FieldNotFound,
                                                     FIX::IncorrectDataFormat,
                                                     FIX::IncorrectTagValue,
                                                     FIX::UnsupportedMessageType) override {
        throw FIX::UnsupportedMessageType();
    }
};

// NOLINTEND(modernize-use-noexcept)
#pragma GCC diagnostic pop

/// Session events on stderr, one line each ("execlog-fix: FIX.4.4:PRIZMA->A7: Received
/// logon"); the messages themselves are in the store, not logged twice.
class EventLog : public FIX::Log {
public:
    EventLog(std::string prefix, bool verbose) : prefix_(std::move(prefix)), verbose_(verbose) {}
    void clear() override {}
    void backup() override {}
    void onIncoming(const std::string& /*msg*/) override {}
    void onOutgoing(const std::string& /*msg*/) override {}
    void onEvent(const std::string& text) override {
        if (!verbose_ && text.compare(0, 15, "Created session") == 0) {
            return;  // one per account at start: a thousand lines that say nothing
        }
        (void)std::fprintf(stderr, "execlog-fix: %s: %s\n", prefix_.c_str(), text.c_str());
    }

private:
    std::string prefix_;
    bool verbose_;
};

class EventLogFactory : public FIX::LogFactory {
public:
    explicit EventLogFactory(bool verbose) : verbose_(verbose) {}
    FIX::Log* create() override { return new EventLog("acceptor", verbose_); }
    FIX::Log* create(const FIX::SessionID& id) override {
        return new EventLog(id.toString(), verbose_);
    }
    void destroy(FIX::Log* log) override { delete log; }

private:
    bool verbose_;
};

/// Holds every free descriptor below FD_SETSIZE while it lives. QuickFIX 1.15 waits on its
/// sockets with select(), which cannot take a descriptor of FD_SETSIZE (1024) or more, and
/// each session's FileStore keeps four files open: made while this holds the low numbers,
/// the stores take the high ones, and the listening and the firms' sockets, made after it is
/// gone, get the low ones (up to about a thousand connections at once).
class LowFdReserve {
public:
    LowFdReserve() {
        // A user's default soft limit is FD_SETSIZE itself (1024): raised to the hard limit
        // first, as servers do. Without numbers above FD_SETSIZE to spare, holding the low
        // ones would leave the stores none at all: then nothing is held.
        rlimit rl{};
        if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)::setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur <= 2 * FD_SETSIZE) {
            return;
        }
        for (;;) {
            const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                return;  // out of descriptors: QuickFIX reports what it cannot open
            }
            if (fd >= FD_SETSIZE - 1) {
                (void)::close(fd);  // past the range: not ours to hold
                return;
            }
            fds_.push_back(fd);
        }
    }
    ~LowFdReserve() {
        for (const int fd : fds_) {
            (void)::close(fd);  // /dev/null, never written
        }
    }
    LowFdReserve(const LowFdReserve&) = delete;
    LowFdReserve& operator=(const LowFdReserve&) = delete;
    LowFdReserve(LowFdReserve&&) = delete;
    LowFdReserve& operator=(LowFdReserve&&) = delete;

private:
    std::vector<int> fds_;
};

std::string account_comp_id(std::uint32_t account) {
    return "A" + std::to_string(account);
}

}  // namespace

struct FixAcceptor::Impl {
    FixAcceptorOptions opt;
    DropCopyApp app;
    FIX::SessionSettings settings;
    std::unique_ptr<FIX::FileStoreFactory> stores;
    EventLogFactory logs{false};
    std::unique_ptr<FIX::SocketAcceptor> acceptor;
    std::vector<FIX::Session*> sessions;  // by account - first_account

    FIX::Session* session(std::uint32_t account) const {
        if (account < opt.first_account || account > opt.last_account) {
            return nullptr;
        }
        return sessions[account - opt.first_account];
    }
};

FixAcceptor::FixAcceptor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FixAcceptor::~FixAcceptor() {
    stop();
}

std::unique_ptr<FixAcceptor> FixAcceptor::create(const FixAcceptorOptions& o, std::string& error) {
    auto impl = std::make_unique<Impl>();
    impl->opt = o;
    impl->logs = EventLogFactory(o.verbose_events);
    const LowFdReserve reserve;
    try {
        FIX::Dictionary d;
        d.setString("ConnectionType", "acceptor");
        d.setInt("SocketAcceptPort", o.port);
        d.setBool("SocketReuseAddress", true);
        d.setBool("SocketNodelay", true);
        d.setString("FileStorePath", o.store_dir);
        // One session a day: QuickFIX resets a store made on an earlier day at 00:00 UTC.
        d.setString("StartTime", "00:00:00");
        d.setString("EndTime", "00:00:00");
        d.setBool("UseDataDictionary", false);  // Debian's QuickFIX ships no FIX44.xml
        d.setBool("ResetOnLogon", false);       // a firm that reconnects gets its gap resent
        d.setBool("ResetOnLogout", false);
        d.setBool("ResetOnDisconnect", false);
        d.setBool("PersistMessages", true);
        d.setBool("MillisecondsInTimeStamp", true);
        impl->settings.set(d);
        for (std::uint32_t a = o.first_account; a <= o.last_account && a != 0; ++a) {
            impl->settings.set(FIX::SessionID("FIX.4.4", o.sender, account_comp_id(a)),
                               FIX::Dictionary());
        }
        impl->stores = std::make_unique<FIX::FileStoreFactory>(o.store_dir);
        impl->acceptor = std::make_unique<FIX::SocketAcceptor>(impl->app, *impl->stores,
                                                               impl->settings, impl->logs);
        for (std::uint32_t a = o.first_account; a <= o.last_account && a != 0; ++a) {
            impl->sessions.push_back(impl->acceptor->getSession(
                FIX::SessionID("FIX.4.4", o.sender, account_comp_id(a))));
            if (impl->sessions.back() == nullptr) {
                error = "QuickFIX made no session for " + account_comp_id(a);
                return nullptr;
            }
        }
    } catch (const std::exception& e) {
        error = std::string("QuickFIX: ") + e.what();
        return nullptr;
    }
    return std::unique_ptr<FixAcceptor>(new FixAcceptor(std::move(impl)));
}

bool FixAcceptor::start(std::string& error) {
    try {
        impl_->acceptor->start();
    } catch (const std::exception& e) {
        error = std::string("QuickFIX: ") + e.what();
        return false;
    }
    return true;
}

void FixAcceptor::stop() {
    if (impl_ && impl_->acceptor && !impl_->acceptor->isStopped()) {
        impl_->acceptor->stop();
    }
}

bool FixAcceptor::has_session(std::uint32_t account) const {
    return impl_->session(account) != nullptr;
}

std::uint64_t FixAcceptor::next_sender_seq(std::uint32_t account) const {
    FIX::Session* s = impl_->session(account);
    return s == nullptr ? 0 : static_cast<std::uint64_t>(s->getExpectedSenderNum());
}

std::uint64_t FixAcceptor::app_messages_since(std::uint32_t account, std::uint64_t from_seq) const {
    FIX::Session* s = impl_->session(account);
    if (s == nullptr) {
        return 0;
    }
    const auto next = static_cast<std::uint64_t>(s->getExpectedSenderNum());
    if (from_seq == 0 || from_seq > next) {
        from_seq = 1;  // the store was reset since (a new day, or a firm's ResetSeqNumFlag)
    }
    if (from_seq >= next) {
        return 0;
    }
    std::vector<std::string> msgs;
    s->getStore()->get(static_cast<int>(from_seq), static_cast<int>(next - 1), msgs);
    std::uint64_t n = 0;
    for (const std::string& m : msgs) {
        const auto at = m.find(
            "\x01"
            "35=");
        if (at != std::string::npos && at + 5 < m.size() && m[at + 5] == '\x01'
            && (m[at + 4] == '8' || m[at + 4] == '9')) {
            ++n;
        }
    }
    return n;
}

bool FixAcceptor::send(std::uint32_t account,
                       char msg_type,
                       const std::vector<std::pair<int, std::string>>& fields,
                       std::string& error) {
    FIX::Session* s = impl_->session(account);
    if (s == nullptr) {
        error = "no session for account " + std::to_string(account);
        return false;
    }
    FIX::Message m;
    m.getHeader().setField(FIX::MsgType(std::string(1, msg_type)));
    for (const auto& f : fields) {
        m.setField(f.first, f.second);
    }
    try {
        // send() fills the header (BeginString, CompIDs, MsgSeqNum, SendingTime), stores the
        // message and writes it to the socket when logged on.
        if (!s->send(m)) {
            error = "QuickFIX did not send to " + account_comp_id(account);
            return false;
        }
    } catch (const std::exception& e) {
        error = std::string("QuickFIX: ") + e.what();
        return false;
    }
    return true;
}

std::size_t FixAcceptor::logged_on() const {
    std::size_t n = 0;
    for (FIX::Session* s : impl_->sessions) {
        if (s->isLoggedOn()) {
            ++n;
        }
    }
    return n;
}

}  // namespace execlog

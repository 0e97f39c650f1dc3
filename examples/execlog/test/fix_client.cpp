// SPDX-License-Identifier: Apache-2.0
// execlog-fix-client (tests only): firms' drop-copy clients. A QuickFIX initiator logs on as
// each of --accounts (SenderCompID A<n>, TargetCompID PRIZMA), cracks every application
// message with QuickFIX's FIX 4.4 classes (FIX44::MessageCracker) and checks the fields FIX 4.4
// requires and their enumerations; each message is written to --out as
//   A<n> <MsgSeqNum> <PossDupFlag Y|N> <the message, '|' for SOH>
// for the test to compare with the archive. --gap-after-ms T --gap-ms D: T ms after the first
// message, the first --gap-accounts sessions log out, and log on again D ms later (the
// acceptor's MsgSeqNum has moved on: QuickFIX asks for a resend). Stops on SIGTERM/SIGINT;
// exit 1 if any message broke a rule (each printed), 2 on a usage error.
//
// C++14, like execlog/fix_acceptor.cpp: QuickFIX 1.15's headers.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <quickfix/Application.h>
#include <quickfix/MessageStore.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketInitiator.h>
#include <quickfix/fix44/ExecutionReport.h>
#include <quickfix/fix44/MessageCracker.h>
#include <quickfix/fix44/OrderCancelReject.h>

namespace {

std::atomic<bool> g_stop{false};

/// A whole decimal number, or -1.
int number(const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1'000'000'000) {
        return -1;
    }
    return static_cast<int>(v);
}

extern "C" void on_signal(int /*sig*/) {
    g_stop.store(true);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated"
// NOLINTBEGIN(modernize-use-noexcept): the overrides must repeat QuickFIX's specifications  //
// QuickFIX's exception specifications

class DropCopyClient : public FIX::Application, public FIX44::MessageCracker {
public:
    explicit DropCopyClient(std::FILE* out) : out_(out) {}

    void onCreate(const FIX::SessionID& /*id*/) override {}
    void onLogon(const FIX::SessionID& id) override {
        (void)std::fprintf(stderr, "execlog-fix-client: %s: logged on\n", id.toString().c_str());
        ++logons_;
    }
    void onLogout(const FIX::SessionID& id) override {
        (void)std::fprintf(stderr, "execlog-fix-client: %s: logged out\n", id.toString().c_str());
    }
    void toAdmin(FIX::Message& /*msg*/, const FIX::SessionID& /*id*/) override {}
    void toApp(FIX::Message& /*msg*/, const FIX::SessionID& /*id*/) throw(FIX::DoNotSend) override {
    }
    void fromAdmin(const FIX::Message& /*msg*/,
                   const FIX::SessionID& /*id*/) throw(FIX::FieldNotFound,
                                                       FIX::IncorrectDataFormat,
                                                       FIX::IncorrectTagValue,
                                                       FIX::RejectLogon) override {}
    void fromApp(const FIX::Message& msg,
                 const FIX::SessionID& id) throw(FIX::FieldNotFound,
                                                 FIX::IncorrectDataFormat,
                                                 FIX::IncorrectTagValue,
                                                 FIX::UnsupportedMessageType) override {
        std::lock_guard<std::mutex> lock(mu_);
        current_ = describe(msg, id);
        record(msg, id);
        // MessageCracker casts the message to the class of its MsgType; so that the object
        // really is of that class (UBSan's vptr check), a copy of that class is cracked.
        const std::string& type = msg.getHeader().getField(FIX::FIELD::MsgType);
        try {
            if (type == "8") {
                crack(FIX44::ExecutionReport(msg), id);
            } else if (type == "9") {
                crack(FIX44::OrderCancelReject(msg), id);
            } else {
                throw FIX::UnsupportedMessageType();
            }
        } catch (const FIX::UnsupportedMessageType&) {
            fail("an application message of a type a drop copy does not send");
        } catch (const FIX::Exception& e) {
            fail(std::string("QuickFIX could not read it: ") + e.what());
        }
    }

    void onMessage(const FIX44::ExecutionReport& m, const FIX::SessionID& id) override;
    void onMessage(const FIX44::OrderCancelReject& m, const FIX::SessionID& id) override;

    std::uint64_t messages() const { return messages_; }
    std::uint64_t resent() const { return resent_; }
    std::uint64_t violations() const { return violations_; }
    int logons() const { return logons_.load(); }

private:
    static std::string describe(const FIX::Message& msg, const FIX::SessionID& id) {
        return id.getSenderCompID().getValue()
               + " 34=" + msg.getHeader().getField(FIX::FIELD::MsgSeqNum);
    }

    void record(const FIX::Message& msg, const FIX::SessionID& id) {
        std::string raw = msg.toString();
        std::replace(raw.begin(), raw.end(), '\x01', '|');
        const FIX::FieldMap& h = msg.getHeader();
        const bool dup =
            h.isSetField(FIX::FIELD::PossDupFlag) && h.getField(FIX::FIELD::PossDupFlag) == "Y";
        (void)std::fprintf(out_, "%s %s %s %s\n", id.getSenderCompID().getValue().c_str(),
                           h.getField(FIX::FIELD::MsgSeqNum).c_str(), dup ? "Y" : "N", raw.c_str());
        (void)std::fflush(out_);
        ++messages_;
        resent_ += dup ? 1 : 0;
        const int seq = number(h.getField(FIX::FIELD::MsgSeqNum));
        int& last = last_seq_[id.getSenderCompID().getValue()];
        if (seq <= last) {
            fail("MsgSeqNum " + std::to_string(seq) + " after " + std::to_string(last));
        }
        last = seq;
        if (!h.isSetField(FIX::FIELD::SendingTime)) {
            fail("no SendingTime(52)");
        }
    }

    void fail(const std::string& why) {
        ++violations_;
        (void)std::fprintf(stderr, "execlog-fix-client: VIOLATION %s: %s\n", current_.c_str(),
                           why.c_str());
    }

    void require(bool ok, const std::string& why) {
        if (!ok) {
            fail(why);
        }
    }

    template <typename M>
    void check_account(const M& m, const FIX::SessionID& id) {
        FIX::Account account;
        m.get(account);
        require("A" + account.getValue() == id.getSenderCompID().getValue(),
                "Account(1) " + account.getValue() + " in another firm's session");
    }

    std::FILE* out_;
    std::mutex mu_;
    std::string current_;
    std::map<std::string, int> last_seq_;
    std::uint64_t messages_ = 0;
    std::uint64_t resent_ = 0;
    std::uint64_t violations_ = 0;
    std::atomic<int> logons_{0};
};

// NOLINTEND(modernize-use-noexcept)
#pragma GCC diagnostic pop

bool one_of(char c, const char* set) {
    return c != '\0' && std::string(set).find(c) != std::string::npos;
}

void DropCopyClient::onMessage(const FIX44::ExecutionReport& m, const FIX::SessionID& id) {
    // FIX 4.4 required: OrderID, ExecID, ExecType, OrdStatus, Side, LeavesQty, CumQty, AvgPx,
    // and the Instrument's Symbol (get() throws FieldNotFound for a missing one).
    FIX::OrderID order;
    FIX::ExecID exec;
    FIX::ExecType type;
    FIX::OrdStatus status;
    FIX::Side side;
    FIX::LeavesQty leaves;
    FIX::CumQty cum;
    FIX::AvgPx avg;
    FIX::Symbol symbol;
    FIX::ClOrdID cl;
    FIX::OrderQty qty;
    FIX::OrdType ord_type;
    FIX::TimeInForce tif;
    FIX::TransactTime when;
    m.get(order);
    m.get(exec);
    m.get(type);
    m.get(status);
    m.get(side);
    m.get(leaves);
    m.get(cum);
    m.get(avg);
    m.get(symbol);
    m.get(cl);
    m.get(qty);
    m.get(ord_type);
    m.get(tif);
    m.get(when);
    check_account(m, id);
    const char t = type.getValue();
    const char s = status.getValue();
    require(one_of(t, "0458CF"), std::string("ExecType(150) ") + t);
    require(one_of(s, "01248C"), std::string("OrdStatus(39) ") + s);
    require(one_of(side.getValue(), "12"), "Side(54)");
    require(one_of(ord_type.getValue(), "12"), "OrdType(40)");
    require(one_of(tif.getValue(), "03"), "TimeInForce(59)");
    require(leaves.getValue() >= 0 && cum.getValue() >= 0 && avg.getValue() >= 0,
            "a negative quantity or AvgPx");
    if (t == 'F') {
        FIX::LastQty last_qty;
        FIX::LastPx last_px;
        m.get(last_qty);
        m.get(last_px);
        require(last_qty.getValue() > 0, "a fill of no quantity");
        require(s == (leaves.getValue() == 0 ? '2' : '1'), "OrdStatus(39) of a fill");
    }
    if (t == '0' || t == '5' || t == 'F') {
        require(leaves.getValue() + cum.getValue() == qty.getValue(),
                "LeavesQty + CumQty != OrderQty");
    }
    if (t == '8') {
        FIX::OrdRejReason why;
        FIX::Text text;
        m.get(why);
        m.get(text);
        const int w = why.getValue();
        require(s == '8' && (w == 1 || w == 6 || w == 13 || w == 99),
                "OrdRejReason(103) " + std::to_string(w));
        require(leaves.getValue() == 0 && cum.getValue() == 0, "a reject with quantities");
    }
    if (t == '5' || t == '4') {
        FIX::OrigClOrdID orig;
        m.get(orig);
    }
    if (t == '5') {
        require(s == (cum.getValue() == 0 ? '0' : '1'), "OrdStatus(39) of a replace");
    }
    if (t == '4' || t == 'C') {
        require(s == t && leaves.getValue() == 0, "an order done with quantity left");
    }
}

void DropCopyClient::onMessage(const FIX44::OrderCancelReject& m, const FIX::SessionID& id) {
    // FIX 4.4 required: OrderID, ClOrdID, OrigClOrdID, OrdStatus, CxlRejResponseTo.
    FIX::OrderID order;
    FIX::ClOrdID cl;
    FIX::OrigClOrdID orig;
    FIX::OrdStatus status;
    FIX::CxlRejResponseTo to;
    FIX::CxlRejReason why;
    m.get(order);
    m.get(cl);
    m.get(orig);
    m.get(status);
    m.get(to);
    m.get(why);
    check_account(m, id);
    require(one_of(to.getValue(), "12"), "CxlRejResponseTo(434)");
    const int w = why.getValue();
    require(w == 1 || w == 2 || w == 99, "CxlRejReason(102) " + std::to_string(w));
    if (order.getValue() == "NONE") {
        require(w == 1 && status.getValue() == '8', "an unknown order's reject");
    } else {
        require(one_of(status.getValue(), "01"), "OrdStatus(39) of a standing order");
    }
}

struct Options {
    int port = 0;
    std::vector<std::string> accounts;
    std::string out;
    int gap_after_ms = -1;
    int gap_ms = 0;
    std::size_t gap_accounts = 0;
};

bool parse(int argc, char** argv, Options& o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const std::string v = argv[i + 1];
        if (k == "--port") {
            o.port = number(v);
        } else if (k == "--accounts") {
            std::istringstream in(v);
            std::string a;
            while (std::getline(in, a, ',')) {
                o.accounts.push_back("A" + a);
            }
        } else if (k == "--out") {
            o.out = v;
        } else if (k == "--gap-after-ms") {
            o.gap_after_ms = number(v);
        } else if (k == "--gap-ms") {
            o.gap_ms = std::max(0, number(v));
        } else if (k == "--gap-accounts") {
            o.gap_accounts = static_cast<std::size_t>(std::max(0, number(v)));
        } else {
            return false;
        }
    }
    return argc % 2 == 1 && o.port > 0 && !o.accounts.empty() && !o.out.empty();
}

void sleep_ms(int ms) {
    for (int i = 0; i < ms / 10 && !g_stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

/// Logs the first `n` sessions out, waits, logs them on again.
void make_gap(const Options& o) {
    for (std::size_t i = 0; i < o.gap_accounts && i < o.accounts.size(); ++i) {
        FIX::Session* s =
            FIX::Session::lookupSession(FIX::SessionID("FIX.4.4", o.accounts[i], "PRIZMA"));
        if (s != nullptr) {
            s->logout("execlog-fix-client: a gap on purpose");
        }
    }
    (void)std::fprintf(stderr, "execlog-fix-client: gap: %zu sessions logged out for %d ms\n",
                       o.gap_accounts, o.gap_ms);
    sleep_ms(o.gap_ms);
    for (std::size_t i = 0; i < o.gap_accounts && i < o.accounts.size(); ++i) {
        FIX::Session* s =
            FIX::Session::lookupSession(FIX::SessionID("FIX.4.4", o.accounts[i], "PRIZMA"));
        if (s != nullptr) {
            s->logon();
        }
    }
    (void)std::fprintf(stderr, "execlog-fix-client: gap: logging on again\n");
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse(argc, argv, o)) {
        (void)std::fprintf(stderr,
                           "usage: execlog-fix-client --port P --accounts N,N,... --out FILE "
                           "[--gap-after-ms T --gap-ms D --gap-accounts K]\n");
        return 2;
    }
    std::FILE* out = std::fopen(o.out.c_str(), "a");
    if (out == nullptr) {
        std::perror(o.out.c_str());
        return 1;
    }
    (void)std::signal(SIGTERM, on_signal);
    (void)std::signal(SIGINT, on_signal);
    DropCopyClient app(out);
    try {
        FIX::SessionSettings settings;
        FIX::Dictionary d;
        d.setString("ConnectionType", "initiator");
        d.setString("SocketConnectHost", "127.0.0.1");
        d.setInt("SocketConnectPort", o.port);
        d.setInt("HeartBtInt", 1);
        d.setInt("ReconnectInterval", 1);
        d.setString("StartTime", "00:00:00");
        d.setString("EndTime", "00:00:00");
        d.setBool("UseDataDictionary", false);
        settings.set(d);
        for (const std::string& a : o.accounts) {
            settings.set(FIX::SessionID("FIX.4.4", a, "PRIZMA"), FIX::Dictionary());
        }
        FIX::MemoryStoreFactory stores;  // one process: the sessions keep their numbers
        FIX::SocketInitiator initiator(app, stores, settings);
        initiator.start();
        bool gapped = o.gap_after_ms < 0;
        while (!g_stop.load()) {
            if (!gapped && app.messages() > 0) {
                sleep_ms(o.gap_after_ms);
                make_gap(o);
                gapped = true;
            }
            sleep_ms(20);
        }
        initiator.stop();
    } catch (const std::exception& e) {
        (void)std::fprintf(stderr, "execlog-fix-client: QuickFIX: %s\n", e.what());
        return 1;
    }
    (void)std::fclose(out);  // every line was flushed as written
    (void)std::fprintf(stderr,
                       "execlog-fix-client: final: messages %llu, resent %llu, logons %d, "
                       "violations %llu\n",
                       static_cast<unsigned long long>(app.messages()),
                       static_cast<unsigned long long>(app.resent()), app.logons(),
                       static_cast<unsigned long long>(app.violations()));
    return app.violations() == 0 ? 0 : 1;
}

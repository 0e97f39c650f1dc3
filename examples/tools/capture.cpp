// SPDX-License-Identifier: Apache-2.0
// prizma-capture: the audit trail. Joins a UDP channel and writes every PGM packet it hears
// (ODATA, RDATA, SPM, NCF, multicast SPMR) to a pcap file that Wireshark's PGM dissector
// decodes (`tshark -r F -d udp.port==PORT,pgm`); or replays such a capture onto a channel.
//
//   prizma-capture URI --output FILE.pcap [--count N] [--timeout SECONDS]
//   prizma-capture --replay FILE.pcap URI [--fast] [--max-gap SECONDS]
//
// Capture: each PGM packet is one pcap record (LINKTYPE_RAW: IPv4/IPv6 + UDP + PGM), source =
// the sender's address and port, destination = the channel's group and port. GSO/GRO
// super-datagrams are split into their PGM packets (a kernel capture on lo shows them as one
// unparseable blob). Unicast NAKs go to the source, not to the group: they are not heard.
// Replay: every record of a pcap (LINKTYPE_RAW, Ethernet or Linux cooked v1) that is a
// well-formed downstream PGM packet (checksum verified) is sent to URI's group, with the
// capture's timing or --fast; everything else is counted and skipped. A capture is input
// from anywhere: a gap between two records is waited at most --max-gap (1 s), and a record
// that is oversize (beyond the file's snaplen or the channel's max datagram) or cut short is
// skipped and counted, not the end of the replay.
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <prizma/prizma.hpp>

#include "cli.hpp"
#include "tool_util.hpp"

namespace {

constexpr std::uint32_t kPcapMagicUs = 0xa1b2c3d4U;
constexpr std::uint32_t kPcapMagicNs = 0xa1b23c4dU;
constexpr std::uint32_t kLinkRaw = 101;
constexpr std::uint32_t kLinkEthernet = 1;
constexpr std::uint32_t kLinkLinuxSll = 113;

void put16(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) {
    b[at] = static_cast<std::uint8_t>(v >> 8U);
    b[at + 1] = static_cast<std::uint8_t>(v);
}

std::uint16_t ip_checksum(const std::uint8_t* p, std::size_t n) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i + 1 < n; i += 2) {
        sum += static_cast<std::uint32_t>(p[i] << 8U | p[i + 1]);
    }
    while ((sum >> 16U) != 0) {
        sum = (sum & 0xffffU) + (sum >> 16U);
    }
    return static_cast<std::uint16_t>(~sum);
}

/// A udp:// channel opened for capture or replay, with the addressing its pcap records need.
struct Channel {
    std::unique_ptr<prizma::Transport> transport;
    prizma::IpAddress group;
    std::uint16_t port = 0;
    int ttl = 1;
};

/// One pcap record: raw IP + UDP + the PGM packet.
void write_record(std::FILE* f,
                  std::vector<std::uint8_t>& b,
                  const prizma::Endpoint& from,
                  const Channel& ch,
                  std::span<const std::byte> pgm,
                  std::int64_t wall_ns) {
    const bool v6 = from.family == 6;
    const std::size_t ip = v6 ? 40 : 20;
    const std::size_t udp_len = 8 + pgm.size();
    b.assign(ip + udp_len, 0);
    if (v6) {
        b[0] = 0x60;
        put16(b, 4, static_cast<std::uint32_t>(udp_len));
        b[6] = 17;
        b[7] = static_cast<std::uint8_t>(ch.ttl);
        std::memcpy(&b[8], from.addr.data(), 16);
        std::memcpy(&b[24], ch.group.bytes.data(), 16);
    } else {
        b[0] = 0x45;
        put16(b, 2, static_cast<std::uint32_t>(ip + udp_len));
        b[6] = 0x40;  // DF
        b[8] = static_cast<std::uint8_t>(ch.ttl);
        b[9] = 17;
        std::memcpy(&b[12], from.addr.data(), 4);
        std::memcpy(&b[16], ch.group.bytes.data(), 4);
        put16(b, 10, ip_checksum(b.data(), 20));
    }
    put16(b, ip, from.port);
    put16(b, ip + 2, ch.port);
    put16(b, ip + 4, static_cast<std::uint32_t>(udp_len));
    // UDP checksum 0 ("none") on IPv4; IPv6 requires one, but the PGM checksum covers the data.
    std::memcpy(&b[ip + 8], pgm.data(), pgm.size());
    const std::uint32_t rec[4] = {static_cast<std::uint32_t>(wall_ns / 1'000'000'000),
                                  static_cast<std::uint32_t>(wall_ns % 1'000'000'000 / 1000),
                                  static_cast<std::uint32_t>(b.size()),
                                  static_cast<std::uint32_t>(b.size())};
    (void)std::fwrite(rec, sizeof rec, 1, f);
    (void)std::fwrite(b.data(), 1, b.size(), f);
}

/// Opens URI's UDP channel through the public transport registry, to listen (a subscriber:
/// joined to the group) or to replay (a publisher: sends to the group, one datagram per
/// packet). Prints the error and returns nothing (rc: 2 usage, 1 system) on failure.
std::optional<Channel> open_channel(const std::string& uri, bool listen, int& rc) {
    auto parsed = prizma::ChannelUri::parse(uri);
    if (parsed && parsed->scheme != "udp") {
        parsed = prizma::Error(prizma::Errc::invalid_argument,
                               "prizma-capture works on udp:// channels, not '" + uri + "'");
    }
    std::optional<Channel> ch;
    if (parsed) {
        ch = Channel{};
        const std::string& a = parsed->address;
        const auto colon = a.rfind(':');
        std::string host = a.substr(0, colon == std::string::npos ? a.size() : colon);
        if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
            host = host.substr(1, host.size() - 2);
        }
        ch->group = prizma::IpAddress::parse(host);
        const std::string port = colon == std::string::npos ? "" : a.substr(colon + 1);
        (void)std::from_chars(port.data(), port.data() + port.size(), ch->port);
        if (const std::string* ttl = parsed->find("ttl")) {
            (void)std::from_chars(ttl->data(), ttl->data() + ttl->size(), ch->ttl);
        }
        if (!listen && parsed->find("gso") == nullptr) {
            parsed->params.push_back({"gso", "0"});  // replay: one datagram per packet
        }
    }
    prizma::TransportRegistry registry;
    prizma::udp::register_transport(registry);
    auto made =
        parsed ? (*registry.find("udp"))(prizma::TransportRequest{
            *parsed, listen ? prizma::ChannelRole::subscriber : prizma::ChannelRole::publisher,
            &prizma::packet_length})  // GRO-merged datagrams cut into packets
               : prizma::Result<prizma::TransportChannel, prizma::Error>(parsed.error());
    if (!made) {
        fmt::print(stderr, "prizma-capture: {}\n", made.error().message());
        rc = made.error() == std::errc::invalid_argument ? 2 : 1;
        return std::nullopt;
    }
    ch->transport = std::move(made->transport);
    return ch;
}

int capture(const std::string& uri, const std::string& out, std::uint64_t count, double timeout) {
    int rc = 0;
    auto ch = open_channel(uri, true, rc);
    if (!ch) {
        return rc;
    }
    prizma::Transport* t = ch->transport.get();
    std::FILE* f = std::fopen(out.c_str(), "wb");
    if (f == nullptr) {
        fmt::print(stderr, "prizma-capture: cannot write {}: {}\n", out,
                   std::system_category().message(errno));
        return 1;
    }
    const std::uint32_t hdr[6] = {kPcapMagicUs, 0x00040002U, 0, 0, 65535, kLinkRaw};
    (void)std::fwrite(hdr, sizeof hdr, 1, f);
    prizma::tools::stop_on_signals();
    fmt::print(stderr, "prizma-capture: capturing {} to {}\n", uri, out);
    std::vector<prizma::RxPacket> rx(64);
    std::vector<std::uint8_t> buf;
    std::uint64_t n = 0;
    std::uint64_t bytes = 0;
    auto last = std::chrono::steady_clock::now();
    while (!prizma::tools::stop_requested() && (count == 0 || n < count)) {
        auto r = t->poll_rx(rx);
        if (!r || *r == 0) {
            if (timeout > 0
                && std::chrono::steady_clock::now() - last
                       > std::chrono::duration<double>(timeout)) {
                break;
            }
            if (auto armed = t->arm_wakeup(); armed && *armed) {
                pollfd p{t->wakeup_fd(), POLLIN, 0};
                (void)::poll(&p, 1, 50);
            }
            continue;
        }
        last = std::chrono::steady_clock::now();
        const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
        for (std::size_t i = 0; i < *r && (count == 0 || n < count); ++i) {
            write_record(f, buf, rx[i].from, *ch, rx[i].data, wall);
            ++n;
            bytes += rx[i].data.size();
        }
        t->release_rx(*r);
    }
    const bool ok = std::fclose(f) == 0;
    fmt::print("captured {} PGM packets ({} bytes of PGM) to {}\n", n, bytes, out);
    return ok ? 0 : 1;
}

std::uint32_t rd32(const std::uint8_t* p, bool swap) {
    std::uint32_t v = 0;
    std::memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

/// Closes a file opened for reading (nothing to lose if closing fails).
struct ReadFileCloser {
    void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
};
using ReadFile = std::unique_ptr<std::FILE, ReadFileCloser>;

/// What the global header of a pcap file tells replay.
struct PcapFormat {
    bool swap = false;            ///< written in the other byte order
    std::int64_t frac_ns = 1000;  ///< nanoseconds per unit of a timestamp's fraction
    std::uint32_t link = 0;       ///< LINKTYPE_*
    std::uint32_t snaplen = 0;    ///< longest record (0: not given)
};

/// Reads the global header of `file`: a pcap (not pcapng) of raw IP, Ethernet or Linux
/// cooked frames. Prints what is wrong and returns nothing otherwise.
std::optional<PcapFormat> read_pcap_header(std::FILE* f, const std::string& file) {
    std::uint8_t gh[24];
    if (std::fread(gh, 1, sizeof gh, f) != sizeof gh) {
        fmt::print(stderr, "prizma-capture: {}: not a pcap file (too short)\n", file);
        return std::nullopt;
    }
    std::uint32_t magic = 0;
    std::memcpy(&magic, gh, 4);
    PcapFormat pf;
    pf.swap = magic == __builtin_bswap32(kPcapMagicUs) || magic == __builtin_bswap32(kPcapMagicNs);
    const std::uint32_t m = pf.swap ? __builtin_bswap32(magic) : magic;
    if (m != kPcapMagicUs && m != kPcapMagicNs) {
        fmt::print(stderr,
                   "prizma-capture: {}: not a pcap file (magic {:#x}; pcapng is not read)\n", file,
                   magic);
        return std::nullopt;
    }
    pf.frac_ns = m == kPcapMagicNs ? 1 : 1000;
    pf.snaplen = rd32(gh + 16, pf.swap);
    pf.link = rd32(gh + 20, pf.swap) & 0xffffU;
    if (pf.link != kLinkRaw && pf.link != kLinkEthernet && pf.link != kLinkLinuxSll) {
        fmt::print(stderr,
                   "prizma-capture: {}: link type {} not supported (raw IP, Ethernet, "
                   "Linux cooked)\n",
                   file, pf.link);
        return std::nullopt;
    }
    return pf;
}

/// The UDP payload of a record's first `incl` bytes (link layer `link`, then IPv4 or IPv6,
/// then UDP); empty when the record holds no (complete) UDP datagram.
std::span<const std::byte> udp_payload(const std::vector<std::uint8_t>& rec,
                                       std::size_t incl,
                                       std::uint32_t link) {
    // Link layer -> IP.
    std::size_t off = 0;
    std::uint32_t ethertype = 0;
    if (link == kLinkEthernet) {
        off = 14;
        ethertype = incl >= 14 ? static_cast<std::uint32_t>(rec[12] << 8U | rec[13]) : 0;
    } else if (link == kLinkLinuxSll) {
        off = 16;
        ethertype = incl >= 16 ? static_cast<std::uint32_t>(rec[14] << 8U | rec[15]) : 0;
    } else {
        ethertype = incl > 0 && rec[0] >> 4U == 6 ? 0x86ddU : 0x0800U;
    }
    std::size_t udp = 0;
    if (ethertype == 0x0800U && incl >= off + 20 && rec[off] >> 4U == 4 && rec[off + 9] == 17) {
        udp = off + static_cast<std::size_t>(rec[off] & 0x0fU) * 4;
    } else if (ethertype == 0x86ddU && incl >= off + 40 && rec[off + 6] == 17) {
        udp = off + 40;
    }
    if (udp == 0 || incl < udp + 8) {
        return {};
    }
    const auto ulen = static_cast<std::size_t>(rec[udp + 4] << 8U | rec[udp + 5]);
    if (ulen < 8 || udp + ulen > incl) {
        return {};
    }
    return {reinterpret_cast<const std::byte*>(&rec[udp + 8]), ulen - 8};
}

/// A well-formed downstream PGM packet (ODATA, RDATA, SPM, NCF; checksum verified): what
/// replay sends. Not PGM, damaged, or upstream (NAK, SPMR): nothing to replay.
bool replayable(std::span<const std::byte> pgm) {
    using prizma::PacketKind;
    const prizma::PacketSummary p = prizma::inspect_packet(pgm);
    return p.valid
           && (p.kind == PacketKind::odata || p.kind == PacketKind::rdata
               || p.kind == PacketKind::spm || p.kind == PacketKind::ncf);
}

/// Sends one packet to the channel's group, waiting while the socket is full. False after an
/// error (printed).
bool send_packet(prizma::Transport& t, std::span<const std::byte> pgm) {
    const prizma::TxPacket tx{pgm, {}, prizma::Route::downstream, {}};
    for (;;) {
        auto r = t.send_batch(std::span<const prizma::TxPacket>(&tx, 1));
        if (!r) {
            fmt::print(stderr, "prizma-capture: send: {}\n", r.error().message());
            return false;
        }
        if (*r == 1) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

/// One record read by next_record().
enum class Record : std::uint8_t {
    ok,         ///< in the buffer
    oversize,   ///< beyond the snaplen or the buffer, or longer than it was on the wire: skipped
    truncated,  ///< the file ends inside it
    end,        ///< no more records
};

/// Reads the next record of `f` into `rec` (its length into `incl`, its timestamp in ns into
/// `ts`). An oversize record is passed over, so the next call reads the one after it.
Record next_record(std::FILE* f,
                   const PcapFormat& pf,
                   std::vector<std::uint8_t>& rec,
                   std::uint32_t& incl,
                   std::int64_t& ts) {
    std::uint8_t rh[16];
    const std::size_t got = std::fread(rh, 1, sizeof rh, f);
    if (got != sizeof rh) {
        return got == 0 ? Record::end : Record::truncated;
    }
    incl = rd32(rh + 8, pf.swap);
    const std::uint32_t orig = rd32(rh + 12, pf.swap);
    ts = static_cast<std::int64_t>(rd32(rh, pf.swap)) * 1'000'000'000
         + static_cast<std::int64_t>(rd32(rh + 4, pf.swap)) * pf.frac_ns;
    if (incl > rec.size() || (pf.snaplen != 0 && incl > pf.snaplen) || incl > orig) {
        return std::fseek(f, static_cast<long>(incl), SEEK_CUR) == 0 ? Record::oversize
                                                                     : Record::truncated;
    }
    return std::fread(rec.data(), 1, incl, f) == incl ? Record::ok : Record::truncated;
}

/// The capture's timing: waits before each packet as long as the capture did since the
/// previous one, at most `max_gap` (a crafted timestamp could ask for years), never backwards.
struct Pacer {
    std::chrono::nanoseconds max_gap;
    std::int64_t prev_ts = -1;
    std::chrono::steady_clock::time_point due{};
    std::uint64_t capped = 0;  ///< gaps cut to max_gap

    void wait(std::int64_t ts) {
        if (prev_ts < 0) {
            due = std::chrono::steady_clock::now();
        } else {
            auto gap = std::chrono::nanoseconds(std::max<std::int64_t>(ts - prev_ts, 0));
            if (gap > max_gap) {
                gap = max_gap;
                ++capped;
            }
            due += gap;
            std::this_thread::sleep_until(due);
        }
        prev_ts = ts;
    }
};

struct ReplayOptions {
    bool fast = false;
    double max_gap_s = 1.0;
};

int replay(const std::string& file, const std::string& uri, const ReplayOptions& opt) {
    int rc = 0;
    auto ch = open_channel(uri, false, rc);
    if (!ch) {
        return rc;
    }
    prizma::Transport* t = ch->transport.get();
    const ReadFile f(std::fopen(file.c_str(), "rb"));
    if (f == nullptr) {
        fmt::print(stderr, "prizma-capture: cannot read {}: {}\n", file,
                   std::system_category().message(errno));
        return 1;
    }
    const std::optional<PcapFormat> pf = read_pcap_header(f.get(), file);
    if (!pf) {
        return 1;
    }
    const std::size_t max_datagram = t->caps().max_datagram;
    std::vector<std::uint8_t> rec(262144);
    std::uint64_t sent = 0;
    std::uint64_t skipped = 0;  // not replayable
    std::uint64_t damaged = 0;  // oversize or cut short
    Pacer pacer{std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(opt.max_gap_s))};
    std::uint32_t incl = 0;
    std::int64_t ts = 0;
    for (Record r = Record::ok;
         !prizma::tools::stop_requested() && r != Record::end && r != Record::truncated;) {
        r = next_record(f.get(), *pf, rec, incl, ts);
        if (r != Record::ok) {
            damaged += r == Record::end ? 0 : 1;
            continue;
        }
        const std::span<const std::byte> pgm = udp_payload(rec, incl, pf->link);
        if (!replayable(pgm)) {
            ++skipped;
            continue;
        }
        if (max_datagram != 0 && pgm.size() > max_datagram) {
            ++damaged;  // the channel cannot send it in one datagram
            continue;
        }
        if (!opt.fast) {
            pacer.wait(ts);
        }
        if (!send_packet(*t, pgm)) {
            return 1;
        }
        ++sent;
    }
    fmt::print(
        "replayed {} PGM packets to {}, skipped {} records ({} oversize or damaged), {} "
        "gaps capped at {} s\n",
        sent, uri, skipped + damaged, damaged, pacer.capped, opt.max_gap_s);
    return sent > 0 ? 0 : 1;
}

int run(int argc, char** argv) {
    std::string uri;
    std::string out;
    std::string replay_file;
    std::uint64_t count = 0;
    double timeout = 0;
    ReplayOptions ropt;
    CLI::App app{"", "prizma-capture"};
    prizma::tools::init(
        app,
        "prizma-capture URI --output FILE.pcap [--count N] [--timeout SECONDS]\n"
        "       prizma-capture --replay FILE.pcap URI [--fast] [--max-gap SECONDS]",
        "Capture writes every PGM packet heard on the channel URI (data, repairs, SPMs, NCFs)\n"
        "to a pcap file Wireshark decodes (tshark -r FILE -d udp.port==PORT,pgm). Replay\n"
        "sends a capture's PGM packets to URI's group with their original spacing.",
        "Capture stops at SIGINT/SIGTERM, after --count packets or --timeout seconds without\n"
        "one. Unicast NAKs go to the source, not to the group: they are not captured. Replay\n"
        "reads raw IP, Ethernet and Linux cooked captures (not pcapng) and skips every record\n"
        "that is not a well-formed downstream PGM packet (ODATA, RDATA, SPM, NCF), or is\n"
        "oversize (beyond the snaplen or URI's max datagram) or cut short; a gap between two\n"
        "records is waited at most --max-gap seconds. It prints how many of each.");
    app.add_option("URI", uri, "udp://GROUP:PORT?iface=ADDR (every key: docs/URI.md)")
        ->required()
        ->type_name("");
    auto* output = app.add_option("--output", out, "Capture into this pcap file")
                       ->type_name("FILE.pcap")
                       ->group("Capture");
    auto* count_opt = app.add_option("--count", count, "Stop after N packets (default 0: no limit)")
                          ->type_name("N")
                          ->check(prizma::tools::whole())
                          ->group("Capture");
    auto* timeout_opt = app.add_option("--timeout", timeout,
                                       "Stop after SECONDS without a packet (default 0: never)")
                            ->type_name("SECONDS")
                            ->check(prizma::tools::at_least(0))
                            ->group("Capture");
    auto* replay_opt = app.add_option("--replay", replay_file, "Replay this pcap file onto URI")
                           ->type_name("FILE.pcap")
                           ->group("Replay");
    auto* fast_opt =
        app.add_flag("--fast", ropt.fast, "Send back to back, not with the capture's timing")
            ->group("Replay");
    auto* gap_opt = app.add_option("--max-gap", ropt.max_gap_s,
                                   "Longest wait between two records (default 1); longer gaps\n"
                                   "in the capture are cut to it and counted")
                        ->type_name("SECONDS")
                        ->check(prizma::tools::at_least(0))
                        ->group("Replay");
    app.callback([&] {
        if (replay_opt->count() != 0) {
            for (const CLI::Option* o : {output, count_opt, timeout_opt}) {
                if (o->count() != 0) {
                    throw CLI::ExcludesError("--replay", o->get_name());
                }
            }
        } else if (fast_opt->count() != 0 || gap_opt->count() != 0) {
            throw CLI::RequiresError(fast_opt->count() != 0 ? "--fast" : "--max-gap", "--replay");
        } else if (output->count() == 0) {
            throw CLI::RequiredError("--output FILE.pcap (or --replay FILE.pcap)");
        }
    });
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    if (replay_opt->count() != 0) {
        return replay(replay_file, uri, ropt);
    }
    return capture(uri, out, count, timeout);
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-capture", run, argc, argv);
}

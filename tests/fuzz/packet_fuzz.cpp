// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the packet parser, then the protocol state machines fed with whatever
// parses. Neither may crash, hang or read out of bounds (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "lib/pgm/packet.hpp"
#include "lib/protocol/receiver.hpp"
#include "lib/protocol/source.hpp"

namespace {

struct NullSink final : prizma::protocol::PacketSink {
    void emit(const prizma::TxPacket& p) noexcept override {
        volatile std::size_t n = p.header.size() + p.payload.size();
        (void)n;
    }
};

struct State {
    std::unique_ptr<prizma::protocol::Receiver> receiver;
    std::unique_ptr<prizma::protocol::Source> source;
    std::int64_t now = 0;
    State() {
        prizma::protocol::ReceiverConfig rc;
        rc.group = prizma::pgm::Nla::ipv4(239, 1, 1, 1);
        rc.rxw_sqns = 256;
        rc.max_recover_sqns = 64;
        rc.max_peers = 4;
        rc.join = prizma::protocol::JoinPolicy::from_trail;
        rc.timers = prizma::protocol::preset(prizma::protocol::Preset::rdma);
        receiver = std::move(*prizma::protocol::Receiver::create(rc));
        prizma::protocol::SourceConfig sc;
        sc.tsi.sport = 4660;
        sc.tsi.gsi = prizma::Gsi{{0x40, 0x5e, 0xcb, 0xd1, 0x5c, 0xcd}};
        sc.nla = prizma::pgm::Nla::ipv4(127, 0, 0, 1);
        sc.group = prizma::pgm::Nla::ipv4(239, 192, 0, 1);
        sc.txw_sqns = 64;
        sc.timers = prizma::protocol::preset(prizma::protocol::Preset::rdma);
        source = std::move(*prizma::protocol::Source::create(sc));
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static State st;
    NullSink sink;
    const std::span<const std::byte> d(reinterpret_cast<const std::byte*>(data), size);
    prizma::pgm::Packet p;
    // Checksums off: let mutated packets reach the state machines.
    const prizma::pgm::ParseConfig cfg{true, false};
    const std::size_t wire = prizma::pgm::wire_length(d);  // any bytes: in bounds
    if (prizma::pgm::parse(d, p, cfg) != prizma::pgm::ParseStatus::ok) {
        return 0;
    }
    // What parse() accepts, wire_length() measures to the byte (POLL/POLR/ACK: header only).
    using prizma::pgm::PacketType;
    if (p.type != PacketType::poll && p.type != PacketType::polr && p.type != PacketType::ack
        && wire != size) {
        __builtin_trap();
    }
    st.now += 7000;
    if (p.is_upstream()) {
        st.source->on_packet(p, prizma::Endpoint{}, st.now, sink);
    }
    st.receiver->on_packet(p, prizma::Endpoint{}, st.now, sink);
    st.receiver->on_timer(st.now, sink);
    st.source->on_timer(st.now, sink);
    prizma::protocol::Event ev;
    for (int i = 0; i < 64 && st.receiver->next_event(ev); ++i) {
        volatile std::size_t n = ev.payload.size();
        (void)n;
    }
    if (size > 2 && data[0] == 0xff) {
        (void)st.source->send(d.subspan(1), st.now, sink);
    }
    return 0;
}

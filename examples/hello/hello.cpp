// SPDX-License-Identifier: Apache-2.0
// The smallest prizma program: one publisher and one subscriber in one process, on a channel
// given on the command line (default: an in-process network). Uses the public API only.
//
//   hello                                            # mem://hello:7500
//   hello "udp://239.192.0.1:7600?iface=127.0.0.1"   # real UDP multicast on loopback
#include <cstdio>
#include <string>
#include <string_view>

#include <prizma/prizma.hpp>

int main(int argc, char** argv) {
    const std::string uri = argc > 1 ? argv[1] : "mem://hello:7500";
    auto ctx = prizma::Context::create();
    if (!ctx) {
        std::fprintf(stderr, "hello: %s\n", ctx.error().message().c_str());
        return 1;
    }
    auto sub = ctx->add_subscriber(uri);
    auto pub = sub ? ctx->add_publisher(uri)
                   : prizma::Result<prizma::Publisher, prizma::Error>(sub.error());
    if (!sub || !pub) {
        std::fprintf(stderr, "hello: %s\n", (sub ? pub.error() : sub.error()).message().c_str());
        return 1;
    }
    int received = 0;
    for (int i = 0; i < 10; ++i) {
        const std::string text = "hello #" + std::to_string(i);
        const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
        for (;;) {  // back-pressure is a returned value: drive the context and retry
            auto r = pub->offer({bytes, text.size()});
            if (r || !prizma::is_transient(r.error())) {
                break;
            }
            (void)ctx->poll();
        }
    }
    const std::int64_t deadline = prizma::Context::now_ns() + 2'000'000'000;
    while (received < 10 && prizma::Context::now_ns() < deadline) {
        (void)ctx->poll();
        sub->poll(16, [&](const prizma::Message& m) {
            if (m.kind == prizma::MessageKind::data) {
                const std::string_view s(reinterpret_cast<const char*>(m.payload.data()),
                                         m.payload.size());
                std::printf("received sqn %u: %.*s\n", m.sqn.value, static_cast<int>(s.size()),
                            s.data());
                ++received;
            }
        });
    }
    std::printf("%d of 10 received\n", received);
    return received == 10 ? 0 : 1;
}

// SPDX-License-Identifier: Apache-2.0
// docs/URI.md against the URI key tables: every key a scheme takes is documented in its
// section, and every key documented there is taken. The documented keys of a section are
// the backticked lower-case names in the first cell of its table rows (`| `ttl` | ...`,
// `| `loss`, `tx_loss`, `seed` | ...`); upper-case names (`GROUP`, `PORT`) are address parts.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lib/pubsub/channel_keys.hpp"
#include "tests/support/catch.hpp"
#include "transports/memory/fault_injection.hpp"
#include "transports/udp/udp_transport.hpp"
#if PRIZMA_HAVE_VERBS
#include "transports/verbs/verbs_transport.hpp"
#endif

namespace {

using Keys = std::set<std::string, std::less<>>;

/// The keys documented in the `## ` section of docs/URI.md whose title contains `title`.
Keys documented_keys(std::string_view title) {
    std::ifstream in(std::string(PRIZMA_DOCS_DIR) + "/URI.md");
    REQUIRE(in);
    Keys out;
    bool inside = false;
    bool found = false;
    for (std::string line; std::getline(in, line);) {
        if (line.starts_with("## ")) {
            inside = line.find(title) != std::string::npos;
            found = found || inside;
            continue;
        }
        if (!inside || !line.starts_with("| `")) {
            continue;
        }
        const std::string_view cell = std::string_view(line).substr(1, line.find(" |", 1));
        for (std::size_t open = cell.find('`'); open != std::string_view::npos;) {
            const auto close = cell.find('`', open + 1);
            REQUIRE(close != std::string_view::npos);
            const auto name = cell.substr(open + 1, close - open - 1);
            const bool key = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
            });
            if (key) {
                out.emplace(name);
            }
            open = cell.find('`', close + 1);
        }
    }
    INFO("section " << title);
    REQUIRE(found);
    return out;
}

template <typename Names>
Keys to_set(const Names& names) {
    Keys out;
    for (const auto& n : names) {
        out.emplace(n);
    }
    return out;
}

/// The keys every scheme takes: the Context's, and the fault injector's (which
/// register_builtin_transports() installs over every built-in scheme).
Keys common_keys() {
    Keys out = to_set(prizma::detail::channel_uri_key_names());
    for (const auto& k : prizma::runtime::key_names(prizma::memory::fault_uri_keys())) {
        out.emplace(k);
    }
    return out;
}

/// Every key of `table` is documented in the section, and every key documented there is in
/// `table` or among the keys common to every scheme.
void check_scheme(std::string_view title, const Keys& table, const Keys& common) {
    const Keys doc = documented_keys(title);
    INFO("docs/URI.md section " << title);
    for (const auto& k : table) {
        INFO("key " << k << " is in the table");
        CHECK(doc.count(k) == 1);
    }
    for (const auto& k : doc) {
        INFO("key " << k << " is documented");
        CHECK((table.count(k) == 1 || common.count(k) == 1));
    }
}

}  // namespace

TEST_CASE("docs/URI.md documents exactly the keys of the channel key table", "[unit][uri][docs]") {
    const Keys channel = to_set(prizma::detail::channel_uri_key_names());
    REQUIRE(channel.size() >= 5);
    CHECK(documented_keys("Keys common to every scheme") == channel);
    check_scheme("`mem://`", {}, common_keys());
}

TEST_CASE("docs/URI.md documents exactly the keys of the fault injector", "[unit][uri][docs]") {
    const Keys faults = to_set(prizma::runtime::key_names(prizma::memory::fault_uri_keys()));
    CHECK(faults == Keys{"loss", "tx_loss", "seed"});
    CHECK(documented_keys("Fault injection") == faults);
}

TEST_CASE("docs/URI.md documents exactly the keys of the udp table", "[unit][uri][docs]") {
    const Keys common = common_keys();
    const Keys udp = to_set(prizma::runtime::key_names(prizma::udp::uri_keys()));
    CHECK(udp.count("sources") == 1);
    check_scheme("`udp://`", udp, common);
}

TEST_CASE("docs/URI.md documents exactly the keys of the verbs table", "[unit][uri][docs]") {
    const Keys common = common_keys();
#if PRIZMA_HAVE_VERBS
    const Keys verbs = to_set(prizma::runtime::key_names(prizma::verbs::uri_keys()));
    REQUIRE(verbs.size() >= 14);
    check_scheme("`verbs://`", verbs, common);
#else
    (void)documented_keys("`verbs://`");  // the section is there; its table is not built
#endif
}

TEST_CASE("an unknown key is refused with the whole table listed", "[unit][uri]") {
    auto r = prizma::udp::parse_uri("udp://239.1.1.1:7600?iface=127.0.0.1&tll=2");
    REQUIRE_FALSE(r);
    CHECK(r.error() == prizma::Errc::invalid_argument);
    const std::string detail = r.error().detail();
    CHECK_THAT(detail, Catch::StartsWith("unknown key 'tll' in '"));
    for (const auto& k : prizma::udp::uri_keys()) {
        CHECK_THAT(detail, Catch::Contains(std::string(k.name)));
    }
    auto bad = prizma::udp::parse_uri("udp://239.1.1.1:7600?iface=127.0.0.1&ttl=256");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().detail(), Catch::StartsWith("bad ttl '256' in '"));
    CHECK_THAT(bad.error().detail(), Catch::EndsWith("(0-255)"));
#if PRIZMA_HAVE_VERBS
    auto v = prizma::verbs::parse_uri("verbs://rxe0/239.1.1.1:7500?colour=red");
    REQUIRE_FALSE(v);
    CHECK_THAT(v.error().detail(), Catch::Contains("verbs keys: gid_index, qkey"));
#endif
}

TEST_CASE("udp URIs set the same fields through the table", "[unit][uri]") {
    auto c = prizma::udp::parse_uri(
        "udp://239.1.1.1:7600?iface=127.0.0.1&dport=7501&ttl=0&tos=184&loop=false&rcvbuf=0"
        "&sndbuf=1073741824&gso=0&gro=1&sources=10.0.0.1,10.0.0.2&busy_poll=50");
    REQUIRE(c);
    CHECK(c->iface == "127.0.0.1");
    CHECK(c->dport == 7501);
    CHECK(c->ttl == 0);
    CHECK(c->tos == 184);
    CHECK_FALSE(c->loop);
    CHECK(c->rcvbuf == 0);
    CHECK(c->sndbuf == 1 << 30);
    CHECK_FALSE(c->gso);
    CHECK(c->gro == prizma::udp::GroMode::on);
    CHECK(c->sources == std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
    CHECK(c->busy_poll_us == 50);
    CHECK(prizma::udp::parse_uri("udp://239.1.1.1:7600?gro=auto")->gro
          == prizma::udp::GroMode::adaptive);
    CHECK_FALSE(prizma::udp::parse_uri("udp://239.1.1.1:7600?dport=0"));
    CHECK_FALSE(prizma::udp::parse_uri("udp://239.1.1.1:7600?gro=2"));
    CHECK_FALSE(prizma::udp::parse_uri("udp://239.1.1.1:7600?iface=eth0"));
}

// SPDX-License-Identifier: Apache-2.0
// Unit tests of the market-data library: time conventions, labels, codes, queries, JSON,
// the wire format and the bar store; md-gateway's feed pump and its live push.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <catch2/catch.hpp>

#include <prizma/prizma.hpp>

#include "feed_pump.hpp"
#include "gateway.hpp"
#include "md/bars.hpp"
#include "md/codec.hpp"
#include "md/core.hpp"
#include "md/generator.hpp"
#include "md/lmdb_store.hpp"
#include "md/query.hpp"
#include "md/redis_store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

namespace {

md::Target target(std::string_view t) {
    std::string err;
    auto r = md::parse_target(t, err);
    REQUIRE(r);
    return *r;
}

}  // namespace

TEST_CASE("codes round-trip and bad codes are refused", "[md]") {
    CHECK(md::code_text(*md::parse_code("600000.SH")) == "600000.SH");
    CHECK(md::code_text(*md::parse_code("000001.SZ")) == "000001.SZ");
    CHECK_FALSE(md::parse_code("60000.SH"));
    CHECK_FALSE(md::parse_code("600000.HK"));
    CHECK_FALSE(md::parse_code("60000a.SH"));
    CHECK(md::code_text(md::generator_code(1)) == "300525.SZ");
}

TEST_CASE("percent-decoding: escapes, '+', and malformed input refused", "[md]") {
    std::string err;
    const auto value = [](std::string_view t) {
        return *target(t).get("a");
    };
    CHECK(value("/x?a=%41%4a%4A") == "AJJ");  // either case of hex digit
    CHECK(value("/x?a=1+2") == "1 2");        // '+' is a space (form encoding)
    CHECK(value("/x?a=1%2B2") == "1+2");      // an escaped '+' is a '+'
    CHECK(value("/x?a=%25") == "%");
    CHECK(value("/x?a=%7e") == "~");
    CHECK(target("/a%2Fb").path == "/a/b");
    CHECK(target("/x?%61=1").get("a") != nullptr);  // keys are decoded too
    // A lone or cut '%', a non-hex digit, a decoded control character (NUL included).
    for (const std::string_view bad :
         {"/x?a=%", "/x?a=1%", "/x?a=%4", "/x?%=1", "/x?a=%G1", "/x?a=%1G", "/x?a=%%41", "/x?a=%-1",
          "/x?a=% 1", "/x?a=%00", "/x?a=%1f", "/x?a=%0d%0a", "/x%", "/x%00"}) {
        INFO(bad);
        err.clear();
        CHECK_FALSE(md::parse_target(bad, err));
        CHECK_FALSE(err.empty());
    }
    CHECK(value("/x?a=%7f") == "\x7f");  // DEL is not refused: only below 0x20
}

TEST_CASE("trading minutes and bar labels follow the end-of-minute convention", "[md]") {
    using md::hm_ms;
    CHECK(md::trading_minute(hm_ms(9, 24)) == 0);
    CHECK(md::trading_minute(hm_ms(9, 25)) == 1);  // opening auction joins 09:31
    CHECK(md::trading_minute(hm_ms(9, 30) + 59'999) == 1);
    CHECK(md::trading_minute(hm_ms(9, 31)) == 2);
    CHECK(md::trading_minute(hm_ms(11, 29) + 59'999) == 120);
    CHECK(md::trading_minute(hm_ms(11, 30)) == 120);
    CHECK(md::trading_minute(hm_ms(13, 0)) == 121);
    CHECK(md::trading_minute(hm_ms(14, 58) + 59'999) == 239);
    CHECK(md::trading_minute(hm_ms(15, 0)) == 240);
    CHECK(md::trading_minute(hm_ms(15, 30)) == 0);
    CHECK(md::bar_label(20230818, hm_ms(9, 30) + 5, md::Period::m1) == 202308180931ULL);
    CHECK(md::bar_label(20230818, hm_ms(9, 25), md::Period::m5) == 202308180935ULL);
    CHECK(md::bar_label(20230818, hm_ms(10, 31), md::Period::m60) == 202308181130ULL);
    CHECK(md::bar_label(20230818, hm_ms(13, 0), md::Period::m60) == 202308181400ULL);
    CHECK(md::bar_label(20230818, hm_ms(13, 0), md::Period::m30) == 202308181330ULL);
    CHECK(md::bar_label(20230818, hm_ms(15, 0), md::Period::d1) == 202308181500ULL);
    for (int m = 1; m <= md::kMinutesPerDay; ++m) {
        CHECK(md::minute_of_hhmm(md::minute_hhmm(m)) == m);
    }
    const auto span = md::bar_minutes(202308181400ULL, md::Period::m60);
    CHECK(span.first == 121);
    CHECK(span.last == 180);
    CHECK(md::bar_minutes(202308181401ULL, md::Period::m60).first == 0);
}

TEST_CASE("dates: validity and weekdays", "[md]") {
    CHECK(md::valid_date(20240229));
    CHECK_FALSE(md::valid_date(20230229));
    CHECK(md::weekday(20230818) == 4);  // a Friday
    CHECK(md::next_weekday(20230818) == 20230821);
    CHECK(md::parse_time12("202308180931"));
    CHECK_FALSE(md::parse_time12("202313180931"));
    CHECK_FALSE(md::parse_time12("20230818093"));
    CHECK_FALSE(md::parse_time12("202308182460"));
}

TEST_CASE("queries: the reference API's parameters, checked", "[md]") {
    std::string err;
    const auto q = md::parse_bar_query(
        target("/getStockData?code=300525.SZ&period=1m&start=202308180930&end=202308181030"), err);
    REQUIRE(q);
    CHECK(q->start == 202308180930ULL);
    CHECK(q->period == md::Period::m1);
    CHECK_FALSE(md::parse_bar_query(
        target("/getStockData?code=300525.SZ&period=1m&start=202308181030&end=202308180930"), err));
    CHECK(err.find("after") != std::string::npos);
    CHECK_FALSE(md::parse_bar_query(target("/getStockData?code=300525.SZ&period=2m&start="
                                           "202308180930&end=202308181030"),
                                    err));
    CHECK(err.find("period") != std::string::npos);
    CHECK_FALSE(md::parse_target("/x?a=%zz", err));
    CHECK_FALSE(md::parse_target("/x?a=1&a=2", err));
    CHECK_FALSE(md::parse_target("/x?a=%0a", err));
    const auto v2 = md::parse_v2_query(
        target("/v2/bars?codes=600000.SH,300525.SZ&period=5m&last=60"), 5000, err);
    REQUIRE(v2);
    CHECK(v2->codes.size() == 2);
    CHECK(v2->last == 60);
    CHECK_FALSE(md::parse_v2_query(target("/v2/bars?codes=600000.SH&period=5m&last=0"), 5000, err));
}

TEST_CASE("JSON: two-decimal prices and the reference's bar object", "[md]") {
    std::string s;
    md::append_price(s, 3157);
    s += ' ';
    md::append_price(s, 5);
    s += ' ';
    md::append_price(s, -5);
    CHECK(s == "31.57 0.05 -0.05");
    md::Bar b{202308180931ULL, 3157, 3160, 3153, 3155, 250080, 789002400, 0, 3};
    std::string j;
    md::append_bar(j, *md::parse_code("300525.SZ"), b);
    CHECK(j
          == R"({"code":"300525.SZ","time":202308180931,"open":31.57,"high":31.60,"low":31.53,)"
             R"("close":31.55,"volume":250080,"turnover":7890024.00})");
}

TEST_CASE("wire format round-trips; truncated messages are refused", "[md]") {
    md::Tick t{7, 3, *md::parse_code("600000.SH"), 20230818, md::hm_ms(9, 31), 1234, 2, 500};
    std::vector<md::Tick> ticks{t, t};
    std::vector<std::byte> msg;
    md::encode_ticks(msg, md::MsgHeader{md::MsgKind::ticks, 0, 42, 99}, ticks);
    md::MsgHeader h;
    std::vector<md::Tick> out;
    std::vector<md::Instrument> inst;
    REQUIRE(md::decode(msg, h, out, inst));
    CHECK(out == ticks);
    CHECK(h.feed_id == 42);
    msg.pop_back();
    out.clear();
    CHECK_FALSE(md::decode(msg, h, out, inst));
    CHECK(out.empty());
}

TEST_CASE("bar store: folding, gaps and ranges", "[md]") {
    md::BarStore store;
    const md::Code c = *md::parse_code("600000.SH");
    auto tick = [&](std::uint32_t seq, std::uint32_t ms, std::int32_t px) {
        return md::Tick{seq, seq, c, 20230818, ms, px, 0, 100};
    };
    (void)store.apply(tick(1, md::hm_ms(9, 25), 1000), nullptr);
    (void)store.apply(tick(2, md::hm_ms(9, 30) + 10, 1010), nullptr);
    (void)store.apply(tick(3, md::hm_ms(9, 31), 990), nullptr);
    std::vector<md::Bar> bars;
    REQUIRE(store.range(c, md::Period::m1, 0, ~0ULL, 100, bars));
    REQUIRE(bars.size() == 2);
    CHECK(bars[0].time == 202308180931ULL);
    CHECK(bars[0].open == 1000);
    CHECK(bars[0].high == 1010);
    CHECK(bars[0].close == 1010);
    CHECK(bars[0].volume == 200);
    CHECK(bars[0].turnover == 1000 * 100 + 1010 * 100);
    // A symbol sequence jump marks the bars between the previous tick and this one.
    (void)store.apply(tick(9, md::hm_ms(9, 40), 995), nullptr);
    bars.clear();
    REQUIRE(store.range(c, md::Period::m1, 0, ~0ULL, 100, bars));
    CHECK((bars[0].flags & md::kBarGap) == 0);
    CHECK((bars[1].flags & md::kBarGap) != 0);
    CHECK((bars[2].flags & md::kBarGap) != 0);
    // A channel gap marks every code's overlapping bars, also ones made later.
    store.add_gap({md::exchange_instant(20230818, md::hm_ms(10, 0)),
                   md::exchange_instant(20230818, md::hm_ms(10, 2))},
                  nullptr);
    (void)store.apply(tick(10, md::hm_ms(10, 1), 995), nullptr);
    md::Bar b;
    REQUIRE(store.bar_at(c, md::Period::m1, 202308181002ULL, b));
    CHECK((b.flags & md::kBarGap) != 0);
    CHECK_FALSE(store.known(*md::parse_code("600001.SH")));
}

TEST_CASE("bar store: a bar holding a tick does not count it again", "[md]") {
    md::BarStore store;
    const md::Code c = *md::parse_code("300525.SZ");
    auto tick = [&](std::uint32_t sseq, std::uint32_t ms) {
        return md::Tick{sseq, sseq, c, 20230818, ms, 3000, 0, 100};
    };
    (void)store.apply(tick(1, md::hm_ms(9, 30)), nullptr);
    (void)store.apply(tick(2, md::hm_ms(9, 31)), nullptr);
    md::Bar day;
    REQUIRE(store.bar_at(c, md::Period::d1, 202308181500ULL, day));
    CHECK(day.volume == 200);
    CHECK(day.sseq == 2);
    // A restarted or late gateway loaded this day bar from a store, then hears tick 2 again
    // and tick 3: tick 2 is in the day bar already; the 1m bar of 09:32 is new.
    md::BarStore later;
    later.load(c, md::Period::d1, day);
    (void)later.apply(tick(2, md::hm_ms(9, 31)), nullptr);
    (void)later.apply(tick(3, md::hm_ms(9, 31) + 5), nullptr);
    md::Bar b;
    REQUIRE(later.bar_at(c, md::Period::d1, 202308181500ULL, b));
    CHECK(b.volume == 300);
    CHECK(b.sseq == 3);
    REQUIRE(later.bar_at(c, md::Period::m1, 202308180932ULL, b));
    CHECK(b.volume == 200);  // both ticks: this bar was not loaded
}

TEST_CASE("Redis members carry the bar's symbol sequence", "[md]") {
    md::Bar b{202308180931ULL, 3157, 3160, 3153, 3155, 250080, 789002400, md::kBarGap, 3, 17};
    std::string json;
    md::append_bar(json, *md::parse_code("300525.SZ"), b);
    json.pop_back();
    json += R"(,"sseq":17})";
    md::Bar back;
    REQUIRE(md::parse_bar_json(json, back));
    CHECK(back.time == b.time);
    CHECK(back.turnover == b.turnover);
    CHECK(back.flags == md::kBarGap);
    CHECK(back.sseq == 17);
}

TEST_CASE("LMDB: the stream position is stored with the bars", "[md]") {
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("md-unit-" + std::to_string(::getpid())))
            .string();
    std::string error;
    {
        auto st = md::LmdbStore::open(dir, 64, error);
        REQUIRE(st);
        md::StoreBatch batch;
        batch.bars.push_back({*md::parse_code("600000.SH"), md::Period::m1,
                              md::Bar{202308180931ULL, 1, 2, 1, 2, 100, 150, 0, 1, 1}});
        batch.stream = md::StreamPosition{7, 0, 1234};
        REQUIRE(st->commit(batch, error));
    }
    auto st = md::LmdbStore::open(dir, 64, error);
    REQUIRE(st);
    md::BarStore bars;
    std::map<std::uint64_t, md::FeedPosition> feeds;
    std::optional<md::StreamPosition> pos;
    CHECK(st->load(bars, feeds, pos, error) == 1);
    REQUIRE(pos);
    CHECK(*pos == md::StreamPosition{7, 0, 1234});
    st.reset();
    std::filesystem::remove_all(dir);
}

TEST_CASE("generator: seeded, replayable, inside limits and sessions", "[md]") {
    md::GeneratorConfig cfg{7, 40, 5000, 20230818, 2};
    md::Generator a(cfg);
    md::Generator b(cfg);
    std::vector<md::Instrument> ia;
    std::vector<md::Instrument> ib;
    std::uint64_t n = 0;
    while (a.start_day(ia)) {
        REQUIRE(b.start_day(ib));
        CHECK(ia == ib);
        md::Tick ta;
        md::Tick tb;
        std::uint32_t last_ms = 0;
        while (a.next_tick(ta)) {
            REQUIRE(b.next_tick(tb));
            CHECK(ta == tb);
            CHECK(ta.channel_seq == ++n);
            CHECK(ta.volume % 100 == 0);
            CHECK(ta.time_ms >= last_ms);
            CHECK(md::trading_minute(ta.time_ms) != 0);
            last_ms = ta.time_ms;
        }
    }
    CHECK(n > 10'000);
}

namespace {

/// A push client on the pump's own loop, as a WebSocket on the first loop is: push() (feed
/// thread) posts the write, which can run only when the pump gives the loop back. Records how
/// many stream records the gateway had applied when each update would have been written.
class LoopClient final : public md::gw::PushClient {
public:
    LoopClient(boost::asio::io_context& ioc, const md::gw::Shared& s) : ioc_(ioc), s_(s) {}
    void push(std::shared_ptr<const std::string> msg) override {
        boost::asio::post(ioc_, [this, msg = std::move(msg)] {
            written.push_back(s_.feed.records.load());
            last = *msg;
            all.push_back(*msg);
        });
    }
    void control(std::shared_ptr<const std::string> msg) override {
        boost::asio::post(ioc_, [this, msg = std::move(msg)] { controls.push_back(*msg); });
    }
    std::vector<std::uint64_t> written;
    std::vector<std::string> controls;
    std::string last;
    std::vector<std::string> all;

private:
    boost::asio::io_context& ioc_;
    const md::gw::Shared& s_;
};

}  // namespace

TEST_CASE("feed pump: a backlog of records is pushed in slices, not as one update", "[md][push]") {
    // A gateway slower than the feed (a loaded host, the sanitizers) always finds records
    // waiting. The pump used to take them all before pushing or giving the loop back: a day of
    // ticks reached a WebSocket as one update (marketdata.web's flake). Here the whole day waits
    // in the subscriber's queue (mem://, in-process) before the pump first runs.
    const std::string uri = "mem://md-unit-push-" + std::to_string(::getpid()) + ":7000";
    md::gw::Shared shared;
    shared.cfg.feeds = {uri};
    boost::asio::io_context ioc(1);
    std::string error;
    auto pump = md::gw::FeedPump::create(ioc, shared, error);
    REQUIRE(pump);
    const md::Code code = *md::parse_code("600000.SH");
    auto client = std::make_shared<LoopClient>(ioc, shared);
    shared.hub.add(md::gw::PushHub::key(code, md::Period::m1), client);

    auto ctx = prizma::Context::create();
    REQUIRE(ctx);
    auto pub = ctx->add_publisher(uri, prizma::ChannelOptions{});
    REQUIRE(pub);
    auto out = prizma::StreamPublisher::create(*pub, shared.cfg.stream_id, 1);
    REQUIRE(out);
    // One record a packet, as md-feed sends them.
    const std::size_t max_bytes =
        std::min<std::size_t>(pub->max_packet_payload(), 1400) - prizma::RecordHeader::kBytes;
    md::Generator gen(md::GeneratorConfig{5, 3, 30'000, 20230818, 1});
    md::MsgHeader h;
    h.feed_id = gen.feed_id();
    std::vector<md::Instrument> inst;
    std::vector<md::Tick> ticks;
    std::vector<std::byte> msg;
    std::uint64_t records = 0;
    const auto offer = [&] {
        for (;;) {
            const auto r = out->offer(msg);
            if (r) {
                break;
            }
            REQUIRE(prizma::is_transient(r.error()));
            (void)ctx->poll();
        }
        (void)ctx->poll();
        ++records;
    };
    REQUIRE(gen.start_day(inst));
    md::encode_instruments(msg, h, inst);
    offer();
    const std::size_t per_tick = md::records_per_message(md::MsgKind::ticks, max_bytes);
    md::Tick t;
    bool more = gen.next_tick(t);
    while (more) {
        ticks.clear();
        while (more && ticks.size() < per_tick) {
            ticks.push_back(t);
            more = gen.next_tick(t);
        }
        md::encode_ticks(msg, h, ticks);
        offer();
    }
    REQUIRE(records > std::size_t{3} * 256);  // more than three of the pump's slices

    pump->start();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((shared.feed.records.load() < records || client->written.empty())
           && std::chrono::steady_clock::now() < deadline) {
        (void)ctx->poll();  // the publisher (heartbeats, repairs): the same thread, like mem://
        ioc.run_one_for(std::chrono::milliseconds(10));
    }
    pump->stop();
    ioc.poll();

    INFO("records " << records << ", updates written after records " << [&] {
        std::string w;
        for (const std::uint64_t n : client->written) {
            w += std::to_string(n) + ' ';
        }
        return w;
    }());
    REQUIRE(shared.feed.records.load() == records);
    // At least one update per slice of 256 records, each written while records still waited.
    CHECK(client->written.size() >= records / 256);
    REQUIRE_FALSE(client->written.empty());
    CHECK(client->written.front() < records);
    // The last update is the day's last 1m bar as the gateway holds it.
    std::vector<md::Bar> last;
    REQUIRE(shared.bars.last(code, md::Period::m1, 1, last));
    std::string bar;
    md::append_bar(bar, code, last.front());
    CHECK(client->last.find(bar) != std::string::npos);
    // Every bar's final state was pushed, also when the next bar opened within the same slice
    // (a slice's updates are merged per code and period: the closed bar goes out first).
    std::vector<md::Bar> day;
    REQUIRE(shared.bars.last(code, md::Period::m1, 100'000, day));
    REQUIRE(day.size() > 10);
    std::size_t missing = 0;
    for (const md::Bar& b : day) {
        std::string want;
        md::append_bar(want, code, b);
        const bool pushed = std::any_of(client->all.begin(), client->all.end(), [&](const auto& m) {
            return m.find(want) != std::string::npos;
        });
        missing += pushed ? 0U : 1U;
    }
    INFO(day.size() << " bars");
    CHECK(missing == 0);
}

TEST_CASE("gateway JSON: /health and the push state message parse, text fields escaped",
          "[md][json]") {
    md::gw::Shared shared;
    // A field the gateway fills from its command line: quote, backslash, a control character,
    // non-ASCII and a byte that is no UTF-8 must all come out as valid JSON.
    shared.loaded.from = "lmdb\"\\\x01\xc3\xa9\xff";
    shared.loaded.bars = 42;
    shared.feed.last_channel_seq.store(7);
    const auto health = nlohmann::json::parse(md::gw::health_text(shared));
    CHECK(health.at("loaded").at("from") == "lmdb\"\\\x01\xc3\xa9\xef\xbf\xbd");
    CHECK(health.at("loaded").at("bars") == 42);
    CHECK(health.at("last_channel_seq") == 7);
    CHECK(health.at("last_record_age_s").is_null());  // no record yet
    CHECK(health.at("fill").at("waiting") == 0);
    CHECK(health.at("pid") == ::getpid());
    CHECK(health.at("uptime_s").is_number());
    const std::string text = md::gw::health_text(shared);
    CHECK(text.find("\\u0001") != std::string::npos);  // escaped, not raw
    CHECK(text.find('\x01') == std::string::npos);

    const auto state = nlohmann::json::parse(md::gw::state_message(shared, "state"));
    CHECK(state.at("type") == "state");
    CHECK(state.at("state").is_string());
    CHECK(state.at("age_s").is_null());
    CHECK(state.at("last_channel_seq") == 7);
    // Pushed clients tell state messages from bars by this prefix (push_session.cpp).
    CHECK(md::gw::state_message(shared, "state").starts_with(R"({"type":"state")"));
}

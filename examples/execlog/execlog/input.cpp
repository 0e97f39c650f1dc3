// SPDX-License-Identifier: Apache-2.0
#include "execlog/input.hpp"

#include <charconv>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include <fmt/core.h>

namespace execlog {

Generator::Generator(const GeneratorOptions& options)
    : opt_(options),
      state_(options.seed ^ 0x9e3779b97f4a7c15ULL),
      owner_(recent_.size()),
      instr_(recent_.size()) {
    mid_.resize(opt_.instruments);
    for (std::size_t i = 0; i < mid_.size(); ++i) {
        mid_[i] = 10000 + static_cast<std::int64_t>(i) * 250;
    }
}

// splitmix64: small, fast, and the same on every platform.
std::uint64_t Generator::rand() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
}

void Generator::make_new(Input& in) {
    in.kind = Input::Kind::new_order;
    in.instrument = static_cast<std::uint16_t>(below(opt_.instruments));
    in.side = below(2) == 0 ? Side::buy : Side::sell;
    auto& mid = mid_[in.instrument];
    mid = std::max<std::int64_t>(100, mid + static_cast<std::int64_t>(below(5)) - 2);
    const std::uint64_t kind = below(100);
    in.ord_type = kind < 9 ? OrdType::market : OrdType::limit;
    in.tif = kind >= 9 && kind < 22 ? Tif::ioc : Tif::day;
    in.qty = static_cast<std::uint32_t>(1 + below(20)) * 10;
    // Passive on average (resting a few ticks away), crossing now and then.
    const auto offset = static_cast<std::int64_t>(below(13)) - 3;
    in.price = in.ord_type == OrdType::market ? 0
               : in.side == Side::buy         ? mid - offset
                                              : mid + offset;
    const std::uint64_t bad = below(100);
    if (bad == 0) {
        in.qty = 0;  // rejected: bad quantity
    } else if (bad == 1 && below(2) == 0) {
        in.instrument = static_cast<std::uint16_t>(opt_.instruments + 1);  // unknown
    }
    const std::size_t slot = recent_count_++ % recent_.size();
    recent_[slot] = in.request_id;
    owner_[slot] = in.account;
    instr_[slot] = in.instrument;
}

bool Generator::next(Input& in) {
    if (produced_ >= opt_.count) {
        return false;
    }
    const std::uint64_t i = produced_++;
    in = Input{};
    in.request_id = i + 1;
    in.time_ns = kSessionStartNs + (opt_.rate == 0 ? i * 1000 : i * 1'000'000'000ULL / opt_.rate);
    in.account = static_cast<std::uint32_t>(1 + below(opt_.accounts));
    const std::uint64_t what = below(100);
    if (what < 17 && recent_count_ > 0) {
        const std::size_t n = std::min<std::uint64_t>(recent_count_, recent_.size());
        const std::size_t slot = below(n);
        in.target_order = recent_[slot];
        if (below(50) != 0) {
            in.account = owner_[slot];  // now and then someone else's: rejected
        }
        if (what < 11) {
            in.kind = Input::Kind::cancel;
        } else {
            in.kind = Input::Kind::replace;
            in.qty = static_cast<std::uint32_t>(1 + below(20)) * 10;
            in.price = mid_[instr_[slot] % mid_.size()] + static_cast<std::int64_t>(below(9)) - 4;
        }
        return true;
    }
    make_new(in);
    return true;
}

namespace {

struct LineReader {
    std::string_view rest;
    std::string_view word() {
        const auto b = rest.find_first_not_of(" \t");
        if (b == std::string_view::npos) {
            rest = {};
            return {};
        }
        rest.remove_prefix(b);
        const auto e = rest.find_first_of(" \t");
        const std::string_view w = rest.substr(0, e);
        rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
        return w;
    }
    template <typename T>
    T number(const char* what) {
        const std::string_view w = word();
        T v{};
        const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
        if (w.empty() || ec != std::errc{} || end != w.data() + w.size()) {
            throw std::invalid_argument(fmt::format("{} '{}' is not a number", what, w));
        }
        return v;
    }
};

Input parse_line(std::string_view line, std::uint64_t request_id) {
    LineReader r{line};
    Input in;
    in.request_id = request_id;
    in.time_ns = r.number<std::uint64_t>("time");
    const std::string_view verb = r.word();
    in.account = r.number<std::uint32_t>("account");
    if (verb == "NEW") {
        in.kind = Input::Kind::new_order;
        in.instrument = r.number<std::uint16_t>("instrument");
        const std::string_view side = r.word();
        if (side != "BUY" && side != "SELL") {
            throw std::invalid_argument(fmt::format("side '{}' is not BUY or SELL", side));
        }
        in.side = side == "BUY" ? Side::buy : Side::sell;
        const std::string_view type = r.word();
        if (type != "LIMIT" && type != "MARKET") {
            throw std::invalid_argument(fmt::format("type '{}' is not LIMIT or MARKET", type));
        }
        in.ord_type = type == "LIMIT" ? OrdType::limit : OrdType::market;
        const std::string_view tif = r.word();
        if (tif != "DAY" && tif != "IOC") {
            throw std::invalid_argument(fmt::format("time in force '{}' is not DAY or IOC", tif));
        }
        in.tif = tif == "DAY" ? Tif::day : Tif::ioc;
        in.qty = r.number<std::uint32_t>("quantity");
        in.price = r.number<std::int64_t>("price");
    } else if (verb == "CANCEL") {
        in.kind = Input::Kind::cancel;
        in.target_order = r.number<std::uint64_t>("order id");
    } else if (verb == "REPLACE") {
        in.kind = Input::Kind::replace;
        in.target_order = r.number<std::uint64_t>("order id");
        in.qty = r.number<std::uint32_t>("quantity");
        in.price = r.number<std::int64_t>("price");
    } else {
        throw std::invalid_argument(fmt::format("'{}' is not NEW, CANCEL or REPLACE", verb));
    }
    if (const std::string_view extra = r.word(); !extra.empty()) {
        throw std::invalid_argument(fmt::format("unexpected '{}' at the end", extra));
    }
    return in;
}

}  // namespace

std::vector<Input> read_order_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        throw std::runtime_error(fmt::format("cannot read order file '{}'", path));
    }
    std::vector<Input> out;
    std::string line;
    std::uint64_t line_no = 0;
    while (std::getline(f, line)) {
        ++line_no;
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos || line[first] == '#') {
            continue;
        }
        if (line.back() == '\r') {
            line.pop_back();
        }
        try {
            out.push_back(parse_line(line, out.size() + 1));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(fmt::format("{}:{}: {}", path, line_no, e.what()));
        }
        if (out.size() > 1 && out.back().time_ns < out[out.size() - 2].time_ns) {
            throw std::runtime_error(
                fmt::format("{}:{}: time {} goes backwards (previous order: {})", path, line_no,
                            out.back().time_ns, out[out.size() - 2].time_ns));
        }
    }
    if (f.bad()) {
        throw std::runtime_error(fmt::format("error reading order file '{}'", path));
    }
    return out;
}

}  // namespace execlog

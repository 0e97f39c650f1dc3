// SPDX-License-Identifier: Apache-2.0
#include "redis_store.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "query.hpp"

#include <hiredis/hiredis.h>

namespace md {

namespace {

/// The number in `s`, 0 when it is not one.
template <typename T>
T number(const std::string& s) {
    T v{};
    (void)std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}

/// `{300525.SZ}_1m`, or the reference's own `300525.SZ_1m` (no hash tag: a code's periods
/// may then sit on different cluster nodes).
std::string bars_key(Code c, Period p, bool reference) {
    std::string k = reference ? "" : "{";
    append_code(k, c);
    k += reference ? "_" : "}_";
    k += period_name(p);
    return k;
}

std::string info_key(Code c, bool reference) {
    std::string k = reference ? "" : "{";
    append_code(k, c);
    k += reference ? "_info" : "}_info";
    return k;
}

/// Replaces the bar of a score only with a better one, atomically (a script runs alone): a
/// bar without the gap flag beats one with it, then the one holding more ticks (a higher
/// "sseq"), then the greater text. Every writer's bar of a label ends as the same value
/// whatever the order of the writes, so gateways that started at different times (one that
/// joined mid-feed misses ticks and flags its bars) never double or lose a tick in Redis.
/// KEYS[1] the sorted set, ARGV: score, member, sseq, gap (0/1).
constexpr const char* kPutBarScript = R"lua(
local old = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
local s, g = tonumber(ARGV[3]), tonumber(ARGV[4])
for _, m in ipairs(old) do
  if m == ARGV[2] and #old == 1 then return 0 end
  local os = tonumber(string.match(m, '"sseq":(%d+)')) or 0
  local og = string.find(m, '"gap":true', 1, true) and 1 or 0
  if og < g or (og == g and (os > s or (os == s and m > ARGV[2]))) then return 0 end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return 1
)lua";

/// A bar's member: its JSON (append_bar) with "sseq", the symbol sequence of its last tick.
std::string bar_member(Code c, const Bar& b, bool reference) {
    std::string json;
    json.reserve(200);
    append_bar(json, c, b);
    if (reference) {  // the reference's member: the bar's JSON alone
        return json;
    }
    json.pop_back();  // '}'
    json += R"(,"sseq":)";
    json += std::to_string(b.sseq);
    json += '}';
    return json;
}

bool split_host_port(const std::string& hp, std::string& host, int& port) {
    const std::size_t colon = hp.rfind(':');
    if (colon == std::string::npos) {
        return false;
    }
    host = hp.substr(0, colon);
    const char* b = hp.data() + colon + 1;
    const char* e = hp.data() + hp.size();
    const auto [end, ec] = std::from_chars(b, e, port);
    return ec == std::errc{} && end == e && port > 0 && port < 65536 && !host.empty();
}

/// A reply, freed with it.
struct Reply {
    redisReply* r = nullptr;
    Reply() = default;
    Reply(const Reply&) = delete;
    Reply& operator=(const Reply&) = delete;
    Reply(Reply&&) = delete;
    Reply& operator=(Reply&&) = delete;
    ~Reply() {
        if (r != nullptr) {
            freeReplyObject(r);
        }
    }
};

/// "MOVED 3999 127.0.0.1:6381" / "ASK ...": the kind, slot and node, or false.
bool redirection(const redisReply* r, bool& ask, std::string& host, int& port) {
    if (r == nullptr || r->type != REDIS_REPLY_ERROR) {
        return false;
    }
    const std::string_view s(r->str, r->len);
    ask = s.starts_with("ASK ");
    if (!ask && !s.starts_with("MOVED ")) {
        return false;
    }
    const std::size_t sp = s.rfind(' ');
    return split_host_port(std::string(s.substr(sp + 1)), host, port);
}

void flatten(const redisReply* r, std::vector<std::string>& out) {
    if (r->type == REDIS_REPLY_ARRAY) {
        for (std::size_t i = 0; i < r->elements; ++i) {
            flatten(r->element[i], out);
        }
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        out.emplace_back(r->str, r->len);
    } else if (r->type == REDIS_REPLY_INTEGER) {
        out.push_back(std::to_string(r->integer));
    }
}

std::int64_t parse_cents(std::string_view v) {
    const std::size_t dot = v.find('.');
    std::int64_t whole = 0;
    std::int64_t frac = 0;
    const bool neg = !v.empty() && v[0] == '-';
    const std::string_view w = v.substr(
        neg ? 1 : 0, dot == std::string_view::npos ? std::string_view::npos : dot - (neg ? 1 : 0));
    (void)std::from_chars(w.data(), w.data() + w.size(), whole);
    if (dot != std::string_view::npos && v.size() >= dot + 3) {
        (void)std::from_chars(v.data() + dot + 1, v.data() + dot + 3, frac);
    }
    const std::int64_t c = whole * 100 + frac;
    return neg ? -c : c;
}

bool field(std::string_view json, std::string_view name, std::string_view& value) {
    std::string key = "\"";
    key += name;
    key += "\":";
    const std::size_t at = json.find(key);
    if (at == std::string_view::npos) {
        return false;
    }
    const std::size_t b = at + key.size();
    const std::size_t e = json.find_first_of(",}", b);
    if (e == std::string_view::npos) {
        return false;
    }
    value = json.substr(b, e - b);
    return true;
}

}  // namespace

unsigned redis_slot(std::string_view key) noexcept {
    const std::size_t open = key.find('{');
    if (open != std::string_view::npos) {
        const std::size_t close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1) {
            key = key.substr(open + 1, close - open - 1);
        }
    }
    unsigned crc = 0;
    for (const char ch : key) {
        crc ^= static_cast<unsigned>(static_cast<unsigned char>(ch)) << 8U;
        for (int i = 0; i < 8; ++i) {
            crc = (crc & 0x8000U) != 0 ? ((crc << 1U) ^ 0x1021U) & 0xffffU : (crc << 1U) & 0xffffU;
        }
    }
    return crc % 16384U;
}

bool parse_bar_json(std::string_view json, Bar& out) {
    std::string_view v;
    Bar b;
    if (!field(json, "time", v)) {
        return false;
    }
    (void)std::from_chars(v.data(), v.data() + v.size(), b.time);
    std::array<std::pair<const char*, std::int32_t*>, 4> prices{
        {{"open", &b.open}, {"high", &b.high}, {"low", &b.low}, {"close", &b.close}}};
    for (auto& [name, dst] : prices) {
        if (!field(json, name, v)) {
            return false;
        }
        *dst = static_cast<std::int32_t>(parse_cents(v));
    }
    if (!field(json, "volume", v)) {
        return false;
    }
    (void)std::from_chars(v.data(), v.data() + v.size(), b.volume);
    if (!field(json, "turnover", v)) {
        return false;
    }
    b.turnover = parse_cents(v);
    if (field(json, "gap", v) && v == "true") {
        b.flags |= kBarGap;
    }
    if (field(json, "sseq", v)) {
        (void)std::from_chars(v.data(), v.data() + v.size(), b.sseq);
    }
    b.ticks = 1;  // a bar with trades: later ticks fold into it
    out = b;
    return true;
}

std::unique_ptr<RedisStore> RedisStore::connect(const std::string& host_port,
                                                bool lazy_slots,
                                                const RedisAuth& auth,
                                                std::string& error) {
    std::string host;
    int port = 0;
    if (!split_host_port(host_port, host, port)) {
        error = "--redis " + host_port + ": HOST:PORT";
        return nullptr;
    }
    std::unique_ptr<RedisStore> s(new RedisStore());
    s->auth_ = auth;
    if (s->node_for(host, port, error) < 0 || !s->learn_cluster(!lazy_slots, error)) {
        return nullptr;
    }
    return s;
}

RedisStore::~RedisStore() {
    for (Node& n : nodes_) {
        if (n.ctx != nullptr) {
            redisFree(n.ctx);
        }
    }
}

int RedisStore::node_for(const std::string& host, int port, std::string& error) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].host == host && nodes_[i].port == port) {
            return static_cast<int>(i);
        }
    }
    const timeval tv{5, 0};
    redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
    if (c == nullptr || c->err != 0) {
        error = "redis " + host + ":" + std::to_string(port) + ": "
                + (c != nullptr ? c->errstr : "cannot allocate");
        if (c != nullptr) {
            redisFree(c);
        }
        return -1;
    }
    (void)redisSetTimeout(c, tv);
    if (!auth_.password.empty()) {
        Reply a;
        a.r = static_cast<redisReply*>(
            auth_.user.empty()
                ? redisCommand(c, "AUTH %b", auth_.password.data(), auth_.password.size())
                : redisCommand(c, "AUTH %b %b", auth_.user.data(), auth_.user.size(),
                               auth_.password.data(), auth_.password.size()));
        if (a.r == nullptr || a.r->type == REDIS_REPLY_ERROR) {
            error = "redis " + host + ":" + std::to_string(port) + ": AUTH: "
                    + (a.r != nullptr ? std::string(a.r->str, a.r->len) : std::string(c->errstr));
            redisFree(c);
            return -1;
        }
    }
    Reply r;
    r.r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %s", kPutBarScript));
    if (r.r == nullptr || r.r->type != REDIS_REPLY_STRING) {
        error = "redis " + host + ":" + std::to_string(port) + ": SCRIPT LOAD: "
                + (r.r != nullptr && r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str)
                                                                    : std::string(c->errstr));
        redisFree(c);
        return -1;
    }
    put_bar_sha_.assign(r.r->str, r.r->len);  // the same script: the same SHA1 on every node
    nodes_.push_back({host, port, c});
    return static_cast<int>(nodes_.size() - 1);
}

bool RedisStore::learn_cluster(bool map, std::string& error) {
    Reply r;
    r.r = static_cast<redisReply*>(redisCommand(nodes_[0].ctx, "CLUSTER SLOTS"));
    if (r.r == nullptr) {
        error = std::string("redis: ") + nodes_[0].ctx->errstr;
        return false;
    }
    if (r.r->type != REDIS_REPLY_ARRAY) {  // "ERR This instance has cluster support disabled"
        cluster_ = false;
        return true;
    }
    cluster_ = true;
    for (std::size_t i = 0; i < r.r->elements; ++i) {
        const redisReply* range = r.r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) {
            continue;
        }
        for (std::size_t k = 2; k < range->elements; ++k) {  // the master, then replicas
            const redisReply* n = range->element[k];
            if (n->type == REDIS_REPLY_ARRAY && n->elements >= 2
                && n->element[0]->type == REDIS_REPLY_STRING
                && n->element[1]->type == REDIS_REPLY_INTEGER) {
                std::string host(n->element[0]->str, n->element[0]->len);
                const int port = static_cast<int>(n->element[1]->integer);
                if (!member(host, port)) {
                    members_.emplace_back(std::move(host), port);
                }
            }
        }
        const redisReply* master = range->element[2];
        if (!map || master->type != REDIS_REPLY_ARRAY || master->elements < 2
            || range->element[0]->type != REDIS_REPLY_INTEGER
            || range->element[1]->type != REDIS_REPLY_INTEGER) {
            continue;
        }
        const int node = node_for(std::string(master->element[0]->str, master->element[0]->len),
                                  static_cast<int>(master->element[1]->integer), error);
        if (node < 0) {
            return false;
        }
        for (long long slot = std::max(0LL, range->element[0]->integer);
             slot <= std::min(16383LL, range->element[1]->integer); ++slot) {
            slot_node_.at(static_cast<std::size_t>(slot)) = node;
        }
    }
    return true;
}

bool RedisStore::member(const std::string& host, int port) const {
    return std::find(members_.begin(), members_.end(), std::pair{host, port}) != members_.end();
}

int RedisStore::redirect_node(const std::string& host, int port, std::string& error) {
    if (!member(host, port) && (!learn_cluster(false, error) || !member(host, port))) {
        error = "redis: a redirection to " + host + ":" + std::to_string(port)
                + ", not a member of the cluster (CLUSTER SLOTS): refused";
        return -1;
    }
    return node_for(host, port, error);
}

bool RedisStore::run_one(const std::string& key,
                         const Args& args,
                         std::vector<std::string>* array,
                         std::string& error,
                         Hop first) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    int node = first.node >= 0 ? first.node : slot_node_.at(redis_slot(key));
    bool ask = first.ask;
    for (int hop = 0; hop < 5; ++hop) {
        redisContext* c = nodes_.at(static_cast<std::size_t>(node)).ctx;
        if (ask) {
            Reply a;
            a.r = static_cast<redisReply*>(redisCommand(c, "ASKING"));
        }
        Reply r;
        r.r = static_cast<redisReply*>(
            redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
        if (r.r == nullptr) {
            error = std::string("redis: ") + c->errstr;
            return false;
        }
        std::string host;
        int port = 0;
        if (redirection(r.r, ask, host, port)) {
            ++redirections_;
            asks_ += ask ? 1U : 0U;
            node = redirect_node(host, port, error);
            if (node < 0) {
                return false;
            }
            if (!ask) {
                slot_node_.at(redis_slot(key)) = node;
            }
            continue;
        }
        if (r.r->type == REDIS_REPLY_ERROR) {
            error = "redis " + args[0] + ": " + std::string(r.r->str, r.r->len);
            return false;
        }
        if (array != nullptr) {
            flatten(r.r, *array);
        }
        return true;
    }
    error = "redis: too many redirections for " + key;
    return false;
}

bool RedisStore::run(const std::vector<std::pair<std::string, Args>>& cmds,
                     std::vector<std::vector<std::string>>* arrays,
                     std::string& error) {
    // Pipelined: every command appended to its node's connection, then the replies read
    // back in order; a redirected command is re-run alone (run_one follows MOVED / ASK).
    std::vector<std::vector<std::size_t>> per_node(nodes_.size());
    for (std::size_t i = 0; i < cmds.size(); ++i) {
        const auto node = static_cast<std::size_t>(slot_node_.at(redis_slot(cmds[i].first)));
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (const std::string& a : cmds[i].second) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        (void)redisAppendCommandArgv(nodes_[node].ctx, static_cast<int>(argv.size()), argv.data(),
                                     lens.data());
        per_node[node].push_back(i);
    }
    if (arrays != nullptr) {
        arrays->assign(cmds.size(), {});
    }
    std::vector<std::pair<std::size_t, Hop>> retry;
    for (std::size_t n = 0; n < per_node.size(); ++n) {
        for (const std::size_t i : per_node[n]) {
            Reply r;
            void* raw = nullptr;
            if (redisGetReply(nodes_[n].ctx, &raw) != REDIS_OK) {
                error = std::string("redis: ") + nodes_[n].ctx->errstr;
                return false;
            }
            r.r = static_cast<redisReply*>(raw);
            bool ask = false;
            std::string host;
            int port = 0;
            if (redirection(r.r, ask, host, port)) {
                ++redirections_;
                asks_ += ask ? 1U : 0U;
                const int to = redirect_node(host, port, error);
                if (to < 0) {
                    return false;
                }
                if (!ask) {
                    slot_node_.at(redis_slot(cmds[i].first)) = to;
                }
                retry.emplace_back(i, Hop{to, ask});
            } else if (r.r->type == REDIS_REPLY_ERROR) {
                error = "redis " + cmds[i].second[0] + ": " + std::string(r.r->str, r.r->len);
                return false;
            } else if (arrays != nullptr) {
                flatten(r.r, (*arrays)[i]);
            }
        }
    }
    for (const auto& [i, hop] : retry) {
        if (!run_one(cmds[i].first, cmds[i].second, arrays != nullptr ? &(*arrays)[i] : nullptr,
                     error, hop)) {
            return false;
        }
    }
    return true;
}

bool RedisStore::write(const StoreBatch& batch, std::string& error) {
    std::vector<std::pair<std::string, Args>> cmds;
    for (const auto& item : batch.bars) {
        std::string key = bars_key(item.code, item.period, reference_layout_);
        cmds.push_back(
            {key,
             {"EVALSHA", put_bar_sha_, "1", key, std::to_string(item.bar.time),
              bar_member(item.code, item.bar, reference_layout_), std::to_string(item.bar.sseq),
              (item.bar.flags & kBarGap) != 0 ? "1" : "0"}});
    }
    for (const Instrument& in : batch.instruments) {
        const std::string key = info_key(in.code, reference_layout_);
        cmds.push_back({"md:codes", {"SADD", "md:codes", code_text(in.code)}});
        cmds.push_back({key,
                        {"HSET", key, "date", std::to_string(in.date), "prev_close",
                         std::to_string(in.prev_close), "limit_up", std::to_string(in.limit_up),
                         "limit_down", std::to_string(in.limit_down)}});
    }
    for (const auto& item : batch.bars) {
        if (item.period == Period::d1) {  // every traded code has a day bar
            cmds.push_back({"md:codes", {"SADD", "md:codes", code_text(item.code)}});
        }
    }
    // Gaps are not shared: one gateway's loss is its own (its bars carry the flag, and lose
    // to another gateway's complete bars). The feed positions go after the bars have been
    // written (their replies read), so a position never gets ahead of the bars it covers.
    if (!cmds.empty() && !run(cmds, nullptr, error)) {
        return false;
    }
    cmds.clear();
    for (const auto& [id, pos] : batch.feed_seq) {
        cmds.push_back({"md:feeds",
                        {"HSET", "md:feeds", std::to_string(id),
                         std::to_string(pos.last_seq) + " " + std::to_string(pos.last_instant)}});
    }
    return cmds.empty() || run(cmds, nullptr, error);
}

bool RedisStore::bars_in(const std::vector<std::pair<Code, Period>>& pairs,
                         std::uint64_t lo,
                         std::uint64_t hi,
                         std::vector<std::vector<Bar>>& out,
                         std::string& error) {
    std::vector<std::pair<std::string, Args>> cmds;
    cmds.reserve(pairs.size());
    for (const auto& [c, p] : pairs) {
        std::string key = bars_key(c, p, reference_layout_);
        cmds.push_back({key, {"ZRANGEBYSCORE", key, std::to_string(lo), std::to_string(hi)}});
    }
    std::vector<std::vector<std::string>> replies;
    if (!cmds.empty() && !run(cmds, &replies, error)) {
        return false;
    }
    out.assign(pairs.size(), {});
    for (std::size_t i = 0; i < replies.size(); ++i) {
        for (const std::string& json : replies[i]) {
            Bar b;
            if (parse_bar_json(json, b)) {
                out[i].push_back(b);
            }
        }
    }
    return true;
}

long long RedisStore::load(BarStore& store,
                           std::map<std::uint64_t, FeedPosition>& feeds,
                           std::string& error) {
    std::vector<std::string> codes;
    std::vector<std::string> feed_kv;
    if (!run_one("md:codes", {"SMEMBERS", "md:codes"}, &codes, error)
        || !run_one("md:feeds", {"HGETALL", "md:feeds"}, &feed_kv, error)) {
        return -1;
    }
    std::vector<std::pair<std::string, Args>> cmds;
    std::vector<std::pair<Code, Period>> what;
    for (const std::string& text : codes) {
        const auto c = parse_code(text);
        if (!c) {
            continue;
        }
        for (const Period p : kPeriods) {
            const std::string key = bars_key(*c, p, reference_layout_);
            cmds.push_back({key, {"ZRANGE", key, "0", "-1"}});
            what.emplace_back(*c, p);
        }
        const std::string ik = info_key(*c, reference_layout_);
        cmds.push_back({ik, {"HMGET", ik, "date", "prev_close", "limit_up", "limit_down"}});
        what.emplace_back(*c, Period::m1);
    }
    std::vector<std::vector<std::string>> replies;
    if (!run(cmds, &replies, error)) {
        return -1;
    }
    long long n = 0;
    for (std::size_t i = 0; i < cmds.size(); ++i) {
        const auto [code, period] = what[i];
        if (cmds[i].second[0] == "HMGET") {
            Instrument in{code};
            if (replies[i].size() == 4) {
                in.date = number<std::uint32_t>(replies[i][0]);
                in.prev_close = number<std::int32_t>(replies[i][1]);
                in.limit_up = number<std::int32_t>(replies[i][2]);
                in.limit_down = number<std::int32_t>(replies[i][3]);
            }
            store.apply(in);
            continue;
        }
        for (const std::string& json : replies[i]) {
            Bar b;
            if (parse_bar_json(json, b)) {
                store.load(code, period, b);
                ++n;
            }
        }
    }
    for (std::size_t i = 0; i + 1 < feed_kv.size(); i += 2) {
        FeedPosition pos;
        char* end = nullptr;
        pos.last_seq = std::strtoull(feed_kv[i + 1].c_str(), &end, 10);
        pos.last_instant = std::strtoull(end, nullptr, 10);
        FeedPosition& f = feeds[std::strtoull(feed_kv[i].c_str(), nullptr, 10)];
        if (pos.last_seq > f.last_seq) {
            f = pos;
        }
    }
    return n;
}

}  // namespace md

// SPDX-License-Identifier: Apache-2.0
#include "execlog/engine.hpp"

#include <algorithm>

namespace execlog {

Record Engine::reject(const Input& in, Reject why) {
    ++counters_.rejected;
    Record r;
    r.type = RecordType::rejected;
    r.side = in.side;
    r.ord_type = in.ord_type;
    r.tif = in.tif;
    r.instrument = in.instrument;
    r.reason = why;
    r.time_ns = in.time_ns;
    r.order_id = in.kind == Input::Kind::new_order ? in.request_id : in.target_order;
    r.request_id = in.request_id;
    r.account = in.account;
    r.order_qty = in.qty;
    r.price = in.price;
    return r;
}

Record Engine::reject_change(const Input& in, const Order* o, Reject why) {
    ++counters_.rejected;
    Record r = o != nullptr ? base(*o, RecordType::accepted, in.time_ns) : Record{};
    r.type =
        in.kind == Input::Kind::cancel ? RecordType::cancel_rejected : RecordType::replace_rejected;
    r.reason = why;
    r.time_ns = in.time_ns;
    r.order_id = in.target_order;
    r.request_id = in.request_id;
    // The order's current request; of an order that is not resting the engine keeps nothing,
    // and its id is the request that made it (order id = request number).
    r.orig_request_id = o != nullptr ? o->request_id : in.target_order;
    r.account = in.account;  // the requester's: the reject is its report
    if (o == nullptr) {
        r.side = in.side;
        r.ord_type = in.ord_type;
        r.tif = in.tif;
    }
    return r;
}

Record Engine::base(const Order& o, RecordType type, std::uint64_t time_ns) {
    Record r;
    r.type = type;
    r.side = o.side;
    r.ord_type = o.ord_type;
    r.tif = o.tif;
    r.instrument = o.instrument;
    r.time_ns = time_ns;
    r.order_id = o.id;
    r.request_id = o.request_id;
    r.account = o.account;
    r.order_qty = o.leaves + o.cum;
    r.price = o.price;
    r.leaves = o.leaves;
    r.cum = o.cum;
    r.notional = o.notional;
    return r;
}

Record Engine::session_end(std::uint64_t inputs, std::uint64_t time_ns) {
    Record r;
    r.type = RecordType::session_end;
    r.time_ns = time_ns;
    r.order_id = inputs;
    return r;
}

void Engine::process(const Input& in, std::vector<Record>& out) {
    time_ns_ = in.time_ns;
    switch (in.kind) {
        case Input::Kind::new_order: new_order(in, out); break;
        case Input::Kind::cancel: cancel(in, out); break;
        case Input::Kind::replace: replace(in, out); break;
    }
}

Reject Engine::check_limits(const Input& in, bool market, std::uint32_t cum) {
    if (in.qty == 0) {
        return Reject::bad_quantity;
    }
    // cum <= kMaxQty always holds (the invariant this keeps): no wrap.
    if (in.qty > kMaxQty - cum) {
        ++counters_.out_of_range;
        return Reject::bad_quantity;
    }
    if (market ? in.price != 0 : in.price <= 0) {
        return Reject::bad_price;
    }
    if (in.price > kMaxPrice) {
        ++counters_.out_of_range;
        return Reject::bad_price;
    }
    return Reject::none;
}

void Engine::new_order(const Input& in, std::vector<Record>& out) {
    if (in.instrument >= books_.size()) {
        out.push_back(reject(in, Reject::unknown_instrument));
        return;
    }
    const bool market = in.ord_type == OrdType::market;
    if (const Reject why = check_limits(in, market, 0); why != Reject::none) {
        out.push_back(reject(in, why));
        return;
    }
    if (orders_.contains(in.request_id)) {
        out.push_back(reject(in, Reject::unknown_order));  // a reused id: refuse, never merge
        return;
    }
    Order o;
    o.id = in.request_id;
    o.request_id = in.request_id;
    o.account = in.account;
    o.instrument = in.instrument;
    o.side = in.side;
    o.ord_type = in.ord_type;
    o.tif = in.tif;
    o.price = in.price;
    o.leaves = in.qty;
    out.push_back(base(o, RecordType::accepted, in.time_ns));
    match(o, in.ord_type, out);
    if (o.leaves == 0) {
        return;
    }
    if (market || in.tif == Tif::ioc) {
        Record ex = base(o, RecordType::expired, in.time_ns);
        ex.last_qty = o.leaves;
        ex.order_qty = o.leaves + o.cum;
        ex.leaves = 0;
        out.push_back(ex);
        return;
    }
    auto [it, inserted] = orders_.emplace(o.id, o);
    (void)inserted;
    rest(it->second);
}

void Engine::cancel(const Input& in, std::vector<Record>& out) {
    const auto it = orders_.find(in.target_order);
    if (it == orders_.end()) {
        out.push_back(reject_change(in, nullptr, Reject::unknown_order));
        return;
    }
    if (it->second.account != in.account) {
        out.push_back(reject_change(in, &it->second, Reject::not_owner));
        return;
    }
    Order& o = it->second;
    unrest(o);
    Record r = base(o, RecordType::cancelled, in.time_ns);
    r.request_id = in.request_id;
    r.orig_request_id = o.request_id;
    r.last_qty = o.leaves;
    r.leaves = 0;
    out.push_back(r);
    orders_.erase(it);
}

void Engine::replace(const Input& in, std::vector<Record>& out) {
    const auto it = orders_.find(in.target_order);
    if (it == orders_.end()) {
        out.push_back(reject_change(in, nullptr, Reject::unknown_order));
        return;
    }
    Order& o = it->second;
    if (o.account != in.account) {
        out.push_back(reject_change(in, &o, Reject::not_owner));
        return;
    }
    if (const Reject why = check_limits(in, false, o.cum); why != Reject::none) {
        out.push_back(reject_change(in, &o, why));
        return;
    }
    unrest(o);
    const std::uint64_t orig = o.request_id;
    o.request_id = in.request_id;
    o.price = in.price;
    o.leaves = in.qty;
    Record r = base(o, RecordType::replaced, in.time_ns);
    r.orig_request_id = orig;
    out.push_back(r);
    match(o, OrdType::limit, out);
    if (o.leaves == 0) {
        orders_.erase(it);
        return;
    }
    rest(o);
}

void Engine::rest(Order& o) {
    Book& b = books_[o.instrument];
    Level& level = o.side == Side::buy ? b.bids[o.price] : b.asks[o.price];
    o.at = level.insert(level.end(), o.id);
}

void Engine::unrest(Order& o) {
    Book& b = books_[o.instrument];
    if (o.side == Side::buy) {
        auto l = b.bids.find(o.price);
        l->second.erase(o.at);
        if (l->second.empty()) {
            b.bids.erase(l);
        }
    } else {
        auto l = b.asks.find(o.price);
        l->second.erase(o.at);
        if (l->second.empty()) {
            b.asks.erase(l);
        }
    }
}

void Engine::match(Order& taker, OrdType type, std::vector<Record>& out) {
    Book& b = books_[taker.instrument];
    if (taker.side == Side::buy) {
        match_side(b.asks, taker, type, out);
    } else {
        match_side(b.bids, taker, type, out);
    }
}

template <typename Side_>
void Engine::match_side(Side_& levels, Order& taker, OrdType type, std::vector<Record>& out) {
    while (taker.leaves > 0 && !levels.empty()) {
        auto level = levels.begin();
        const std::int64_t px = level->first;
        const bool crosses = type == OrdType::market
                             || (taker.side == Side::buy ? px <= taker.price : px >= taker.price);
        if (!crosses) {
            return;
        }
        const auto maker_it = orders_.find(level->second.front());
        Order& maker = maker_it->second;
        const std::uint32_t qty = std::min(taker.leaves, maker.leaves);
        // px <= kMaxPrice (a resting limit price) and each order's cum + leaves <= kMaxQty
        // (check_limits): value and both notionals stay within kMaxPrice x kMaxQty.
        const std::int64_t value = px * std::int64_t{qty};
        taker.leaves -= qty;
        taker.cum += qty;
        taker.notional += value;
        maker.leaves -= qty;
        maker.cum += qty;
        maker.notional += value;
        Record t = base(taker, RecordType::trade, time_ns_);
        t.price = px;
        t.last_qty = qty;
        t.maker_account = maker.account;
        t.maker_order_id = maker.id;
        t.maker_request_id = maker.request_id;
        t.maker_leaves = maker.leaves;
        t.maker_cum = maker.cum;
        t.maker_notional = maker.notional;
        out.push_back(t);
        if (maker.leaves == 0) {
            level->second.pop_front();
            if (level->second.empty()) {
                levels.erase(level);
            }
            orders_.erase(maker_it);
        }
    }
}

}  // namespace execlog

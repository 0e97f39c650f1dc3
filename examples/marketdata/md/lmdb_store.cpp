// SPDX-License-Identifier: Apache-2.0
#include "lmdb_store.hpp"

#include <lmdb.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace md {

namespace {

using BarKey = std::array<unsigned char, 13>;  // code (BE), period, time (BE)

BarKey bar_key(Code code, Period p, std::uint64_t time) {
    BarKey k{};
    for (std::size_t i = 0; i < 4; ++i) {
        k.at(i) = static_cast<unsigned char>(code >> (24 - 8 * i));
    }
    k[4] = static_cast<unsigned char>(p);
    for (std::size_t i = 0; i < 8; ++i) {
        k.at(5 + i) = static_cast<unsigned char>(time >> (56 - 8 * i));
    }
    return k;
}

Code key_code(const unsigned char* k) {
    Code c = 0;
    for (int i = 0; i < 4; ++i) {
        c = (c << 8U) | k[i];
    }
    return c;
}

template <typename T>
MDB_val val_of(T& v) {
    return MDB_val{sizeof v, &v};
}

std::string mdb_error(const char* what, int rc) {
    return std::string(what) + ": " + mdb_strerror(rc);
}

/// A write or read transaction, aborted unless committed.
class Txn {
public:
    Txn(MDB_env* env, unsigned flags, int& rc) { rc = mdb_txn_begin(env, nullptr, flags, &t_); }
    Txn(const Txn&) = delete;
    Txn& operator=(const Txn&) = delete;
    Txn(Txn&&) = delete;
    Txn& operator=(Txn&&) = delete;
    ~Txn() {
        if (t_ != nullptr) {
            mdb_txn_abort(t_);
        }
    }
    MDB_txn* get() const noexcept { return t_; }
    int commit() noexcept {
        const int rc = mdb_txn_commit(t_);
        t_ = nullptr;
        return rc;
    }

private:
    MDB_txn* t_ = nullptr;
};

}  // namespace

std::unique_ptr<LmdbStore> LmdbStore::open(const std::string& dir,
                                           std::size_t map_mib,
                                           std::string& error) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        error = "cannot make " + dir + ": " + std::system_category().message(errno);
        return nullptr;
    }
    MDB_env* env = nullptr;
    int rc = mdb_env_create(&env);
    if (rc != 0) {
        error = mdb_error("mdb_env_create", rc);
        return nullptr;
    }
    std::unique_ptr<LmdbStore> s(new LmdbStore(env));
    (void)mdb_env_set_maxdbs(env, 4);
    (void)mdb_env_set_mapsize(env, map_mib << 20U);
    rc = mdb_env_open(env, dir.c_str(), MDB_NOMETASYNC, 0600);
    if (rc != 0) {
        error = mdb_error(("cannot open the store in " + dir).c_str(), rc);
        return nullptr;
    }
    int trc = 0;
    Txn txn(env, 0, trc);
    if (trc != 0) {
        error = mdb_error("mdb_txn_begin", trc);
        return nullptr;
    }
    if ((rc = mdb_dbi_open(txn.get(), "bars", MDB_CREATE, &s->bars_dbi_)) != 0
        || (rc = mdb_dbi_open(txn.get(), "meta", MDB_CREATE, &s->meta_dbi_)) != 0
        || (rc = txn.commit()) != 0) {
        error = mdb_error("cannot create the store's tables", rc);
        return nullptr;
    }
    return s;
}

LmdbStore::~LmdbStore() {
    mdb_env_close(env_);
}

long long LmdbStore::load(BarStore& store,
                          std::map<std::uint64_t, FeedPosition>& feed_seq,
                          std::optional<StreamPosition>& stream,
                          std::string& error) {
    int rc = 0;
    Txn txn(env_, MDB_RDONLY, rc);
    MDB_cursor* cur = nullptr;
    if (rc != 0 || (rc = mdb_cursor_open(txn.get(), meta_dbi_, &cur)) != 0) {
        error = mdb_error("cannot read the store", rc);
        return -1;
    }
    MDB_val k{};
    MDB_val v{};
    std::vector<GapInterval> gaps;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const auto* key = static_cast<const unsigned char*>(k.mv_data);
        if (k.mv_size == 9 && key[0] == 'F' && v.mv_size == sizeof(FeedPosition)) {
            std::uint64_t id = 0;
            FeedPosition pos;
            std::memcpy(&id, key + 1, 8);
            std::memcpy(&pos, v.mv_data, sizeof pos);
            feed_seq[id] = pos;
        } else if (key[0] == 'G' && v.mv_size == sizeof(GapInterval)) {
            GapInterval g;
            std::memcpy(&g, v.mv_data, sizeof g);
            gaps.push_back(g);
        } else if (key[0] == 'S' && v.mv_size == sizeof(StreamPosition)) {
            StreamPosition pos;
            std::memcpy(&pos, v.mv_data, sizeof pos);
            stream = pos;
        } else if (key[0] == 'I' && v.mv_size == sizeof(Instrument)) {
            Instrument in;
            std::memcpy(&in, v.mv_data, sizeof in);
            store.apply(in);
        }
    }
    mdb_cursor_close(cur);
    long long n = 0;
    if ((rc = mdb_cursor_open(txn.get(), bars_dbi_, &cur)) != 0) {
        error = mdb_error("cannot read the bars", rc);
        return -1;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        const auto* key = static_cast<const unsigned char*>(k.mv_data);
        if (k.mv_size != sizeof(BarKey) || v.mv_size != sizeof(Bar) || key[4] >= kPeriodCount) {
            continue;
        }
        Bar b;
        std::memcpy(&b, v.mv_data, sizeof b);
        store.load(key_code(key), kPeriods.at(key[4]), b);
        ++n;
    }
    mdb_cursor_close(cur);
    for (const GapInterval& g : gaps) {
        store.add_gap(g, nullptr);
    }
    return n;
}

bool LmdbStore::commit(const StoreBatch& batch, std::string& error) {
    int rc = 0;
    Txn txn(env_, 0, rc);
    if (rc != 0) {
        error = mdb_error("mdb_txn_begin", rc);
        return false;
    }
    for (const auto& item : batch.bars) {
        BarKey key = bar_key(item.code, item.period, item.bar.time);
        Bar b = item.bar;
        MDB_val k = val_of(key);
        MDB_val v = val_of(b);
        if ((rc = mdb_put(txn.get(), bars_dbi_, &k, &v, 0)) != 0) {
            error = mdb_error("store bar", rc);
            return false;
        }
    }
    auto put_meta = [&](char tag, auto id, auto value) {
        std::array<unsigned char, 1 + sizeof id> key{};
        key[0] = static_cast<unsigned char>(tag);
        std::memcpy(key.data() + 1, &id, sizeof id);
        MDB_val k = val_of(key);
        MDB_val v = val_of(value);
        return mdb_put(txn.get(), meta_dbi_, &k, &v, 0);
    };
    for (const Instrument& in : batch.instruments) {
        if ((rc = put_meta('I', in.code, in)) != 0) {
            error = mdb_error("store instrument", rc);
            return false;
        }
    }
    for (const GapInterval& g : batch.gaps) {
        if ((rc = put_meta('G', g, g)) != 0) {
            error = mdb_error("store gap", rc);
            return false;
        }
    }
    for (const auto& [id, seq] : batch.feed_seq) {
        if ((rc = put_meta('F', id, seq)) != 0) {
            error = mdb_error("store feed position", rc);
            return false;
        }
    }
    if (batch.stream && (rc = put_meta('S', std::uint8_t{0}, *batch.stream)) != 0) {
        error = mdb_error("store stream position", rc);
        return false;
    }
    if ((rc = txn.commit()) != 0) {
        error = mdb_error("commit", rc);
        return false;
    }
    return true;
}

}  // namespace md

// SPDX-License-Identifier: Apache-2.0
// execlog-dump: an archiver's journal as text, one line per entry (prizma::JournalReader),
// for people and for the tests' reference model; --check verifies that it is contiguous and
// holds no loss.
//   R SEQ EPOCH TYPE SIDE ORDTYPE TIF INSTRUMENT REASON TIME ORDER REQUEST ORIG ACCOUNT ORDERQTY
//     PRICE LASTQTY LEAVES CUM MAKERACCOUNT MAKERORDER MAKERREQUEST MAKERLEAVES MAKERCUM
//     NOTIONAL MAKERNOTIONAL
//   U SEQ EPOCH TYPEBYTE SIZE        (a record that is not a known ExecLog record)
//   L SEQ COUNT                      (records lost)
//   E SEQ EPOCH                      (a new epoch)
#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/core.h>

#include <prizma/prizma.hpp>

#include "../tools/cli.hpp"
#include "execlog/record.hpp"

namespace {

constexpr const char* kTool = "execlog-dump";

void print_record(std::FILE* out, const prizma::JournalEntry& e) {
    execlog::Record r;
    if (execlog::decode(e.payload(), r) != execlog::DecodeStatus::ok) {
        fmt::print(out, "U {} {} {} {}\n", e.sequence, e.epoch, execlog::type_byte(e.payload()),
                   e.payload().size());
        return;
    }
    fmt::print(out, "R {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} ", e.sequence, e.epoch,
               static_cast<int>(r.type), static_cast<int>(r.side), static_cast<int>(r.ord_type),
               static_cast<int>(r.tif), r.instrument, static_cast<int>(r.reason), r.time_ns,
               r.order_id, r.request_id, r.orig_request_id, r.account, r.order_qty, r.price);
    fmt::print(out, "{} {} {} {} {} {} {} {} {} {}\n", r.last_qty, r.leaves, r.cum, r.maker_account,
               r.maker_order_id, r.maker_request_id, r.maker_leaves, r.maker_cum, r.notional,
               r.maker_notional);
}

int run(int argc, char** argv) {
    CLI::App app{"", kTool};
    prizma::tools::init(app, "execlog-dump JOURNAL_DIR [--from SEQ] [--check] [--quiet]",
                        "An execlog-archiver journal as text, one line per entry.");
    std::string dir;
    std::uint64_t from = 0;
    bool check = false;
    bool quiet = false;
    app.add_option("journal", dir, "The archiver's journal directory")->required();
    app.add_option("--from", from, "First sequence (default: the journal's first)")
        ->check(prizma::tools::whole());
    app.add_flag("--check", check, "Exit 1 unless contiguous from the first entry with no loss");
    app.add_flag("--quiet", quiet, "Print the summary only");
    if (const int rc = prizma::tools::parse(app, argc, argv); rc >= 0) {
        return rc;
    }
    auto reader = prizma::JournalReader::open(dir, from);
    if (!reader) {
        fmt::print(stderr, "{}: {}: {}\n", kTool, dir, reader.error().message());
        return 1;
    }
    const std::uint64_t first = reader->position();
    std::uint64_t expect = first;
    std::uint64_t records = 0;
    std::uint64_t losses = 0;
    std::uint64_t unknown = 0;
    std::uint64_t breaks = 0;
    prizma::JournalEntry e;
    for (;;) {
        auto r = reader->next(e);
        if (!r) {
            fmt::print(stderr, "{}: {}: at {}: {}\n", kTool, dir, reader->position(),
                       r.error().message());
            return 1;
        }
        if (!*r) {
            break;
        }
        breaks += e.sequence != expect && e.kind != prizma::StreamEventKind::reset ? 1U : 0U;
        switch (e.kind) {
            case prizma::StreamEventKind::record:
                ++records;
                expect = e.sequence + 1;
                unknown += execlog::type_byte(e.payload()) > execlog::kMaxRecordType ? 1U : 0U;
                if (!quiet) {
                    print_record(stdout, e);
                }
                break;
            case prizma::StreamEventKind::loss:
                ++losses;
                expect = e.sequence + e.count;
                if (!quiet) {
                    fmt::print("L {} {}\n", e.sequence, e.count);
                }
                break;
            default:
                expect = e.sequence;
                if (!quiet) {
                    fmt::print("E {} {}\n", e.sequence, e.epoch);
                }
                break;
        }
    }
    fmt::print(stderr,
               "{}: records [{}, {}): {} records, {} loss entries, {} breaks, {} unknown types\n",
               kTool, first, expect, records, losses, breaks, unknown);
    return check && (losses != 0 || breaks != 0) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main(kTool, run, argc, argv);
}

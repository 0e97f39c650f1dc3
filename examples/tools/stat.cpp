// SPDX-License-Identifier: Apache-2.0
// prizma-stat: the counters of running prizma processes, read from outside through the
// shared-memory file each Context keeps (see Context::stats_file()), like AeronStat.
//
//   prizma-stat [--once] [--interval SECONDS] [--dir DIR] [--pid PID] [--all] [--clean]
//
// Live (default): redraws every --interval (1 s) with per-second rates; --once prints one
// snapshot. Per channel (publisher or subscriber, its URI): NAK, NCF, RDATA, loss,
// back-pressure and every other non-zero counter, the transport's own counters included.
// Files of processes that have exited are skipped (--all shows them, --clean removes them).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "examples/tools/tool_util.hpp"
#include "lib/pubsub/stats_file.hpp"

namespace {

std::atomic<bool> g_stop{false};

void usage(std::FILE* to) {
    fmt::print(to,
               "usage: prizma-stat [--once] [--interval SECONDS] [--dir DIR] [--pid PID] [--all]\n"
               "                   [--clean]\n"
               "  Prints the counters of running prizma processes from their stats files\n"
               "  (default dir: $PRIZMA_STATS_DIR or /dev/shm/prizma). Live unless --once;\n"
               "  --all includes exited processes' files, --clean deletes those files.\n");
}

bool alive(std::uint64_t pid) {
    return std::filesystem::exists("/proc/" + std::to_string(pid));
}

std::string comm_of(std::uint64_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(f, s);
    return s.empty() ? "?" : s;
}

struct Options {
    bool once = false;
    double interval = 1.0;
    std::string dir;
    std::uint64_t pid = 0;
    bool all = false;
    bool clean = false;
};

using Previous = std::map<std::string, std::uint64_t>;  // file/channel/counter -> value

/// Prints every matching file once; returns how many processes were shown.
int show(const Options& o, Previous& prev, double since_last_s) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(o.dir, ec)) {
        if (e.path().extension() == ".stats") {
            files.push_back(e.path());
        }
    }
    std::sort(files.begin(), files.end());
    int shown = 0;
    for (const auto& path : files) {
        std::string err;
        auto snap = prizma::stats::read(path.string(), &err);
        if (!snap) {
            fmt::print("{}\n", err);
            continue;
        }
        if (o.pid != 0 && snap->pid != o.pid) {
            continue;
        }
        const bool live = alive(snap->pid);
        if (!live) {
            if (o.clean) {
                std::filesystem::remove(path, ec);
                fmt::print("removed {} (pid {} has exited)\n", path.string(), snap->pid);
                continue;
            }
            if (!o.all) {
                continue;
            }
        }
        ++shown;
        const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
        fmt::print("pid {} ({}){}  {}  updated {:.2f} s ago\n", snap->pid,
                   live ? comm_of(snap->pid) : "exited", live ? "" : " [stale]", path.string(),
                   static_cast<double>(now - snap->updated_unix_ns) / 1e9);
        for (const auto& ch : snap->channels) {
            fmt::print("  {} {}\n", ch.publisher ? "publisher " : "subscriber", ch.uri);
            int col = 0;
            for (const auto& [name, value] : ch.counters) {
                const std::string key = path.string() + "|" + ch.uri + "|" + name;
                std::string rate;
                if (auto it = prev.find(key); it != prev.end() && since_last_s > 0) {
                    const auto d = static_cast<double>(value - it->second) / since_last_s;
                    if (d > 0) {
                        rate = fmt::format(" (+{:.0f}/s)", d);
                    }
                }
                prev[key] = value;
                if (value == 0) {
                    continue;
                }
                fmt::print("{}{:>22} {:<14}", col == 0 ? "   " : "", name,
                           fmt::format("{}{}", value, rate));
                if (++col == 3) {
                    fmt::print("\n");
                    col = 0;
                }
            }
            if (col != 0) {
                fmt::print("\n");
            }
            for (const auto& src : ch.sources) {
                fmt::print("    source {}:", src.tsi);
                for (const auto& [name, value] : src.counters) {
                    if (value != 0) {
                        fmt::print(" {} {}", name, value);
                    }
                }
                fmt::print("\n");
            }
            if (ch.sources_not_shown != 0) {
                fmt::print("    ... and {} more sources\n", ch.sources_not_shown);
            }
        }
        if (snap->channels_not_shown != 0) {
            fmt::print("  ... and {} more channels not in the file\n", snap->channels_not_shown);
        }
    }
    return shown;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    o.dir = prizma::stats::default_dir();
    const std::vector<std::string_view> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--help" || args[i] == "-h") {
            usage(stdout);
            return 0;
        }
        if (args[i] == "--once") {
            o.once = true;
        } else if (args[i] == "--all") {
            o.all = true;
        } else if (args[i] == "--clean") {
            o.clean = true;
        } else if (args[i] == "--dir" && has_value) {
            o.dir = args[++i];
        } else if (args[i] == "--pid" && has_value && prizma::tools::parse_u64(args[i + 1], o.pid)
                   && o.pid != 0) {
            ++i;
        } else if (args[i] == "--interval" && has_value
                   && prizma::tools::parse_double(args[i + 1], o.interval) && o.interval >= 0.05) {
            ++i;
        } else {
            fmt::print(stderr, "prizma-stat: bad or incomplete argument '{}'\n", args[i]);
            usage(stderr);
            return 2;
        }
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(o.dir, ec)) {
        fmt::print(stderr,
                   "prizma-stat: no stats directory {} (no prizma process has run with "
                   "stats here; see PRIZMA_STATS_DIR)\n",
                   o.dir);
        return 1;
    }
    Previous prev;
    if (o.once || o.clean) {
        const int n = show(o, prev, 0);
        if (n == 0 && !o.clean) {
            fmt::print(stderr, "prizma-stat: no {}prizma process found in {}\n",
                       o.pid != 0 ? fmt::format("running pid {} ", o.pid) : "running ", o.dir);
            return 1;
        }
        return 0;
    }
    (void)std::signal(SIGINT, [](int) { g_stop = true; });
    (void)std::signal(SIGTERM, [](int) { g_stop = true; });
    auto last = std::chrono::steady_clock::now();
    bool first = true;
    while (!g_stop) {
        const auto now = std::chrono::steady_clock::now();
        fmt::print("\033[H\033[2J");
        const int n =
            show(o, prev, first ? 0.0 : std::chrono::duration<double>(now - last).count());
        if (n == 0) {
            fmt::print("no running prizma process in {}\n", o.dir);
        }
        std::fflush(stdout);
        first = false;
        last = now;
        std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
    }
    return 0;
}

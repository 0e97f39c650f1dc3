// SPDX-License-Identifier: Apache-2.0
// prizma-stat: the counters of running prizma processes, read from outside through the
// shared-memory file each Context keeps (see Context::stats_file()), like AeronStat. Uses the
// public reader, <prizma/stats.hpp>, only.
//
//   prizma-stat [--once] [--interval SECONDS] [--dir DIR] [--pid PID] [--all] [--clean]
//               [--json]
//
// Live (default): redraws every --interval (1 s) with per-second rates; --once prints one
// snapshot. Per channel (publisher or subscriber, its URI): NAK, NCF, RDATA, loss,
// back-pressure and every other non-zero counter, the transport's own counters included.
// Files of processes that have exited are skipped (--all shows them, --clean removes them).
// --json: the same as one JSON document (live: one document per line and interval).
//
// Default directories: $PRIZMA_STATS_DIR, or every /dev/shm/prizma-<uid> this user may read
// (its own; root: every user's). What a file says is its owner's word: strings are printed
// through stats::printable() (no terminal escape sequences), and a pid that runs as another
// user than the file's owner is not taken for its writer ("suspicious", like an exited one).
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <prizma/stats.hpp>

#include "cli.hpp"
#include "tool_util.hpp"

namespace {

std::string comm_of(std::uint64_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(f, s);
    return s.empty() ? "?" : s;
}

std::int64_t unix_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

using prizma::stats::printable;
using prizma::stats::ProcessState;

struct Options {
    bool once = false;
    double interval = 1.0;
    std::string dir;                ///< --dir, or the default directory (for messages)
    std::vector<std::string> dirs;  ///< the directories read
    std::uint64_t pid = 0;
    bool all = false;
    bool clean = false;
    bool json = false;
};

/// One stats file to show.
struct Process {
    std::string file;
    prizma::stats::Snapshot snap;
    bool running = false;
    std::string command;  ///< /proc/PID/comm while running
};

/// Why a file's process is not shown as running.
std::string not_running(const prizma::stats::Snapshot& s) {
    return s.process == ProcessState::exited
               ? fmt::format("pid {} has exited", s.pid)
               : fmt::format(
                   "pid {} runs as another user than the file's owner, uid {}: not "
                   "its writer",
                   s.pid, s.file_uid);
}

const char* state_name(ProcessState s) {
    switch (s) {
        case ProcessState::running: return "running";
        case ProcessState::exited: return "exited";
        case ProcessState::other_user: return "other_user";
    }
    return "?";
}

/// What one look at the directory found.
struct Scan {
    std::vector<Process> shown;
    std::vector<std::pair<std::string, std::string>> errors;  ///< file, what is wrong
    std::vector<std::string> removed;                         ///< by --clean
};

/// Reads one stats file into `out` if --pid/--all select it; --clean removes it if its
/// process is not running (exited, or its pid is another user's).
void scan_file(const Options& o, const std::string& path, Scan& out) {
    auto snap = prizma::stats::read(path);
    if (!snap) {
        out.errors.emplace_back(path, snap.error().message());
        return;
    }
    if (o.pid != 0 && snap->pid != o.pid) {
        return;
    }
    const bool running = snap->process == ProcessState::running;
    if (!running) {
        if (o.clean) {
            std::error_code ec;
            std::filesystem::remove(path, ec);
            out.removed.push_back(fmt::format("removed {} ({})", path, not_running(*snap)));
            return;
        }
        if (!o.all) {
            return;
        }
    }
    std::string command = running ? comm_of(snap->pid) : "";
    out.shown.push_back(Process{path, std::move(*snap), running, std::move(command)});
}

/// Reads every stats file of the directories.
Scan scan(const Options& o) {
    Scan out;
    for (const auto& dir : o.dirs) {
        auto files = prizma::stats::list_files(dir);
        if (!files) {
            out.errors.emplace_back(dir, files.error().message());
            continue;
        }
        for (const auto& path : *files) {
            scan_file(o, path, out);
        }
    }
    return out;
}

using Previous = std::map<std::string, std::uint64_t>;  // file/channel/counter -> value

void print_text(const Scan& s, Previous& prev, double since_last_s) {
    for (const auto& [file, error] : s.errors) {
        fmt::print("{}\n", printable(error));
    }
    for (const auto& line : s.removed) {
        fmt::print("{}\n", printable(line));
    }
    const std::int64_t now = unix_now_ns();
    for (const auto& p : s.shown) {
        fmt::print("pid {} ({}){}  {}  updated {:.2f} s ago\n", p.snap.pid,
                   p.running ? printable(p.command) : not_running(p.snap),
                   p.running                                    ? ""
                   : p.snap.process == ProcessState::other_user ? " [suspicious]"
                                                                : " [stale]",
                   printable(p.file), static_cast<double>(now - p.snap.updated_unix_ns) / 1e9);
        for (const auto& ch : p.snap.channels) {
            fmt::print("  {} {}\n", ch.publisher ? "publisher " : "subscriber", printable(ch.uri));
            if (!ch.transport.empty()) {
                fmt::print("    transport: {}\n", printable(ch.transport));
            }
            int col = 0;
            for (const auto& [name, value] : ch.counters) {
                const std::string key = p.file + "|" + ch.uri + "|" + name;
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
                fmt::print("{}{:>22} {:<14}", col == 0 ? "   " : "", printable(name),
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
                // A publisher's rows are its flow-control receivers: every field shown.
                if (ch.publisher) {
                    fmt::print("    receiver:");
                } else {
                    fmt::print("    source {}:", printable(src.tsi));
                }
                for (const auto& [name, value] : src.counters) {
                    if (value != 0 || ch.publisher) {
                        fmt::print(" {} {}", printable(name), value);
                    }
                }
                fmt::print("\n");
            }
            if (ch.sources_not_shown != 0) {
                fmt::print("    ... and {} more {}\n", ch.sources_not_shown,
                           ch.publisher ? "receivers" : "sources");
            }
        }
        if (p.snap.channels_not_shown != 0) {
            fmt::print("  ... and {} more channels not in the file\n", p.snap.channels_not_shown);
        }
    }
}

/// {"name": value, ...}, zeros included.
prizma::tools::Json json_counters(
    const std::vector<std::pair<std::string, std::uint64_t>>& counters) {
    auto out = prizma::tools::Json::object();
    for (const auto& [name, value] : counters) {
        out[name] = value;
    }
    return out;
}

/// The scan as one JSON document on one line.
void print_json(const Options& o, const Scan& s) {
    using prizma::tools::Json;
    const std::int64_t now = unix_now_ns();
    Json doc = {{"dir", o.dir}, {"dirs", o.dirs}};
    Json& processes = doc["processes"] = Json::array();
    for (const Process& p : s.shown) {
        // Seconds with three decimals, as before the JSON library.
        const double ago =
            std::round(static_cast<double>(now - p.snap.updated_unix_ns) / 1e6) / 1e3;
        Json proc = {{"pid", p.snap.pid},
                     {"command", p.running ? Json(p.command) : Json(nullptr)},
                     {"running", p.running},
                     {"state", state_name(p.snap.process)},
                     {"file_uid", p.snap.file_uid},
                     {"file", p.file},
                     {"updated_unix_ns", p.snap.updated_unix_ns},
                     {"updated_s_ago", ago},
                     {"updates", p.snap.updates}};
        Json& channels = proc["channels"] = Json::array();
        for (const auto& ch : p.snap.channels) {
            Json channel = {{"uri", ch.uri},
                            {"role", ch.publisher ? "publisher" : "subscriber"},
                            {"transport", ch.transport},
                            {"counters", json_counters(ch.counters)}};
            Json& sources = channel["sources"] = Json::array();
            for (const auto& src : ch.sources) {
                sources.push_back({{"tsi", src.tsi}, {"counters", json_counters(src.counters)}});
            }
            channel["sources_not_shown"] = ch.sources_not_shown;
            channels.push_back(std::move(channel));
        }
        proc["channels_not_shown"] = p.snap.channels_not_shown;
        processes.push_back(std::move(proc));
    }
    doc["removed"] = s.removed;
    Json& errors = doc["errors"] = Json::array();
    for (const auto& [file, error] : s.errors) {
        errors.push_back({{"file", file}, {"error", error}});
    }
    const std::string out = prizma::tools::json_text(doc) + "\n";
    (void)std::fputs(out.c_str(), stdout);  // write errors are not reported
}

/// Reads the command line into `o`. Returns -1 to go on, or the exit code (cli.hpp's parse()).
int parse_args(int argc, char** argv, Options& o) {
    CLI::App app{"", "prizma-stat"};
    prizma::tools::init(
        app,
        "prizma-stat [--once] [--interval SECONDS] [--dir DIR] [--pid PID] [--all]\n"
        "                   [--clean] [--json]",
        "Prints the counters of running prizma processes from their stats files (every\n"
        "Context keeps one; PRIZMA_STATS=0 turns it off). Live unless --once.",
        "Per process: its channels (publisher or subscriber, URI), every non-zero counter\n"
        "(live: with its rate per second), the transport's own counters and each source's.\n"
        "--json prints one JSON object on one line instead (live: one per --interval):\n"
        "  {\"dir\", \"processes\": [{\"pid\", \"command\", \"running\", \"file\",\n"
        "   \"updated_unix_ns\", \"updated_s_ago\", \"updates\", \"channels\": [{\"uri\", "
        "\"role\", \"transport\",\n"
        "   \"counters\": {NAME: VALUE}, \"sources\": [{\"tsi\", \"counters\"}],\n"
        "   \"sources_not_shown\"}], \"channels_not_shown\"}], \"removed\": [TEXT],\n"
        "   \"errors\": [{\"file\", \"error\"}]}\n"
        "with every counter, zeros included (\"state\": running, exited, or other_user: the\n"
        "pid runs as another user than the file's owner, not its writer). Text output\n"
        "shows bytes that are not printable ASCII as \\xNN. --once exits 1 when no process\n"
        "is found.");
    app.add_flag("--once", o.once,
                 "Print one snapshot and exit (default: redraw every --interval)");
    app.add_option("--interval", o.interval,
                   "Seconds between two updates (redraws or JSON lines), >= 0.05\n(default 1)")
        ->type_name("SECONDS")
        ->check(prizma::tools::at_least(0.05));
    auto* dir = app.add_option("--dir", o.dir,
                               "Directory of the stats files (default: $PRIZMA_STATS_DIR, or\n"
                               "every /dev/shm/prizma-UID this user can read: its own; root:\n"
                               "every user's)")
                    ->type_name("DIR");
    app.add_option("--pid", o.pid, "Only this process (default: every one)")
        ->type_name("PID")
        ->check(prizma::tools::whole(1));
    app.add_flag("--all", o.all, "Include the files of processes that have exited (stale)");
    app.add_flag("--clean", o.clean,
                 "Delete the files of processes that have exited, print the others\n"
                 "once and exit");
    app.add_flag("--json", o.json, "Print JSON (the layout below) instead of text");
    const int rc = prizma::tools::parse(app, argc, argv);
    if (dir->count() != 0) {
        o.dirs = {o.dir};
    } else {
        o.dir = prizma::stats::default_dir();
        o.dirs = prizma::stats::readable_dirs();
    }
    return rc;
}

/// The directories read, for messages.
std::string dirs_text(const Options& o) {
    std::string out;
    for (const auto& d : o.dirs) {
        out += (out.empty() ? "" : ", ") + d;
    }
    return out.empty() ? o.dir : out;
}

/// False, with the reason on stderr, when no stats directory can be listed.
bool dir_readable(const Options& o) {
    std::optional<prizma::Error> error;
    for (const auto& dir : o.dirs) {
        auto files = prizma::stats::list_files(dir);
        if (files) {
            return true;
        }
        error = files.error();
    }
    if (!error || *error == std::errc::no_such_file_or_directory) {
        fmt::print(stderr,
                   "prizma-stat: no stats directory {} (no prizma process has run with "
                   "stats here; see PRIZMA_STATS_DIR)\n",
                   printable(o.dir));
    } else {
        fmt::print(stderr, "prizma-stat: {}\n", printable(error->message()));
    }
    return false;
}

/// --once or --clean: one snapshot. Returns the exit code: 1 when --once found no process.
int show_once(const Options& o) {
    Previous prev;
    const Scan s = scan(o);
    if (o.json) {
        print_json(o, s);
    } else {
        print_text(s, prev, 0);
    }
    if (s.shown.empty() && !o.clean) {
        fmt::print(stderr, "prizma-stat: no {}prizma process found in {}\n",
                   o.pid != 0 ? fmt::format("running pid {} ", o.pid) : "running ",
                   printable(dirs_text(o)));
        return 1;
    }
    return 0;
}

/// Live: a snapshot every --interval (text redrawn with rates, or one JSON line) until
/// SIGINT/SIGTERM.
void show_live(const Options& o) {
    prizma::tools::stop_on_signals();
    Previous prev;
    auto last = std::chrono::steady_clock::now();
    bool first = true;
    while (!prizma::tools::stop_requested()) {
        const auto now = std::chrono::steady_clock::now();
        const Scan s = scan(o);
        if (o.json) {
            print_json(o, s);
        } else {
            fmt::print("\033[H\033[2J");
            print_text(s, prev, first ? 0.0 : std::chrono::duration<double>(now - last).count());
            if (s.shown.empty()) {
                fmt::print("no running prizma process in {}\n", printable(dirs_text(o)));
            }
        }
        (void)std::fflush(stdout);  // write errors are not reported
        first = false;
        last = now;
        std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
    }
}

int run(int argc, char** argv) {
    Options o;
    if (const int rc = parse_args(argc, argv, o); rc >= 0) {
        return rc;
    }
    if (!dir_readable(o)) {
        return 1;
    }
    if (o.once || o.clean) {
        return show_once(o);
    }
    show_live(o);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return prizma::tools::guarded_main("prizma-stat", run, argc, argv);
}

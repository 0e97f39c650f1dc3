// SPDX-License-Identifier: Apache-2.0
// The command-line tools' CLI11 set-up, the same for every tool: -h/--help (exit 0), --version
// ("prizma-send 0.2.0"), a usage error on stderr with exit code 2, and number checks stricter
// than CLI11's own conversions.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

// CLI11's string helpers, inlined at -O2, trip GCC 12's -Wnull-dereference inside libstdc++
// (a false positive that the system-header exemption misses): silenced for CLI11's code only.
// The tools take CLI11 from here, never directly, so that this applies.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop
#include <optional>

#include <fmt/core.h>

#include <prizma/context.hpp>
#include <prizma/options.hpp>
#include <prizma/version.hpp>

namespace prizma::tools {

/// CLI11's help layout, led by the tool's own synopsis (which flags are required, where the
/// positional arguments go) instead of CLI11's generic "[OPTIONS] URI".
class HelpFormatter final : public CLI::Formatter {
public:
    explicit HelpFormatter(std::string synopsis) : synopsis_(std::move(synopsis)) {
        column_width(30);
    }
    std::string make_usage(const CLI::App* /*app*/, std::string /*name*/) const override {
        return "usage: " + synopsis_ + "\n";
    }
    std::string make_help(const CLI::App* app,
                          std::string name,
                          CLI::AppFormatMode mode) const override {
        std::string out = make_usage(app, std::move(name));
        if (!app->get_description().empty()) {
            out += app->get_description() + "\n";
        }
        out += make_positionals(app);
        out += make_groups(app, mode);
        if (!app->get_footer().empty()) {
            out += "\n" + make_footer(app);
        }
        // CLI11 puts two blank lines between option groups: one is enough.
        for (std::size_t at = out.find("\n\n\n"); at != std::string::npos;
             at = out.find("\n\n\n", at)) {
            out.erase(at, 1);
        }
        return out;
    }

private:
    std::string synopsis_;
};

/// Sets up `app` (named after the tool): the synopsis printed first in --help and with every
/// usage error, the description under it, the closing notes after the options; --version.
inline void init(CLI::App& app,
                 std::string synopsis,
                 std::string description,
                 std::string notes = {}) {
    app.formatter(std::make_shared<HelpFormatter>(std::move(synopsis)));
    app.description(std::move(description));
    if (!notes.empty()) {
        app.footer(std::move(notes));
    }
    app.set_help_flag("-h,--help", "Print this help and exit");
    app.set_version_flag("--version", app.get_name() + " " + prizma::version_string(),
                         "Print the version and exit");
}

/// Parses the command line. Returns -1 to go on, or the exit code: 0 after --help or --version
/// (printed on stdout), 2 after a usage error (the error and the synopsis on stderr).
inline int parse(CLI::App& app, int argc, const char* const* argv) {
    try {
        app.parse(argc, argv);
        return -1;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
            return app.exit(e);
        }
        const auto f = std::dynamic_pointer_cast<CLI::Formatter>(app.get_formatter());
        fmt::print(stderr, "{}: {}\n{}Run '{} --help' for every option.\n", app.get_name(),
                   e.what(), f != nullptr ? f->make_usage(&app, app.get_name()) : "",
                   app.get_name());
        return 2;
    }
}

/// A whole non-negative decimal number in [min, max], nothing else: CLI11 2.1.2 converts
/// unsigned options with strtoull(base 0), which takes "-1" as 2^64 - 1, "010" as octal and
/// "0x10" as hex. Leaves the canonical digits for CLI11 to convert.
inline CLI::Validator whole(std::uint64_t min = 0,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    return CLI::Validator(
        [min, max](std::string& s) -> std::string {
            std::uint64_t v = 0;
            const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc{} || end != s.data() + s.size() || v < min || v > max) {
                if (max == std::numeric_limits<std::uint64_t>::max()) {
                    return fmt::format("'{}' is not a whole number >= {}", s, min);
                }
                return fmt::format("'{}' is not a whole number in [{}, {}]", s, min, max);
            }
            s = std::to_string(v);
            return {};
        },
        "");
}

/// Where a real number must lie: `min` and `max` included or not.
struct Interval {
    double min = 0;
    bool min_open = false;
    double max = std::numeric_limits<double>::infinity();
    bool max_open = true;
};

/// A finite real number in `r` (CLI11 alone also takes "inf", "nan" and negative numbers).
inline CLI::Validator real(Interval r) {
    auto check = [r](std::string& s) -> std::string {
        double v = 0;
        const bool number = CLI::detail::lexical_cast(s, v) && std::isfinite(v);
        const bool low = r.min_open ? v <= r.min : v < r.min;
        const bool high = r.max_open ? v >= r.max : v > r.max;
        if (!number || low || high) {
            if (std::isinf(r.max)) {
                return fmt::format("'{}' is not a number {} {}", s, r.min_open ? ">" : ">=", r.min);
            }
            return fmt::format("'{}' is not a number in {}{}, {}{}", s, r.min_open ? '(' : '[',
                               r.min, r.max, r.max_open ? ')' : ']');
        }
        return {};
    };
    return {check, ""};
}

/// A real number >= min.
inline CLI::Validator at_least(double min) {
    return real(Interval{min, false});
}

/// A real number > min.
inline CLI::Validator above(double min) {
    return real(Interval{min, true});
}

/// One of the words listed (the help shows them as the option's value: "spin|block").
inline CLI::Validator one_of(std::vector<std::string> words) {
    return CLI::IsMember(std::move(words)).description("");
}

/// A tool's main(): run(argc, argv), with anything thrown printed as "TOOL: error: WHAT" and
/// exit code 1 (std::fprintf, not fmt::print: nothing may throw out of here).
template <typename Run>
int guarded_main(const char* tool, Run run, int argc, char** argv) noexcept {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        (void)std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    } catch (...) {
        (void)std::fprintf(stderr, "%s: error: unknown exception\n", tool);
    }
    return 1;
}

/// --preset wan|lan|rdma into ChannelOptions::preset.
inline CLI::Option* add_preset(CLI::App& app, ChannelOptions& opts) {
    return app
        .add_option_function<std::string>(
            "--preset",
            [&opts](const std::string& v) {
                opts.preset = parse_timer_preset(v).value_or(TimerPreset::lan);
            },
            "Timer preset (default lan)")
        ->type_name("wan|lan|rdma")
        ->check(one_of({"wan", "lan", "rdma"}));
}

/// --window PACKETS: ChannelOptions::window_sqns (transmit or receive window).
inline CLI::Option* add_window(CLI::App& app, ChannelOptions& opts) {
    return app.add_option("--window", opts.window_sqns, "Window, packets (default 65536)")
        ->type_name("PACKETS")
        ->check(CLI::Range(1U, 1U << 24U));
}

/// The tools' Context: made, or the reason printed ("prizma-send: ...") and nullopt. A stats
/// file that could not be made is a warning (the tool runs on; prizma-stat cannot see it).
inline std::optional<Context> make_context(const char* tool) {
    auto ctx = Context::create();
    if (!ctx) {
        fmt::print(stderr, "{}: {}\n", tool, ctx.error().message());
        return std::nullopt;
    }
    if (!ctx->stats_error().empty()) {
        fmt::print(stderr, "{}: warning: no stats file: {}\n", tool, ctx->stats_error());
    }
    return std::move(*ctx);
}

}  // namespace prizma::tools

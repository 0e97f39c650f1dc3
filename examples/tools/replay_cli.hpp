// SPDX-License-Identifier: Apache-2.0
// The replay service's protection on the command line, the same in every program that serves
// or reads a journal (docs/STREAMS.md, "Protecting the replay service"): --replay-key-file
// (TLS 1.3 with keys from a key file: the channel's own, or one for the replay alone),
// --replay-cert/--replay-key/--replay-ca (certificates both ways), --replay-insecure, and on a
// server --replay-allow.
#pragma once

#include <string>
#include <vector>

#include <prizma/replay.hpp>

#include "cli.hpp"

namespace prizma::tools {

struct ReplaySecurityArgs {
    std::string key_file;
    std::string cert;
    std::string key;
    std::string ca;
    std::string server_name;
    std::vector<std::string> allow;
    bool insecure = false;
};

inline void add_replay_security_options(CLI::App& app, ReplaySecurityArgs& a, bool server) {
    app.add_option("--replay-key-file", a.key_file,
                   "Protect the replay with TLS 1.3 and keys from this key file (ID HEX lines, "
                   "mode 0600: the channel's key_file= or one of its own)");
    app.add_option("--replay-cert", a.cert, "Or certificates: this end's certificate (PEM)");
    app.add_option("--replay-key", a.key, "... its private key (PEM)");
    app.add_option("--replay-ca", a.ca, "... and the CA the other end's certificate chains to");
    if (server) {
        app.add_option("--replay-allow", a.allow,
                       "Client addresses allowed (CIDR, repeatable; default any)");
    } else {
        app.add_option("--replay-server-name", a.server_name,
                       "The name the server's certificate carries (default its address)");
    }
    app.add_flag("--replay-insecure", a.insecure,
                 "Allow a plaintext replay off loopback: anyone on the network can read the "
                 "journal and forge records");
}

/// The ReplaySecurity the options describe. Errors: an unreadable key file.
inline Result<ReplaySecurity, Error> replay_security(const ReplaySecurityArgs& a) {
    ReplaySecurity s;
    if (!a.key_file.empty()) {
        auto keys = read_key_file(a.key_file);
        if (!keys) {
            return keys.error();
        }
        s.keys = std::move(*keys);
    }
    s.certificate_file = a.cert;
    s.private_key_file = a.key;
    s.ca_file = a.ca;
    s.server_name = a.server_name;
    s.insecure = a.insecure;
    return s;
}

}  // namespace prizma::tools

// SPDX-License-Identifier: Apache-2.0
// prizma::prizma: the public API with every transport this build has.
#include <prizma/context.hpp>
#include <prizma/transport_registry.hpp>

namespace prizma {

#if !PRIZMA_HAVE_VERBS
namespace verbs {
void register_transport(TransportRegistry& registry) {
    (void)registry.replace("verbs", [](const TransportRequest&) -> Result<TransportChannel, Error> {
        return Error(Errc::unsupported,
                     "this build of prizma has no verbs transport (libibverbs-dev and "
                     "libibumad-dev were missing at build time)");
    });
}
}  // namespace verbs
#endif

void register_builtin_transports(TransportRegistry& registry) {
    udp::register_transport(registry);
    verbs::register_transport(registry);
    memory::register_transport(registry);
    memory::add_fault_injection(registry);  // loss=, tx_loss=, seed= on every built-in scheme
}

Result<Context, Error> Context::create() {
    TransportRegistry registry;
    register_builtin_transports(registry);
    return create(std::move(registry));
}

}  // namespace prizma

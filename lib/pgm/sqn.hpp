// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <prizma/sqn.hpp>

namespace prizma::pgm {

// The codec and the protocol core use the public sequence-number type and its serial
// arithmetic (<prizma/sqn.hpp>).
using prizma::distance;
using prizma::precedes;
using prizma::precedes_or_equal;
using prizma::span_count;
using prizma::Sqn;

}  // namespace prizma::pgm

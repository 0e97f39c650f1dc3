// SPDX-License-Identifier: Apache-2.0
// Moved to lib/streams/recorder_format.hpp (issue 33). This forwarding header stays until
// lib/replay/*.cpp and tests/unit/replay_security_test.cpp include the new path; new code
// includes "lib/streams/recorder_format.hpp".
#pragma once

#include "lib/streams/recorder_format.hpp"

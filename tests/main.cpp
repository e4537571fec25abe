// Catch2 entry point for the whole suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "libgenesis/core/threads.h"

// The same OpenMP wait policy as the genesis CLI (libgenesis/core/threads.h; test_threads.cpp).
GENESIS_PREINIT;

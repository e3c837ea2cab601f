// main.cpp — Catch2 entry point for the core unit tests (one binary, every TEST_CASE a ctest test).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

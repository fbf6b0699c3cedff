#include <gtest/gtest.h>

#include "text/unicode.hpp"

TEST(Unicode, Placeholder) { EXPECT_EQ(yeto::text::utf8_encode(yeto::text::nfc(yeto::text::utf8_decode("e\xcc\x81"))), "\xc3\xa9"); }

// Small string helpers used for user-facing messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace yeto {

// Edit distance (insert, delete, substitute, adjacent swap) between two strings.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a plausible typo; "" if none.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// ", did you mean 'x'?" or "" when nothing is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool starts_with(std::string_view s, std::string_view prefix);

}  // namespace yeto
